"""Byte counting, floors and the device cache (optimize.harness.roofline), pure Python."""

from __future__ import annotations

import pytest

from contract.plan import plan_call
from optimize.harness import roofline
from optimize.harness.protocol import DeviceInfo, Traffic
from pipeline.records import ArgSpec, Contract, ScalarSpec, TensorSpec


def t(name, shape, role, strides=None):
    return ArgSpec(kind="tensor", tensor=TensorSpec(name=name, shape=shape, dtype="T", role=role, strides=strides))


SILU = Contract(
    entry="run_activation",
    args=[
        t("input", ["num_tokens", "2*hidden_size"], "input"),
        t("out", ["num_tokens", "hidden_size"], "output"),
        ArgSpec(kind="scalar", scalar=ScalarSpec(name="type", type="str", value="silu")),
    ],
    symbols=["num_tokens", "hidden_size"],
)
FUSED = Contract(
    entry="fused_add_rmsnorm",
    args=[
        t("input", ["num_tokens", "hidden_size"], "inout"),
        t("residual", ["num_tokens", "hidden_size"], "inout"),
        t("weight", ["hidden_size"], "input"),
        ArgSpec(kind="scalar", scalar=ScalarSpec(name="eps", type="float", value=1e-6)),
    ],
    symbols=["num_tokens", "hidden_size"],
)
RMS = Contract(
    entry="rmsnorm",
    args=[
        t("input", ["num_tokens", "hidden_size"], "input", strides=["input_stride", 1]),
        t("weight", ["hidden_size"], "input"),
        t("output", ["num_tokens", "hidden_size"], "output", strides=["output_stride", 1]),
        ArgSpec(kind="scalar", scalar=ScalarSpec(name="eps", type="float", value=1e-6)),
    ],
    symbols=["num_tokens", "hidden_size", "input_stride", "output_stride"],
)

DEVICE = DeviceInfo(
    name="NVIDIA H200",
    sm_count=132,
    l2_bytes=60 * 2**20,
    copy_gbps=4000.0,
    copy_spread_pct=0.5,
    min_kernel_us=2.0,
    torch="2.11",
    cuda="13.0",
    measured_at="2026-01-01T00:00:00+00:00",
)


def test_silu_bytes_input_read_once_output_written_once():
    plan = plan_call(SILU, {"num_tokens": 8192, "hidden_size": 14336}, "bf16")
    assert roofline.contract_bytes(plan, SILU) == 8192 * 14336 * 2 * 2 + 8192 * 14336 * 2


def test_fused_inout_counted_twice_weight_once():
    plan = plan_call(FUSED, {"num_tokens": 8192, "hidden_size": 4096}, "fp16")
    assert roofline.contract_bytes(plan, FUSED) == 2 * (2 * 8192 * 4096 * 2) + 4096 * 2


def test_strided_layout_counts_logical_bytes_only():
    import random

    plan = plan_call(RMS, {"num_tokens": 7, "hidden_size": 256}, "bf16", "strided", random.Random(1))
    assert roofline.contract_bytes(plan, RMS) == 7 * 256 * 2 * 2 + 256 * 2


def test_extra_bytes_formulas_add_and_notes_do_not():
    extra = SILU.model_copy(update={"extra_bytes": {"scales": "num_tokens * 4", "note": "reads a lookup table once"}})
    plan = plan_call(extra, {"num_tokens": 10, "hidden_size": 8}, "bf16")
    assert roofline.contract_bytes(plan, extra) == 10 * 16 * 2 + 10 * 8 * 2 + 40


def test_floor_is_bandwidth_time_or_smallest_kernel():
    assert roofline.floor_us(4_000_000_000, 4000.0, 2.0) == pytest.approx(1000.0)
    assert roofline.floor_us(1000, 4000.0, 2.0) == 2.0
    latency = [(4096, 3.0), (65536, 4.5), (1 << 20, 6.0)]
    assert roofline.floor_us(1000, 4000.0, 2.0, latency) == 2.0, "below the smallest measured size: no latency term"
    assert roofline.floor_us(100_000, 4000.0, 2.0, latency) == 4.5, "the copy at the largest size not above"
    assert roofline.floor_us(4_000_000_000, 4000.0, 2.0, latency) == pytest.approx(1000.0), "bandwidth wins at size"
    assert roofline.latency_floor_us(65536, latency) == 4.5 and roofline.latency_floor_us(4095, latency) == 0.0


