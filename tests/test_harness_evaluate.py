"""Case planning and the worker-result -> Evaluation mapping (optimize.harness.evaluate), no GPU."""

from __future__ import annotations

import random

import pytest

from optimize.harness import evaluate as ev
from optimize.harness.errors import BaselineError
from optimize.harness.isolate import WorkerRun
from optimize.harness.protocol import CheckResult, DeviceInfo, TimingResult, WorkerResult
from pipeline.config import Config
from pipeline.records import (
    ArgSpec,
    BuildRecipe,
    BuildReport,
    Contract,
    Instantiation,
    ScalarSpec,
    ShapeCase,
    SourceInfo,
    Span,
    Task,
    TensorSpec,
)
from pipeline.run_records import Outcome


def t(name, shape, role, strides=None):
    return ArgSpec(kind="tensor", tensor=TensorSpec(name=name, shape=shape, dtype="T", role=role, strides=strides))


def make_task(contract, shapes, insts, op="layernorm.rmsnorm"):
    return Task(
        op_id=op,
        module="m.py",
        public_functions=["f"],
        entry_points=[contract.entry],
        source=SourceInfo(kind="wheel", root="/x"),
        files=[],
        instantiations=insts,
        build=BuildRecipe(cuda_files=["a.cuh"], include_dirs=[], cuda_cflags=[]),
        editable=[Span(file="a.cuh", start_byte=0, end_byte=1, name="k", kind="kernel")],
        contract=contract,
        shapes=shapes,
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
    allowed_values={"hidden_size": [128, 512, 1024, 4096]},
    reference="rmsnorm",
)


def rms_inst(dtype, width):
    spelled = {"bf16": "bf16_t", "fp16": "fp16_t"}[dtype]
    return Instantiation(
        dtype=dtype,
        module_args=["rmsnorm", str(width), "true", spelled],
        template_args=[str(width), "true", spelled],
        wrappers=[("rmsnorm", f"K<{width}, true, {spelled}>::run")],
    )


def rms_task():
    insts = [rms_inst(d, w) for w in (4096, 128, 512) for d in ("bf16", "fp16")]
    shapes = [
        ShapeCase(model="M", tokens=n, sizes={"num_tokens": n, "hidden_size": w}) for n in (1, 64) for w in (4096, 128)
    ]
    return make_task(RMS, shapes, insts)


def test_plan_checks_every_catalog_shape_in_every_dtype_and_held_out_first():
    task = rms_task()
    plan = ev.plan_cases(task, held_out=4, rng=random.Random(3))
    held = [c for c in plan.checks if c.held_out]
    catalog = [c for c in plan.checks if not c.held_out]
    assert len(held) == 4 * 2 and len(catalog) == 4 * 2
    assert plan.checks[: len(held)] == held  # held-out cases run first
    assert {(c.label, c.dtype) for c in catalog} == {(s.label, d) for s in task.shapes for d in ("bf16", "fp16")}
    assert all(c.distribution == "normal" and c.layout == "contiguous" for c in catalog)
    assert {c.distribution for c in held} == {"normal", "uniform", "edge"}
    assert {c.layout for c in held} == {"contiguous", "strided"}
    assert len({c.seed for c in plan.checks}) == len(plan.checks)
    assert all(c.export == f"rmsnorm__{c.dtype}" for c in plan.checks)


def test_plan_units_are_canonical_whatever_the_draw():
    task = rms_task()
    canon = ev.canonical_units(task)
    assert [[i.dtype for i in unit] for unit in canon] == [["bf16", "fp16"]] * 3
    for seed in range(5):
        plan = ev.plan_cases(task, held_out=3, rng=random.Random(seed))
        assert all(unit in canon for unit in plan.units)
        for case in plan.checks:  # each case's unit holds the instantiation for its width and dtype
            unit = plan.units[case.unit]
            (inst,) = [i for i in unit if i.dtype == case.dtype]
            assert inst.template_args[0] == str(case.sizes["hidden_size"])


