"""The tasks an outside coder names: an op id looked up, and the code of a task it may not edit.

Why a module of its own: every verb starts from an op id the coder typed, and every answer
about regions must agree with what :meth:`optimize.session.Session.submit` accepts.

- :func:`load_op`: the task of an op id; an id no index or task folder knows is an
  :class:`~pipeline.errors.UnknownOpError` naming the closest known ids (CUDA and Triton) and
  the commands that list them, never ``extract --ops`` of an id that does not exist (issue 47:
  ``agent show`` suggested extracting the very typo it was given); an indexed op that was not
  extracted yet gets that ``extract`` command;
- :func:`not_editable`: the regions and functions of a task only other ops run
  (:func:`optimize.reach.foreign_code`, through the task's language as the session asks it),
  each with why and, where the extraction index tells, which ops run it.

What must stay true: ``not_editable`` names exactly :meth:`optimize.reach.Foreign.names` of
the code the session computes from the task's baseline (``OpState.foreign``), so a region
``agent show`` lists as editable is one ``agent submit`` accepts edits to, and none it marks is.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping

from contract.layout import has_task, load_task, tasks_root
from contract.layout import task_dir as layout_task_dir
from extract.command import closest
from optimize import reach
from optimize.errors import TaskMissing
from optimize.reach_ops import companions
from optimize.session import load_op_task
from pipeline.config import Config
from pipeline.errors import ConfigError, KernelsmithError, UnknownOpError
from pipeline.record_io import read_record
from pipeline.records import Index, Task, TritonIndex

INDEX_FILE = "index.json"  # extract's CUDA index, under the work dir
TRITON_INDEX_FILE = "triton_index.json"  # extract's Triton index, beside it
CLOSEST = 5  # close ids an unknown-op error names


def read_index(work: pathlib.Path) -> Index | None:
    """``<work>/index.json``, or None where there is none (or it cannot be read: the task folders stand in)."""
    path = work / INDEX_FILE
    if not path.is_file():
        return None
    try:
        return read_record(Index, path)
    except KernelsmithError:
        return None


def indexed_ops(work: pathlib.Path) -> dict[str, str] | None:
    """Every op id the extraction indexes know (CUDA and Triton) -> why it cannot become a task ("" when it
    can); None without ``index.json`` (a work folder ``extract`` did not make)."""
    index = read_index(work)
    if index is None:
        return None
    known = {op.id: "" for op in index.ops}
    triton = work / TRITON_INDEX_FILE
    if triton.is_file():
        try:
            known.update({op.id: op.reason for op in read_record(TritonIndex, triton).ops})
        except KernelsmithError:
            pass  # an older Triton index: its ids are simply not offered
    return known


def task_ops(work: pathlib.Path) -> list[str]:
    """The op ids with a task folder under ``<work>/tasks`` (what ``agent ops`` lists)."""
    root = tasks_root(work)
    return sorted(p.name for p in root.iterdir() if has_task(p)) if root.is_dir() else []


def load_op(config: Config, op_id: str) -> tuple[pathlib.Path, Task]:
    """The task folder and task of ``op_id``; an op without one raises with the fix that works for it.

    Known ids are the indexes' (``index.json``, ``triton_index.json``) where the work folder has an
    index, else the task folders; the task folders always count. An indexed op without a task gets
    ``kernelsmith extract --ops OP``; an unknown id gets the closest known ids, never that command.
    """
    if has_task(layout_task_dir(config.work, op_id)):
        return load_op_task(config, op_id)
    indexed = indexed_ops(config.work)
    if indexed is not None and op_id in indexed:
        if indexed[op_id]:
            raise ConfigError(
                f"{op_id} is indexed ({config.work / TRITON_INDEX_FILE}) but cannot become a task: {indexed[op_id]}",
                fix="pick an extracted op: `kernelsmith agent ops` lists them",
            )
        raise TaskMissing(
            f"{op_id} is indexed but not extracted: no task at {layout_task_dir(config.work, op_id)}",
            fix=f"run `kernelsmith extract --ops {op_id}` first",
        )
    extracted = task_ops(config.work)
    known = sorted({*extracted, *(k for k, why in (indexed or {}).items() if not why)})
    close = closest(op_id, known, CLOSEST)
    where = (
        f"not in {config.work / INDEX_FILE} nor {tasks_root(config.work)}"
        if indexed is not None
        else f"no task folder in {tasks_root(config.work)} (and no {INDEX_FILE} there)"
    )
    raise UnknownOpError(
        f"unknown op {op_id!r}: {where} (closest: {', '.join(close) or 'none'})",
        fix=("use one of the closest ids; " if close else "")
        + "`kernelsmith agent ops` lists the extracted tasks, `kernelsmith extract --list` every op SGLang has",
    )


def _wrappers_by_op(config: Config, task: Task) -> dict[str, list[str]]:
    """The launchers (wrapper targets) each other op compiling one of ``task``'s files exports under its entry
    points: from ``index.json`` where there is one (an op need not be extracted), else from the task folders."""
    index = read_index(config.work)
    out: dict[str, list[str]] = {}
    if index is not None:
        by_id = {op.id: op for op in index.ops}
        for op_id in companions(index.ops, task):
            entry = by_id[op_id]
            pairs = [(export, target) for call in entry.load_jit for export, target in call.cuda_wrappers]
            out[op_id] = reach.entry_wrappers(pairs, entry.entry_points)
        return out
    files = {span.file for span in task.editable}
    for op_id in task_ops(config.work):
        if op_id == task.op_id:
            continue
        try:
            other = load_task(layout_task_dir(config.work, op_id))
        except KernelsmithError:
            continue  # a stale task names no owner; the code stays marked
        if files & {span.file for span in other.editable}:
            out[op_id] = reach.task_wrappers(other)
    return out


def not_editable(
    config: Config, task: Task, foreign: reach.Foreign, regions: Mapping[str, str], files: Mapping[str, bytes]
) -> dict[str, str]:
    """Each name of ``foreign.names()`` (a region, or ``region: Struct::method``) -> why this op may not edit it.

    ``regions`` and ``files``: the task's baseline region texts and sources, from which ``foreign`` was
    computed. Which ops run the code: another op runs a name when the same model
    (:func:`optimize.reach.foreign_code` over these regions, with that op's launchers) is sure of that op
    (its answer is not empty) and does not count the name foreign to it. Where none is found the
    reason names this op's entry points instead.
    """
    if not foreign:
        return {}
    owners: dict[str, list[str]] = {name: [] for name in foreign.names()}
    outside = reach.outside_text(files, task.editable)
    for op_id, wrappers in sorted(_wrappers_by_op(config, task).items()):
        theirs = reach.foreign_code(regions, wrappers, outside)
        if not theirs:
            continue  # unsure (no launch matched), or it runs everything: no claim either way
        mine = set(theirs.names())
        for name, ops in owners.items():
            if name not in mine:
                ops.append(op_id)
    entries = ", ".join(task.entry_points) or "its entry points"
    out = {}
    for name, ops in owners.items():
        who = f"only {', '.join(ops)} run{'s' if len(ops) == 1 else ''} it" if ops else f"{entries} never run it"
        out[name] = (
            f"another op's code: {who}, so no check of {task.op_id} does and `submit` refuses a change to it "
            "(an edit there would reach the patch unmeasured)"
        )
    return out


__all__ = ["indexed_ops", "load_op", "not_editable", "read_index", "task_ops"]
