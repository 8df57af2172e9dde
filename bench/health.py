"""``kernelsmith bench --all``: does every extracted baseline build, run and pass its own tests?

For one task: plan the harness's checks on the task's smallest catalog shape plus
:data:`HELD_OUT` fresh held-out shapes in every dtype (:func:`prepare`), build the
units they need (:func:`build_one`), and run them through the evaluation worker
with the baseline checked on its own (outputs poisoned and fully written, inputs
untouched, graph-capturable, float64 reference where the contract names one;
:func:`check`). One :class:`HealthRow` per task, with the reason when it stops
short; :func:`health_section` is the rows' section of BENCHMARKS.md. A row's key
hashes the task record and the harness's own sources (:func:`harness_fingerprint`).
:mod:`bench.health_sweep` runs these over every task under ``work/tasks``.

What must stay true: a task is counted as passing only when the worker ran its
checks in this sweep's code on a GPU and every check passed; nothing is inferred.
"""

from __future__ import annotations

import functools
import pathlib
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from contract import layout
from contract.completion import BASELINE_REPAIRS, Completion
from optimize.harness.baseline_repair import BaselineRun, repair_baseline
from optimize.harness.isolate import WorkerRun
from optimize.harness.languages import build_of
from pipeline.build import first_error
from pipeline.digest import source_digest
from pipeline.record_io import VersionedRecord, content_hash
from pipeline.records import BuildReport, ShapeCase, Task

if TYPE_CHECKING:
    from optimize.harness.evaluate import CasePlan

HELD_OUT = 2
# The code a verdict depends on (pipeline.digest): the harness, the contract package it
# plans and completes contracts with, and the pipeline floor (builder, records, toolchain).
_FINGERPRINT_GLOBS = (
    "optimize/harness/*.py",
    "bench/*.py",
    "optimize/harness/*.toml",
    "contract/*.py",
    "contract/*.toml",
    "pipeline/*.py",
)


class HealthRow(VersionedRecord):
    op_id: str
    module: str = ""  # the op module (kernels/ops/...py) whose load_jit builds it
    built: bool | None = None  # None: not reached
    ran: bool | None = None
    passed: bool | None = None
    reason: str = ""
    checks: int = 0  # checks that passed
    shapes: Literal["catalog", "synthetic"] = "catalog"  # synthetic: no model sizes the op (synthetic_shape)
    unresolved: list[str] = []  # contract entries static inference left open (contract.unresolved)
    filled: list[str] = []  # what the completion rules filled in and the baseline fixed (completion.Filled.describe)
    still_open: list[str] = []  # what no rule covers: the LLM testing agent's to fill
    build_s: float = 0.0
    check_s: float = 0.0


@dataclass
class _Prepared:
    task_dir: pathlib.Path
    row: HealthRow
    key: str = ""
    task: Task | None = None  # when it loaded
    plan: CasePlan | None = None  # when the checks could be planned
    shape: ShapeCase | None = None  # the catalog or synthetic shape the plan tests


@dataclass(frozen=True)
class _Checked:
    """One worker run of :func:`check`: its result, or the harness error it raised."""

    run: WorkerRun | None = None
    error: Exception | None = None


@functools.lru_cache(maxsize=1)
def harness_fingerprint() -> str:
    return source_digest(_FINGERPRINT_GLOBS)[:16]