def test_plan_times_bf16_catalog_only_by_default():
    plan = ev.plan_cases(rms_task(), held_out=0)
    assert [(c.label, c.dtype) for c in plan.timings] == [(s.label, "bf16") for s in rms_task().shapes]
    # each timed case carries its catalog shape's token count, whatever its sizes call the token axis
    assert [c.tokens for c in plan.timings] == [s.tokens for s in rms_task().shapes]
    assert ev.plan_cases(rms_task(), held_out=0, profile=False).timings == []
    both = ev.plan_cases(rms_task(), held_out=0, timing_dtypes=["fp16", "bf16"])
    assert len(both.timings) == 8


def test_plan_drops_catalog_shapes_the_kernels_own_checks_refuse():
    """mhc_post_combine_norm_prefill: "prefill rows must be in [4096, 65536]" refuses T=1
    of every model; SGLang never calls the kernel there, so it is no test case."""
    task = rms_task()
    task = task.model_copy(
        update={"contract": task.contract.model_copy(update={"constraints": ["(num_tokens >= 64)"]})}
    )
    plan = ev.plan_cases(task, held_out=2, rng=random.Random(1))
    assert {c.sizes["num_tokens"] for c in plan.checks if not c.held_out} == {64}
    assert all(c.sizes["num_tokens"] >= 64 for c in plan.checks)  # held-out draws too
    # refused everywhere: kept (a mistranslated check must not hide the op; the baseline judges)
    refusing = task.model_copy(
        update={"contract": task.contract.model_copy(update={"constraints": ["(num_tokens > 9999)"]})}
    )
    assert {c.sizes["num_tokens"] for c in ev.plan_cases(refusing).checks} == {1, 64}


def test_plan_refuses_a_task_without_the_entry():
    task = make_task(RMS.model_copy(update={"entry": "other"}), [], [rms_inst("bf16", 128)])
    with pytest.raises(Exception, match="no instantiation exports"):
        ev.plan_cases(task)


# ---------------------------------------------------------------------------- results -> Evaluation

DEVICE = DeviceInfo(
    name="NVIDIA H200",
    sm_count=132,
    l2_bytes=60 << 20,
    copy_gbps=4000.0,
    copy_spread_pct=0.4,
    min_kernel_us=2.0,
    torch="2.11",
    cuda="13.0",
    measured_at="now",
)
CONFIG = Config()
BUILD = BuildReport(ok=True, key="k", seconds=1.0)


def check(status="pass", held_out=False, **kw):
    return CheckResult(
        label="L",
        sizes={"num_tokens": 1},
        dtype="bf16",
        distribution="normal",
        layout="contiguous",
        held_out=held_out,
        status=status,
        **kw,
    )


def timing(base, cand, spread=0.5, *, label="L", sizes=None, dtype="bf16", **kw):
    return TimingResult(
        label=label,
        sizes=sizes if sizes is not None else {"num_tokens": 8192},
        dtype=dtype,
        bytes=4_000_000,
        calls_per_graph=20,
        buffer_sets=1,
        repeats=15,
        baseline_us=base,
        baseline_spread_pct=spread,
        candidate_us=cand,
        candidate_spread_pct=spread,
        **kw,
    )


def run_of(result=None, status="finished", code=0):
    return WorkerRun(status=status, returncode=code, seconds=5.0, stderr_tail="tail text", result=result)


def test_timeout_and_crash_keep_the_stderr_tail():
    e = ev.to_evaluation("op", "c1", run_of(status="timeout", code=None), build=BUILD, build_s=1.0, config=CONFIG)
    assert e.outcome == Outcome.timeout and "tail text" in e.detail and "deadline" in e.detail
    e = ev.to_evaluation("op", "c1", run_of(status="crashed", code=-11), build=BUILD, build_s=1.0, config=CONFIG)
    assert e.outcome == Outcome.crashed and "SIGSEGV" in e.detail


