"""``evaluate_population``: many candidates of one op built at once and checked and timed in one worker.

Why: one evaluation per worker spends most of its time where no kernel runs (nvcc on
one core's worth of units, then starting torch and the CUDA context, building the
baseline's inputs and outputs). A search round has a population: its members are
built together on every core (``search.build_jobs`` nvcc processes), and one worker
checks and times them one after another against the baseline, each exactly as
:func:`optimize.harness.evaluate.evaluate` would (same cases, same outcomes).

All members share one case plan, held-out shapes included (drawn fresh for the
population), so their figures compare with each other as well as with the baseline.

Screening (``search.screen_per_bucket``, ``search.promote``): the timing and the checks,
not the build or the worker start, are most of a member's cost (about 20 s of
fused_add_rmsnorm's 24 shapes on the H200, 2026-12-02; 7.8 s of checks for each of
silu_and_mul's 252 cases, 2026-12-05, which cost its round 62 s before any member was
timed in full). So every member is first timed only at :func:`screening`'s few shapes
(one per token bucket and timing dtype), checked only there and at the held-out shapes
of those build units (:func:`screening_checks`), and built only at those units. Only the
best (:func:`promote`), correct and faster than the baseline there, are then built,
checked and timed at every shape; the others keep their screening figures, marked
``Evaluation.screened``, which ranks them in the search and is never accepted
(:func:`optimize.acceptance.judge_round`).

Faults: the worker writes each member's result when it is known. A member that kills
the worker (a fault, an abort, the deadline: ``harness.worker_timeout_s`` per member)
is ``crashed`` or ``timeout``; the members after it run in a fresh worker. A member
that does not splice or build is ``compile_failed`` and never reaches the worker.

What must stay true: the outcome of a member does not depend on the others (a
crashed member never takes its neighbours' results with it); a candidate is accepted only
on a full timing; this module imports no torch.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from optimize.harness import isolate
from optimize.harness.evaluate import (
    CandidateBuild,
    build_baseline,
    build_candidate,
    plan_cases,
    run_request,
    worker_dir,
)
from optimize.harness.languages import build_of
from optimize.harness.protocol import CheckCase, TimingCase, WorkerRequest, WorkerResult
from optimize.harness.verdict import to_evaluation
from optimize.harness.worker import member_path
from pipeline.buckets import bucket_for, tokens_of
from pipeline.config import Config
from pipeline.records import Instantiation, Task
from pipeline.run_records import Candidate, Evaluation, Outcome
from pipeline.stats import speedup_geomean


def evaluate_population(
    task_dir: str | os.PathLike[str],
    task: Task,
    candidates: Sequence[Candidate],
    *,
    config: Config,
) -> list[Evaluation]:
    """One :class:`Evaluation` per candidate, in order; see the module doc."""
    if not candidates:
        return []
    plan = plan_cases(task, held_out=config.harness.held_out_shapes)
    _, base_libs = build_baseline(task_dir, task, plan.units, config=config)
    screen = screening(plan.timings, config.search.screen_per_bucket)
    screens = len(screen) < len(plan.timings) and len(candidates) > config.search.promote
    checks = screening_checks(plan.checks, screen) if screens else plan.checks
    # screened members are built at the units their cases use (rmsnorm has 12, one per width)
    first_units = sorted({c.unit for c in checks} | {t.unit for t in (screen if screens else plan.timings)})
    built = _build(task_dir, task, plan.units, candidates, first_units, config)
    results: list[Evaluation | None] = [b.failed for b in built]
    pending = [i for i, b in enumerate(built) if b.failed is None]
    members = _Members(task, candidates, built, base_libs, plan.checks, config)

    def built_in_full(indices: list[int]) -> list[int]:
        """The members at ``indices`` built at every unit (the first ones cached): those that built;
        one that does not build there has its ``compile_failed`` result."""
        if len(first_units) == len(plan.units):
            return indices
        whole = _build(task_dir, task, plan.units, [candidates[i] for i in indices], None, config)
        for index, again in zip(indices, whole):
            again.seconds += built[index].seconds
            built[index] = again
            results[index] = again.failed
        return [i for i in indices if results[i] is None]

    if screens and len(pending) > config.search.promote:
        members.judge(pending, screen, results, checks=checks)
        promoted = promote({i: results[i] for i in pending}, config.search.promote)
        for index in pending:
            first = results[index]
            if index not in promoted and first is not None and first.outcome in (Outcome.ok, Outcome.slower):
                results[index] = first.model_copy(update={"screened": True})
        screened = {i: results[i] for i in promoted}
        promoted = built_in_full(promoted)
        members.judge(promoted, plan.timings, results)
        for index in promoted:
            results[index] = _with_screening_time(results[index], screened[index])
    else:  # too few members built to screen: each is judged in full
        members.judge(built_in_full(pending), plan.timings, results)
    return [r for r in results if r is not None]


def _build(
    task_dir: str | os.PathLike[str],
    task: Task,
    units: Sequence[Sequence[Instantiation]],
    candidates: Sequence[Candidate],
    only: Sequence[int] | None,
    config: Config,
) -> list[CandidateBuild]:
    """Each candidate built at the units numbered ``only`` (None: all), ``search.build_jobs`` nvcc
    processes in all: candidates at once, and a candidate's units at once when there are fewer
    candidates than jobs. Libraries of the units left out are "" (no case may name them)."""
    chosen = list(range(len(units))) if only is None else list(only)
    jobs = max(1, min(config.search.build_jobs, len(candidates)))
    per_candidate = max(1, config.search.build_jobs // jobs)

    def one(candidate: Candidate) -> CandidateBuild:
        made = build_candidate(
            task_dir,
            task,
            [units[u] for u in chosen],
            candidate,
            config=config,
            started=time.monotonic(),
            max_workers=per_candidate,
        )
        if made.failed is None and len(chosen) < len(units):
            libraries = [""] * len(units)
            for u, library in zip(chosen, made.libraries):
                libraries[u] = library
            made.libraries = libraries
        return made

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, candidates))


def screening(timings: Sequence[TimingCase], per_bucket: int) -> list[TimingCase]:
    """The timing cases a population is screened at: per timing dtype and token bucket
    (:data:`pipeline.buckets.BUCKETS`), the ``per_bucket`` cases nearest the bucket's median
    token count; every case when ``per_bucket`` is 0."""
    if per_bucket <= 0:
        return list(timings)
    groups: dict[tuple[str, str], list[TimingCase]] = {}
    for case in timings:
        groups.setdefault((case.dtype, bucket_for(tokens_of(case))), []).append(case)
    chosen: set[int] = set()
    for cases in groups.values():
        ordered = sorted(cases, key=tokens_of)
        middle = len(ordered) // 2
        nearest = sorted(range(len(ordered)), key=lambda i: (abs(i - middle), i))[:per_bucket]
        chosen.update(id(ordered[i]) for i in nearest)
    return [c for c in timings if id(c) in chosen]


def screening_checks(checks: Sequence[CheckCase], screen: Sequence[TimingCase]) -> list[CheckCase]:
    """The checks a member is screened with: those at the sizes it is screened at, and the
    held-out ones that need no other build unit (a fresh shape is what catches code fitted to
    the catalog). Every check when none is at those sizes. A screened member is never accepted,
    so a subset is enough to rank by; a promoted one is built and checked in full."""
    sizes = {tuple(sorted(t.sizes.items())) for t in screen}
    units = {t.unit for t in screen}
    chosen = [c for c in checks if tuple(sorted(c.sizes.items())) in sizes or (c.held_out and c.unit in units)]
    return chosen if any(not c.held_out for c in chosen) else list(checks)


def promote(screened: dict[int, Evaluation | None], count: int) -> list[int]:
    """The members (indices) timed in full: the ``count`` best by screening geomean among those
    correct and faster than the baseline there (geomean > 1), in their original order."""
    ranked = [
        (geo, index)
        for index, evaluation in screened.items()
        if evaluation is not None
        and evaluation.outcome == Outcome.ok
        and (geo := speedup_geomean(evaluation.timings) or 0.0) > 1.0
    ]
    best = sorted(ranked, key=lambda gi: (-gi[0], gi[1]))[:count]
    return sorted(index for _, index in best)


def _with_screening_time(full: Evaluation | None, first: Evaluation | None) -> Evaluation | None:
    """A promoted member's full evaluation, charged its screening pass's test time too."""
    if full is None or first is None:
        return full
    seconds = dict(full.seconds)
    screen_s = float(first.seconds.get("test", 0.0))
    seconds["screen_test"] = round(screen_s, 3)
    seconds["test"] = round(float(seconds.get("test", 0.0)) + screen_s, 3)
    return full.model_copy(update={"seconds": seconds})


class _Members:
    """The built members of one population, judged in one worker a batch at a time."""

    def __init__(
        self,
        task: Task,
        candidates: Sequence[Candidate],
        built: Sequence[CandidateBuild],
        base_libs: list[str],
        checks: list[CheckCase],
        config: Config,
    ) -> None:
        self.task, self.candidates, self.built = task, candidates, built
        self.base_libs, self.checks, self.config = base_libs, checks, config

    def judge(
        self,
        indices: Sequence[int],
        timings: Sequence[TimingCase],
        results: list[Evaluation | None],
        *,
        checks: Sequence[CheckCase] | None = None,
    ) -> None:
        """Check (with ``checks``, default all of the plan's) and time the members at ``indices``
        (at ``timings``) into ``results``; a member that takes the worker down is blamed alone
        and the rest go on in a fresh worker."""
        task, config, built, candidates = self.task, self.config, self.built, self.candidates
        pending = list(indices)
        while pending:
            request = WorkerRequest(
                mode="population",
                op_id=task.op_id,
                contract=task.contract,
                baseline_libraries=self.base_libs,
                population=[built[i].libraries for i in pending],
                checks=list(self.checks if checks is None else checks),
                timings=list(timings),
                harness=config.harness,
                device_cache_dir=str(config.cache / "device"),
                sglang_package=build_of(task).sglang_package(task, config),
            )
            workdir = worker_dir(config, task.op_id, f"population-{len(pending)}")
            timed = config.model_copy(
                update={
                    "harness": config.harness.model_copy(
                        update={"worker_timeout_s": config.harness.worker_timeout_s * len(pending)}
                    )
                }
            )
            run = run_request(request, timed, workdir)
            answered = 0
            overhead = run.seconds
            for position, index in enumerate(pending):
                path = member_path(workdir / "result.json", position)
                if not path.is_file():
                    break
                member = WorkerResult.model_validate_json(path.read_text(encoding="utf-8"))
                spent = sum(member.seconds.values())
                overhead -= spent
                finished = isolate.WorkerRun("finished", 0, spent, run.stderr_tail, member)
                results[index] = _evaluation(task, candidates[index], finished, built[index], config)
                answered += 1
            if answered < len(pending):  # the member after the last answer took the worker down with it
                index = pending[answered]
                blamed = isolate.WorkerRun(
                    "timeout" if run.status == "timeout" else "crashed",
                    run.returncode,
                    run.seconds,
                    run.stderr_tail,
                    None,
                )
                results[index] = _evaluation(task, candidates[index], blamed, built[index], config)
                answered += 1
            first = pending[0]
            evaluation = results[first]
            if evaluation is not None and overhead > 0:
                seconds = dict(evaluation.seconds)
                seconds["worker_overhead"] = round(seconds.get("worker_overhead", 0.0) + overhead, 3)
                results[first] = evaluation.model_copy(update={"seconds": seconds})
            pending = pending[answered:]


def _evaluation(
    task: Task, candidate: Candidate, run: isolate.WorkerRun, built: CandidateBuild, config: Config
) -> Evaluation:
    return to_evaluation(task.op_id, candidate.id, run, build=built.report, build_s=built.seconds, config=config)


__all__ = ["evaluate_population", "promote", "screening", "screening_checks"]
