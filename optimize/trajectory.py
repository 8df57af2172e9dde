"""Short-term memory of one op's optimization: an append-only JSONL of rounds.

File: ``work/runs/<run>/<op>/trajectory.jsonl``, one :class:`RoundRecord` per
line: the baseline measurement, each round (plan, skill, params, every coding /
repair attempt with its candidate id and outcome, per-shape speedups, whether it
became the best), each final validation, and a line per stop.

Why append-only JSONL: a run killed at any moment keeps every finished round, and
the rerun reads them back as the truth (rounds on disk are never redone). The
loop writes a round's line only once the round is finished; the expensive parts
inside a round (LLM replies, evaluations) have their own on-disk caches, so a
round interrupted halfway is redone for free.

What must stay true:
- Lines are only appended (flushed and fsynced). The one repair ever made is
  cutting a torn last line (a crash in the middle of a write), which is not a
  record. A bad line in the middle is a :class:`TrajectoryError`, never skipped.
- The best correct candidate so far (outcome ``ok``, no regression at any
  catalog shape beyond the noise band, highest geometric-mean speedup) is the
  base of the next round. A failed final validation disqualifies a candidate.
- :meth:`Trajectory.history` is what the policy's no-repeat rule reads: every
  (skill, params) tried, with how it ended.
- :meth:`Trajectory.summary` is the compact text given to LLM prompts (a few
  lines per round), never the raw log.
"""

from __future__ import annotations

import json
import os
import pathlib
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import Field, ValidationError

from optimize.errors import TrajectoryError
from pipeline.buckets import floor_text
from pipeline.record_io import Record, VersionedRecord, content_hash
from pipeline.run_records import NotEvaluated, Outcome, ReachVerdict, ShapeTiming

#: How a round ended: its evaluation's outcome, or why its coder gave nothing to evaluate.
RoundOutcome = Outcome | NotEvaluated

#: Every round outcome, the evaluation's first.
ROUND_OUTCOMES: tuple[RoundOutcome, ...] = (*Outcome, *NotEvaluated)


FAILED: frozenset[RoundOutcome] = frozenset(
    {
        Outcome.compile_failed,
        Outcome.incorrect,
        Outcome.timeout,
        Outcome.crashed,
        Outcome.slower,
        NotEvaluated.malformed_reply,
        NotEvaluated.no_change,
        NotEvaluated.not_applicable,
    }
)


class Attempt(Record):
    """One coding, repair or guard attempt inside a round."""

    agent: str  # coding | repair | guard | single | transform (a skill's mechanical transform)
    status: Literal["edited"] | NotEvaluated
    candidate: str | None = None
    outcome: Outcome | None = None  # evaluation outcome when the candidate was evaluated
    detail: str = ""


class RoundRecord(VersionedRecord):
    kind: Literal["baseline", "round", "final", "stop"]
    op_id: str
    round: int  # 0 = baseline; final/stop lines carry the last round number
    mode: str = "multi"
    coder: str = "offline"
    skill: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    plan: str = ""  # the planner's text (LLM) or the policy's reason (offline)
    base: str | None = None  # candidate id this round started from
    candidate: str | None = None  # candidate id evaluated last in this round
    regions_hash: str | None = None
    attempts: list[Attempt] = Field(default_factory=list)
    outcome: RoundOutcome
    detail: str = ""
    timings: list[ShapeTiming] = Field(default_factory=list)
    speedup_geomean: float | None = None
    speedup_min: float | None = None
    regressed_shapes: list[str] = Field(default_factory=list)
    guarded: bool = False  # a shape-dispatch guard keeps the baseline at the regressed shapes
    accepted: bool = False  # this round's candidate became the best
    best: str | None = None  # best candidate id after this line
    stop_reason: str | None = None  # kind == "stop"
    # kind == "final": the candidate at every other op that runs code it changes (optimize.reach_ops)
    reach: list[ReachVerdict] = Field(default_factory=list)
    tokens: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    gpu_s: float = 0.0
    finished_at: str = ""


class HistoryEntry(Record):
    """One (skill, params) tried, for the policy's no-repeat rule."""

    skill: str
    params: dict[str, Any]
    outcome: RoundOutcome
    speedup_geomean: float | None = None
    round: int = 0

    @property
    def failed(self) -> bool:
        return self.outcome in FAILED


def now_iso() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def regions_hash(regions: dict[str, str]) -> str:
    """Content hash of a candidate's region texts (independent of dict order)."""
    parts: list[str] = []
    for name in sorted(regions):
        parts += [name, regions[name]]
    return content_hash("kernelsmith-regions/1", *parts)


def candidate_id(regions: dict[str, str]) -> str:
    """A candidate's id: the first 16 hex digits of :func:`regions_hash`."""
    return regions_hash(regions)[:16]


def params_key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


