"""Testing agent: the test plan of one op.

The deterministic core is the harness's: every catalog shape of the task, plus
``harness.held_out_shapes`` fresh held-out shapes drawn anew for each evaluation
(:func:`contract.shapes.draw_held_out`), each in every dtype, across the
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

Before any of that, :func:`complete_contract` fills what extract left open (open
scalars, integer tensors without a value range): the stated rules of
:mod:`contract.completion` first, then, for what they do not cover, the
model (:file:`testing_contract.md`). A model's answer is kept only where it has the
argument's type and its range bounds name known symbols; the baseline then judges
it like any other input (a wrong range makes the baseline fail its evaluation).
"""

from __future__ import annotations

import json
import pathlib
import random
import re
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import Field

from contract import completion
from contract.completion import Completion, Filled
from contract.errors import ContractError
from contract.layout import baseline_regions, read_task_files
from contract.shapes import draw_held_out
from contract.sizes import expr_symbols, shape_symbols
from optimize.agents.prompts import render
from optimize.llm.client import Model
from pipeline.errors import ModelError
from pipeline.record_io import Record, VersionedRecord
from pipeline.records import ShapeCase, Task

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
    notes: list[str] = []
    preview: list[ShapeCase] = []
    try:
        preview = draw_held_out(
            task.contract, task.shapes, held_out, random.Random(seed), instantiations=task.instantiations
        )
    except Exception as err:  # noqa: BLE001 - a contract the harness cannot draw from is reported, not fatal here
        notes.append(f"held-out shapes cannot be drawn from this contract: {err}")
    plan = TestPlan(
        op_id=task.op_id,
        catalog=list(task.shapes),
        held_out_per_evaluation=held_out,
        held_out_preview=preview,
        notes=notes,
    )
    if model is None:
        return plan
    messages = render(
        "testing",
        op_id=task.op_id,
        contract=task.contract.model_dump_json(indent=1, exclude_defaults=True),
        planned=_planned_text(task, held_out),
        max_cases=max_cases,
    )
    try:
        reply = model.complete("testing", messages)
    except ModelError as err:
        return plan.model_copy(update={"notes": notes + [f"no LLM review: {err.message}"]})
    proposals, problem = parse_proposals(reply.text, max_cases)
    if problem:
        notes.append(problem)
    symbols = shape_symbols(task.contract)
    checked: list[ProposedCase] = []
    for case in proposals:
        reason = _contract_problem(task, case, symbols)
        checked.append(case.model_copy(update={"reason": reason}) if reason else case)
    runnable = [c for c in checked if not c.reason]
    if runnable and validate is None:
        notes.append("proposals not validated on the baseline (no GPU in this run): none kept")
        checked = [
            c if c.reason else c.model_copy(update={"reason": "not run on the baseline (no GPU)"}) for c in checked
        ]
    elif runnable and validate is not None:  # the branch above took runnable without a validator
        verdicts = list(validate(runnable))
        by_label = {c.label: v for c, v in zip(runnable, verdicts, strict=True)}
        out = []
        for c in checked:
            if c.label in by_label:
                ok, why = by_label[c.label]
                c = c.model_copy(
                    update={
                        "kept": bool(ok),
                        "reason": why or ("ran cleanly on the baseline" if ok else "failed on the baseline"),
                    }
                )
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
                label=label,
                sizes=sizes,
                distribution=dist if dist in ("normal", "uniform", "edge") else "edge",
                why=str(item.get("why", ""))[:200],
            )
        )
        if len(out) >= max_cases:
            break
    return out, "" if out else "the testing agent proposed no usable case"


# ---------------------------------------------------------------- contract completion

JSON_OBJECT = re.compile(r"\{.*\}", re.S)
SOURCE_CHARS = 12000  # of region text sent with the prompt


