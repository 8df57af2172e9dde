"""Testing agent: the test plan of one op.

The deterministic core is the harness's: every catalog shape of the task, plus
``harness.held_out_shapes`` fresh held-out shapes drawn anew for each evaluation
(:func:`optimize.harness.inputs.draw_held_out`), each in every dtype, across the
normal/uniform/edge value distributions and contiguous/strided layouts the
harness runs. This agent records that plan and checks once that the contract
can produce held-out shapes at all, so a contract problem shows before round 1.

With an LLM the agent also reviews the contract (:file:`testing.md`) and proposes
extra cases: odd sizes, limits, value ranges. A proposal is kept only if

1. every size it gives is a symbol of the contract and passes the contract's
   limits (:meth:`pipeline.records.Contract.accepts`), and
2. it runs cleanly on the *baseline* (``validate``, which the backend provides):
   a case the baseline itself fails says nothing about a candidate.

Rejected proposals are kept in the plan with the reason, so the report can show
what the model asked for and why it was not used.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any, Callable, Literal, Sequence

from pydantic import Field

from pipeline.errors import ModelError
from pipeline.records import Record, ShapeCase, Task, VersionedRecord

from optimize.agents.prompts import render
from optimize.llm.client import Model

Distribution = Literal["normal", "uniform", "edge"]
MAX_PROPOSALS = 6


class ProposedCase(Record):
    label: str
    sizes: dict[str, int]
    distribution: Distribution = "edge"
    why: str = ""
    kept: bool = False
    reason: str = ""  # why it was rejected, or how it was validated


class TestPlan(VersionedRecord):
    __test__ = False  # not a pytest test class

    op_id: str
    catalog: list[ShapeCase]
    held_out_per_evaluation: int
    held_out_preview: list[ShapeCase] = Field(default_factory=list)  # one draw, to prove the contract works
    extra: list[ProposedCase] = Field(default_factory=list)
    reviewed_by: str = "deterministic"
    notes: list[str] = Field(default_factory=list)

    def kept(self) -> list[ProposedCase]:
        return [c for c in self.extra if c.kept]


Validator = Callable[[Sequence[ProposedCase]], Sequence[tuple[bool, str]]]


def plan_tests(
    task: Task,
    *,
    held_out: int,
    model: Model | None = None,
    validate: Validator | None = None,
    max_cases: int = MAX_PROPOSALS,
    seed: int = 0,
) -> TestPlan:
    """The op's test plan; see the module docstring.

    ``validate(cases) -> [(ok, reason)]`` runs cases on the baseline; without it
    (a replayed run) no proposal can be kept, and the plan says so.
    """
    from optimize.harness import inputs

    notes: list[str] = []
    preview: list[ShapeCase] = []
    try:
        preview = inputs.draw_held_out(
            task.contract, task.shapes, held_out, random.Random(seed), instantiations=task.instantiations
        )
    except Exception as err:  # noqa: BLE001 - a contract the harness cannot draw from is reported, not fatal here
        notes.append(f"held-out shapes cannot be drawn from this contract: {err}")
    plan = TestPlan(
        op_id=task.op_id, catalog=list(task.shapes), held_out_per_evaluation=held_out,
        held_out_preview=preview, notes=notes,
    )  # fmt: skip
    if model is None:
        return plan
    messages = render(
        "testing", op_id=task.op_id, contract=task.contract.model_dump_json(indent=1, exclude_defaults=True),
        planned=_planned_text(task, held_out), max_cases=max_cases,
    )  # fmt: skip
    try:
        reply = model.complete("testing", messages)
    except ModelError as err:
        return plan.model_copy(update={"notes": notes + [f"no LLM review: {err.message}"]})
    proposals, problem = parse_proposals(reply.text, max_cases)
    if problem:
        notes.append(problem)
    symbols = inputs.shape_symbols(task.contract)
    checked: list[ProposedCase] = []
    for case in proposals:
        reason = _contract_problem(task, case, symbols)
        checked.append(case.model_copy(update={"reason": reason}) if reason else case)
    runnable = [c for c in checked if not c.reason]
    if runnable and validate is None:
        notes.append("proposals not validated on the baseline (no GPU in this run): none kept")
        checked = [c if c.reason else c.model_copy(update={"reason": "not run on the baseline (no GPU)"}) for c in checked]
    elif runnable:
        verdicts = list(validate(runnable))
        by_label = {c.label: v for c, v in zip(runnable, verdicts, strict=True)}
        out = []
        for c in checked:
            if c.label in by_label:
                ok, why = by_label[c.label]
                c = c.model_copy(update={"kept": bool(ok), "reason": why or ("ran cleanly on the baseline" if ok else "failed on the baseline")})
            out.append(c)
        checked = out
    return plan.model_copy(update={"extra": checked, "reviewed_by": getattr(model, "name", "llm"), "notes": notes})


def _planned_text(task: Task, held_out: int) -> str:
    lines = [f"- catalog {s.label}" for s in task.shapes[:12]]
    if len(task.shapes) > 12:
        lines.append(f"- ... {len(task.shapes) - 12} more catalog shapes")
    lines.append(f"- {held_out} held-out shapes drawn fresh per evaluation (T=1 first, odd token counts)")
    lines.append("- distributions normal, uniform, edge; contiguous and strided layouts")
    return "\n".join(lines)


def _contract_problem(task: Task, case: ProposedCase, symbols: set[str]) -> str:
    unknown = sorted(set(case.sizes) - symbols)
    if unknown:
        return f"unknown size symbols {unknown} (contract has {sorted(symbols)})"
    missing = sorted(symbols - set(case.sizes))
    if missing:
        return f"no value for {missing}"
    bad = [f"{k}={v}" for k, v in case.sizes.items() if not task.contract.accepts(k, v)]
    if bad:
        return f"outside the contract's limits: {', '.join(bad)}"
    return ""


JSON_LIST = re.compile(r"\[.*\]", re.S)


def parse_proposals(text: str, max_cases: int) -> tuple[list[ProposedCase], str]:
    """Proposals from a reply (a JSON list, fenced or not); a problem line when unreadable."""
    match = JSON_LIST.search(text)
    if match is None:
        return [], "the testing agent's reply has no JSON list"
    try:
        items: Any = json.loads(match.group(0))
    except ValueError as err:
        return [], f"the testing agent's JSON list does not parse: {err}"
    out: list[ProposedCase] = []
    seen: set[str] = set()
    for index, item in enumerate(items if isinstance(items, list) else []):
        if not isinstance(item, dict) or not isinstance(item.get("sizes"), dict):
            continue
        try:
            sizes = {str(k): int(v) for k, v in item["sizes"].items()}
        except (TypeError, ValueError):
            continue
        dist = item.get("distribution", "edge")
        label = str(item.get("label") or f"proposal-{index}")[:60]
        if label in seen:
            label = f"{label}-{index}"
        seen.add(label)
        out.append(
            ProposedCase(
                label=label, sizes=sizes, distribution=dist if dist in ("normal", "uniform", "edge") else "edge",
                why=str(item.get("why", ""))[:200],
            )
        )  # fmt: skip
        if len(out) >= max_cases:
            break
    return out, "" if out else "the testing agent proposed no usable case"
