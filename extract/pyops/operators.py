"""Python's operators and comparisons in the restricted interpreter.

:class:`Operators` evaluates ``not``/``and``/``or``, the unary and binary operators and
chained comparisons on the values :class:`~.expressions.Expressions` computes; it is a base
class of :class:`~.expressions.Expressions` (``eval`` dispatches on the node's type to
``_eval_<Type>``, so these methods are found through it), kept apart so the expression
half stays readable: names, attributes, subscripts and strings there, operators here.

What must stay true: an operator applies Python's own semantics to concrete values only;
an unknown operand makes the result :class:`~.values.Unknown` in static mode and raises
:class:`~.values.Unresolvable` in strict mode, and a Python error in an operator is "not
knowable", never a guess. The host's ``eval``, ``unknown``, ``_concat_str`` and ``strict``
are declared here for type checking only: this class is never instantiated alone.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TYPE_CHECKING

import libcst as cst

from extract.pyops.modules import Env
from extract.pyops.values import Alts, TensorValue, Unknown, Unresolvable, concrete, identical

_UNARY_SYMBOLS = {"Minus": "-", "Plus": "+", "BitInvert": "~"}


class Operators:
    """``not``, ``and``/``or``, unary and binary operators and comparisons (a base of ``Expressions``)."""

    strict: bool

    if TYPE_CHECKING:  # provided by Expressions, the one class built on this

        def eval(self, node: cst.BaseExpression, env: Env) -> object: ...

        def unknown(self, env: Env, node: cst.CSTNode, why: str = "") -> Unknown: ...

        def _concat_str(self, left: object, right: object, env: Env, node: cst.CSTNode) -> str | Alts | Unknown: ...

    def _eval_BooleanOperation(self, node: cst.BooleanOperation, env: Env) -> object:
        left = self.eval(node.left, env)
        if not concrete(left):
            return self.unknown(env, node)
        if isinstance(node.operator, cst.And):
            return self.eval(node.right, env) if left else left
        return left if left else self.eval(node.right, env)

    def _eval_UnaryOperation(self, node: cst.UnaryOperation, env: Env) -> bool | int | float | Unknown:
        value = self.eval(node.expression, env)
        if not concrete(value):
            return self.unknown(env, node)
        op = type(node.operator).__name__
        if op == "Not":
            return not value
        # a number (bool and Constant are ints); any other operand fails as it does in Python
        if op == "Minus" and isinstance(value, (int, float)):
            return -value
        if op == "Plus" and isinstance(value, (int, float)):
            return +value
        if op == "BitInvert" and isinstance(value, int):
            return ~value
        if op in _UNARY_SYMBOLS:
            raise TypeError(f"bad operand type for unary {_UNARY_SYMBOLS[op]}: '{type(value).__name__}'")
        return self.unknown(env, node)

    # Python's own operators (``operator.add(a, b)`` is ``a + b``), on any two concrete values
    _BINOPS: dict[str, Callable[[object, object], object]] = {
        "Add": operator.add,
        "Subtract": operator.sub,
        "Multiply": operator.mul,
        "Divide": operator.truediv,
        "FloorDivide": operator.floordiv,
        "Modulo": operator.mod,
        "Power": operator.pow,
        "LeftShift": operator.lshift,
        "RightShift": operator.rshift,
        "BitOr": operator.or_,
        "BitAnd": operator.and_,
        "BitXor": operator.xor,
    }

    def _eval_BinaryOperation(self, node: cst.BinaryOperation, env: Env) -> object:
        left = self.eval(node.left, env)
        right = self.eval(node.right, env)
        op = type(node.operator).__name__
        if op == "Add" and isinstance(left, list) and isinstance(right, list):
            return [*left, *right]  # lists of partly-known flags still concatenate
        if op == "Add" and (isinstance(left, (str, Alts)) and isinstance(right, (str, Alts))):
            return self._concat_str(left, right, env, node)
        if not (concrete(left) and concrete(right)) or op not in self._BINOPS:
            return self.unknown(env, node)
        try:
            return self._BINOPS[op](left, right)
        except Exception as err:  # noqa: BLE001 - any Python error is "not knowable"
            if self.strict:
                raise Unresolvable(f"`{env.module.code(node)}` failed: {err}") from err
            return Unknown(env.module.code(node))

    def _eval_Comparison(self, node: cst.Comparison, env: Env) -> bool | Unknown:
        left = self.eval(node.left, env)
        for target in node.comparisons:
            right = self.eval(target.comparator, env)
            op = type(target.operator).__name__
            if op in ("Is", "IsNot") and right is None and isinstance(left, TensorValue):
                # an optional tensor argument: the harness passes every tensor the C++ entry takes
                if op == "Is":
                    return False
                left = right
                continue
            if not (concrete(left) and concrete(right)):
                return self.unknown(env, node)
            try:
                ok = {
                    "Equal": lambda a, b: a == b,
                    "NotEqual": lambda a, b: a != b,
                    "LessThan": lambda a, b: a < b,
                    "LessThanEqual": lambda a, b: a <= b,
                    "GreaterThan": lambda a, b: a > b,
                    "GreaterThanEqual": lambda a, b: a >= b,
                    "In": lambda a, b: a in b,
                    "NotIn": lambda a, b: a not in b,
                    "Is": identical,
                    "IsNot": lambda a, b: not identical(a, b),
                }[op](left, right)
            except Exception as err:  # noqa: BLE001
                if self.strict:
                    raise Unresolvable(f"`{env.module.code(node)}` failed: {err}") from err
                return Unknown(env.module.code(node))
            if not ok:
                return False
            left = right
        return True
