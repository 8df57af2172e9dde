"""Replay backend: evaluations simulated from a file of measured (or stated) timings.

Why: the optimize loop (plans, edits, repairs, budgets, resume, final
validation, reports) must be testable without a GPU. This backend answers
``evaluate`` from a JSON file instead of compiling and running anything. Every
Evaluation it returns says so in ``detail`` and every report of a replayed run is
headed SIMULATED: a replay is never a measurement.

A GPU run writes such a file as it goes (``work/runs/<run>/measurements.replay.json``,
see :func:`record`), so any real run can be replayed exactly, together with its
LLM call log (:class:`optimize.llm.fakes.ReplayModel`).

File format (``"format": "kernelsmith-replay/1"``)::

    {
      "format": "kernelsmith-replay/1",
      "source": "recorded" | "synthetic",   # synthetic = written by hand for tests
      "device": "NVIDIA H200",              # where recorded figures were measured
      "recorded_at": "2026-01-01T00:00:00+00:00",
      "note": "free text",
      "default_seconds": {"build": 0.0, "test": 1.0, "profile": 1.0},
      "ops": {
        "<op id>": {
          "baseline": [                      # one ShapeTiming per (shape, dtype)
            {"label": "...", "sizes": {...}, "dtype": "bf16", "time_us": 10.0,
             "spread_pct": 1.0, "gbps": 3000.0, "pct_of_copy_bw": 80.0,
             "time_over_floor": 1.25}
          ],
          "baseline_seconds": {"build": .., "test": .., "profile": ..},  # optional
          "candidates": {"<candidate id>": ENTRY},   # exact candidates (recorded runs)
          "rules": [RULE, ...],                      # first match wins
          "unmatched": ENTRY | null,                 # null/absent: an unknown candidate is an error
          "ncu": {"baseline" | "<candidate id>": [NCU_KERNEL, ...]}   # optional Nsight Compute rows
        }
      }
    }

    ENTRY = {
      "outcome": "ok" | "compile_failed" | "incorrect" | "timeout" | "crashed" | "slower",
      "detail": "tool output, e.g. nvcc's error line",
      # timings of an ok/slower candidate, one of:
      "times_us": {"<label>@<dtype>": 8.0, ...},   # every baseline shape must appear
      "speedups": {"<label>@<dtype>": 1.25, ...},  # baseline_us / candidate_us per shape
      "speedup": 1.25,                             # the same factor at every shape
      "final": {"outcome": ..., "detail": ...},    # optional: what final validation
                                                   # (held-out shapes, adversarial checks) says
      "seconds": {"build": .., "test": .., "profile": ..}
    }
    RULE = ENTRY + {"skill": "<skill id>", "params": {...}, "contains": "<text>"}
    NCU_KERNEL = optimize.harness.tools.NcuKernel as JSON: {"kernel": "...",
      "duration_us": .., "dram_throughput_pct": .., "achieved_occupancy_pct": ..,
      "top_stalls": [["long_scoreboard", 3.2], ...]}

A composed candidate (a search point, ``Candidate.steps``) with no entry or rule of its
own is simulated from its steps' rules: the first failing step's entry, else the product
of their speedups, shape by shape (a step no rule names takes ``unmatched``).

A rule matches a candidate when each key it gives matches: ``skill`` equals the
candidate's skill, ``params`` equals its params, ``contains`` is a substring of
one of its region texts (how a test makes a deliberately broken edit fail to
compile and the repaired one pass). Candidate timings are derived from the
baseline's: ``time_over_floor`` and bandwidth scale with the time.

GPU seconds charged per evaluation are ``test + profile`` seconds.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import tempfile
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal, TypedDict, cast

from optimize.errors import ReplayError
from pipeline.record_io import file_mode
from pipeline.records import BuildReport, Task
from pipeline.run_records import Candidate, Evaluation, Outcome, ShapeTiming

if TYPE_CHECKING:
    from optimize.harness.tools import NcuResult

FORMAT = "kernelsmith-replay/1"
DEFAULT_SECONDS = {"build": 0.0, "test": 1.0, "profile": 1.0}


class FinalEntry(TypedDict, total=False):
    """An ENTRY's ``final``: what final validation says of the candidate."""

    outcome: str
    detail: str


class Entry(TypedDict, total=False):
    """ENTRY of the module docstring: one candidate's evaluation."""

    outcome: str
    detail: str
    times_us: dict[str, float]
    speedups: dict[str, float]
    speedup: float
    final: FinalEntry
    seconds: dict[str, float]


class Rule(Entry, total=False):
    """RULE of the module docstring: an entry for every candidate it matches."""

    skill: str
    params: dict[str, object]
    contains: str


