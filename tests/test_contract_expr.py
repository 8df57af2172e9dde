"""The one restricted-expression language (contract.expr): its two grammars accept and
refuse what the shape entries and the constraints did before they shared it."""

from __future__ import annotations

import pytest

from contract import constraints, expr
from contract.errors import ExprError


def value(text: str, env: dict[str, int | bool], grammar: expr.Grammar = expr.CONDITION) -> int | bool:
    return expr.evaluate(expr.parse(text, grammar), env, exact=grammar is expr.ARITHMETIC)


def test_conditions_evaluate_as_python_would():
    env = {"a": 6, "b": 4, "flag": True}
    for text in [
        "(a % b) == 2",
        "a // b",
        "a << 2",
        "a >> 1",
        "-a + +b",
        "not flag",
        "a if flag else b",
        "(a == 3) or (a == 6)",
        "1 < b < a",
        "a and b",
        "0 or b",
        "a != b",
        "True + 1",
    ]:
        assert value(text, env) == eval(text, {"__builtins__": {}}, dict(env))  # noqa: S307 - the oracle


@pytest.mark.parametrize("text", ["a / 2", "min(a, 2)", "a.b", "a[0]", "'x' == a", "1.5 < a", "lambda: 1", "(a := 2)"])
def test_conditions_refuse_what_the_grammar_does_not_name(text):
    with pytest.raises(ExprError) as err:
        expr.parse(text, expr.CONDITION)
    assert not err.value.undefined
    assert constraints.holds(text, {"a": 1}) is None  # never evaluated


@pytest.mark.parametrize("text", ["a < 2 <", "import os", ""])
def test_text_that_is_not_python_is_refused_as_syntax(text):
    with pytest.raises(ExprError) as err:
        expr.parse(text, expr.ARITHMETIC)
    assert err.value.syntax


def test_undefined_values_are_told_apart_from_refused_text():
    for text, env in [("a % b", {"a": 1, "b": 0}), ("a // b", {"a": 1, "b": 0}), ("c + 1", {}), ("1 << a", {"a": -1})]:
        with pytest.raises(ExprError) as err:
            value(text, env)
        assert err.value.undefined
    assert constraints.holds("(a % b) == 0", {"a": 1, "b": 0}) is None


def test_arithmetic_divides_exactly_floors_with_floor_division_and_calls_min_max_only():
    assert value("a / 2", {"a": 8}, expr.ARITHMETIC) == 4
    assert value("a // 3", {"a": 8}, expr.ARITHMETIC) == 2
    with pytest.raises(ExprError, match="inexactly"):
        value("a / 3", {"a": 8}, expr.ARITHMETIC)
    assert value("min(a, 128) - max(1, 2)", {"a": 8}, expr.ARITHMETIC) == 6
    for refused in ["pow(a, 2)", "min(a, key=1)", "a < 2", "True", "a and 1"]:
        with pytest.raises(ExprError):
            expr.parse(refused, expr.ARITHMETIC)
    assert expr.names(expr.parse("min(capacity, 128) - 1", expr.ARITHMETIC)) == {"capacity"}
    assert expr.int_literals(expr.parse("(a % 64 == 0) and a > 0 and b < 8", expr.CONDITION)) == (8, 64)
