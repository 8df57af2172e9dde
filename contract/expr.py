"""The one restricted-expression language: validated ``ast``, no builtins, no ``eval``.

Contracts carry small expressions: shape and stride entries (``2 * hidden``), value
ranges (``min(slots, 128) - 1``) and the kernel's own checks as translated by extract
(``(numel % hidden_size) == 0``, ``(kH == 3) or (kH == 6)``). They are parsed by
Python's ``ast`` and then checked against a :class:`Grammar`: an explicit whitelist of
node types and calls; anything else is refused before a value is ever computed. The
walker below computes the value itself (no ``eval``, no builtins), so a contract file
can never run code.

What must stay true:
- :data:`ARITHMETIC` (shapes, strides, value ranges) accepts integers, names,
  ``+ - * // / %``, unary ``+ -`` and ``min``/``max`` calls without keywords; ``/``
  must divide exactly (:func:`evaluate` with ``exact=True``), ``//`` floors.
- :data:`CONDITION` (constraints) accepts integer and bool constants, names,
  ``+ - * // % << >>``, every comparison, ``and``/``or``/``not``, unary ``+ -`` and
  ``x if c else y``; no calls and no ``/``. Its values are Python's (``//`` floors,
  ``and`` returns an operand).
- A name with no value, a division by zero, or an inexact exact division is an
  :class:`ExprError` with ``undefined=True``; text outside the grammar is one with
  ``undefined=False``.
"""

from __future__ import annotations

import ast
import functools
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from contract.errors import ExprError

Value = int | bool

_BINARY: dict[type[ast.operator], Callable[[Value, Value], Value]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.floordiv,
    ast.Mod: operator.mod,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
}
_COMPARE: dict[type[ast.cmpop], Callable[[Value, Value], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_CALLS: dict[str, Callable[..., int]] = {"min": min, "max": max}


@dataclass(frozen=True)
class Grammar:
    """What one use of the language accepts."""

    name: str  # how an error names the expression ("shape entry", "constraint")
    nodes: tuple[type[ast.AST], ...]  # node types allowed (operators included)
    calls: tuple[str, ...] = ()  # functions it may call, by name (keywords never)
    bools: bool = False  # whether True/False are constants (integers always are)
    summary: str = ""  # the grammar in words, for an error's fix
    what: str = "an expression"  # what its text must be ("an arithmetic expression")


ARITHMETIC = Grammar(
    "shape entry",
    (
        ast.Expression,
        ast.Name,
        ast.Load,
        ast.BinOp,
        ast.UnaryOp,
        ast.USub,
        ast.UAdd,
        ast.Add,
        ast.Sub,
        ast.Mult,
        ast.FloorDiv,
        ast.Div,
        ast.Mod,
        ast.Call,
    ),
    calls=("min", "max"),
    summary="only integers, symbols, + - * // / % and min/max are allowed",
    what="an arithmetic expression",
)
CONDITION = Grammar(
    "constraint",
    (
        ast.Expression,
        ast.BoolOp,
        ast.And,
        ast.Or,
        ast.UnaryOp,
        ast.Not,
        ast.USub,
        ast.UAdd,
        ast.BinOp,
        ast.Add,
        ast.Sub,
        ast.Mult,
        ast.FloorDiv,
        ast.Mod,
        ast.LShift,
        ast.RShift,
        ast.Compare,
        ast.Eq,
        ast.NotEq,
        ast.Lt,
        ast.LtE,
        ast.Gt,
        ast.GtE,
        ast.IfExp,
        ast.Name,
        ast.Load,
    ),
    bools=True,
    summary="integers, true/false, names, + - * // % << >>, comparisons, and/or/not, x if c else y",
)


def _refusal(node: ast.AST, grammar: Grammar) -> str | None:
    """Why ``node`` is outside ``grammar`` (its type's name), or None when it is inside."""
    if isinstance(node, ast.Constant):
        ok = type(node.value) is int or (grammar.bools and type(node.value) is bool)
        return None if ok else type(node).__name__
    if isinstance(node, ast.Call):
        fine = (
            isinstance(node, grammar.nodes)
            and isinstance(node.func, ast.Name)
            and node.func.id in grammar.calls
            and not node.keywords
        )
        return None if fine else type(node).__name__
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        return None if isinstance(node, grammar.nodes) else type(node).__name__
    return None if isinstance(node, grammar.nodes) else type(node).__name__


@functools.lru_cache(maxsize=8192)
def parse(text: str, grammar: Grammar) -> ast.Expression:
    """The validated tree of ``text``; ExprError (``undefined=False``) when it is not
    Python or uses a node ``grammar`` does not allow. Cached: trees are never mutated."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as err:
        raise ExprError(f"{grammar.name} {text!r} is not {grammar.what}", syntax=True) from err
    for node in ast.walk(tree):
        refused = _refusal(node, grammar)
        if refused is not None:
            raise ExprError(f"{grammar.name} {text!r} uses {refused}; {grammar.summary}")
    return tree


def names(tree: ast.AST) -> frozenset[str]:
    """The names an expression reads (the functions it calls excluded)."""
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    return frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in called)


def int_literals(tree: ast.AST) -> tuple[int, ...]:
    """The positive integer constants of an expression, sorted (values worth trying)."""
    found = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and type(n.value) is int and n.value > 0}
    return tuple(sorted(found))


def evaluate(tree: ast.AST, env: Mapping[str, Value], *, exact: bool = False) -> Value:
    """The value of a validated tree at ``env``.

    ``exact``: ``/`` must divide exactly (a shape entry; ``//`` floors). Raises ExprError
    with ``undefined=True`` for a name with no value, a division by zero, an inexact
    exact division or an arithmetic error (a negative shift)."""

    def walk(node: ast.AST) -> Value:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant):
            constant = node.value
            assert isinstance(constant, int), "validated: int or bool"
            return constant
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise ExprError(f"no value for {node.id!r}", undefined=True)
            return env[node.id]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return _CALLS[node.func.id](*(walk(arg) for arg in node.args))
        if isinstance(node, ast.UnaryOp):
            operand = walk(node.operand)
            if isinstance(node.op, ast.Not):
                return not operand
            return -operand if isinstance(node.op, ast.USub) else +operand
        if isinstance(node, ast.BinOp):
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
                raise ExprError(f"divides {left} by {right} inexactly", undefined=True)
            if exact and isinstance(node.op, ast.Div) and left % right:
                raise ExprError(f"divides {left} by {right} inexactly", undefined=True)
            try:
                return _BINARY[type(node.op)](left, right)
            except (ArithmeticError, ValueError) as err:
                raise ExprError(f"{left} {type(node.op).__name__} {right}: {err}", undefined=True) from err
        if isinstance(node, ast.BoolOp):
            value: Value = False
            for part in node.values:
                value = walk(part)
                if isinstance(node.op, ast.And) and not value:
                    return value
                if isinstance(node.op, ast.Or) and value:
                    return value
            return value
        if isinstance(node, ast.Compare):
            left = walk(node.left)
            for op, comparator in zip(node.ops, node.comparators):
                right = walk(comparator)
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.IfExp):
            return walk(node.body) if walk(node.test) else walk(node.orelse)
        raise ExprError(f"cannot evaluate {type(node).__name__}")

    return walk(tree)


__all__ = ["ARITHMETIC", "CONDITION", "ExprError", "Grammar", "evaluate", "int_literals", "names", "parse"]
