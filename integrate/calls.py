"""The calls integrate makes of SGLang's public ops, planned from each task's contract.

Pure Python (no torch): the parent plans, the worker (:mod:`integrate.sglang_worker`)
fills and calls. For every case (each catalog shape, or the contract's one
synthetic shape when no model sizes it, plus a few held-out draws) x every dtype
the task instantiates, :func:`plan_op` asks the harness's own planner
(:func:`contract.plan.plan_call`, the one ``evaluate`` uses) for every
argument of the C++ entry, and binds the public Python function's parameters to
them through the signature extract recorded (:class:`pipeline.records.EntrySignature`,
:mod:`extract.entry`). The result is a JSON request the worker can run without
knowing anything about the op:

``{"cmd": "check", "op", "module", "function", "tensors": [TensorPlan fields],
"scalars": {name: value}, "sizes": {...}, "params": [{"name", "kind", "feeds", "via", "value"?}],
"dtype", "seed", "key"}``

``key`` names the JIT module the case needs (the op and the instantiation's
``module_args``), so the worker builds each module once, and all of them at once.

A Triton task (``Task.language == "triton"``) is planned from the same contract and
:class:`pipeline.records.EntrySignature`, with three differences (:func:`triton_request`):

- the request carries ``"triton"``: the ``KernelSpec`` op the wrapper is registered as
  (``Task.triton.registered_as``, or None), and the launched kernels (``Task.entry_points``,
  each with the dotted module of its file), so the worker calls the op through SGLang's
  ``get_kernel`` and proves the tree's kernels launched (:mod:`integrate.triton_probe`);
- ``key`` is ``<op>|triton|<dtype>``: Triton compiles one kernel per dtype (and per
  specialisation), not one module per instantiation, so the warm-up compiles each dtype once;
- every catalog case is planned twice (the second where its inputs hold at most
  :data:`ALLOCATED_MAX_BYTES`): with every argument the signature binds, and again
  with the optional outputs left out (a parameter whose default is ``None`` and that feeds an
  output tensor: ``merge_state_triton(v_a, s_a, v_b, s_b)`` is how SGLang's attention backends
  call it), labelled ``<label> (outputs allocated)``; the worker then observes the inputs after
  the call and what it returns, which is all that form can change.

What must stay true: an op is planned from its contract as the run completed it
(:func:`contract.layout.completed_in_run`, applied by the caller) or,
with no run, by today's completion rules; nothing here names an op; an op whose
public function cannot be bound is reported with the reason, never guessed.
"""

from __future__ import annotations

import dataclasses
import math
import random
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field

from contract import plan as planning
from contract import shapes as shape_draws
from contract import sizes as contract_sizes
from optimize.harness.errors import ContractError
from pipeline.records import EntryParam, EntrySignature, ShapeCase, Task

HELD_OUT = 2  # held-out draws per op, on top of the catalog shapes
JsonValue = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]


@dataclass(frozen=True)
class PlannedCase:
    """One shape x dtype, as the worker will call it."""

    label: str
    sizes: dict[str, int]
    dtype: str
    seed: int
    key: str  # the JIT module this case needs: "<op>|<module args>" ("<op>|triton|<dtype>" for a Triton task)
    held_out: bool
    request: dict[str, JsonValue]
    numel: int  # elements of every tensor the public function is given (picks the cheap warm-up case)


@dataclass(frozen=True)
class OpPlan:
    """Every case of one op, or why the op cannot be called through its public function."""

    op_id: str
    function: str  # dotted path of the public function
    cases: list[PlannedCase] = field(default_factory=list)
    reason: str = ""  # why no case can run; "" when some can
    unplanned: dict[str, str] = field(default_factory=dict)  # "<label> <dtype>" -> why that case has no plan


def task_dtypes(task: Task) -> list[str]:
    """The dtypes SGLang instantiates for the task, in task order."""
    seen: list[str] = []
    for inst in contract_sizes.instantiations_for(task.contract, task.instantiations) or task.instantiations:
        if inst.dtype not in seen:
            seen.append(inst.dtype)
    return seen


def why_uncallable(signature: EntrySignature | None) -> str:
    """Why the public function cannot be called from the contract; "" when it can."""
    if signature is None:
        return "the task records no entry signature (extracted before extract.entry existed): re-run `kernelsmith extract` for it"
    if signature.reason:
        return signature.reason
    if not any(p.feeds for p in signature.params):
        return f"no parameter of {signature.module}.{signature.function} feeds an argument of the contract"
    return ""


