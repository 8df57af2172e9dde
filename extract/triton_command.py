"""The Triton half of ``kernelsmith extract``: ``--list`` rows, ``--ops`` ids, ``--all --language triton``.

:func:`run` is called by :func:`extract.command.run` with the ops it selected: it scans
(or loads from the cache) the Triton index, writes ``work/triton_index.json``, writes a task
per op (a current one is kept, as for CUDA), runs the Triton compile check
(:mod:`extract.triton_compile`) on new tasks unless ``--no-compile``, and with ``--all``
prints the coverage line and writes ``work/triton_coverage.json`` (every op and every file
with kernels, with its reason when it yields no task).

What must stay true: one op's failure never stops the others; a task whose check failed
keeps its ``baseline_build`` with the reason; the exit status follows the CUDA rule (0 with
``--all`` once the report is written; else 1 when a requested op has no task or fails).
"""

from __future__ import annotations

import collections
import time

from pydantic import Field

from contract import layout
from extract import triton_compile, triton_ops, triton_tasks
from extract.tasks import is_current
from pipeline.config import Config
from pipeline.errors import KernelsmithError, NotWritable, StaleRecordError
from pipeline.record_io import VersionedRecord, write_record
from pipeline.records import Index, SourceInfo, Task, TritonIndex, TritonOp
from pipeline.target import TARGET


class TritonCoverage(VersionedRecord):
    """``work/triton_coverage.json``: what ``--all --language triton`` achieved."""

    source: SourceInfo
    files: int  # files with @triton.jit kernels
    files_with_task: int
    ops: int
    ops_with_task: int
    ops_compiled: int
    op_reasons: dict[str, str] = Field(default_factory=dict)  # op id -> why no task ("" = task)
    reason_counts: dict[str, int] = Field(default_factory=dict)  # grouped reason -> ops
    file_reasons: dict[str, str] = Field(default_factory=dict)  # file -> why no task


def load_index(source: SourceInfo, config: Config, *, cuda: Index, listing: bool = False) -> TritonIndex:
    """The Triton index, its ids clear of the CUDA ops' (:func:`extract.triton_ops.avoid`), also written to
    ``work/triton_index.json`` (``--list`` only reads: a read-only work dir still gets its table)."""
    started = time.perf_counter()
    index, cached = triton_ops.scan_tree(source, config.cache)
    index = triton_ops.avoid(index, (op.id for op in cuda.ops))
    try:
        write_record(index, config.work / "triton_index.json")
    except NotWritable:
        if not listing:
            raise
    print(
        f"triton index: {len(index.ops)} ops, {sum(1 for f in index.files if f.kernels)} files with @triton.jit, "
        f"{sum(len(f.kernels) for f in index.files)} kernels ({'cached' if cached else 'scanned'}, "
        f"{time.perf_counter() - started:.1f} s)"
    )
    return index


def print_table(index: TritonIndex) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=200)
    table = Table(title=f"SGLang {index.source.version or ''} Triton ops")
    table.add_column("op", style="bold cyan", no_wrap=True)
    table.add_column("wrapper")
    table.add_column("kernels")
    table.add_column("why no task")
    for op in index.ops:
        kernels = ", ".join(k.partition(":")[2] for k in op.kernels) or "-"
        table.add_row(op.id, f"{op.module}::{op.function}", kernels, op.reason or "")
    console.print(table)


def run(
    config: Config, source: SourceInfo, index: TritonIndex, selected: list[TritonOp], *, all_ops: bool, no_compile: bool
) -> int:
    work = config.work
    compile_check = config.extract.compile_check and not no_compile
    token_counts = tuple(config.extract.token_counts)
    results: dict[str, str] = {}
    compiled = 0
    for op in selected:
        try:
            key = triton_tasks.task_key(index, op, config.extract.arch, token_counts, cache_dir=config.cache)
            task: Task | None = None
            state = "written"
            if is_current(work, op.id, key):
                try:
                    task = layout.load_task(layout.task_dir(work, op.id))
                    state = "current"
                except StaleRecordError:
                    task = None
            if task is None:
                task = triton_tasks.write_task(
                    index,
                    op,
                    work,
                    arch=config.extract.arch,
                    token_counts=token_counts,
                    key=key,
                    cache_dir=config.cache,
                )
        except KernelsmithError as err:
            results[op.id] = err.message
            if not all_ops:
                print(f"  {op.id}: no task: {err.message}")
            continue
        except Exception as err:  # noqa: BLE001 - one op's surprise must not stop the others
            results[op.id] = f"{op.id}: {type(err).__name__}: {err}"
            print(f"  {op.id}: no task: {type(err).__name__}: {err}")
            continue
        results[op.id] = ""
        if compile_check and task.baseline_build is None:
            report = triton_compile.compile_task(layout.task_dir(work, op.id), task)
            task = task.model_copy(update={"baseline_build": report})
            layout.save_task(task, work)
        ok = task.baseline_build is not None and task.baseline_build.ok
        compiled += ok
        if not all_ops:
            check = (
                "compile check skipped"
                if task.baseline_build is None
                else (
                    f"compiles (triton, {TARGET.arch})" if ok else f"compile check FAILED: {task.baseline_build.stderr}"
                )
            )
            print(f"  {op.id}: triton task {state} ({len(task.shapes)} shapes), {check}")
    if all_ops:
        reasons = collections.Counter(triton_tasks.reason_group(r) for r in results.values() if r)
        file_reasons = triton_tasks.file_reasons(index, results)
        files = sum(1 for f in index.files if f.kernels or f.parse_error)
        coverage = TritonCoverage(
            source=source,
            files=files,
            files_with_task=files - len(file_reasons),
            ops=len(selected),
            ops_with_task=sum(1 for r in results.values() if not r),
            ops_compiled=compiled,
            op_reasons=results,
            reason_counts=dict(reasons.most_common()),
            file_reasons=file_reasons,
        )
        write_record(coverage, work / "triton_coverage.json")
        print(
            f"triton coverage: {coverage.files} files with @triton.jit -> {coverage.files_with_task} yield a task; "
            f"{coverage.ops_with_task}/{coverage.ops} ops have tasks"
            + (f", {compiled} compiled (triton, {TARGET.arch})" if compile_check else " (compile check not run)")
        )
        for reason, count in reasons.most_common():
            print(f"  {count} ops: {reason}")
        print(f"full report: {work / 'triton_coverage.json'}")
        return 0
    failed = [i for i, r in results.items() if r]
    return 1 if failed else 0
