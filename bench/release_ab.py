"""``kernelsmith track ab --old TASKS --new TASKS``: two releases' kernels of each op, timed in one worker.

Why: the census compares batches of different days and often different machines, so a release
"slower by 15 %" may be the machine. The only comparison that may call a regression times both
releases' builds in one process, on the same inputs and buffer sets, interleaved with the order
turning each round, as the optimize stage times a candidate against its baseline. So that is what
this does: the NEW release's kernel is the baseline and the OLD release's kernel stands in the
candidate's place (:func:`optimize.harness.evaluate` with the old build as the candidate modules).
Its speedup is new time ÷ old time: above 1 beyond the noise threshold the new release is slower
(a regression), below 1 beyond it faster, else no change. Each op's record says which.

Comparable means the worker can call both builds the same way: the same contract (entry and
arguments) and, for every instantiation the plan builds from the new task, one of the old task's
with the same template arguments. Anything else is "not comparable", with the reason, and the
other ops go on. The A/A of the same release (``--old`` = ``--new``) gives the false-alarm rate.

What must stay true: one op's failure (no task in one release, a build that breaks, a worker that
crashes) is its own record; each record is written as soon as it exists, so a batch cut short keeps
what it measured and a rerun skips the ops already recorded.
"""

from __future__ import annotations

import pathlib
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from bench.census import real_shaped, tasks_root_of
from contract.layout import has_task, load_task
from optimize.harness.errors import BaselineError
from optimize.harness.evaluate import build_baseline, plan_cases, run_request, worker_dir, worker_request
from optimize.harness.verdict import overall, to_evaluation
from pipeline.config import Config
from pipeline.errors import KernelsmithError
from pipeline.record_io import read_record, write_record
from pipeline.records import ArgSpec, Instantiation, Task
from pipeline.run_records import Evaluation, Outcome
from pipeline.store_records import AB_DIR, ReleaseAB, Verdict


def old_units(old: Task, units: Sequence[Sequence[Instantiation]]) -> list[list[Instantiation]] | str:
    """The old task's instantiations matching each of the new plan's build units (same dtype and
    template arguments, so the same export names), or why there is none."""
    out: list[list[Instantiation]] = []
    for unit in units:
        matched = []
        for inst in unit:
            twin = next(
                (o for o in old.instantiations if o.dtype == inst.dtype and o.template_args == inst.template_args), None
            )
            if twin is None:
                return f"the old release has no {inst.dtype} instantiation <{', '.join(inst.template_args)}>"
            matched.append(twin)
        out.append(matched)
    return out


def not_comparable(old: Task, new: Task) -> str:
    """Why the two releases' builds cannot be called the same way ("" when they can)."""
    if old.language != new.language:
        return f"the op is {old.language} in the old release and {new.language} in the new one"
    if old.contract.entry != new.contract.entry:
        return f"the entry changed: {old.contract.entry} -> {new.contract.entry}"
    if old.contract.args != new.contract.args:
        names = [_arg_name(a) for a, b in zip(old.contract.args, new.contract.args, strict=False) if a != b]
        count = f" ({len(old.contract.args)} -> {len(new.contract.args)} arguments)"
        return (
            "the arguments changed"
            + (f": {', '.join(names)}" if names else "")
            + (count if len(old.contract.args) != len(new.contract.args) else "")
        )
    return ""


def _arg_name(arg: ArgSpec) -> str:
    spec = arg.tensor or arg.scalar
    return spec.name if spec is not None else "?"


def compare(
    old_dir: pathlib.Path, old: Task, new_dir: pathlib.Path, new: Task, *, config: Config, plant: int = 1
) -> ReleaseAB:
    """Time the two builds of one op in one worker; see the module doc. ``plant`` > 1: the new build
    runs its entry that many times per timed call, a regression of known size (+100 % for 2 passes of
    an op that is one kernel) that the verdict must flag; refused for an op that writes its inputs,
    whose second pass would compute something else."""
    head = {"op_id": new.op_id, "old": old.source.version or old.source.commit or "old", "new": _release(new)}
    written = [a.tensor.name for a in new.contract.args if a.tensor is not None and a.tensor.role == "inout"]
    if plant > 1 and written:
        why = f"--plant: it writes {', '.join(written)} in place, so a second pass computes something else"
        return ReleaseAB(**head, verdict="not comparable", planted_passes=plant, detail=why)
    why = not_comparable(old, new)
    if why:
        return ReleaseAB(**head, verdict="not comparable", detail=why)
    plan = plan_cases(new, held_out=config.harness.held_out_shapes)
    twins = old_units(old, plan.units)
    if isinstance(twins, str):
        return ReleaseAB(**head, verdict="not comparable", detail=twins)
    started = time.monotonic()
    try:
        _, new_libs = build_baseline(new_dir, new, plan.units, config=config)
        old_report, old_libs = build_baseline(old_dir, old, twins, config=config)
    except KernelsmithError as err:
        return ReleaseAB(**head, verdict="failed", detail=f"a build failed: {err.message}")
    request = worker_request(
        new,
        new_libs,
        config=config,
        candidate_libraries=old_libs,
        checks=plan.checks,
        timings=plan.timings,
        planted_passes=plant,
    )
    run = run_request(request, config, worker_dir(config, new.op_id, "release-ab"))
    try:
        evaluation = to_evaluation(
            new.op_id,
            f"release {head['old']}",
            run,
            build=old_report,
            build_s=time.monotonic() - started,
            config=config,
        )
    except BaselineError as err:  # the new release's kernel failed its own checks: this op's record, not the batch's
        return ReleaseAB(**head, verdict="failed", planted_passes=plant, detail=f"the new release: {err.message}")
    return judge(head, evaluation, config.harness.noise_pct).model_copy(update={"planted_passes": plant})


