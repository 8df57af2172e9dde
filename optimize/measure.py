"""The loop's measurements: each candidate evaluated once per stage and profiled once, stored, GPU time charged.

A search population (:func:`evaluate_many_once`) is measured in one backend call, after the
language's check on this machine (:meth:`optimize.harness.languages.Build.precheck`: a Triton
point compiled for sm_90) has taken out the members it refuses, at no GPU cost.

Why: GPU time is the scarcest budget and a run must resume without measuring
again. Every evaluation and Nsight Compute profile the loop asks for goes
through here: a stored one is read back, a new one is measured through the
backend, its GPU seconds are charged to the run's :class:`~optimize.budget.Budget`
and the result is written beside the op's candidates before it is used.

What must stay true:
- One evaluation per (candidate, stage) and one profile per candidate, ever, in a
  run: a stored result is never redone (a profile is stored whatever its status,
  so an unavailable or failing profiler costs one attempt per candidate).
- Only backends with a ``profile`` method profile anything (the GPU backend where
  ncu is installed), and only with ``harness.ncu_profile`` on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from contract.layout import profile_path
from optimize.backends import Backend
from optimize.budget import Budget
from optimize.harness.tools import NcuResult
from optimize.hooks import Profiler
from optimize.run_folder import OpState
from pipeline.record_io import read_record, write_record
from pipeline.run_records import Candidate, Evaluation

#: A check before any GPU time: the candidate's evaluation when it already refuses it, else None.
Precheck = Callable[[Candidate], Evaluation | None]


def evaluate_once(
    op: OpState,
    candidate: Candidate,
    stage: Literal["round", "final"],
    backend: Backend,
    budget: Budget,
    *,
    precheck: Precheck | None = None,
) -> Evaluation:
    """``candidate``'s evaluation at ``stage``: the stored one, else measured, charged and stored.

    ``precheck``: asked first for a new candidate (an LLM coder's, an outside agent's); the evaluation it
    answers (a Triton candidate that does not parse or compile: ``compile_failed``) is stored as the
    candidate's and the backend is never called, so it costs no GPU time."""
    stored = op.stored_evaluation(candidate.id, stage)
    if stored is not None:
        return stored
    op.save_candidate(candidate)
    refused = precheck(candidate) if precheck is not None else None
    if refused is not None:
        write_record(refused, op.eval_path(candidate.id, stage))
        return refused
    before = backend.gpu_s
    evaluation = backend.evaluate(op.task_dir, op.task, candidate, stage=stage)
    budget.charge_gpu(backend.gpu_s - before)
    write_record(evaluation, op.eval_path(candidate.id, stage))
    return evaluation


def evaluate_many_once(
    op: OpState,
    candidates: Sequence[Candidate],
    backend: Backend,
    budget: Budget,
    *,
    precheck: Precheck | None = None,
    jobs: int = 1,
) -> list[Evaluation | None]:
    """Round evaluations of a population: stored ones read back, the others measured together, charged, stored.

    ``precheck``: each new candidate is checked first, ``jobs`` checks at once (it must be safe to
    call from threads); one it refuses has that evaluation stored (``compile_failed``, ``timeout``)
    and never reaches the backend. None for the candidates left
    unmeasured because a budget or the op's wall share is spent (:meth:`Budget.stop`, checked
    before the population is measured: a population is never cut in the middle). A measured
    population's wall time goes to :meth:`Budget.note_population`: the next is expected to take as long.
    """
    out: list[Evaluation | None] = [op.stored_evaluation(c.id, "round") for c in candidates]
    fresh = [i for i, e in enumerate(out) if e is None]
    if not fresh or budget.stop() is not None:  # a run-wide budget, or the op's wall share
        return out
    started = budget.clock()
    for i in fresh:
        op.save_candidate(candidates[i])
    if precheck is not None:
        # each check runs its compiler in subprocesses (Triton's for sm_90, each bucket its own), so
        # threads overlap them: on the H200 machine (2026-12-05) 16 coarsened merge_state points one
        # after another took most of a round's 240 s before any was timed
        with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(fresh)))) as pool:
            verdicts = list(pool.map(precheck, [candidates[i] for i in fresh]))
        for i, refused in zip(list(fresh), verdicts):
            if refused is not None:
                write_record(refused, op.eval_path(candidates[i].id, "round"))
                out[i] = refused
                fresh.remove(i)
    if not fresh:
        return out
    before = backend.gpu_s
    evaluations = backend.evaluate_many(op.task_dir, op.task, [candidates[i] for i in fresh])
    budget.charge_gpu(backend.gpu_s - before)
    budget.note_population(budget.clock() - started)
    for i, evaluation in zip(fresh, evaluations):
        write_record(evaluation, op.eval_path(candidates[i].id, "round"))
        out[i] = evaluation
    return out


def profile_once(
    op: OpState, candidate: Candidate, backend: Backend, budget: Budget, *, enabled: bool
) -> dict[str, float]:
    """Nsight Compute figures of ``candidate`` (stored beside its evaluations); {} where none are measured."""
    profile: Profiler | None = getattr(backend, "profile", None)
    if profile is None or not enabled:
        return {}
    path = profile_path(op.dir, candidate.id)
    if path.exists():
        return read_record(NcuResult, path).metrics()
    before = backend.gpu_s
    result = profile(op.task_dir, op.task, None if candidate.is_baseline else candidate)
    budget.charge_gpu(backend.gpu_s - before)
    write_record(result, path)  # an unavailable/failed profile says why there
    return result.metrics()
