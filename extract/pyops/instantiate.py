"""Instantiation: run an op's loader for one dtype and one set of sizes, as SGLang would on sm_90a.

:func:`instantiate` binds each loader parameter (from its call site among the
functions the op reaches, a size of the same name, the instantiation dtype, its
default, a curated fallback) and runs the loader in strict mode until it calls
``load_jit``; the :class:`Instance` is what it passed. The caller's tensor parameters
are :class:`~.values.TensorValue` s with the contract's dtypes and shapes
(:func:`tensor_value`), so a loader that reads a size from one (``w.shape[0]``) pins
that size.

What must stay true: nothing unknown is guessed silently: a parameter without a value
raises :class:`~.values.Unresolvable` naming it, and every fallback used is named in
the instance's notes with its reason.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import libcst as cst

from extract.pyops.frames import LazyEnv, assignments_before
from extract.pyops.interpreter import Evaluator
from extract.pyops.modules import Env, PyFunction, PyModule
from extract.pyops.program import Program
from extract.pyops.target import TORCH_DTYPES
from extract.pyops.values import Constant, DtypeValue, TensorValue, Unresolvable
from pipeline.records import LoadJitCall, OpEntry


def _is_tensor_param(param: cst.Param, module: PyModule) -> bool:
    if param.annotation is None:
        return False
    return "Tensor" in module.code(param.annotation.annotation)


def _is_dtype_param(param: cst.Param, module: PyModule) -> bool:
    name = param.name.value
    if param.annotation is not None and "dtype" in module.code(param.annotation.annotation):
        return True
    return name == "dtype" or name.endswith("_dtype") or name.startswith("dtype_")


def find_call_sites(
    program: Program, op: OpEntry, loader: PyFunction, entry: str | None = None
) -> list[tuple[PyFunction, cst.Call]]:
    """Calls of ``loader`` among the functions ``op`` reaches, best first: sites in a
    function that names ``entry`` come first (that is the path the harness tests)."""
    public = op.public_functions[0]
    target = program.public_target(op.module, public)
    if target is None:
        return []
    nodes = program.reach((op.module, target))
    sites: list[tuple[int, str, PyFunction, cst.Call]] = []
    for rel, qual in sorted(nodes):
        caller = program.function(rel, qual)
        scan = program.scan(rel)
        if caller is None or scan is None or caller.node is loader.node:
            continue
        names = {loader.name}
        for local, (source, original) in caller.module.imports.items():
            if original == loader.name and source == loader.module.dotted:
                names.add(local)
        found: list[cst.Call] = []
        caller_module = caller.module

        class Calls(cst.CSTVisitor):
            def visit_Call(self, node: cst.Call) -> None:
                func = node.func
                if (
                    isinstance(func, cst.Name)
                    and func.value in names
                    and (caller_module is loader.module or func.value in caller_module.imports)
                ):
                    found.append(node)

        caller.node.visit(Calls())
        facts = scan.facts.get(qual)
        rank = 0 if (entry and facts is not None and entry in facts.attrs) else 1
        sites += [(rank, qual, caller, call) for call in found]
    sites.sort(key=lambda item: (item[0], item[1]))
    return [(caller, call) for _, _, caller, call in sites]


@dataclasses.dataclass
class Instance:
    """What one loader run passed to ``load_jit`` (strict mode)."""

    module_args: list[str]
    template_args: list[str]
    wrappers: list[tuple[str, str]]
    kwargs: dict[str, Any]  # every other load_jit keyword, evaluated
    notes: list[str]
    pins: dict[str, int] = dataclasses.field(default_factory=dict)  # sizes read from tensor shapes
    size_free: bool = False  # no loader parameter took a size (see records.Instantiation.size_free)
    # loader parameters the op's caller chooses at run time, at the value this instance used
    # (a curated fallback or a bool flag's plain path; see records.Instantiation.run_time)
    run_time: dict[str, bool | int | float | str] = dataclasses.field(default_factory=dict)

    def strings(self, key: str) -> list[str]:
        value = self.kwargs.get(key) or []
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise Unresolvable(f"load_jit {key}={value!r} is not a list of strings")
        return list(value)


# What a contract symbol is planned at when a loader reads it from a tensor
# (``w.shape[0]``) and neither a shape case nor the harness's invented shape
# (extract.tasks.planned_sizes) sizes it: the harness's synthetic width.
PLANNED_SIZE = 128
# Tensor parameters SGLang's wrappers pass integer positions or indices in, when neither
# the wrapper nor the contract names their dtype (torch's index dtype is int64).
_INDEX_TENSOR = re.compile(r"(pos|positions|position_ids|\w*_?loc|\w*indices|\w*_idx|idx|\w*_ids|ids|perm\w*|\w*_perm)")


def _asserted_dtypes(name: str, code: str) -> set[str]:
    """The dtypes a wrapper's ``assert name.dtype == torch.X`` / ``in (torch.X, ...)`` allows."""
    found = re.search(rf"\bassert\s+{re.escape(name)}\.dtype\s*(==|is|in)\s*([^\n]*)", code)
    if not found:
        return set()
    named = re.findall(r"torch\.(\w+)", found.group(2))
    return {TORCH_DTYPES[t] for t in (named if found.group(1) == "in" else named[:1]) if t in TORCH_DTYPES}


