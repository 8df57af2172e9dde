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
  stop reason, never mid-write.
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
import json
import pathlib
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypedDict

from contract.completion import Completion
from contract.layout import COMPLETION_FILE as RECORD_FILE
from contract.layout import baseline_regions, completed_in_run, load_task, read_task_files
from optimize import report
from optimize.acceptance import judge_final, judge_round, regressed
from optimize.agents import coding, planning, profiling, repair, single, testing
from optimize.agents.edits import CodeResult
from optimize.backends import Backend
from optimize.budget import Budget
from optimize.errors import TaskMissing, TrajectoryError
from optimize.harness.baseline_repair import BaselineRun, repair_baseline
from optimize.harness.errors import BaselineError
from optimize.hooks import CaseValidator, Hooks
from optimize.llm.client import MeteredModel, Model
from optimize.measure import evaluate_many_once, evaluate_once, profile_once
from optimize.policy import Decision
from optimize.run_folder import OpState, clip, model_failure, op_summary, why
from optimize.search.rounds import search_round
from optimize.trajectory import (
    Attempt,
    RoundOutcome,
    RoundRecord,
    Trajectory,
    candidate_id,
    now_iso,
    regions_hash,
)
from pipeline.config import Config
from pipeline.errors import BudgetExhausted, ConfigError, KernelsmithError
from pipeline.records import (
    Candidate,
    Evaluation,
    OpSummary,
    Outcome,
    RunSummary,
    ShapeTiming,
    Task,
    read_record,
    write_record,
)

FINAL_TRIES = 3  # candidates tried in final validation before keeping the baseline
POLICY_LIMIT = 8  # options the planner sees (mechanical ones rank below LLM rewrites; keep some in view)
SEARCH_LIMIT = 256  # a search round spans every mechanical proposal
REPAIRABLE = {Outcome.compile_failed, Outcome.incorrect, Outcome.crashed, Outcome.timeout}

#: ``progress(op_id, round number, rounds per op)`` before each round (the command's progress bars).
Progress = Callable[[str, int, int], None]


class Spent(TypedDict):
    """What a stretch of the loop spent, as a round record carries it."""

    wall_s: float
    tokens: int
    cost_usd: float
    gpu_s: float


#: What one baseline run gave the repair loop: its evaluation, or the error the backend raised.
BaselineOutcome = Evaluation | BaselineError


# --------------------------------------------------------------------------- the task folder


def load_op_task(config: Config, op_id: str) -> tuple[pathlib.Path, Task]:
    task_dir = config.work / "tasks" / op_id
    if not (task_dir / "task.json").is_file():
        raise TaskMissing(
            f"no extracted task for {op_id} at {task_dir}",
            fix=f"run `kernelsmith extract --ops {op_id}` first",
        )
    return task_dir, load_task(task_dir)


# --------------------------------------------------------------------------- the loop


Mode = Literal["multi", "single"]  # `--mode`
MODES: tuple[Mode, ...] = ("multi", "single")
Coder = Literal["llm", "offline"]  # `--coder`
CODERS: tuple[Coder, ...] = ("llm", "offline")


@dataclasses.dataclass
class LoopOptions:
    run: str
    mode: Mode = "multi"
    coder: Coder = "offline"


