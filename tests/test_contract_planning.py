"""Argument planning and shape drawing (contract.sizes, contract.shapes, contract.plan), pure Python."""

from __future__ import annotations

import random

import pytest

from contract.dtypes import POISON_BITS, poison_value
from contract.errors import ContractError
from contract.plan import (
    ANY_SIZE,
    GUARD_BYTES,
    STRIDE_PAD_BYTES,
    canonical_dtype,
    distinct,
    layouts_for,
    plan_call,
    require_fillable,
)
from contract.shapes import MAX_HELD_OUT_ELEMENTS, SYNTHETIC_TOKENS, _exact, draw_held_out, synthetic_shape
from contract.sizes import (
    SYNTHETIC_MODEL,
    derived_symbols,
    eval_expr,
    expr_symbols,
    free_stride_symbols,
    instantiations_for,
    numel_at,
    pinned_sizes,
    resolve_sizes,
    select_instantiation,
    shape_symbols,
    tensor_specs,
    token_symbol,
    width_symbols,
)
from pipeline.records import ArgSpec, Contract, Instantiation, ScalarSpec, ShapeCase, TensorSpec


def tensor(name, shape, role, dtype="T", strides=None, value_range=None):
    return ArgSpec(
        kind="tensor",
        tensor=TensorSpec(name=name, shape=shape, dtype=dtype, role=role, strides=strides, value_range=value_range),
    )


def scalar(name, type_, value):
    return ArgSpec(kind="scalar", scalar=ScalarSpec(name=name, type=type_, value=value))


def silu_contract(**kw):
    return Contract(
        entry="run_activation",
        args=[
            tensor("input", ["num_tokens", "2*hidden_size"], "input"),
            tensor("out", ["num_tokens", "hidden_size"], "output"),
            scalar("type", "str", "silu"),
        ],
        symbols=["num_tokens", "hidden_size"],
        divisibility={"hidden_size": 8},
        reference="silu_and_mul",
        **kw,
    )


def rmsnorm_contract():
    return Contract(
        entry="rmsnorm",
        args=[
            tensor("input", ["num_tokens", "hidden_size"], "input", strides=["input_stride", 1]),
            tensor("weight", ["hidden_size"], "input"),
            tensor("output", ["num_tokens", "hidden_size"], "output", strides=["output_stride", 1]),
            scalar("eps", "float", 1e-6),
        ],
        symbols=["num_tokens", "hidden_size", "input_stride", "output_stride"],
        allowed_values={"hidden_size": [64, 128, 256, 512, 768, 1024, 4096]},
    )


def shape(tokens, hidden, model="M", token_sym="num_tokens"):
    return ShapeCase(model=model, tokens=tokens, sizes={token_sym: tokens, "hidden_size": hidden})


def inst(dtype, *template, export="rmsnorm"):
    return Instantiation(dtype=dtype, module_args=[], template_args=list(template), wrappers=[(export, "E")])


# ---------------------------------------------------------------------------- expressions


def test_eval_expr_arithmetic_over_sizes():
    sizes = {"hidden_size": 4096, "num_tokens": 7}
    assert eval_expr("2*hidden_size", sizes) == 8192
    assert eval_expr("hidden_size // 8 + num_tokens - 1", sizes) == 518
    assert eval_expr(16, sizes) == 16
    assert eval_expr("-3", sizes) == -3
    assert expr_symbols("2*hidden_size + num_tokens") == {"hidden_size", "num_tokens"}


def test_eval_expr_refuses_unknown_symbols_inexact_division_and_calls():
    with pytest.raises(ContractError, match="'width'.*no value"):
        eval_expr("width * 2", {"hidden_size": 1})
    with pytest.raises(ContractError, match="inexactly"):
        eval_expr("hidden_size / 3", {"hidden_size": 8})
    with pytest.raises(ContractError, match="Call"):
        eval_expr("pow(hidden_size, 2)", {"hidden_size": 8})
    with pytest.raises(ContractError, match="Attribute"):
        eval_expr("x.size", {"x": 8})
    # min/max are the only calls (an index range's smallest table), and their names are not symbols
    assert eval_expr("min(hidden_size, 128) - 1", {"hidden_size": 8}) == 7
    assert eval_expr("max(hidden_size, 2)", {"hidden_size": 8}) == 8
    assert expr_symbols("min(capacity, 128) - 1") == {"capacity"}