def parameter_defaults(ev: Evaluator, fn: PyFunction) -> dict[str, Any]:
    """``fn``'s parameters whose default evaluates, at that default (what a caller
    passing nothing gets)."""
    out: dict[str, Any] = {}
    for param in fn.params():
        if param.default is not None:
            try:
                out[param.name.value] = ev.eval(param.default, Env(fn.module))
            except Unresolvable:
                pass
    return out


def tensor_value(name: str, code: str, the_dtype: DtypeValue, spec: Any | None, sizes: dict[str, int]) -> TensorValue:
    """A tensor parameter of the wrapper whose source is ``code``, as the loader sees it.

    Dtype, first that applies: the wrapper's own ``assert name.dtype == torch.X`` (which
    refuses the instantiation dtype for a tensor of the element type); the
    contract's concrete dtype for the tensor of that name; int64 for a name that holds
    positions or indices (``positions``, ``out_cache_loc``); else the instantiation
    dtype. Shape: the contract's, each symbol at its size in ``sizes`` (else
    :data:`PLANNED_SIZE`); a dimension the contract leaves open stays unknown.
    """
    asserted = _asserted_dtypes(name, code)
    # a union (`int32|int64`: the kernel takes either) is its first option
    contract_dtype = next(
        (TORCH_DTYPES[o] for o in (getattr(spec, "dtype", "") or "").split("|") if o in TORCH_DTYPES), None
    )
    element_typed = spec is not None and (spec.dtype == "T" or spec.dtype.startswith("?"))
    if asserted and the_dtype.name in asserted:
        dtype = the_dtype
    elif (
        asserted
        and element_typed
        and the_dtype.name.startswith(("fp", "bf"))
        and any(d.startswith(("fp", "bf")) for d in asserted)
    ):
        # the tensor holds the instantiation's element type, which the wrapper refuses
        raise Unresolvable(f"the wrapper asserts `{name}.dtype` is one of {sorted(asserted)}, not {the_dtype.name}")
    elif asserted:
        dtype = DtypeValue(sorted(asserted)[0])
    elif contract_dtype is not None:
        dtype = DtypeValue(contract_dtype)
    elif _INDEX_TENSOR.fullmatch(name):
        dtype = DtypeValue("int64")
    else:
        dtype = the_dtype
    dims: tuple[tuple[str | None, int], ...] | None = None
    if spec is not None:
        planned: list[tuple[str | None, int]] = []
        for dim in spec.shape:
            if isinstance(dim, int) and dim >= 0:
                planned.append((None, dim))
            elif isinstance(dim, str) and re.fullmatch(r"[A-Za-z_]\w*", dim):
                planned.append((dim, int(sizes.get(dim, PLANNED_SIZE))))
            else:
                planned.append((None, -1))  # open (-1) or an expression: unknown
        dims = tuple(planned)
    return TensorValue(name, dtype, dims)