def judge(head: dict[str, str], evaluation: Evaluation, noise_pct: float) -> ReleaseAB:
    """The verdict of one worker record (pure, CPU-tested): speedup = new ÷ old time."""
    timed = [t for t in evaluation.timings if t.speedup is not None]
    if evaluation.outcome not in (Outcome.ok, Outcome.slower) or not timed:
        said = evaluation.outcome.value if evaluation.outcome not in (Outcome.ok, Outcome.slower) else "nothing timed"
        return ReleaseAB(**head, verdict="failed", detail=f"{said}: {evaluation.detail}", evaluation=evaluation)
    speedup, threshold, verdict = overall(timed, noise_pct)
    change = (speedup - 1.0) * 100.0  # new/old - 1
    named: Verdict = {"faster": "regression", "slower": "improvement"}.get(verdict, "no change")  # type: ignore[assignment]
    return ReleaseAB(
        **head,
        verdict=named,
        change_pct=round(change, 3),
        threshold_pct=round(threshold, 3),
        detail=f"new vs old {change:+.2f}% over {len(timed)} shapes (threshold ±{threshold:.2f}%)",
        evaluation=evaluation,
    )


def _release(task: Task) -> str:
    return task.source.version or task.source.commit or "new"


def say(text: str) -> None:
    print(text, file=sys.stderr)


def tasks_by_op(root: pathlib.Path) -> dict[str, tuple[pathlib.Path, Task]]:
    return {f.name: (f, load_task(f)) for f in sorted(root.iterdir()) if has_task(f)} if root.is_dir() else {}


@dataclass(frozen=True)
class ReleaseABOptions:
    """What ``kernelsmith track ab`` is asked: ``old`` and ``new`` the two releases' tasks (a folder with
    ``tasks/`` or a tarball; ``new`` None: the work folder's), ``ops`` only these (empty: every op of the
    new release with a catalog shape), ``plant`` the times the new release runs each timed call (a
    planted regression the verdict must flag; 1: none)."""

    old: str
    new: str | None = None
    ops: tuple[str, ...] = ()
    plant: int = 1


def run(options: ReleaseABOptions, config: Config) -> int:
    """``kernelsmith track ab``: every op both task folders hold (or ``--ops``), one record each."""
    old_root = tasks_root_of(config, options.old)
    new_root = tasks_root_of(config, options.new)
    new_tasks = dict((f.name, (f, t)) for f, t in real_shaped(new_root))
    old_tasks = tasks_by_op(old_root)
    wanted = list(options.ops or sorted(new_tasks))
    if not new_tasks:
        say(f"no task with a catalog shape under {new_root}: nothing to compare")
        return 1
    out_dir = None
    plant = max(1, options.plant)
    results: list[ReleaseAB] = []
    for op_id in wanted:
        if op_id not in new_tasks:
            say(f"{op_id}: no task with a catalog shape in the new release ({new_root})")
            continue
        new_dir, new = new_tasks[op_id]
        tail = f"-planted{plant}" if plant > 1 else ""
        out_dir = out_dir or config.work / AB_DIR / f"{_label(old_root, old_tasks)}-vs-{_release(new)}{tail}"
        record_path = out_dir / f"{op_id}.json"
        if record_path.is_file():
            results.append(read_record(ReleaseAB, record_path))
            continue
        if op_id not in old_tasks:
            why = f"the old release has no task for it ({old_root})"
            result = ReleaseAB(op_id=op_id, old="?", new=_release(new), verdict="not comparable", detail=why)
        else:
            old_dir, old = old_tasks[op_id]
            result = compare(old_dir, old, new_dir, new, config=config, plant=plant)
        write_record(result, record_path)
        results.append(result)
        say(f"{op_id}: {result.verdict}: {result.detail}")
    flagged = [r for r in results if r.verdict == "regression"]
    say(f"{len(flagged)} regression(s) of {len(results)} ops" + (f"; records: {out_dir}" if out_dir else ""))
    return 0


def _label(root: pathlib.Path, tasks: dict[str, tuple[pathlib.Path, Task]]) -> str:
    first = next(iter(tasks.values()), None)
    return _release(first[1]) if first else root.name