def complete_contract(task: Task, task_dir=None, *, model: Model | None = None) -> tuple[Task, Completion]:
    """The task with its open contract items filled: rules first, then the model for
    what the rules leave open (see the module docstring). Never raises for a model
    failure: the record's ``open`` keeps what is still missing, with the reason."""
    task, record = completion.complete(task, task_dir)
    if model is None or not record.open or any(item.startswith("not completed") for item in record.open):
        return task, record
    contract = task.contract
    symbols = sorted(shape_symbols(contract))
    int_scalars = sorted(
        a.scalar.name for a in contract.args if a.kind == "scalar" and a.scalar and a.scalar.type == "int"
    )
    messages = render(
        "testing_contract",
        op_id=task.op_id,
        contract=contract.model_dump_json(indent=1, exclude_defaults=True),
        symbols=", ".join(symbols) or "(none)",
        int_scalars=", ".join(int_scalars) or "(none)",
        open="\n".join(f"- {item}" for item in record.open),
        source=_source_excerpt(task, task_dir),
    )
    try:
        reply = model.complete("testing", messages)
    except ModelError as err:
        return task, record.model_copy(update={"open": record.open + [f"no LLM completion: {err.message}"]})
    answers, problem = parse_completion(
        reply.text, contract, set(symbols) | set(int_scalars), getattr(model, "name", "llm")
    )
    task = task.model_copy(update={"contract": completion.apply(contract, answers)})
    still = completion.open_items(task.contract) + ([problem] if problem else [])
    return task, record.model_copy(update={"filled": record.filled + answers, "open": still})


def _source_excerpt(task: Task, task_dir) -> str:
    if task_dir is None:
        return "(not available)"
    try:
        regions = baseline_regions(read_task_files(pathlib.Path(task_dir), task), task)
    except Exception as err:  # noqa: BLE001 - the prompt says the source is missing
        return f"(not readable: {err})"
    text = "\n\n".join(f"// region {name}\n{body}" for name, body in regions.items())
    return text[:SOURCE_CHARS]


_TYPES: dict[str, type | tuple[type, ...]] = {"int": int, "float": (int, float), "bool": bool, "str": str}


def parse_completion(text: str, contract, known: set[str], model_name: str) -> tuple[list[Filled], str]:
    """Filled entries from the model's JSON object; a problem line for what was unusable."""
    match = JSON_OBJECT.search(text)
    if match is None:
        return [], "the testing agent's completion reply has no JSON object"
    try:
        data = json.loads(match.group(0))
    except ValueError as err:
        return [], f"the testing agent's completion JSON does not parse: {err}"
    if not isinstance(data, dict):
        return [], "the testing agent's completion reply is not a JSON object"
    raw_why = data.get("why")
    why: dict[str, object] = raw_why if isinstance(raw_why, dict) else {}
    rule = f"llm:{model_name}"
    scalars = {
        a.scalar.name: a.scalar
        for i, a in enumerate(contract.args)
        if a.kind == "scalar" and a.scalar and completion.open_scalar(contract, i)
    }
    tensors = {
        a.tensor.name: a.tensor
        for a in contract.args
        if a.kind == "tensor" and a.tensor and completion.open_tensor(a.tensor)
    }
    out: list[Filled] = []
    rejected: list[str] = []
    for name, value in (data.get("scalars") or {}).items() if isinstance(data.get("scalars"), dict) else ():
        spec = scalars.get(name)
        if (
            spec is None
            or isinstance(value, bool) != (spec.type == "bool")
            or not isinstance(value, _TYPES.get(spec.type, str))
        ):
            rejected.append(f"scalar {name}={value!r}")
            continue
        out.append(Filled(name=name, kind="value", value=value, rule=rule, why=str(why.get(name, ""))[:200]))
    for name, bounds in (data.get("ranges") or {}).items() if isinstance(data.get("ranges"), dict) else ():
        spec = tensors.get(name)
        ok = spec is not None and isinstance(bounds, list) and len(bounds) == 2
        try:
            ok = ok and all(
                not isinstance(b, bool) and (isinstance(b, int) or (isinstance(b, str) and expr_symbols(b) <= known))
                for b in bounds
            )
        except ContractError:
            ok = False
        if not ok:
            rejected.append(f"range {name}={bounds!r}")
            continue
        out.append(
            Filled(
                name=name, kind="range", value_range=(bounds[0], bounds[1]), rule=rule, why=str(why.get(name, ""))[:200]
            )
        )
    problem = f"the testing agent's completion had unusable entries: {', '.join(rejected)}" if rejected else ""
    return out, problem
