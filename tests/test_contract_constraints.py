"""The kernel's own checks as constraints (contract.constraints) and where the
harness uses them: synthetic shapes, open int scalars, held-out draws. Pure Python."""

from __future__ import annotations

import random

from contract import completion, constraints
from contract.plan import plan_call
from contract.shapes import draw_held_out, synthetic_shape
from contract.sizes import resolve_sizes
from pipeline.records import ArgSpec, Contract, ScalarSpec, ShapeCase, TensorSpec


def tensor(name, shape, role="input", dtype="T"):
    return ArgSpec(kind="tensor", tensor=TensorSpec(name=name, shape=shape, dtype=dtype, role=role))


def scalar(name, type_, value=None):
    return ArgSpec(kind="scalar", scalar=ScalarSpec(name=name, type=type_, value=value))


def kda_like():
    """kda_fused_decode: `const int64_t kH = A_log.shape()[0]; RuntimeCheck(kH == 3 || kH == 6 || kH == 12)`."""
    return Contract(
        entry="run",
        args=[tensor("b", ["batch", "kH"]), tensor("A_log", ["kH"]), tensor("out", ["batch", "kSeg"], "output")],
        symbols=["batch", "kH", "kSeg"],
        constraints=["(((kH == 3) or (kH == 6)) or (kH == 12))"],
    )


def gate_like():
    """residual_gate_add2: an open int scalar only the kernel's checks relate to the sizes."""
    return Contract(
        entry="residual_gate_add2",
        args=[
            tensor("out", ["numel"], "output"),
            tensor("gate", ["gate_numel"]),
            scalar("hidden_size", "int"),
            scalar("broadcast_gate", "bool"),
        ],
        symbols=["numel", "gate_numel"],
        constraints=[
            "((hidden_size > 0) and ((numel % hidden_size) == 0))",
            "(gate_numel == (hidden_size if broadcast_gate else numel))",
        ],
    )


def test_a_constraint_holds_fails_or_cannot_be_evaluated():
    c = "((numel % hidden_size) == 0)"
    assert constraints.holds(c, {"numel": 12, "hidden_size": 4}) is True
    assert constraints.holds(c, {"numel": 12, "hidden_size": 5}) is False
    assert constraints.holds(c, {"numel": 12}) is None  # a name with no value: neither kept nor broken
    assert constraints.holds(c, {"numel": 12, "hidden_size": 0}) is None  # division by zero
    # only the restricted Python extract writes is ever evaluated
    assert constraints.holds("__import__('os').getcwd() == 0", {}) is None
    assert constraints.holds("(x).real == 1", {"x": 1}) is None
    assert constraints.holds("[x] == [1]", {"x": 1}) is None


def test_solve_moves_free_sizes_until_the_checks_hold():
    c = kda_like()
    sizes, broken = constraints.solve(c, {"batch": 8, "kH": 128, "kSeg": 128}, ["kH", "kSeg"])
    assert not broken and sizes["kH"] in (3, 6, 12) and sizes["batch"] == 8 and sizes["kSeg"] == 128
    # a size that is not free is never changed, and the broken constraint is reported
    sizes, broken = constraints.solve(c, {"batch": 8, "kH": 128, "kSeg": 128}, ["kSeg"])
    assert sizes["kH"] == 128 and broken == c.constraints
    # `accepts` (the contract's declared limits) has the last word
    sizes, broken = constraints.solve(
        c, {"batch": 8, "kH": 128, "kSeg": 128}, ["kH"], accepts=lambda n, v: v not in (3, 12)
    )
    assert sizes["kH"] == 6 and not broken


def test_solve_takes_the_value_an_equality_states():
    c = Contract(
        entry="store",
        args=[tensor("qkv", ["tokens", "input_width"]), tensor("q", ["tokens", "query_width"])],
        symbols=["tokens", "input_width", "query_width", "kv_heads", "head_dim", "value_dim"],
        constraints=[
            "(input_width == (query_width + (kv_heads * (head_dim + value_dim))))",
            "((query_width % head_dim) == 0)",
        ],
    )
    start = {"tokens": 8, "input_width": 128, "query_width": 128, "kv_heads": 2, "head_dim": 64, "value_dim": 64}
    sizes, broken = constraints.solve(c, start, ["input_width", "query_width", "kv_heads", "head_dim", "value_dim"])
    assert not broken and sizes["input_width"] == 128 + 2 * 128


def test_an_open_int_scalar_is_settled_per_case_from_that_cases_sizes():
    c = gate_like()
    assert constraints.open_ints(c) == {"hidden_size"}
    assert constraints.settle_scalars(c, {"numel": 4096, "gate_numel": 4096}) == {"hidden_size": 4096}
    settled = constraints.settle_scalars(c, {"numel": 24, "gate_numel": 24})
    assert 24 % settled["hidden_size"] == 0
    # a scalar no constraint mentions stays open (the harness refuses it, as before)
    other = c.model_copy(update={"constraints": []})
    assert constraints.open_ints(other) == set() and constraints.settle_scalars(other, {"numel": 8}) == {}
    assert completion.open_scalar(other, 2) and not completion.open_scalar(c, 2)
    # the planned call passes the settled value
    sizes = resolve_sizes(c, ShapeCase(model="m", tokens=1, sizes={"numel": 96, "gate_numel": 96}))
    call = plan_call(c, sizes, "bf16")
    assert call.args[2] == sizes["hidden_size"] and 96 % sizes["hidden_size"] == 0


