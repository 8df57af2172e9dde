"""The harness's torch-side pieces on a real GPU (skipped on CPU machines).

Covers what the CPU tests cannot: filling buffers on the device (poison bits,
guard noise, value distributions), the comparison on real torch tensors,
the float64 references against the native PyTorch forms, graph timing, the
device ceilings, and one end-to-end worker run of a real baseline.
"""

from __future__ import annotations

import pathlib
import random

import pytest

from contract.plan import plan_call
from optimize.harness import compare, inputs, references, roofline, timing
from pipeline.records import ArgSpec, Contract, ScalarSpec, TensorSpec

pytestmark = pytest.mark.gpu
ROOT = pathlib.Path(__file__).resolve().parent.parent


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
    reference="silu_and_mul",
)
RMS = Contract(
    entry="rmsnorm",
    args=[
        t("input", ["num_tokens", "hidden_size"], "input", ["input_stride", 1]),
        t("weight", ["hidden_size"], "input"),
        t("output", ["num_tokens", "hidden_size"], "output", ["output_stride", 1]),
        ArgSpec(kind="scalar", scalar=ScalarSpec(name="eps", type="float", value=1e-6)),
    ],
    symbols=["num_tokens", "hidden_size", "input_stride", "output_stride"],
    reference="rmsnorm",
)


@pytest.fixture(scope="module")
def torch():
    import torch as _torch

    return _torch


def test_images_poison_guards_and_values(torch):
    plan = plan_call(RMS, {"num_tokens": 5, "hidden_size": 256}, "bf16", "strided", random.Random(3))
    gen = torch.Generator(device="cuda")
    gen.manual_seed(7)
    images = inputs.make_images(plan, "normal", gen, "cuda", outputs="poison")
    x, w, out = plan.tensors
    bits = images["output"].view(torch.int16)
    assert bool((bits == inputs.poison_value("bf16")).all())
    values = inputs.view_of(images["input"], x).float()
    assert values.isfinite().all() and values.std() > 0.5 and (values != 0).float().mean() > 0.99
    noise = images["input"][: x.offset].float()
    assert noise.abs().max() > 10  # guard bands hold large noise, not zeros
    bufs = inputs.Buffers(plan, "cuda")
    bufs.load(images)
    assert torch.equal(bufs.views["input"], inputs.view_of(images["input"], x))
    assert bufs.views["input"].stride() == x.strides and bufs.views["input"].data_ptr() % 256 == 0


def test_edge_distribution_has_zeros_tiny_large_and_negative_rows(torch):
    plan = plan_call(SILU, {"num_tokens": 64, "hidden_size": 512}, "bf16")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1)
    vals = inputs.logical_values(plan.tensors[0], "edge", gen, "cuda").float()
    assert vals.isfinite().all()
    row_max = vals.abs().amax(dim=1)
    assert (row_max == 0).any() and (row_max > 1e15).any() and ((row_max > 0) & (row_max < 1e-18)).any()
    assert (vals.amax(dim=1) < 0).any()


def test_sequence_offsets_are_filled_as_a_prefix_sum_on_the_device(torch):
    varlen = Contract(
        entry="conv",
        args=[
            t("x", ["T", "D"], "input"),
            ArgSpec(
                kind="tensor",
                tensor=TensorSpec(
                    name="qsl",
                    shape=["B + 1"],
                    dtype="int32",
                    role="input",
                    value_range=("0", "T"),
                    structure="offsets",
                ),
            ),
        ],
        symbols=["T", "D", "B"],
    )
    plan = plan_call(varlen, {"T": 37, "D": 8, "B": 5}, "bf16")
    gen = torch.Generator(device="cuda")
    for seed in range(5):
        gen.manual_seed(seed)
        vals = inputs.logical_values(plan.tensors[1], "normal", gen, "cuda")
        assert vals.dtype == torch.int32 and vals.shape == (6,) and vals.device.type == "cuda"
        assert vals[0] == 0 and vals[-1] == 37 and bool((vals[1:] >= vals[:-1]).all())