# ---------------------------------------------------------------------------- symbols


def test_shape_and_free_stride_symbols():
    c = rmsnorm_contract()
    assert shape_symbols(c) == {"num_tokens", "hidden_size"}
    assert free_stride_symbols(c) == {"input_stride", "output_stride"}
    assert layouts_for(c) == ["contiguous", "strided"]
    assert layouts_for(silu_contract()) == ["contiguous"]


def test_token_symbol_from_catalog_and_by_name():
    c = silu_contract()
    assert token_symbol(c, [shape(8, 4096), shape(64, 1024)]) == "num_tokens"
    # MoE rows (tokens * top_k) do not equal case.tokens: the name decides
    moe = ShapeCase(model="M", tokens=8, sizes={"num_tokens": 64, "hidden_size": 1536})
    assert token_symbol(c, [moe]) == "num_tokens"


def test_resolve_sizes_fills_tokens_and_reports_missing_symbols():
    c = silu_contract()
    case = ShapeCase(model="M", tokens=5, sizes={"hidden_size": 64})
    assert resolve_sizes(c, case) == {"hidden_size": 64, "num_tokens": 5}
    bad = ShapeCase(model="M", tokens=5, sizes={"num_tokens": 5})
    with pytest.raises(ContractError, match="hidden_size"):
        resolve_sizes(c, bad)


def test_derived_symbols_found_from_catalog_ratios():
    c = Contract(
        entry="e",
        args=[tensor("a", ["n", "d_in"], "input"), tensor("b", ["n", "d_out"], "output")],
        symbols=["n", "d_in", "d_out"],
    )
    catalog = [
        ShapeCase(model="M", tokens=4, sizes={"n": 4, "d_in": 2048, "d_out": 1024}),
        ShapeCase(model="M", tokens=8, sizes={"n": 8, "d_in": 512, "d_out": 256}),
    ]
    assert derived_symbols(c, catalog, "n") == {"d_in": ("d_out", 2)}
    drawn = draw_held_out(c, catalog, 5, random.Random(3))
    assert all(s.sizes["d_in"] == 2 * s.sizes["d_out"] for s in drawn)


def test_one_synthetic_case_ties_two_sizes_only_where_a_constraint_names_both():
    """Helper review (2026-12-01): with one invented shape, any two sizes in an exact
    ratio (num_sm_parts 128 and max_len 128; heads 8 and 16) had been held together in
    every held-out draw. One pair of values proves nothing; a constraint does."""
    args = [tensor("a", ["n", "heads"], "input"), tensor("b", ["n", "parts"], "output")]
    one = [ShapeCase(model="synthetic", tokens=8, sizes={"n": 8, "heads": 16, "parts": 128})]
    loose = Contract(entry="e", args=args, symbols=["n", "heads", "parts"])
    assert derived_symbols(loose, one, "n") == {}
    tied = Contract(entry="e", args=args, symbols=["n", "heads", "parts"], constraints=["parts == 8 * heads"])
    assert derived_symbols(tied, one, "n") == {"parts": ("heads", 8)}


def test_a_size_free_instantiation_serves_every_width():
    c = Contract(entry="run", args=[tensor("x", ["N"], "input"), tensor("out", ["N"], "output")], symbols=["N"])
    threads = Instantiation(
        dtype="bf16", module_args=[], template_args=["256", "true"], wrappers=[("run", "K<256, true>::run")]
    )
    with pytest.raises(ContractError, match="specialised on"):
        select_instantiation(c, [threads], "bf16", {"N": 8})
    free = threads.model_copy(update={"size_free": True})
    assert select_instantiation(c, [free], "bf16", {"N": 8}) is free
    assert synthetic_shape(c, [free]) is not None


def test_accepted_limits():
    c = Contract(entry="e", args=[], symbols=["h"], divisibility={"h": 8}, max_values={"h": 8192}, allowed_values={})
    assert c.accepts("h", 8192)
    assert not c.accepts("h", 8200)
    assert not c.accepts("h", 12)
    assert not c.accepts("h", 0)


# ---------------------------------------------------------------------------- held-out shapes


