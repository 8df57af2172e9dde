"""What each agent verb answers, as types: the JSON an outside coder reads (:mod:`agent.verbs`).

Why a module of its own: the answers are the interface both front ends print (the command line and
the MCP tools, :mod:`agent.mcp_server`), so their keys are written once, here, apart from the verbs'
logic. What must stay true: a key a verb adds to its answer is added here, with its meaning; a key
that is there only sometimes is ``NotRequired``.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from pipeline.records import Dtype


class TaskView(TypedDict):
    """``show``'s answer (:func:`_task_view`); ``why_not_evaluated`` where no run evaluated the op (:func:`show_task`)."""

    op: str
    best: str
    evaluated: bool
    language: str
    regions: dict[str, str]
    editable: list[str]
    not_editable: dict[str, str]
    facts: dict[str, object]
    contract: dict[str, object]
    shapes: list[str]
    buckets: dict[str, dict[str, float]]
    ptxas: list[dict[str, object]]
    ncu: object  # the candidate's Nsight Compute digest as recorded (JSON), None for none
    tried: str | list[str]
    why_not_evaluated: NotRequired[str]


class BuildAnswer(TypedDict):
    """``build``'s answer."""

    op: str
    language: str
    ok: bool
    seconds: float
    cached: bool
    ptxas: list[dict[str, object]]
    errors: str
    foreign: list[str]


class OpRow(TypedDict):
    """One op of ``ops``; the figures only where this run evaluated its baseline."""

    op: str
    evaluated_in_run: bool
    baseline_by_bucket: NotRequired[dict[str, dict[str, float]]]
    best_speedup_geomean: NotRequired[float | None]
    rounds: NotRequired[int]


class SkillRow(TypedDict):
    """A skill ``brief`` proposes, with its method text."""

    skill: str
    params: dict[str, object]
    why: str
    method: str


class Avoid(TypedDict):
    """A (skill, params) that failed, for ``brief``'s ``do_not_repeat``."""

    skill: str
    params: dict[str, object]
    outcome: str


class Brief(TypedDict):
    """``brief``'s answer; ``why_not_evaluated`` where no evaluation of the op is at hand."""

    op: str
    evaluated: bool
    why_not_evaluated: NotRequired[str]
    bottleneck: str
    skills: list[SkillRow]
    do_not_repeat: list[Avoid]
    not_editable: dict[str, str]


class ShapeRow(TypedDict):
    """One shape of a submitted candidate's evaluation."""

    shape: str
    dtype: Dtype
    speedup: float | None
    spread_pct: float
    time_over_floor: float | None  # None: the op is not byte-bound


class SubmitAnswer(TypedDict):
    """``submit``'s answer: the round's verdict, with the evaluation where the candidate was evaluated."""

    op: str
    round: int
    candidate: str | None
    outcome: str
    accepted: bool
    detail: str
    speedup_geomean: float | None
    regressed_shapes: list[str]
    evaluation: NotRequired[str]
    shapes: NotRequired[list[ShapeRow]]


class TrajectoryRow(TypedDict):
    """One line of an op's trajectory."""

    kind: str
    round: int
    coder: str
    skill: str | None
    outcome: str
    speedup_geomean: float | None
    accepted: bool
    candidate: str | None
    detail: str


class IntegrateAnswer(TypedDict):
    """``integrate``'s answer: the stage's exit code and the PR's file (None: none written)."""

    exit_code: int
    pr: str | None


__all__ = [
    "Avoid",
    "Brief",
    "BuildAnswer",
    "IntegrateAnswer",
    "OpRow",
    "ShapeRow",
    "SkillRow",
    "SubmitAnswer",
    "TaskView",
    "TrajectoryRow",
]
