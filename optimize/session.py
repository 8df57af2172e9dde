"""The per-op life every coder shares: open (contract completed, baseline evaluated), rounds recorded, close.

Why a room of its own: the optimize loop (:mod:`optimize.loop`) writes its rounds with
its own coders (the offline search, the LLM agents), and an outside agent (Claude
Code, Codex, a person, through :mod:`agent`) writes them itself; both must open an op,
evaluate, judge and record a round, and validate the best in the same way, so that a
round means the same thing whoever wrote its code.

- :meth:`Session.open_op`: the op's run folder, its completed contract
  (``contract_completion.json``, decided once per run) and the baseline's evaluation
  (the oracle; a baseline that contradicts its contract has the contract fixed), by the
  steps of :mod:`optimize.baseline`, recorded as round 0;
- :meth:`Session.submit`: one round from region texts an outside agent wrote;
- :meth:`Session.close_op`: final validation of the best candidates, the op's summary
  line and its report.

What must stay true: the records on disk are the truth (a rerun of the same run
resumes from them), budgets are charged as the spending happens, and nothing a replay
produced is reported as measured (see :mod:`optimize.loop`).
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypedDict

from contract.layout import TRAJECTORY_FILE, baseline_regions, has_task, load_task, read_task_files
from contract.layout import run_dir as layout_run_dir
from contract.layout import task_dir as layout_task_dir
from optimize import report
from optimize.acceptance import judge_final, judge_reach, regressed, round_record
from optimize.agents import planning
from optimize.backends import Backend
from optimize.baseline import baseline_evaluation, completed_task, with_dropped, write_test_plan
from optimize.budget import BUDGETS, FINISHED, Budget
from optimize.errors import TaskMissing, TrajectoryError
from optimize.hooks import Hooks
from optimize.languages import language_of
from optimize.llm.client import MeteredModel, Model
from optimize.measure import evaluate_once, profile_once
from optimize.reach_ops import Placed, place
from optimize.run_folder import OpState, clip, model_failure, op_summary, read_run_meta, why
from optimize.trajectory import (
    Attempt,
    RoundRecord,
    Trajectory,
    candidate_id,
    now_iso,
    regions_hash,
)
from pipeline.config import Config
from pipeline.errors import BudgetExhausted, ConfigError, KernelsmithError
from pipeline.records import Task
from pipeline.run_records import (
    Candidate,
    Evaluation,
    NotEvaluated,
    OpSummary,
    Outcome,
    ReachVerdict,
    RunSummary,
    ShapeTiming,
)

FINAL_TRIES = 3  # candidates tried in final validation before keeping the baseline


def _held(geomean: float | None, evaluation: Evaluation) -> str:
    """A companion's verdict that held, in words: its geomean, or that it has no timed shape to have one
    (an op no catalog model calls: apply_rope_inplace_with_kvcache on the H100, 2026-12-07, read "0.000x")."""
    if geomean is None:
        return f"correct ({evaluation.checks_passed} checks); not timed: no catalog shape"
    return f"correct, geomean {geomean:.3f}x"


#: ``progress(op_id, round number, rounds per op)`` before each round, and with round number
#: :data:`OP_DONE` once the op's rounds are over (the command's progress bars: a finished op's bar
#: stops its clock; on the H200, 2026-12-05, silu_and_mul's showed 4:38 for a 138 s round).
Progress = Callable[[str, int, int], None]
OP_DONE = 0


class Spent(TypedDict):
    """What a stretch of the loop spent, as a round record carries it."""

    wall_s: float
    tokens: int
    cost_usd: float
    gpu_s: float


# --------------------------------------------------------------------------- the task folder


def load_op_task(config: Config, op_id: str) -> tuple[pathlib.Path, Task]:
    task_dir = layout_task_dir(config.work, op_id)
    if not has_task(task_dir):
        raise TaskMissing(
            f"no extracted task for {op_id} at {task_dir}",
            fix=f"run `kernelsmith extract --ops {op_id}` first",
        )
    return task_dir, load_task(task_dir)


# --------------------------------------------------------------------------- the session


Mode = Literal["multi", "single"]  # `--mode`
MODES: tuple[Mode, ...] = ("multi", "single")
Coder = Literal["llm", "offline", "external"]  # `--coder`; external: an outside agent submits (agent/)
CODERS: tuple[Coder, ...] = ("llm", "offline")


@dataclasses.dataclass
class LoopOptions:
    run: str
    mode: Mode = "multi"
    coder: Coder = "offline"


class Session:
    """One run's ops: opening, recording and closing them; see the module docstring."""

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
        self.run_dir = layout_run_dir(config.work, options.run)
        self.clock = clock
        self.progress = progress
        self.budget = Budget(config, spent=self._spent_on_disk(), clock=clock)
        self.raw_model = model if options.coder == "llm" else None
        self.skills = self.hooks.load_skills(config.search.skills)
        self._model: MeteredModel | None = None

    def _spent_on_disk(self) -> dict[str, float]:
        total = {"tokens": 0.0, "cost_usd": 0.0, "wall_s": 0.0, "gpu_s": 0.0}
        if self.run_dir.is_dir():
            for path in sorted(
                [*self.run_dir.glob(f"*/{TRAJECTORY_FILE}"), *self.run_dir.glob(f"*/reach/*/{TRAJECTORY_FILE}")]
            ):
                for key, value in Trajectory(path).spent().items():
                    total[key] += value
        return total

    def _metered(self, op: OpState) -> MeteredModel | None:
        if self.raw_model is None:
            return None
        return MeteredModel(self.raw_model, self.budget, log_path=op.dir / "llm.jsonl")

    def _evaluate(self, op: OpState, candidate: Candidate, stage: Literal["round", "final"]) -> Evaluation:
        """Evaluated once per (candidate, stage) (:func:`optimize.measure.evaluate_once`); a new candidate's
        round goes through its language's check on this machine first (a Triton candidate that does not
        parse or compile for sm_90 is ``compile_failed`` without GPU time; CUDA has none)."""
        language = language_of(op.task)
        precheck = None
        if stage == "round" and not candidate.is_baseline:
            precheck = lambda c: language.build.precheck(op.task_dir, op.task, c)  # noqa: E731
        return evaluate_once(op, candidate, stage, self.backend, self.budget, precheck=precheck)

    def profile(self, op: OpState, candidate: Candidate) -> dict[str, float]:
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

    def run_summary(self, summaries: list[OpSummary], started: str | None = None) -> RunSummary:
        """The run's ``summary.json`` over ``summaries`` (written; the start time is run.json's when it exists)."""
        started = started or now_iso()
        started = str(read_run_meta(self.run_dir).get("started_at") or started)
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

    def open_op(self, task_dir: pathlib.Path, task: Task) -> OpState | OpSummary:
        """The op's run folder, its completed contract and its baseline evaluated (once per run);
        an :class:`OpSummary` ("skipped") when a budget is spent before the baseline."""
        files = read_task_files(task_dir, task)
        op = op_state(self.run_dir, task_dir, task, files, baseline_regions(files, task))
        self._model = self._metered(op)
        op.task = completed_task(op, self.backend, self._model)
        recorded = op.trajectory.baseline()
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
        return op

    def submit(self, op: OpState, regions: dict[str, str], *, rationale: str, client: str) -> RoundRecord:
        """One round whose code an outside agent wrote (``kernelsmith agent submit``, the MCP server):
        evaluated, judged and recorded exactly as any round, as coder ``external:<client>``."""
        traj = op.trajectory
        best = traj.best()
        assert best is not None and best.candidate is not None
        base = op.candidate(best.candidate)
        unknown = sorted(set(regions) - set(base.regions))
        if unknown:
            raise ConfigError(
                f"{op.task.op_id} has no editable region {', '.join(unknown)}",
                fix=f"use the region names the task shows: {', '.join(sorted(base.regions))}",
            )
        same = language_of(op.task).dialect.same  # whitespace the compiler does not read (Python reads indentation)
        theirs = op.foreign.touched(base.regions, {**base.regions, **regions}, same)
        if theirs:  # optimize.reach: no check of this op runs them, so the edit would go unmeasured
            raise ConfigError(
                f"{op.task.op_id}: {', '.join(theirs)} belongs to another op in the same file; "
                "no check of this op runs it, so an edit there would reach the patch unmeasured",
                fix=f"edit only the code this op runs: {', '.join(sorted(set(base.regions) - op.foreign.regions))}, "
                f"leaving as they are {', '.join(op.foreign.names())}",
            )
        mark, number, coder = self._meter(), traj.last_round() + 1, f"external:{client}"
        merged = {**base.regions, **regions}
        plan = planning.Plan(skill="external", params={}, text=rationale, reason=coder, source="external", option=0)
        candidate = Candidate(
            op_id=op.task.op_id,
            id=candidate_id(merged),
            parent=base.id,
            regions=merged,
            coder=coder,
            rationale=rationale,
        )
        if all(same(base.regions[k], merged[k]) for k in merged):
            attempts = [
                Attempt(
                    agent="external",
                    status=NotEvaluated.no_change,
                    detail="the regions are the best's, whitespace aside",
                )
            ]
            record = self._record(op, number, plan, base.id, best, attempts, None, None, False)
        else:
            op.save_candidate(candidate)
            evaluation = self._evaluate(op, candidate, "round")
            attempts = [
                Attempt(
                    agent="external",
                    status="edited",
                    candidate=candidate.id,
                    outcome=evaluation.outcome,
                    detail=clip(why(evaluation)),
                )
            ]
            record = self._record(op, number, plan, base.id, best, attempts, candidate, evaluation, False)
        record = record.model_copy(update={"coder": coder, **self._spent_since(mark)})
        traj.append(record)
        return record

    def close_op(self, op: OpState, stop: str | None) -> OpSummary:
        """Final validation of the best, the op's summary and its report."""
        traj = op.trajectory
        if stop in ("rounds", "wall_share", *BUDGETS, *FINISHED) and not self._has_stop(op, stop):  # one stop line
            traj.append(self._stop_record(op, stop, self._meter()))
        stop_detail = self.budget.message(stop) if stop else ""  # before the final validation moves the clock
        best = self._finalize(op)
        summary = op_summary(op, stop, best).model_copy(update={"stop_detail": stop_detail})
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

    # ------------------------------------------------------------------ the ops that share the code

    def _judge_reach(self, op: OpState, candidate: Candidate) -> list[ReachVerdict]:
        """``candidate`` judged at every other op that runs code it changes, at that op's own shapes, as
        final validation judges it at its own (:mod:`optimize.reach_ops`). Each companion's folder is
        ``<op>/reach/<companion>/`` (its completed contract, baseline and evaluations), so a rerun reads
        them back and integrate never mistakes it for an op of the run."""
        from extract.command import ensure_tasks

        ensure = lambda ids: ensure_tasks(self.config, ids)  # noqa: E731
        return [
            self._judge_at(op, candidate, placed)
            for placed in place(self.config.work, op.task, op.baseline_regions, candidate.regions, ensure)
        ]

    def _judge_at(self, op: OpState, candidate: Candidate, placed: Placed) -> ReachVerdict:
        comp, moved = placed.companion, placed.moved
        if moved is None or comp.task is None or comp.task_dir is None:
            return ReachVerdict(op_id=comp.op_id, status="not_judged", detail=f"no task: {comp.why}")
        if moved.status != "reached":
            return ReachVerdict(op_id=comp.op_id, status=moved.status, detail=moved.detail)
        task = comp.task
        there = op_state(op.dir / "reach", comp.task_dir, task, placed.files, placed.baseline)
        try:
            there.task = completed_task(there, self.backend, self._model)
            if there.trajectory.baseline() is None:
                self._baseline(there)
        except KernelsmithError as err:  # BaselineError, a contract that cannot be completed, a spent budget
            return ReachVerdict(
                op_id=task.op_id,
                status="not_judged",
                regions=moved.touched,
                detail=f"its baseline could not be evaluated: {err.message}",
            )
        transplanted = Candidate(
            op_id=task.op_id,
            id=candidate_id(moved.regions),
            parent=there.baseline_candidate().id,
            regions=moved.regions,
            skill=candidate.skill,
            params=candidate.params,
            coder=candidate.coder,
            rationale=f"{op.task.op_id}'s candidate {candidate.id}, judged where {task.op_id} runs it",
            steps=candidate.steps,
        )
        # a harness evaluation as final validation's (fresh held-out shapes, the timed graphs checked), without
        # its sanitizer passes: those ran on the candidate's own op, over the same code
        evaluation = self._evaluate(there, transplanted, "round")
        verdict = judge_final(evaluation, self.config.harness.noise_pct)
        return ReachVerdict(
            op_id=task.op_id,
            status="held" if verdict.accepted else "failed",
            detail=verdict.detail if not verdict.accepted else _held(verdict.speedup_geomean, evaluation),
            regions=moved.touched,
            outcome=evaluation.outcome,
            speedup_geomean=verdict.speedup_geomean,
            speedup_min=verdict.speedup_min,
            regressed_shapes=[f"{t.label} {t.dtype}" for t in verdict.slow],
        )

    def _has_stop(self, op: OpState, reason: str) -> bool:
        """A stop line with this reason is already on disk after the last round (a rerun adds none)."""
        for record in reversed(op.trajectory.records):
            if record.kind in ("round", "baseline"):
                return False
            if record.kind == "stop" and record.stop_reason == reason:
                return True
        return False

    def _stop_record(self, op: OpState, reason: str, mark: tuple[float, int, float, float]) -> RoundRecord:
        return RoundRecord(
            kind="stop",
            op_id=op.task.op_id,
            round=op.trajectory.last_round(),
            mode=self.options.mode,
            coder=self.options.coder,
            outcome=Outcome.ok if reason in FINISHED else Outcome.budget_exhausted,
            stop_reason=reason,
            detail=self.budget.message(reason),
            best=op.trajectory.best_id(),
            **self._spent_since(mark),
        )

    def _baseline(self, op: OpState) -> None:
        mark = self._meter()
        write_test_plan(op, self.backend, self._model, held_out=self.config.harness.held_out_shapes)
        candidate = op.baseline_candidate()
        op.save_candidate(candidate)
        evaluation = baseline_evaluation(op, candidate, lambda c: self._evaluate(op, c, "round"))
        op.trajectory.append(
            RoundRecord(
                kind="baseline",
                op_id=op.task.op_id,
                round=0,
                mode=self.options.mode,
                coder=self.options.coder,
                candidate=candidate.id,
                regions_hash=regions_hash(candidate.regions),
                outcome=Outcome.ok,
                timings=evaluation.timings,
                speedup_geomean=1.0,
                speedup_min=1.0,
                best=candidate.id,
                detail=with_dropped(evaluation.detail, op),
                **self._spent_since(mark),
            )
        )

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
        return round_record(fields, best, candidate, evaluation, guarded, self.config.harness.noise_pct)

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
                if done[-1].outcome == Outcome.ok:
                    op.write_best(top)
                    return top
                continue  # pragma: no cover - ranked() already leaves disqualified ones out
            mark = self._meter()
            candidate = op.candidate(top.candidate)
            evaluation = self._evaluate(op, candidate, "final")
            verdict = judge_final(evaluation, self.config.harness.noise_pct)
            reach: list[ReachVerdict] = []
            if verdict.accepted and self.config.search.judge_companions:
                reach = self._judge_reach(op, candidate)
                verdict = judge_reach(verdict, reach)
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
                    reach=reach,
                    **self._spent_since(mark),
                )
            )
            if verdict.accepted:
                op.write_best(top)
                return top
        return None


def op_state(
    run_dir: pathlib.Path, task_dir: pathlib.Path, task: Task, files: dict[str, bytes], regions: dict[str, str]
) -> OpState:
    """An op's run folder, with the code only other ops run as the task's language finds it."""
    return OpState(run_dir, task_dir, task, files, regions, language_of(task).foreign_code(task, regions, files))
