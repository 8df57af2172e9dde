"""Optimize's records: candidates, their evaluations, and each op's and run's summary.

Written under a run's folder (``runs/<run>/<op>/``) by :mod:`optimize` and read by integrate, the
agent verbs and the reports. The base classes and the disk format are :mod:`pipeline.record_io`'s;
the task's own records (shapes, build reports) are :mod:`pipeline.records`'.

What must stay true: :class:`Outcome` is the closed set an evaluation can end in (a new way to fail
is a new member, never a free-form string), and :class:`NotEvaluated` the closed set of reasons a
coder gave nothing to evaluate; the two share no value, so a round's outcome is one of either
(``optimize.trajectory.RoundOutcome``) with neither set spelt again. A candidate's id is the content
hash of its regions.
"""

from __future__ import annotations

import enum
from typing import Any, Literal

from pydantic import Field

from pipeline.record_io import Record, VersionedRecord
from pipeline.records import BuildReport, Dtype


class Outcome(str, enum.Enum):
    """The closed set of things an evaluation can end in."""

    ok = "ok"
    compile_failed = "compile_failed"
    incorrect = "incorrect"
    timeout = "timeout"
    crashed = "crashed"
    slower = "slower"
    budget_exhausted = "budget_exhausted"


class NotEvaluated(str, enum.Enum):
    """Why a coder produced nothing to evaluate (no value is also an :class:`Outcome`'s)."""

    malformed_reply = "malformed_reply"  # the LLM's reply could not be turned into region texts
    model_error = "model_error"  # the endpoint failed after its retries
    no_change = "no_change"  # the edit left every region as it was
    not_applicable = "not_applicable"  # the skill's transform does not apply to this code


class Step(Record):
    """One mechanical transform of a composed candidate: the skill and the parameters it was applied with."""

    skill: str
    params: dict[str, Any] = Field(default_factory=dict)


class Candidate(VersionedRecord):
    """A proposed replacement for a task's editable region."""

    op_id: str
    id: str  # content hash of the region texts
    parent: str | None  # candidate id it was derived from (None = baseline)
    regions: dict[str, str]  # span name -> new text for that span
    skill: str | None = None  # a composed candidate: its steps' skills joined by "+"
    params: dict[str, Any] = Field(default_factory=dict)
    coder: str = "baseline"
    rationale: str = ""
    # a search point: the transforms that made it from its parent, in the order applied
    steps: list[Step] = Field(default_factory=list)

    @property
    def skill_ids(self) -> list[str]:
        """The skills that made this candidate from its parent (its steps', else its one skill)."""
        if self.steps:
            return [s.skill for s in self.steps]
        return [self.skill] if self.skill else []

    @property
    def is_baseline(self) -> bool:
        """The unmodified SGLang kernel (no parent, made by no coder): evaluated on its own, as the reference."""
        return self.parent is None and self.coder == "baseline"


class ShapeTiming(Record):
    label: str
    sizes: dict[str, int]
    dtype: Dtype
    time_us: float
    spread_pct: float
    gbps: float
    pct_of_copy_bw: float
    time_over_floor: float
    baseline_us: float | None = None
    speedup: float | None = None
    floor_applies: bool = True  # False: the contract says the op is not byte-bound; time_over_floor is not a figure
    # the catalog shape's token count (ShapeCase.tokens): the bucket of a shape whose sizes name no
    # num_tokens (bias_gelu_tanh's num_rows, dispatch_probability's num_topk_entries); None: from sizes
    tokens: int | None = None

    @property
    def over_floor(self) -> float | None:
        """time ÷ floor where it means something (None: the floor does not apply to this op)."""
        return self.time_over_floor if self.floor_applies else None


class Evaluation(VersionedRecord):
    op_id: str
    candidate: str
    outcome: Outcome
    detail: str = ""
    build: BuildReport | None = None
    checks_passed: int = 0
    checks_failed: int = 0
    bitwise_equal: bool | None = None
    max_abs_err: float | None = None
    timings: list[ShapeTiming] = Field(default_factory=list)
    seconds: dict[str, float] = Field(default_factory=dict)  # build / test / profile split
    # Baseline-only evaluations: tensors whose role the baseline contradicted
    # ("written" input, "never_written" output); see contract.completion.
    role_evidence: dict[str, str] = Field(default_factory=dict)
    # Buffer sets of the timed CUDA graphs whose outputs were compared with the baseline's
    # (summed over the timed shapes; 0 when nothing was timed or there was no candidate).
    timed_sets_validated: int = 0
    # A search population member checked at every shape but timed only at the screening
    # shapes (optimize.harness.population), not promoted to full timing: never accepted.
    screened: bool = False


class ReachVerdict(Record):
    """How a candidate fares at another op whose entry points run code it changes.

    Why: ops share kernel files (rope.cuh serves three ops), so a candidate judged at its own
    entry points alone can be slower where another op runs the same code. ``status``:

    - ``not_reached``: every change is code this op never runs (:mod:`optimize.reach`);
    - ``held``: evaluated at this op's own shapes, correct and slower at none beyond the band;
    - ``failed``: evaluated there and incorrect, or slower beyond the band;
    - ``not_judged``: reached but not evaluated (no task, a different copy of the region,
      a baseline that fails its own checks). It blocks acceptance: unproven is not proven.
    """

    op_id: str
    status: Literal["not_reached", "held", "failed", "not_judged"]
    detail: str = ""
    regions: list[str] = Field(default_factory=list)  # the changed regions this op runs
    outcome: Outcome | None = None  # the op's final evaluation outcome, when evaluated
    speedup_geomean: float | None = None
    speedup_min: float | None = None
    regressed_shapes: list[str] = Field(default_factory=list)

    @property
    def blocks(self) -> bool:
        """True when this verdict keeps the candidate from being accepted."""
        return self.status in ("failed", "not_judged")


class OpSummary(Record):
    """One op's result in an optimize run (what `integrate` reads)."""

    op_id: str
    # model_failed: every LLM call of the op failed (endpoint errors) and nothing was found faster
    status: Literal["improved", "no_improvement", "failed", "skipped", "model_failed"]
    stop_reason: str | None = None
    rounds: int = 0
    best: str | None = None  # validated best candidate id; None = the baseline stays
    best_dir: str | None = None  # relative to the run folder: <op>/best (candidate.json, regions/, src/)
    speedup_geomean: float | None = None  # over catalog shapes and dtypes, vs the baseline
    speedup_min: float | None = None
    guarded: bool = False  # best keeps the baseline at some shapes through a shape dispatch
    skills: list[str] = Field(default_factory=list)  # skills on the path from the baseline to the best
    detail: str = ""
    # why the op stopped, in the words of the moment it stopped (a budget's message read at the end
    # of the run would give every op the last op's figures); "" in records from before it
    stop_detail: str = ""


class RunSummary(VersionedRecord):
    """``work/runs/<run>/summary.json``: the run as a whole."""

    run: str
    mode: Literal["multi", "single"]
    coder: Literal["llm", "offline", "external"]
    backend: str
    simulated: bool  # True: timings replayed from a file, not measured in this run
    device: str | None = None
    started_at: str
    finished_at: str
    tokens: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    gpu_s: float = 0.0
    ops: list[OpSummary] = Field(default_factory=list)