def instantiate(
    program: Program,
    op: OpEntry,
    call: LoadJitCall,
    *,
    dtype: str,
    sizes: dict[str, int],
    entry: str | None = None,
    fallbacks: dict[str, tuple[Any, str]] | None = None,
    tensors: dict[str, Any] | None = None,
    planned: dict[str, int] | None = None,
) -> Instance:
    """Run ``call``'s loader for one dtype and one set of sizes, as SGLang would on sm_90a.

    Returns the :class:`Instance` it passed to ``load_jit``. Each loader
    parameter is bound, in order of preference, to: the value its call site (in
    the functions the op reaches, preferring the one that calls ``entry``) passes
    when that can be evaluated (tensor ``x.dtype`` is the instantiation dtype,
    caller parameters take their defaults); a size of the same name
    (``hidden_size``, ``head_dim``); the instantiation dtype for a dtype
    parameter; its own default. Raises :class:`Unresolvable` naming the
    parameter when none applies, or when the loader refuses these values (a
    ``raise``/``assert`` on its path). ``fallbacks`` (name -> (value, why)) are the
    last resort, for a parameter with no default that the op's caller chooses at
    run time; each one used is named in the instance's notes with its reason.
    ``tensors`` (name -> the contract's TensorSpec) gives the caller's tensor
    parameters their dtypes and shapes (:func:`tensor_value`), each symbol at its
    size in ``sizes``, else in ``planned`` (the shape the harness invents for the
    contract); the sizes a loader parameter reads from them are the instance's ``pins``.
    The steps: the call site's values (:func:`_site_values`), each parameter bound
    (:func:`_bind_loader_params`), then the loader run until ``load_jit`` (:func:`_wrapper_pairs`).
    """
    loader = program.function(call.module, call.function)
    if loader is None:
        raise Unresolvable(f"loader {call.function} not found in {call.module}")
    notes: list[str] = []
    the_dtype = DtypeValue(dtype)
    site_values, site_ev = _site_values(
        program,
        op,
        loader,
        the_dtype,
        sizes,
        entry=entry,
        fallbacks=fallbacks,
        tensors=tensors,
        planned=planned,
        notes=notes,
    )
    kwargs, run_time = _bind_loader_params(loader, site_values, sizes, the_dtype, fallbacks, notes)
    ev = Evaluator(program.sets.resolve, strict=True)
    capture = ev.run_until_load_jit(loader, [], kwargs)
    wrappers = _wrapper_pairs(capture.kwargs)
    pins = dict(sorted(site_ev.pins.items())) if site_ev is not None else {}
    if pins:
        pinned = ", ".join(f"{k}={v}" for k, v in pins.items())
        notes.append(f"loader parameters read tensor sizes ({pinned}): each instantiation serves those sizes only")
    # Only dtypes and flags reached the loader: nothing it made can depend on a size.
    size_free = not pins and all(isinstance(v, (DtypeValue, bool, Constant)) for v in kwargs.values())
    return Instance(
        list(capture.args),
        list(capture.template_args),
        wrappers,
        dict(capture.kwargs),
        notes,
        pins,
        size_free,
        run_time,
    )


def _site_values(
    program: Program,
    op: OpEntry,
    loader: PyFunction,
    the_dtype: DtypeValue,
    sizes: dict[str, int],
    *,
    entry: str | None,
    fallbacks: dict[str, tuple[Any, str]] | None,
    tensors: dict[str, Any] | None,
    planned: dict[str, int] | None,
    notes: list[str],
) -> tuple[dict[str, Any], Evaluator | None]:
    """Step 1: the best call site's value per loader parameter (or its Unresolvable) and the evaluator holding its pins."""
    sites = find_call_sites(program, op, loader, entry)
    if not sites:
        return {}, None
    caller, site = sites[0]
    ev = Evaluator(program.sets.resolve, strict=True)
    code = caller.module.code(caller.node)
    dims = {**(planned or {}), **sizes}
    values: dict[str, Any] = {
        param.name.value: tensor_value(param.name.value, code, the_dtype, (tensors or {}).get(param.name.value), dims)
        for param in caller.params()
        if _is_tensor_param(param, caller.module)
    }
    values.update({k: v for k, v in parameter_defaults(ev, caller).items() if k not in values})
    runtime_args = {p.name.value for p in caller.params()} - set(values)
    frame = LazyEnv(caller.module, values, assignments_before(caller, site), ev)
    positional = [p for p in [*loader.node.params.posonly_params, *loader.node.params.params]]
    site_values: dict[str, Any] = {}
    for i, arg in enumerate(site.args):
        if arg.star:
            continue
        if arg.keyword is not None:
            name = arg.keyword.value
        elif i < len(positional):
            name = positional[i].name.value
        else:
            continue
        site_values[name] = _site_value(ev, frame, caller, arg, name, sizes, fallbacks, runtime_args, notes)
    return site_values, ev


