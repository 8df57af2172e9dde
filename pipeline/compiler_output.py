"""What the compiler says: nvcc's first error, the ptxas resource report, region-relative diagnostics.

Why a module of its own: :mod:`pipeline.build` runs the compiler; reading its
output is a separate job with its own formats (``-Xptxas=-v`` report lines, the
``file(12): error`` locations of nvcc/EDG and gcc), and extract's compile check,
the coverage sweep and the repair prompts all read it the same way through the
functions here.

What must stay true: every function is pure text in, records or text out; an
unexpected or truncated report loses a kernel's record rather than inventing one;
:func:`first_error` is the one quoting of a failed build.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from pipeline.records import KernelResources, Span

_PTXAS_ENTRY = re.compile(r"ptxas\s+info\s*:\s*Compiling entry function '(?P<name>[^']+)' for '(?P<arch>[^']+)'")
_PTXAS_PROPS = re.compile(r"ptxas\s+info\s*:\s*Function properties for (?P<name>\S+)")
_PTXAS_FRAME = re.compile(
    r"^\s*(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, (?P<loads>\d+) bytes spill loads"
)
_PTXAS_USED = re.compile(r"ptxas\s+info\s*:\s*Used (?P<regs>\d+) registers(?P<rest>.*)")
_PTXAS_BARRIERS = re.compile(r"used (\d+) barriers")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")
_PTXAS_CMEM0 = re.compile(r"(\d+) bytes cmem\[0\]")


def first_error(stderr: str) -> str:
    """The line of a failed build's output that says why (300 characters at most).

    nvcc's first ``error`` line (not its closing "N errors detected" count), else its
    first ``fatal`` line (an unknown option, a missing host compiler), else the first
    line there is. One function, so extract's compile check and the coverage sweep
    quote the same line of the same failure.
    """
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for word in ("error", "fatal"):
        for line in lines:
            low = line.lower()
            if word in low and "errors detected" not in low:
                return line[:300]
    return (lines[0] if lines else "failed")[:300]


def parse_ptxas(text: str) -> list[KernelResources]:
    """Per-kernel resources from a ``-Xptxas=-v`` report, in report order.

    Only entry functions (``Compiling entry function``) become records; the
    ``Function properties`` of non-inlined device functions are ignored. Stack and
    spill figures come from the kernel's own ``Function properties`` block wherever
    it appears; registers, barriers, smem and ``cmem[0]`` (the kernel's own
    constant bank: parameters and compiler constants) from its ``Used`` line. A
    kernel whose ``Used`` line is missing (truncated output) is left out rather
    than reported with made-up zeros.
    """
    frames: dict[str, tuple[int, int, int]] = {}
    used: list[tuple[str, int, int, int, int]] = []
    current: str | None = None
    props_for: str | None = None
    for line in text.splitlines():
        if match := _PTXAS_ENTRY.search(line):
            current = match.group("name")
            props_for = None
        elif match := _PTXAS_PROPS.search(line):
            props_for = match.group("name")
        elif (match := _PTXAS_FRAME.search(line)) and props_for is not None:
            frames[props_for] = (int(match.group("stack")), int(match.group("stores")), int(match.group("loads")))
            props_for = None
        elif (match := _PTXAS_USED.search(line)) and current is not None:
            rest = match.group("rest")
            barriers_match = _PTXAS_BARRIERS.search(rest)
            smem_match = _PTXAS_SMEM.search(rest)
            cmem_match = _PTXAS_CMEM0.search(rest)
            used.append(
                (
                    current,
                    int(match.group("regs")),
                    int(barriers_match.group(1)) if barriers_match else 0,
                    int(smem_match.group(1)) if smem_match else 0,
                    int(cmem_match.group(1)) if cmem_match else 0,
                )
            )
            current = None
    resources = []
    for name, registers, barriers, smem, cmem in used:
        stack, stores, loads = frames.get(name, (0, 0, 0))
        resources.append(
            KernelResources(
                kernel=name,
                registers=registers,
                barriers=barriers,
                smem_bytes=smem,
                cmem_bytes=cmem,
                stack_bytes=stack,
                spill_stores=stores,
                spill_loads=loads,
            )
        )
    return resources


def strip_ptxas(text: str) -> str:
    """Compiler output without the ``ptxas info`` report (kept as ``resources``): what is left are warnings."""
    kept = [
        line
        for line in text.splitlines()
        if not re.match(r"\s*ptxas\s+info\s*:", line) and not _PTXAS_FRAME.match(line)
    ]
    return "\n".join(kept).strip() + ("\n" if any(line.strip() for line in kept) else "")


# --------------------------------------------------------------------------- diagnostics


def relocate_spans(editable: Sequence[Span], regions: Mapping[str, str]) -> list[Span]:
    """Task spans moved to where they sit after ``regions`` (span name -> new text) were spliced in.

    Splicing replaces each named span's bytes with the region's UTF-8 text and
    leaves everything between spans untouched, so a span moves by the growth of
    the spans before it in the same file and ends where its new text ends. Spans
    must not overlap (the splice refuses that too). Order of the input is kept.
    """
    shift: dict[int, Span] = {}
    by_file: dict[str, list[tuple[int, Span]]] = {}
    for index, span in enumerate(editable):
        by_file.setdefault(span.file, []).append((index, span))
    for spans in by_file.values():
        delta = 0
        for index, span in sorted(spans, key=lambda item: item[1].start_byte):
            old_len = span.end_byte - span.start_byte
            new_len = len(regions[span.name].encode()) if span.name in regions else old_len
            start = span.start_byte + delta
            shift[index] = span.model_copy(update={"start_byte": start, "end_byte": start + new_len})
            delta += new_len - old_len
    return [shift[index] for index in range(len(editable))]


_LOCATIONS = (
    re.compile(r"(?P<path>[\w./+-]+\.\w+)\((?P<line>\d+)\)"),  # nvcc/EDG: file(12): error
    re.compile(r"(?P<path>[\w./+-]+\.\w+):(?P<line>\d+)(?::\d+)?:"),  # gcc: file:12:5: error
    re.compile(r"at line (?P<line>\d+) of \"?(?P<path>[\w./+-]+\.\w+)"),  # EDG instantiation context
)


def annotate_diagnostics(
    text: str, files: Mapping[str, bytes], editable: Sequence[Span], overridden: Iterable[str] = ()
) -> str:
    """Append ``[region NAME line K]`` to every message line whose ``path(line)`` falls
    inside an editable span (``K`` counts from the region's first line, 1-based), and
    ``[<path> line N: outside editable regions]`` when spans were given and it points
    elsewhere in an overridden file (the candidate broke code it was not meant to touch).

    ``files`` are the bytes as compiled and ``editable`` spans in those coordinates;
    paths in ``text`` are package-relative (as :func:`build` leaves them).
    """
    overridden = set(overridden)
    ranges: dict[str, list[tuple[int, int, str]]] = {}
    for span in editable:
        data = files.get(span.file)
        if data is None or span.end_byte > len(data) or span.start_byte > span.end_byte:
            continue
        first = data.count(b"\n", 0, span.start_byte) + 1
        last = data.count(b"\n", 0, max(span.start_byte, span.end_byte - 1)) + 1
        ranges.setdefault(span.file, []).append((first, last, span.name))
    if not ranges and not overridden:
        return text
    out = []
    for line in text.splitlines(keepends=True):
        notes: list[str] = []
        for pattern in _LOCATIONS:
            for match in pattern.finditer(line):
                path, number = match.group("path"), int(match.group("line"))
                hits = [
                    f"[region {name} line {number - first + 1}]"
                    for first, last, name in ranges.get(path, ())
                    if first <= number <= last
                ]
                if not hits and editable and path in overridden:
                    hits = [f"[{path} line {number}: outside editable regions]"]
                notes += [note for note in hits if note not in notes]
        if notes:
            body, newline = (line[:-1], "\n") if line.endswith("\n") else (line, "")
            line = f"{body} {' '.join(notes)}{newline}"
        out.append(line)
    return "".join(out)