def test_held_out_starts_at_one_token_then_odd_counts_and_valid_widths():
    c = silu_contract(max_values={"hidden_size": 20000})
    catalog = [shape(t, h) for t in (1, 8, 4096) for h in (14336, 1536)]
    drawn = draw_held_out(c, catalog, 8, random.Random(11))
    assert len(drawn) == 8
    assert drawn[0].sizes["num_tokens"] == 1
    assert all(s.sizes["num_tokens"] % 2 == 1 and s.sizes["num_tokens"] >= 3 for s in drawn[1:])
    assert all(s.sizes["hidden_size"] % 8 == 0 and 8 <= s.sizes["hidden_size"] <= 20000 for s in drawn)
    assert all(s.model == "held-out" and s.tokens == s.sizes["num_tokens"] for s in drawn)


def test_held_out_covers_every_token_bucket_then_its_edges():
    """Issue 14 item 4: a configuration chosen per token bucket is validated inside each bucket
    (draws 1-3, one band per bucket of pipeline.buckets) and next to each bucket edge (draws 4-6)."""
    from pipeline.buckets import BUCKETS, bucket_for

    c = silu_contract(max_values={"hidden_size": 20000})
    catalog = [shape(t, h) for t in (1, 8, 4096) for h in (14336, 1536)]
    for seed in range(5):
        tokens = [s.sizes["num_tokens"] for s in draw_held_out(c, catalog, 7, random.Random(seed))]
        assert tokens[0] == 1
        assert {bucket_for(t) for t in tokens[1:4]} == {name for name, _, _ in BUCKETS}
        assert tokens[4] in (65, 511) and tokens[5] == 513 and tokens[6] == 63, tokens


def test_held_out_draws_differ_between_seeds_and_repeat_for_one_seed():
    c = silu_contract()
    catalog = [shape(8, 14336), shape(64, 4096)]
    one = [s.sizes for s in draw_held_out(c, catalog, 6, random.Random(1))]
    same = [s.sizes for s in draw_held_out(c, catalog, 6, random.Random(1))]
    other = [s.sizes for s in draw_held_out(c, catalog, 6, random.Random(2))]
    assert one == same and one != other


def test_held_out_cycles_through_every_allowed_width():
    c = rmsnorm_contract()
    catalog = [shape(8, 4096), shape(8, 128)]
    widths = {s.sizes["hidden_size"] for s in draw_held_out(c, catalog, 7, random.Random(4))}
    assert widths == set(c.allowed_values["hidden_size"])


def test_held_out_widths_limited_to_instantiated_ones_when_template_bound():
    c = rmsnorm_contract()
    catalog = [shape(8, 4096), shape(8, 128)]
    insts = [inst(d, w, "true", f"{d}_t") for d in ("bf16", "fp16") for w in ("4096", "128", "512")]
    insts.append(inst("bf16", "768", "true", "bf16_t"))  # only bf16 has 768: not drawn for both dtypes
    drawn = draw_held_out(c, catalog, 9, random.Random(5), instantiations=insts)
    assert {s.sizes["hidden_size"] for s in drawn} == {4096, 128, 512}


def test_held_out_keeps_tensors_bounded():
    c = silu_contract()
    catalog = [shape(8, 1 << 15)]
    drawn = draw_held_out(c, catalog, 6, random.Random(9))
    for s in drawn:
        assert s.sizes["num_tokens"] * 2 * s.sizes["hidden_size"] <= MAX_HELD_OUT_ELEMENTS or s.sizes["num_tokens"] == 1


def test_held_out_token_counts_stay_within_the_contracts_max_value():
    c = silu_contract(max_values={"num_tokens": 32})
    drawn = draw_held_out(c, [shape(8, 4096)], 12, random.Random(3))
    assert len(drawn) == 12 and drawn[0].sizes["num_tokens"] == 1
    assert all(1 <= s.sizes["num_tokens"] <= 31 and s.sizes["num_tokens"] % 2 for s in drawn)
    assert any(s.sizes["num_tokens"] == 31 for s in drawn)  # the 65..8191 bands are capped, not skipped


