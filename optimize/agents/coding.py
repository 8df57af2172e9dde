"""Coding agent: the plan turned into new texts for the editable regions.

With an LLM the agent sends the plan, the cited skill's method and risks, the
profile, the trajectory summary and the current regions (:file:`coding.md`), and
parses the reply with :mod:`optimize.agents.edits` — whole regions or
SEARCH/REPLACE blocks. A malformed reply, an unchanged region set (whitespace
aside) or an endpoint failure is a :class:`CodeResult` status that the round
records; never an exception (a budget running out is, since it stops the loop).
A malformed reply is also taken out of the model's reply cache.

Offline (no endpoint, ``--coder offline``) the agent applies the skill's
mechanical transform from :mod:`optimize.transforms`; a transform that does not
apply to this code is the status ``not_applicable``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from optimize.agents.edits import CodeResult, Dialect, regions_text, result_from_model
from optimize.agents.planning import Plan, params_text
from optimize.agents.prompts import render
from optimize.llm.client import Model
from pipeline.errors import ModelError
from pipeline.run_records import NotEvaluated


def _skill_field(skill: Any, name: str) -> str:
    value = getattr(skill, name, "") if skill is not None else ""
    if isinstance(value, (list, tuple)):
        return "\n".join(f"- {v}" for v in value)
    return str(value or "")


def code(
    plan: Plan,
    skill: Any,
    regions: Mapping[str, str],
    *,
    op_id: str,
    profile_text: str,
    trajectory_text: str,
    model: Model | None,
    kinds: Mapping[str, str] | None = None,
    transform: Any = None,
    dialect: Dialect | None = None,
) -> CodeResult:
    """New regions for ``plan``: by the LLM when ``model`` is given, else by ``transform``.

    ``transform(regions, params) -> dict[str, str]`` is the skill's mechanical
    transform (offline coder); it raises ``optimize.transforms``' not-applicable
    error when the code does not have the shape the transform needs.
    """
    if model is None:
        return code_offline(plan, regions, transform)
    messages = render(
        dialect.template("coding") if dialect else "coding",
        facts=dialect.facts if dialect else "",
        op_id=op_id,
        skill=plan.skill,
        params=params_text(plan.params),
        plan=plan.text,
        method=_skill_field(skill, "method") or "(none given)",
        risks=_skill_field(skill, "risks") or "(none given)",
        profile=profile_text,
        trajectory=trajectory_text,
        regions=regions_text(regions, kinds, dialect),
    )
    try:
        reply = model.complete("coding", messages)
    except ModelError as err:
        return CodeResult(NotEvaluated.model_error, None, str(err), agent="coding")
    return result_from_model(model, reply, regions, agent="coding", dialect=dialect)


def code_offline(plan: Plan, regions: Mapping[str, str], transform: Any) -> CodeResult:
    """The skill's mechanical transform applied to ``regions``."""
    if transform is None:
        return CodeResult(
            NotEvaluated.not_applicable,
            None,
            f"skill {plan.skill} has no mechanical transform (it needs the LLM coder)",
            agent="transform",
        )
    from optimize.transforms import registry as transforms

    try:
        new = transform(dict(regions), dict(plan.params))
    except transforms.NotApplicable as err:
        return CodeResult(NotEvaluated.not_applicable, None, f"{plan.skill}: {err}", agent="transform")
    except transforms.TransformError as err:
        # A bug in the transform or its parameters: recorded loudly (so the policy
        # does not retry it and the report shows it), not hidden, not fatal to the run.
        return CodeResult(
            NotEvaluated.not_applicable,
            None,
            f"{plan.skill}: transform error (a kernelsmith bug, please report): {err}",
            agent="transform",
        )
    if new is None:
        return CodeResult(
            NotEvaluated.not_applicable, None, f"{plan.skill}: the transform found nothing to change", agent="transform"
        )
    new = {name: new.get(name, text) for name, text in regions.items()}
    if new == dict(regions):
        return CodeResult(
            NotEvaluated.no_change, None, f"{plan.skill}: the transform left every region as it was", agent="transform"
        )
    return CodeResult("edited", new, "", agent="transform")
