"""The compile check of one Triton search point on the CPU: its edited files through ``triton.compile`` for sm_90.

Why: a point the compiler refuses (a block too large for shared memory, a layout a
``num_warps`` cannot tile) should cost a second on the CPU, not a GPU worker. A point's
regions are spliced into a copy of the task's ``src/`` (:func:`extract.splice.apply_regions`),
each edited file must parse (libcst), the edited file is scanned again
(:func:`extract.triton_scan.scan_file`: the launch keywords and configs as edited) and
:func:`extract.triton_compile.compile_task` compiles every launched kernel; where a launch
chooses by token count (a bucketed point) it does so once per token bucket of the task's
shapes, at that bucket's first shape.

Messages speak in the regions' own line numbers (what a coder, the repair agent or an outside
agent, edits): a file that does not parse says which region and line (:func:`standalone_error`: the
changed region that does not parse alone, else :func:`region_line` of the parser's line), and Triton's ``at L:C:`` (L counted from the kernel's ``def``) gains
``[region NAME line N]`` of the kernel's region (:func:`in_region_lines`), as nvcc's errors
are annotated for CUDA (:func:`pipeline.compiler_output.annotate_diagnostics`).

What must stay true: the result is a :class:`PointCheck` with an outcome of the closed set
(``ok``, ``compile_failed`` carrying Triton's own message, ``timeout``), never an exception
for a point the compiler or the parser refuses; the task folder is never written.
"""

from __future__ import annotations

import pathlib
import re
import tempfile
import time
from collections.abc import Mapping

import libcst as cst

from contract.layout import SRC_DIR, baseline_regions, read_task_files
from extract.splice import SpliceError, apply_regions
from extract.triton_compile import compile_task
from extract.triton_scan import scan_file
from optimize.transforms import triton_edits as tt
from pipeline.buckets import BUCKETS, bucket_for
from pipeline.compiler_output import relocate_spans
from pipeline.record_io import Record
from pipeline.records import ShapeCase, Task, TritonLaunch
from pipeline.run_records import Outcome


class PointCheck(Record):
    """One point's compile check: its outcome, the buckets it compiled at and the compiler's text."""

    point: str
    outcome: Outcome  # ok, compile_failed or timeout
    buckets: list[str]  # the token buckets compiled at ("" = the task's first shape)
    stderr: str = ""  # Triton's (or the parser's) message when not ok
    seconds: float = 0.0


def edited_task(task: Task, files: Mapping[str, bytes]) -> Task:
    """``task`` with its kernels' and launches' facts read again from the edited ``files``."""
    assert task.triton is not None
    scanned = {rel: scan_file(rel, data) for rel, data in files.items()}
    kernels = []
    for k in task.triton.kernels:
        fresh = next((n for n in scanned[k.file].kernels if n.name == k.name), None) if k.file in scanned else None
        kernels.append(fresh or k)
    launches: list[TritonLaunch] = []
    for launch in task.triton.launches:
        key = (launch.file, launch.function, launch.kernel)
        nth = sum(
            1
            for l in task.triton.launches
            if (l.file, l.function, l.kernel) == key and l.start_byte < launch.start_byte
        )
        if launch.file not in scanned:
            launches.append(launch)
            continue
        same = [l for l in scanned[launch.file].launches if (l.file, l.function, l.kernel) == key]
        launches.append(same[nth] if nth < len(same) else launch)
    return task.model_copy(update={"triton": task.triton.model_copy(update={"kernels": kernels, "launches": launches})})


def _bucketed(task: Task, regions: Mapping[str, str]) -> bool:
    """Whether a launch region chooses a keyword by token count (an edit with a bucket)."""
    for span in task.editable:
        if span.kind != "launcher" or span.name not in regions:
            continue
        try:
            call = tt.parse_launch(regions[span.name], span.name)
        except tt.TransformError:
            continue
        for arg in call.args:
            tokens = _tokens_in(arg.value) if arg.keyword is not None else ""
            if tokens and tt.split_chain(arg.value, tokens)[0]:
                return True
    return False


def _tokens_in(node: cst.BaseExpression) -> str:
    """The token expression of a bucket chain (the first test's compared operand), "" when not a chain."""
    bare = node.with_changes(lpar=[], rpar=[]) if hasattr(node, "lpar") else node
    if isinstance(bare, cst.IfExp) and isinstance(bare.test, cst.Comparison):
        test = bare.test
        operand = test.left if not isinstance(test.left, cst.Integer) else test.comparisons[0].comparator
        return tt.code(operand)
    return ""


def _cases(task: Task, per_bucket: bool) -> list[tuple[str, list[ShapeCase]]]:
    if not per_bucket:
        return [("", task.shapes[:1])]
    out = []
    for name, _, _ in BUCKETS:
        first = next((c for c in task.shapes if c.tokens is not None and bucket_for(c.tokens) == name), None)
        if first is not None:
            out.append((name, [first]))
    return out or [("", task.shapes[:1])]