def test_held_out_redraws_where_distinct_slots_outnumber_their_range():
    """A KV-slot tensor of T distinct values in [0, pages - 1]: a draw with more tokens
    than pages is drawn again (a repeated slot would make the kernel race)."""
    c = Contract(
        entry="store",
        args=[
            tensor("x", ["num_tokens", "hidden_size"], "input"),
            ArgSpec(
                kind="tensor",
                tensor=TensorSpec(
                    name="loc",
                    shape=["num_tokens"],
                    dtype="int64",
                    role="input",
                    value_range=(0, "pages - 1"),
                    structure="distinct",
                ),
            ),
            tensor("cache", ["pages", "hidden_size"], "inout"),
        ],
        symbols=["num_tokens", "hidden_size", "pages"],
        allowed_values={"pages": [16, 64]},
    )
    drawn = draw_held_out(
        c,
        [ShapeCase(model="M", tokens=8, sizes={"num_tokens": 8, "hidden_size": 64, "pages": 64})],
        6,
        random.Random(2),
    )
    assert drawn and all(s.sizes["num_tokens"] <= s.sizes["pages"] for s in drawn)
    assert len({s.sizes["num_tokens"] for s in drawn}) > 1


@pytest.mark.parametrize("count", [0, 1, 7, 100])
def test_distinct_values_never_repeat_and_stay_in_range(count):
    for seed in range(10):
        values = distinct(count, 5, 104, random.Random(seed))
        assert len(values) == len(set(values)) == count and all(5 <= v <= 104 for v in values)
    with pytest.raises(ContractError, match="101 distinct values do not fit"):
        distinct(101, 5, 104, random.Random(0))


def test_held_out_empty_without_catalog_or_count():
    assert draw_held_out(silu_contract(), [], 5, random.Random(0)) == []
    assert draw_held_out(silu_contract(), [shape(8, 64)], 0, random.Random(0)) == []


# ---------------------------------------------------------------------------- instantiations


def test_select_instantiation_by_dtype_and_specialised_width():
    c = rmsnorm_contract()
    insts = [
        inst("bf16", "4096", "true", "bf16_t"),
        inst("bf16", "128", "true", "bf16_t"),
        inst("fp16", "4096", "true", "fp16_t"),
    ]
    got = select_instantiation(c, insts, "bf16", {"num_tokens": 3, "hidden_size": 128})
    assert got.template_args[0] == "128"
    with pytest.raises(ContractError, match="no fp16 instantiation.*fits"):
        select_instantiation(c, insts, "fp16", {"num_tokens": 3, "hidden_size": 128})
    with pytest.raises(ContractError, match="no instantiation of rmsnorm for dtype fp32"):
        select_instantiation(c, insts, "fp32", {"num_tokens": 3, "hidden_size": 128})


def test_token_count_or_stride_equal_to_another_width_does_not_select_it():
    """Found on the H200: T=512 at hidden 4096 ran rmsnorm's width-512 module."""
    c = rmsnorm_contract()
    insts = [inst("bf16", "512", "true", "bf16_t"), inst("bf16", "4096", "true", "bf16_t")]
    sizes = {"num_tokens": 512, "hidden_size": 4096, "input_stride": 4096, "output_stride": 512}
    assert select_instantiation(c, insts, "bf16", sizes).template_args[0] == "4096"
    assert width_symbols(c) == {"hidden_size"}


def test_instantiations_without_the_entry_are_ignored():
    c = rmsnorm_contract()
    other = inst("bf16", "128", "true", "bf16_t", export="something_else")
    assert instantiations_for(c, [other]) == []


# ---------------------------------------------------------------------------- call plans


def test_contiguous_plan_shapes_strides_guards_and_scalars():
    plan = plan_call(silu_contract(), {"num_tokens": 3, "hidden_size": 16}, "bf16")
    x, out, kind = plan.args
    assert kind == "silu"
    assert x.shape == (3, 32) and x.strides == (32, 1) and x.contiguous
    assert out.shape == (3, 16) and out.role == "output" and out.dtype == "bf16"
    guard = GUARD_BYTES // 2
    assert x.offset == guard and x.storage_numel == guard + 3 * 32 + guard
    assert x.nbytes == 3 * 32 * 2
    assert [t.name for t in plan.tensors] == ["input", "out"]
    assert plan.index("out") == 1