def test_distinct_slots_are_filled_without_repeats_on_the_device(torch):
    store = Contract(
        entry="store",
        args=[
            t("x", ["T", "D"], "input"),
            ArgSpec(
                kind="tensor",
                tensor=TensorSpec(
                    name="loc", shape=["T"], dtype="int64", role="input", value_range=(0, "P - 1"), structure="distinct"
                ),
            ),
        ],
        symbols=["T", "D", "P"],
    )
    plan = plan_call(store, {"T": 40, "D": 8, "P": 41}, "bf16")
    gen = torch.Generator(device="cuda")
    for seed in range(5):
        gen.manual_seed(seed)
        vals = inputs.logical_values(plan.tensors[1], "normal", gen, "cuda")
        assert vals.dtype == torch.int64 and vals.device.type == "cuda"
        assert len(set(vals.tolist())) == 40 and int(vals.min()) >= 0 and int(vals.max()) <= 40


def test_compare_on_torch_tensors_matches_the_rules(torch):
    e = torch.tensor([1.0, 2.0, 3.0, float("inf")], dtype=torch.bfloat16, device="cuda")
    g = e.clone()
    assert compare.compare_tensor("out", e, g, "bf16", shape=(4,)).ok
    g[1] = float("nan")
    v = compare.compare_tensor(
        "out", e, g, "bf16", shape=(4,), not_written=g.view(torch.int16) == inputs.poison_value("bf16")
    )
    assert not v.ok and "out[1] is nan where the baseline is finite" in v.reason
    g = e.clone()
    g.view(torch.int16)[2] = inputs.poison_value("bf16")
    v = compare.compare_tensor(
        "out", e, g, "bf16", shape=(4,), not_written=g.view(torch.int16) == inputs.poison_value("bf16")
    )
    assert not v.ok and "out[2] was never written" in v.reason


def test_rows_in_no_fixed_order_on_torch_tensors(torch):
    """compare.in_order("rows") on the device: int32 indices (topk_transform_paged) and bf16 with the poison."""
    e = torch.tensor([[5, 1, 9], [7, 3, 2]], dtype=torch.int32, device="cuda")
    g = torch.tensor([[9, 5, 1], [2, 7, 3]], dtype=torch.int32, device="cuda")
    assert not compare.compare_tensor("idx", e, g, "int32", shape=(2, 3)).ok
    se, sg = compare.in_order(e, "rows"), compare.in_order(g, "rows")
    assert compare.compare_tensor("idx", se, sg, "int32", shape=(2, 3)).ok
    g[1, 0] = 4
    assert not compare.compare_tensor("idx", se, compare.in_order(g, "rows"), "int32", shape=(2, 3)).ok
    f = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.bfloat16, device="cuda")
    h = torch.tensor([[2.0, 1.0], [4.0, 3.0]], dtype=torch.bfloat16, device="cuda")
    h.view(torch.int16)[0, 0] = inputs.poison_value("bf16")
    sh = compare.in_order(h, "rows")
    v = compare.compare_tensor(
        "out", compare.in_order(f, "rows"), sh, "bf16", shape=(2, 2),
        not_written=sh.view(torch.int16) == inputs.poison_value("bf16"),
    )  # fmt: skip
    assert not v.ok and "never written" in v.reason