def prepare(task_dir: pathlib.Path, model=None) -> _Prepared:
    """Load the task and plan its checks; a failure is the row's reason.

    With ``model`` (an LLM endpoint is configured), the testing agent fills what the
    completion rules leave open (:func:`optimize.agents.testing.complete_contract`);
    the verdict's key then covers its answers too."""
    from contract.layout import load_task
    from contract.shapes import synthetic_shape
    from contract.sizes import refused_by_checks
    from optimize.agents.testing import complete_contract
    from optimize.harness.evaluate import plan_cases

    prep = _Prepared(task_dir=task_dir, row=HealthRow(op_id=task_dir.name))
    task_json = task_dir / layout.TASK_FILE
    prep.key = content_hash(task_json.read_bytes() if task_json.is_file() else b"", harness_fingerprint())[:32]
    try:
        task = load_task(task_dir)
    except Exception as err:  # noqa: BLE001 - every failure is one table row
        prep.row = prep.row.model_copy(update={"reason": f"task does not load: {err}"})
        return prep
    # What static inference left open and a completion rule covers is filled in first
    # (and named in the row), so a guessed value shows up as the baseline failing.
    task, completion = complete_contract(task, task_dir, model=model)
    if any(f.rule.startswith("llm:") for f in completion.filled):
        prep.key = content_hash(task_json.read_bytes(), harness_fingerprint(), completion.model_dump_json())[:32]
    prep.task = task
    prep.row = prep.row.model_copy(
        update={
            "op_id": task.op_id,
            "module": task.module,
            "unresolved": list(task.contract.unresolved),
            "filled": [f.describe() for f in completion.filled],
            "still_open": list(completion.open),
        }
    )
    recorded = task.baseline_build
    if recorded is not None and not recorded.ok:  # extract's compile check, same nvcc: not built again
        reason = f"nvcc (extract's compile check): {first_error(recorded.stderr)}"
        prep.row = prep.row.model_copy(update={"built": False, "reason": reason})
        return prep

    by_size = sorted(task.shapes, key=lambda s: sum(s.sizes.values()) * max(s.tokens, 1))
    accepted = [s for s in by_size if not refused_by_checks(task.contract, s, task.shapes)]

    def on_catalog():  # the smallest catalog shape the kernel's own checks accept
        return (task, accepted[0]) if accepted else None

    def on_any_catalog():  # none accepted, nor a synthetic shape: the baseline judges the smallest
        return (task, by_size[0]) if by_size else None

    def on_synthetic():
        shape = synthetic_shape(task.contract, task.instantiations)
        return None if shape is None else (task.model_copy(update={"shapes": [shape]}), shape)

    # The smallest catalog shape; where no model sizes the op, or the catalog's widths fit
    # none of the instantiations the extract kept, one small synthetic shape instead, so
    # the baseline is still tested (and the row says so). The first error is the reason.
    plan = first = None
    for choose, kind in ((on_catalog, "catalog"), (on_synthetic, "synthetic"), (on_any_catalog, "catalog")):
        try:
            chosen = choose()
            if chosen is None:
                continue
            planned_task, shape = chosen
            plan = plan_cases(planned_task, shapes=[shape], held_out=HELD_OUT, profile=False)
        except Exception as err:  # noqa: BLE001 - a contract that cannot be planned is the row's reason
            first = first or err
            continue
        prep.task, prep.shape = planned_task, shape
        prep.row = prep.row.model_copy(update={"shapes": kind})
        break
    if plan is None:
        reason = (
            f"no test cases can be planned from the contract: {first}"
            if first
            else "no shape to test: the contract sizes no tensor"
        )
        prep.row = prep.row.model_copy(update={"reason": reason})
        return prep
    # Every call the worker will make, planned here first (pure Python): a contract that
    # cannot be called (an open scalar, a dtype the harness cannot fill, an index tensor
    # with no value range) is the task's reason, found without a build or a GPU.
    assert prep.task is not None
    problem = uncallable(prep.task.contract, plan.checks)
    if problem:
        prep.row = prep.row.model_copy(update={"reason": f"contract: {problem}"})
        return prep
    if not plan.checks:
        prep.row = prep.row.model_copy(update={"reason": "no shape to test: the contract sizes no tensor"})
        return prep
    prep.plan = plan
    return prep


