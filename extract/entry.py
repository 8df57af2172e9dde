"""How an op's public Python function is called from its contract: read with libcst.

The contract (:class:`pipeline.records.Contract`) describes the C++ entry the
JIT module exports; SGLang's users call a Python wrapper instead, whose
parameters need not match it: the wrapper may allocate an output and return
it, take ``out=None``, reshape ``input`` into ``input_2d`` before the JIT call,
pass a literal (``"silu"``) for a contract scalar, or go through local helpers
(``silu_and_mul`` -> ``run_activation`` -> ``_run_activation_inplace`` ->
``module.run_activation``). :func:`read_signature` records, for every
parameter of the public function, its kind, whether it has a default, and which
contract argument it feeds:

- ``via="call"``: the parameter (or a local derived from it by method calls,
  attribute access, indexing or a conditional expression) is passed, at
  position *i*, to a call of one of the task's entry points (``module.<entry>``),
  so it feeds contract argument *i*; calls of other top-level functions of the
  same module are followed, binding their parameters to the caller's arguments;
- ``via="name"``: no call shows it, but the parameter has the name of a contract
  argument nothing else feeds;
- ``via="size"``: it feeds no argument but is named after one of the contract's
  size symbols (``topk``, ``head_dim``): it is passed that size;
- ``via="build"``: it has no default and feeds no argument, but reaches (traced the
  same way) a parameter of the module's JIT loader that every instantiation fixed at
  the value SGLang's caller chooses at run time (``is_neox``: a curated loader value,
  :attr:`pipeline.records.Instantiation.run_time`): it is passed the value the
  module was built for.

What must stay true: nothing is guessed. A parameter without a default that
feeds no contract argument makes the function uncallable from the contract,
and :attr:`EntrySignature.reason` says so; the integrate stage then reports the
op as not checked with that reason. Reading never raises for an unreadable
wrapper: the reason records it.
"""

from __future__ import annotations

import pathlib
from collections.abc import Collection, Sequence

import libcst as cst

from extract.pyops.modules import dotted_name, parse_module
from pipeline.records import Contract, EntryParam, EntrySignature, ParamKind

MAX_DEPTH = 6  # helper calls followed from the public function (silu_and_mul needs 2)


def _arg_names(contract: Contract) -> list[str]:
    names: list[str] = []
    for arg in contract.args:
        spec = arg.tensor if arg.kind == "tensor" else arg.scalar
        names.append(spec.name if spec is not None else "")
    return names


def _params_of(fn: cst.FunctionDef) -> list[tuple[cst.Param, ParamKind]]:
    params = fn.params
    out: list[tuple[cst.Param, ParamKind]] = [(p, "positional_only") for p in params.posonly_params]
    out += [(p, "positional_or_keyword") for p in params.params]
    if isinstance(params.star_arg, cst.Param):
        out.append((params.star_arg, "var_positional"))
    out += [(p, "keyword_only") for p in params.kwonly_params]
    if params.star_kwarg is not None:
        out.append((params.star_kwarg, "var_keyword"))
    return out


class OutermostFunction(cst.CSTVisitor):
    """Visits the function it is given and nothing of the functions defined inside it."""

    def __init__(self) -> None:
        super().__init__()
        self._depth = 0

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self._depth += 1
        return self._depth == 1

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._depth -= 1


class _Body(OutermostFunction):
    """The simple assignments and the calls inside one function body (nested defs excluded)."""

    def __init__(self) -> None:
        super().__init__()
        self.assigned: dict[str, cst.BaseExpression] = {}
        self.calls: list[cst.Call] = []

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                self.assigned.setdefault(target.target.value, node.value)

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)


def _bound(callee: cst.FunctionDef, call: cst.Call) -> list[tuple[str, cst.BaseExpression]]:
    """(callee parameter, argument expression) of each argument ``call`` passes ``callee``."""
    order = [p.name.value for p, kind in _params_of(callee) if kind in ("positional_only", "positional_or_keyword")]
    positional = [a.value for a in call.args if a.keyword is None and not a.star]
    return [*zip(order, positional), *((a.keyword.value, a.value) for a in call.args if a.keyword is not None)]