def test_fp8_images_decoys_and_comparison(torch):
    """float8_e4m3fn tensors (quantizer outputs and inputs): finite values and noise,
    NaN poison, a decoy through float32, comparison widened to float32."""
    c = Contract(
        entry="q",
        args=[t("x", ["n", "d"], "input"), t("q", ["n", "d"], "output")],
        symbols=["n", "d"],
    )
    c = c.model_copy(
        update={
            "args": [
                c.args[0].model_copy(update={"tensor": c.args[0].tensor.model_copy(update={"dtype": "float8_e4m3fn"})}),
                c.args[1].model_copy(update={"tensor": c.args[1].tensor.model_copy(update={"dtype": "float8_e4m3fn"})}),
            ]
        }
    )
    plan = plan_call(c, {"n": 16, "d": 128}, "bf16")
    x, q = plan.tensors
    gen = torch.Generator(device="cuda")
    gen.manual_seed(5)
    for distribution in ("normal", "uniform", "edge"):
        images = inputs.make_images(plan, distribution, gen, "cuda", outputs="poison")
        assert images["x"].dtype == torch.float8_e4m3fn and images["x"].float().isfinite().all()
        assert bool((images["q"].view(torch.uint8) == 0x7F).all()) and images["q"].float().isnan().all()
        decoy = inputs.decoy_image(images["x"], x)
        assert torch.equal(decoy.float(), -images["x"].float())
    garbage = inputs.garbage_image(q, gen, "cuda")
    assert garbage.float().isfinite().all()
    e = inputs.view_of(images["x"], x).clone()
    assert compare.compare_tensor("q", e, e.clone(), "fp8e4m3", shape=x.shape).ok
    g = e.clone()
    g.view(torch.uint8)[0, 0] = 0x7F
    v = compare.compare_tensor("q", e, g, "fp8e4m3", shape=x.shape, not_written=g.view(torch.uint8) == 0x7F)
    assert not v.ok and "q[0, 0] was never written" in v.reason


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_references_agree_with_native_forms(torch, dtype):
    tdt = inputs.torch_dtype(dtype)
    x = torch.randn(33, 2 * 768, device="cuda").to(tdt)
    out = torch.empty(33, 768, device="cuda", dtype=tdt)
    call = references.RefCall(["input", "out"], ["input", "output"], {"input": x, "out": out}, {"type": "silu"})
    expected = references.get("silu_and_mul").expected(call)["out"]
    fn, args = references.get("silu_and_mul").eager(call)
    err, problem = compare.relative_error(fn(*args), expected)
    assert not problem and err < compare.TOLERANCES[dtype].ref_rel
    w = torch.randn(768, device="cuda").to(tdt)
    r = torch.randn(33, 768, device="cuda").to(tdt)
    h = torch.randn(33, 768, device="cuda").to(tdt)
    call = references.RefCall(
        ["input", "residual", "weight"],
        ["inout", "inout", "input"],
        {"input": h, "residual": r, "weight": w},
        {"eps": 1e-6},
    )
    exp = references.get("fused_add_rmsnorm").expected(call)
    fn, args = references.get("fused_add_rmsnorm").eager(call)
    got_out, got_res = fn(*args)
    assert compare.relative_error(got_out, exp["input"])[0] < compare.TOLERANCES[dtype].ref_rel
    assert compare.relative_error(got_res, exp["residual"])[0] == 0.0


def test_graph_timing_and_device_ceilings(torch, tmp_path):
    stream = torch.cuda.Stream()
    a = torch.randn(1 << 24, device="cuda")
    b = torch.empty_like(a)
    graph = timing.capture([lambda: b.copy_(a)] * 10, stream)
    samples = timing.time_graphs({"copy": graph}, {"copy": 10}, 5, stream)["copy"]
    assert len(samples) == 5 and all(s > 0 for s in samples)
    info = roofline.device_info(tmp_path)
    assert info.copy_gbps > 1000 and 0 < info.min_kernel_us < 50 and info.l2_bytes > 0
    assert roofline.load_cached(tmp_path, info.name) == info
    sizes = [size for size, _ in info.copy_latency_us]
    times = [us for _, us in info.copy_latency_us]
    assert sizes == list(roofline.LATENCY_BYTES) and all(t > 0 for t in times)
    assert times[-1] > times[0], "moving 256 MiB takes longer than moving 4 KiB"
    variants = info.floor_variants_us
    empties = {"one-element add_", "empty kernel", "empty kernel + PDL"}
    assert {"torch copy_", "vector copy", "vector copy + PDL"} | empties == set(variants)
    copies = [times for name, times in variants.items() if name not in empties]
    for i, (size, fastest) in enumerate(info.copy_latency_us):
        assert fastest == min(times[i][1] for times in copies) and all(times[i][0] == size for times in copies)
    assert info.min_kernel_us == min(variants[name][0][1] for name in empties)


