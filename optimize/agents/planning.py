"""Planning agent: which skill (with which parameters) to try next, and how.

The choice is always made among the deterministic policy's options
(:func:`optimize.policy.plan`), which never offers a (skill, params) that already
failed or came out slower; so no LLM can make the loop repeat a failure. With an
LLM, the agent shows it the ranked options, the profile and the trajectory
summary, and the model picks one and writes a concrete plan citing it. A reply
that picks nothing valid falls back to the policy's first option (recorded in
the plan text), never to an option outside the list.

Offline, the plan is the policy's first option and its reason.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypeAlias

from optimize.agents.edits import Dialect
from optimize.agents.prompts import render
from optimize.llm.client import Model
from pipeline.errors import ModelError

if TYPE_CHECKING:
    from optimize.policy import Decision
    from optimize.skills import Skill

#: A policy option: a :class:`~optimize.policy.Decision`, or the same fields as a mapping.
Option: TypeAlias = "Decision | Mapping[str, object]"


@dataclasses.dataclass(frozen=True)
class Plan:
    skill: str
    params: dict[str, object]
    text: str  # what the coder is told to do
    reason: str  # the policy's reason for this option
    source: str  # "policy" | "llm" | "llm-fallback"
    option: int  # 1-based index in the policy's ranking
    decision: Decision | None = None  # the policy's Decision object


# --------------------------------------------------------------------------- policy decisions


def decision_skill(decision: Option) -> str:
    skill = getattr(decision, "skill", None)
    if skill is None and isinstance(decision, dict):
        skill = decision.get("skill")
    if isinstance(skill, str):
        return skill
    if skill is None:
        raise TypeError(f"policy decision {decision!r} names no skill")
    return skill.id


def decision_params(decision: Option) -> dict[str, object]:
    params = getattr(decision, "params", None)
    if params is None and isinstance(decision, dict):
        params = decision.get("params")
    return dict(params or {})


def decision_reason(decision: Option) -> str:
    for attr in ("reason", "why", "rationale"):
        value = getattr(decision, attr, None)
        if value is None and isinstance(decision, dict):
            value = decision.get(attr)
        if value:
            return str(value) if not isinstance(value, (list, tuple)) else "; ".join(map(str, value))
    return ""


def params_text(params: Mapping[str, object]) -> str:
    return (" " + json.dumps(params, sort_keys=True)) if params else ""


def options_text(decisions: Sequence[Option], skills: Mapping[str, Skill]) -> str:
    """The numbered option list shown to planning and single agents."""
    lines = []
    for number, decision in enumerate(decisions, 1):
        sid = decision_skill(decision)
        skill = skills.get(sid)
        title = getattr(skill, "title", "") if skill is not None else ""
        method = getattr(skill, "method", "") if skill is not None else ""
        risks = getattr(skill, "risks", "") if skill is not None else ""
        if isinstance(risks, (list, tuple)):
            risks = "; ".join(map(str, risks))
        score = getattr(decision, "score", None)
        lines.append(f"{number}. {sid}{params_text(decision_params(decision))}: {title}")
        if score is not None:
            lines.append(f"   policy score {float(score):.3g}; why: {decision_reason(decision)}")
        elif decision_reason(decision):
            lines.append(f"   why: {decision_reason(decision)}")
        if method:
            lines.append(f"   method: {_squash(str(method))}")
        if risks:
            lines.append(f"   risks: {_squash(str(risks))}")
    return "\n".join(lines)


def _squash(text: str, width: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


# --------------------------------------------------------------------------- entry point


CHOICE = re.compile(r"^\s*\**\s*CHOICE\s*\**\s*[:=]\s*\**\s*(\d+)", re.I | re.M)
PLAN = re.compile(r"^\s*\**\s*PLAN\s*\**\s*:\s*(.*)", re.I | re.M | re.S)


def plan(
    decisions: Sequence[Decision],
    skills: Mapping[str, Skill],
    *,
    op_id: str,
    region_names: Sequence[str],
    profile_text: str,
    trajectory_text: str,
    model: Model | None = None,
    dialect: Dialect | None = None,
) -> Plan | None:
    """The plan for this round, or None when the policy has no option left.

    ``decisions`` is the policy's ranking (already free of failed repeats);
    ``skills`` maps skill id to Skill. A ModelError from the endpoint falls back
    to the policy's first option, since planning has a deterministic answer.
    """
    if not decisions:
        return None
    first = decisions[0]
    default = Plan(
        skill=decision_skill(first),
        params=decision_params(first),
        text=_default_text(first, skills),
        reason=decision_reason(first),
        source="policy",
        option=1,
        decision=first,
    )
    if model is None:
        return default
    messages = render(
        dialect.template("planning") if dialect else "planning",
        facts=dialect.facts if dialect else "",
        op_id=op_id,
        region_names=", ".join(region_names),
        profile=profile_text,
        trajectory=trajectory_text,
        options=options_text(decisions, skills),
    )
    try:
        reply = model.complete("planning", messages)
    except ModelError as err:
        return dataclasses.replace(
            default, source="llm-fallback", text=default.text + f"\n(planner unavailable: {err.message})"
        )
    match = CHOICE.search(reply.text)
    number = int(match.group(1)) if match else 0
    body = PLAN.search(reply.text)
    text = body.group(1).strip() if body else reply.text.strip()
    if not 1 <= number <= len(decisions):
        model.discard(reply)  # unusable: a fixed server or a new run is asked again, not handed this
        return dataclasses.replace(
            default,
            source="llm-fallback",
            text=default.text + f"\n(the planner's choice {number or 'missing'} is not an option; took option 1)",
        )
    chosen = decisions[number - 1]
    return Plan(
        skill=decision_skill(chosen),
        params=decision_params(chosen),
        text=text or _default_text(chosen, skills),
        reason=decision_reason(chosen),
        source="llm",
        option=number,
        decision=chosen,
    )


def _default_text(decision: Option, skills: Mapping[str, Skill]) -> str:
    sid = decision_skill(decision)
    skill = skills.get(sid)
    title = getattr(skill, "title", sid) if skill is not None else sid
    method = getattr(skill, "method", "") if skill is not None else ""
    reason = decision_reason(decision)
    lines = [f"Apply skill {sid}{params_text(decision_params(decision))}: {title}."]
    if reason:
        lines.append(f"Why: {reason}")
    if method:
        lines.append(f"Method: {_squash(str(method), 1200)}")
    return "\n".join(lines)