class OpEntry(TypedDict, total=False):
    """One op of a replay file: its baseline, its candidates' entries and rules, its Nsight Compute rows."""

    baseline: list[dict[str, object]]  # ShapeTiming as JSON, less baseline_us and speedup
    baseline_seconds: dict[str, float]
    candidates: dict[str, Entry]
    rules: list[Rule]
    unmatched: Entry | None
    ncu: dict[str, list[dict[str, object]]]  # NcuKernel as JSON, by "baseline" or candidate id


class ReplayFile(TypedDict, total=False):
    """A whole replay file (``"format": "kernelsmith-replay/1"``)."""

    format: str
    source: str
    device: str
    recorded_at: str
    note: str
    default_seconds: dict[str, float]
    ops: dict[str, OpEntry]


def shape_key(label: str, dtype: str) -> str:
    return f"{label}@{dtype}"


class ReplayBackend:
    """Answers evaluations from a replay file; see the module docstring."""

    simulated = True

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = pathlib.Path(path)
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError as err:
            raise ReplayError(f"replay file {self.path} not found", fix="pass an existing --replay FILE") from err
        except ValueError as err:
            raise ReplayError(f"replay file {self.path} is not JSON: {err}", fix="fix or re-record the file") from err
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ReplayError(
                f"replay file {self.path} has format {data.get('format') if isinstance(data, dict) else None!r}, expected {FORMAT!r}",
                fix="see optimize/backends/replay.py for the format",
            )
        self.data = cast(ReplayFile, data)  # its parts are checked where they are read
        self.source = str(data.get("source", "recorded"))
        self.device = str(data.get("device", "unknown device"))
        self.default_seconds = {**DEFAULT_SECONDS, **data.get("default_seconds", {})}
        self.name = f"replay:{self.path.name}"
        self.gpu_s = 0.0

    def describe(self) -> str:
        return f"SIMULATED: replayed {self.source} timings from {self.path} ({self.device}); nothing ran on a GPU"

    def available(self) -> tuple[bool, str]:
        return True, self.describe()

    def ops(self) -> list[str]:
        return sorted(self.data.get("ops", {}))

    # ------------------------------------------------------------------ lookup

    def _op(self, op_id: str) -> OpEntry:
        ops = self.data.get("ops", {})
        if op_id not in ops:
            raise ReplayError(
                f"replay file {self.path} has no op {op_id!r} (has: {', '.join(sorted(ops)) or 'none'})",
                fix="record this op on the GPU, or run only the ops the file has",
            )
        return ops[op_id]

    def _baseline(self, op_id: str) -> list[ShapeTiming]:
        rows = self._op(op_id).get("baseline") or []
        if not rows:
            raise ReplayError(
                f"replay file {self.path}: op {op_id} has no baseline timings", fix="add a 'baseline' list"
            )
        try:
            return [ShapeTiming.model_validate(row) for row in rows]
        except ValueError as err:
            raise ReplayError(
                f"replay file {self.path}: bad baseline row for {op_id}", fix="see the format", detail=str(err)
            ) from err

    def _rule(
        self, op: OpEntry, skill: str | None, params: Mapping[str, object], regions: Mapping[str, str]
    ) -> Rule | None:
        for rule in op.get("rules", []):
            if "skill" in rule and rule["skill"] != skill:
                continue
            if "params" in rule and json.dumps(rule["params"], sort_keys=True) != json.dumps(
                params, sort_keys=True, default=str
            ):
                continue
            if "contains" in rule and not any(rule["contains"] in text for text in regions.values()):
                continue
            return rule
        return None

    def _composed(self, op: OpEntry, candidate: Candidate) -> Entry | None:
        """A search point with no rule of its own, from its steps' entries (a step no rule names takes
        ``unmatched``): the first failing step's entry, else the per-shape product of their speedups.
        None when a step has no entry or gives its timings as ``times_us``."""
        found = [self._rule(op, s.skill, s.params, candidate.regions) or op.get("unmatched") for s in candidate.steps]
        entries: list[Entry] = [e for e in found if isinstance(e, dict)]
        if not entries or len(entries) < len(found):
            return None
        failing = [e for e in entries if e.get("outcome", "ok") not in ("ok", "slower")]
        if failing:
            return failing[0]
        keys = [f"{row.get('label')}@{row.get('dtype')}" for row in op.get("baseline") or []]
        product = dict.fromkeys(keys, 1.0)
        for e in entries:
            for key in keys:
                factor = (e.get("speedups") or {}).get(key, e.get("speedup"))
                if not isinstance(factor, int | float):
                    return None
                product[key] *= float(factor)
        slower = math.prod(product.values()) < 1.0
        detail = "composed from the steps' entries: " + ", ".join(s.skill for s in candidate.steps)
        return {"outcome": "slower" if slower else "ok", "speedups": product, "detail": detail}

    def _entry(self, op_id: str, candidate: Candidate) -> Entry:
        op = self._op(op_id)
        exact = op.get("candidates", {}).get(candidate.id)
        if exact is not None:
            return exact
        rule = self._rule(op, candidate.skill, candidate.params, candidate.regions)
        if rule is not None:
            return rule
        composed = self._composed(op, candidate) if candidate.steps else None
        if composed is not None:
            return composed
        unmatched = op.get("unmatched")
        if unmatched is not None:
            return unmatched
        raise ReplayError(
            f"replay file {self.path} has no entry for candidate {candidate.id} of {op_id} "
            f"(skill {candidate.skill}, params {candidate.params})",
            fix="add a rule for this skill (or an 'unmatched' entry) to the replay file",
        )

    # ------------------------------------------------------------------ profile

    def profile(self, task_dir: str | os.PathLike[str] | None, task: Task, candidate: Candidate | None) -> NcuResult:
        """The recorded Nsight Compute rows of ``candidate`` (None: the baseline), else ``unavailable``."""
        from optimize.harness.tools import NcuKernel, NcuResult

        key = "baseline" if candidate is None else candidate.id
        rows = self._op(task.op_id).get("ncu", {}).get(key)
        if not rows:
            return NcuResult(status="unavailable", detail=f"replay file {self.path.name} has no ncu rows for {key}")
        try:
            return NcuResult(
                status="ok", detail="SIMULATED: replayed", kernels=[NcuKernel.model_validate(r) for r in rows]
            )
        except ValueError as err:
            raise ReplayError(
                f"replay file {self.path}: bad ncu row for {task.op_id}", fix="see the format", detail=str(err)
            ) from err

    # ------------------------------------------------------------------ evaluate

    def evaluate(
        self,
        task_dir: str | os.PathLike[str] | None,
        task: Task,
        candidate: Candidate,
        *,
        stage: Literal["round", "final"] = "round",
    ) -> Evaluation:
        del task_dir
        op_id = task.op_id
        baseline = self._baseline(op_id)
        if candidate.is_baseline:
            seconds = {**self.default_seconds, **self._op(op_id).get("baseline_seconds", {})}
            self._charge(seconds)
            timings = [t.model_copy(update={"baseline_us": t.time_us, "speedup": 1.0}) for t in baseline]
            return Evaluation(
                op_id=op_id,
                candidate=candidate.id,
                outcome=Outcome.ok,
                timings=timings,
                detail=f"replayed baseline ({self.source}, {self.device})",
                seconds=seconds,
                build=BuildReport(ok=True, key="replay", seconds=seconds["build"]),
                checks_passed=len(timings),
                bitwise_equal=True,
                max_abs_err=0.0,
            )
        entry = self._entry(op_id, candidate)
        if stage == "final" and isinstance(entry.get("final"), dict):
            entry = {**entry, **entry["final"]}
        try:
            outcome = Outcome(entry.get("outcome", "ok"))
        except ValueError as err:
            raise ReplayError(
                f"replay file {self.path}: unknown outcome {entry.get('outcome')!r}",
                fix=f"use one of {[o.value for o in Outcome]}",
            ) from err
        seconds = {**self.default_seconds, **entry.get("seconds", {})}
        if outcome == Outcome.compile_failed:
            seconds = {**seconds, "test": 0.0, "profile": 0.0}
        self._charge(seconds)
        detail = str(entry.get("detail", ""))
        note = f"replayed {stage} evaluation ({self.source}, {self.device})"
        build = BuildReport(
            ok=outcome != Outcome.compile_failed,
            key="replay",
            seconds=seconds["build"],
            stderr=detail if outcome == Outcome.compile_failed else "",
        )
        if outcome not in (Outcome.ok, Outcome.slower):
            return Evaluation(
                op_id=op_id,
                candidate=candidate.id,
                outcome=outcome,
                detail=f"{detail}\n[{note}]".strip(),
                build=build,
                checks_failed=0 if outcome == Outcome.compile_failed else 1,
                seconds=seconds,
            )
        timings = self._timings(op_id, baseline, entry)
        return Evaluation(
            op_id=op_id,
            candidate=candidate.id,
            outcome=outcome,
            detail=f"{detail}\n[{note}]".strip(),
            build=build,
            checks_passed=len(timings),
            bitwise_equal=None,
            timings=timings,
            seconds=seconds,
        )

    def evaluate_many(
        self, task_dir: str | os.PathLike[str] | None, task: Task, candidates: Sequence[Candidate]
    ) -> list[Evaluation]:
        """A population replayed member by member (a replay has nothing to build at once)."""
        return [self.evaluate(task_dir, task, c, stage="round") for c in candidates]

    def _charge(self, seconds: dict[str, float]) -> None:
        self.gpu_s += float(seconds.get("test", 0.0)) + float(seconds.get("profile", 0.0))

    def _timings(self, op_id: str, baseline: list[ShapeTiming], entry: Entry) -> list[ShapeTiming]:
        out = []
        for base in baseline:
            key = shape_key(base.label, base.dtype)
            if "times_us" in entry:
                if key not in entry["times_us"]:
                    raise ReplayError(
                        f"replay file {self.path}: {op_id} entry lacks times_us[{key!r}]",
                        fix="give a time for every baseline shape",
                    )
                time_us = float(entry["times_us"][key])
            elif "speedups" in entry:
                if key not in entry["speedups"]:
                    raise ReplayError(
                        f"replay file {self.path}: {op_id} entry lacks speedups[{key!r}]",
                        fix="give a speedup for every baseline shape",
                    )
                time_us = base.time_us / float(entry["speedups"][key])
            elif "speedup" in entry:
                time_us = base.time_us / float(entry["speedup"])
            else:
                raise ReplayError(
                    f"replay file {self.path}: an ok entry of {op_id} has no times",
                    fix="add times_us, speedups or speedup",
                )
            ratio = time_us / base.time_us
            out.append(
                base.model_copy(
                    update={
                        "time_us": time_us,
                        "gbps": base.gbps / ratio,
                        "pct_of_copy_bw": base.pct_of_copy_bw / ratio,
                        "time_over_floor": base.time_over_floor * ratio,
                        "baseline_us": base.time_us,
                        "speedup": base.time_us / time_us,
                    }
                )
            )
        return out