def catalog(task: Task) -> tuple[list[ShapeCase], str]:
    """The task's shapes and where they come from: its catalog, else its one synthetic shape."""
    if task.shapes:
        return list(task.shapes), "catalog"
    synthetic = shape_draws.synthetic_shape(task.contract, task.instantiations)
    return ([synthetic] if synthetic is not None else []), contract_sizes.SYNTHETIC_MODEL


def _tensor_json(plan: planning.TensorPlan) -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {}
    for f in dataclasses.fields(plan):
        value = getattr(plan, f.name)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


ALLOCATED = " (outputs allocated)"  # label suffix of a case that leaves the optional outputs to the wrapper
#: The allocating form runs where the inputs hold at most this many bytes: it checks the wrapper's own
#: allocation path, which no size changes, and the largest shapes already run in the full form (merge_state_triton:
#: 156 of its 195 catalog cases; the 39 left out would pass 104 GB more through the two workers' exchange).
ALLOCATED_MAX_BYTES = 256 << 20


def optional_outputs(task: Task, signature: EntrySignature) -> list[str]:
    """Contract outputs whose parameter defaults to ``None``: the wrapper allocates them when left out."""
    outputs = {a.tensor.name for a in task.contract.args if a.tensor is not None and a.tensor.role == "output"}
    return [p.feeds for p in signature.params if p.feeds is not None and p.feeds in outputs and p.default == "None"]


def triton_request(task: Task) -> dict[str, JsonValue] | None:
    """The ``"triton"`` part of a Triton task's requests (None for CUDA): the KernelSpec op and launched kernels."""
    if task.triton is None:
        return None
    from extract.triton_scan import dotted_of

    launched = sorted({(dotted_of(k.file), k.name) for k in task.triton.kernels if k.name in task.entry_points})
    return {
        "spec": task.triton.registered_as,
        "backend": "triton",
        "kernels": [{"module": module, "name": name} for module, name in launched],
    }


def _param_json(param: EntryParam, omit: Sequence[str], built: dict[str, JsonValue]) -> JsonValue:
    out: dict[str, JsonValue] = {
        "name": param.name,
        "kind": param.kind,
        "feeds": None if param.feeds in omit else param.feeds,
        "via": param.via,
    }
    if param.name in built:
        out["value"] = built[param.name]
    return out


def plan_case(
    task: Task, signature: EntrySignature, sizes: dict[str, int], dtype: str, *, omit: Sequence[str] = ()
) -> tuple[str, dict[str, JsonValue], int]:
    """(module key, worker request without label/seed, elements passed) of one call; ContractError when unplannable.

    ``omit``: contract arguments whose parameters are left at their defaults (:func:`optional_outputs`).
    """
    pool = contract_sizes.instantiations_for(task.contract, task.instantiations)
    inst = contract_sizes.select_instantiation(task.contract, pool, dtype, sizes)
    plan = planning.plan_call(task.contract, sizes, dtype)
    fed = {p.feeds for p in signature.params if p.feeds and p.via != "size" and p.feeds not in omit}
    tensors = [t for t in plan.tensors if t.name in fed]
    for tensor in tensors:
        planning.require_fillable(tensor)
    scalars: dict[str, JsonValue] = {}
    for arg, value in zip(task.contract.args, plan.args):
        if arg.kind == "scalar" and arg.scalar is not None and arg.scalar.name in fed:
            assert not isinstance(value, planning.TensorPlan)  # plan_call gives a scalar argument its value
            scalars[arg.scalar.name] = value
    missing = [p.feeds for p in signature.params if p.via == "size" and p.feeds not in sizes]
    if missing:
        raise ContractError(f"sizes {missing} are not resolved at this shape", fix="add them to the shape catalog")
    built: dict[str, JsonValue] = {}
    for p in signature.params:
        if p.via == "build":
            fixed = inst.run_time.get(p.loader_param) if p.loader_param is not None else None
            if fixed is None:
                raise ContractError(
                    f"parameter {p.name} reaches the loader's {p.loader_param}, which the instantiation "
                    f"{inst.module_args} was not built for a run-time value of",
                    fix="re-run `kernelsmith extract` for the op",
                )
            built[p.name] = fixed
    request: dict[str, JsonValue] = {
        "cmd": "check",
        "op": task.op_id,
        "module": signature.module,
        "function": signature.function,
        "tensors": [_tensor_json(t) for t in tensors],
        "scalars": scalars,
        "sizes": {k: int(v) for k, v in sizes.items()},
        "params": [_param_json(p, omit, built) for p in signature.params],
        "dtype": dtype,
    }
    triton = triton_request(task)
    if triton is not None:
        request["triton"] = triton
        return f"{task.op_id}|triton|{dtype}", request, sum(t.numel for t in tensors)
    key = "|".join([task.op_id, *inst.module_args])
    return key, request, sum(t.numel for t in tensors)


