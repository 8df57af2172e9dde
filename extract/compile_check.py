"""The compile check of extract: every task's baseline built for the GPU target, the instantiations
nvcc refuses dropped with the reason instead of failing the op (:func:`compile_tasks` at extract,
:func:`check_unbuilt` for a task written with ``--no-compile`` before it reaches the GPU).

What must stay true: a task keeps only instantiations that built, and only the shapes one of them
serves; a missing toolchain is a :class:`pipeline.errors.ToolchainError`, never an op's failure.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

from contract import layout
from extract.errors import ToolchainError
from pipeline.build import first_error, merge_reports
from pipeline.config import Config
from pipeline.console import working
from pipeline.records import BuildReport, Instantiation, Task


def unit_groups(instantiations: list[Instantiation]) -> list[list[Instantiation]]:
    """Split instantiations into build units with at most one per dtype (k-th of each dtype together)."""
    per_dtype: dict[str, list[Instantiation]] = {}
    for inst in instantiations:
        per_dtype.setdefault(inst.dtype, []).append(inst)
    depth = max((len(v) for v in per_dtype.values()), default=0)
    return [[v[i] for v in per_dtype.values() if i < len(v)] for i in range(depth)]


def compile_tasks(
    folders: dict[str, pathlib.Path], task_objs: dict[str, Task], cache_root: pathlib.Path, jobs: int
) -> dict[str, tuple[Task, str]]:
    """Build every task's baseline; returns op_id -> (task with baseline_build, reason when failed).

    Raises ToolchainError when nvcc / the host compiler / tvm-ffi is missing.
    """
    from pipeline import build as builder

    builder.find_nvcc()  # fail fast, before any task is touched
    out: dict[str, tuple[Task, str]] = {}
    units: list[tuple[str, list[Instantiation]]] = []
    for op_id, task in task_objs.items():
        if not task.build.header_only or task.build.cpp_files:
            reason = (
                "not header-only (the module exports from its own C++ sources); kernelsmith builds header-only modules"
            )
            report = BuildReport(ok=False, key="", seconds=0.0, stderr=reason)
            out[op_id] = (task.model_copy(update={"baseline_build": report}), reason)
            continue
        units += [(op_id, group) for group in unit_groups(task.instantiations)]

    def run(unit_list: list[tuple[str, list[Instantiation]]]) -> list[BuildReport]:
        jobs_list = [
            builder.BuildJob(
                task_dir=folders[op_id],
                task=task_objs[op_id],
                instantiations=tuple(group),
                cache_root=cache_root,
                editable=tuple(task_objs[op_id].editable),
            )
            for op_id, group in unit_list
        ]
        return builder.build_many(jobs_list, max_workers=jobs, isolate=True)

    reports = run(units)
    # A failed unit holding several instantiations: build each alone to learn which
    # ones the baseline cannot compile (an unsupported dtype or width), unless the
    # failure cannot depend on the instantiation (a header that is not there).
    retry = [
        (op_id, [inst])
        for (op_id, group), rep in zip(units, reports)
        if not rep.ok and len(group) > 1 and not _hopeless(rep.stderr)
        for inst in group
    ]
    retry_reports = run(retry) if retry else []
    alone = {(op_id, group[0].model_dump_json()): rep for (op_id, group), rep in zip(retry, retry_reports)}
    by_op: dict[str, list[tuple[list[Instantiation], BuildReport]]] = {}
    for (op_id, group), rep in zip(units, reports):
        by_op.setdefault(op_id, []).append((group, rep))
    for op_id, results in by_op.items():
        task = task_objs[op_id]
        if all(rep.ok for _, rep in results):
            out[op_id] = (task.model_copy(update={"baseline_build": merge_reports([r for _, r in results])}), "")
            continue
        reason = first_error(next(rep.stderr for _, rep in results if not rep.ok))
        good: list[BuildReport] = []
        kept: list[Instantiation] = []
        bad: list[Instantiation] = []
        for group, rep in results:
            if rep.ok:
                good.append(rep)
                kept += group
                continue
            for inst in group:
                single = rep if len(group) == 1 else alone.get((op_id, inst.model_dump_json()))
                if single is not None and single.ok:
                    good.append(single)
                    kept.append(inst)
                else:
                    bad.append(inst)
        if kept and bad:
            labels = ", ".join(f"{i.dtype}<{', '.join(i.template_args)}>" for i in bad)
            note = f"instantiations dropped, the baseline does not compile them: {labels} ({reason})"
            shapes_kept = [c for c in task.shapes if any(_fits(i, c) for i in kept)]
            reduced = task.model_copy(
                update={
                    "instantiations": [i for i in task.instantiations if i in kept],
                    "shapes": shapes_kept,
                    "notes": [*task.notes, note],
                    "baseline_build": merge_reports(good),
                }
            )
            out[op_id] = (reduced, "")
        else:
            out[op_id] = (task.model_copy(update={"baseline_build": merge_reports([r for _, r in results])}), reason)
    return out


def check_unbuilt(
    config: Config, items: list[tuple[pathlib.Path, Task]], *, say: Callable[[str], object] = print
) -> list[tuple[pathlib.Path, Task]]:
    """The compile check, late, for the CUDA tasks written without it (``--no-compile``): each is
    built for the configured target, the instantiations the baseline cannot compile are dropped with
    a note (as :func:`compile_tasks` does at extract), and the task is saved. The others are
    returned as given.

    Why: on the H200 (2026-12-07) two of ten ops in an optimize run failed whole because their
    tasks, extracted with ``--no-compile``, kept an instantiation that does not build; with the check
    both built. What must stay true: a task the check cannot run on (no nvcc here) is returned as
    given, with one line saying so, and its own build reports what fails."""
    unchecked = {t.op_id: (d, t) for d, t in items if t.baseline_build is None and t.language == "cuda"}
    if not unchecked:
        return items
    say(f"compile check of {len(unchecked)} task(s) extracted without it: {', '.join(sorted(unchecked))}")
    try:
        with working(f"nvcc: building every instantiation for {config.extract.arch}"):
            built = compile_tasks(
                {op: d for op, (d, _) in unchecked.items()},
                {op: t for op, (_, t) in unchecked.items()},
                config.cache / "builds",
                config.extract.jobs,
            )
    except ToolchainError as err:
        say(f"compile check not run: {err.message}; each op's own build will say what fails")
        return items
    out = []
    for folder, task in items:
        if task.op_id not in built:
            out.append((folder, task))
            continue
        checked, reason = built[task.op_id]
        layout.save_task(checked, config.work)
        dropped = len(task.instantiations) - len(checked.instantiations)
        if reason:
            say(f"  {task.op_id}: its baseline does not build: {reason}")
        elif dropped:
            say(f"  {task.op_id}: {checked.notes[-1]}")
        out.append((folder, checked))
    return out


def _hopeless(stderr: str) -> bool:
    """A failure no instantiation can avoid: a missing header or dependency."""
    low = stderr.lower()
    return "cannot open source file" in low or "no such file or directory" in low


def _fits(inst: Instantiation, case: Any) -> bool:
    """Whether ``inst`` can serve ``case``: the sizes it was made for, else its integer
    template arguments, are among the case's sizes."""
    served = inst.serves(case.sizes)
    if served is not None:
        return served
    ints = {int(a) for a in inst.template_args if a.strip().isdigit()}
    return ints <= {*case.sizes.values(), case.tokens}