def test_a_scalar_named_after_a_size_is_that_size_never_settled_apart():
    """Found on the H200 (2026-11-29): timestep_embedding's `dim` is a scalar and the width
    of its output; re-settled on its own at a held-out draw, it became 0 (SIGFPE)."""
    c = Contract(
        entry="emb",
        args=[tensor("out", ["batch_size", "dim"], "output"), scalar("dim", "int")],
        symbols=["batch_size", "dim"],
        constraints=["((dim % 8) == 0)"],
    )
    assert constraints.open_ints(c) == set()
    drawn = draw_held_out(c, [ShapeCase(model="m", tokens=2, sizes={"batch_size": 2, "dim": 64})], 4, random.Random(0))
    assert drawn and all(case.sizes["dim"] > 0 and case.sizes["dim"] % 8 == 0 for case in drawn)


def test_a_count_scalar_starts_at_none():
    """moe_topk_sigmoid_out: `num_fused_shared_experts <= 1`; settling it at 1 made the kernel
    write a shared-expert column past topk (the sweep caught the write outside the tensor)."""
    c = Contract(
        entry="topk",
        args=[tensor("w", ["num_tokens", "topk"], "output"), scalar("num_fused_shared_experts", "int")],
        symbols=["num_tokens", "topk"],
        constraints=["(num_fused_shared_experts <= 1)"],
    )
    assert constraints.settle_scalars(c, {"num_tokens": 4, "topk": 8}) == {"num_fused_shared_experts": 0}
    # also where a size of 1 would satisfy the check (a held-out draw at T=1)
    assert constraints.settle_scalars(c, {"num_tokens": 1, "topk": 8}) == {"num_fused_shared_experts": 0}
    # a size is never 0
    sizes, broken = constraints.solve(kda_like(), {"batch": 8, "kH": 128, "kSeg": 128}, ["kH"])
    assert sizes["kH"] > 0 and not broken


def test_each_side_of_a_conjunction_is_mended_on_its_own():
    """Found in the coverage sweep (2026-11-29): moe_align_block_size checks `num_experts > 0
    && block_size > 0`; both scalars started at 0 and no single change mended the whole
    conjunction, so the baseline ran with 0 experts and hit an illegal instruction."""
    c = Contract(
        entry="align",
        args=[tensor("ids", ["n"]), scalar("num_experts", "int"), scalar("block_size", "int")],
        symbols=["n"],
        constraints=["(num_experts <= 8192)", "((num_experts > 0) and (block_size > 0))"],
    )
    settled = constraints.settle_scalars(c, {"n": 8})
    assert settled["num_experts"] > 0 and settled["block_size"] > 0
    assert not constraints.violated(c, {"n": 8, **settled})


def test_the_synthetic_shape_satisfies_the_kernels_checks():
    case = synthetic_shape(kda_like())
    assert case.sizes["kH"] in (3, 6, 12)
    gate = synthetic_shape(gate_like())
    assert not constraints.violated(gate_like(), gate.sizes)
    assert gate.sizes["gate_numel"] == gate.sizes["numel"]  # broadcast_gate is an open bool: False
    assert gate.sizes["numel"] % gate.sizes["hidden_size"] == 0


def test_held_out_draws_the_kernels_checks_refuse_are_drawn_again():
    c = Contract(
        entry="norm",
        args=[tensor("x", ["num_tokens", "hidden"]), tensor("y", ["num_tokens", "hidden"], "output")],
        symbols=["num_tokens", "hidden"],
        constraints=["((num_tokens % 2) == 1)"],
    )
    catalog = [ShapeCase(model="m", tokens=3, sizes={"num_tokens": 3, "hidden": 256})]
    drawn = draw_held_out(c, catalog, 6, random.Random(5))
    assert drawn and all(case.sizes["num_tokens"] % 2 == 1 for case in drawn)
    refusing = c.model_copy(update={"constraints": ["(num_tokens > 100000)"]})
    assert draw_held_out(refusing, catalog, 3, random.Random(5)) == []


def test_a_multiple_of_a_product_of_sizes_is_found():
    """wan_norm_silu_post: `elements % (channels * spatial) == 0` and `pixels == elements // channels`."""
    c = Contract(
        entry="post",
        args=[tensor("x", ["elements"]), tensor("d", ["pixels"]), tensor("g", ["channels"])],
        symbols=["elements", "pixels", "channels", "spatial"],
        constraints=[
            "((elements > 0) and ((elements % (channels * spatial)) == 0))",
            "(pixels == (elements // channels))",
        ],
    )
    sizes, broken = constraints.solve(
        c, {"elements": 8, "pixels": 128, "channels": 128, "spatial": 128}, ["elements", "pixels"]
    )
    assert not broken and sizes["elements"] == 128 * 128 and sizes["pixels"] == 128
