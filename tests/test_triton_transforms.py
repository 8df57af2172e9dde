"""optimize.transforms' Triton members: libcst edits of Triton regions (launch options, block sizes, defaults, autotune pins)."""

from __future__ import annotations

import libcst as cst
import pytest

from optimize.transforms import registry as transforms
from optimize.transforms import triton_edits as tt
from optimize.transforms.edits import NotApplicable, TransformError
from optimize.transforms.triton_block_size import block_size
from optimize.transforms.triton_kernel import autotune_pin, constexpr_default
from optimize.transforms.triton_launch_option import launch_option

LAUNCH = "k[(n, triton.cdiv(h, BLOCK))](\n        x,\n        y,\n        BLOCK=BLOCK,\n    )"
KERNEL = (
    "@triton.autotune(\n    configs=[\n        triton.Config({'B': 64}, num_warps=2),\n"
    "        triton.Config({'B': 128}, num_warps=4),\n    ],\n    key=['n'],\n)\n"
    "@triton.jit\ndef k(x, y, B: tl.constexpr, C: tl.constexpr = 64):\n    pass  # keep me\n"
)
REGIONS = {"launch:k": LAUNCH, "k": KERNEL}


def test_an_absent_option_is_added_in_the_call_layout():
    out = launch_option(REGIONS, launch="launch:k", option="num_warps", value=8)
    assert out["launch:k"] == LAUNCH.replace("BLOCK=BLOCK,\n", "BLOCK=BLOCK,\n        num_warps=8,\n")
    assert out["k"] is REGIONS["k"]
    one_line = {"launch:k": "k[(n,)](x, y, num_warps=4\n    )"}
    again = launch_option(one_line, launch="launch:k", option="num_stages", value=2)["launch:k"]
    assert again == "k[(n,)](x, y, num_warps=4, num_stages=2\n    )"


def test_bucketed_values_join_one_chain_with_the_baseline_as_fallback():
    out = launch_option(REGIONS, launch="launch:k", option="num_stages", value=2, bucket="T<=64", tokens="x.shape[0]")
    out = launch_option(out, launch="launch:k", option="num_stages", value=4, bucket="T>=512", tokens="x.shape[0]")
    value = tt.keyword(tt.parse_launch(out["launch:k"], "launch:k"), "num_stages")
    assert value is not None
    assert tt.code(value.value) == "(2 if x.shape[0] <= 64 else 4 if 511 < x.shape[0] else 3)"  # 3: Triton's default
    chosen, fallback = tt.split_chain(value.value, "x.shape[0]")
    assert {k: tt.code(v) for k, v in chosen.items()} == {"T<=64": "2", "T>=512": "4"} and tt.code(fallback) == "3"
    for tokens, want in ((1, 2), (100, 3), (4096, 4)):  # the chain means what it says at each token count
        assert eval(tt.code(value.value), {"x": type("X", (), {"shape": (tokens,)})}) == want


def test_a_block_size_changes_with_its_grid_and_keeps_the_keyword_name():
    out = block_size(REGIONS, launch="launch:k", name="BLOCK", value=256)["launch:k"]
    assert out == LAUNCH.replace("cdiv(h, BLOCK)", "cdiv(h, 256)").replace("BLOCK=BLOCK", "BLOCK=256")
    literal = {"launch:k": "k[(triton.cdiv(h, 128), 128)](x, 128, BLOCK=128)"}
    out = block_size(literal, launch="launch:k", name="BLOCK", value=64)["launch:k"]
    assert out == "k[(triton.cdiv(h, 64), 64)](x, 128, BLOCK=64)"  # the grid's literal follows, an argument's not


def test_constexpr_default_and_autotune_pin_edit_the_kernel_only_where_meant():
    out = constexpr_default(REGIONS, kernel="k", name="C", value=128)["k"]
    assert out == KERNEL.replace("C: tl.constexpr = 64", "C: tl.constexpr = 128")
    pinned = autotune_pin(REGIONS, kernel="k", index=1)["k"]
    assert "{'B': 64}" not in pinned and "triton.Config({'B': 128}, num_warps=4)," in pinned
    assert pinned.endswith("def k(x, y, B: tl.constexpr, C: tl.constexpr = 64):\n    pass  # keep me\n")
    cst.parse_module(pinned)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: launch_option(REGIONS, launch="launch:k", option="num_warps", value=3), "num_warps must be one of"),
        (
            lambda: launch_option(REGIONS, launch="launch:k", option="num_stages", value=6),
            "num_stages must be in 1..5",
        ),
        (lambda: block_size(REGIONS, launch="launch:k", name="BLOCK", value=96), "must be a power of two"),
        (lambda: constexpr_default(REGIONS, kernel="k", name="C", value=0), "must be a power of two"),
        (lambda: launch_option({"launch:k": "k(x"}, launch="launch:k", option="num_warps", value=2), "not parse"),
    ],
)
def test_values_triton_refuses_are_transform_errors(call, message):
    with pytest.raises(TransformError, match=message):
        call()


def test_nothing_to_do_is_not_applicable():
    with pytest.raises(NotApplicable):
        block_size(REGIONS, launch="launch:k", name="OTHER", value=64)
    with pytest.raises(NotApplicable):
        constexpr_default(REGIONS, kernel="k", name="B", value=64)  # no default
    with pytest.raises(NotApplicable):
        launch_option({"launch:k": "k[(1,)](x, num_warps=4)"}, launch="launch:k", option="num_warps", value=4)


def test_registered_for_the_search():
    out = transforms.apply("triton_launch_option", REGIONS, {"launch": "launch:k", "option": "num_warps", "value": 2})
    assert "num_warps=2" in out["launch:k"]
    assert {"triton_launch_option", "triton_block_size", "triton_constexpr_default", "triton_autotune_pin"} <= set(
        transforms.TRANSFORMS
    )