def test_strided_layout_pads_free_row_strides_with_aligned_gaps():
    c = rmsnorm_contract()
    plan = plan_call(c, {"num_tokens": 5, "hidden_size": 128}, "fp16", "strided", random.Random(7))
    x, w, out, eps = plan.args
    assert eps == pytest.approx(1e-6)
    for t in (x, out):
        pad = t.strides[0] - 128
        assert pad > 0 and (pad * 2) % STRIDE_PAD_BYTES == 0 and not t.contiguous
        assert t.storage_numel == t.offset + (5 - 1) * t.strides[0] + 128 + t.offset
    assert w.contiguous and w.strides == (1,)
    assert set(plan.strides_chosen) == {"input_stride", "output_stride"}
    contiguous = plan_call(c, {"num_tokens": 5, "hidden_size": 128}, "fp16", "contiguous")
    assert all(t.contiguous for t in contiguous.tensors)


def test_stride_expressions_of_sizes_are_evaluated_not_padded():
    c = Contract(
        entry="e",
        args=[tensor("x", ["n", "d"], "inout", strides=["d", 1])],
        symbols=["n", "d"],
    )
    plan = plan_call(c, {"n": 4, "d": 64}, "bf16", "strided", random.Random(0))
    assert plan.tensors[0].strides == (64, 1)


def test_a_wildcard_stride_is_laid_out_dense():
    """Found on the H200 (2026-11-29): TensorMatcher's -1 ("any") in with_strides was
    taken as a stride of -1 and torch refused the view in nine tasks."""
    c = Contract(entry="e", args=[tensor("x", ["n", 3, "d"], "input", strides=[-1, "-1", 1])], symbols=["n", "d"])
    plan = plan_call(c, {"n": 4, "d": 64}, "bf16", "strided", random.Random(0))
    assert plan.tensors[0].strides == (192, 64, 1)


def test_concrete_dtypes_and_value_ranges():
    c = Contract(
        entry="e",
        args=[
            tensor("ids", ["n"], "input", dtype="int32", value_range=(-1, 7)),
            tensor("scale", ["n"], "input", dtype="float32"),
        ],
        symbols=["n"],
    )
    plan = plan_call(c, {"n": 10}, "bf16")
    ids, scale = plan.tensors
    assert ids.dtype == "int32" and ids.value_range == (-1, 7) and not ids.is_float
    assert scale.dtype == "fp32" and scale.itemsize == 4
    fp8 = Contract(entry="e", args=[tensor("q", ["n"], "output", dtype="float8_e4m3fn")], symbols=["n"])
    (q,) = plan_call(fp8, {"n": 10}, "bf16").tensors
    assert q.dtype == "fp8e4m3" and q.itemsize == 1 and q.is_float
    assert POISON_BITS["fp8e4m3"] == 0x7F  # e4m3fn's NaN: exponent and mantissa all ones
    bad = Contract(entry="e", args=[tensor("q", ["n"], "input", dtype="float4_e2m1fn_x2")], symbols=["n"])
    with pytest.raises(ContractError, match="float4_e2m1fn_x2"):
        plan_call(bad, {"n": 10}, "bf16")


def test_scalar_without_value_is_a_contract_error():
    c = Contract(entry="e", args=[scalar("alpha", "float", None)], symbols=[])
    with pytest.raises(ContractError, match="alpha.*no value"):
        plan_call(c, {}, "bf16")
    kind = Contract(entry="e", args=[scalar("type", "str", None)], symbols=[])
    with pytest.raises(ContractError, match="type.*no value"):
        plan_call(kind, {}, "bf16")
    flag = Contract(entry="e", args=[scalar("enable", "bool", None)], symbols=[])
    assert plan_call(flag, {}, "bf16").args == (False,)


def test_open_scalars_that_their_name_and_type_settle():
    c = Contract(
        entry="route",
        args=[
            tensor("out", ["num_tokens", "topk"], "output"),
            scalar("topk", "int", None),
            scalar("eps", "float", None),
            scalar("img_eps", "float", None),
            scalar("routed_scaling_factor", "float", None),
            scalar("sm_scale", "float", None),
        ],
        symbols=["num_tokens", "topk"],
    )
    plan = plan_call(c, {"num_tokens": 4, "topk": 8}, "bf16")
    assert plan.args[1:] == (8, 1e-6, 1e-6, 1.0, 1.0)