def test_incorrect_and_crashed_results_pass_the_reason_through():
    result = WorkerResult(status="incorrect", detail="out[3, 1] was never written", checks=[check(), check("fail")])
    e = ev.to_evaluation("op", "c1", run_of(result), build=BUILD, build_s=1.0, config=CONFIG)
    assert e.outcome == Outcome.incorrect and e.detail == "out[3, 1] was never written"
    assert e.checks_passed == 1 and e.checks_failed == 1
    crashed = WorkerResult(status="crashed", detail="CUDA error: an illegal memory access")
    assert (
        ev.to_evaluation("op", "c", run_of(crashed), build=BUILD, build_s=0, config=CONFIG).outcome == Outcome.crashed
    )


def test_baseline_failure_is_raised_not_blamed_on_the_candidate():
    result = WorkerResult(status="baseline_failed", detail="baseline rejects catalog shape")
    with pytest.raises(BaselineError):
        ev.to_evaluation("op", "c1", run_of(result), build=BUILD, build_s=1.0, config=CONFIG)


def test_ok_result_becomes_shape_timings_with_speedups_and_verdict():
    result = WorkerResult(
        status="ok",
        checks=[check(bitwise_equal=True, max_abs_err=0.0), check(held_out=True, bitwise_equal=True)],
        timings=[timing(100.0, 80.0), timing(10.0, 8.0)],
        device=DEVICE,
        seconds={"test": 2.0, "profile": 1.5},
    )
    e = ev.to_evaluation("op", "c1", run_of(result), build=BUILD, build_s=1.0, config=CONFIG)
    assert e.outcome == Outcome.ok and e.bitwise_equal is True and e.max_abs_err == 0.0
    assert [x.speedup for x in e.timings] == [pytest.approx(1.25), pytest.approx(1.25)]
    assert e.timings[0].time_us == 80.0 and e.timings[0].baseline_us == 100.0
    assert "faster" in e.detail and "1 catalog, 1 held-out" in e.detail
    assert e.seconds["test"] == 2.0 and e.seconds["profile"] == 1.5 and e.seconds["build"] == 1.0
    assert e.seconds["worker_overhead"] == pytest.approx(1.5)


def test_slower_beyond_noise_is_slower_and_within_noise_is_no_change():
    slow = WorkerResult(status="ok", checks=[check()], timings=[timing(100.0, 110.0)], device=DEVICE)
    e = ev.to_evaluation("op", "c", run_of(slow), build=BUILD, build_s=0, config=CONFIG)
    assert e.outcome == Outcome.slower and "slower" in e.detail
    same = WorkerResult(status="ok", checks=[check()], timings=[timing(100.0, 101.0)], device=DEVICE)
    e = ev.to_evaluation("op", "c", run_of(same), build=BUILD, build_s=0, config=CONFIG)
    assert e.outcome == Outcome.ok and "no change" in e.detail
    noisy = WorkerResult(status="ok", checks=[check()], timings=[timing(100.0, 104.0, spread=6.0)], device=DEVICE)
    e = ev.to_evaluation("op", "c", run_of(noisy), build=BUILD, build_s=0, config=CONFIG)
    assert e.outcome == Outcome.ok and "no change" in e.detail  # inside its own 6% spread


def test_baseline_alone_reports_its_own_times():
    result = WorkerResult(status="ok", checks=[check()], timings=[timing(50.0, None)], device=DEVICE)
    e = ev.to_evaluation("op", "baseline", run_of(result), build=BUILD, build_s=0, config=CONFIG, candidate_given=False)
    assert e.outcome == Outcome.ok and e.timings[0].time_us == 50.0 and e.timings[0].speedup is None


