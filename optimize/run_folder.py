"""The optimize run folder (``work/runs/<run>/``) as the loop keeps it: one op's folder, best/, run.json.

Why: a run folder is read by people, by a resumed run and by ``integrate``. Its
layout and the rules of writing it are kept out of the loop's round logic:
:class:`OpState` is one op's folder (trajectory, candidates, evaluations per
stage, ``best/``), ``run.json`` holds the options a run was started with (a resume
with other options is refused, since its rounds would mix), :func:`op_summary` is
the op's line of ``summary.json``, and :func:`why` / :func:`clip` are the one-line
reasons a round record carries.

What must stay true:
- A candidate and an evaluation are written once per id (and stage); a resumed
  run reads them back instead of measuring again.
- ``best/`` appears whole or not at all (staged, then :func:`pipeline.record_io.replace_dir`),
  and is readable by others (``integrate`` may run as another user).
- ``run.json`` is written once, by rename, when the run starts; it is never edited.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import tempfile
from collections.abc import Mapping, Sequence

from contract import layout
from contract.layout import TRAJECTORY_FILE
from extract.splice import apply_regions
from optimize.llm.client import MeteredModel, Model
from optimize.reach import Foreign
from optimize.trajectory import RoundRecord, Trajectory, candidate_id
from pipeline.errors import ConfigError, KernelsmithError, StaleRecordError
from pipeline.record_io import file_mode, read_record, replace_dir, write_record
from pipeline.records import Span, Task
from pipeline.run_records import Candidate, Evaluation, NotEvaluated, OpSummary, Outcome


class OpState:
    """One op's folder under the run: trajectory, candidates, evaluations, best/.

    ``files`` are the task's source files (package-relative path -> bytes) and
    ``baseline_regions`` the editable spans' texts cut from them, as the loop read
    them from the task folder."""

    def __init__(
        self,
        run_dir: pathlib.Path,
        task_dir: pathlib.Path,
        task: Task,
        files: dict[str, bytes],
        baseline_regions: dict[str, str],
        foreign: Foreign,
    ) -> None:
        self.task_dir = task_dir
        self.task = task
        self.dir = run_dir / task.op_id
        self.trajectory = Trajectory(self.dir / TRAJECTORY_FILE)
        self.files = files
        self.baseline_regions = baseline_regions
        self.kinds = {span.name: span.kind for span in task.editable}
        # code only other ops run (optimize.reach, as the task's language finds it:
        # optimize.languages.Language.foreign_code): no candidate may change it unmeasured
        self.foreign = foreign

    def baseline_candidate(self) -> Candidate:
        return Candidate(
            op_id=self.task.op_id,
            id=candidate_id(self.baseline_regions),
            parent=None,
            regions=dict(self.baseline_regions),
            coder="baseline",
            rationale="the SGLang kernel as extracted",
        )

    def save_candidate(self, candidate: Candidate) -> None:
        path = layout.candidate_path(self.dir, candidate.id)
        if not path.exists():
            write_record(candidate, path)

    def candidate(self, cid: str) -> Candidate:
        if cid == candidate_id(self.baseline_regions):
            return self.baseline_candidate()
        return read_record(Candidate, layout.candidate_path(self.dir, cid))

    def eval_path(self, cid: str, stage: str) -> pathlib.Path:
        return layout.evaluation_path(self.dir, cid, stage)

    def stored_evaluation(self, cid: str, stage: str) -> Evaluation | None:
        path = self.eval_path(cid, stage)
        return read_record(Evaluation, path) if path.exists() else None

    def write_best(self, top: RoundRecord) -> None:
        """``best/`` for the round ``top`` (its final evaluation, else its round one)."""
        assert top.candidate is not None
        candidate = self.candidate(top.candidate)
        evaluation = self.stored_evaluation(candidate.id, "final") or self.stored_evaluation(candidate.id, "round")
        write_best(self.dir, self.files, self.task.editable, candidate, evaluation)


def op_summary(op: OpState, stop: str | None, best: RoundRecord | None) -> OpSummary:
    """The op's line of ``summary.json``: improved (with the validated best's figures) or not."""
    traj = op.trajectory
    rounds = len(traj.rounds())
    if best is None:
        return OpSummary(
            op_id=op.task.op_id,
            status="no_improvement",
            stop_reason=stop,
            rounds=rounds,
            detail="no candidate passed final validation faster than the baseline; the baseline stays",
        )
    final = [r for r in traj.finals() if r.candidate == best.candidate and r.outcome == Outcome.ok][-1]
    return OpSummary(
        op_id=op.task.op_id,
        status="improved",
        stop_reason=stop,
        rounds=rounds,
        best=best.candidate,
        best_dir=f"{op.task.op_id}/best",
        speedup_geomean=final.speedup_geomean or best.speedup_geomean,
        speedup_min=final.speedup_min if final.speedup_min is not None else best.speedup_min,
        guarded=best.guarded,
        skills=path_skills(op, best.candidate or ""),
    )


def path_skills(op: OpState, cid: str) -> list[str]:
    """Skills applied from the baseline to candidate ``cid``, oldest first."""
    skills: list[str] = []
    seen: set[str] = set()
    while cid and cid not in seen:
        seen.add(cid)
        try:
            cand = op.candidate(cid)
        except (OSError, KernelsmithError, ValueError):
            break
        skills.extend(reversed(cand.skill_ids))
        cid = cand.parent or ""
    return list(reversed(skills))


def write_best(
    op_dir: pathlib.Path,
    files: Mapping[str, bytes],
    editable: Sequence[Span],
    candidate: Candidate,
    evaluation: Evaluation | None,
) -> None:
    """``op_dir/best/``: candidate.json, evaluation.json, regions/<name>.txt and
    src/<the files the candidate's regions change>; published by rename."""
    patched = apply_regions(files, list(editable), candidate.regions)
    staging = pathlib.Path(tempfile.mkdtemp(prefix=".best.", dir=op_dir))
    staging.chmod(0o755)  # mkdtemp makes it private; best/ is for people and `integrate` to read
    try:
        write_record(candidate, staging / layout.BEST_CANDIDATE_FILE)
        if evaluation is not None:
            write_record(evaluation, staging / "evaluation.json")
        for name, text in candidate.regions.items():
            (staging / "regions").mkdir(exist_ok=True)
            (staging / "regions" / f"{name}.txt").write_text(text, encoding="utf-8")
        for rel, data in patched.items():
            if data != files.get(rel):
                target = staging / "src" / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
        replace_dir(staging, op_dir / layout.BEST_DIR)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def why(evaluation: Evaluation) -> str:
    """The reason an evaluation gives: nvcc's output for a compile failure, else its detail."""
    if evaluation.outcome == Outcome.compile_failed and evaluation.build is not None and evaluation.build.stderr:
        return evaluation.build.stderr
    return evaluation.detail