def test_wildcard_dims_and_dtype_unions():
    c = Contract(
        entry="e",
        args=[
            tensor("cache", [-1, "d"], "input", dtype="bfloat16|float32"),
            tensor("ids", ["-1"], "input", dtype="int32"),
        ],
        symbols=["d"],
    )
    plan = plan_call(c, {"d": 64}, "fp32")
    assert plan.tensors[0].shape == (ANY_SIZE, 64) and plan.tensors[0].dtype == "fp32"
    assert plan.tensors[1].shape == (ANY_SIZE,)
    assert plan_call(c, {"d": 64}, "fp16").tensors[0].dtype == "bf16"  # not among them: the first
    with pytest.raises(ContractError, match="not one the harness can fill"):
        canonical_dtype("fp4_e2m1|nvfp4", "bf16")


def test_poison_bits_are_quiet_nans_with_payload_and_fit_the_width():
    import struct

    bf16 = POISON_BITS["bf16"]
    as_float = struct.unpack(">f", struct.pack(">I", bf16 << 16))[0]
    assert as_float != as_float  # NaN
    assert bf16 & 0x0040 and bf16 != 0x7FC0 and bf16 != 0x7FFF  # quiet, not the canonical NaN a kernel makes
    fp16 = POISON_BITS["fp16"]
    assert (fp16 & 0x7C00) == 0x7C00 and fp16 & 0x0200 and fp16 != 0x7E00 and fp16 != 0x7FFF
    assert poison_value("bf16") == bf16 and poison_value("uint8") == 0xA5
    assert poison_value("fp32") == struct.unpack("<i", struct.pack("<I", POISON_BITS["fp32"]))[0]


def test_synthetic_shape_sizes_what_no_model_config_names():
    contract = Contract(
        entry="store",
        args=[
            tensor("kv", ["num_tokens", "num_slots", "page_size"], "input"),
            tensor("cache", ["pages", "D"], "inout"),
        ],
        symbols=["num_tokens", "num_slots", "page_size", "pages", "D"],
        divisibility={"page_size": 48},
        allowed_values={"pages": [3, 5]},
        max_values={"num_slots": 64},
    )
    pinned = Instantiation(dtype="bf16", module_args=[], template_args=["bf16_t", "512"], wrappers=[("store", "S")])
    case = synthetic_shape(contract, [pinned])
    assert case.model == SYNTHETIC_MODEL and case.source.startswith("synthetic")
    assert case.tokens == case.sizes["num_tokens"] == SYNTHETIC_TOKENS
    assert case.sizes["D"] == 512  # the width the only instantiation is specialised on (first width symbol)
    assert case.sizes["page_size"] == 144  # 128 rounded up to the divisibility
    assert case.sizes["pages"] == 3  # an allowed value
    assert case.sizes["num_slots"] == 64  # the generic 128 is over the maximum
    assert select_instantiation(contract, [pinned], "bf16", case.sizes) == pinned
    assert synthetic_shape(Contract(entry="e", args=[], symbols=[])) is None


def test_without_width_dimensions_a_dtypes_only_instantiation_serves():
    """mark_pending<128>: 128 is a block size, no tensor has a width dimension to match it."""
    c = Contract(
        entry="mark", args=[tensor("flags", ["num_tokens", 4], "inout", dtype="int32")], symbols=["num_tokens"]
    )
    only = Instantiation(dtype="bf16", module_args=[], template_args=["128"], wrappers=[("mark", "M")])
    assert select_instantiation(c, [only], "bf16", {"num_tokens": 5}) == only
    # with a width dimension, a mismatched width still refuses (rmsnorm's fp16 @4096 vs 128)
    with pytest.raises(ContractError, match="fits"):
        select_instantiation(
            rmsnorm_contract(), [inst("fp16", "4096", "true", "fp16_t")], "fp16", {"num_tokens": 3, "hidden_size": 128}
        )


def test_index_tensors_without_a_range_are_refused_before_any_gpu_work():
    c = Contract(
        entry="gather",
        args=[
            tensor("ids", ["n"], "input", dtype="int32"),
            tensor("out_ids", ["n"], "output", dtype="int32"),
            tensor("mask", ["n"], "input", dtype="bool"),
        ],
        symbols=["n"],
    )
    ids, out_ids, mask = plan_call(c, {"n": 4}, "bf16").tensors
    with pytest.raises(ContractError, match="integer tensor ids has no value_range"):
        require_fillable(ids)
    require_fillable(out_ids)  # outputs are poisoned, not filled
    require_fillable(mask)