def test_the_floor_copy_copies_exactly_its_bytes(torch):
    """The hand-written floor kernel moves every 16-byte vector and nothing past the end."""
    from optimize.harness.floor_kernels import FloorKernels

    kernels = FloorKernels()
    for pdl in (False, True):
        src = torch.randint(0, 255, (3 * 4096 + 48,), dtype=torch.uint8, device="cuda")
        dst = torch.zeros(src.numel() + 64, dtype=torch.uint8, device="cuda")
        kernels.copy(dst[: src.numel()], src, torch.cuda.current_stream(), pdl=pdl)
        torch.cuda.synchronize()
        assert torch.equal(dst[: src.numel()], src) and not dst[src.numel() :].any()


def test_the_read_and_write_streams_touch_exactly_their_bytes(torch):
    """The fill stream zeroes every 16-byte vector and nothing past the end; the read stream, over a
    zero-filled source, leaves its sink alone; both time on this GPU (issue 14 item 6's curves)."""
    from optimize.harness import roofline
    from optimize.harness.floor_kernels import FloorKernels

    kernels = FloorKernels()
    stream = torch.cuda.current_stream()
    for pdl in (False, True):
        dst = torch.full((3 * 4096 + 48 + 64,), 7, dtype=torch.uint8, device="cuda")
        kernels.fill(dst[:-64], stream, pdl=pdl)
        sink = torch.full((4,), 3, dtype=torch.int32, device="cuda")
        kernels.read(torch.zeros(3 * 4096 + 48, dtype=torch.uint8, device="cuda"), sink, stream, pdl=pdl)
        torch.cuda.synchronize()
        assert not dst[:-64].any() and bool((dst[-64:] == 7).all()) and sink.tolist() == [3] * 4
    for pattern in ("read", "write"):
        fastest, by_variant = roofline.latency_us(pattern, sizes=(4096, 1 << 20), repeats=3)
        assert [size for size, _ in fastest] == [4096, 1 << 20] and all(us > 0 for _, us in fastest), by_variant


def test_worker_checks_and_times_a_real_baseline(tmp_path):
    """End to end on the silu_and_mul task: build, worker process, checks, timing."""
    from contract.layout import load_task
    from optimize.harness.evaluate import evaluate
    from pipeline.config import load_config

    task_dir = ROOT / "work" / "tasks" / "activation.silu_and_mul"
    if not (task_dir / "task.json").is_file():
        pytest.skip("run `kernelsmith extract --ops activation.silu_and_mul` first")
    task = load_task(task_dir)
    small = [s for s in task.shapes if s.sizes.get("num_tokens", 0) in (1, 8)][:4]
    config = load_config(overrides={"work_dir": str(ROOT / "work")})
    ev = evaluate(task_dir, task, None, config=config, shapes=small)
    assert ev.outcome.value == "ok", ev.detail
    assert len(ev.timings) == len(small) and all(x.time_us > 0 and x.gbps > 0 for x in ev.timings)
    assert set(ev.seconds) >= {"build", "test", "profile"}


def test_a_population_is_built_at_once_and_judged_member_by_member_in_one_worker(tmp_path):
    """Three silu_and_mul members: the baseline's own code and a comment-only edit (both checked and
    timed in one worker, bitwise equal), and one that does not compile (never reaches the worker)."""
    from contract.layout import baseline_regions, load_task, read_task_files
    from optimize.harness.population import evaluate_population
    from optimize.trajectory import candidate_id
    from pipeline.config import load_config
    from pipeline.run_records import Candidate

    task_dir = ROOT / "work" / "tasks" / "activation.silu_and_mul"
    if not (task_dir / "task.json").is_file():
        pytest.skip("run `kernelsmith extract --ops activation.silu_and_mul` first")
    task = load_task(task_dir)
    regions = baseline_regions(read_task_files(task_dir, task), task)
    name = next(n for n, text in regions.items() if "* up" in text or "* y" in text or "silu" in text.lower())
    comment = {**regions, name: regions[name].replace(";", "; /* population */", 1)}
    broken = {**regions, name: regions[name] + "\n#error population test\n"}
    members = [
        Candidate(op_id=task.op_id, id=candidate_id(r), parent="base", regions=r, coder="test")
        for r in (dict(regions), comment, broken)
    ]
    config = load_config(overrides={"work_dir": str(ROOT / "work"), "harness": {"held_out_shapes": 2}})
    small = [s for s in task.shapes if s.sizes.get("num_tokens", 0) in (1, 8)][:2]
    out = evaluate_population(task_dir, task.model_copy(update={"shapes": small}), members, config=config)
    assert [e.candidate for e in out] == [m.id for m in members]
    assert all(e.outcome.value == "ok" and e.bitwise_equal for e in out[:2]), [e.detail for e in out]
    assert out[2].outcome.value == "compile_failed" and "population test" in out[2].detail


