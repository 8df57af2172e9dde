"""What an op's Python wrappers say about an export's arguments.

The functions the op's public function reaches (:class:`extract.pyops.Program`):
``register_custom_op(mutates_args=...)`` mapped through ``module.<export>(...)``
call arguments, whether the public function returns anything (else it writes into
an argument), parameter defaults for scalar values (``eps=1e-6``), literals passed
down a call chain (``run_activation("gelu", ...)``), and scalars read from a
tensor's size (``size_limit = k_cache.shape[0]``).

What must stay true: only concrete values (str, int, float, bool) become facts;
anything the evaluator cannot settle is left out, never guessed.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from typing import Final

import libcst as cst

from extract import pyops
from pipeline.records import OpEntry

# A literal a wrapper passes or defaults to (bool is listed apart from int for the reader).
ScalarLiteral = str | int | float | bool


@dataclasses.dataclass
class PyFacts:
    """What the op's Python says about an export's arguments."""

    written: set[int]  # positions of export arguments the Python marks as mutated
    defaults: dict[str, ScalarLiteral | None]  # public function parameter -> default (concrete values only)
    returns_value: bool
    literal_args: dict[int, ScalarLiteral]  # export argument positions given a literal (str/int/float/bool)
    # export argument position -> (position of the tensor argument, dimension) the wrapper
    # reads it from (`size_limit = k_cache.shape[0]` before `module.store_cache(..., size_limit)`)
    sized_args: dict[int, tuple[int, int]] = dataclasses.field(default_factory=dict)


def _root_name(expr: cst.BaseExpression, assigned: dict[str, cst.BaseExpression], depth: int = 0) -> str | None:
    """The Python name a tensor expression derives from (``out_2d = out.view(...)`` -> ``out``)."""
    while True:
        if isinstance(expr, cst.Name):
            if expr.value in assigned and depth < 8:
                inner = _root_name(
                    assigned[expr.value], {k: v for k, v in assigned.items() if k != expr.value}, depth + 1
                )
                return inner or expr.value
            return expr.value
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            expr = expr.func.value
        elif isinstance(expr, (cst.Attribute, cst.Subscript)):
            expr = expr.value
        else:
            return None


class _NotLiteral(enum.Enum):
    NOT_LITERAL = enum.auto()


_NOT_LITERAL: Final = _NotLiteral.NOT_LITERAL


def _literal(node: cst.BaseExpression) -> ScalarLiteral | _NotLiteral:
    """The value of a literal argument (str, int, float, bool), else :data:`_NOT_LITERAL`."""
    if isinstance(node, cst.SimpleString):
        return str(node.evaluated_value)
    if isinstance(node, cst.Integer):
        return int(node.evaluated_value)
    if isinstance(node, cst.Float):
        return float(node.evaluated_value)
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = _literal(node.expression)
        if isinstance(inner, (int, float)) and not isinstance(inner, bool):
            return -inner
    return _NOT_LITERAL


def constant_args(
    program: pyops.Program, nodes: frozenset[tuple[str, str]]
) -> dict[tuple[str, str], dict[str, ScalarLiteral]]:
    """Parameters that hold one known literal on every path from the op's public function.

    ``gelu_and_mul`` calls ``run_activation("gelu", ...)``, which passes its ``op_name``
    down to ``module.run_activation(..., op_name)``: the export's ``type`` argument is
    ``"gelu"``, but only following the string through the callers says so; likewise an
    int or float a wrapper passes down (``page_size=64``). Among the functions
    ``nodes`` (what the op reaches), a parameter is constant when every call to its
    function there passes the same literal, or a caller's constant parameter.
    Calls are resolved as the program's call graph resolves them
    (:meth:`extract.pyops.Program.resolve`); only calls of plain functions count.
    """
    funcs = {n: f for n in nodes if (f := program.function(*n)) is not None}
    edges: list[tuple[tuple[str, str], tuple[str, str], cst.Call]] = []
    for node, fn in funcs.items():
        found: list[cst.Call] = []

        class Calls(cst.CSTVisitor):
            def visit_Call(self, call: cst.Call) -> None:
                if isinstance(call.func, cst.Name):
                    found.append(call)

        fn.node.visit(Calls())
        for call in found:
            assert isinstance(call.func, cst.Name)  # only plain-name calls were collected
            callees = [
                c for c in program.resolve(node[0], call.func.value) if c in funcs and c != node and "." not in c[1]
            ]
            if len(callees) == 1:
                edges.append((node, callees[0], call))
    consts: dict[tuple[str, str], dict[str, ScalarLiteral]] = {n: {} for n in funcs}
    for _ in range(6):  # call chains in these wrappers are a few levels deep
        seen: dict[tuple[tuple[str, str], str], set[tuple[str, ScalarLiteral] | None]] = {}
        for caller, callee, call in edges:
            params = [
                p.name.value for p in [*funcs[callee].node.params.posonly_params, *funcs[callee].node.params.params]
            ]
            for i, arg in enumerate(call.args):
                if arg.star:
                    continue
                name = arg.keyword.value if arg.keyword is not None else (params[i] if i < len(params) else None)
                if name is None:
                    continue
                value = _literal(arg.value)
                if value is _NOT_LITERAL and isinstance(arg.value, cst.Name):
                    value = consts[caller].get(arg.value.value, _NOT_LITERAL)
                seen.setdefault((callee, name), set()).add(
                    (type(value).__name__, value) if value is not _NOT_LITERAL else None
                )
        updated: dict[tuple[str, str], dict[str, ScalarLiteral]] = {n: {} for n in funcs}
        for (callee, name), values in seen.items():
            if len(values) == 1 and None not in values:
                (only,) = values
                assert only is not None  # None not in values
                updated[callee][name] = only[1]
        if updated == consts:
            break
        consts = updated
    return consts


def python_facts(program: pyops.Program, op: OpEntry, export: str) -> PyFacts:
    public = op.public_functions[0]
    target = program.public_target(op.module, public)
    defaults: dict[str, ScalarLiteral | None] = {}
    returns_value = True
    written: set[int] = set()
    literals: dict[int, ScalarLiteral] = {}
    sized: dict[int, tuple[int, int]] = {}
    if target is None:
        return PyFacts(written, defaults, returns_value, literals, sized)
    fn = program.function(op.module, target)
    assert fn is not None, "public_target names a function of the module"
    fn_node = fn.node
    ev = pyops.Evaluator(program.sets.resolve, strict=True)
    defaults = {
        k: v for k, v in pyops.parameter_defaults(ev, fn).items() if v is None or isinstance(v, (int, float, str, bool))
    }

    class Returns(cst.CSTVisitor):
        def __init__(self) -> None:
            self.values = 0

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is fn_node

        def visit_Return(self, node: cst.Return) -> None:
            if node.value is not None and not (isinstance(node.value, cst.Name) and node.value.value == "None"):
                self.values += 1

    visitor = Returns()
    fn.node.visit(visitor)
    returns_value = visitor.values > 0
    reached = program.reach((op.module, target))
    consts = constant_args(program, reached)
    for rel, qual in sorted(reached):
        caller = program.function(rel, qual)
        if caller is None:
            continue
        mutated: set[str] = set()
        for deco in caller.node.decorators:
            if isinstance(deco.decorator, cst.Call):
                for arg in deco.decorator.args:
                    if arg.keyword is not None and arg.keyword.value == "mutates_args":
                        try:
                            value = ev.eval(arg.value, pyops.Env(caller.module))
                        except pyops.Unresolvable:
                            continue
                        if isinstance(value, (list, tuple)):
                            mutated |= {v for v in value if isinstance(v, str)}
        found: list[cst.Call] = []

        class Calls(cst.CSTVisitor):
            def visit_Call(self, node: cst.Call) -> None:
                if isinstance(node.func, cst.Attribute) and node.func.attr.value == export:
                    found.append(node)

        caller.node.visit(Calls())
        for call in found:
            assigned = pyops.assignments_before(caller, call)
            passed = {arg.value.value: i for i, arg in enumerate(call.args) if isinstance(arg.value, cst.Name)}
            frame = None
            for i, arg in enumerate(call.args):
                value = _literal(arg.value)
                if value is not _NOT_LITERAL:
                    literals.setdefault(i, value)
                elif isinstance(arg.value, cst.Name) and arg.value.value in consts.get((rel, qual), {}):
                    literals.setdefault(i, consts[(rel, qual)][arg.value.value])
                elif i not in literals:
                    # what the wrapper computes from its own defaults (`multiplier if
                    # multiplier is not None else 1.0`): the value a caller passing nothing gets
                    frame = frame or _defaults_frame(ev, caller, call)
                    try:
                        computed = ev.eval(arg.value, frame)
                    except pyops.Unresolvable:
                        computed = None
                    if isinstance(computed, (int, float, bool)):
                        literals[i] = computed
                root = _root_name(arg.value, assigned)
                if root is not None and root in mutated:
                    written.add(i)
                if isinstance(arg.value, cst.Name) and arg.value.value in assigned:
                    read = _SIZE_READ.fullmatch(caller.module.code(assigned[arg.value.value]).strip())
                    if read and read.group(1) in passed:
                        sized.setdefault(i, (passed[read.group(1)], int(read.group(2) or read.group(3))))
    return PyFacts(written, defaults, returns_value, literals, sized)


def _defaults_frame(ev: pyops.Evaluator, fn: pyops.PyFunction, site: cst.CSTNode) -> pyops.Env:
    """``fn``'s frame at ``site`` with each parameter at its default (none bound without
    one) and its locals evaluated on first use (pyops' call-site frame)."""
    return pyops.LazyEnv(fn.module, pyops.parameter_defaults(ev, fn), pyops.assignments_before(fn, site), ev)


# `t.shape[i]` / `t.size(i)`: a scalar a wrapper reads from a tensor it passes along
_SIZE_READ = re.compile(r"(\w+)\s*\.\s*(?:shape\s*\[\s*(-?\d+)\s*\]|size\s*\(\s*(-?\d+)\s*\))")