#: what :class:`_Tracer` records for a parameter that reaches the JIT loader's parameter ``<name>``
LOADER = "loader:"


class _Tracer:
    """Which contract argument each parameter of a module-level function feeds, or
    (``LOADER + name``) which parameter of the JIT loader ``loader`` it reaches."""

    def __init__(
        self,
        functions: dict[str, cst.FunctionDef],
        entry_points: Sequence[str],
        arg_names: Sequence[str],
        loader: str | None = None,
    ) -> None:
        self.functions = functions
        self.entry_points = set(entry_points)
        self.arg_names = list(arg_names)
        self.loader = loader
        self._memo: dict[str, dict[str, str]] = {}

    def feeds(self, name: str, stack: tuple[str, ...] = ()) -> dict[str, str]:
        if name in self._memo:
            return self._memo[name]
        if name in stack or len(stack) > MAX_DEPTH:
            return {}
        fn = self.functions[name]
        params = {p.name.value for p, _ in _params_of(fn)}
        body = _Body()
        fn.visit(body)
        out: dict[str, str] = {}

        def root(expr: cst.BaseExpression, seen: frozenset[str] = frozenset()) -> str | None:
            if isinstance(expr, cst.Name):
                if expr.value in params:
                    return expr.value
                value = body.assigned.get(expr.value)
                return root(value, seen | {expr.value}) if value is not None and expr.value not in seen else None
            if isinstance(expr, cst.Attribute):
                return root(expr.value, seen)
            if isinstance(expr, cst.Subscript):
                return root(expr.value, seen)
            if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
                return root(expr.func.value, seen)  # a method of the tensor: input.view(-1, d)
            if isinstance(expr, cst.IfExp):
                return root(expr.body, seen) or root(expr.orelse, seen)
            return None

        def put(param: str, feed: str) -> None:
            # the first feed found wins, except that a contract argument beats a loader parameter
            # (``_jit_module(k.dtype)`` before ``module.run(q, k)``: ``k`` feeds the argument k)
            if param not in out or (out[param].startswith(LOADER) and not feed.startswith(LOADER)):
                out[param] = feed

        for call in body.calls:
            func = call.func
            positional = [a for a in call.args if a.keyword is None and not a.star]
            if isinstance(func, cst.Attribute) and func.attr.value in self.entry_points:
                for index, arg in enumerate(positional[: len(self.arg_names)]):
                    param = root(arg.value)
                    if param is not None and self.arg_names[index]:
                        put(param, self.arg_names[index])
            elif isinstance(func, cst.Name) and func.value == self.loader and func.value in self.functions:
                for loader_param, expr in _bound(self.functions[func.value], call):
                    param = root(expr)
                    if param is not None:
                        put(param, LOADER + loader_param)
            elif isinstance(func, cst.Name) and func.value in self.functions and func.value != name:
                inner = self.feeds(func.value, (*stack, name))
                for callee_param, expr in _bound(self.functions[func.value], call):
                    if callee_param in inner:
                        param = root(expr)
                        if param is not None:
                            put(param, inner[callee_param])
        self._memo[name] = out
        return out


def _string_set(expr: cst.BaseExpression, constants: dict[str, cst.BaseExpression]) -> list[str] | None:
    """The strings of a set/tuple/list literal of string literals (or a module-level name bound to one)."""
    if isinstance(expr, cst.Name) and expr.value in constants:
        expr = constants[expr.value]
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in ("frozenset", "set"):
        expr = expr.args[0].value if len(expr.args) == 1 else expr
    if not isinstance(expr, (cst.Set, cst.Tuple, cst.List)):
        return None
    values = [e.value for e in expr.elements]
    if not values or not all(isinstance(v, cst.SimpleString) for v in values):
        return None
    return sorted(str(v.evaluated_value) for v in values if isinstance(v, cst.SimpleString))