def test_validated_timed_sets_are_counted_in_the_evaluation():
    result = WorkerResult(
        status="ok",
        checks=[check()],
        timings=[timing(100.0, 90.0, validated_sets=8), timing(10.0, 9.0, validated_sets=3)],
        device=DEVICE,
    )
    e = ev.to_evaluation("op", "c", run_of(result), build=BUILD, build_s=0, config=CONFIG)
    assert e.outcome == Outcome.ok and e.timed_sets_validated == 11
    assert "11 timed buffer sets match the baseline" in e.detail
    assert (
        ev.to_evaluation(
            "op", "c", run_of(WorkerResult(status="ok", checks=[check()])), build=BUILD, build_s=0, config=CONFIG
        ).timed_sets_validated
        == 0
    )


def test_a_timed_mismatch_from_the_worker_is_incorrect_with_its_report():
    report = (
        "timed shape L bf16, buffer set 1 of 37 (CUDA-graph timing replay, 37 calls rotating over the sets, "
        "candidate's graph): out[0, 0] was never written"
    )
    result = WorkerResult(
        status="incorrect", detail=report, checks=[check()], timings=[timing(10.0, 1.0, validated_sets=0)]
    )
    e = ev.to_evaluation("op", "c", run_of(result), build=BUILD, build_s=0, config=CONFIG)
    assert e.outcome == Outcome.incorrect and e.detail == report and e.timings == []


def test_a_candidate_faster_than_the_physical_floor_is_incorrect_not_a_speedup():
    # 200 MB of outputs at 4000 GB/s cannot take less than 50 us; 3 us is a skipped launch
    honest = timing(60.0, 55.0, must_move_bytes=200_000_000)
    cheat = timing(60.0, 3.0, must_move_bytes=200_000_000)
    e = ev.to_evaluation(
        "op",
        "c",
        run_of(WorkerResult(status="ok", checks=[check()], timings=[honest], device=DEVICE)),
        build=BUILD,
        build_s=0,
        config=CONFIG,
    )
    assert e.outcome == Outcome.ok
    e = ev.to_evaluation(
        "op",
        "c",
        run_of(WorkerResult(status="ok", checks=[check()], timings=[honest, cheat], device=DEVICE)),
        build=BUILD,
        build_s=0,
        config=CONFIG,
    )
    assert e.outcome == Outcome.incorrect and e.detail.startswith("implausible time: the candidate takes 3 us")
    assert "physical floor of 50 us" in e.detail and e.timings == []


def test_a_baseline_time_below_the_floor_is_implausible_too():
    fast = timing(3.0, None, must_move_bytes=200_000_000)
    result = WorkerResult(status="ok", checks=[check()], timings=[fast], device=DEVICE)
    e = ev.to_evaluation("op", "baseline", run_of(result), build=BUILD, build_s=0, config=CONFIG, candidate_given=False)
    assert e.outcome == Outcome.incorrect and "the baseline takes 3 us" in e.detail
    e = ev.to_evaluation(
        "op",
        "c",
        run_of(
            WorkerResult(
                status="ok", checks=[check()], timings=[timing(3.0, 60.0, must_move_bytes=200_000_000)], device=DEVICE
            )
        ),
        build=BUILD,
        build_s=0,
        config=CONFIG,
    )
    assert e.outcome == Outcome.incorrect and "the baseline takes 3 us" in e.detail


