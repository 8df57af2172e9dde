"""The comparison logic of optimize.harness.compare, driven by a pure-Python fake tensor.

compare.py uses only tensor methods and operators, so the fake below exercises
the exact code the GPU worker runs on torch tensors.
"""

from __future__ import annotations

import math

import pytest

from contract.plan import TensorPlan
from optimize.harness import compare


class Fake:
    """A flat list of numbers with a shape and the torch methods compare.py calls."""

    def __init__(self, values, shape=None):
        self.v = list(values)
        self.shape = tuple(shape) if shape is not None else (len(self.v),)

    def _map(self, fn):
        return Fake([fn(x) for x in self.v], self.shape)

    def _zip(self, other, fn):
        if isinstance(other, Fake):
            return Fake([fn(a, b) for a, b in zip(self.v, other.v)], self.shape)
        return Fake([fn(a, other) for a in self.v], self.shape)

    # conversions
    def float(self):
        return self._map(float)

    def double(self):
        return self._map(float)

    def int(self):
        return self._map(int)

    def flatten(self):
        return Fake(self.v, (len(self.v),))

    def __getitem__(self, index):
        return Fake([self.v[index]], ())

    def item(self):
        assert len(self.v) == 1
        return self.v[0]

    # predicates
    def isnan(self):
        return self._map(lambda x: isinstance(x, float) and math.isnan(x))

    def isfinite(self):
        return self._map(lambda x: not (isinstance(x, float) and (math.isnan(x) or math.isinf(x))))

    def abs(self):
        return self._map(abs)

    def where(self, cond, other):
        return Fake([a if c else other for a, c in zip(self.v, cond.v)], self.shape)

    def any(self):
        return Fake([any(self.v)], ())

    def all(self):
        return Fake([all(self.v)], ())

    def sum(self):
        return Fake([sum(self.v)], ())

    def max(self):
        return Fake([max(self.v)], ())

    def argmax(self):
        best = max(self.v)
        return Fake([self.v.index(best)], ())

    def sort(self, dim=-1, stable=False):
        """Each row (the last dimension) sorted ascending, NaN last, as torch.sort(...).values."""
        assert dim == -1
        width = self.shape[-1] if self.shape else 1
        rows = [self.v[i : i + width] for i in range(0, len(self.v), width)]

        def key(x):
            return (isinstance(x, float) and math.isnan(x), x if not (isinstance(x, float) and math.isnan(x)) else 0)

        return type("Sorted", (), {"values": Fake([x for row in rows for x in sorted(row, key=key)], self.shape)})()

    # operators
    def __sub__(self, o):
        return self._zip(o, lambda a, b: a - b)

    def __add__(self, o):
        return self._zip(o, lambda a, b: a + b)

    def __mul__(self, o):
        return self._zip(o, lambda a, b: a * b)

    def __gt__(self, o):
        return self._zip(o, lambda a, b: a > b)

    def __eq__(self, o):  # noqa: D105 - elementwise, like torch
        return self._zip(o, lambda a, b: a == b)

    def __ne__(self, o):
        return self._zip(o, lambda a, b: a != b)

    def __and__(self, o):
        return self._zip(o, lambda a, b: bool(a) and bool(b))

    def __or__(self, o):
        return self._zip(o, lambda a, b: bool(a) or bool(b))

    def __invert__(self):
        return self._map(lambda a: not a)

    __hash__ = None


NAN, INF = float("nan"), float("inf")


def judge(expected, got, dtype="bf16", shape=None, **kw):
    shape = shape or (len(expected),)
    return compare.compare_tensor("out", Fake(expected, shape), Fake(got, shape), dtype, shape=shape, **kw)


def test_identical_outputs_pass_with_zero_error_and_bitwise_report():
    bits = Fake([1, 2, 3])
    v = judge([1.0, -2.0, 0.5], [1.0, -2.0, 0.5], expected_bits=bits, got_bits=Fake([1, 2, 3]))
    assert v.ok and v.bad == 0 and v.max_abs_err == 0.0 and v.bitwise_equal is True


def test_bitwise_difference_is_reported_but_not_required():
    v = judge([1.0, 2.0], [1.0, 2.0 * (1 + 2**-9)], expected_bits=Fake([5, 6]), got_bits=Fake([5, 7]))
    assert v.ok and v.bitwise_equal is False and v.max_abs_err == pytest.approx(2.0 * 2**-9)