# --------------------------------------------------------------------------- recording


def record_ncu(
    path: str | os.PathLike[str], op_id: str, key: str, kernels: list[dict[str, object]], *, device: str
) -> None:
    """Add one Nsight Compute profile (``key``: "baseline" or a candidate id) to a replay file."""
    data = _load_for_update(path, device)
    op = data["ops"].setdefault(op_id, {"baseline": [], "candidates": {}})
    op.setdefault("ncu", {})[key] = kernels
    _publish(path, data)


def _load_for_update(path: str | os.PathLike[str], device: str) -> ReplayFile:
    path = pathlib.Path(path)
    if path.exists():
        return cast(ReplayFile, json.loads(path.read_text(encoding="utf-8")))
    return {"format": FORMAT, "source": "recorded", "device": device, "note": "written by a GPU run", "ops": {}}


def _publish(path: str | os.PathLike[str], data: ReplayFile) -> None:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, file_mode())  # mkstemp's 0600 would outlive the rename: the umask decides
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1, sort_keys=True)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def record(
    path: str | os.PathLike[str],
    evaluation: Evaluation,
    *,
    baseline: bool,
    stage: Literal["round", "final"] = "round",
    device: str = "unknown device",
) -> None:
    """Add one real evaluation to a replay file (written whole, staging file + rename).

    Called by the GPU backend after each measured evaluation, so every real run
    leaves a file that reproduces its measurements in a replayed run.
    """
    data = _load_for_update(path, device)
    op = data["ops"].setdefault(evaluation.op_id, {"baseline": [], "candidates": {}})
    seconds = dict(evaluation.seconds)
    if baseline and evaluation.outcome == Outcome.ok:
        op["baseline"] = [
            {k: v for k, v in t.model_dump().items() if k not in ("baseline_us", "speedup")} for t in evaluation.timings
        ]
        op["baseline_seconds"] = seconds
    elif not baseline:
        entry: Entry
        if stage == "final":
            entry = op["candidates"].setdefault(evaluation.candidate, {"outcome": evaluation.outcome.value})
            entry["final"] = {"outcome": evaluation.outcome.value, "detail": evaluation.detail[-2000:]}
        else:
            entry = {"outcome": evaluation.outcome.value, "detail": evaluation.detail[-2000:], "seconds": seconds}
            if evaluation.build is not None and not evaluation.build.ok:
                entry["detail"] = evaluation.build.stderr[-2000:] or entry["detail"]
            if evaluation.timings:
                entry["times_us"] = {shape_key(t.label, t.dtype): t.time_us for t in evaluation.timings}
            previous = op["candidates"].get(evaluation.candidate, {})
            if "final" in previous:
                entry["final"] = previous["final"]
            op["candidates"][evaluation.candidate] = entry
    _publish(path, data)
