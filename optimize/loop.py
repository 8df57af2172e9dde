"""The optimize loop: per op, rounds of plan -> code -> evaluate -> (repair) -> accept.

One round (``--mode multi``, the Astra-style four agents):
1. profiling: the best correct candidate so far (the baseline at first) and its
   evaluation become a compact summary, with its Nsight Compute figures where the
   backend can profile (once per candidate, stored); static features are read
   from its regions;
2. planning: the deterministic policy ranks the applicable skills, never
   offering a (skill, params) that failed or came out slower before; with an LLM
   the planner picks one and writes the plan;
3. coding: the skill's mechanical transform when the chosen option has one
   (offline, and also with an LLM: exact and free), else new region texts
   written by the LLM coding agent;
4. evaluation through the measurement backend (GPU harness or replay);
5. repair: after a compile error, crash, timeout or mismatch, up to
   ``budget.repair_attempts`` fixes by the repair agent (LLM coder only);
6. regressions: a correct candidate slower than the baseline at any catalog shape
   beyond the noise band (``harness.noise_pct``) is not accepted as is. The
   repair agent gets one attempt to add a host-side shape dispatch in the
   launcher that keeps the baseline code at those shapes (a *guard*); only a
   guarded candidate that no longer regresses can be accepted.
7. acceptance: correct, no regression, geometric-mean speedup over the catalog
   shapes above the current best's by at least the minimum gain (the rules are
   :mod:`optimize.acceptance`). The best correct candidate is the base of the next
   round.

``--mode single`` replaces steps 2, 3 and 5 with the single agent, which plans,
codes and fixes its own candidate.

After the rounds, the best candidate is validated again (``stage="final"``:
fresh held-out shapes, the harness's adversarial checks, compute-sanitizer where
the harness finds it). A candidate failing it is disqualified and the next best
is tried (at most :data:`FINAL_TRIES`). Final validation runs even when the GPU
budget is spent, because an unvalidated best is worth nothing; it is bounded.

What must stay true:
- Round records on disk are the truth. A rerun of the same run resumes: it
  redoes no finished round; candidates and evaluations are stored per id under
  the op folder, and LLM replies are cached, so a round interrupted halfway is
  redone without new GPU or token spend.
- Budgets: rounds count per op; tokens, dollars, wall and GPU seconds count per
  run and resume from what the trajectories on disk recorded (a round killed
  halfway has no line, so its spend is not on disk; its cached replies and
  stored evaluations replay free). A spent budget ends the run with a recorded
  stop reason, never mid-write. The wall budget is shared fairly: an op whose share is
  spent (:meth:`optimize.budget.Budget.begin_share`) stops with ``wall_share`` and the next
  op has its turn.
- A run belongs to one extraction of each task: resuming after the task's
  editable regions changed is refused (:class:`TrajectoryError`).
- Nothing is reported as measured that a replay produced: the run summary and
  reports carry ``simulated``.
- An op whose every LLM call failed (5xx, timeouts, unreadable bodies) and that
  found nothing faster is ``model_failed``, not ``no_improvement``: the run did
  not try what the user asked for (:meth:`Loop._model_failure`), and the command
  exits non-zero with the endpoint's error and its fix.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Sequence
from typing import Any

from optimize.agents import coding, planning, profiling, repair, single
from optimize.agents.edits import CodeResult, Dialect
from optimize.agents.profiling import ProfileSummary
from optimize.budget import BUDGETS
from optimize.hooks import named_transform
from optimize.languages import language_of
from optimize.llm.client import MeteredModel
from optimize.measure import evaluate_many_once
from optimize.policy import Decision
from optimize.reach import confine
from optimize.run_folder import OpState, clip, why
from optimize.search.rounds import search_round
from optimize.session import OP_DONE, Session
from optimize.trajectory import (
    Attempt,
    RoundRecord,
    candidate_id,
    now_iso,
)
from pipeline.buckets import bucket_of, no_go
from pipeline.errors import BudgetExhausted, ConfigError, KernelsmithError
from pipeline.records import Task
from pipeline.run_records import Candidate, Evaluation, NotEvaluated, OpSummary, Outcome, RunSummary, ShapeTiming

POLICY_LIMIT = 8  # options the planner sees (mechanical ones rank below LLM rewrites; keep some in view)
SEARCH_LIMIT = 256  # a search round spans every mechanical proposal
REPAIRABLE = {Outcome.compile_failed, Outcome.incorrect, Outcome.crashed, Outcome.timeout}


class Loop(Session):
    """Runs the rounds of every op of one run; see the module docstring."""

    def run(self, ops: Sequence[tuple[pathlib.Path, Task]]) -> RunSummary:
        """Every op in turn; writes ``<op>/report.md`` and ``summary.json``, returns the summary."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        started = now_iso()
        summaries: list[OpSummary] = []
        stopped: str | None = None
        for index, (task_dir, task) in enumerate(ops):
            self.budget.begin_share(len(ops) - index)
            if stopped is not None:
                summaries.append(
                    OpSummary(
                        op_id=task.op_id, status="skipped", stop_reason=stopped, detail=self.budget.message(stopped)
                    )
                )
                continue
            try:
                summary = self.run_op(task_dir, task)
            except ConfigError:
                raise
            except KernelsmithError as err:
                summaries.append(OpSummary(op_id=task.op_id, status="failed", detail=str(err)))
                continue
            summaries.append(summary)
            if summary.stop_reason in BUDGETS:
                stopped = summary.stop_reason
        return self.run_summary(summaries, started)

    def run_op(self, task_dir: pathlib.Path, task: Task) -> OpSummary:
        op = self.open_op(task_dir, task)
        if isinstance(op, OpSummary):
            return op
        traj = op.trajectory
        stop: str | None = None
        while stop is None:
            stop = self._stop_reason(op)
            if stop is not None:
                break
            number = traj.last_round() + 1
            self._tick(op, number)
            mark = self._meter()
            try:
                record = self._round(op, number)
            except BudgetExhausted as err:
                stop = err.where or "budget"
                traj.append(self._stop_record(op, stop, mark))
                break
            if record is None:
                stop = "no_options"
                if not self._has_stop(op, stop):
                    traj.append(self._stop_record(op, stop, mark))
                break
            traj.append(record.model_copy(update=self._spent_since(mark)))
        summary = self.close_op(op, stop)
        self._tick(op, OP_DONE)
        return summary

    def _tick(self, op: OpState, number: int) -> None:
        if self.progress is not None:
            self.progress(op.task.op_id, number, self.config.budget.rounds)

    def _stop_reason(self, op: OpState) -> str | None:
        rounds = op.trajectory.rounds()
        if len(rounds) >= self.config.budget.rounds:
            return "rounds"
        best = op.trajectory.best()
        if best is not None and best.timings and set(no_go(best.timings)) == {bucket_of(t) for t in best.timings}:
            return "at_floor"  # every bucket within AT_FLOOR of its floor: nothing left worth a round
        spent = self.budget.stop()  # before "converged": a round a budget cut short searched only part of its space
        if spent is not None:
            return spent
        last = rounds[-1] if rounds else None
        if last is not None and not last.accepted and last.attempts and all(a.agent == "search" for a in last.attempts):
            return "converged"  # the same best gives the same space: a next round would read it all back
        return None

    def _round(self, op: OpState, number: int) -> RoundRecord | None:
        """One round of the module docstring's steps (each step a method below); None when no option is left."""
        traj = op.trajectory
        best = traj.best()
        assert best is not None and best.candidate is not None
        base = op.candidate(best.candidate)
        base_eval = self._evaluate(op, base, "round")  # stored for every accepted best: no GPU time
        ncu = self.profile(op, base)
        summary = profiling.summarize(base_eval, ncu=ncu)
        features = self.hooks.features(base.regions, base_eval, op.task.build.cuda_cflags, ncu=ncu)
        model = self._model
        if self.options.mode == "multi" and model is None and self.config.search.strategy != "off":
            return self._search(op, number, base, best, features)
        language = language_of(op.task)  # the one seam: the options and the dialect the agents write in
        decisions = language.coder_decisions(
            op.task,
            op.task_dir,
            lambda: self.hooks.policy_plan(
                features, self.skills, traj.history(), llm_available=model is not None, limit=POLICY_LIMIT
            ),
            traj.history(),
        )[:POLICY_LIMIT]
        coded = self._code(op, base, features, decisions, summary, model)
        if coded is None:
            return None
        plan, result = coded
        attempts, candidate, evaluation = self._attempts(op, base, plan, result, decisions, model)
        candidate, evaluation, guarded = self._guarded(
            op, base, plan, attempts, candidate, evaluation, decisions, model
        )
        return self._record(op, number, plan, base.id, best, attempts, candidate, evaluation, guarded)

    def _code(
        self,
        op: OpState,
        base: Candidate,
        features: Any,
        decisions: Sequence[Decision],
        summary: ProfileSummary,
        model: MeteredModel | None,
    ) -> tuple[planning.Plan, CodeResult] | None:
        """Steps 2 and 3 (or the single agent's one step): the round's plan and its first code; None when
        the planner has no option left."""
        dialect = self._dialect(op)
        profile_text = summary.text()
        trajectory_text = op.trajectory.summary()
        if self.options.mode == "single":
            assert model is not None
            step = single.step(
                decisions,
                self.skills,
                base.regions,
                profile_text=profile_text,
                trajectory_text=trajectory_text,
                model=model,
                op_id=op.task.op_id,
                kinds=op.kinds,
                dialect=dialect,
            )
            return step.plan, step.result
        planned = planning.plan(
            decisions,
            self.skills,
            op_id=op.task.op_id,
            region_names=list(base.regions),
            profile_text=profile_text,
            trajectory_text=trajectory_text,
            model=model,
            dialect=dialect,
        )
        if planned is None:
            return None
        plan = planned
        skill = self.skills.get(plan.skill)
        # A mechanical option is applied by its transform even when an LLM is at hand:
        # exact, reproducible, and it keeps the model's budget for rewrites that need judgement.
        mechanical = model is None or getattr(plan.decision, "mode", None) == "transform"
        transform = self.hooks.transform(skill, features) if mechanical else None
        if mechanical and transform is None and plan.decision is not None and plan.decision.transform:
            transform = named_transform(plan.decision.transform)  # a Triton tunable: no skill file
        result = coding.code(
            plan,
            skill,
            base.regions,
            profile_text=profile_text,
            trajectory_text=trajectory_text,
            model=None if mechanical else model,
            transform=transform,
            op_id=op.task.op_id,
            kinds=op.kinds,
            dialect=dialect,
        )
        return plan, result

    def _attempts(
        self,
        op: OpState,
        base: Candidate,
        plan: planning.Plan,
        result: CodeResult,
        decisions: Sequence[Decision],
        model: MeteredModel | None,
    ) -> tuple[list[Attempt], Candidate | None, Evaluation | None]:
        """Steps 4 and 5: the code evaluated, and repaired while it fails and fixes are left; the attempts,
        and the last candidate with its evaluation (None when nothing new was measured)."""
        attempts: list[Attempt] = []
        candidate: Candidate | None = None
        evaluation: Evaluation | None = None
        fixes = 0
        max_fixes = self.config.budget.repair_attempts if model is not None else 0
        while True:
            if not result.edited:
                attempts.append(Attempt(agent=result.agent, status=result.status, detail=clip(result.detail)))
                break
            assert result.regions is not None
            candidate = self._candidate(op, base, plan, result)
            if candidate.id == base.id:  # nothing left to measure
                foreign = result.regions != base.regions  # every edit was to another op's regions
                detail = (
                    f"the edit changes only code this op never runs: {', '.join(op.foreign.names())}"
                    if foreign
                    else "the edit gives back the base's own code"
                )
                attempts.append(Attempt(agent=result.agent, status=NotEvaluated.no_change, detail=detail))
                candidate, evaluation = None, None
                break
            if op.stored_evaluation(candidate.id, "round") is not None:
                # The edit reproduces code already measured (e.g. a launch-bounds edit that
                # undoes the best's min-blocks, giving back the baseline): nothing new to
                # learn, and its stored evaluation may be the baseline's own, which carries
                # no speedups. Found on the H200, 2026-11-29.
                attempts.append(
                    Attempt(
                        agent=result.agent,
                        status=NotEvaluated.no_change,
                        candidate=candidate.id,
                        detail=f"the edit reproduces candidate {candidate.id}, already evaluated",
                    )
                )
                candidate, evaluation = None, None
                break
            evaluation = self._evaluate(op, candidate, "round")
            attempts.append(
                Attempt(
                    agent=result.agent,
                    status="edited",
                    candidate=candidate.id,
                    outcome=evaluation.outcome,
                    detail=clip(why(evaluation)),
                )
            )
            if evaluation.outcome not in REPAIRABLE or fixes >= max_fixes:
                break
            fixes += 1
            result = self._fix(op, plan, candidate, evaluation, fixes, max_fixes, decisions)
        return attempts, candidate, evaluation

    def _guarded(
        self,
        op: OpState,
        base: Candidate,
        plan: planning.Plan,
        attempts: list[Attempt],
        candidate: Candidate | None,
        evaluation: Evaluation | None,
        decisions: Sequence[Decision],
        model: MeteredModel | None,
    ) -> tuple[Candidate | None, Evaluation | None, bool]:
        """Step 6: a correct candidate that regresses somewhere gets one guard (with an LLM); the guarded
        candidate stands for the round when it regresses nowhere. Its attempt is added to ``attempts``."""
        guarded = False
        if evaluation is not None and candidate is not None and evaluation.outcome in (Outcome.ok, Outcome.slower):
            slow = self.regressed(evaluation.timings)
            if slow and model is not None:
                guard = self._guard(op, plan, candidate, evaluation, slow, decisions)
                if guard.edited:
                    guarded_candidate = self._candidate(op, base, plan, guard)
                    guarded_eval = self._evaluate(op, guarded_candidate, "round")
                    attempts.append(
                        Attempt(
                            agent=guard.agent,
                            status="edited",
                            candidate=guarded_candidate.id,
                            outcome=guarded_eval.outcome,
                            detail=clip(why(guarded_eval)),
                        )
                    )
                    if guarded_eval.outcome == Outcome.ok and not self.regressed(guarded_eval.timings):
                        candidate, evaluation, guarded = guarded_candidate, guarded_eval, True
                else:
                    attempts.append(Attempt(agent=guard.agent, status=guard.status, detail=clip(guard.detail)))
        return candidate, evaluation, guarded

    def _search(self, op: OpState, number: int, base: Candidate, best: RoundRecord, features: Any) -> RoundRecord:
        """A round of the offline coder: a search over composed transforms (:mod:`optimize.search`), spanned
        and pre-checked by the task's language (:mod:`optimize.harness.languages`: a Triton point is compiled
        for sm_90 on this machine before it may reach the backend)."""
        language = language_of(op.task)  # the one seam: a Triton task's tunables, or the policy's proposals
        decisions = language.search_decisions(
            op.task,
            op.task_dir,
            lambda: self.hooks.policy_plan(
                features, self.skills, op.trajectory.history(), llm_available=False, limit=SEARCH_LIMIT
            ),
        )
        found = search_round(
            base,
            best.speedup_geomean,
            decisions,
            config=self.config,
            coder=self.options.coder,
            measure=lambda members: evaluate_many_once(
                op,
                members,
                self.backend,
                self.budget,
                precheck=lambda c: language.build.precheck(op.task_dir, op.task, c),
                jobs=self.config.search.build_jobs,
            ),
            seed=number,
            foreign=op.foreign,
        )
        attempts, member = found.outcome()
        if member is None and found.budget_spent:  # measure left members unmeasured: only when stop() says why
            reason = self.budget.stop() or "wall_share"
            raise BudgetExhausted(self.budget.message(reason), fix=self.budget.fix(reason), where=reason)
        chosen, evaluation = (member.candidate, member.evaluation) if member is not None else (None, None)
        return self._record(op, number, found.plan(member), base.id, best, attempts, chosen, evaluation, False)

    def _dialect(self, op: OpState) -> Dialect:
        """The task's language's dialect with its prompt facts (a Triton task's tunables, configs, buckets)."""
        language = language_of(op.task)
        return dataclasses.replace(language.dialect, facts=language.prompt_facts(op.task, op.task_dir))

    def _candidate(self, op: OpState, base: Candidate, plan: planning.Plan, result: CodeResult) -> Candidate:
        assert result.regions is not None
        regions = confine(base.regions, result.regions, op.foreign)  # other ops' code stays as it is
        candidate = Candidate(
            op_id=op.task.op_id,
            id=candidate_id(regions),
            parent=base.id,
            regions=regions,
            skill=plan.skill,
            params=plan.params,
            coder=f"{self.options.coder}:{result.agent}",
            rationale=plan.text,
        )
        op.save_candidate(candidate)
        return candidate

    def _fix(
        self,
        op: OpState,
        plan: planning.Plan,
        candidate: Candidate,
        evaluation: Evaluation,
        attempt: int,
        max_attempts: int,
        decisions: Sequence[Decision],
    ) -> CodeResult:
        model = self._model
        assert model is not None
        if self.options.mode == "single":
            return self._single_retry(
                op, plan, candidate, decisions, single.fix_feedback(evaluation, attempt, max_attempts)
            )
        return repair.repair(
            plan,
            candidate.regions,
            evaluation,
            op_id=op.task.op_id,
            attempt=attempt,
            max_attempts=max_attempts,
            trajectory_text=op.trajectory.summary(),
            model=model,
            kinds=op.kinds,
            dialect=self._dialect(op),
        )

    def _guard(
        self,
        op: OpState,
        plan: planning.Plan,
        candidate: Candidate,
        evaluation: Evaluation,
        slow: Sequence[ShapeTiming],
        decisions: Sequence[Decision],
    ) -> CodeResult:
        model = self._model
        assert model is not None
        if self.options.mode == "single":
            return self._single_retry(op, plan, candidate, decisions, single.guard_feedback(slow))
        return repair.repair(
            plan,
            candidate.regions,
            evaluation,
            op_id=op.task.op_id,
            attempt=1,
            max_attempts=1,
            trajectory_text=op.trajectory.summary(),
            model=model,
            kinds=op.kinds,
            slower=slow,
            baseline_regions=op.baseline_regions,
            dialect=self._dialect(op),
        )

    def _single_retry(
        self,
        op: OpState,
        plan: planning.Plan,
        candidate: Candidate,
        decisions: Sequence[Decision],
        feedback: str,
    ) -> CodeResult:
        """The single agent asked again about its own candidate (its fix and its guard); the plan stays."""
        assert self._model is not None
        return single.step(
            decisions,
            self.skills,
            candidate.regions,
            op_id=op.task.op_id,
            profile_text="(unchanged)",
            trajectory_text=op.trajectory.summary(),
            model=self._model,
            feedback=feedback,
            previous=plan,
            kinds=op.kinds,
            dialect=self._dialect(op),
        ).result
