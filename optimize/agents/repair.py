"""Repair agent: fix a failed candidate, or guard its slow shapes.

Two problems, one entry point (:func:`repair`):
- the candidate did not build, crashed, timed out or disagreed with the
  baseline: the agent gets the failure (nvcc's errors annotated with region line
  numbers by :mod:`pipeline.build`, or the checker's mismatch report), the plan
  and the trajectory summary (:file:`repair.md`) and returns fixed regions;
- the candidate is correct but slower than the baseline at some catalog shapes
  beyond the noise band: the agent adds a host-side shape dispatch in the
  launcher that keeps the baseline code for those shapes (:file:`guard.md`).
  This is the only way such a candidate can become an op's best.

The loop bounds the attempts (``budget.repair_attempts``); each attempt's prompt
says which attempt it is. Like the coding agent, every failure to produce
regions is a recorded :class:`CodeResult` status.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from optimize.agents.edits import CodeResult, Dialect, regions_text, result_from_model
from optimize.agents.planning import Plan, params_text
from optimize.agents.prompts import render
from optimize.llm.client import Model
from pipeline.errors import ModelError
from pipeline.run_records import Evaluation, NotEvaluated, Outcome, ShapeTiming

MAX_FAILURE_CHARS = 4000


def failure_text(evaluation: Evaluation) -> str:
    """What went wrong, from the evaluation, trimmed for a prompt (tool output kept verbatim)."""
    parts = []
    if evaluation.outcome == Outcome.compile_failed and evaluation.build is not None and evaluation.build.stderr:
        parts.append("Compiler output:\n" + _tail(evaluation.build.stderr))
    if evaluation.detail:
        parts.append(_tail(evaluation.detail))
    if evaluation.outcome == Outcome.incorrect:
        parts.append(
            f"checks passed {evaluation.checks_passed}, failed {evaluation.checks_failed}; "
            f"max abs error vs baseline {evaluation.max_abs_err}"
        )
    return "\n".join(parts) or f"outcome {evaluation.outcome.value}, no further detail"


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_FAILURE_CHARS else "...\n" + text[-MAX_FAILURE_CHARS:]


def _shape_lines(timings: Sequence[ShapeTiming]) -> str:
    lines = []
    for t in timings:
        sizes = ", ".join(f"{k}={v}" for k, v in sorted(t.sizes.items()))
        lines.append(
            f"- {t.dtype} {sizes}: {t.speedup:.3f}x vs baseline ({t.time_us:.2f} us, baseline {t.baseline_us:.2f} us)"
        )
    return "\n".join(lines) or "(none)"


def repair(
    plan: Plan,
    regions: Mapping[str, str],
    evaluation: Evaluation,
    *,
    op_id: str,
    attempt: int,
    max_attempts: int,
    trajectory_text: str,
    model: Model,
    kinds: Mapping[str, str] | None = None,
    slower: Sequence[ShapeTiming] = (),
    baseline_regions: Mapping[str, str] | None = None,
    dialect: Dialect | None = None,
) -> CodeResult:
    """Fixed (or guarded, when ``slower`` is given) regions for a failed candidate."""
    if slower:
        faster = [t for t in evaluation.timings if t not in slower]
        messages = render(
            dialect.template("guard") if dialect else "guard",
            facts=dialect.facts if dialect else "",
            op_id=op_id,
            slower=_shape_lines(slower),
            faster=_shape_lines(faster),
            baseline_regions=regions_text(baseline_regions or {}, kinds, dialect),
            regions=regions_text(regions, kinds, dialect),
        )
        agent = "guard"
    else:
        messages = render(
            dialect.template("repair") if dialect else "repair",
            facts=dialect.facts if dialect else "",
            op_id=op_id,
            skill=plan.skill,
            params=params_text(plan.params),
            plan=plan.text,
            outcome=evaluation.outcome.value,
            attempt=attempt,
            max_attempts=max_attempts,
            failure=failure_text(evaluation),
            trajectory=trajectory_text,
            regions=regions_text(regions, kinds, dialect),
        )
        agent = "repair"
    try:
        reply = model.complete("repair", messages)  # the guard is a repair: same model settings
    except ModelError as err:
        return CodeResult(NotEvaluated.model_error, None, str(err), agent=agent)
    return result_from_model(model, reply, regions, agent=agent, dialect=dialect)