def asserted_values(fn: cst.FunctionDef, constants: dict[str, cst.BaseExpression]) -> dict[str, list[str]]:
    """Parameter -> the strings ``fn`` asserts it is one of (``assert op_name in SUPPORTED``).

    Why: a string scalar's value is otherwise taken from the first literal the kernel
    compares it with, which may belong to another entry of the same class
    (``run_unary_activation`` takes only "relu2"; the header compares ``type`` with
    "silu" first: every call was refused on the H200, 2026-12-02).
    """
    out: dict[str, list[str]] = {}

    class _Asserts(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is fn

        def visit_Assert(self, node: cst.Assert) -> None:
            test = node.test
            if not (
                isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name) and len(test.comparisons) == 1
            ):
                return
            target = test.comparisons[0]
            if isinstance(target.operator, cst.In):
                values = _string_set(target.comparator, constants)
                if values:
                    out.setdefault(test.left.value, values)

    fn.visit(_Asserts())
    return out


def read_signature(
    root: pathlib.Path,
    module_path: str,
    function: str,
    contract: Contract,
    entry_points: Sequence[str],
    *,
    loader: str | None = None,
    built: Collection[str] = (),
) -> EntrySignature:
    """The public function ``function`` of ``root/module_path`` and the contract argument each parameter feeds.

    ``loader``: the JIT loader function of the module (``_jit_fused_rope_module``); ``built``:
    its parameters every instantiation fixed at a run-time value (Instantiation.run_time). A
    parameter without a default that reaches one of those is ``via="build"``, not missing.
    """
    dotted = dotted_name(module_path)
    path = root / module_path
    try:
        parsed = parse_module(module_path, path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, cst.ParserSyntaxError) as err:
        return EntrySignature(module=dotted, function=function, reason=f"cannot read {module_path}: {err}")
    module = parsed.tree
    functions = {s.name.value: s for s in module.body if isinstance(s, cst.FunctionDef)}
    fn = functions.get(function)
    if fn is None:
        return EntrySignature(
            module=dotted,
            function=function,
            reason=f"{function} is not a top-level def of {module_path}: its parameters cannot be read",
        )
    arg_names = _arg_names(contract)
    traced = _Tracer(
        functions, [contract.entry] if contract.entry in entry_points else entry_points, arg_names, loader
    ).feeds(function)
    reaches = {p: f.removeprefix(LOADER) for p, f in traced.items() if f.startswith(LOADER)}
    traced = {p: f for p, f in traced.items() if p not in reaches}
    allowed = asserted_values(fn, parsed.constants)
    fed: set[str] = set()
    symbols = set(contract.symbols)
    params: list[EntryParam] = []
    missing: list[str] = []
    for param, kind in _params_of(fn):
        name = param.name.value
        feeds, via = traced.get(name), "call" if name in traced else ""
        if feeds is not None and feeds in fed:  # one parameter per contract argument: the first that reaches it
            feeds, via = None, ""
        if feeds is None and name in arg_names and name not in fed and name not in traced.values():
            feeds, via = name, "name"
        if feeds is None and name in symbols and kind not in ("var_positional", "var_keyword"):
            feeds, via = name, "size"  # the wrapper is told a size the tensors' shapes also state (topk, head_dim)
        if feeds is not None:
            fed.add(feeds)
        default = module.code_for_node(param.default) if param.default is not None else None
        loader_param = reaches.get(name) if feeds is None and default is None else None
        if loader_param is not None and loader_param in built:
            via = "build"
        else:
            loader_param = None
        params.append(
            EntryParam(
                name=name,
                kind=kind,
                has_default=default is not None,
                default=default,
                feeds=feeds,
                via=via,
                loader_param=loader_param,
                allowed=allowed.get(name, []),
            )
        )
        if feeds is None and default is None and via != "build" and kind not in ("var_positional", "var_keyword"):
            missing.append(name)
    returns = module.code_for_node(fn.returns.annotation) if fn.returns is not None else None
    reason = ""
    if missing:
        reason = (
            f"parameter(s) {', '.join(missing)} of {dotted}.{function} have no default and feed no argument of the contract "
            f"({contract.entry}({', '.join(a for a in arg_names)})): no planned value can be passed for them"
        )
    return EntrySignature(module=dotted, function=function, params=params, returns=returns, reason=reason)


def public_function(op_id: str, public_functions: Sequence[str]) -> str:
    """The function an op id names (``<group>.<function>``), else the op's first public function."""
    name = op_id.partition(".")[2]
    return name if name in public_functions or not public_functions else public_functions[0]