class Loop:
    """Runs the rounds of every op of one run; see the module docstring."""

    def __init__(
        self,
        config: Config,
        options: LoopOptions,
        backend: Backend,
        *,
        model: Model | None = None,
        hooks: Hooks | None = None,
        progress: Progress | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if options.mode == "single" and (model is None or options.coder != "llm"):
            raise ConfigError(
                "--mode single is an LLM agent and needs an LLM", fix="configure llm.base_url, or use --mode multi"
            )
        if options.coder == "llm" and model is None:
            raise ConfigError("--coder llm needs an LLM endpoint", fix="configure llm.base_url, or use --coder offline")
        self.config = config
        self.options = options
        self.backend = backend
        self.hooks = hooks or Hooks()
        self.run_dir = config.work / "runs" / options.run
        self.clock = clock
        self.progress = progress
        self.budget = Budget(config, spent=self._spent_on_disk(), clock=clock)
        self.raw_model = model if options.coder == "llm" else None
        self.skills = self.hooks.load_skills()
        self._model: MeteredModel | None = None

    # ------------------------------------------------------------------ helpers

    def _spent_on_disk(self) -> dict[str, float]:
        total = {"tokens": 0.0, "cost_usd": 0.0, "wall_s": 0.0, "gpu_s": 0.0}
        if self.run_dir.is_dir():
            for path in sorted(self.run_dir.glob("*/trajectory.jsonl")):
                for key, value in Trajectory(path).spent().items():
                    total[key] += value
        return total

    def _metered(self, op: OpState) -> MeteredModel | None:
        if self.raw_model is None:
            return None
        return MeteredModel(self.raw_model, self.budget, log_path=op.dir / "llm.jsonl")

    def _evaluate(self, op: OpState, candidate: Candidate, stage: Literal["round", "final"]) -> Evaluation:
        """Evaluated once per (candidate, stage) (:func:`optimize.measure.evaluate_once`)."""
        return evaluate_once(op, candidate, stage, self.backend, self.budget)

    def _profile(self, op: OpState, candidate: Candidate) -> dict[str, float]:
        """Nsight Compute figures, once per candidate (:func:`optimize.measure.profile_once`)."""
        return profile_once(op, candidate, self.backend, self.budget, enabled=self.config.harness.ncu_profile)

    def _meter(self) -> tuple[float, int, float, float]:
        model = self._model
        return (
            self.clock(),
            model.usage.tokens if model else 0,
            model.usage.cost_usd if model else 0.0,
            self.backend.gpu_s,
        )

    def _spent_since(self, mark: tuple[float, int, float, float]) -> Spent:
        now = self._meter()
        return {
            "wall_s": round(now[0] - mark[0], 3),
            "tokens": now[1] - mark[1],
            "cost_usd": now[2] - mark[2],
            "gpu_s": round(now[3] - mark[3], 3),
        }

    def regressed(self, timings: Sequence[ShapeTiming]) -> list[ShapeTiming]:
        """Shapes slower than the baseline beyond the noise band (:func:`optimize.acceptance.regressed`)."""
        return regressed(timings, self.config.harness.noise_pct)

    # ------------------------------------------------------------------ run

    def run(self, ops: Sequence[tuple[pathlib.Path, Task]]) -> RunSummary:
        """Every op in turn; writes ``<op>/report.md`` and ``summary.json``, returns the summary."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        started = now_iso()
        summaries: list[OpSummary] = []
        stopped: str | None = None
        for task_dir, task in ops:
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
            if summary.stop_reason in ("tokens", "dollars", "wall_time", "gpu_time"):
                stopped = summary.stop_reason
        meta = self.run_dir / "run.json"
        if meta.exists():
            started = json.loads(meta.read_text(encoding="utf-8")).get("started_at", started)
        result = RunSummary(
            run=self.options.run,
            mode=self.options.mode,
            coder=self.options.coder,
            backend=self.backend.describe(),
            simulated=self.backend.simulated,
            device=getattr(self.backend, "device", None),
            started_at=started,
            finished_at=now_iso(),
            tokens=self.budget.tokens,
            cost_usd=round(self.budget.cost_usd, 6),
            wall_s=round(self.budget.wall_s, 3),
            gpu_s=round(self.budget.gpu_s, 3),
            ops=summaries,
        )
        report.write_summary(self.run_dir, result)
        return result

    def run_op(self, task_dir: pathlib.Path, task: Task) -> OpSummary:
        files = read_task_files(task_dir, task)
        op = OpState(self.run_dir, task_dir, task, files, baseline_regions(files, task))
        self._model = self._metered(op)
        op.task = self._completed(op)
        traj = op.trajectory
        recorded = traj.baseline()
        if recorded is not None and recorded.regions_hash != regions_hash(op.baseline_regions):
            raise TrajectoryError(
                f"the task of {task.op_id} changed since run {self.options.run} started (its editable regions differ)",
                fix="start a new --run for the re-extracted task",
            )
        if recorded is None:
            reason = self.budget.exhausted()
            if reason is not None:
                return OpSummary(
                    op_id=task.op_id, status="skipped", stop_reason=reason, detail=self.budget.message(reason)
                )
            try:
                self._baseline(op)
            except BudgetExhausted as err:
                spent = err.where or "budget"
                return OpSummary(op_id=task.op_id, status="skipped", stop_reason=spent, detail=err.message)
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
        if stop in ("rounds", "tokens", "dollars", "wall_time", "gpu_time", "converged") and not self._has_stop(
            op, stop
        ):
            traj.append(self._stop_record(op, stop, self._meter()))
        best = self._finalize(op)
        summary = op_summary(op, stop, best)
        failure = model_failure(self._model, op)
        if failure is not None and summary.status == "no_improvement":
            summary = summary.model_copy(update={"status": "model_failed", "detail": failure})
        elif failure is not None:
            summary = summary.model_copy(update={"detail": f"{summary.detail} (every LLM call failed: {failure})"})
        final = op.stored_evaluation(best.candidate, "final") if best is not None and best.candidate else None
        text = report.op_report(
            op.task.op_id,
            traj,
            summary,
            final=final,
            backend=self.backend.describe(),
            simulated=self.backend.simulated,
        )
        report.write_op_report(op.dir / "report.md", text)
        return summary

    def _has_stop(self, op: OpState, reason: str) -> bool:
        """A stop line with this reason is already on disk after the last round (a rerun adds none)."""
        for record in reversed(op.trajectory.records):
            if record.kind in ("round", "baseline"):
                return False
            if record.kind == "stop" and record.stop_reason == reason:
                return True
        return False

    def _tick(self, op: OpState, number: int) -> None:
        if self.progress is not None:
            self.progress(op.task.op_id, number, self.config.budget.rounds)

    def _stop_reason(self, op: OpState) -> str | None:
        rounds = op.trajectory.rounds()
        if len(rounds) >= self.config.budget.rounds:
            return "rounds"
        last = rounds[-1] if rounds else None
        if last is not None and not last.accepted and last.attempts and all(a.agent == "search" for a in last.attempts):
            return "converged"  # the same best gives the same space: a next round would read it all back
        return self.budget.exhausted()

    def _stop_record(self, op: OpState, reason: str, mark: tuple[float, int, float, float]) -> RoundRecord:
        return RoundRecord(
            kind="stop",
            op_id=op.task.op_id,
            round=op.trajectory.last_round(),
            mode=self.options.mode,
            coder=self.options.coder,
            outcome=RoundOutcome.budget_exhausted if reason not in ("no_options", "converged") else RoundOutcome.ok,
            stop_reason=reason,
            detail=self.budget.message(reason),
            best=op.trajectory.best_id(),
            **self._spent_since(mark),
        )

    def _completed(self, op: OpState) -> Task:
        """The task with what its contract left open filled (rules, then the testing
        agent's model), decided once per run and kept in ``contract_completion.json``
        so a resumed run calls the kernel exactly as before."""
        recorded = completed_in_run(op.task, op.dir)
        if recorded is not None:
            return recorded
        task, record = testing.complete_contract(op.task, op.task_dir, model=self._model)
        write_record(record, op.dir / RECORD_FILE)
        return task

    # ------------------------------------------------------------------ baseline

    def _baseline(self, op: OpState) -> None:
        mark = self._meter()
        plan_path = op.dir / "test_plan.json"
        if not plan_path.exists():
            validate: CaseValidator | None = getattr(self.backend, "validate_cases", None)
            plan = testing.plan_tests(
                op.task,
                held_out=self.config.harness.held_out_shapes,
                model=self._model,
                validate=(lambda cases: validate(op.task_dir, op.task, cases)) if validate else None,
            )
            write_record(plan, plan_path)
        candidate = op.baseline_candidate()
        op.save_candidate(candidate)
        evaluation = self._baseline_evaluation(op, candidate)
        op.trajectory.append(
            RoundRecord(
                kind="baseline",
                op_id=op.task.op_id,
                round=0,
                mode=self.options.mode,
                coder=self.options.coder,
                candidate=candidate.id,
                regions_hash=regions_hash(candidate.regions),
                outcome=RoundOutcome.ok,
                timings=evaluation.timings,
                speedup_geomean=1.0,
                speedup_min=1.0,
                best=candidate.id,
                detail=evaluation.detail,
                **self._spent_since(mark),
            )
        )

    def _baseline_evaluation(self, op: OpState, candidate: Candidate) -> Evaluation:
        """The baseline's own evaluation. The baseline is the oracle: where it contradicts
        its contract (writes an input, never writes an output, its check demands another
        dtype), the contract is fixed (``completion.baseline_fixes``), the fix appended to
        the run's ``contract_completion.json`` and the baseline evaluated again, at most
        ``completion.BASELINE_REPAIRS`` times (:func:`optimize.harness.baseline_repair.repair_baseline`,
        the loop the sweep uses too); the stale evaluation is kept as ``*.superseded-<attempt>.json``."""

        def run_once(task: Task, attempt: int) -> BaselineRun[BaselineOutcome]:
            op.task = task
            try:
                evaluation = self._evaluate(op, candidate, "round")
            except BaselineError as err:
                return BaselineRun(err, passed=False, evidence=err.evidence, detail=err.detail)
            passed = evaluation.outcome == Outcome.ok
            return BaselineRun(evaluation, passed=passed, evidence=evaluation.role_evidence, detail=evaluation.detail)

        def on_fixed(task: Task, more: Completion, attempt: int) -> str:
            path = op.dir / RECORD_FILE
            record = read_record(Completion, path)
            write_record(record.model_copy(update={"filled": [*record.filled, *more.filled], "open": more.open}), path)
            stale = op.eval_path(candidate.id, "round")
            if stale.exists():
                stale.rename(stale.with_name(f"{stale.stem}.superseded-{attempt}.json"))
            return ""

        repaired = repair_baseline(op.task, op.task_dir, run_once, on_fixed=on_fixed)
        op.task = repaired.task
        outcome = repaired.last.result
        if isinstance(outcome, BaselineError):
            raise outcome
        if outcome.outcome != Outcome.ok:
            raise BaselineError(
                f"the baseline of {op.task.op_id} did not pass its own evaluation ({outcome.outcome.value})",
                fix="check the task (`kernelsmith extract`) and the harness on this machine",
                detail=outcome.detail,
            )
        return outcome

    # ------------------------------------------------------------------ one round

    def _round(self, op: OpState, number: int) -> RoundRecord | None:
        traj = op.trajectory
        best = traj.best()
        assert best is not None and best.candidate is not None
        base = op.candidate(best.candidate)
        base_eval = self._evaluate(op, base, "round")  # stored for every accepted best: no GPU time
        ncu = self._profile(op, base)
        summary = profiling.summarize(base_eval, ncu=ncu)
        features = self.hooks.features(base.regions, base_eval, op.task.build.cuda_cflags, ncu=ncu)
        model = self._model
        decisions = self.hooks.policy_plan(
            features, self.skills, traj.history(), llm_available=model is not None, limit=POLICY_LIMIT
        )
        if self.options.mode == "multi" and model is None and self.config.search.strategy != "off":
            return self._search(op, number, base, best, features)
        profile_text = summary.text()
        trajectory_text = traj.summary()
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
            )
            plan, result = step.plan, step.result
        else:
            planned = planning.plan(
                decisions,
                self.skills,
                op_id=op.task.op_id,
                region_names=list(base.regions),
                profile_text=profile_text,
                trajectory_text=trajectory_text,
                model=model,
            )
            if planned is None:
                return None
            plan = planned
            skill = self.skills.get(plan.skill)
            # A mechanical option is applied by its transform even when an LLM is at hand:
            # exact, reproducible, and it keeps the model's budget for rewrites that need judgement.
            mechanical = model is None or getattr(plan.decision, "mode", None) == "transform"
            transform = self.hooks.transform(skill, features) if mechanical else None
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
            )

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
            if candidate.id != base.id and op.stored_evaluation(candidate.id, "round") is not None:
                # The edit reproduces code already measured (e.g. a launch-bounds edit that
                # undoes the best's min-blocks, giving back the baseline): nothing new to
                # learn, and its stored evaluation may be the baseline's own, which carries
                # no speedups. Found on the H200, 2026-11-29.
                attempts.append(
                    Attempt(
                        agent=result.agent,
                        status="no_change",
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
        return self._record(op, number, plan, base.id, best, attempts, candidate, evaluation, guarded)

    def _search(self, op: OpState, number: int, base: Candidate, best: RoundRecord, features: Any) -> RoundRecord:
        """A round of the offline coder: a search over composed transforms (:mod:`optimize.search`)."""
        decisions = self.hooks.policy_plan(
            features, self.skills, op.trajectory.history(), llm_available=False, limit=SEARCH_LIMIT
        )
        found = search_round(
            base,
            best.speedup_geomean,
            decisions,
            config=self.config,
            coder=self.options.coder,
            measure=lambda members: evaluate_many_once(op, members, self.backend, self.budget),
            seed=number,
        )
        attempts, member = found.outcome()
        if member is None and found.budget_spent:
            raise BudgetExhausted(self.budget.message(self.budget.exhausted() or "gpu_time"), where="gpu_time")
        chosen, evaluation = (member.candidate, member.evaluation) if member is not None else (None, None)
        return self._record(op, number, found.plan(member), base.id, best, attempts, chosen, evaluation, False)

    def _candidate(self, op: OpState, base: Candidate, plan: planning.Plan, result: CodeResult) -> Candidate:
        assert result.regions is not None
        candidate = Candidate(
            op_id=op.task.op_id,
            id=candidate_id(result.regions),
            parent=base.id,
            regions=result.regions,
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
        ).result

    def _record(
        self,
        op: OpState,
        number: int,
        plan: planning.Plan,
        base_id: str,
        best: RoundRecord,
        attempts: list[Attempt],
        candidate: Candidate | None,
        evaluation: Evaluation | None,
        guarded: bool,
    ) -> RoundRecord:
        fields: dict[str, Any] = dict(
            kind="round",
            op_id=op.task.op_id,
            round=number,
            mode=self.options.mode,
            coder=self.options.coder,
            skill=plan.skill,
            params=plan.params,
            plan=plan.text,
            base=base_id,
            attempts=attempts,
        )
        if evaluation is None or candidate is None:
            last = attempts[-1] if attempts else None
            outcome = RoundOutcome(last.status) if last and last.status != "edited" else RoundOutcome.malformed_reply
            return RoundRecord(**fields, outcome=outcome, detail=last.detail if last else "", best=best.candidate)
        verdict = judge_round(evaluation, best.speedup_geomean, self.config.harness.noise_pct)
        slow = verdict.slow
        return RoundRecord(
            **fields,
            candidate=candidate.id,
            regions_hash=regions_hash(candidate.regions),
            outcome=verdict.outcome,
            detail=clip(verdict.detail),
            timings=evaluation.timings,
            speedup_geomean=verdict.speedup_geomean,
            speedup_min=verdict.speedup_min,
            regressed_shapes=[f"{t.label} {t.dtype}" for t in slow],
            guarded=guarded,
            accepted=verdict.accepted,
            best=candidate.id if verdict.accepted else best.candidate,
        )

    # ------------------------------------------------------------------ final validation

    def _finalize(self, op: OpState) -> RoundRecord | None:
        """Validate the best candidates (best first); returns the round of the validated best."""
        traj = op.trajectory
        for _ in range(FINAL_TRIES):
            ranked = traj.ranked()
            if not ranked:
                return None
            top = ranked[0]
            assert top.candidate is not None
            done = [r for r in traj.finals() if r.candidate == top.candidate]
            if done:
                if done[-1].outcome == RoundOutcome.ok:
                    op.write_best(top)
                    return top
                continue  # pragma: no cover - ranked() already leaves disqualified ones out
            mark = self._meter()
            candidate = op.candidate(top.candidate)
            evaluation = self._evaluate(op, candidate, "final")
            verdict = judge_final(evaluation, self.config.harness.noise_pct)
            traj.append(
                RoundRecord(
                    kind="final",
                    op_id=op.task.op_id,
                    round=top.round,
                    mode=self.options.mode,
                    coder=self.options.coder,
                    skill=top.skill,
                    params=top.params,
                    candidate=top.candidate,
                    regions_hash=top.regions_hash,
                    outcome=verdict.outcome,
                    detail=clip(verdict.detail),
                    timings=evaluation.timings,
                    speedup_geomean=verdict.speedup_geomean,
                    speedup_min=verdict.speedup_min,
                    guarded=top.guarded,
                    accepted=verdict.accepted,
                    best=top.candidate if verdict.accepted else None,
                    **self._spent_since(mark),
                )
            )
            if verdict.accepted:
                op.write_best(top)
                return top
        return None
