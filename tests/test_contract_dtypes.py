"""The one dtype table (contract.dtypes) and the ground floor it stands on."""

from __future__ import annotations

import ast
import pathlib
import struct

from contract import dtypes
from contract.plan import canonical_dtype
from pipeline.records import CPP_DTYPE, DTYPES

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_one_spelling_per_dtype_and_every_alias_resolves_to_it():
    assert (
        dtypes.short_name("fp8_e4m3")
        == dtypes.short_name("float8_e4m3fn")
        == dtypes.short_name("fp8_e4m3_t")
        == "fp8e4m3"
    )
    assert dtypes.short_name("bfloat16") == dtypes.short_name("bf16_t") == dtypes.short_name("__nv_bfloat16") == "bf16"
    assert (
        dtypes.short_name("int") == "int32"
        and dtypes.short_name("half") == "fp16"
        and dtypes.short_name("double") == "fp64"
    )
    assert dtypes.short_name("complex64") is None
    assert set(dtypes.ALIASES.values()) <= set(dtypes.TABLE)
    assert canonical_dtype("fp8_e4m3", "bf16") == "fp8e4m3"


def test_the_table_agrees_with_the_records_instantiation_dtypes():
    assert {d: dtypes.cpp_spelling(d) for d in DTYPES} == CPP_DTYPE  # pipeline cannot import contract: kept equal here


def test_one_poison_per_fillable_dtype_that_fits_its_width():
    for short, bits in dtypes.POISON_BITS.items():
        record = dtypes.TABLE[short]
        assert bits < 1 << (8 * record.nbytes)
        view = dtypes.poison_value(short)
        width = record.nbytes
        if width > 1:
            fmt = {2: "h", 4: "i", 8: "q"}[width]
            assert struct.unpack("<" + fmt, struct.pack("<" + fmt.upper(), bits))[0] == view
    assert dtypes.POISON_BITS["bf16"] == 0x7FE5  # the harness's pattern, for integrate too
    assert set(dtypes.ITEMSIZE) == set(dtypes.POISON_BITS)
    assert all(dtypes.TABLE[d].is_float for d in dtypes.FLOAT_DTYPES)


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):  # function bodies included
        if isinstance(node, ast.Import):
            out |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def test_the_contract_package_reads_only_pipeline_the_standard_library_and_pydantic():
    import sys

    allowed = {"contract", "pipeline", "pydantic", "__future__"} | set(sys.stdlib_module_names)
    for path in sorted((ROOT / "contract").glob("*.py")):
        extra = _imports(path) - allowed
        assert not extra, f"{path.name} imports {sorted(extra)}"
        assert "torch" not in _imports(path)


def test_the_torch_half_reads_the_torch_names_it_always_used():
    expected = {
        "bf16": "bfloat16",
        "fp16": "float16",
        "fp32": "float32",
        "fp64": "float64",
        "fp8e4m3": "float8_e4m3fn",
        "int8": "int8",
        "uint8": "uint8",
        "bool": "bool",
        "int16": "int16",
        "int32": "int32",
        "int64": "int64",
    }
    assert {d: dtypes.torch_name(d) for d in dtypes.ITEMSIZE} == expected
    widths = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}
    assert all(dtypes.bits_torch_name(d) == widths[dtypes.TABLE[d].nbytes] for d in dtypes.ITEMSIZE)


def test_torch_attribute_names_torchs_dtypes_and_their_aliases_only():
    """The one table the Python-side readers (extract.triton_*) spell ``torch.<attr>`` dtypes with."""
    from contract.dtypes import torch_attribute

    assert [torch_attribute(a) for a in ("half", "float", "long", "int", "bfloat16", "float8_e4m3fn")] == [
        "float16",
        "float32",
        "int64",
        "int32",
        "bfloat16",
        "float8_e4m3fn",
    ]
    assert torch_attribute("bf16") is None and torch_attribute("device") is None