def test_tolerance_boundary_bf16_two_ulps():
    rtol = compare.TOLERANCES["bf16"].rtol
    assert judge([1.0], [1.0 + 0.99 * rtol]).ok
    v = judge([1.0], [1.0 + 1.5 * rtol])
    assert not v.ok and "tolerance" in v.reason and v.counts["tolerance"] == 1


def test_fp16_is_stricter_than_bf16_and_fp32_stricter_still():
    assert judge([1.0], [1.004], dtype="bf16").ok
    assert not judge([1.0], [1.004], dtype="fp16").ok
    assert judge([1.0], [1.00002], dtype="fp32").ok
    assert not judge([1.0], [1.0001], dtype="fp32").ok


def test_failure_reason_names_tensor_element_expected_and_got():
    expected = [0.0] * 6
    got = [0.0] * 6
    got[4] = 3.0  # element [1, 1] of a 2x3 tensor
    v = judge(expected, got, shape=(2, 3))
    assert not v.ok
    assert "out[1, 1]" in v.reason and "= 3" in v.reason and "expected 0" in v.reason
    assert "1 of 6 elements fail" in v.reason


def test_unwritten_element_is_reported_as_never_written_before_anything_else():
    not_written = Fake([False, True, False])
    v = judge([1.0, 2.0, 3.0], [1.0, NAN, 9.0], not_written=not_written, expected_not_written=Fake([False] * 3))
    assert not v.ok and "out[1] was never written" in v.reason
    assert v.counts == {"never written": 1, "non-finite": 0, "non-finite mismatch": 0, "tolerance": 1}


def test_nan_where_baseline_is_finite_fails_as_non_finite():
    v = judge([1.0, 2.0], [1.0, NAN], not_written=Fake([False, False]))
    assert not v.ok and "is nan where the baseline is finite" in v.reason


def test_inf_where_baseline_is_finite_fails():
    v = judge([1.0, 2.0], [INF, 2.0])
    assert not v.ok and "out[0] is inf" in v.reason


def test_matching_non_finite_values_pass_and_mismatches_fail():
    assert judge([INF, NAN, -INF], [INF, NAN, -INF]).ok
    v = judge([INF, 1.0], [-INF, 1.0])
    assert not v.ok and "non-finite mismatch" in v.reason
    v = judge([NAN, 1.0], [0.0, 1.0])
    assert not v.ok and "the baseline gives nan" in v.reason


def test_elements_the_baseline_left_unwritten_are_not_judged():
    v = judge([1.0, NAN], [1.0, 5.0], not_written=Fake([False, False]), expected_not_written=Fake([False, True]))
    assert v.ok


def test_tiny_absolute_differences_under_float32_normal_pass():
    assert judge([0.0], [5e-38]).ok
    assert not judge([0.0], [1e-30]).ok
    assert judge([0.0], [1e-7], dtype="fp16").ok
    assert not judge([0.0], [1e-6], dtype="fp16").ok


def test_a_small_difference_of_large_terms_may_differ_by_float32_ulps_of_the_largest_value():
    # measured on the H200 (2026-12-05): a rope kernel that only reordered its sum of squares; the
    # same tensor holds values up to about 10
    assert judge([-1.92225e-06, 10.0], [-1.96695e-06, 10.0]).ok
    # the floor scales with the tensor: with 1e-3 its largest value, 4.5e-08 is far too much
    assert not judge([-1.92225e-06, 1e-3], [-1.96695e-06, 1e-3]).ok
    # and it is far below a real error (here 1e-4 off at a small value), which names the floor it broke
    v = judge([-1.92225e-06, 10.0], [1e-4, 10.0])
    assert not v.ok and "9.54e-06 + 0.0156*|expected|" in v.reason
    # integers stay exact, whatever their size
    assert not judge([1, 1 << 20], [2, 1 << 20], dtype="int32").ok


def test_integer_outputs_must_match_exactly():
    assert judge([3, 4], [3, 4], dtype="int32").ok
    assert not judge([3, 4], [3, 5], dtype="int32").ok


def test_empty_tensor_is_ok():
    v = compare.compare_tensor("out", Fake([], (0, 4)), Fake([], (0, 4)), "bf16", shape=(0, 4))
    assert v.ok and v.numel == 0


