"""Which ops, beyond the ones a patch was made for, run the code it changes.

Why: a patch made for one op changes every op that runs the same code (rope.cuh's
``FusedRopeKernel::run`` serves apply_rope_inplace and Llama's rope step,
apply_rope_with_cos_sin_cache_inplace). Integrate checks those ops through SGLang too, and
the PR's model-step section asks this module, never the op ids alone, whether a recipe's
step runs the patch (2026-12-07: a PR said the Llama layer "cannot show its change" while
its rope step ran the changed kernel).

The reach is found from the source, as final validation finds it
(:func:`optimize.reach_ops.find_companions`, :func:`optimize.reach_ops.transplant`), for the
patch as integrated: each accepted candidate's changes against its task's baseline.

What must stay true: an op whose reach cannot be decided (no task, a region that cannot be
placed) is listed in ``unknown`` with the reason and counts as reached where that is the
safe side: in the PR's claims.
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from contract.layout import baseline_regions, completed_in_run, read_task_files
from integrate.accepted import Accepted
from optimize.reach_ops import Ensure, place
from pipeline.records import Task


@dataclass(frozen=True)
class Reach:
    """The patch's reach: op -> the other ops its changes run in; their tasks; the undecided ones."""

    ops: dict[str, list[str]] = field(default_factory=dict)
    tasks: dict[str, Task] = field(default_factory=dict)  # every reached op that is not itself accepted
    unknown: dict[str, str] = field(default_factory=dict)


def patch_reach(work: pathlib.Path, accepted: Sequence[Accepted], ensure: Ensure | None = None) -> Reach:
    """The :class:`Reach` of the accepted candidates, from the work folder's index and tasks."""
    own = {a.op_id for a in accepted}
    out: dict[str, list[str]] = {}
    tasks: dict[str, Task] = {}
    unknown: dict[str, str] = {}
    for acc in accepted:
        base = baseline_regions(read_task_files(acc.task_dir, acc.task), acc.task)
        reached: list[str] = []
        for placed in place(work, acc.task, base, acc.candidate.regions, ensure):
            comp, moved = placed.companion, placed.moved
            if moved is None or moved.status == "not_judged":
                unknown[comp.op_id] = comp.why if moved is None else moved.detail
            elif moved.status == "reached":
                assert comp.task is not None
                reached.append(comp.op_id)
                if comp.op_id not in own:
                    tasks[comp.op_id] = comp.task
        out[acc.op_id] = reached
    return Reach(out, tasks, unknown)


def checked_tasks(reach: Reach, accepted: Sequence[Accepted], run_dir: pathlib.Path) -> list[Task]:
    """The tasks integrate checks through SGLang: the accepted ops', then every reached op's, each with the
    contract final validation called it with (``<op>/reach/<companion>/`` of the run) where there is one."""
    out = [a.task for a in accepted]
    for op_id, task in sorted(reach.tasks.items()):
        owners = [a.op_id for a in accepted if op_id in reach.ops.get(a.op_id, [])]
        recorded = [completed_in_run(task, run_dir / owner / "reach" / op_id) for owner in owners]
        out.append(next((t for t in recorded if t is not None), task))
    return out