@pytest.mark.nvcc
def test_evaluate_without_a_gpu_builds_then_says_a_gpu_is_required(tmp_path):
    """The parent half for real: plan, nvcc builds (cached), worker process, and a clear GpuRequired."""
    import importlib.util
    import pathlib

    from contract.layout import load_task
    from optimize.harness import adversarial
    from optimize.harness.errors import GpuRequired
    from pipeline.config import load_config

    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed here: the GPU tests cover this path")
    root = pathlib.Path(__file__).resolve().parent.parent
    from tests.conftest import ensure_default_tasks

    task_dir = ensure_default_tasks() / "layernorm.fused_add_rmsnorm"
    task = load_task(task_dir)
    config = load_config(overrides={"work_dir": str(root / "work")})
    candidate = adversarial.baseline_candidate(task_dir, task)
    with pytest.raises(GpuRequired, match="no CUDA device"):
        ev.evaluate(task_dir, task, candidate, config=config, shapes=task.shapes[:2])
    bad = candidate.model_copy(update={"regions": {"no_such_span": "x"}})
    result = ev.evaluate(task_dir, task, bad, config=config, shapes=task.shapes[:2])
    assert result.outcome == Outcome.compile_failed and "no_such_span" in result.detail
    broken = candidate.model_copy(update={"regions": {"fused_add_rmsnorm_reg_kernel": "this is not C++;"}})
    result = ev.evaluate(task_dir, task, broken, config=config, shapes=task.shapes[:2])
    assert result.outcome == Outcome.compile_failed and "error" in result.detail and result.build is not None


def test_a_baseline_that_does_not_build_says_whether_extract_checked_it(tmp_path, monkeypatch):
    """A task extracted with --no-compile kept instantiations nvcc refuses (rmsnorm_hf's fp32 on the H200,
    2026-12-02): the fix names the skipped compile check, not the toolchain."""
    from pipeline.records import BuildReport

    failed = BuildReport(ok=False, key="k", seconds=1.0, stderr="error: static assertion failed")
    monkeypatch.setattr(ev, "build_units", lambda *a, **k: (failed, []))
    task = rms_task()
    cfg = Config.model_validate({"work_dir": str(tmp_path)})
    with pytest.raises(BaselineError) as unchecked:
        ev.build_baseline(tmp_path, task, [task.instantiations], config=cfg)
    assert "--no-compile" in unchecked.value.fix and "static assertion" in unchecked.value.detail
    checked = task.model_copy(update={"baseline_build": BuildReport(ok=True, key="k", seconds=1.0)})
    with pytest.raises(BaselineError) as broken:
        ev.build_baseline(tmp_path, checked, [checked.instantiations], config=cfg)
    assert "toolchain" in broken.value.fix and "--no-compile" not in broken.value.fix


def test_a_no_compile_task_is_narrowed_to_what_nvcc_builds(tmp_path, monkeypatch):
    """ev.buildable, what the optimize loop asks once per op and run: each instantiation is built alone
    where the whole set fails, and those nvcc refuses are dropped with its reason; a compile-checked
    task, one that builds, and one of which nothing builds are left as they are."""
    from pipeline.records import BuildReport

    task = rms_task()
    refused = {("fp16", "128")}

    def build(task_dir, task, units, *, config, **_):
        bad = [i for unit in units for i in unit if (i.dtype, i.module_args[1]) in refused]
        report = BuildReport(
            ok=not bad, key="k", seconds=1.0, stderr="x.cuh(9): error: static assertion failed" if bad else ""
        )
        return report, []

    monkeypatch.setattr(ev, "build_units", build)
    cfg = Config.model_validate({"work_dir": str(tmp_path)})
    narrowed, dropped, why = ev.buildable(tmp_path, task, config=cfg)
    assert [(i.dtype, i.module_args[1]) for i in dropped] == [("fp16", "128")]
    assert len(narrowed.instantiations) == len(task.instantiations) - 1 and dropped[0] not in narrowed.instantiations
    assert why.startswith("nvcc refuses fp16 <") and "static assertion failed" in why
    checked = task.model_copy(update={"baseline_build": BuildReport(ok=True, key="k", seconds=1.0)})
    assert ev.buildable(tmp_path, checked, config=cfg) is None
    refused.clear()
    assert ev.buildable(tmp_path, task, config=cfg) is None
    refused.update((i.dtype, i.module_args[1]) for i in task.instantiations)
    assert ev.buildable(tmp_path, task, config=cfg) is None