def uncallable(contract, checks) -> str:
    """Why the worker could not make one of these calls ("" when it can): pure Python."""
    from contract.errors import ContractError
    from contract.plan import plan_call, require_fillable
    from optimize.harness import references

    if not contract.args:  # extract found no C++ entry to read: a call would pass nothing
        why = next((u for u in contract.unresolved if "not found" in u or "no C++ entry" in u), "no arguments inferred")
        return f"the contract lists no arguments ({why})"
    try:
        references.get(contract.reference)  # a PyTorch reference it names must exist
        for case in checks:
            for tensor in plan_call(contract, case.sizes, case.dtype, case.layout).tensors:
                require_fillable(tensor)
    except ContractError as err:
        return err.message
    return ""


def build_one(prep: _Prepared, config) -> tuple[BuildReport, list[str]]:
    """Every unit one task's checks need (merged report, one library per unit).

    Where they do not build, each instantiation is built on its own and one nvcc
    refuses is left out (its cases dropped, named in the row; the task's other
    instantiations with it): a template that static_asserts "only fp16/bf16 supported"
    at fp32, or "Unsupported norm configuration" at one width, is an op without that
    variant, as extract's compile check would have recorded (a task extracted with
    ``--no-compile`` comes here unchecked). The checks are then planned again from
    what built, which must still serve the task's main shape; else the first failure
    is the row's reason."""
    from optimize.harness.evaluate import build_units, refusal, without_refused

    assert prep.task is not None and prep.plan is not None  # only planned tasks are built
    task_now = prep.task

    def build(units) -> tuple[BuildReport, list[str]]:
        # the sweep runs one task per CPU, so a task's own units build one after another
        return build_units(prep.task_dir, task_now, units, config=config, max_workers=1, isolate=True)

    report, libraries = build(prep.plan.units)
    if report.ok or prep.shape is None:
        return report, libraries
    found = without_refused(task_now, prep.plan.units, lambda units: build(units)[0])
    if found is None:
        return report, libraries
    task, refused = found
    narrowed = _plan_for(task, prep.shape)
    if narrowed is None:
        return report, libraries
    kept, kept_libraries = build(narrowed.units)
    if not kept.ok:
        return report, libraries
    prep.task, prep.plan = task, narrowed
    note = f"not tested, {refusal(refused, report.stderr)}"
    prep.row = prep.row.model_copy(update={"filled": [*prep.row.filled, note]})
    return kept, kept_libraries


def _plan_for(task, shape):
    """``task``'s checks planned again at ``shape`` (fresh held-out draws, as every
    sweep's are), or None when that cannot be planned."""
    from optimize.harness.evaluate import plan_cases

    try:
        return plan_cases(task, shapes=[shape], held_out=HELD_OUT, profile=False)
    except Exception:  # noqa: BLE001 - a narrowing that cannot be planned is no narrowing
        return None


# Re-checks after the baseline showed what the contract or the invented shape got wrong
# (the loop allows the same number).
REPAIRS = BASELINE_REPAIRS