def test_shape_timing_figures():
    nbytes = 8192 * 14336 * 6
    row = roofline.shape_timing(
        label="L",
        sizes={"num_tokens": 8192},
        dtype="bf16",
        time_us=200.0,
        spread_pct=1.234,
        nbytes=nbytes,
        device=DEVICE,
        baseline_us=250.0,
    )
    assert row.gbps == pytest.approx(nbytes / 200e3, abs=0.01)  # rounded to 2 decimals
    assert row.pct_of_copy_bw == pytest.approx(100 * row.gbps / 4000.0, rel=1e-3)
    assert row.time_over_floor == pytest.approx(200.0 / (nbytes / 4e6), rel=1e-3)
    assert row.speedup == pytest.approx(1.25) and row.baseline_us == 250.0
    tiny = roofline.shape_timing(
        label="T", sizes={}, dtype="bf16", time_us=3.0, spread_pct=0, nbytes=100, device=DEVICE
    )
    assert tiny.time_over_floor == pytest.approx(1.5) and tiny.speedup is None


def test_traffic_splits_the_tensors_bytes_into_read_and_written():
    silu = plan_call(SILU, {"num_tokens": 8, "hidden_size": 4096}, "bf16")
    assert roofline.contract_traffic(silu) == Traffic(read=8 * 2 * 4096 * 2, written=8 * 4096 * 2)
    fused = plan_call(FUSED, {"num_tokens": 8, "hidden_size": 4096}, "bf16")
    # input and residual are inout (read and written), the weight is read
    assert roofline.contract_traffic(fused) == Traffic(read=2 * 8 * 4096 * 2 + 4096 * 2, written=2 * 8 * 4096 * 2)


def test_a_scratch_tensor_is_neither_drawn_nor_judged_nor_counted():
    """SGLang's wrapper allocates and drops a scratch buffer: no kernel has to touch it, so the floor
    counts none of its bytes, the harness draws no values for it and never compares it."""
    gate = Contract(
        entry="topk",
        args=[
            t("logits", ["n", "e"], "input"),
            t("ids", ["n", "k"], "output"),
            t("workspace", ["n * e"], "scratch"),
            t("state", ["n"], "inout"),
        ],
        symbols=["n", "e", "k"],
    )
    plan = plan_call(gate, {"n": 4, "e": 8, "k": 2}, "fp32")
    roles = {p.name: (p.filled, p.judged) for p in plan.tensors}
    assert roles == {
        "logits": (True, False),
        "ids": (False, True),
        "workspace": (False, False),
        "state": (True, True),
    }
    assert roofline.contract_bytes(plan) == 4 * 8 * 4 + 4 * 2 * 4 + 2 * 4 * 4
    assert roofline.contract_traffic(plan) == Traffic(read=4 * 8 * 4 + 4 * 4, written=4 * 2 * 4 + 4 * 4)


def test_the_latency_floor_prices_the_access_pattern():
    """Copy at 2 min(R, W), read stream at R, write stream at W: the slowest of the three, each off
    its curve at the largest size not above; the copy at R + W without the split or the curves."""
    device = DEVICE.model_copy(
        update={
            "copy_gbps": 4000.0,
            "min_kernel_us": 0.4,
            "copy_latency_us": [(4096, 0.6), (65536, 0.7), (1 << 20, 1.0)],
            "read_latency_us": [(4096, 0.5), (65536, 0.55), (1 << 20, 0.8)],
            "write_latency_us": [(4096, 0.45), (65536, 0.5), (1 << 20, 0.9)],
        }
    )
    read_mostly = Traffic(read=1 << 20, written=4096)  # a router: reads the logits, writes a few ids
    nbytes = read_mostly.read + read_mostly.written
    assert roofline.pattern_latency_us(read_mostly, device) == 0.8, "the read stream of 1 MiB, not a 1 MiB copy"
    assert roofline.device_floor_us(nbytes, device, read_mostly) == 0.8
    assert roofline.device_floor_us(nbytes, device) == 1.0, "no split: the copy at the bytes moved"
    balanced = Traffic(read=1 << 19, written=1 << 19)
    assert roofline.device_floor_us(1 << 20, device, balanced) == 1.0, "R = W: the copy of R + W bytes"
    write_mostly = Traffic(read=0, written=1 << 20)
    assert roofline.device_floor_us(1 << 20, device, write_mostly) == 0.9
    tiny = Traffic(read=64, written=64)
    assert roofline.device_floor_us(128, device, tiny) == 0.4, "below every curve: the smallest kernel"
    old_cache = device.model_copy(update={"read_latency_us": [], "write_latency_us": []})
    assert roofline.device_floor_us(nbytes, old_cache, read_mostly) == 1.0
    row = roofline.shape_timing(
        label="L", sizes={}, dtype="bf16", time_us=1.6, spread_pct=0, nbytes=nbytes, device=device, traffic=read_mostly
    )
    assert row.time_over_floor == pytest.approx(2.0)


