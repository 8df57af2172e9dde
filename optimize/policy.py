"""The deterministic planning policy: which (skill, params) to try next, and why.

Why a deterministic policy: the loop must make progress offline (no LLM: only
mechanical transforms), be reproducible in tests, and give an LLM planner a
ranked, explained shortlist to pick from instead of a blank page. Every skill in
the library gets a :class:`Decision`, proposed or rejected, with the reasons in
words, so a run's log says why nothing was tried as clearly as why something was.

How :func:`plan` decides:
1. Each skill's rule is evaluated on :meth:`Features.flat`; false or undecided
   (a needed feature unknown) rejects the skill, naming the feature values.
2. A skill with a mechanical transform expands its grid into concrete parameter
   sets for this code (:func:`optimize.transforms.registry.expand_targets`: which constant,
   which kernel, its block size). With no target here, the skill falls back to the
   LLM coder when one is available, else it is rejected. A skill without a
   transform needs the LLM coder (one proposal per ``llm_variants`` entry).
3. No-repeat: a (skill, params) pair already tried is never proposed again when
   it failed, was slower (speedup <= 1) or already succeeded (it is in the base
   now). Attempts that ended for reasons outside the idea (``budget_exhausted``,
   ``model_error``) may be retried. A skill that failed :data:`GIVE_UP_AFTER`
   times with any params is dropped.
4. Score = priority x (1 + expected gain), expected gain being the geometric mean
   of the skill's speedup range minus 1; mechanical skills get a small bonus
   (cheap, reproducible), larger without an LLM; each earlier success of the skill
   adds, each failure subtracts. Ties break on skill id, so the order is total.
5. Proposals are taken round-robin over skills in score order (each skill's
   first parameter set, then each one's second, ...) up to ``limit``, so one
   skill's large grid cannot crowd out the others.

Two entry points: :func:`plan` returns the proposals only (what the loop's
planning agent may choose from: never a failed or slower repeat);
:func:`decide` returns the same proposals followed by every rejection, for logs
and reports.

What must stay true: the result depends only on the arguments (no clock, no
randomness, no I/O); proposals come first in rank order, then rejections sorted
by skill id.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from optimize.features import Features
from optimize.skills import Skill, SkillLibrary
from optimize.trajectory import HistoryEntry, params_key
from optimize.transforms.registry import TRANSFORMS, expand_targets
from pipeline.record_io import Record
from pipeline.run_records import NotEvaluated, Outcome

GIVE_UP_AFTER = 3  # failures of one skill (any params) before the policy drops it
MECHANICAL_BONUS_OFFLINE = 0.15
MECHANICAL_BONUS_ONLINE = 0.05
SUCCESS_BONUS = 0.1
FAILURE_PENALTY = 0.15
#: outcomes that say nothing about the idea itself: the pair may be tried again
RETRYABLE = {Outcome.budget_exhausted, NotEvaluated.model_error}


class Decision(Record):
    """One (skill, params) the policy proposes, or a skill / pair it rejects, with reasons."""

    skill: str
    version: int
    title: str
    verdict: Literal["proposed", "rejected"]
    params: dict[str, Any] = Field(default_factory=dict)
    mode: Literal["transform", "llm"] | None = None  # how a proposal is applied
    transform: str | None = None
    score: float = 0.0
    rank: int | None = None  # 1-based among proposals
    reasons: list[str] = Field(default_factory=list)

    @property
    def key(self) -> tuple[str, str]:
        return self.skill, params_key(self.params)

    @property
    def proposed(self) -> bool:
        return self.verdict == "proposed"

    @property
    def reason(self) -> str:
        """The reasons as one line (what the planning agent shows next to an option)."""
        return "; ".join(self.reasons)


def _history_index(
    history: Sequence[HistoryEntry],
) -> tuple[dict[tuple[str, str], HistoryEntry], dict[str, int], dict[str, int]]:
    tried: dict[tuple[str, str], HistoryEntry] = {}
    failures: dict[str, int] = {}
    successes: dict[str, int] = {}
    for entry in history:
        if entry.outcome in RETRYABLE:
            continue
        tried[(entry.skill, params_key(entry.params))] = entry  # the latest attempt wins
        if _improved(entry):
            successes[entry.skill] = successes.get(entry.skill, 0) + 1
        else:
            failures[entry.skill] = failures.get(entry.skill, 0) + 1
    return tried, failures, successes


def _improved(entry: HistoryEntry) -> bool:
    return entry.outcome == Outcome.ok and entry.speedup_geomean is not None and entry.speedup_geomean > 1.0


def _tried_reason(entry: HistoryEntry) -> str:
    speed = f" ({entry.speedup_geomean:.3f}x)" if entry.speedup_geomean is not None else ""
    if _improved(entry):
        return f"already tried in round {entry.round}: it helped{speed} and is part of the base now"
    if entry.outcome == Outcome.ok:
        return f"already tried in round {entry.round}: no gain{speed}"
    return f"already tried in round {entry.round}: {entry.outcome.value}{speed}"


def _base_score(
    skill: Skill, *, mechanical: bool, llm_available: bool, failures: int, successes: int
) -> tuple[float, str]:
    low, high = skill.effect.speedup
    gain = math.sqrt(low * high) - 1.0
    score = skill.priority * (1.0 + gain)
    parts = [f"priority {skill.priority:.2f} x (1 + expected gain {gain:.3f})"]
    if mechanical:
        bonus = MECHANICAL_BONUS_ONLINE if llm_available else MECHANICAL_BONUS_OFFLINE
        score += bonus
        parts.append(f"+ {bonus:.2f} mechanical")
    if successes:
        score += SUCCESS_BONUS * successes
        parts.append(f"+ {SUCCESS_BONUS * successes:.2f} for {successes} earlier success(es)")
    if failures:
        score -= FAILURE_PENALTY * failures
        parts.append(f"- {FAILURE_PENALTY * failures:.2f} for {failures} earlier failure(s)")
    return round(score, 6), " ".join(parts) + f" = {score:.3f}"


def plan(
    features: Features,
    skills: SkillLibrary | Sequence[Skill],
    history: Sequence[HistoryEntry],
    *,
    llm_available: bool,
    limit: int,
) -> list[Decision]:
    """At most ``limit`` proposals, best first (see the module docstring for the order)."""
    return [d for d in decide(features, skills, history, llm_available=llm_available, limit=limit) if d.proposed]


def decide(
    features: Features,
    skills: SkillLibrary | Sequence[Skill],
    history: Sequence[HistoryEntry],
    *,
    llm_available: bool,
    limit: int,
) -> list[Decision]:
    """Every decision: the proposals of :func:`plan` in rank order, then each rejection with its reasons."""
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    flat = features.flat()
    tried, failures, successes = _history_index(history)
    rejected: list[Decision] = []
    # skill -> (score, [(params, mode, reasons)])
    options: list[tuple[float, Skill, list[Decision]]] = []

    for skill in sorted(skills, key=lambda s: s.id):
        score, fresh, refused = _skill_decisions(
            skill, features, flat, tried, failures, successes, llm_available=llm_available
        )
        rejected.extend(refused)
        if fresh:
            options.append((score, skill, fresh))

    options.sort(key=lambda item: (-item[0], item[1].id))
    proposals, leftovers = _round_robin(options, limit)
    rejected.extend(leftovers)
    rejected.sort(key=lambda d: (d.skill, params_key(d.params)))
    return proposals + rejected


def _skill_decisions(
    skill: Skill,
    features: Features,
    flat: dict[str, Any],
    tried: dict[tuple[str, str], HistoryEntry],
    failures: dict[str, int],
    successes: dict[str, int],
    *,
    llm_available: bool,
) -> tuple[float, list[Decision], list[Decision]]:
    """One skill's (score, fresh proposals, rejections): steps 1 to 4 of the module docstring."""
    base: dict[str, Any] = dict(skill=skill.id, version=skill.version, title=skill.title)
    verdict = skill.applies(flat)
    values = skill.rule.explain(flat)
    if verdict is not True:
        if verdict is False:
            why = f"rule is false: `{skill.applies_when}` with {values}"
        else:
            unknown = sorted(n for n in skill.rule.names if flat.get(n) is None)
            why = f"undecided: {', '.join(unknown)} unknown for `{skill.applies_when}` ({values})"
        return 0.0, [], [Decision(**base, verdict="rejected", reasons=[why])]
    n_fail, n_ok = failures.get(skill.id, 0), successes.get(skill.id, 0)
    if n_fail >= GIVE_UP_AFTER:
        why = f"rule holds ({values}) but the skill failed {n_fail} times; giving up on it"
        return 0.0, [], [Decision(**base, verdict="rejected", reasons=[why])]
    why_rule = f"rule holds: `{skill.applies_when}` with {values}"
    how = _how_applied(skill, features, base, why_rule, llm_available=llm_available)
    if isinstance(how, Decision):
        return 0.0, [], [how]
    mode, param_sets, how_text = how
    score, score_text = _base_score(
        skill, mechanical=mode == "transform", llm_available=llm_available, failures=n_fail, successes=n_ok
    )
    fresh: list[Decision] = []
    refused: list[Decision] = []
    for params in param_sets:
        entry = tried.get((skill.id, params_key(params)))
        transform = skill.transform if mode == "transform" else None
        if entry is not None:
            refused.append(
                Decision(
                    **base,
                    verdict="rejected",
                    params=params,
                    mode=mode,
                    transform=transform,
                    score=score,
                    reasons=[why_rule, _tried_reason(entry)],
                )
            )
            continue
        fresh.append(
            Decision(
                **base,
                verdict="proposed",
                params=params,
                mode=mode,
                transform=transform,
                score=score,
                reasons=[why_rule, how_text, f"score {score_text}"],
            )
        )
    return score, fresh, refused