def region_line(task: Task, regions: Mapping[str, str], edited: Mapping[str, bytes], rel: str, line: int) -> str:
    """`` [region NAME line N]`` for line ``line`` of the edited file ``rel``, "" when no region holds it."""
    for span in relocate_spans(task.editable, dict(regions)):
        if span.file != rel or rel not in edited:
            continue
        data = edited[rel]
        first = data.count(b"\n", 0, span.start_byte) + 1
        if first <= line <= data.count(b"\n", 0, span.end_byte) + 1:
            return f" [region {span.name} line {line - first + 1}]"
    return ""


def parser_line(err: cst.ParserSyntaxError) -> int:
    """The line libcst's parser names (``parser error: error at L:C``: where the token it could not take
    is), else its ``raw_line`` (which can be the line after, where it gave up)."""
    found = re.search(r"error at (\d+):\d+", str(err))
    return int(found.group(1)) if found else err.raw_line


def standalone_error(task: Task, regions: Mapping[str, str], baseline: Mapping[str, str]) -> str:
    """The first changed region that does not parse on its own (a kernel as a module, a launch as an
    expression), as ``region NAME line N: <libcst's message>``; "" when each parses alone.

    Why: libcst often notices a broken launch only at the next statement of the file (past the region),
    so the region's own parse is what names the line a coder wrote."""

    def parse(kind: str, text: str) -> None:
        cst.parse_expression(text) if kind == "launcher" else cst.parse_module(text)

    for span in task.editable:
        text = regions.get(span.name)
        if text is None or text == baseline.get(span.name):
            continue
        try:
            parse(span.kind, text)
        except cst.ParserSyntaxError as err:
            try:  # a region that cannot stand alone even as the baseline wrote it (a def nested in an `if`)
                parse(span.kind, baseline.get(span.name, ""))
            except cst.ParserSyntaxError:
                continue  # says nothing: the file's own line (region_line) will
            return f"region {span.name} line {parser_line(err)}: does not parse (libcst): {err}"
    return ""


TRITON_AT = re.compile(r"^(?P<kernel>\w+): (?P<kind>\w+): at (?P<line>\d+):(?P<col>\d+):")


def in_region_lines(task: Task, regions: Mapping[str, str], message: str) -> str:
    """Triton's ``<kernel>: <Error>: at L:C:`` with `` [region NAME line N]`` added: L counts from the
    kernel's ``def`` line (its decorators are not in Triton's source), N from the region's first line."""
    match = TRITON_AT.match(message)
    if match is None:
        return message
    kernel = match.group("kernel")
    span = next((s for s in task.editable if s.kind == "kernel" and s.name == kernel and s.name in regions), None)
    if span is None:
        return message
    lines = regions[span.name].splitlines()
    define = next((i for i, text in enumerate(lines) if re.match(rf"\s*def\s+{re.escape(kernel)}\b", text)), None)
    if define is None:
        return message
    where = f" [region {span.name} line {define + int(match.group('line'))}]"
    return message[: match.end()] + where + message[match.end() :]


def check_point(
    task_dir: pathlib.Path, task: Task, regions: Mapping[str, str], *, point: str = "", timeout_s: float = 300.0
) -> PointCheck:
    """Compile ``regions`` (a point's candidate) for sm_90 on this machine; see the module docstring."""
    started = time.perf_counter()

    def failed(why: str, outcome: Outcome = Outcome.compile_failed) -> PointCheck:
        return PointCheck(
            point=point, outcome=outcome, buckets=[], stderr=why, seconds=round(time.perf_counter() - started, 3)
        )

    files = read_task_files(pathlib.Path(task_dir), task)
    try:
        edited = apply_regions(files, task.editable, regions)
    except SpliceError as err:
        return failed(f"the regions do not splice: {err.message}")
    for rel, data in edited.items():
        try:
            cst.parse_module(data)
        except cst.ParserSyntaxError as err:
            alone = standalone_error(task, regions, baseline_regions(files, task))
            if alone:
                return failed(f"{rel} does not parse after the edit: {alone}")
            where = region_line(task, regions, edited, rel, parser_line(err))
            return failed(f"{rel} does not parse after the edit{where} (libcst): {err}")
    files = {**files, **edited}
    fresh = edited_task(task, edited)
    done: list[str] = []
    with tempfile.TemporaryDirectory(prefix="ks-triton-point-") as tmp:
        for rel, data in files.items():
            path = pathlib.Path(tmp, SRC_DIR, rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        for bucket, cases in _cases(fresh, _bucketed(fresh, regions)):
            report = compile_task(pathlib.Path(tmp), fresh.model_copy(update={"shapes": cases}), timeout_s=timeout_s)
            if not report.ok:
                where = f" (at {bucket})" if bucket else ""
                outcome = Outcome.timeout if "timed out after" in report.stderr else Outcome.compile_failed
                message = in_region_lines(task, regions, report.stderr)
                return failed(f"{message}{where}", outcome).model_copy(update={"buckets": done})
            done.append(bucket)
    return PointCheck(point=point, outcome=Outcome.ok, buckets=done, seconds=round(time.perf_counter() - started, 3))


__all__ = ["PointCheck", "check_point", "edited_task", "in_region_lines", "region_line", "standalone_error"]
