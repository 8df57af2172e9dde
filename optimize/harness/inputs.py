"""Arguments for a kernel call, filled on the GPU: the torch half of planning.

The planning half (sizes, synthetic and held-out shapes, call plans) is the
:mod:`contract` package, pure Python; this module turns a
:class:`contract.plan.CallPlan` into device buffers and value "images" (a whole
storage's contents, guard bands and stride gaps included), so that a case can be
replayed on the baseline and the candidate with exactly the same bytes.

What must stay true:
- Never zeros by default: the default distributions are normal/uniform; the
  "edge" distribution mixes zeros in with large, tiny and negative values, and
  the large magnitudes are chosen so the *baseline* stays finite (see
  :data:`LARGE`), so that any Inf/NaN a candidate produces is its own.
- Outputs start as the poison of :mod:`contract.dtypes` (one pattern per dtype).
- torch is imported inside each function: importing this module needs no torch.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, Any

from contract import dtypes
from contract.dtypes import FINITE_MAX
from contract.plan import CallPlan, TensorPlan, distinct, offsets, require_fillable
from optimize.harness.protocol import Distribution

if TYPE_CHECKING:
    import torch

# Edge-distribution magnitudes per dtype. LARGE is the largest magnitude for which
# the default ops' baselines stay finite: fp16 silu(x)*y <= 65504 needs |x|,|y| <~ 250
# and residual+input must not overflow; bf16/fp32 share fp32's exponent range, and
# an fp32 sum of squares over 16384 elements of 1e16 is 1.6e36 < 3.4e38.
LARGE: dict[str, float] = {"fp16": 192.0, "bf16": 1e16, "fp32": 1e16, "fp64": 1e16, "fp8e4m3": 224.0}
# TINY stays a normal number (no subnormal inputs: flush-to-zero differences between
# a fast-math and a precise build would otherwise dominate the comparison).
TINY: dict[str, float] = {"fp16": 1e-4, "bf16": 1e-20, "fp32": 1e-20, "fp64": 1e-20, "fp8e4m3": 2.0**-6}
poison_value = dtypes.poison_value  # the poison as the signed integer the bit view holds


def torch_dtype(short: str) -> torch.dtype:
    """The torch dtype of a short dtype name, by the attribute :mod:`contract.dtypes` names."""
    import torch

    dtype: torch.dtype = getattr(torch, dtypes.torch_name(short))
    return dtype


def bits_dtype(short: str) -> torch.dtype:
    """The integer dtype of the same width, for bit-exact views."""
    import torch

    dtype: torch.dtype = getattr(torch, dtypes.bits_torch_name(short))
    return dtype


def view_of(storage, plan: TensorPlan):
    """The logical tensor inside a flat storage."""
    return storage.as_strided(plan.shape, plan.strides, plan.offset)


def _row_split(shape: tuple[int, ...]) -> tuple[int, int]:
    if not shape:
        return 1, 1
    rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
    return rows, shape[-1]


def _finite(values, dtype: str):
    """float32 values clamped into ``dtype``'s finite range where its conversion would make NaN."""
    limit = FINITE_MAX.get(dtype)
    return values if limit is None else values.clamp(-limit, limit)


def logical_values(plan: TensorPlan, distribution: Distribution, gen, device):
    """Values for one input tensor, contiguous, in the plan's dtype."""
    import torch

    shape = plan.shape
    if not plan.is_float:
        if plan.dtype == "bool":
            return torch.randint(0, 2, shape, generator=gen, device=device).to(torch.bool)
        require_fillable(plan)
        # Only inputs get values, and require_fillable rejects an integer input without a range.
        assert plan.value_range is not None
        lo, hi = int(plan.value_range[0]), int(plan.value_range[1])
        if plan.structure in ("offsets", "distinct"):
            seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen, device=device))
            draw = offsets if plan.structure == "offsets" else distinct
            values = draw(plan.numel, lo, hi, random.Random(seed))
            return torch.tensor(values, device=device, dtype=torch_dtype(plan.dtype)).reshape(shape)
        return torch.randint(lo, hi + 1, shape, generator=gen, device=device, dtype=torch_dtype(plan.dtype))
    out_dtype = torch_dtype(plan.dtype)
    if plan.numel == 0:
        return torch.empty(shape, dtype=out_dtype, device=device)
    if distribution == "normal":
        values = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    elif distribution == "uniform":
        values = torch.rand(shape, generator=gen, device=device, dtype=torch.float32) * 6.0 - 3.0
    elif distribution == "edge":
        values = _edge_values(plan, gen, device)
    else:  # pragma: no cover - Literal guards it
        raise ValueError(distribution)
    if plan.value_range is not None:
        values = values.clamp(float(plan.value_range[0]), float(plan.value_range[1]))
    return _finite(values, plan.dtype).to(out_dtype)