def gemv_contract():
    return Contract(
        entry="gemv",
        args=[tensor("x", [1, "K"], "input"), tensor("w", ["N", "K"], "input"), tensor("out", [1, "N"], "output")],
        symbols=["N", "K"],
    )


def pinned(dtype, n, k):
    """An instantiation a loader made from `w.shape` (extract records the sizes it read)."""
    return Instantiation(
        dtype=dtype, module_args=[], template_args=[str(n), str(k)], wrappers=[("gemv", "E")], sizes={"N": n, "K": k}
    )


def test_an_instantiation_made_for_sizes_serves_those_sizes_only():
    """A loader that read `w.shape[0]` made Gemv<4096, 128>: it serves N=4096, K=128 and
    nothing else, whether or not the numbers look like widths."""
    c = gemv_contract()
    pool = [pinned("bf16", 4096, 128), pinned("bf16", 256, 512)]
    assert select_instantiation(c, pool, "bf16", {"N": 256, "K": 512}) == pool[1]
    with pytest.raises(ContractError, match="N=4096, K=128"):
        select_instantiation(c, pool, "bf16", {"N": 4096, "K": 512})
    only = [pinned("bf16", 4096, 128)]  # one instantiation, no width in common: still refused
    with pytest.raises(ContractError, match="fits"):
        select_instantiation(c, only, "bf16", {"N": 128, "K": 128})


def test_synthetic_and_held_out_shapes_keep_the_sizes_instantiations_were_made_for():
    c = gemv_contract()
    pool = [pinned(d, 4096, 128) for d in ("bf16", "fp16")] + [pinned("bf16", 256, 512)]
    case = synthetic_shape(c, pool)
    assert case.sizes == {"N": 4096, "K": 128}
    assert select_instantiation(c, pool, "fp16", case.sizes) == pool[1]
    drawn = draw_held_out(c, [case], 6, random.Random(3), instantiations=pool, dtypes=["bf16", "fp16"])
    assert drawn and all(s.sizes["N"] == 4096 and s.sizes["K"] == 128 for s in drawn)  # 256x512: bf16 only
    assert pinned_sizes(pool, ["bf16"]) == {"K": [128, 512], "N": [256, 4096]}


def test_a_token_count_is_no_specialised_width_even_in_a_1d_tensor():
    """Found in the coverage sweep (2026-11-29): fused_store_index_k_cache has
    `indices[num_tokens]` beside `input[num_tokens, 128]`; its one instantiation is
    specialised on the page size 64, and T=8 "did not fit" it."""
    c = Contract(
        entry="store",
        args=[tensor("input", ["num_tokens", 128], "input"), tensor("indices", ["num_tokens"], "input", dtype="int64")],
        symbols=["num_tokens"],
    )
    only = inst("bf16", "bf16_t", "64", export="store")
    assert select_instantiation(c, [only], "bf16", {"num_tokens": 8}) == only


def test_a_synthetic_shape_stays_small_enough_to_allocate():
    """Found in the coverage sweep (2026-11-29): ltx25_decoder_rope's six-dimensional q at
    128 a dimension asked for 256 GiB."""
    dims = ["batch", "frames", "height", "width", "heads", "head_dim"]
    c = Contract(
        entry="rope",
        args=[tensor("q", dims, "input"), tensor("q_out", dims, "output")],
        symbols=dims,
        divisibility={"head_dim": 64},
        constraints=["(head_dim >= 256)"],
    )
    case = synthetic_shape(c)
    assert numel_at(tensor_specs(c)[0], case.sizes) <= MAX_HELD_OUT_ELEMENTS
    assert case.sizes["head_dim"] % 64 == 0 and case.sizes["head_dim"] >= 256  # the checks still hold


def test_held_out_draws_no_instantiation_serves_are_drawn_again():
    """Found in the coverage sweep (2026-11-29): minimax_qknorm_rope is built for head 128
    and rope 64 only; a draw pairing them the other way round failed the whole plan."""
    c = Contract(
        entry="qk",
        args=[
            tensor("w", ["D"], "input"),
            tensor("cache", [-1, "R"], "input"),
            tensor("q", ["num_tokens", 512], "inout"),
        ],
        symbols=["num_tokens", "D", "R"],
    )
    pool = [inst(d, "int64_t", "128", "64", export="qk") for d in ("bf16", "fp16")]
    case = synthetic_shape(c, pool)
    drawn = draw_held_out(c, [case], 4, random.Random(2), instantiations=pool, dtypes=["bf16", "fp16"])
    assert drawn
    for shape in drawn:
        for dtype in ("bf16", "fp16"):
            select_instantiation(c, pool, dtype, shape.sizes)  # raises if none serves it


