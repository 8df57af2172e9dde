"""``evaluate_population``: many candidates of one op built at once and checked and timed in one worker.

Why: one evaluation per worker spends most of its time where no kernel runs (nvcc on
one core's worth of units, then starting torch and the CUDA context, building the
baseline's inputs and outputs). A search round has a population: its members are
built together on every core (``search.build_jobs`` nvcc processes), and one worker
checks and times them one after another against the baseline, each exactly as
:func:`optimize.harness.evaluate.evaluate` would (same cases, same outcomes).

All members share one case plan, held-out shapes included (drawn fresh for the
population), so their figures compare with each other as well as with the baseline.

Faults: the worker writes each member's result when it is known. A member that kills
the worker (a fault, an abort, the deadline: ``harness.worker_timeout_s`` per member)
is ``crashed`` or ``timeout``; the members after it run in a fresh worker. A member
that does not splice or build is ``compile_failed`` and never reaches the worker.

What must stay true: the outcome of a member does not depend on the others (a
crashed member never takes its neighbours' results with it), and this module imports
no torch.
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
    to_evaluation,
    worker_dir,
)
from optimize.harness.protocol import WorkerRequest, WorkerResult
from optimize.harness.worker import member_path
from pipeline.config import Config
from pipeline.records import Candidate, Evaluation, Task


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
    jobs = max(1, min(config.search.build_jobs, len(candidates)))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        built = list(
            pool.map(
                lambda c: build_candidate(
                    task_dir, task, plan.units, c, config=config, started=time.monotonic(), max_workers=1
                ),
                candidates,
            )
        )
    results: list[Evaluation | None] = [b.failed for b in built]
    pending = [i for i, b in enumerate(built) if b.failed is None]
    while pending:
        request = WorkerRequest(
            mode="population",
            op_id=task.op_id,
            contract=task.contract,
            baseline_libraries=base_libs,
            population=[built[i].libraries for i in pending],
            checks=plan.checks,
            timings=plan.timings,
            harness=config.harness,
            device_cache_dir=str(config.cache / "device"),
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
    return [r for r in results if r is not None]


def _evaluation(
    task: Task, candidate: Candidate, run: isolate.WorkerRun, built: CandidateBuild, config: Config
) -> Evaluation:
    return to_evaluation(task.op_id, candidate.id, run, build=built.report, build_s=built.seconds, config=config)


__all__ = ["evaluate_population"]
