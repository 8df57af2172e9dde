"""Is a candidate's output the baseline's output? Typed answers with precise reasons.

The oracle is the baseline kernel run on identical inputs; a PyTorch reference in
float64 (:mod:`optimize.harness.references`) is a second opinion where the
contract names one. This module holds the decision logic only. It is written
against a handful of tensor *methods* (``float``, ``double``, ``isnan``,
``isfinite``, ``abs``, ``where``, ``flatten``, ``int``, ``argmax``, ``any``,
``all``, ``sum``, ``max``, ``item``, ``sort``, comparison and arithmetic operators), never
against ``torch.*`` functions, so the CPU tests drive the very same code with a
small pure-Python fake tensor.

Per-element rule, in this order of precedence (the first category with a failing
element gives the reason):

1. *never written*: the candidate's element still holds the poison bit pattern
   written before the run, and the baseline's does not;
2. *non-finite*: the candidate has NaN/Inf where the baseline is finite;
3. *non-finite mismatch*: the baseline is NaN/Inf and the candidate is not the
   same (NaN for NaN, the same signed Inf for Inf);
4. *tolerance*: both finite and ``|got - expected| > rtol * |expected| + max(atol, floor)``,
   where ``floor = scale_atol * max |expected|`` over the tensor's finite elements.

Tolerances (:data:`TOLERANCES`), per output dtype, and why:

- ``bf16``: rtol 2**-6 (two ulps at the bottom of a binade: bf16 keeps 8
  significant bits). A correct rewrite that only reorders a float32 reduction or
  uses a fast ``expf`` lands within one ulp of the baseline after the final
  rounding; two leaves room for a value that sits on a rounding boundary in
  both. atol 1e-37: only values under float32's smallest normal (1.18e-38)
  may differ absolutely, which is what flush-to-zero builds do.
- ``fp16``: rtol 2**-9 (two ulps; 11 significant bits); atol 1.2e-7, two steps
  of fp16's subnormal spacing (5.96e-8), for results that underflow.
- ``fp32``: rtol 2**-15 (about 3e-5): float32 results are not rounded to a
  narrow type at the end, so reordered sums over up to 16384 elements and
  fast-math intrinsics (a few ulps each) show; 3e-5 is two orders of magnitude
  above that and still far below any real bug. atol 1e-37 as for bf16.
- ``fp8e4m3`` (quantized outputs): rtol 2**-3, one ulp at the bottom of a binade
  (4 significant bits): a quantizer whose scale is computed in another order may
  land one step away; atol 2**-9, the smallest subnormal.

Why the scaled floor (``scale_atol`` 2**-20, 16 float32 ulps of the tensor's largest value, for
every float dtype): a value computed in float32 as the *difference* of two larger terms carries an
absolute error of a few float32 ulps of those terms, and after rounding to bf16 that is no longer
within one ulp of the small result. Measured on the H200 (2026-12-05): a rope kernel that only
reordered its sum of squares gave ``n0*cos - n1*sin = -1.967e-06`` where the baseline gave
``-1.922e-06`` (|diff| 4.5e-08, in a tensor of normalized heads), and GELU written as ``x / (1 + exp(-2u))``
differed from the baseline's ``x * 0.5 * (1 + tanhf(u))`` by 4.5e-08 at -9.5e-07, where the
baseline's own ``1 + tanh`` cancels. Both were rejected by the relative rule alone. The floor is
relative to the tensor, so it scales with the data, and it is far below any real bug: a skipped
rope, a wrong sign, ``__tanhf``'s 2**-11 error in GELU (7e-4 at x = -3) all exceed it by orders of
magnitude.

Bitwise equality is reported separately (``bitwise_equal``), never required.

Against the float64 reference the measure is normwise,
``||impl - ref|| / ||ref||`` over the elements where the reference is finite
(METHOD.md's yardstick): bf16 1e-2, fp16 2e-3, fp32 2e-5. A candidate passes
if its error is within that bound *or* within twice the baseline's own error
(the baseline may legitimately round differently from the reference; the
candidate is only asked to be no worse).

What must stay true: every element of every output and inout tensor is judged
(no sampling), and a verdict always names the tensor, the element index, the
expected and the actual value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from contract.dtypes import FLOAT_DTYPES
from optimize.harness import inputs

if TYPE_CHECKING:
    import torch

    from contract.plan import TensorPlan


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    ref_rel: float  # normwise relative error allowed against the float64 reference
    scale_atol: float = 0.0  # absolute floor, as a fraction of the tensor's largest finite |expected|


# 16 float32 ulps of the largest value: the absolute error of a float32 difference of large terms
FLOAT32_FLOOR = 2.0**-20

TOLERANCES: dict[str, Tolerance] = {
    "bf16": Tolerance(rtol=2.0**-6, atol=1e-37, ref_rel=1e-2, scale_atol=FLOAT32_FLOOR),
    "fp16": Tolerance(rtol=2.0**-9, atol=1.2e-7, ref_rel=2e-3, scale_atol=FLOAT32_FLOOR),
    "fp32": Tolerance(rtol=2.0**-15, atol=1e-37, ref_rel=2e-5, scale_atol=FLOAT32_FLOOR),
    "fp64": Tolerance(rtol=1e-12, atol=1e-300, ref_rel=1e-12, scale_atol=2.0**-48),
    "fp8e4m3": Tolerance(rtol=2.0**-3, atol=2.0**-9, ref_rel=1e-1, scale_atol=FLOAT32_FLOOR),
}
# Integer outputs (indices, counts) must match exactly.
EXACT = Tolerance(rtol=0.0, atol=0.0, ref_rel=0.0)


def tolerance(dtype: str) -> Tolerance:
    return TOLERANCES.get(dtype, EXACT)


@dataclass(frozen=True)
class TensorVerdict:
    """The judgement of one output tensor."""

    name: str
    ok: bool
    reason: str = ""
    bad: int = 0  # elements failing any rule
    numel: int = 0
    max_abs_err: float | None = None  # over elements finite in both
    bitwise_equal: bool | None = None
    counts: dict[str, int] = field(default_factory=dict)  # per failure category


def unravel(index: int, shape: Sequence[int]) -> tuple[int, ...]:
    """Flat (row-major, logical) index -> multi-index."""
    out = []
    for size in reversed(tuple(shape)):
        size = max(int(size), 1)
        out.append(index % size)
        index //= size
    return tuple(reversed(out))


def fmt_index(name: str, index: int, shape: Sequence[int]) -> str:
    return f"{name}[{', '.join(str(i) for i in unravel(index, shape))}]"


def fmt_value(value: float) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def first_index(mask: torch.Tensor) -> int:
    """Flat index of the first True element (the caller knows one exists)."""
    return int(mask.flatten().int().argmax().item())


def same_bits(a: torch.Tensor, b: torch.Tensor, dtype: str) -> bool:
    """Whether two storages of ``dtype`` hold the same bits, compared through the integer view of
    that width (:func:`optimize.harness.inputs.bits_dtype`). ``torch.equal`` is not that for floats:
    NaN != NaN, so two runs that leave the same NaN (the poison in a storage's gaps, a NaN the op
    passes through) would read as different, and a repeat check would call a deterministic kernel
    non-repeatable and stop asking the candidate to repeat."""
    import torch

    bits = inputs.bits_dtype(dtype)
    return bool(torch.equal(a.view(bits), b.view(bits)))


def count_true(mask: torch.Tensor) -> int:
    return int(mask.sum().item())


def _elem(tensor: torch.Tensor, index: int) -> float:
    return float(tensor.flatten()[index].item())


def in_order(tensor: torch.Tensor, order: str | None) -> torch.Tensor:
    """``tensor`` as it is compared under its contract's ``order`` (:attr:`TensorSpec.order`).

    None: unchanged. ``"rows"``: sorted along the last dimension (NaN and the NaN poison
    last), for outputs whose rows are sets in no fixed order. Both sides go through this
    before :func:`compare_tensor`, and the poison masks are taken after it, so an element
    left unwritten still shows (its row's multiset differs) and the values must still
    match one for one.
    """
    if order is None or len(tensor.shape) == 0:
        return tensor
    if order != "rows":
        raise ValueError(f"unknown comparison order {order!r} (known: rows)")
    return tensor.sort(dim=-1, stable=True).values


def absolute_floor(magnitude: torch.Tensor, finite: torch.Tensor, tol: Tolerance) -> float:
    """``max(atol, scale_atol * max |expected|)`` over the finite elements (the module docstring says why);
    ``magnitude`` is ``|expected|``, which the caller's relative limit reads too. With no finite
    element the largest is 0, so the floor is ``atol``."""
    if not tol.scale_atol:
        return tol.atol
    largest = float(magnitude.where(finite, 0.0).max().item())
    return max(tol.atol, tol.scale_atol * largest)


def compare_tensor(
    name: str,
    expected: torch.Tensor,
    got: torch.Tensor,
    dtype: str,
    *,
    shape: Sequence[int],
    not_written: torch.Tensor | None = None,
    expected_not_written: torch.Tensor | None = None,
    expected_bits: torch.Tensor | None = None,
    got_bits: torch.Tensor | None = None,
    tol: Tolerance | None = None,
) -> TensorVerdict:
    """Judge one output tensor of the candidate (``got``) against the baseline's (``expected``).

    ``not_written`` / ``expected_not_written``: boolean masks, True where the
    candidate's / baseline's element still holds the poison bit pattern.
    ``expected_bits`` / ``got_bits``: integer views for the bitwise report.
    """
    tol = tol or tolerance(dtype)
    numel = 1
    for size in shape:
        numel *= int(size)
    if numel == 0:
        return TensorVerdict(name=name, ok=True, numel=0, bitwise_equal=True)
    # bf16/fp16/fp32/fp8 widen exactly to float32; fp64 and integers go to float64
    wide = (lambda t: t.float()) if dtype in FLOAT_DTYPES and dtype != "fp64" else (lambda t: t.double())
    e, g = wide(expected), wide(got)
    e_fin, g_fin = e.isfinite(), g.isfinite()
    e_nan, g_nan = e.isnan(), g.isnan()

    judged = ~expected_not_written if expected_not_written is not None else None

    def only(mask: torch.Tensor) -> torch.Tensor:
        return mask if judged is None else (mask & judged)

    categories: list[tuple[str, torch.Tensor]] = []
    unwritten = None
    if not_written is not None:
        unwritten = only(not_written)
        categories.append(("never written", unwritten))
    nonfinite = e_fin & ~g_fin
    if unwritten is not None:
        nonfinite = nonfinite & ~unwritten
    categories.append(("non-finite", only(nonfinite)))
    same_nonfinite = (e_nan & g_nan) | (e == g)
    categories.append(("non-finite mismatch", only(~e_fin & ~same_nonfinite)))
    both = e_fin & g_fin
    diff = (g - e).abs()
    magnitude = e.abs()
    atol = absolute_floor(magnitude, e_fin, tol)
    limit = magnitude * tol.rtol + atol
    categories.append(("tolerance", only(both & (diff > limit))))

    counts = {label: count_true(mask) for label, mask in categories}
    bad_mask = None
    for _, mask in categories:
        bad_mask = mask if bad_mask is None else (bad_mask | mask)
    bad = count_true(bad_mask)
    max_abs = float(diff.where(both, 0.0).max().item()) if count_true(both) else None
    bitwise = None
    if expected_bits is not None and got_bits is not None:
        bitwise = bool((expected_bits == got_bits).all().item())
    if bad == 0:
        return TensorVerdict(name=name, ok=True, numel=numel, max_abs_err=max_abs, bitwise_equal=bitwise, counts=counts)
    label, mask = next((label, mask) for label, mask in categories if counts[label])
    index = first_index(mask)
    where = fmt_index(name, index, shape)
    want = _elem(e, index)
    have = _elem(g, index)
    if label == "never written":
        detail = (
            f"{where} was never written (still holds the NaN poison written before the run); expected {fmt_value(want)}"
        )
    elif label == "non-finite":
        detail = f"{where} is {fmt_value(have)} where the baseline is finite ({fmt_value(want)})"
    elif label == "non-finite mismatch":
        detail = f"{where} is {fmt_value(have)}, the baseline gives {fmt_value(want)}"
    else:
        allowed = abs(want) * tol.rtol + atol
        detail = (
            f"{where} = {fmt_value(have)}, expected {fmt_value(want)} "
            f"(|diff| {abs(have - want):.3g} > {allowed:.3g} = {atol:.3g} + {tol.rtol:.3g}*|expected|)"
        )
    summary = ", ".join(f"{counts[k]} {k}" for k, _ in categories if counts[k])
    reason = f"{detail}; {bad} of {numel} elements fail ({summary})"
    return TensorVerdict(
        name=name,
        ok=False,
        reason=reason,
        bad=bad,
        numel=numel,
        max_abs_err=max_abs,
        bitwise_equal=bitwise,
        counts=counts,
    )


def relative_error(got: torch.Tensor, ref: torch.Tensor) -> tuple[float, str]:
    """``||got - ref|| / ||ref||`` in float64 over elements where ``ref`` is finite.

    Returns (error, problem): problem is non-empty when ``got`` is non-finite
    where the reference is finite (then the error is ``inf``). An all-zero
    reference gives the absolute norm of the difference.
    """
    g, r = got.double(), ref.double()
    r_fin = r.isfinite()
    bad = r_fin & ~g.isfinite()
    if bool(bad.any().item()):
        index = first_index(bad)
        return (
            math.inf,
            f"element {index} is {fmt_value(_elem(g, index))} where the reference is {fmt_value(_elem(r, index))}",
        )
    diff = (g - r).where(r_fin, 0.0)
    rr = r.where(r_fin, 0.0)
    num = math.sqrt(float((diff * diff).sum().item()))
    den = math.sqrt(float((rr * rr).sum().item()))
    return (num / den if den > 0 else num), ""


def judge_reference(
    name: str, dtype: str, err: float, baseline_err: float | None, problem: str = "", tol: Tolerance | None = None
) -> str:
    """Empty string when the candidate's reference error is acceptable, else the reason."""
    tol = tol or tolerance(dtype)
    if problem:
        return f"{name} disagrees with the float64 reference: {problem}"
    bound = tol.ref_rel
    if baseline_err is not None and math.isfinite(baseline_err):
        bound = max(bound, 2.0 * baseline_err)
    if err > bound:
        base = f"; the baseline's is {baseline_err:.3g}" if baseline_err is not None else ""
        return f"{name}: ||out - ref|| / ||ref|| = {err:.3g} > {bound:.3g} against the float64 reference{base}"
    return ""


def describe_storage_index(plan: TensorPlan, index: int) -> str:
    """Where a flat storage index falls for a TensorPlan: inside (as [i, j]), a guard band or a stride gap."""
    offset = plan.offset
    if index < offset:
        return f"{plan.name}'s leading guard band ({offset - index} elements before element 0)"
    rel = index - offset
    coords = []
    order = sorted(range(len(plan.shape)), key=lambda d: -plan.strides[d])
    for position, dim in enumerate(order):
        stride = plan.strides[dim]
        coord = rel // stride if stride else 0
        if plan.shape[dim] and coord >= plan.shape[dim]:
            if position == 0:
                return f"{plan.name}'s trailing guard band (storage element {index})"
            return f"a stride gap of {plan.name} (storage element {index})"
        coords.append((dim, coord))
        rel -= coord * stride
    if rel != 0:
        return f"a stride gap of {plan.name} (storage element {index})"
    coords.sort()
    return f"{plan.name}[{', '.join(str(c) for _, c in coords)}]"


def changed_reason(
    plan: TensorPlan, changed_mask: torch.Tensor, before: torch.Tensor, after: torch.Tensor, *, what: str
) -> str:
    """Reason text for bytes that changed where they must not (inputs, guards, gaps)."""
    index = first_index(changed_mask)
    count = count_true(changed_mask)
    mask = (1 << (8 * plan.itemsize)) - 1  # show the bit pattern unsigned, as stored
    was = int(before.flatten()[index].item()) & mask
    now = int(after.flatten()[index].item()) & mask
    return f"{what}: {describe_storage_index(plan, index)} changed from bits {was:#x} to {now:#x} ({count} elements changed)"


def timed_reason(t: TensorPlan, expected_storage: torch.Tensor, got_storage: torch.Tensor, *, normwise: bool) -> str:
    """Why one tensor of one timed buffer set is wrong, or "" (see ``optimize.harness.worker.Timer._validate``)."""
    exp_view = in_order(inputs.view_of(expected_storage, t), t.order)
    got_view = in_order(inputs.view_of(got_storage, t), t.order)
    if t.role == "inout" and normwise:
        err, problem = relative_error(got_view, exp_view)
        if problem:
            return f"{t.name}: {problem.replace('the reference', 'the baseline')}"
        bound = tolerance(t.dtype).ref_rel
        if err > bound:
            return f"{t.name}: ||candidate - baseline|| / ||baseline|| = {err:.3g} > {bound:.3g}"
        return ""
    bits_t = inputs.bits_dtype(t.dtype)
    poisoned = t.role == "output"
    poison = inputs.poison_value(t.dtype)
    verdict = compare_tensor(
        t.name,
        exp_view,
        got_view,
        t.dtype,
        shape=t.shape,
        not_written=(got_view.view(bits_t) == poison) if poisoned else None,
        expected_not_written=(exp_view.view(bits_t) == poison) if poisoned else None,
    )
    return "" if verdict.ok else verdict.reason
