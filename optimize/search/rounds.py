"""One search round: the space around the current best, searched a population at a time.

Flow: the policy's mechanical proposals for the best so far -> a
:class:`~optimize.search.space.Space` -> Kernel Tuner's strategy
(:func:`optimize.search.tuner.run_search`) asks for batches of points -> each point
becomes a candidate (its transforms applied to the best's regions, one stored
candidate per distinct code) -> the new ones are evaluated together (``measure``: the
GPU backend builds them at once and times them in one worker) -> every member is
judged against the current best (:func:`optimize.acceptance.judge_round`) -> the
winner is the fastest member that the round's rules would accept.

What must stay true:
- A point whose code was already evaluated (this round, an earlier one, a rerun) is
  read back by ``measure``, never measured twice: the cache key is the candidate id,
  the content hash of its regions.
- Every member is returned with its evaluation, so the trajectory records every
  candidate, failed and slower ones included.
- A member slower than the baseline at any catalog shape beyond the noise band can
  never be the winner; its cost is pushed past every member that is not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from optimize.acceptance import judge_round
from optimize.agents.planning import Plan
from optimize.policy import Decision
from optimize.reach import Foreign, confine
from optimize.run_folder import clip, why
from optimize.search.space import Dimension, Space, Unrealizable, build_space, realize
from optimize.search.tuner import Point, choose_strategy, run_search
from optimize.trajectory import Attempt, candidate_id
from pipeline.config import Config
from pipeline.run_records import Candidate, Evaluation, NotEvaluated, Outcome, Step
from pipeline.stats import speedup_geomean

#: measure(candidates) -> their evaluations in order, or None where the budget left them unmeasured
MeasureMany = Callable[[Sequence[Candidate]], list[Evaluation | None]]

#: Added to a regressing member's cost: worse than any member that regresses nowhere.
REGRESSION_PENALTY = 1.0


@dataclass
class Member:
    candidate: Candidate
    evaluation: Evaluation
    point: Point


@dataclass
class SearchRound:
    space: Space
    strategy: str = ""
    members: list[Member] = field(default_factory=list)
    unrealizable: list[tuple[Point, str]] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)  # points measured per batch (new and read back)
    winner: Member | None = None
    budget_spent: bool = False
    foreign: list[str] = field(default_factory=list)  # dimensions left out: they edit only other ops' code
    rejected: list[str] = field(default_factory=list)  # "skill: why" of each allowed skill the policy rejected

    def summary(self) -> str:
        if not self.space.dimensions:
            why_not = "; ".join(self.rejected) or "the policy made no proposal"
            return f"nothing to search: no allowed skill proposes a change to this op's code ({why_not})"
        new = len(self.members)
        parts = [
            f"search ({self.strategy}) over {self.space.describe()}",
            f"{new} candidates in {len(self.batches)} batch(es) {self.batches}",
        ]
        if self.foreign:
            parts.append(f"left out, as they edit only code this op never runs: {', '.join(self.foreign)}")
        if self.unrealizable:
            parts.append(f"{len(self.unrealizable)} points whose transforms do not compose")
        if self.budget_spent:
            parts.append("stopped: budget spent")
        return "; ".join(parts)

    def outcome(self) -> tuple[list[Attempt], Member | None]:
        """The round's attempts (one per member, plus the points that did not compose) and the member it
        stands for: the winner, else the fastest correct member, else the first failed one (so the
        round's record says why nothing was accepted); None when nothing was evaluated."""
        attempts = [
            Attempt(
                agent="search",
                status="edited",
                candidate=m.candidate.id,
                outcome=m.evaluation.outcome,
                detail=clip(f"{m.candidate.rationale}: {why(m.evaluation)}"),
            )
            for m in self.members
        ]
        if self.unrealizable or not self.members:
            attempts.append(Attempt(agent="search", status=NotEvaluated.not_applicable, detail=clip(self.summary())))
        if self.winner is not None or not self.members:
            return attempts, self.winner
        correct = [m for m in self.members if m.evaluation.outcome in (Outcome.ok, Outcome.slower)]
        if correct:
            return attempts, max(correct, key=lambda m: (_geomean(m.evaluation), m.candidate.id))
        return attempts, self.members[0]

    def plan(self, member: Member | None) -> Plan:
        """The round's plan record: what was searched, and the member's steps."""
        chosen = member.candidate if member is not None else None
        return Plan(
            skill=chosen.skill or "search" if chosen is not None else "search",
            params=dict(chosen.params) if chosen is not None else {},
            text=self.summary(),
            reason=f"the best of {len(self.members)} candidates" if chosen is not None else "nothing to evaluate",
            source="search",
            option=1,
        )


def _rejections(decisions: Sequence[Decision], skills: Sequence[str]) -> list[str]:
    """``skill: why`` for each skill (of the run's allowed ones) the policy rejected, first reason each."""
    out: dict[str, str] = {}
    for d in decisions:
        if not d.proposed and (not skills or d.skill in skills):
            out.setdefault(d.skill, d.reason or "rejected")
    return [f"{skill}: {reason}" for skill, reason in out.items()]


def _geomean(evaluation: Evaluation) -> float:
    return speedup_geomean(evaluation.timings) or 0.0


def search_round(
    base: Candidate,
    best_geomean: float | None,
    decisions: Sequence[Decision],
    *,
    config: Config,
    coder: str,
    measure: MeasureMany,
    seed: int,
    foreign: Foreign | None = None,
) -> SearchRound:
    """Search the space the proposals span around ``base``; see the module doc.

    ``foreign``: the code only other ops run (:mod:`optimize.reach`); a point's edits to it are
    given back, and a point that edits nothing else does not compose.
    """
    others = foreign or Foreign()
    space, dropped = _own_dimensions(build_space(decisions, config.search.skills), base.regions, others)
    result = SearchRound(space=space, foreign=dropped, rejected=_rejections(decisions, config.search.skills))
    if space.size <= 1:
        return result
    noise = config.harness.noise_pct
    points = _Points(space, base, others, result, best_geomean, coder, measure, noise)
    evals = config.search.evals_per_round
    x0: Point | None = None
    singles: list[Point] = []
    if config.search.singles_first and choose_strategy(config.search.strategy, space.size, evals) != "brute_force":
        singles = [{d.name: v} for d in space.dimensions for v in d.values[1:] if points.composes({d.name: v})][
            : config.search.population
        ]
    if singles:
        found = points.costs(singles)
        result.batches.append(len(singles))
        x0 = _compose_improving(singles, found, 1.0 / (best_geomean or 1.0), points.composes)
        evals = 0 if any(cost is None for cost in found) else evals - len(singles)  # None: a budget is spent
    strategy, _, batches = (
        run_search(
            space,
            points.costs,
            strategy=config.search.strategy,
            population=config.search.population,
            max_evals=evals,
            seed=seed,
            valid=points.composes if space.size <= config.search.restrict_points else points.pairs_compose,
            x0=x0,
        )
        if evals > 0
        else ("", [], [])
    )
    result.strategy = " then ".join(x for x in ("one choice at a time" if singles else "", strategy) if x)
    result.batches += batches
    accepted = [(m, v) for m in result.members if (v := judge_round(m.evaluation, best_geomean, noise)).accepted]
    if accepted:
        result.winner = max(accepted, key=lambda mv: (mv[1].speedup_geomean or 0.0, mv[0].candidate.id))[0]
    return result


@dataclass(eq=False)
class _Points:
    """A round's points made into candidates and measured: each point's regions made once, each new
    candidate measured once, every member added to ``result`` (the strategy's cost function and its
    test of which points compose)."""

    space: Space
    base: Candidate
    others: Foreign
    result: SearchRound
    best_geomean: float | None
    coder: str
    measure: MeasureMany
    noise: float
    by_id: dict[str, Member] = field(default_factory=dict)
    made: dict[tuple[tuple[str, int], ...], tuple[dict[str, str], list[Step]] | Unrealizable] = field(
        default_factory=dict
    )
    pairs: dict[tuple[tuple[str, int], ...], bool] = field(default_factory=dict)

    def realized(self, point: Point) -> tuple[dict[str, str], list[Step]] | Unrealizable:
        """``point``'s regions and steps, made once; a point that does not compose is said once."""
        key = tuple(sorted(point.items()))
        if key not in self.made:
            try:
                regions, steps = realize(self.space, point, self.base.regions)
                kept = confine(self.base.regions, regions, self.others)
                if kept == self.base.regions and regions != self.base.regions:  # every edit was another op's
                    raise Unrealizable(f"edits only code this op never runs ({', '.join(self.others.names())})")
                self.made[key] = (kept, steps)
            except Unrealizable as err:
                self.made[key] = err
                self.result.unrealizable.append((dict(point), str(err)))
        return self.made[key]

    def composes(self, point: Point) -> bool:
        return not isinstance(self.realized(point), Unrealizable)

    def pairs_compose(self, point: Point) -> bool:
        """Whether every two of ``point``'s choices compose: a space too large to make each point
        of is cut by its pairs (each made once); a point that passes and still does not compose
        is found when it is drawn, at no build cost."""
        chosen = sorted((name, value) for name, value in point.items() if value)
        for i, first in enumerate(chosen):
            for second in chosen[i:]:
                key = (first, second) if first != second else (first,)
                if key not in self.pairs:
                    try:
                        realize(self.space, dict(key), self.base.regions)
                        self.pairs[key] = True
                    except Unrealizable:
                        self.pairs[key] = False
                if not self.pairs[key]:
                    return False
        return True

    def costs(self, points: Sequence[Point]) -> list[float | str | None]:
        base, by_id, result = self.base, self.by_id, self.result
        out: list[float | str | None] = [None] * len(points)
        ids: list[str | None] = [None] * len(points)  # each point's candidate, measured or to be
        wanted: dict[str, tuple[Candidate, Point]] = {}  # new candidates of this batch, once each
        for index, point in enumerate(points):
            made_point = self.realized(point)
            if isinstance(made_point, Unrealizable):  # only without the restriction (a strategy's own draw)
                out[index] = "unrealizable"
                continue
            regions, steps = made_point
            cid = candidate_id(regions)
            if cid == base.id:  # every step undone, or none: the base itself
                out[index] = 1.0 / (self.best_geomean or 1.0)
                continue
            ids[index] = cid
            if cid not in by_id and cid not in wanted:
                wanted[cid] = (
                    Candidate(
                        op_id=base.op_id,
                        id=cid,
                        parent=base.id,
                        regions=regions,
                        skill="+".join(s.skill for s in steps),
                        params={"steps": [s.model_dump(mode="json") for s in steps]},
                        coder=f"{self.coder}:search",
                        rationale="; ".join(f"{s.skill} {s.params}" if s.params else s.skill for s in steps),
                        steps=steps,
                    ),
                    point,
                )
        if wanted:
            evaluations = self.measure([candidate for candidate, _ in wanted.values()])
            for (candidate, point), evaluation in zip(wanted.values(), evaluations):
                if evaluation is None:
                    result.budget_spent = True
                    continue
                by_id[candidate.id] = Member(candidate, evaluation, point)
                result.members.append(by_id[candidate.id])
        for index, member_id in enumerate(ids):  # unmeasured (budget spent) points stay None
            if member_id is not None and member_id in by_id:
                out[index] = _cost(by_id[member_id].evaluation, self.noise)
        return out


def _compose_improving(
    singles: Sequence[Point], found: Sequence[float | str | None], base_cost: float, composes: Callable[[Point], bool]
) -> Point | None:
    """The point that takes, in each dimension, the single choice that beat the base most (None when
    none did, or when those choices do not compose): the genetic algorithm's first draw."""
    best: dict[str, tuple[float, int]] = {}
    for point, cost in zip(singles, found):
        if isinstance(cost, float) and cost < base_cost:
            ((name, value),) = point.items()
            if name not in best or cost < best[name][0]:
                best[name] = (cost, value)
    point = {name: value for name, (_, value) in best.items()}
    return point if point and composes(point) else None


def _own_dimensions(space: Space, regions: Mapping[str, str], others: Foreign) -> tuple[Space, list[str]]:
    """``space`` without the dimensions each of whose choices, applied alone, edits only code other ops
    run (``confine`` gives every edit back), and the names of those left out.

    Why: every point that differs from another only there names the same candidate, so the
    strategy would spend draws on repeats (silu_and_mul's space on the H200, 2026-12-05, held
    ``set_launch_bounds`` of ``act_kernel``, which it never launches: 4x its real size). A
    choice that does not compose alone (a follower of a PDL launch) keeps its dimension.
    """
    if not others:
        return space, []
    kept: list[Dimension] = []
    dropped: list[Dimension] = []
    for dim in space.dimensions:
        foreign_only = True
        for value in dim.values[1:]:
            try:
                edited, _ = realize(space, {dim.name: value}, regions)
            except Unrealizable:
                foreign_only = False
                break
            if edited == regions or confine(regions, edited, others) != regions:
                foreign_only = False
                break
        (dropped if foreign_only else kept).append(dim)
    return Space(dimensions=tuple(kept)), [d.name for d in dropped]


def _cost(evaluation: Evaluation, noise_pct: float) -> float | str:
    """1 / geomean speedup over the baseline (lower is better); a failed member is "failed"."""
    if evaluation.outcome not in (Outcome.ok, Outcome.slower):
        return "failed"
    verdict = judge_round(evaluation, None, noise_pct)
    if not verdict.speedup_geomean:
        return "failed"
    return 1.0 / verdict.speedup_geomean + (REGRESSION_PENALTY if verdict.slow else 0.0)


__all__ = ["Member", "MeasureMany", "REGRESSION_PENALTY", "SearchRound", "search_round"]