def clip(text: str, limit: int = 2000) -> str:
    """``text`` cut to ``limit`` characters (``...`` marks a cut), so a record stays small."""
    text = text or ""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_run_meta(run_dir: pathlib.Path) -> dict[str, str | None]:
    """``run.json`` of a run folder ({} when there is none). A file that is not a JSON object is the
    user's to mend (hand-edited, cut short by a full disk), never a Kernelsmith bug: one error with the fix."""
    path = run_dir / layout.RUN_FILE
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        where = f" at line {err.lineno}" if isinstance(err, json.JSONDecodeError) else ""
        raise StaleRecordError(
            f"{path} is not valid JSON{where}: {err}",
            fix=f"restore it, or delete it to record the run's options anew on the next `--run {run_dir.name}`",
        ) from None
    if not isinstance(data, dict):
        raise StaleRecordError(
            f"{path} holds {type(data).__name__}, not the run's options (a JSON object)",
            fix=f"restore it, or delete it to record the run's options anew on the next `--run {run_dir.name}`",
        )
    return data


def run_meta_check(run_dir: pathlib.Path, meta: Mapping[str, str | None], *, write: bool = True) -> None:
    """Refuse to resume a run with another mode/coder/backend (its rounds would mix); record a new run's."""
    path = run_dir / layout.RUN_FILE
    if path.exists():
        old = read_run_meta(run_dir)
        for key in ("mode", "coder", "backend"):
            if old.get(key) != meta.get(key):
                raise ConfigError(
                    f"run {run_dir.name} was started with {key}={old.get(key)!r}, "
                    f"this command asks for {meta.get(key)!r}",
                    fix="use a new --run name, or repeat the original options to resume",
                )
        return
    if not write:
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".run.", dir=run_dir)
    os.fchmod(fd, file_mode())  # mkstemp's 0600 would outlive the rename: the umask decides
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(meta, handle, indent=2)
    os.replace(tmp, path)


def model_failure(model: Model | None, op: OpState) -> str | None:
    """Why every LLM call of this op failed, or None when one answered (or none was made).

    Calls made by this process are counted by the :class:`MeteredModel`; a resumed
    run that made none reads its rounds instead: every attempt an LLM agent made
    (transforms aside) ended in ``model_error``.
    """
    if not isinstance(model, MeteredModel):
        return None
    if model.usage.calls or model.failures:
        if model.usage.calls or model.last_error is None:
            return None
        err = model.last_error
        return clip(
            f"all {model.failures} LLM call(s) failed, the last: {err.message}"
            + (f"; fix: {err.fix}" if err.fix else "")
        )
    attempts = [a for r in op.trajectory.rounds() for a in r.attempts if a.agent not in ("transform", "search")]
    if attempts and all(a.status == NotEvaluated.model_error for a in attempts):
        return clip(f"every LLM attempt of the run's rounds failed, the last: {attempts[-1].detail}")
    return None
