"""Call plans: every argument of one kernel call, laid out, before any GPU is touched.

:func:`plan_call` turns a contract and one case's sizes into a :class:`CallPlan`: per
tensor its dtype, shape, strides (contiguous, or padded rows where a stride is free)
and a flat storage with guard bands on both sides; per scalar its value
(:func:`scalar_value`). The torch half (:mod:`optimize.harness.inputs`) fills such a
plan on the GPU; integrate calls SGLang's op with it.

Why guard bands and gaps: an output's guards and gaps are filled with the poison bit
pattern and must still hold it afterwards (a write outside the tensor is caught); an
input's hold random finite noise, so a kernel reading outside its tensor computes
visibly wrong values instead of reading zeros.

What must stay true:
- Pure Python, no torch: the sweep asks "can the worker call this contract"
  (:func:`plan_call` + :func:`require_fillable`) on the CPU.
- Storage offsets keep the data pointer 256-byte aligned (:data:`GUARD_BYTES`), padded
  rows 64-byte aligned (:data:`STRIDE_PAD_BYTES`).
- The value generators (:func:`offsets`, :func:`distinct`) are pure and seeded by the
  caller: a case is reproduced from its seed.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Literal

from contract import dtypes
from contract.dtypes import FLOAT_DTYPES, ITEMSIZE
from contract.errors import ContractError
from contract.sizes import eval_expr, expr_symbols, free_stride_symbols, resolved_range
from pipeline.records import Contract

Layout = Literal["contiguous", "strided"]
ScalarValue = int | float | bool | str

# Bytes of guard band on each side of every tensor's storage. 256 keeps the data
# pointer 256-byte aligned inside a torch allocation (which is 512-aligned), so
# 16- and 32-byte vector loads stay legal.
GUARD_BYTES = 256
# Padding unit of a non-contiguous row stride, in bytes: keeps rows 64-byte
# aligned, which every vectorised kernel in SGLang accepts.
STRIDE_PAD_BYTES = 64


def canonical_dtype(name: str, case_dtype: str) -> str:
    """A TensorSpec dtype ("T" = the instantiation's) in the short spelling of
    :mod:`contract.dtypes`.

    A union (``bfloat16|float32``: the kernel accepts either) is the instantiation's
    dtype when it is one of them, else the first the harness can fill.
    """
    if name == "T":
        return case_dtype
    options = [dtypes.short_name(part) or part.strip() for part in str(name).split("|")]
    if case_dtype in options:
        return case_dtype
    short = next((o for o in options if o in ITEMSIZE), None)
    if short is None:
        raise ContractError(f"tensor dtype {name!r} is not one the harness can fill", fix="fix the contract")
    return short


#: The roles (TensorSpec.role) whose values the harness draws before a call, and those whose contents
#: after it are compared with the baseline's; a scratch tensor is in neither.
FILLED_ROLES = ("input", "inout")
JUDGED_ROLES = ("output", "inout")


@dataclass(frozen=True)
class TensorPlan:
    """Where one tensor argument lives inside its flat storage."""

    name: str
    role: str  # input | output | inout | scratch (TensorSpec.role)
    dtype: str  # short spelling: bf16, fp16, fp32, int32, ...
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    offset: int  # elements before the first one (the leading guard band)
    storage_numel: int
    value_range: tuple[float, float] | None = None
    structure: str | None = None  # TensorSpec.structure
    order: str | None = None  # TensorSpec.order

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the logical elements (what the kernel must move), not of the storage."""
        return self.numel * self.itemsize

    @property
    def contiguous(self) -> bool:
        expect = 1
        for size, stride in zip(reversed(self.shape), reversed(self.strides)):
            if size != 1 and stride != expect:
                return False
            expect *= size
        return True

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES

    @property
    def filled(self) -> bool:
        """Whether the call reads values the harness draws (input, inout); the others start as poison."""
        return self.role in FILLED_ROLES

    @property
    def judged(self) -> bool:
        """Whether the contents after the call are compared with the baseline's (output, inout)."""
        return self.role in JUDGED_ROLES


@dataclass(frozen=True)
class CallPlan:
    """Every argument of one call, in call order: TensorPlans and plain scalar values."""

    args: tuple[TensorPlan | ScalarValue, ...]
    sizes: dict[str, int] = field(default_factory=dict)
    strides_chosen: dict[str, int] = field(default_factory=dict)

    @property
    def tensors(self) -> list[TensorPlan]:
        return [a for a in self.args if isinstance(a, TensorPlan)]

    def index(self, name: str) -> int:
        for i, arg in enumerate(self.args):
            if isinstance(arg, TensorPlan) and arg.name == name:
                return i
        raise KeyError(name)


# A tensor dimension declared as -1 (SGLang's TensorMatcher wildcard: any size) gets this size.
ANY_SIZE = 128
# Float scalars the contract leaves open whose name says what they are.
_EPS_NAMES = ("eps", "epsilon", "variance_epsilon", "norm_eps", "rms_eps")


def scalar_value(contract: Contract, index: int, sizes: dict[str, int] | None = None) -> ScalarValue:
    """The value of scalar argument ``index``: the contract's; else, for an open one, what
    its name and type fix: an ``int`` named after a size symbol takes that size (``topk``
    beside ``out[num_tokens, topk]``), a ``bool`` is False, an epsilon (``eps``,
    ``*_eps``) 1e-6, a scale (``scale``, ``*_scale``, ``*scaling_factor``) 1.0. Any
    other open scalar is a ContractError naming it (the testing agent's to fill in)."""
    arg = contract.args[index]
    spec = arg.scalar
    if spec is None:
        raise ContractError(f"scalar argument {index} of {contract.entry} has no spec", fix="fix the contract")
    if spec.value is None:
        if spec.type == "bool":
            return False
        if spec.type == "int" and sizes and spec.name in sizes:
            return int(sizes[spec.name])
        name = spec.name.lower()
        if spec.type == "float" and (name in _EPS_NAMES or name.endswith("_eps")):
            return 1e-6
        if spec.type == "float" and (name == "scale" or name.endswith(("_scale", "scaling_factor"))):
            return 1.0  # a neutral multiplier: the kernel's arithmetic is exercised, not skewed
        raise ContractError(
            f"scalar {spec.name!r} of {contract.entry} has no value to call with",
            fix="add a rule to contract/completion.toml, or a value to the curated contract (extract/curated/*.toml)",
        )
    if spec.type == "float":
        return float(spec.value)
    if spec.type == "int":
        return int(spec.value)
    if spec.type == "bool":
        return bool(spec.value)
    return spec.value


def plan_call(
    contract: Contract,
    sizes: dict[str, int],
    dtype: str,
    layout: Layout = "contiguous",
    rng: random.Random | None = None,
) -> CallPlan:
    """Shapes, strides and storage of every argument for one call."""
    rng = rng or random.Random(0)
    free = free_stride_symbols(contract)
    chosen: dict[str, int] = {}
    scalars = {i: scalar_value(contract, i, sizes) for i, arg in enumerate(contract.args) if arg.kind == "scalar"}
    # An index tensor's range may name sizes and integer scalars ("num_experts - 1").
    known = dict(sizes)
    for i, value in scalars.items():
        scalar_spec = contract.args[i].scalar
        if scalar_spec is not None and scalar_spec.type == "int" and scalar_spec.name not in known:
            known[scalar_spec.name] = int(value)
    args: list[TensorPlan | ScalarValue] = []
    for index, arg in enumerate(contract.args):
        if arg.kind == "scalar":
            args.append(scalars[index])
            continue
        spec = arg.tensor
        assert spec is not None
        tdtype = canonical_dtype(spec.dtype, dtype)
        itemsize = ITEMSIZE[tdtype]
        shape = tuple(ANY_SIZE if d in (-1, "-1") else eval_expr(d, sizes) for d in spec.shape)
        if any(s < 0 for s in shape):
            raise ContractError(f"tensor {spec.name} has a negative size {shape}", fix="check the shape catalog")
        strides = [0] * len(shape)
        inner = 1
        for dim in reversed(range(len(shape))):
            contiguous = inner
            entry = spec.strides[dim] if spec.strides is not None and dim < len(spec.strides) else None
            if entry is None or entry in (-1, "-1"):  # -1: a TensorMatcher wildcard, any stride; dense is one
                stride = contiguous
            else:
                names = expr_symbols(entry)
                if names & free:
                    if len(names) != 1 or not isinstance(entry, str) or entry.strip() not in free:
                        raise ContractError(
                            f"stride {entry!r} of {spec.name} mixes a free stride symbol into an expression",
                            fix="give the stride as a single symbol or an expression of sizes",
                        )
                    sym = entry.strip()
                    if sym not in chosen:
                        pad_unit = max(1, STRIDE_PAD_BYTES // itemsize)
                        pad = pad_unit * rng.randint(1, 3) if layout == "strided" and dim < len(shape) - 1 else 0
                        chosen[sym] = contiguous + pad
                    stride = chosen[sym]
                    if stride < contiguous:
                        raise ContractError(
                            f"stride {sym}={stride} is too small for tensor {spec.name} (needs >= {contiguous})",
                            fix="use distinct stride symbols for tensors of different widths",
                        )
                else:
                    stride = eval_expr(entry, sizes)
            strides[dim] = stride
            inner = stride * max(shape[dim], 1)
        guard = max(1, GUARD_BYTES // itemsize)
        span = 0 if 0 in shape else 1 + sum((s - 1) * st for s, st in zip(shape, strides))
        args.append(
            TensorPlan(
                name=spec.name,
                role=spec.role,
                dtype=tdtype,
                shape=shape,
                strides=tuple(strides),
                offset=guard,
                storage_numel=guard + span + guard,
                value_range=resolved_range(spec, known),
                structure=spec.structure,
                order=spec.order,
            )
        )
    return CallPlan(args=tuple(args), sizes=dict(sizes), strides_chosen=chosen)


def layouts_for(contract: Contract) -> list[Layout]:
    """Layouts worth testing: strided only when some stride is free (a padded row is allowed)."""
    return ["contiguous", "strided"] if free_stride_symbols(contract) else ["contiguous"]


def needs_value_range(role: str, short_dtype: str, value_range: object) -> bool:
    """Whether the harness must be told a tensor's values: an integer (not bool)
    tensor the kernel reads (indices, metadata) with no ``value_range``. The one
    rule behind :func:`require_fillable` and the completion step's "open" tensors."""
    return role in FILLED_ROLES and short_dtype not in FLOAT_DTYPES and short_dtype != "bool" and value_range is None


def require_fillable(plan: TensorPlan) -> None:
    """Raise ContractError when the harness cannot draw values for this input: an
    integer tensor (indices, metadata) without a ``value_range``. Pure, so a sweep
    can ask before it builds or starts a GPU worker."""
    if needs_value_range(plan.role, plan.dtype, plan.value_range):
        raise ContractError(
            f"integer tensor {plan.name} has no value_range: the harness cannot invent valid indices",
            fix="add a rule to contract/completion.toml, or a value_range to the curated contract",
        )


def offsets(count: int, low: int, high: int, rng: random.Random) -> list[int]:
    """``count`` prefix-sum entries from ``low`` to ``high``: the first is ``low``, the last
    ``high``, each at least the one before (``cu_seqlens`` of ``count - 1`` sequences whose
    lengths add up to ``high - low``; some may be empty). One entry is ``[low]``."""
    if count <= 0:
        return []
    if count == 1:
        return [low]
    cuts = sorted(rng.randint(low, high) for _ in range(count - 2))
    return [low, *cuts, high]


def distinct(count: int, low: int, high: int, rng: random.Random) -> list[int]:
    """``count`` different values in ``[low, high]``, in random order (slots that two
    threads must never share). A range holding fewer than ``count`` values is a
    ContractError: repeating one would make the kernel race, not test it."""
    if count > high - low + 1:
        raise ContractError(
            f"{count} distinct values do not fit in [{low}, {high}]",
            fix="widen the value_range (or bound the tensor's size) in the contract",
        )
    return rng.sample(range(low, high + 1), count)