def test_a_width_equal_to_the_synthetic_token_count_is_not_taken_for_it():
    """Found in the coverage sweep (2026-11-29): awq_marlin_repack has no token symbol; the
    baseline's rejection moved pack_factor to 8, the synthetic shape's placeholder token
    count, and the held-out draws then varied pack_factor as if it counted tokens
    (903, 741: `size_n * tile_size / pack_factor` no longer divided)."""
    c = Contract(
        entry="repack",
        args=[
            tensor("out", ["size_k / tile_size", "size_n * tile_size / pack_factor"], "output", dtype="int32"),
            tensor("b_q_weight", ["size_k", "size_n / pack_factor"], "input", dtype="int32"),
        ],
        symbols=["size_k", "tile_size", "size_n", "pack_factor"],
    )
    case = ShapeCase(
        model="synthetic", tokens=8, sizes={"size_k": 128, "tile_size": 16, "size_n": 128, "pack_factor": 8}
    )
    assert token_symbol(c, [case]) is None
    drawn = draw_held_out(c, [case], 4, random.Random(7))
    assert drawn and all(s.sizes["pack_factor"] == 8 for s in drawn)
    assert _exact(c, case.sizes) and not _exact(c, {**case.sizes, "pack_factor": 903})


def hc_contract() -> Contract:
    """hc_combine's: rows `kHcCount * kHiddenSize` wide, both widths template arguments (Hc<4, 4096>)."""
    return Contract(
        entry="hc",
        args=[
            tensor("block", ["num_tokens", "kHiddenSize"], "output"),
            tensor("residual", ["num_tokens", "kHcCount * kHiddenSize"], "inout"),
            tensor("weight", ["kHcCount", "kHcCount * kHiddenSize"], "input"),
        ],
        symbols=["num_tokens", "kHiddenSize", "kHcCount"],
    )


def test_a_width_inside_an_expression_is_specialised_on_too():
    """hc_combine's rows are `kHcCount * kHiddenSize` wide and its module is Hc<4, 4096>;
    the synthetic shape had put 4 into kHiddenSize and left kHcCount at 128."""
    c = hc_contract()
    assert {"kHcCount", "kHiddenSize"} <= width_symbols(c)
    pool = [
        inst("bf16", "4", "4096", "true", "bf16_t", export="hc"),
        inst("bf16", "4", "5120", "true", "bf16_t", export="hc"),
    ]
    case = synthetic_shape(c, pool)
    assert (case.sizes["kHcCount"], case.sizes["kHiddenSize"]) == (4, 4096)
    assert select_instantiation(c, pool, "bf16", case.sizes) == pool[0]


def test_two_widths_bound_by_the_same_template_integers_keep_their_catalog_pairing():
    """Found reviewing the 24-model catalog (2026-12-04): hc_combine's module is Hc<4, 2560>, and
    its two widths cycled independently through {4, 2560}, so a held-out draw could pair
    kHcCount=2560 with kHiddenSize=4, which the set-inclusion check still called servable and
    the baseline then refuses."""
    c = hc_contract()
    widths = (2048, 2560, 4096)
    pool = [inst("bf16", "4", str(w), "true", "bf16_t", export="hc") for w in widths]
    catalog = [
        ShapeCase(model="m", tokens=t, sizes={"num_tokens": t, "kHcCount": 4, "kHiddenSize": w})
        for w in widths
        for t in (1, 64)
    ]
    drawn = draw_held_out(c, catalog, 40, random.Random(3), instantiations=pool, dtypes=["bf16"])
    assert len(drawn) == 40
    assert {(s.sizes["kHcCount"], s.sizes["kHiddenSize"]) for s in drawn} <= {(4, w) for w in widths}
    assert {s.sizes["kHiddenSize"] for s in drawn} == set(widths)  # still every instantiated width
