"""The optimize loop's integration points (skills, policy, features, transforms), typed, in one place.

Why: the loop (:mod:`optimize.loop`) decides nothing itself about *which* skill to
try or *what* the code looks like; it asks the skill library, the deterministic
policy, the feature reader and the mechanical transforms. :class:`Hooks` names
those four calls, so a test can wrap one (record the history the real policy is
given, count feature reads) while the loop stays the same. The defaults are the
real modules.

What must stay true:
- Each hook has one signature, written here as a Protocol; a replacement keeps it.
- :func:`skill_transform` returns ``None`` for a skill without a mechanical
  transform (the LLM coder's work), never a transform that raises on every call.
- The optional backend capabilities the loop uses (Nsight Compute profiles, the
  testing agent's case validation) are typed here too: a backend without them is
  a plain :class:`optimize.backends.Backend`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from optimize import policy
from optimize.agents.testing import ProposedCase
from optimize.features import Features, ProfileFacts, features_of_regions, measured_sizes
from optimize.harness.tools import NcuResult
from optimize.policy import Decision
from optimize.skills import Skill
from optimize.skills import load_skills as _load_skills
from optimize.trajectory import HistoryEntry
from optimize.transforms import registry as transforms
from pipeline.records import Task
from pipeline.run_records import Candidate, Evaluation

#: A skill's mechanical transform as the coding agent calls it: ``f(regions, params) -> regions``.
Transform = Callable[[dict[str, str], dict[str, Any]], dict[str, str]]
#: A backend's Nsight Compute profile of a candidate (None: the baseline).
Profiler = Callable[[str | os.PathLike[str], Task, Candidate | None], NcuResult]
#: A backend's check of the testing agent's proposed cases on the baseline alone.
CaseValidator = Callable[[str | os.PathLike[str], Task, Sequence[ProposedCase]], Sequence[tuple[bool, str]]]


class LoadSkills(Protocol):
    def __call__(self, only: Sequence[str] = ()) -> dict[str, Skill]: ...


class PolicyPlan(Protocol):
    def __call__(
        self,
        features: Features,
        skills: Mapping[str, Skill],
        history: Sequence[HistoryEntry],
        *,
        llm_available: bool,
        limit: int,
    ) -> list[Decision]: ...


class RegionFeatures(Protocol):
    def __call__(
        self,
        regions: Mapping[str, str],
        evaluation: Evaluation | None,
        build_flags: Sequence[str] | None = None,
        *,
        ncu: Mapping[str, float] | None = None,
    ) -> Features: ...


class SkillTransform(Protocol):
    def __call__(self, skill: Skill | None, features: Features) -> Transform | None: ...


def load_skills(only: Sequence[str] = ()) -> dict[str, Skill]:
    """Skill id -> Skill from the long-term skill library (cut to ``only`` when given)."""
    return {s.id: s for s in _load_skills().only(only)}


def policy_plan(
    features: Features,
    skills: Mapping[str, Skill],
    history: Sequence[HistoryEntry],
    *,
    llm_available: bool,
    limit: int,
) -> list[Decision]:
    """The deterministic policy's ranked options (never a failed/slower repeat; proposals only)."""
    return policy.plan(features, list(skills.values()), history, llm_available=llm_available, limit=limit)


def region_features(
    regions: Mapping[str, str],
    evaluation: Evaluation | None,
    build_flags: Sequence[str] | None = None,
    *,
    ncu: Mapping[str, float] | None = None,
) -> Features:
    """Features of ``regions`` with the profile facts of their evaluation (and its ncu figures)."""
    profile: ProfileFacts | Evaluation | None = evaluation
    if evaluation is not None and ncu:
        profile = ProfileFacts.from_evaluation(evaluation, ncu=ncu)
    sizes = measured_sizes(evaluation) if evaluation is not None else None
    return features_of_regions(dict(regions), profile=profile, build_flags=build_flags, sizes=sizes)


def named_transform(name: str) -> Transform:
    """The registered transform ``name`` (:data:`optimize.transforms.registry.TRANSFORMS`) as ``f(regions, params) -> regions``."""

    def run(regions: dict[str, str], params: dict[str, Any]) -> dict[str, str]:
        return transforms.apply(name, regions, params)

    return run


def skill_transform(skill: Skill | None, features: Features) -> Transform | None:
    """The skill's mechanical transform as ``f(regions, params) -> regions``, or None."""
    name = skill.transform if skill is not None else None
    return named_transform(name) if name else None


@dataclasses.dataclass
class Hooks:
    """The loop's integration points (skills, policy, features, transforms), one place to swap.

    Tests wrap them (e.g. to record the history the real policy is given); the
    defaults are the real modules.
    """

    load_skills: LoadSkills = load_skills
    policy_plan: PolicyPlan = policy_plan
    features: RegionFeatures = region_features
    transform: SkillTransform = skill_transform