def plan_op(task: Task, *, held_out: int = HELD_OUT, rng: random.Random | None = None) -> OpPlan:
    """Every case of ``task`` through its public function (``task`` already completed by the caller)."""
    signature = task.entry_signature
    function = f"{signature.module}.{signature.function}" if signature is not None else ""
    why = why_uncallable(signature)
    if why or signature is None:
        return OpPlan(op_id=task.op_id, function=function, reason=why)
    rng = rng or random.Random(secrets.randbits(64))
    try:
        shapes, origin = catalog(task)
    except ContractError as err:
        return OpPlan(op_id=task.op_id, function=function, reason=f"the contract cannot be sized: {err.message}")
    if not shapes:
        return OpPlan(
            op_id=task.op_id,
            function=function,
            reason="no shape: the model catalog sizes no case and no synthetic shape exists",
        )
    dtypes = task_dtypes(task)
    labelled: list[tuple[str, bool, dict[str, int]]] = []
    unplanned: dict[str, str] = {}
    for shape in shapes:
        try:
            labelled.append((shape.label, False, contract_sizes.resolve_sizes(task.contract, shape, shapes)))
        except ContractError as err:
            unplanned[shape.label] = err.message
    if held_out and origin == "catalog":
        pool = contract_sizes.instantiations_for(task.contract, task.instantiations)
        try:
            drawn = shape_draws.draw_held_out(task.contract, shapes, held_out, rng, instantiations=pool, dtypes=dtypes)
        except ContractError as err:
            drawn = []
            unplanned["held-out"] = err.message
        for index, shape in enumerate(drawn):
            try:
                labelled.append((f"held-out-{index}", True, contract_sizes.resolve_sizes(task.contract, shape, shapes)))
            except ContractError as err:
                unplanned[f"held-out-{index}"] = err.message
    omitted = optional_outputs(task, signature) if task.triton is not None else []
    forms: list[tuple[str, bool, dict[str, int], list[str]]] = [(*case, []) for case in labelled]
    if omitted:
        forms += [(label + ALLOCATED, False, sizes, omitted) for label, held, sizes in labelled if not held]
    cases: list[PlannedCase] = []
    for label, is_held_out, sizes, omit in forms:
        for dtype in dtypes:
            try:
                key, request, numel = plan_case(task, signature, sizes, dtype, omit=omit)
            except ContractError as err:
                unplanned[f"{label} {dtype}"] = err.message
                continue
            if omit and _bytes(request) > ALLOCATED_MAX_BYTES:
                continue
            seed = secrets.randbits(31)
            request = {**request, "label": label, "seed": seed, "key": key}
            cases.append(PlannedCase(label, sizes, dtype, seed, key, is_held_out, request, numel))
    reason = (
        "" if cases else "no case could be planned: " + "; ".join(f"{k}: {v}" for k, v in sorted(unplanned.items()))
    )
    return OpPlan(op_id=task.op_id, function=function, cases=cases, reason=reason, unplanned=unplanned)


def _bytes(request: dict[str, JsonValue]) -> int:
    """Bytes of the tensors a planned request passes."""
    from contract.dtypes import ITEMSIZE

    total = 0
    tensors = request.get("tensors")
    for tensor in tensors if isinstance(tensors, list) else []:
        assert isinstance(tensor, dict)
        shape, dtype = tensor["shape"], tensor["dtype"]
        assert isinstance(shape, list) and isinstance(dtype, str)
        total += math.prod(d for d in shape if isinstance(d, int)) * ITEMSIZE[dtype]
    return total


def warm_cases(plans: Sequence[OpPlan]) -> list[dict[str, JsonValue]]:
    """One request per JIT module the plans need: its smallest case (builds run concurrently in the worker)."""
    best: dict[str, PlannedCase] = {}
    for plan in plans:
        for case in plan.cases:
            if case.key not in best or case.numel < best[case.key].numel:
                best[case.key] = case
    return [best[k].request for k in sorted(best)]


def sanitizer_picks(plan: OpPlan, count: int = 2) -> list[PlannedCase]:
    """Catalog cases to run under compute-sanitizer: the smallest and a mid-size one, first dtype."""
    first = [c for c in plan.cases if not c.held_out and c.dtype == plan.cases[0].dtype] if plan.cases else []
    ordered = sorted(first, key=lambda c: c.numel)
    if not ordered:
        return []
    picks = [ordered[0], ordered[len(ordered) // 2]]
    unique = list({id(c): c for c in picks}.values())
    return unique[:count]
