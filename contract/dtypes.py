"""The one dtype table: every element type the project knows, under one short spelling.

Why one table: the harness, the completion rules, the comparison and integrate's
SGLang check all have to agree on what ``bf16`` is (its bytes, its C++ spelling,
the torch attribute that makes it, the bit pattern that marks "never written").
Each used to keep its own table, and they drifted (fp8 spelled two ways, two bf16
poison patterns). Everything reads this one now.

What must stay true:
- One short spelling per dtype (``bf16``, ``fp8e4m3``, ``int32``); every other
  spelling (torch's ``bfloat16``, C++'s ``bf16_t``, SGLang's ``fp8_e4m3``) is an
  input alias resolved by :func:`short_name`, the only place aliases are read.
- One poison pattern per dtype the harness can fill (:attr:`DType.poison`): a NaN
  with a recognisable payload for floats, so "never written" is told apart from
  "computed NaN"; a fixed byte pattern for integers. The harness's patterns are
  the project's (bf16 ``0x7FE5``).
- No torch here: torch's dtype is named by its attribute (``"bfloat16"``); the torch
  half (:func:`optimize.harness.inputs.torch_dtype`) does the ``getattr``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["float", "int", "bool"]


@dataclass(frozen=True)
class DType:
    """One element type."""

    short: str  # the project's spelling: task records, plans, tolerances
    cpp: str  # SGLang's make_cpp_args spelling (kernels/jit/utils/compile/cpp_args.py)
    nbytes: int
    kind: Kind
    torch: str  # attribute of the torch module (``torch.bfloat16``), as a string
    poison: int | None = None  # bits written into outputs before a run; None: the harness cannot fill it
    finite_max: float | None = None  # where float32 -> this dtype is not saturating (NaN beyond it)

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def fillable(self) -> bool:
        """Whether the harness can allocate, fill and poison a tensor of this dtype."""
        return self.poison is not None


_TABLE: tuple[DType, ...] = (
    DType("bf16", "bf16_t", 2, "float", "bfloat16", 0x7FE5),
    DType("fp16", "fp16_t", 2, "float", "float16", 0x7E5A),
    DType("fp32", "fp32_t", 4, "float", "float32", 0x7FC5A5A5),
    DType("fp64", "double", 8, "float", "float64", 0x7FF8A5A5A5A5A5A5),
    DType("fp8e4m3", "fp8_e4m3_t", 1, "float", "float8_e4m3fn", 0x7F, finite_max=448.0),  # e4m3fn's NaN
    DType("fp8e5m2", "fp8_e5m2_t", 1, "float", "float8_e5m2"),
    DType("int8", "int8_t", 1, "int", "int8", 0x5A),
    DType("uint8", "uint8_t", 1, "int", "uint8", 0xA5),
    DType("bool", "bool", 1, "bool", "bool", 0xA5),
    DType("int16", "int16_t", 2, "int", "int16", 0x5A5A),
    DType("uint16", "uint16_t", 2, "int", "uint16"),
    DType("int32", "int32_t", 4, "int", "int32", 0x5A5A5A5A),
    DType("uint32", "uint32_t", 4, "int", "uint32"),
    DType("int64", "int64_t", 8, "int", "int64", 0x5A5A5A5A5A5A5A5A),
    DType("uint64", "uint64_t", 8, "int", "uint64"),
)

#: short spelling -> its record, in table order
TABLE: dict[str, DType] = {d.short: d for d in _TABLE}

#: C++ element types -> short spelling: make_cpp_args' spellings, plus CUDA's and C's own
#: names of the same types (what a kernel's source may write for its element type)
CPP_TYPES: dict[str, str] = {
    **{d.cpp: d.short for d in _TABLE},
    "float": "fp32",
    "half": "fp16",
    "__half": "fp16",
    "nv_bfloat16": "bf16",
    "__nv_bfloat16": "bf16",
    "int": "int32",
}

# Other spellings of a dtype, accepted as input only (contracts, C++ text, torch names):
# the torch attributes, the C++ types, and the rest. ``fp8_e4m3`` is SGLang's own short
# name (and extract's interpreter's); the project spells it ``fp8e4m3``.
ALIASES: dict[str, str] = {
    **{d.torch: d.short for d in _TABLE},
    **CPP_TYPES,
    "long": "int64",
    "__nv_fp8_e4m3": "fp8e4m3",
    "fp8_e4m3": "fp8e4m3",
    "fp8_e5m2": "fp8e5m2",
}

#: the harness's fillable dtypes -> bytes (what it can allocate and poison)
ITEMSIZE: dict[str, int] = {d.short: d.nbytes for d in _TABLE if d.fillable}
#: fillable float dtypes (values are drawn as floats, compared with a tolerance)
FLOAT_DTYPES: tuple[str, ...] = tuple(d.short for d in _TABLE if d.fillable and d.is_float)
#: the poison bit pattern of every fillable dtype
POISON_BITS: dict[str, int] = {d.short: d.poison for d in _TABLE if d.poison is not None}
#: largest finite magnitude of the formats whose conversion from float32 is not saturating
FINITE_MAX: dict[str, float] = {d.short: d.finite_max for d in _TABLE if d.finite_max is not None}
#: integer dtype name (torch attribute) of each width, for bit-exact views
BITS_TORCH: dict[int, str] = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


#: what ``torch.<attr>`` names: each dtype's own attribute, and torch's aliases of them
TORCH_ATTRIBUTES: dict[str, str] = {
    **{d.torch: d.short for d in _TABLE},
    "float": "fp32",
    "half": "fp16",
    "double": "fp64",
    "int": "int32",
    "long": "int64",
    "short": "int16",
}


def torch_attribute(attr: str) -> str | None:
    """The torch spelling of the dtype ``torch.<attr>`` names (``half`` -> ``"float16"``), or None when
    ``attr`` is no dtype of torch's (Python-side readers of SGLang's wrappers: extract.triton_*)."""
    short = TORCH_ATTRIBUTES.get(attr)
    return TABLE[short].torch if short is not None else None


def short_name(name: str) -> str | None:
    """The short spelling of ``name`` (any spelling: ``bfloat16``, ``bf16_t``, ``bf16``),
    or None when the project knows no such dtype."""
    text = name.strip()
    if text in TABLE:
        return text
    return ALIASES.get(text)


def lookup(name: str) -> DType | None:
    """The record of ``name`` in any spelling, or None."""
    short = short_name(name)
    return TABLE[short] if short is not None else None


def cpp_spelling(short: str) -> str:
    """SGLang's C++ spelling of a short dtype (``bf16`` -> ``bf16_t``)."""
    return TABLE[short].cpp


def torch_name(short: str) -> str:
    """The torch attribute of a short dtype (``bf16`` -> ``"bfloat16"``)."""
    return TABLE[short].torch


def bits_torch_name(short: str) -> str:
    """The torch attribute of the integer dtype as wide as ``short`` (bit-exact views)."""
    return BITS_TORCH[TABLE[short].nbytes]


def signed_bits(bits: int, width_bytes: int) -> int:
    """``bits`` as the signed integer a ``width_bytes``-wide signed view holds (a one-byte
    view is unsigned: ``uint8``)."""
    limit = 1 << (8 * width_bytes)
    return bits - limit if bits >= limit // 2 and width_bytes > 1 else bits


def poison_value(short: str) -> int:
    """The poison of ``short`` as the integer its bit view (:func:`bits_torch_name`) holds."""
    poison = TABLE[short].poison
    if poison is None:
        raise KeyError(f"dtype {short} has no poison pattern: the harness cannot fill it")
    return signed_bits(poison, TABLE[short].nbytes)