def _how_applied(
    skill: Skill, features: Features, base: dict[str, Any], why_rule: str, *, llm_available: bool
) -> tuple[Literal["transform", "llm"], list[dict[str, Any]], str] | Decision:
    """How a skill whose rule holds is applied here: (mode, its parameter sets, in words), or its
    rejection when neither its transform nor an LLM coder can apply it (step 2)."""
    param_sets: list[dict[str, Any]] = []
    mode: Literal["transform", "llm"]
    how: str
    if skill.transform is not None:
        targets = expand_targets(skill.transform, features, skill.grid)
        if targets:
            mode, param_sets = "transform", targets
            how = f"mechanical transform {skill.transform} ({TRANSFORMS[skill.transform].summary})"
        elif llm_available:
            mode = "llm"
            param_sets = [{"variant": v} for v in skill.llm_variants] or [{}]
            how = f"transform {skill.transform} has no target in this code; the LLM coder applies the method"
        else:
            return Decision(
                **base,
                verdict="rejected",
                transform=skill.transform,
                reasons=[
                    why_rule,
                    f"transform {skill.transform} has no target in this code and no LLM coder is available",
                ],
            )
    elif llm_available:
        mode = "llm"
        param_sets = [{"variant": v} for v in skill.llm_variants] or [{}]
        how = "the LLM coder applies the method (no mechanical transform)"
    else:
        return Decision(
            **base,
            verdict="rejected",
            reasons=[why_rule, "needs the LLM coder (no mechanical transform) and no LLM is available"],
        )
    return mode, param_sets, how


def _round_robin(
    options: list[tuple[float, Skill, list[Decision]]], limit: int
) -> tuple[list[Decision], list[Decision]]:
    """(the proposals, ranked, and those ranked below ``limit``, rejected): the skills' options taken
    round-robin in score order (step 5)."""
    proposals: list[Decision] = []
    leftovers: list[Decision] = []
    depth = max((len(d) for _s, _k, d in options), default=0)
    for i in range(depth):
        for _score, _skill, decisions in options:
            if i >= len(decisions):
                continue
            if len(proposals) < limit:
                proposals.append(decisions[i].model_copy(update={"rank": len(proposals) + 1}))
            else:
                d = decisions[i]
                leftovers.append(
                    d.model_copy(
                        update={
                            "verdict": "rejected",
                            "reasons": [*d.reasons, f"ranked below the limit of {limit} proposals"],
                        }
                    )
                )
    return proposals, leftovers


__all__ = ["Decision", "GIVE_UP_AFTER", "RETRYABLE", "decide", "plan"]
