"""Single agent (``--mode single``): one LLM that plans, codes and checks itself.

Why it exists: the Astra comparison of one agent against the four-agent loop
needs both run on the same tasks, budgets and evaluations. This agent sees what
the planner and coder see together (profile, trajectory summary, the policy's
options, the regions) and answers with a choice, a plan and the edit in one
reply (:file:`single.md`). After a failed evaluation it is asked again with the
failure as feedback, in place of the separate repair agent.

Its choice is limited to the policy's options (so it cannot repeat a failed
skill); ``CHOICE: 0`` means an idea of its own, recorded as skill ``single:own``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from optimize.agents.edits import CodeResult, Dialect, regions_text, result_from_model
from optimize.agents.planning import CHOICE, Plan, decision_params, decision_reason, decision_skill, options_text
from optimize.agents.prompts import render
from optimize.agents.repair import failure_text
from optimize.llm.client import Model
from pipeline.errors import ModelError
from pipeline.run_records import Evaluation, NotEvaluated, ShapeTiming

OWN_IDEA = "single:own"
PLAN = re.compile(
    r"^\s*\**\s*PLAN\s*\**\s*:\s*(.*?)(?=^\s*region\s*:|^\s*```|^\s*<{5,9}\s*SEARCH|\Z)", re.I | re.M | re.S
)


@dataclasses.dataclass(frozen=True)
class Step:
    plan: Plan
    result: CodeResult


def step(
    decisions: Sequence[Any],
    skills: dict[str, Any],
    regions: Mapping[str, str],
    *,
    op_id: str,
    profile_text: str,
    trajectory_text: str,
    model: Model,
    feedback: str = "",
    previous: Plan | None = None,
    kinds: Mapping[str, str] | None = None,
    dialect: Dialect | None = None,
) -> Step:
    """One reply of the single agent: its plan and its edit.

    With ``feedback`` (a failed evaluation of its last edit) the agent is fixing
    its own candidate; the plan then stays ``previous`` whatever it answers, so
    a fix is recorded against the skill it fixes.
    """
    fb = f"Your last candidate failed; fix it (keep the optimization):\n{feedback}\n" if feedback else ""
    messages = render(
        dialect.template("single") if dialect else "single",
        facts=dialect.facts if dialect else "",
        op_id=op_id,
        profile=profile_text,
        trajectory=trajectory_text,
        options=options_text(decisions, skills) or "(no options left: use your own idea, CHOICE: 0)",
        feedback=fb,
        regions=regions_text(regions, kinds, dialect),
    )
    fallback = previous or _plan_for(decisions, 0, "")
    try:
        reply = model.complete("single", messages)
    except ModelError as err:
        return Step(fallback, CodeResult(NotEvaluated.model_error, None, str(err), agent="single"))
    result = result_from_model(model, reply, regions, agent="single", dialect=dialect)
    if previous is not None:
        return Step(previous, result)
    match = CHOICE.search(reply.text)
    number = int(match.group(1)) if match else -1
    body = PLAN.search(reply.text)
    text = body.group(1).strip() if body else ""
    if not 0 <= number <= len(decisions):
        number = 0
        text = (text + "\n" if text else "") + "(no valid CHOICE line: recorded as the agent's own idea)"
    return Step(_plan_for(decisions, number, text), result)


def fix_feedback(evaluation: Evaluation, attempt: int, max_attempts: int) -> str:
    """The ``feedback`` of a fix step: the failed evaluation of the agent's own candidate."""
    return f"outcome {evaluation.outcome.value} (fix attempt {attempt} of {max_attempts})\n{failure_text(evaluation)}"


def guard_feedback(slow: Sequence[ShapeTiming]) -> str:
    """The ``feedback`` of a guard step: its correct candidate regressed at ``slow`` (see :file:`guard.md`)."""
    shapes = "; ".join(f"{t.label} {t.dtype} {t.speedup:.3f}x" for t in slow)
    return (
        f"correct, but slower than the baseline at: {shapes}. Add a host-side shape dispatch in the launcher "
        "that keeps the original code (the baseline regions) for those shapes and uses yours elsewhere."
    )


def _plan_for(decisions: Sequence[Any], number: int, text: str) -> Plan:
    if number == 0 or not decisions:
        return Plan(skill=OWN_IDEA, params={}, text=text, reason="the single agent's own idea", source="llm", option=0)
    chosen = decisions[number - 1]
    return Plan(
        skill=decision_skill(chosen),
        params=decision_params(chosen),
        text=text,
        reason=decision_reason(chosen),
        source="llm",
        option=number,
        decision=chosen,
    )