def check(prep: _Prepared, libraries: list[str], config) -> HealthRow:
    """Run the baseline's checks in one isolated worker; the verdict becomes the row.

    The baseline is the oracle, so where it contradicts what was guessed, the guess
    is fixed, named in the row (``filled``) and the checks run again, at most
    :data:`REPAIRS` times:

    - it writes an "input" or never writes an "output" (``WorkerResult.role_evidence``):
      extract guessed that tensor's role wrong (``completion.roles_from_baseline``);
    - its own check demands a dtype of a tensor ("correction_bias must be float32":
      ``completion.dtype_from_rejection``);
    - it refuses the dtype of the case outright ("Dtype value [float16] not in the
      allowed options: [bfloat16]"): that dtype's cases are left out;
    - it rejects a *synthetic* shape with a TensorMatcher message that says what it
      expected (``completion.size_from_rejection``): the invented size is replaced,
      if the same modules still serve the new shape."""
    from optimize.errors import GpuRequired
    from optimize.harness.evaluate import run_request, worker_dir

    assert prep.task is not None and prep.plan is not None  # only planned tasks are checked
    row, plan = prep.row, prep.plan
    start = time.monotonic()

    def run_once(task: Task, attempt: int) -> BaselineRun[_Checked]:
        request = _request(task, task.contract, plan, libraries, config)
        try:
            done = run_request(request, config, worker_dir(config, task.op_id, "health"))
        except GpuRequired:
            raise  # the machine's problem, not the task's: no verdict, the sweep stops with the fix
        except Exception as err:  # noqa: BLE001 - a harness/contract error is this task's reason
            return BaselineRun(_Checked(error=err), passed=False, final=True)
        res = done.result
        if res is None:  # crashed or killed: nothing to learn from
            return BaselineRun(_Checked(run=done), passed=False, final=True)
        detail = res.detail if res.status == "baseline_failed" else ""
        return BaselineRun(_Checked(run=done), passed=res.status == "ok", evidence=res.role_evidence, detail=detail)

    def on_fixed(task: Task, record: Completion, attempt: int) -> str:
        nonlocal row
        row = row.model_copy(update={"filled": [*row.filled, *(f.describe() for f in record.filled)]})
        problem = uncallable(task.contract, plan.checks)
        return f"contract (after the baseline's fix): {problem}" if problem else ""

    def otherwise(task: Task, seen: BaselineRun[_Checked]) -> Task | None:
        nonlocal row, plan
        assert seen.result.run is not None and seen.result.run.result is not None  # else the run was final
        res = seen.result.run.result
        narrowed = _without_refused_dtype(plan, res)
        if narrowed is not None:
            plan, note = narrowed
            row = row.model_copy(update={"filled": [*row.filled, note]})
            return task
        resized = _resized(task, task.contract, plan, res) if row.shapes == "synthetic" else None
        if resized is None:
            return None
        task, plan, note = resized
        row = row.model_copy(update={"filled": [*row.filled, note]})
        return task

    repaired = repair_baseline(
        prep.task, prep.task_dir, run_once, on_fixed=on_fixed, otherwise=otherwise, repairs=REPAIRS
    )
    if repaired.stopped:
        return row.model_copy(update={"ran": False, "reason": repaired.stopped})
    checked = repaired.last.result
    if checked.error is not None:
        err = checked.error
        return row.model_copy(update={"ran": False, "reason": f"{type(err).__name__}: {_cause(err)}"})
    run = checked.run
    assert run is not None
    res = run.result
    seconds = time.monotonic() - start
    if res is None:  # crashed or killed: the CUDA error line says more than the last line (torch's hint)
        lines = [line.strip() for line in run.stderr_tail.splitlines() if line.strip()]
        last = next(
            (line for line in reversed(lines) if re.search(r"\b\w*(Error|error)\b.*:", line)),
            lines[-1] if lines else "",
        )
        return row.model_copy(update={"ran": False, "reason": f"{run.summary}: {last}", "check_s": seconds})
    update: dict[str, object] = {"checks": sum(1 for c in res.checks if c.status == "pass"), "check_s": seconds}
    if res.status in ("baseline_failed", "crashed"):
        update.update(ran=False, passed=False, reason=res.detail)
    else:
        update.update(ran=True, passed=res.status == "ok", reason=res.detail if res.status != "ok" else "")
        skipped = [c for c in res.checks if c.status == "skipped"]
        if skipped and not update["reason"]:
            update["reason"] = f"{len(skipped)} held-out case(s) skipped: {skipped[0].reason}"
    return row.model_copy(update=update)


def _request(task, contract, plan, libraries: list[str], config):
    from optimize.harness.protocol import WorkerRequest

    return WorkerRequest(
        mode="evaluate",
        op_id=task.op_id,
        contract=contract,
        baseline_libraries=libraries,
        checks=plan.checks,
        harness=config.harness,
        device_cache_dir=str(config.cache / "device"),
        stop_at_first_failure=True,
        sglang_package=build_of(task).sglang_package(task, config),
    )