def _edge_values(plan: TensorPlan, gen, device):
    """Rows of zeros, of tiny, of large, of negative values, and rows mixing all of them.

    Whole-row modes matter for row-wise kernels (a norm over a zero row exercises
    eps; a row of large values exercises overflow in a sum of squares); the mixed
    rows put every kind next to each other within one vector load.
    """
    import torch

    rows, width = _row_split(plan.shape)
    large, tiny = LARGE[plan.dtype], TINY[plan.dtype]
    normal = torch.randn((rows, width), generator=gen, device=device, dtype=torch.float32)
    sign = torch.where(torch.rand((rows, width), generator=gen, device=device) < 0.5, -1.0, 1.0)
    mag = torch.rand((rows, width), generator=gen, device=device, dtype=torch.float32)
    kind = torch.rand((rows, width), generator=gen, device=device)
    mixed = torch.where(kind < 0.15, torch.zeros_like(normal), normal)
    mixed = torch.where((kind >= 0.15) & (kind < 0.30), sign * tiny * (1 + 7 * mag), mixed)
    mixed = torch.where((kind >= 0.30) & (kind < 0.40), sign * large * (0.5 + 0.5 * mag), mixed)
    mixed = torch.where((kind >= 0.40) & (kind < 0.55), -(normal.abs() * 4 + 1), mixed)
    if rows == 1:
        return mixed.reshape(plan.shape)
    mode = torch.randint(0, 5, (rows, 1), generator=gen, device=device)
    out = mixed
    out = torch.where(mode == 1, torch.zeros_like(normal), out)
    out = torch.where(mode == 2, sign * tiny * (1 + 7 * mag), out)
    out = torch.where(mode == 3, sign * large * (0.5 + 0.5 * mag), out)
    out = torch.where(mode == 4, -(normal.abs() * 4 + 0.01), out)
    return out.reshape(plan.shape)


def input_image(plan: TensorPlan, distribution: Distribution, gen, device):
    """A whole storage for an input/inout tensor: noise in guards and gaps, values inside."""
    import torch

    dtype = torch_dtype(plan.dtype)
    if plan.is_float:
        image = _finite(
            torch.randn(plan.storage_numel, generator=gen, device=device, dtype=torch.float32) * 1e3, plan.dtype
        ).to(dtype)
    elif plan.dtype == "bool":
        image = torch.zeros(plan.storage_numel, device=device, dtype=dtype)
    else:
        image = torch.randint(-1000, 1000, (plan.storage_numel,), generator=gen, device=device).to(dtype)
    view_of(image, plan).copy_(logical_values(plan, distribution, gen, device))
    return image


def poison_image(plan: TensorPlan, device):
    """A whole storage holding the poison bit pattern everywhere."""
    import torch

    image = torch.empty(plan.storage_numel, device=device, dtype=torch_dtype(plan.dtype))
    image.view(bits_dtype(plan.dtype)).fill_(poison_value(plan.dtype))
    return image


def garbage_image(plan: TensorPlan, gen, device):
    """A whole storage of finite random values: what an output holds before a second run.

    Unlike the NaN poison, finite garbage survives arithmetic: a kernel that reads
    its output before writing it (or skips some of it) yields wrong finite values.
    """
    import torch

    dtype = torch_dtype(plan.dtype)
    if plan.is_float:
        return _finite(
            torch.randn(plan.storage_numel, generator=gen, device=device, dtype=torch.float32) * 777.0, plan.dtype
        ).to(dtype)
    if plan.dtype == "bool":
        return torch.ones(plan.storage_numel, device=device, dtype=dtype)
    return torch.randint(-999, 999, (plan.storage_numel,), generator=gen, device=device).to(dtype)


def decoy_image(image, plan: TensorPlan):
    """What an input holds until the real values are copied in: the negated values.

    Cheap (one pass, no RNG) and always different where it matters: every op of
    interest gives a different result on -x than on x for non-zero rows. Integer
    (index) tensors keep their values, a wrong index being no test of ordering.
    """
    if not plan.is_float:
        return image.clone()
    if plan.dtype in FINITE_MAX:  # torch has no negation for float8: through float32, exactly
        return (-image.float()).to(image.dtype)
    return -image


class Buffers:
    """Device storages for one CallPlan, and the argument list that calls a kernel on them."""

    def __init__(self, plan: CallPlan, device) -> None:
        import torch

        self.plan = plan
        self.device = device
        self.storages = {
            t.name: torch.empty(t.storage_numel, dtype=torch_dtype(t.dtype), device=device) for t in plan.tensors
        }
        self.views = {t.name: view_of(self.storages[t.name], t) for t in plan.tensors}

    def args(self, inputs_from: Buffers | None = None) -> list[Any]:
        """The call's arguments; with ``inputs_from``, its ``input`` tensors are that set's (the rotation)."""
        other = inputs_from or self
        return [
            (other if a.role == "input" else self).views[a.name] if isinstance(a, TensorPlan) else a
            for a in self.plan.args
        ]

    def load(self, images: dict[str, Any]) -> None:
        """Copy whole-storage images into the buffers (on the current stream)."""
        for name, image in images.items():
            self.storages[name].copy_(image)

    def nbytes(self) -> int:
        return sum(s.numel() * s.element_size() for s in self.storages.values())


def second_inputs(plan: CallPlan, distribution: Distribution, gen, device) -> dict[str, Any]:
    """A second image of the plan's ``input`` tensors, drawn afresh (the timing rotation's)."""
    return {t.name: input_image(t, distribution, gen, device) for t in plan.tensors if t.role == "input"}


def load_sets(bufsets: list[Buffers], images: dict[str, Any], second: dict[str, Any]) -> None:
    """Every set from ``images``; the odd sets' inputs from ``second`` (``optimize.harness.timing.rotation``)."""
    for i, bufs in enumerate(bufsets):
        bufs.load(images)
        if i % 2:
            bufs.load(second)


def make_images(plan: CallPlan, distribution: Distribution, gen, device, *, outputs: str = "poison") -> dict[str, Any]:
    """Images for every tensor: inputs/inout get values, outputs and scratch get poison or garbage."""
    images = {}
    for t in plan.tensors:
        if not t.filled:
            images[t.name] = poison_image(t, device) if outputs == "poison" else garbage_image(t, gen, device)
        else:
            images[t.name] = input_image(t, distribution, gen, device)
    return images