def _site_value(
    ev: Evaluator,
    frame: LazyEnv,
    caller: PyFunction,
    arg: cst.Arg,
    name: str,
    sizes: dict[str, int],
    fallbacks: dict[str, tuple[Any, str]] | None,
    runtime_args: set[str],
    notes: list[str],
) -> Any:
    """One call-site argument, evaluated; a refusal is returned, not raised, naming the run-time argument it needs."""
    try:
        before = dict(ev.pins)
        value = ev.eval(arg.value, frame)
        read = {k: v for k, v in ev.pins.items() if k not in before and k not in sizes}
        if fallbacks and name in fallbacks and len(read) == 1 and value == next(iter(read.values())):
            # a size no shape case gives, read as is (`weight.shape[-1]`): the curated
            # value for the parameter (the conv width 4) beats the planned one
            (symbol,) = read
            value = ev.pins[symbol] = fallbacks[name][0]
            notes.append(f"loader parameter `{name}` = {fallbacks[name][0]!r} ({symbol}): {fallbacks[name][1]}")
        return value
    except Unresolvable as err:
        used = [n for n in runtime_args if re.search(rf"\b{re.escape(n)}\b", caller.module.code(arg.value))]
        # say what it is when it is a value the caller of the op chooses at run time
        return (
            Unresolvable(f"`{used[0]}` is a run-time argument of {caller.qualname} without a default") if used else err
        )


def _bind_loader_params(
    loader: PyFunction,
    site_values: dict[str, Any],
    sizes: dict[str, int],
    the_dtype: DtypeValue,
    fallbacks: dict[str, tuple[Any, str]] | None,
    notes: list[str],
) -> tuple[dict[str, Any], dict[str, bool | int | float | str]]:
    """Step 2: bind each loader parameter in order of preference; raises naming the first that has no value."""
    kwargs: dict[str, Any] = {}
    run_time: dict[str, bool | int | float | str] = {}
    for param in loader.params():
        name = param.name.value
        passed = site_values.get(name)
        if name in site_values and not isinstance(passed, Unresolvable):
            kwargs[name] = passed
            continue
        if name in sizes:
            kwargs[name] = sizes[name]
            continue
        if _is_dtype_param(param, loader.module):
            kwargs[name] = the_dtype
            if name != "dtype":
                notes.append(f"loader parameter `{name}` taken as the instantiation dtype")
            continue
        if param.default is not None:
            if isinstance(passed, Unresolvable):
                notes.append(f"loader parameter `{name}`: call site value unknown ({passed}); default used")
            continue  # bind_params evaluates the default
        if fallbacks and name in fallbacks:
            kwargs[name], why = fallbacks[name]
            if isinstance(kwargs[name], (bool, int, float, str)):
                run_time[name] = int(kwargs[name]) if isinstance(kwargs[name], Constant) else kwargs[name]
            notes.append(f"loader parameter `{name}` = {kwargs[name]!r}, chosen at run time by SGLang's caller: {why}")
            continue
        if param.annotation is not None and loader.module.code(param.annotation.annotation) == "bool":
            # a flag the caller decides at run time: the plain path (False), as the
            # harness calls an open bool scalar; the task's notes say so
            kwargs[name] = run_time[name] = False
            reason = f" ({passed})" if isinstance(passed, Unresolvable) else ""
            notes.append(
                f"loader parameter `{name}` (bool) = False, the plain path: its value is chosen at run time{reason}"
            )
            continue
        reason = f" ({passed})" if isinstance(passed, Unresolvable) else ""
        raise Unresolvable(f"loader parameter `{name}` of {loader.qualname} has no known value{reason}")
    return kwargs, run_time


def _wrapper_pairs(kwargs: dict[str, Any]) -> list[tuple[str, str]]:
    """Step 3: load_jit's ``cuda_wrappers`` then ``cpp_wrappers`` as pairs of strings; raises on any other item."""
    wrappers_value = [*(kwargs.get("cuda_wrappers") or []), *(kwargs.get("cpp_wrappers") or [])]
    wrappers: list[tuple[str, str]] = []
    for item in wrappers_value:
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and all(isinstance(x, str) for x in item)):
            raise Unresolvable(f"wrapper {item!r} is not a pair of strings")
        wrappers.append((item[0], item[1]))
    return wrappers