def _failed_case(plan, res):
    """The case the worker stopped at (it reports every case before it), or None."""
    return plan.checks[len(res.checks)] if len(res.checks) < len(plan.checks) else None


_DTYPE_REFUSED = re.compile(r"Dtype value \[(\w+)\] not in the allowed options: \[([\w, ]*)\]")
# A baseline's own check refusing the case (worker.py words it so); not a CUDA error.
_REFUSAL = "the baseline rejects catalog shape"
# What a check that is about the element type says ("bf16x2 kernel requires a 16-bit dtype",
# "DType mismatch: expected float32 but got bfloat16"), read outside a TensorMatcher's
# description of the tensor, which always names its dtype ("Tensor<8, 64>[..., dtype=...]").
_DTYPE_WORDS = re.compile(r"dtype|\b(8|16|32)-bit\b|\b(bf16|fp16|fp32|half|float\d*|bfloat16)\b", re.IGNORECASE)
_MATCHER_DESCRIPTION = re.compile(r"Tensor<[^>]*>\[[^\]]*\]")


def _without_refused_dtype(plan, res):
    """(plan, note) without the cases of a dtype the baseline refuses outright, or None.

    Two forms: "Dtype value [float16] not in the allowed options: [bfloat16]" (a
    bf16-only launcher the loader also instantiates for fp16: that dtype), and any other
    refusal of the case by the baseline's own checks whose words are about the element
    type ("bf16x2 kernel requires a 16-bit dtype" at fp32: the failed case's dtype).
    Only the dtype of the failed case itself, and only while other cases remain: the
    baseline defines which dtypes the op has, and a dtype is never dropped for a CUDA
    error or a wrong result. Where every dtype is refused, the last refusal is the row's
    reason."""
    from contract.errors import ContractError
    from contract.plan import canonical_dtype

    detail = res.detail or ""
    failed = _failed_case(plan, res)
    if failed is None or res.status != "baseline_failed" or _REFUSAL not in detail:
        return None
    match = _DTYPE_REFUSED.search(detail)
    if match is not None:
        try:
            refused = canonical_dtype(match.group(1), "")
        except ContractError:
            return None
        cause = match.group(0)
    else:
        cause = detail.split(_REFUSAL, 1)[1].split(": ", 1)[-1]  # after the case's label
        if not _DTYPE_WORDS.search(_MATCHER_DESCRIPTION.sub("", cause)):
            return None
        refused, cause = failed.dtype, cause[:200]
    kept = [c for c in plan.checks if c.dtype != refused]
    if refused != failed.dtype or not kept:
        return None
    note = f"dtype {refused} not tested (baseline: {cause})"
    return replace(plan, checks=kept), note


def _resized(task, contract, plan, res):
    """(task, plan, note) with the synthetic shape's size the baseline asked for, or None
    when its message names none or the new shape needs modules not built."""
    from contract.completion import size_from_rejection
    from optimize.harness.evaluate import plan_cases

    failed = _failed_case(plan, res)
    if failed is None or failed.held_out:
        return None
    asked = size_from_rejection(contract, failed.sizes, failed.dtype, res.detail)
    if asked is None:
        return None
    symbol, value = asked
    (shape,) = task.shapes
    sizes = {**shape.sizes, symbol: value}
    if sizes == shape.sizes or not contract.accepts(symbol, value):
        return None
    new_shape = shape.model_copy(update={"sizes": sizes})
    new_task = task.model_copy(update={"shapes": [new_shape], "contract": contract})
    try:
        new_plan = plan_cases(new_task, shapes=[new_shape], held_out=HELD_OUT, profile=False)
    except Exception:  # noqa: BLE001 - a shape the contract cannot plan is no repair
        return None
    # Held-out draws at the new shape may pick instantiations not built for this sweep:
    # those cases are left out (the built modules still serve the rest).
    built = {i: plan.units.index(u) for i, u in enumerate(new_plan.units) if u in plan.units}
    checks = [c.model_copy(update={"unit": built[c.unit]}) for c in new_plan.checks if c.unit in built]
    if not any(not c.held_out for c in checks):
        return None
    new_plan = replace(new_plan, units=plan.units, checks=checks)
    return (
        new_task,
        new_plan,
        f"{symbol} = {value} (baseline: the synthetic shape's {symbol} was rejected, the kernel expects {value})",
    )