def test_ncu_profiles_a_real_baseline(tmp_path):
    """Nsight Compute through the worker's single mode: DRAM throughput, occupancy, stalls of silu_and_mul."""
    from contract.layout import load_task
    from optimize.harness.tools import find_tool, profile_ncu
    from pipeline.config import load_config

    if find_tool("ncu") is None:
        pytest.skip("ncu is not installed on this GPU machine")
    task_dir = ROOT / "work" / "tasks" / "activation.silu_and_mul"
    if not (task_dir / "task.json").is_file():
        pytest.skip("run `kernelsmith extract --ops activation.silu_and_mul` first")
    task = load_task(task_dir)
    big = max(task.shapes, key=lambda s: s.sizes.get("num_tokens", 0) * s.sizes.get("hidden_size", 0))
    config = load_config(overrides={"work_dir": str(ROOT / "work")})
    result = profile_ncu(task_dir, task, None, config=config, shapes=[big])
    assert result.status == "ok", result.detail
    metrics = result.metrics()
    assert metrics["duration_us"] > 1 and 0 < metrics["dram_throughput_pct"] <= 100
    assert 0 < metrics["achieved_occupancy_pct"] <= 100
    assert any(key.startswith("stall_") for key in metrics), metrics


def test_a_fused_path_that_leaves_sglangs_scratch_unwritten_passes(tmp_path):
    """topk_sigmoid's launcher with `case 512:` fuses the generic path, which filled the workspace with
    every sigmoid first. The workspace is scratch (SGLang's wrapper drops it), so only topk_weights and
    topk_ids are judged; as inout it failed on the workspace alone (H100, 2026-12-05)."""
    from contract.layout import baseline_regions, load_task, read_task_files
    from optimize.harness.evaluate import evaluate
    from optimize.trajectory import candidate_id
    from optimize.transforms.size_dispatch import extend_size_dispatch
    from pipeline.config import load_config
    from pipeline.run_records import Candidate

    task_dir = ROOT / "work" / "tasks" / "moe.topk_sigmoid"
    if not (task_dir / "task.json").is_file():
        pytest.skip("run `kernelsmith extract --ops moe.topk_sigmoid` first")
    task = load_task(task_dir)
    regions = extend_size_dispatch(baseline_regions(read_task_files(task_dir, task), task), values=[512])
    fused = Candidate(op_id=task.op_id, id=candidate_id(regions), parent="base", regions=regions, coder="test")
    shapes = [s for s in task.shapes if s.sizes.get("num_experts") == 512 and s.sizes.get("num_tokens", 0) <= 64]
    assert shapes, "topk_sigmoid's catalog has no 512-expert shape: pick another"
    config = load_config(overrides={"work_dir": str(ROOT / "work"), "harness": {"held_out_shapes": 2}})
    ev = evaluate(task_dir, task, fused, config=config, shapes=shapes)
    assert ev.outcome.value == "ok", ev.detail


def test_the_repeat_check_compares_bits_so_a_nan_left_in_place_repeats_and_one_flipped_bit_does_not():
    """Run 1 and its repeat of a deterministic kernel both leave the NaN poison in a storage's gaps:
    ``torch.equal`` calls them different (NaN != NaN); the repeat check must call them the same."""
    import torch

    for short in ("bf16", "fp16", "fp32", "int32"):
        a = torch.arange(64, device="cuda").to(inputs.torch_dtype(short))
        if a.dtype.is_floating_point:
            a[10:20] = float("nan")
        b = a.clone()
        assert compare.same_bits(a, b, short), short
        if a.dtype.is_floating_point:
            assert not torch.equal(a, b), "the reason same_bits exists"
        b.view(inputs.bits_dtype(short))[3] ^= 1
        assert not compare.same_bits(a, b, short), short