def test_relative_error_and_reference_judgement():
    err, problem = compare.relative_error(Fake([1.0, 2.0, 2.0]), Fake([1.0, 2.0, 2.0 + 3e-3]))
    assert problem == "" and err == pytest.approx(3e-3 / 3.0, rel=1e-3)
    assert compare.judge_reference("out", "bf16", err, None) == ""
    assert "float64 reference" in compare.judge_reference("out", "fp32", err, None)
    # the baseline's own error widens the bound: a candidate no worse than 2x the baseline passes
    assert compare.judge_reference("out", "fp32", err, 0.6e-3) == ""
    err, problem = compare.relative_error(Fake([1.0, NAN]), Fake([1.0, 2.0]))
    assert math.isinf(err) and "element 1 is nan" in problem
    assert "disagrees" in compare.judge_reference("out", "bf16", err, None, problem)


def test_relative_error_ignores_non_finite_reference_and_handles_zero_reference():
    err, _ = compare.relative_error(Fake([1.0, 7.0]), Fake([1.0, INF]))
    assert err == 0.0
    err, _ = compare.relative_error(Fake([0.0, 3e-3]), Fake([0.0, 0.0]))
    assert err == pytest.approx(3e-3)


def _strided_plan():
    # 2 rows of 3, row stride 5 (2 gap elements), 4-element guards
    return TensorPlan(
        name="x", role="input", dtype="fp32", shape=(2, 3), strides=(5, 1), offset=4, storage_numel=4 + 8 + 4
    )


def test_storage_index_is_located_inside_gap_or_guard():
    plan = _strided_plan()
    assert compare.describe_storage_index(plan, 0) == "x's leading guard band (4 elements before element 0)"
    assert compare.describe_storage_index(plan, 4) == "x[0, 0]"
    assert compare.describe_storage_index(plan, 6) == "x[0, 2]"
    assert "stride gap" in compare.describe_storage_index(plan, 7)
    assert compare.describe_storage_index(plan, 9) == "x[1, 0]"
    assert "trailing guard band" in compare.describe_storage_index(plan, 14)


def test_changed_reason_counts_and_shows_bits():
    plan = _strided_plan()
    before = Fake([0] * 16)
    after = Fake([0] * 16)
    after.v[9] = 0x3F80
    changed = before != after
    text = compare.changed_reason(plan, changed, before, after, what="run 1: input x was modified")
    assert text.startswith("run 1: input x was modified: x[1, 0] changed from bits 0x0 to 0x3f80 (1 elements changed)")


def test_unravel_and_formatting():
    assert compare.unravel(7, (2, 2, 3)) == (1, 0, 1)
    assert compare.fmt_index("out", 5, (2, 3)) == "out[1, 2]"
    assert (
        compare.fmt_value(NAN) == "nan"
        and compare.fmt_value(-INF) == "-inf"
        and compare.fmt_value(0.1234567) == "0.123457"
    )


def test_rows_in_no_fixed_order_compare_as_sets_and_still_catch_a_wrong_or_unwritten_value():
    """TensorSpec.order "rows" (topk_transform_paged's indices: two pristine runs differ in order)."""
    shape = (2, 3)

    def rows(expected, got):
        e = compare.in_order(Fake(expected, shape), "rows")
        g = compare.in_order(Fake(got, shape), "rows")
        unwritten = g.isnan() if any(isinstance(x, float) for x in got) else None
        return compare.compare_tensor("idx", e, g, "fp32", shape=shape, not_written=unwritten)

    assert rows([3.0, 1.0, 2.0, 9.0, 8.0, 7.0], [1.0, 2.0, 3.0, 7.0, 9.0, 8.0]).ok, "the same sets, other order"
    assert not judge([3.0, 1.0, 2.0, 9.0, 8.0, 7.0], [1.0, 2.0, 3.0, 7.0, 9.0, 8.0], dtype="fp32", shape=shape).ok
    wrong = rows([3.0, 1.0, 2.0, 9.0, 8.0, 7.0], [1.0, 2.0, 3.0, 7.0, 9.0, 6.0])
    assert not wrong.ok and "tolerance" in wrong.reason, "a value of another row's set"
    moved = rows([3.0, 1.0, 2.0, 9.0, 8.0, 7.0], [1.0, 2.0, 9.0, 7.0, 3.0, 8.0])
    assert not moved.ok, "a value that moved to another row"
    left = rows([3.0, 1.0, 2.0, 9.0, 8.0, 7.0], [1.0, NAN, 3.0, 7.0, 9.0, 8.0])
    assert not left.ok and "never written" in left.reason, "an element left as the poison"
    assert compare.in_order(Fake([2, 1], (2,)), None).v == [2, 1]
    with pytest.raises(ValueError, match="unknown comparison order"):
        compare.in_order(Fake([2, 1], (2,)), "columns")
