"""Which other ops run the code a candidate changes, and the candidate as each of them sees it.

Why: SGLang's ops share kernel files. ``elementwise/rope.cuh`` serves apply_rope_inplace,
apply_rope_with_cos_sin_cache_inplace (Llama's rope step) and apply_rope_inplace_with_kvcache;
``elementwise/activation.cuh`` serves eight activation ops beside silu_and_mul. A candidate
judged only at its own op's entry points and shapes reaches the patch unmeasured wherever the
other ops call the same code: on the H200 (2026-12-07) apply_rope_inplace's candidate was 1.065x
alone, while the Llama layer's rope step, which runs the same ``FusedRopeKernel::run`` at
head_dim 128, got slower. So final validation (:meth:`optimize.session.Session._finalize`)
judges the candidate at every *companion* this module finds, at that op's own shapes.

The model:

- a companion is an op of the extraction index whose JIT module compiles a file the task's
  editable regions lie in (:func:`companions`); found from the source, never from a list;
- the candidate's *changes* are the regions whose text differs from the baseline;
- at a companion, each changed region must be one of its editable regions, in the same file,
  with the same baseline text; the companion's candidate is its own baseline with the changes
  (:func:`transplant`);
- the companion is *not reached* when :func:`optimize.reach.confine` gives every change back
  (the changes are code the companion never runs: another entry point's method, a kernel only
  other launches start).

What must stay true: a change the model cannot place at a companion is ``not_judged``, never
``not_reached``: a mistake keeps a candidate out, it never lets one through unmeasured.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from contract.layout import baseline_regions, has_task, load_task, read_task_files
from contract.layout import task_dir as layout_task_dir
from optimize.reach import confine, foreign_code, outside_text, task_wrappers
from pipeline.errors import KernelsmithError
from pipeline.record_io import read_record
from pipeline.records import Index, OpEntry, Task

#: Writes the tasks of ops missing from the work folder: op id -> its Task, or why there is none
#: (:func:`extract.command.ensure_tasks` bound to a config).
Ensure = Callable[[list[str]], Mapping[str, "Task | str"]]


def companions(ops: Iterable[OpEntry], task: Task) -> list[str]:
    """The ops (ids, sorted) other than ``task``'s whose JIT module compiles a file ``task`` may edit."""
    files = {span.file for span in task.editable}
    return sorted({op.id for op in ops if op.id != task.op_id and files & set(op.files)})


@dataclass(frozen=True)
class Companion:
    """An op that compiles a file the task may edit: its task folder and task, or why it has none."""

    op_id: str
    task_dir: pathlib.Path | None = None
    task: Task | None = None
    why: str = ""


def find_companions(work: pathlib.Path, task: Task, ensure: Ensure | None = None) -> list[Companion]:
    """:func:`companions` of ``task`` over the work folder's extraction index (``index.json``), with their
    tasks, sorted by op id. A missing task is asked of ``ensure`` (None: it stays missing, with the fix).
    Without an index (a work folder ``extract`` did not make) the tasks on disk stand in for it."""
    index_path = work / "index.json"
    if index_path.exists():
        ids = companions(read_record(Index, index_path).ops, task)
    else:
        files = {span.file for span in task.editable}
        root = work / "tasks"
        found = [load_task(d) for d in sorted(root.iterdir()) if has_task(d)] if root.is_dir() else []
        ids = sorted(t.op_id for t in found if t.op_id != task.op_id and files & {s.file for s in t.editable})
    missing = [op_id for op_id in ids if not has_task(layout_task_dir(work, op_id))]
    written: Mapping[str, Task | str] = {}
    if missing and ensure is not None:
        try:
            written = ensure(missing)
        except KernelsmithError as err:
            written = dict.fromkeys(missing, err.message)
    out = []
    for op_id in ids:
        folder = layout_task_dir(work, op_id)
        if op_id in missing:
            got = written.get(op_id, f"no task; run `kernelsmith extract --ops {op_id}`")
            if isinstance(got, str):
                out.append(Companion(op_id, why=got))
                continue
        out.append(Companion(op_id, folder, load_task(folder)))
    return out


def changes(baseline: Mapping[str, str], regions: Mapping[str, str]) -> dict[str, str]:
    """The regions whose text ``regions`` changes from ``baseline``."""
    return {name: text for name, text in regions.items() if baseline.get(name) != text}


@dataclass(frozen=True)
class Transplant:
    """The candidate at one companion: reached (with the regions to evaluate), not reached, or not judged."""

    status: Literal["reached", "not_reached", "not_judged"]
    detail: str
    regions: dict[str, str] = field(default_factory=dict)  # the companion's whole region set, changes applied
    touched: list[str] = field(default_factory=list)  # the changed regions the companion runs


def transplant(
    own: Task,
    own_baseline: Mapping[str, str],
    changed: Mapping[str, str],
    task: Task,
    files: Mapping[str, bytes],
    baseline: Mapping[str, str],
) -> Transplant:
    """``changed`` (regions of ``own``) applied to companion ``task`` (``files``: its sources; ``baseline``: its regions)."""
    own_files = {span.name: span.file for span in own.editable}
    spans = {span.name: span for span in task.editable}
    for name in sorted(changed):
        span = spans.get(name)
        if span is None or span.file != own_files.get(name):
            return Transplant(
                "not_judged",
                f"{task.op_id} compiles {own_files.get(name, '?')}, but region {name} is not one of its editable "
                f"regions there; re-extract both ops (`kernelsmith extract --ops {own.op_id} {task.op_id}`)",
            )
        if baseline.get(name) != own_baseline.get(name):
            return Transplant(
                "not_judged",
                f"region {name} of {task.op_id} differs from {own.op_id}'s copy: the two tasks were extracted from "
                f"different sources; re-extract both (`kernelsmith extract --ops {own.op_id} {task.op_id}`)",
            )
    edited = {**baseline, **changed}
    if task.language != "cuda":
        return Transplant("reached", "", edited, sorted(changed))
    foreign = foreign_code(baseline, task_wrappers(task), outside_text(files, task.editable))
    confined = confine(baseline, edited, foreign)
    touched = sorted(name for name in changed if confined[name] != baseline[name])
    if not touched:
        return Transplant(
            "not_reached",
            f"every change is code {task.op_id} never runs ({', '.join(foreign.touched(baseline, edited)) or 'foreign'})",
        )
    return Transplant("reached", "", edited, touched)


@dataclass(frozen=True)
class Placed:
    """A candidate's changes at one companion: the companion, and where it has a task, its sources, its baseline
    regions and the :class:`Transplant` (``moved``) there."""

    companion: Companion
    files: dict[str, bytes] = field(default_factory=dict)
    baseline: dict[str, str] = field(default_factory=dict)
    moved: Transplant | None = None  # None: the companion has no task (``companion.why``)


def place(
    work: pathlib.Path,
    own: Task,
    own_baseline: Mapping[str, str],
    regions: Mapping[str, str],
    ensure: Ensure | None = None,
) -> list[Placed]:
    """``regions`` (a candidate of ``own``) at every companion of ``own`` (:func:`find_companions`): the one
    walk final validation and integrate both make, each then judging or checking what is reached."""
    changed = changes(own_baseline, regions)
    out = []
    for comp in find_companions(work, own, ensure):
        if comp.task is None or comp.task_dir is None:
            out.append(Placed(comp))
            continue
        files = read_task_files(comp.task_dir, comp.task)
        base = baseline_regions(files, comp.task)
        out.append(Placed(comp, files, base, transplant(own, own_baseline, changed, comp.task, files, base)))
    return out
