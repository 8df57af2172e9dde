"""BENCHMARKS.md's generated sections: each ``kernelsmith bench`` command owns one, keyed by the
exact command, and rewrites only that one.

Why a module of its own: the text of a section (its table, its method line) is read by people and by
tests; the measuring (:mod:`bench.bench`) only hands over :class:`OpBench` results.

What must stay true: a section starts at its marker line and runs to the next marker or the next
level-2 heading that is not its own first heading; every other byte of the file is kept.
"""

from __future__ import annotations

import pathlib
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from optimize.harness.protocol import DeviceInfo, TimingResult

SECTION_MARKER = "<!-- kernelsmith-bench: {command} -->"
_MARKER_RE = re.compile(r"^<!-- kernelsmith-bench: (?P<command>.*) -->$")


def upsert_section(text: str, command: str, section: str) -> str:
    """``text`` with the section for ``command`` replaced by ``section`` (appended if absent).

    A section starts at its marker line and runs to the next marker or the next
    level-2 heading that is not its own first heading; everything else is kept
    byte for byte.
    """
    marker = SECTION_MARKER.format(command=command)
    body = section.rstrip("\n") + "\n"
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip("\n") == marker), None)
    if start is None:
        prefix = text if text.endswith("\n") or not text else text + "\n"
        return prefix + ("\n" if prefix.strip() else "") + marker + "\n" + body
    end = len(lines)
    seen_heading = False
    for i in range(start + 1, len(lines)):
        line = lines[i].rstrip("\n")
        if _MARKER_RE.match(line):
            end = i
            break
        if line.startswith("## "):
            if seen_heading:
                end = i
                break
            seen_heading = True
    tail = "".join(lines[end:])
    return "".join(lines[:start]) + marker + "\n" + body + ("\n" + tail if tail and not body.endswith("\n\n") else tail)


DEFAULT_OUTPUT = "BENCHMARKS.md"  # where bench writes its section unless --output names another file


@dataclass(frozen=True)
class BenchOptions:
    """What one ``kernelsmith bench`` is asked: ``all_ops`` (``--all``: every task's health) or ``ops``
    (empty: the default ops) timed at ``dtypes`` (None: each task's own), with or without the
    torch.compile reference, into their section of ``output``; ``emitted`` collects the result for
    ``--json``."""

    ops: tuple[str, ...] = ()
    all_ops: bool = False
    dtypes: tuple[str, ...] | None = None
    torch_compile: bool = True
    output: str = DEFAULT_OUTPUT
    emitted: list[Any] | None = None


def canonical_command(options: BenchOptions) -> str:
    """The exact command a section is keyed by, rebuilt from the options (the budget is not part of it)."""
    parts = ["kernelsmith", "bench"]
    if options.all_ops:
        parts.append("--all")
    elif options.ops:
        parts += ["--ops", *options.ops]
    if options.dtypes:
        parts += ["--dtypes", *options.dtypes]
    if not options.torch_compile:
        parts.append("--no-torch-compile")
    if options.output and options.output != DEFAULT_OUTPUT:
        parts += ["--output", options.output]
    return shlex.join(parts)


def fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


@dataclass
class OpBench:
    op_id: str
    rows: list[TimingResult] = field(default_factory=list)
    device: DeviceInfo | None = None
    error: str = ""
    notes: list[str] = field(default_factory=list)
    worker_s: float | None = None  # the op's time in the worker (its worker's life when timed alone)


def timing_table(results: Sequence[OpBench]) -> list[str]:
    from optimize.harness import roofline
    from pipeline.buckets import floor_text

    lines = [
        "| op | dtype | shape | µs | spread % | GB/s | % copy BW | time/floor | eager µs | compile µs |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for op in results:
        if op.error:
            lines.append(f"| {op.op_id} | — | — | not measured: {op.error.splitlines()[0][:200]} | | | | | | |")
            continue
        for t in op.rows:
            assert op.device is not None, "the worker reports its device with every timing"
            row = roofline.shape_timing(
                label=t.label,
                sizes=t.sizes,
                dtype=t.dtype,
                time_us=t.baseline_us,
                spread_pct=t.baseline_spread_pct,
                nbytes=t.bytes,
                device=op.device,
                byte_bound=t.byte_bound,
                tokens=t.tokens,
                traffic=t.traffic,
            )
            lines.append(
                f"| {op.op_id} | {t.dtype} | {t.label} | {row.time_us:.2f} | {row.spread_pct:.1f} | {row.gbps:.0f} | "
                f"{row.pct_of_copy_bw:.1f} | {floor_text(row)} | {fmt(t.eager_us)} | {fmt(t.compile_us)} |"
            )
    return lines


def timing_section(command: str, results: Sequence[OpBench], when: str, environment: str) -> str:
    from optimize.harness import roofline

    device = next((op.device for op in results if op.device is not None), None)
    name = device.name if device else "unknown GPU"
    lines = [f"## Baselines — {when}, {name}", "", f"Command: `{command}`", ""]
    if device is not None:
        lines += [
            f"Device: {device.name}, {device.sm_count} SMs, L2 {device.l2_bytes / 2**20:.0f} MiB; copy bandwidth "
            f"{device.copy_gbps:.0f} GB/s (bytes read + written, spread {device.copy_spread_pct:.1f}%); smallest kernel "
            f"{device.min_kernel_us:.2f} µs; torch {device.torch}, CUDA {device.cuda}. {environment}",
            "",
        ]
        lines += roofline.latency_lines(device)
    lines += [
        "Method: CUDA-graph replays of back-to-back calls over buffer sets of at least 3x L2 (the L2 is exceeded, not "
        "flushed), two input images alternating on each set's outputs (no call finds its answer in place), median of "
        "repeats; sampled sets of each timed graph (a fresh draw each evaluation) are compared with the baseline's, and "
        "a median below 0.8x the floor of the bytes every call must move is rejected. GB/s from the contract's bytes "
        "(inputs read once, outputs written once, inout both, scratch neither); floor = max(bytes / copy bandwidth, "
        "smallest-kernel time, the latency of the shape's access pattern: the slowest of the copy, read and write "
        "streams its bytes need). eager/compile: the PyTorch reference (harness/references.py), timed the same way.",
        "",
    ]
    lines += timing_table(results)
    notes = [f"- {op.op_id}: {n}" for op in results for n in op.notes]
    if notes:
        lines += ["", "Notes:", *notes]
    return "\n".join(lines) + "\n"


def write_section(output: pathlib.Path, command: str, section: str) -> None:
    text = output.read_text(encoding="utf-8") if output.exists() else "# Benchmarks\n"
    output.write_text(upsert_section(text, command, section), encoding="utf-8")
    print(section)
    print(f"wrote {output} (section for `{command}`)")
