"""The compile check of one Triton search point on the CPU: its edited files through ``triton.compile`` for sm_90.

Why: a point the compiler refuses (a block too large for shared memory, a layout a
``num_warps`` cannot tile) should cost a second on the CPU, not a GPU worker. A point's
regions are spliced into a copy of the task's ``src/`` (:func:`extract.splice.apply_regions`),
each edited file must parse (libcst), the edited file is scanned again
(:func:`extract.triton_scan.scan_file`: the launch keywords and configs as edited) and
:func:`extract.triton_compile.compile_task` compiles every launched kernel; where a launch
chooses by token count (a bucketed point) it does so once per token bucket of the task's
shapes, at that bucket's first shape.

What must stay true: the result is a :class:`PointCheck` with an outcome of the closed set
(``ok``, ``compile_failed`` carrying Triton's own message, ``timeout``), never an exception
for a point the compiler or the parser refuses; the task folder is never written.
"""

from __future__ import annotations

import pathlib
import tempfile
import time
from collections.abc import Mapping

import libcst as cst

from contract.layout import SRC_DIR, read_task_files
from extract.splice import SpliceError, apply_regions
from extract.triton_compile import compile_task
from extract.triton_scan import scan_file
from optimize import triton_transforms as tt
from pipeline.buckets import BUCKETS, bucket_for
from pipeline.records import Outcome, Record, ShapeCase, Task, TritonLaunch


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
            return failed(f"{rel} does not parse after the edit: {err}")
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
                return failed(f"{report.stderr}{where}", outcome).model_copy(update={"buckets": done})
            done.append(bucket)
    return PointCheck(point=point, outcome=Outcome.ok, buckets=done, seconds=round(time.perf_counter() - started, 3))


__all__ = ["PointCheck", "check_point", "edited_task"]