def _cause(err: Exception) -> str:
    """One line: the error's message, plus the exception line its detail ends with (a
    worker's traceback), which is where the reason is."""
    message = str(getattr(err, "message", "") or err).splitlines()[0]
    lines = [line.strip() for line in str(getattr(err, "detail", "")).splitlines() if line.strip()]
    raised = next((line for line in reversed(lines) if re.match(r"^[\w.]+(Error|Exception|Exit)\b.*:", line)), "")
    return f"{message}: {raised}" if raised else message


def _modules(rows: Sequence[HealthRow]) -> str:
    """'M modules have a task, K of them a passing baseline' (rows from before the module
    was recorded count by op id)."""
    by_module: dict[str, bool] = {}
    for r in rows:
        key = r.module or r.op_id
        by_module[key] = by_module.get(key, False) or bool(r.passed)
    return f"{len(by_module)} modules have a task, {sum(by_module.values())} of them at least one passing baseline"


def health_section(command: str, rows: Sequence[HealthRow], when: str, device: str, environment: str = "") -> str:
    built = sum(1 for r in rows if r.built)
    ran = sum(1 for r in rows if r.ran)
    passed = sum(1 for r in rows if r.passed)
    synthetic = sum(1 for r in rows if r.shapes == "synthetic")
    passed_synthetic = sum(1 for r in rows if r.passed and r.shapes == "synthetic")
    lines = [
        f"## Baseline health — {when}, {device}",
        "",
        f"Command: `{command}`",
        "",
        f"{len(rows)} tasks: {built} baselines build, {ran} run, {passed} pass their own generated tests "
        f"({passed_synthetic} of those on a synthetic shape); by op module: {_modules(rows)}. "
        "Tests: the smallest catalog shape (or, for the "
        f"{synthetic} tasks no model config sizes, one small synthetic shape) + {HELD_OUT} held-out shapes, every "
        "dtype; outputs fully written, inputs untouched, graph-capturable, float64 reference where the contract "
        "names one." + (f" {environment}" if environment else ""),
        "",
        "| op | shapes | builds | runs | passes | checks | reason |",
        "| --- | --- | --- | --- | --- | ---: | --- |",
    ]

    def yes(value: bool | None) -> str:
        return "—" if value is None else ("yes" if value else "no")

    for r in rows:
        reason = r.reason.replace("|", "\\|").replace("\n", " ")[:300]
        lines.append(
            f"| {r.op_id} | {r.shapes} | {yes(r.built)} | {yes(r.ran)} | {yes(r.passed)} | {r.checks} | {reason} |"
        )
    unresolved = [r for r in rows if r.unresolved]
    lines += ["", f"Contracts static inference could not fully determine ({len(unresolved)}):", ""]
    lines += [f"- {r.op_id}: {'; '.join(r.unresolved)}" for r in unresolved] or ["- none"]
    filled = [r for r in rows if r.filled]
    lines += [
        "",
        f"Filled in: completion rules (contract/completion.toml; guesses) and what the baseline itself "
        f"showed (roles, sizes), each named ({len(filled)}):",
        "",
    ]
    lines += [f"- {r.op_id}: {'; '.join(r.filled)}" for r in filled] or ["- none"]
    still = [r for r in rows if r.still_open]
    lines += ["", f"Still open after the rules, for the LLM testing agent ({len(still)}):", ""]
    lines += [f"- {r.op_id}: {'; '.join(r.still_open)}" for r in still] or ["- none"]
    return "\n".join(lines) + "\n"