def test_device_cache_round_trip_and_safe_names(tmp_path):
    path = roofline.cache_path(tmp_path, "NVIDIA H200 NVL/x")
    assert path.name == "NVIDIA-H200-NVL-x.json"
    assert roofline.load_cached(tmp_path, "NVIDIA H200") is None
    roofline.save(DEVICE, tmp_path)
    assert roofline.load_cached(tmp_path, "NVIDIA H200") == DEVICE
    (tmp_path / "NVIDIA-H200.json").write_text("{not json")
    assert roofline.load_cached(tmp_path, "NVIDIA H200") is None


def test_the_floor_counts_every_byte_along_the_rows():
    silu = plan_call(SILU, {"num_tokens": 8, "hidden_size": 4096}, "bf16")
    assert roofline.row_symbol(SILU) == "num_tokens"
    assert roofline.must_move_bytes(silu, SILU) == 8 * 4096 * 2 + 8 * 8192 * 2  # the output, and the input read
    fused = plan_call(FUSED, {"num_tokens": 8, "hidden_size": 4096}, "bf16")
    # an in-place op gets a floor: input and residual read and written; the weight (another leading size) not
    assert roofline.row_symbol(FUSED) == "num_tokens"
    assert roofline.must_move_bytes(fused, FUSED) == 2 * 2 * 8 * 4096 * 2
    # an op whose floor does not apply is held to its outputs alone
    assert roofline.must_move_bytes(silu, SILU.model_copy(update={"byte_bound": False})) == 8 * 4096 * 2


def test_a_time_below_the_written_floor_is_implausible():
    nbytes = 400_000_000  # 400 MB of outputs at 4000 GB/s: 100 us at least
    assert roofline.must_move_floor_us(nbytes, 4000.0) == pytest.approx(100.0)
    assert roofline.implausible_reason("candidate", "L", "bf16", 100.0, nbytes, 4000.0) == ""
    edge = roofline.IMPLAUSIBLE_FRACTION * 100.0
    assert roofline.implausible_reason("candidate", "L", "bf16", edge, nbytes, 4000.0) == ""
    reason = roofline.implausible_reason("candidate", "L", "bf16", edge * 0.99, nbytes, 4000.0)
    assert reason.startswith("implausible time: the candidate takes")
    assert "timed shape L bf16" in reason and "physical floor of 100 us" in reason and "4000 GB/s" in reason
    assert roofline.implausible_reason("baseline", "L", "bf16", 5.0, nbytes, 4000.0).startswith(
        "implausible time: the baseline"
    )
    # nothing known to be written, or no bandwidth measured: no floor, never implausible
    assert roofline.implausible_reason("candidate", "L", "bf16", 0.001, 0, 4000.0) == ""
    assert roofline.implausible_reason("candidate", "L", "bf16", 0.001, nbytes, 0.0) == ""
    assert 0.5 < roofline.IMPLAUSIBLE_FRACTION < 1.0


def test_a_shape_timing_says_whether_its_floor_applies():
    device = DeviceInfo(
        name="H200", sm_count=132, l2_bytes=60 << 20, copy_gbps=4000.0, copy_spread_pct=1.0, min_kernel_us=2.0,
        torch="2.11", cuda="13.0", measured_at="t",
    )  # fmt: skip
    common = dict(label="L", sizes={"n": 1}, dtype="bf16", time_us=8.0, spread_pct=1.0, nbytes=4_000_000, device=device)
    byte_bound = roofline.shape_timing(**common)
    assert byte_bound.floor_applies and byte_bound.over_floor == byte_bound.time_over_floor == 4.0  # 8 µs / 2 µs
    sort = roofline.shape_timing(**common, byte_bound=False)
    assert not sort.floor_applies and sort.over_floor is None