class Trajectory:
    """The trajectory file of one op; see the module docstring."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = pathlib.Path(path)
        self.records: list[RoundRecord] = []
        self.torn_bytes = 0
        self._load()

    # ------------------------------------------------------------------ io

    def _load(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            # A crash mid-write left a partial line: it is not a record. Cut it so the
            # next append starts on a line of its own.
            self.torn_bytes = len(data) - end
            with self.path.open("r+b") as handle:
                handle.truncate(end)
            data = data[:end]
        for number, line in enumerate(data.decode("utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = RoundRecord.model_validate(json.loads(line))
            except (ValueError, ValidationError) as err:
                raise TrajectoryError(
                    f"{self.path}:{number} is not a round record this kernelsmith can read",
                    fix=f"move {self.path.parent} aside to restart this op, or use another --run name",
                    detail=str(err)[:2000],
                ) from err
            self.records.append(record)

    def append(self, record: RoundRecord) -> RoundRecord:
        if not record.finished_at:
            record = record.model_copy(update={"finished_at": now_iso()})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = record.model_dump_json() + "\n"
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        self.records.append(record)
        return record

    # ------------------------------------------------------------------ queries

    def baseline(self) -> RoundRecord | None:
        for record in self.records:
            if record.kind == "baseline":
                return record
        return None

    def rounds(self) -> list[RoundRecord]:
        return [r for r in self.records if r.kind == "round"]

    def finals(self) -> list[RoundRecord]:
        return [r for r in self.records if r.kind == "final"]

    def last_round(self) -> int:
        rounds = self.rounds()
        return rounds[-1].round if rounds else 0

    def disqualified(self) -> set[str]:
        """Candidates that failed a final validation."""
        return {r.candidate for r in self.finals() if r.outcome != Outcome.ok and r.candidate}

    def ranked(self) -> list[RoundRecord]:
        """Accepted rounds, best first (geometric-mean speedup), disqualified ones left out."""
        bad = self.disqualified()
        good = [r for r in self.rounds() if r.accepted and r.candidate and r.candidate not in bad]
        return sorted(good, key=lambda r: (-(r.speedup_geomean or 0.0), r.round))

    def best(self) -> RoundRecord | None:
        """The round holding the best correct candidate so far; the baseline when none."""
        ranked = self.ranked()
        return ranked[0] if ranked else self.baseline()

    def best_id(self) -> str | None:
        best = self.best()
        return best.candidate if best else None

    def history(self) -> list[HistoryEntry]:
        return [
            HistoryEntry(
                skill=r.skill, params=r.params, outcome=r.outcome, speedup_geomean=r.speedup_geomean, round=r.round
            )
            for r in self.rounds()
            if r.skill
        ]

    def tried(self, skill: str, params: dict[str, Any]) -> RoundRecord | None:
        key = params_key(params)
        for record in self.rounds():
            if record.skill == skill and params_key(record.params) == key:
                return record
        return None

    def spent(self) -> dict[str, float]:
        """Tokens, dollars, wall and GPU seconds of every line on disk (budgets resume from it)."""
        return {
            "tokens": float(sum(r.tokens for r in self.records)),
            "cost_usd": sum(r.cost_usd for r in self.records),
            "wall_s": sum(r.wall_s for r in self.records),
            "gpu_s": sum(r.gpu_s for r in self.records),
        }

    def summary(self, *, limit: int = 8) -> str:
        """A compact text of the trajectory for prompts: baseline, best, last rounds."""
        lines: list[str] = []
        base = self.baseline()
        if base is not None:
            lines.append(f"baseline {base.candidate}: {_shapes_text(base.timings)}")
        best = self.best()
        rounds = self.rounds()
        if best is not None and best.kind == "round":
            lines.append(
                f"best so far: round {best.round} {best.skill}{_params_text(best.params)} "
                f"candidate {best.candidate}, geomean {best.speedup_geomean:.3f}x"
            )
        else:
            lines.append("best so far: the baseline (no accepted candidate yet)")
        if len(rounds) > limit:
            lines.append(f"({len(rounds) - limit} earlier rounds omitted)")
        for record in rounds[-limit:]:
            text = f"round {record.round}: {record.skill or '-'}{_params_text(record.params)} -> {record.outcome.value}"
            if record.speedup_geomean is not None:
                text += f", geomean {record.speedup_geomean:.3f}x (min {record.speedup_min:.3f}x)"
            if record.regressed_shapes:
                text += f", slower at {', '.join(record.regressed_shapes[:3])}"
            if record.accepted:
                text += ", accepted"
            detail = _first_line(record.detail)
            if detail and record.outcome != Outcome.ok:
                text += f" — {detail}"
            lines.append(text)
        return "\n".join(lines)


def _params_text(params: dict[str, Any]) -> str:
    if not params:
        return ""
    return "{" + ", ".join(f"{k}={v}" for k, v in sorted(params.items())) + "}"


def _shapes_text(timings: list[ShapeTiming]) -> str:
    parts = [
        f"{t.label} {t.dtype} {t.time_us:.2f}us ({floor_text(t)}x floor)"
        if t.floor_applies
        else f"{t.label} {t.dtype} {t.time_us:.2f}us (floor n/a: not byte-bound)"
        for t in timings[:6]
    ]
    if len(timings) > 6:
        parts.append(f"... {len(timings) - 6} more")
    return "; ".join(parts) or "no timings"


def _first_line(text: str, width: int = 160) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:width]
    return ""
