"""The verbs an outside coding agent uses, over one optimize run's records.

Each verb returns JSON-ready data (dicts, lists, strings), so the MCP tools and the
command line print the same thing. A run is opened per op on first use: the task's
contract completed and its baseline evaluated once (through the backend: the GPU
harness, or a replay file for tests), then every verb reads the run folder.

Without a backend (a machine with no GPU and no ``--replay``: issue 47) the verbs that only
read still answer, from the task and the run's records: ``ops``, ``trajectory``, ``show``
and ``brief`` (an op the run has not opened: the task itself, ``evaluated: false``, and the
skills its code's static features call for); ``build`` never needed one. The verbs that
measure (``submit``, ``finish``, ``integrate``) raise :class:`~optimize.errors.GpuRequired`
with the fix before any work (:meth:`AgentRun.measuring`).

- ``ops``: every extracted task, with its baseline's time ÷ floor per token bucket
  where this run evaluated it, and the best speedup so far;
- ``show``: the regions with line numbers, which of them this op may edit (``editable``)
  and the code only other ops run (``not_editable``, with who runs it: ``submit`` refuses a
  change there), the contract, the shapes and buckets, ptxas resources, the latest Nsight
  Compute digest, what was tried; the task's ``language`` and, for Triton, its ``facts`` (the
  tunables with their values, autotune configs, launch keywords, the wrapper's token count and
  the token buckets);
- ``brief``: the bottleneck (the profiling summary), the skills that apply with
  their method text, and what not to repeat;
- ``submit``: new region texts and a rationale -> the round's verdict, the first
  failing check, per-shape speedups, spread and time ÷ floor;
- ``build``: the candidate compiled as the harness compiles it, on any machine with nvcc
  (no GPU, nothing recorded): ptxas resources or the compiler's errors; a Triton task's
  candidate through Triton's compile for sm_90 on the CPU (the check the loop makes before any
  GPU time), the parser's or Triton's errors in the region's own line numbers;
- ``trajectory``, ``finish`` (final validation, best/, summary.json, report.md) and
  ``integrate`` (the patch, SGLang's check, the PR; a GPU machine's step).

What must stay true: nothing here judges a candidate; the session does, exactly as
for the optimize loop's own coders.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence

from agent.answers import (
    Avoid,
    Brief,
    BuildAnswer,
    IntegrateAnswer,
    OpRow,
    SkillRow,
    SubmitAnswer,
    TaskView,
    TrajectoryRow,
)
from agent.tasks import load_op, not_editable
from contract import layout
from contract.layout import (
    TRAJECTORY_FILE,
    baseline_regions,
    completed_in_run,
    has_task,
    profile_path,
    read_task_files,
    tasks_root,
)
from contract.layout import run_dir as layout_run_dir
from optimize.agents import profiling
from optimize.backends import Backend
from optimize.errors import GpuRequired, TaskMissing, TrajectoryError
from optimize.harness.tools import NcuResult
from optimize.hooks import Hooks
from optimize.languages import language_of
from optimize.policy import Decision
from optimize.reach import Foreign
from optimize.run_folder import OpState, run_meta_check
from optimize.session import LoopOptions, Session, op_state
from optimize.skills import Skill
from optimize.trajectory import FAILED, Trajectory, now_iso, regions_hash
from pipeline.buckets import by_bucket
from pipeline.config import Config
from pipeline.errors import BudgetExhausted, ConfigError
from pipeline.record_io import read_record
from pipeline.records import Task
from pipeline.run_records import Candidate, Evaluation, OpSummary

#: The verbs that measure, and what each measures: without a backend they refuse before any work.
MEASURING = {
    "submit": "it evaluates the candidate",
    "finish": "final validation measures each op's best",
    "integrate": "it checks the patch through SGLang's own op",
}
READING = "ops, show, brief, trajectory and build"  # what works without a GPU, for the fix lines


def numbered(text: str) -> str:
    return "\n".join(f"{i:4d}  {line}" for i, line in enumerate(text.splitlines(), 1))


def show_task(config: Config, op_id: str, why: str) -> TaskView:
    """``show`` without an evaluation: the task's own regions, contract and shapes.

    Why: a coder writes its candidate where it is (often a machine without a GPU) and has it
    evaluated on the GPU machine; what it needs to write one is in the task, not the run. The
    figures a run adds (buckets, ptxas, ncu, what was tried) are left empty, and ``evaluated``
    says why.
    """
    folder, task, regions, foreign, marks = _baseline_of(config, op_id)
    return {**_task_view(op_id, "baseline", task, folder, regions, foreign, marks), "why_not_evaluated": why}


def _baseline_of(config: Config, op_id: str) -> tuple[pathlib.Path, Task, dict[str, str], Foreign, dict[str, str]]:
    """An op's task as extracted, with no run: its folder, the task, its baseline regions, the code only other
    ops run and why each piece of it may not be edited (what ``show`` and ``brief`` answer without a GPU)."""
    folder, task = load_op(config, op_id)
    files = read_task_files(folder, task)
    regions = baseline_regions(files, task)
    foreign = language_of(task).foreign_code(task, regions, files)
    return folder, task, regions, foreign, not_editable(config, task, foreign, regions, files)


def _task_view(
    op_id: str,
    best: str,
    task: Task,
    folder: pathlib.Path,
    regions: dict[str, str],
    foreign: Foreign,
    marks: dict[str, str],
    evaluation: Evaluation | None = None,
    ncu: object = None,
    tried: str | None = None,
) -> TaskView:
    """What ``show`` answers, with or without a run: the regions numbered, which of them this op may edit
    (``editable``: every region but the code only other ops run; ``not_editable``: that code, whole regions
    and functions inside this op's own regions, each with why, as :func:`agent.tasks.not_editable` says),
    the contract, the shapes, and what an evaluation adds (buckets, ptxas) where there is one."""
    return {
        "op": op_id,
        "best": best,
        "evaluated": evaluation is not None,
        "language": task.language,
        "regions": {name: numbered(text) for name, text in regions.items()},
        "editable": [name for name in regions if name not in foreign.regions],
        "not_editable": marks,
        "facts": language_of(task).task_facts(task, folder),
        "contract": task.contract.model_dump(mode="json"),
        "shapes": [s.label for s in task.shapes],
        "buckets": by_bucket(evaluation.timings) if evaluation else {},
        "ptxas": [r.model_dump(mode="json") for r in evaluation.build.resources]
        if evaluation and evaluation.build
        else [],
        "ncu": ncu,
        "tried": tried if tried is not None else [],
    }


def build_regions(config: Config, op_id: str, regions: dict[str, str]) -> BuildAnswer:
    """``build``: the candidate compiled with nvcc exactly as the harness would build it, no GPU needed.

    Why: on the H200 (2026-12-02) the first thing an outside coder wanted before spending
    device time was to know its candidate compiles for sm_90a and what ptxas says of it
    (registers, spills); with only ``submit``, a typo costs a GPU evaluation. The build uses
    the harness's own path (:func:`optimize.harness.evaluate.build_units` over
    :func:`~optimize.harness.evaluate.canonical_units`: the harness's units, the task's recipe,
    the shared build cache), so a candidate
    that builds here is the one the GPU builds, and its build is then a cache hit there
    only when the toolchains match. A Triton task's check is its language's
    (:meth:`optimize.harness.languages.Build.compile_check`: the regions spliced, parsed, and every
    launched kernel through ``triton.compile`` for sm_90, the check the loop makes before any GPU
    time). Nothing is recorded in any run. ``foreign`` names the code of other ops the regions
    change (:mod:`optimize.reach`), which ``submit`` would refuse: known before any GPU time.
    """
    from optimize.harness.evaluate import build_units, canonical_units

    if not isinstance(regions, dict) or not regions or not all(isinstance(v, str) for v in regions.values()):
        raise ConfigError("a build needs region texts", fix='give {"<region name>": "<new text>", ...}')
    folder, task = load_op(config, op_id)
    known = {span.name for span in task.editable}
    unknown = sorted(set(regions) - known)
    if unknown:
        raise ConfigError(
            f"{op_id} has no editable region {', '.join(unknown)}",
            fix=f"use the region names `agent show {op_id}` lists: {', '.join(sorted(known))}",
        )
    language = language_of(task)
    files = read_task_files(folder, task)
    base = baseline_regions(files, task)
    foreign = language.foreign_code(task, base, files).touched(base, {**base, **regions}, language.dialect.same)
    report = language.build.compile_check(folder, task, regions)  # Triton: triton.compile for sm_90 on the CPU
    if report is None:  # CUDA: nvcc over the harness's own units
        report, _ = build_units(folder, task, canonical_units(task), config=config, regions=dict(regions))
    return {
        "op": op_id,
        "language": task.language,
        "ok": report.ok,
        "seconds": round(report.seconds, 2),
        "cached": report.cached,
        "ptxas": [r.model_dump(mode="json") for r in report.resources],
        "errors": report.stderr if not report.ok else "",
        "foreign": foreign,
    }


class AgentRun:
    """One optimize run driven by an outside coder; see the module doc.

    ``backend`` None: no GPU here and no ``--replay`` (``no_gpu`` says why): the reading verbs answer
    from the task and the run's records, the measuring ones raise :class:`GpuRequired` first.
    """

    def __init__(
        self, config: Config, run: str, backend: Backend | None, *, client: str = "cli", no_gpu: str = ""
    ) -> None:
        self.config, self.run, self.backend, self.client = config, run, backend, client
        self.no_gpu = no_gpu or "no measurement backend (no GPU found, no --replay given)"
        self.run_dir = layout_run_dir(config.work, run)
        self.hooks = Hooks()
        self._session: Session | None = None
        self._skill_library: dict[str, Skill] | None = None
        self._open: dict[str, OpState] = {}

    # ------------------------------------------------------------------ helpers

    def measuring(self, verb: str) -> None:
        """Raise :class:`GpuRequired` for ``verb`` (one of :data:`MEASURING`) where there is no backend.

        Why before any work: a refusal after an op was opened or the region files (stdin) read costs the
        coder for nothing; the refusal names what works here instead (issue 47)."""
        if self.backend is None:
            raise GpuRequired(
                f"`{verb}` needs a CUDA GPU ({MEASURING.get(verb, 'it measures')}), "
                f"and this machine has none usable: {self.no_gpu}",
                fix="run it on the GPU machine, or pass --replay FILE to replay recorded timings (a simulation: "
                f"nothing is measured); {READING} work here without a GPU",
            )

    @property
    def session(self) -> Session:
        """The session that evaluates (its backend needed: see :meth:`measuring`)."""
        if self._session is None:
            self.measuring("evaluate")
            assert self.backend is not None
            options = LoopOptions(run=self.run, mode="multi", coder="external")
            self._session = Session(self.config, options, self.backend, hooks=self.hooks)
        return self._session

    def _start(self) -> None:
        assert self.backend is not None
        meta = {
            "run": self.run,
            "mode": "multi",
            "coder": "external",
            "backend": self.backend.name,
            "replay": str(getattr(self.backend, "path", "")) or None,
            "started_at": now_iso(),
        }
        run_meta_check(self.run_dir, meta)

    def op(self, op_id: str) -> OpState:
        """The op opened in this run (its baseline evaluated on first use: the backend's work)."""
        if op_id in self._open:
            return self._open[op_id]
        session = self.session
        self._start()
        folder, task = load_op(self.config, op_id)
        opened = session.open_op(folder, task)
        if isinstance(opened, OpSummary):
            raise BudgetExhausted(opened.detail or "a budget is spent", where=opened.stop_reason or "budget")
        self._open[op_id] = opened
        return opened

    def _recorded(self, op_id: str) -> OpState | None:
        """The op as this run recorded it, read without a backend; None where the run has not opened it.

        The same state :meth:`optimize.session.Session.open_op` gives a recorded op (its completed
        contract, its trajectory), and nothing is written."""
        folder, task = load_op(self.config, op_id)
        baseline = self._trajectory(op_id).baseline()
        if baseline is None:
            return None
        files = read_task_files(folder, task)
        op = op_state(self.run_dir, folder, task, files, baseline_regions(files, task))
        if baseline.regions_hash != regions_hash(op.baseline_regions):
            raise TrajectoryError(
                f"the task of {op_id} changed since run {self.run} started (its editable regions differ)",
                fix="start a new --run for the re-extracted task",
            )
        op.task = completed_in_run(task, op.dir) or task
        return op

    def _opened(self, op_id: str) -> OpState | None:
        """The op with a backend (opened, evaluated once); without one, as recorded (None: not opened)."""
        return self.op(op_id) if self.backend is not None else self._recorded(op_id)

    def _trajectory(self, op_id: str) -> Trajectory:
        return Trajectory(self.run_dir / op_id / TRAJECTORY_FILE)

    def _best_eval(self, op: OpState) -> Evaluation | None:
        best = op.trajectory.best()
        return op.stored_evaluation(best.candidate, "round") if best and best.candidate else None

    def _marks(self, op: OpState) -> dict[str, str]:
        return not_editable(self.config, op.task, op.foreign, op.baseline_regions, op.files)

    def _ncu(self, op: OpState, candidate: Candidate, ncu_path: pathlib.Path) -> dict[str, float]:
        """The candidate's Nsight Compute figures where the run has them (never measured here)."""
        if not ncu_path.is_file():
            return {}
        if self.backend is not None:
            return self.session.profile(op, candidate)
        return read_record(NcuResult, ncu_path).metrics() if self.config.harness.ncu_profile else {}

    # ------------------------------------------------------------------ verbs

    def ops(self) -> list[OpRow]:
        root = tasks_root(self.config.work)
        out = []
        for folder in sorted(root.iterdir()) if root.is_dir() else []:
            if not has_task(folder):
                continue
            op_id = folder.name
            traj = self._trajectory(op_id)
            base = traj.baseline() if traj.path.is_file() else None
            best = traj.best() if base is not None else None
            row: OpRow = {"op": op_id, "evaluated_in_run": base is not None}
            if base is not None:
                row["baseline_by_bucket"] = by_bucket(base.timings)
                row["best_speedup_geomean"] = best.speedup_geomean if best else 1.0
                row["rounds"] = len(traj.rounds())
            out.append(row)
        return out

    def _best(self, op: OpState) -> tuple[Candidate, Evaluation | None, pathlib.Path]:
        """The op's best candidate so far, its round evaluation, and where its ncu profile is (or would be)."""
        best = op.trajectory.best()
        assert best is not None and best.candidate is not None
        candidate = op.candidate(best.candidate)
        return candidate, self._best_eval(op), profile_path(op.dir, candidate.id)

    def show(self, op_id: str) -> TaskView:
        op = self._opened(op_id)
        if op is None:
            return show_task(self.config, op_id, self.no_gpu)
        candidate, evaluation, ncu_path = self._best(op)
        ncu = json.loads(ncu_path.read_text(encoding="utf-8")) if ncu_path.is_file() else None
        return _task_view(
            op_id,
            candidate.id,
            op.task,
            op.task_dir,
            candidate.regions,
            op.foreign,
            self._marks(op),
            evaluation,
            ncu,
            op.trajectory.summary(),
        )

    def brief(self, op_id: str) -> Brief:
        """The bottleneck, the skills that apply and what not to repeat; where the run has no evaluation of
        the op (no backend here, op not opened) the skills its code's static features call for."""
        op = self._opened(op_id)
        if op is None:
            return self._static_brief(op_id)
        candidate, evaluation, ncu_path = self._best(op)
        ncu = self._ncu(op, candidate, ncu_path)
        summary = profiling.summarize(evaluation, ncu=ncu) if evaluation else None
        features = (
            self.hooks.features(candidate.regions, evaluation, op.task.build.cuda_cflags, ncu=ncu)
            if evaluation
            else None
        )
        history = op.trajectory.history()
        decisions = (
            self.hooks.policy_plan(features, self._skills(), history, llm_available=True, limit=12)
            if features is not None
            else []
        )
        avoid: list[Avoid] = [
            {"skill": h.skill, "params": h.params, "outcome": h.outcome.value} for h in history if h.outcome in FAILED
        ]
        return {
            "op": op_id,
            "evaluated": evaluation is not None,
            "bottleneck": summary.text() if summary else "",
            "skills": self._skill_rows(decisions),
            "do_not_repeat": avoid,
            "not_editable": self._marks(op),
        }

    def _static_brief(self, op_id: str) -> Brief:
        """``brief`` of an op no evaluation of which is at hand: the policy over the baseline's static features.

        Why: the planning brief is what a coder reads before writing; the skills the code's own text
        calls for (vector loads, launch bounds, PDL) need no GPU, only the bottleneck does."""
        _, task, regions, _, marks = _baseline_of(self.config, op_id)
        features = self.hooks.features(regions, None, task.build.cuda_cflags, ncu={})
        decisions = self.hooks.policy_plan(features, self._skills(), [], llm_available=True, limit=12)
        return {
            "op": op_id,
            "evaluated": False,
            "why_not_evaluated": self.no_gpu,
            "bottleneck": "",
            "skills": self._skill_rows(decisions),
            "do_not_repeat": [],
            "not_editable": marks,
        }

    def _skills(self) -> dict[str, Skill]:
        """The skill library the session plans with (loaded here the same way where there is no session)."""
        if self._session is not None:
            return self._session.skills
        if self._skill_library is None:
            self._skill_library = self.hooks.load_skills(self.config.search.skills)
        return self._skill_library

    def _skill_rows(self, decisions: Sequence[Decision]) -> list[SkillRow]:
        skills = self._skills()
        rows: list[SkillRow] = []
        for d in decisions:
            skill = skills.get(d.skill)
            method = skill.method.strip() if skill is not None else ""
            rows.append({"skill": d.skill, "params": d.params, "why": d.reason, "method": method})
        return rows

    def submit(self, op_id: str, regions: dict[str, str], rationale: str) -> SubmitAnswer:
        self.measuring("submit")
        if not isinstance(regions, dict) or not regions or not all(isinstance(v, str) for v in regions.values()):
            raise ConfigError("a submission needs region texts", fix='give {"<region name>": "<new text>", ...}')
        op = self.op(op_id)
        record = self.session.submit(op, dict(regions), rationale=rationale, client=self.client)
        evaluation = op.stored_evaluation(record.candidate, "round") if record.candidate else None
        answer: SubmitAnswer = {
            "op": op_id,
            "round": record.round,
            "candidate": record.candidate,
            "outcome": record.outcome.value,
            "accepted": record.accepted,
            "detail": record.detail,
            "speedup_geomean": record.speedup_geomean,
            "regressed_shapes": record.regressed_shapes,
        }
        if evaluation is not None:
            answer["evaluation"] = evaluation.detail
            answer["shapes"] = [
                {
                    "shape": t.label,
                    "dtype": t.dtype,
                    "speedup": t.speedup,
                    "spread_pct": t.spread_pct,
                    "time_over_floor": t.over_floor,  # None: the op is not byte-bound
                }
                for t in evaluation.timings
            ]
        return answer

    def trajectory(self, op_id: str) -> list[TrajectoryRow]:
        traj = self._trajectory(op_id)
        if not traj.path.is_file():
            load_op(self.config, op_id)  # an unknown op says so, with the closest ids
            raise TaskMissing(
                f"run {self.run} has no op {op_id} yet (no {traj.path})",
                fix=f"`kernelsmith agent submit {op_id} ...` opens it (or `agent show {op_id}` with a GPU or --replay)",
            )
        return [
            {
                "kind": r.kind,
                "round": r.round,
                "coder": r.coder,
                "skill": r.skill,
                "outcome": r.outcome.value,
                "speedup_geomean": r.speedup_geomean,
                "accepted": r.accepted,
                "candidate": r.candidate,
                "detail": r.detail,
            }
            for r in traj.records
        ]

    def finish(self, op_ids: Sequence[str] | None = None) -> dict[str, object]:
        """Final validation of each op's best, then the run's summary.json (what integrate reads)."""
        self.measuring("finish")
        ops = list(op_ids or sorted(p.parent.name for p in self.run_dir.glob(f"*/{TRAJECTORY_FILE}")))
        if not ops:
            raise TaskMissing(f"run {self.run} has no op yet", fix="`kernelsmith agent submit OP ...` opens one")
        summaries = [self.session.close_op(self.op(op_id), "external") for op_id in ops]
        result = self.session.run_summary(summaries)
        return json.loads(result.model_dump_json())

    def integrate(self) -> IntegrateAnswer:
        """The patch, SGLang's check and the PR for this run (the integrate stage; GPU for the checks)."""
        from integrate import command as integrate_command

        self.measuring("integrate")
        if not layout.summary_path(self.run_dir).is_file():
            raise ConfigError(f"run {self.run} is not finished", fix="`kernelsmith agent finish` validates it first")
        code = int(integrate_command.run(integrate_command.IntegrateOptions(run=self.run), self.config) or 0)
        pr = layout.integrate_folder(self.config.work, self.run).pr
        return {"exit_code": code, "pr": str(pr) if pr.is_file() else None}


__all__ = ["MEASURING", "AgentRun", "build_regions", "numbered", "show_task"]
