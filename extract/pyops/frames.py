"""A caller's frame at one call site, for reading what it passes without running it.

:func:`assignments_before` collects a function's simple assignments that come before
a site in source order, each with the ``if`` tests around it; :class:`LazyEnv`
evaluates a local on first use from the last of those whose tests hold. Task
instantiation reads a loader's arguments at its call site this way, and contract
inference reads the values a wrapper computes from its own defaults.

What must stay true: a local assignment shadows the parameter of its name, except
inside its own right-hand side and guards, where the name means what it was before;
an assignment under a test that cannot be told counts as run only when its value can
be evaluated.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import libcst as cst

from extract.pyops.interpreter import Evaluator
from extract.pyops.modules import Env, PyFunction, PyModule
from extract.pyops.values import Unresolvable


@dataclasses.dataclass(frozen=True)
class Guard:
    """An ``if`` around an assignment: its test, and whether the assignment is in the
    body (runs when the test is true) or in the ``else`` (runs when it is false)."""

    test: cst.BaseExpression
    expected: bool


@dataclasses.dataclass(frozen=True)
class GuardedAssignment:
    """One ``name = value`` before a site, with the ``if`` tests around it, outermost first."""

    value: cst.BaseExpression
    guards: tuple[Guard, ...]


class Assignments(dict[str, cst.BaseExpression]):
    """name -> the last ``name = expr`` before a site (what callers read as before), plus
    ``guarded``: every such assignment of each name in order, with its guards."""

    def __init__(self) -> None:
        super().__init__()
        self.guarded: dict[str, list[GuardedAssignment]] = {}


class LazyEnv(Env):
    """A caller's frame for evaluating one call site: parameters are bound up front,
    locals are evaluated on first use from their last assignment before the site
    whose enclosing ``if`` tests hold (``if activation == "swish": activation = "silu"``
    applies only when the test is true). Under a test that cannot be evaluated the
    assignment counts as run when its value can be evaluated, else as not run (the
    name keeps its earlier value: ``if key.dim() != 2: key = key.view(...)``)."""

    def __init__(self, module: PyModule, values: dict[str, Any], assigned: Assignments, ev: Evaluator) -> None:
        super().__init__(module, values)
        self.guarded = assigned.guarded
        self.ev = ev
        self.limits: dict[str, int] = {}  # name -> how many of its assignments are visible now
        self.locals: dict[str, Any] = {}

    def lookup(self, name: str) -> tuple[bool, Any]:
        # A local assignment shadows the parameter of the same name
        # (``head_dim = head_dim or q.size(-1)``); inside its own right-hand side and its
        # guards, the name means what it was before: an earlier assignment, else the parameter.
        entries = self.guarded.get(name, [])
        limit = self.limits.get(name, len(entries))
        if limit == len(entries) and name in self.locals:
            return True, self.locals[name]
        undecided: list[cst.BaseExpression] = []  # tests of ifs whose branches are all unknown now
        outer = self.limits.get(name)  # set while this name's own value or guard is evaluated
        for i in reversed(range(limit)):
            expr, guards = entries[i].value, entries[i].guards
            if any(guard.test is seen for guard in guards for seen in undecided):
                continue  # the other branch of an if already undecided: not "the value before"
            self.limits[name] = i
            try:
                held = [self._holds(guard.test, guard.expected) for guard in guards]
                if False in held:
                    continue
                try:
                    value = self.ev.eval(expr, self)
                except Unresolvable:
                    if None in held:  # it may not have run (`if x.dim() != 2: x = x.view(...)`)
                        undecided += [guard.test for guard, h in zip(guards, held) if h is None]
                        continue
                    raise
                if limit == len(entries):
                    self.locals[name] = value
                return True, value
            finally:
                if outer is None:
                    self.limits.pop(name, None)
                else:
                    self.limits[name] = outer
        if name in self.values:
            return True, self.values[name]
        return False, None

    def _holds(self, test: cst.BaseExpression, expected: bool) -> bool | None:
        """Whether the ``if`` test has the branch's value; None when it cannot be told."""
        try:
            value = self.ev.eval(test, self)
        except Unresolvable:
            return None
        if not isinstance(value, (bool, int, float, str, type(None))):
            return None  # not a plain value (a tensor, an unknown)
        return bool(value) == expected


def assignments_before(fn: PyFunction, site: cst.CSTNode) -> Assignments:
    """Simple ``name = expr`` assignments of ``fn`` that come before ``site`` in source
    order (see :class:`Assignments`)."""
    out = Assignments()
    stop = [False]
    guards: list[Guard] = []

    def record(name: str, expr: cst.BaseExpression) -> None:
        out[name] = expr
        out.guarded.setdefault(name, []).append(GuardedAssignment(expr, tuple(guards)))

    class Walk(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if node is site:
                stop[0] = True
            if stop[0]:
                return False
            if isinstance(node, cst.FunctionDef) and node is not fn.node:
                return False
            if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
                record(node.targets[0].target.value, node.value)
            elif (
                isinstance(node, cst.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0].target, (cst.Tuple, cst.List))
            ):
                # `m, k = x.shape`: each name is the right-hand side's item at its position
                for i, element in enumerate(node.targets[0].target.elements):
                    if isinstance(element.value, cst.Name) and not isinstance(element, cst.StarredElement):
                        index = cst.SubscriptElement(cst.Index(cst.Integer(str(i))))
                        record(element.value.value, cst.Subscript(value=node.value, slice=[index]))
            elif isinstance(node, cst.AnnAssign) and isinstance(node.target, cst.Name) and node.value is not None:
                record(node.target.value, node.value)
            return True

        def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
            if isinstance(node, cst.If) and attribute in ("body", "orelse"):
                guards.append(Guard(node.test, attribute == "body"))

        def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
            if isinstance(original_node, cst.If) and attribute in ("body", "orelse"):
                guards.pop()

    fn.node.visit(Walk())
    return out
