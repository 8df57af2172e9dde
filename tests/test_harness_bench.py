"""BENCHMARKS.md sections and tables (bench.bench), no GPU."""

from __future__ import annotations

import pathlib

import pytest

from bench import bench, health, health_sweep, sections
from bench.sections import BenchOptions
from optimize.harness.protocol import DeviceInfo, TimingResult

DEVICE = DeviceInfo(
    name="NVIDIA H200",
    sm_count=132,
    l2_bytes=60 << 20,
    copy_gbps=4268.7,
    copy_spread_pct=0.3,
    min_kernel_us=2.1,
    torch="2.11.0",
    cuda="13.0",
    measured_at="2026-11-29T00:00:00+00:00",
)

EXISTING = """# Benchmarks

Intro text.

## Device probe — 2026-11-29, NVIDIA H200

| what | figure |
| --- | --- |
| copy | 4268.7 GB/s |
"""


def test_upsert_appends_then_replaces_only_its_own_section():
    first = sections.upsert_section(EXISTING, "kernelsmith bench --ops a", "## Baselines — day 1\n\n| x |\n")
    assert first.startswith(EXISTING)
    assert "<!-- kernelsmith-bench: kernelsmith bench --ops a -->\n## Baselines — day 1" in first
    second = sections.upsert_section(first, "kernelsmith bench --all", "## Baseline health — day 1\n\nrows\n")
    third = sections.upsert_section(second, "kernelsmith bench --ops a", "## Baselines — day 2\n\n| y |\n")
    assert "day 1\n\n| x |" not in third and "## Baselines — day 2\n\n| y |" in third
    assert "## Baseline health — day 1\n\nrows" in third  # the other command's section is kept
    assert third.startswith(EXISTING)
    assert third.count("<!-- kernelsmith-bench:") == 2
    assert sections.upsert_section(third, "kernelsmith bench --ops a", "## Baselines — day 2\n\n| y |\n") == third


def test_section_ends_at_the_next_foreign_heading():
    text = sections.upsert_section("# B\n", "cmd", "## Mine\n\nold\n") + "\n## Hand-written notes\n\nkeep me\n"
    out = sections.upsert_section(text, "cmd", "## Mine\n\nnew\n")
    assert "new" in out and "old" not in out and "## Hand-written notes\n\nkeep me" in out


def test_canonical_command():
    args = BenchOptions(ops=("a.b", "c.d"), torch_compile=False, output="BENCHMARKS.md")
    assert sections.canonical_command(args) == "kernelsmith bench --ops a.b c.d --no-torch-compile"
    assert (
        sections.canonical_command(BenchOptions(all_ops=True, output="X.md")) == "kernelsmith bench --all --output X.md"
    )


def test_timing_section_has_header_and_raw_rows():
    row = TimingResult(
        label="Llama-3.1-8B[hidden_size=14336,num_tokens=8192]",
        sizes={"num_tokens": 8192, "hidden_size": 14336},
        dtype="bf16",
        bytes=8192 * 14336 * 6,
        calls_per_graph=20,
        buffer_sets=1,
        repeats=15,
        baseline_us=161.9,
        baseline_spread_pct=0.4,
        eager_us=420.0,
        compile_us=170.2,
    )
    ok = bench.OpBench(op_id="activation.silu_and_mul", rows=[row], device=DEVICE)
    broken = bench.OpBench(op_id="layernorm.rmsnorm", error="baseline does not build: nvcc error")
    text = sections.timing_section("kernelsmith bench", [ok, broken], "2026-11-29", "Wall 10 s.")
    assert text.startswith("## Baselines — 2026-11-29, NVIDIA H200")
    assert "Command: `kernelsmith bench`" in text and "copy bandwidth 4269 GB/s" in text
    line = next(x for x in text.splitlines() if x.startswith("| activation.silu_and_mul"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[:4] == ["activation.silu_and_mul", "bf16", row.label, "161.90"]
    assert cells[5] == f"{row.bytes / 161.9e3:.0f}" and cells[8:] == ["420.00", "170.20"]
    assert "| layernorm.rmsnorm | — | — | not measured: baseline does not build: nvcc error" in text


def test_health_section_counts_and_reasons():
    rows = [
        health.HealthRow(op_id="a", built=True, ran=True, passed=True, checks=6),
        health.HealthRow(op_id="b", built=False, reason="nvcc: error: x | y", unresolved=["index range of ids"]),
    ]
    text = health.health_section("kernelsmith bench --all", rows, "2026-11-29", "NVIDIA H200")
    assert "2 tasks: 1 baselines build, 1 run, 1 pass" in text
    assert "| b | catalog | no | — | — | 0 | nvcc: error: x \\| y |" in text
    assert "- b: index range of ids" in text


def _write_task(work, op, *, shape=("num_tokens",), catalog=True, extra_args=(), sizes=None):
    from pipeline.record_io import write_record
    from pipeline.records import ArgSpec, BuildRecipe, Contract, Instantiation, ShapeCase, SourceInfo, Task, TensorSpec

    contract = Contract(
        entry="e",
        args=[
            ArgSpec(kind="tensor", tensor=TensorSpec(name="x", shape=list(shape), dtype="T", role="inout")),
            *extra_args,
        ],
        symbols=sorted(sizes or {"num_tokens": 8}),
        unresolved=["index range of ids"],
    )
    task = Task(
        op_id=op,
        module="m.py",
        public_functions=["f"],
        entry_points=["e"],
        source=SourceInfo(kind="wheel", root="/x", version="0.5.23"),
        files=[],
        instantiations=[Instantiation(dtype="bf16", module_args=[], template_args=["bf16_t"], wrappers=[("e", "E")])],
        build=BuildRecipe(cuda_files=["a.cuh"], include_dirs=[], cuda_cflags=[]),
        editable=[],
        contract=contract,
        shapes=[ShapeCase(model="M", tokens=8, sizes=sizes or {"num_tokens": 8})] if catalog else [],
    )
    write_record(task, work / "tasks" / op / "task.json")


def _timed(**extra) -> TimingResult:
    """One baseline timing at M[num_tokens=8], 2.50 µs."""
    return TimingResult(
        label="M[num_tokens=8]",
        sizes={"num_tokens": 8},
        dtype="bf16",
        bytes=32,
        calls_per_graph=20,
        buffer_sets=9,
        repeats=15,
        baseline_us=2.5,
        baseline_spread_pct=0.7,
        **extra,
    )


def test_main_writes_its_section_and_a_results_batch(tmp_path, monkeypatch):
    from pipeline.config import load_config
    from pipeline.store import ResultsStore

    work = tmp_path / "work"
    _write_task(work, "a.op")
    config = load_config(overrides={"work_dir": str(work)}, environ={})
    row = _timed(eager_us=6.0)
    monkeypatch.setattr(
        bench, "bench_op", lambda path, task, cfg, **kw: bench.OpBench(op_id=task.op_id, rows=[row], device=DEVICE)
    )
    out = tmp_path / "BENCH.md"
    out.write_text(EXISTING)
    args = BenchOptions(ops=("a.op",), output=str(out))
    assert bench.run(args, config) == 0
    text = out.read_text()
    assert text.startswith(EXISTING) and f"Command: `kernelsmith bench --ops a.op --output {out}`" in text
    assert "| a.op | bf16 | M[num_tokens=8] | 2.50 |" in text
    (key,) = ResultsStore(work).keys()
    batch = ResultsStore(work).get(key)
    assert batch.device == "NVIDIA H200" and {r.variant for r in batch.rows} == {"baseline", "torch_eager"}

    _fake_build(monkeypatch, ok=True)
    monkeypatch.setattr(
        health,
        "check",
        lambda prep, libs, cfg: prep.row.model_copy(
            update={"ran": True, "passed": False, "reason": "x[0] never written"}
        ),
    )
    args = BenchOptions(all_ops=True, output=str(out))
    assert bench.run(args, config) == 1  # a task that does not pass makes the run fail
    text = out.read_text()
    assert "| a.op | catalog | yes | yes | no | 0 | x[0] never written |" in text and "| a.op | bf16 |" in text


def test_an_interrupted_bench_writes_the_section_and_batch_of_the_ops_it_measured(tmp_path, monkeypatch):
    """Issue 16 row 1 on the H200 (2026-12-02): `bench --ops silu_and_mul rmsnorm topk_softmax` hit its
    time limit during topk_softmax's solo run, and the two ops measured were written nowhere."""
    from pipeline.config import load_config
    from pipeline.store import ResultsStore

    work = tmp_path / "work"
    for op in ("a.op", "b.op"):
        _write_task(work, op)
    config = load_config(overrides={"work_dir": str(work)}, environ={})
    row = _timed()

    def bench_op(path, task, cfg, **kw):
        if task.op_id == "b.op":
            raise KeyboardInterrupt  # the time limit, during the second op
        return bench.OpBench(op_id=task.op_id, rows=[row], device=DEVICE)

    monkeypatch.setattr(bench, "bench_op", bench_op)
    out = tmp_path / "BENCH.md"
    args = BenchOptions(ops=("a.op", "b.op"), output=str(out))
    with pytest.raises(KeyboardInterrupt):
        bench.run(args, config)
    text = out.read_text()
    assert "| a.op | bf16 | M[num_tokens=8] | 2.50 |" in text and "| b.op |" not in text
    assert "Interrupted after" in text and "1 of 2 ops measured" in text
    (key,) = ResultsStore(work).keys()
    assert {r.op_id for r in ResultsStore(work).get(key).rows} == {"a.op"}


def test_main_refuses_missing_tasks_with_the_fix(tmp_path):
    import pytest

    from optimize.errors import TaskMissing
    from pipeline.config import load_config

    config = load_config(overrides={"work_dir": str(tmp_path)}, environ={})
    with pytest.raises(TaskMissing, match="kernelsmith extract --ops b.op"):
        bench.run(BenchOptions(ops=("b.op",), output=str(tmp_path / "B.md")), config)


# ---------------------------------------------------------------------------- bench --all (health sweep)


def _fake_build(monkeypatch, *, ok, calls=None):
    from pipeline.records import BuildReport

    def build_one(prep, config):
        if calls is not None:
            calls.append(prep.row.op_id)
        report = BuildReport(ok=ok, key="k", seconds=1.5, stderr="" if ok else "a.cuh(3): error: boom\nmore")
        return report, ["lib.so"]

    monkeypatch.setattr(health, "build_one", build_one)


def test_health_sweep_builds_once_checks_every_task_and_resumes(tmp_path, monkeypatch):
    from pipeline.config import load_config

    work = tmp_path / "work"
    for op in ("a.op", "b.op", "c.op"):
        _write_task(work, op)
    (work / "tasks" / "broken.op").mkdir()
    (work / "tasks" / "broken.op" / "task.json").write_text("{not json")
    config = load_config(overrides={"work_dir": str(work), "harness": {"health_workers": 3}}, environ={})
    builds: list[str] = []
    _fake_build(monkeypatch, ok=True, calls=builds)
    checked: list[str] = []

    def check(prep, libs, cfg):
        checked.append(prep.row.op_id)
        if prep.row.op_id == "b.op":
            return prep.row.model_copy(update={"ran": False, "reason": "crashed: illegal memory access"})
        return prep.row.model_copy(update={"ran": True, "passed": True, "checks": 3})

    monkeypatch.setattr(health, "check", check)
    dirs = sorted(p for p in (work / "tasks").iterdir())
    lines: list[str] = []
    rows = health_sweep.health_all(dirs, config, progress=lines.append)
    assert [r.op_id for r in rows] == ["a.op", "b.op", "broken.op", "c.op"]  # input order, whatever finished first
    assert sorted(builds) == ["a.op", "b.op", "c.op"]
    assert sorted(checked) == ["a.op", "b.op", "c.op"]
    assert rows[0].passed and rows[0].built and rows[0].build_s == 1.5 and rows[0].unresolved == ["index range of ids"]
    assert rows[1].ran is False and "illegal memory access" in rows[1].reason
    assert rows[2].built is None and rows[2].reason.startswith("task does not load")
    assert any(line.startswith("[4/4]") for line in lines)

    # A rerun with the same tasks and harness judges nothing again ...
    builds.clear(), checked.clear()
    again = health_sweep.health_all(dirs, config, progress=lines.append)
    assert again == rows and builds == [] and checked == []
    # ... but a changed task is judged again, alone.
    task_json = work / "tasks" / "c.op" / "task.json"
    task_json.write_text(task_json.read_text().replace('"tokens": 8', '"tokens": 9'))
    health_sweep.health_all(dirs, config, progress=lines.append)
    assert builds == ["c.op"] and checked == ["c.op"]


def test_health_sweep_reports_the_first_nvcc_error(tmp_path, monkeypatch):
    from pipeline.config import load_config

    work = tmp_path / "work"
    _write_task(work, "a.op")
    config = load_config(overrides={"work_dir": str(work)}, environ={})
    _fake_build(monkeypatch, ok=False)
    monkeypatch.setattr(
        health, "check", lambda *a: (_ for _ in ()).throw(AssertionError("a failed build is never run"))
    )
    (row,) = health_sweep.health_all([work / "tasks" / "a.op"], config, progress=lambda line: None)
    assert row.built is False and row.ran is None and row.reason == "nvcc: a.cuh(3): error: boom"


def test_harness_fingerprint_covers_the_worker():
    root = pathlib.Path(health.__file__).resolve().parents[1]
    covered = {p.relative_to(root).as_posix() for g in health._FINGERPRINT_GLOBS for p in root.glob(g)}
    assert {"optimize/harness/worker.py", "optimize/harness/compare.py", "pipeline/build.py"} <= covered


def test_health_plans_a_synthetic_shape_where_no_model_sizes_the_op(tmp_path):
    work = tmp_path / "work"
    _write_task(work, "s.op", shape=("num_tokens", "num_slots"), catalog=False)
    _write_task(work, "bad.op", shape=("Trait1::K",), catalog=False)
    prep = health.prepare(work / "tasks" / "s.op")
    assert prep.row.shapes == "synthetic" and prep.plan is not None and prep.plan.checks
    assert prep.task.shapes[0].model == "synthetic" and prep.task.shapes[0].sizes["num_slots"] == 128
    bad = health.prepare(work / "tasks" / "bad.op")
    assert bad.plan is None and "'Trait1::K' is not an arithmetic expression" in bad.row.reason


def test_a_contract_without_arguments_is_not_called(tmp_path):
    """compress_norm_rope_store: extract found no C++ entry for the export, so the contract
    had no arguments, and the sweep called the baseline with none ("Expected 5 but got 0")."""
    from pipeline.record_io import read_record, write_record
    from pipeline.records import Task

    work = tmp_path / "work"
    _write_task(work, "n.op")
    path = work / "tasks" / "n.op" / "task.json"
    task = read_record(Task, path)
    empty = task.contract.model_copy(
        update={"args": [], "symbols": [], "unresolved": ["C++ entry `plan_x` not found in ['a.cuh']"]}
    )
    write_record(task.model_copy(update={"contract": empty}), path)
    prep = health.prepare(work / "tasks" / "n.op")
    assert prep.plan is None and "lists no arguments (C++ entry `plan_x` not found" in prep.row.reason


def test_health_tests_the_smallest_catalog_shape_the_kernels_checks_accept(tmp_path):
    from pipeline.record_io import read_record, write_record
    from pipeline.records import ShapeCase, Task

    work = tmp_path / "work"
    _write_task(work, "p.op")
    path = work / "tasks" / "p.op" / "task.json"
    task = read_record(Task, path)
    shapes = [ShapeCase(model="M", tokens=n, sizes={"num_tokens": n}) for n in (1, 8192, 4096)]
    contract = task.contract.model_copy(update={"constraints": ["(num_tokens >= 4096)"]})
    write_record(task.model_copy(update={"shapes": shapes, "contract": contract}), path)
    prep = health.prepare(work / "tasks" / "p.op")
    assert prep.row.shapes == "catalog" and {c.sizes["num_tokens"] for c in prep.plan.checks if not c.held_out} == {
        4096
    }


def test_health_sweep_budget_leaves_unreached_tasks_for_the_next_run(tmp_path, monkeypatch):
    from pipeline.config import load_config

    work = tmp_path / "work"
    for op in ("a.op", "b.op"):
        _write_task(work, op)
    config = load_config(overrides={"work_dir": str(work)}, environ={})
    builds: list[str] = []
    _fake_build(monkeypatch, ok=True, calls=builds)
    monkeypatch.setattr(
        health, "check", lambda prep, libs, cfg: prep.row.model_copy(update={"ran": True, "passed": True})
    )
    dirs = sorted((work / "tasks").iterdir())
    rows = health_sweep.health_all(dirs, config, progress=lambda line: None, budget_s=1e-9)
    assert builds == [] and [r.passed for r in rows] == [None, None]
    assert all("budget ran out before its build" in r.reason for r in rows)
    assert not (work / "bench" / "health").exists()  # nothing unjudged is saved
    rows = health_sweep.health_all(dirs, config, progress=lambda line: None)
    assert sorted(builds) == ["a.op", "b.op"] and all(r.passed for r in rows)


def test_health_sweep_without_a_gpu_stops_with_the_fix_and_saves_nothing(tmp_path, monkeypatch):
    import pytest

    from optimize.errors import GpuRequired
    from pipeline.config import load_config

    work = tmp_path / "work"
    for op in ("a.op", "b.op"):
        _write_task(work, op)
    config = load_config(overrides={"work_dir": str(work)}, environ={})
    _fake_build(monkeypatch, ok=True)

    def no_gpu(*args, **kwargs):
        raise GpuRequired("the evaluation worker found no CUDA device", fix="run on the GPU machine")

    monkeypatch.setattr("optimize.harness.evaluate.run_request", no_gpu)
    with pytest.raises(GpuRequired, match="run on the GPU machine"):
        health_sweep.health_all(sorted((work / "tasks").iterdir()), config, progress=lambda line: None)
    assert not (work / "bench" / "health").exists()


def test_a_harness_failure_reason_names_the_exception_the_worker_raised():
    from optimize.harness.errors import HarnessError

    err = HarnessError(
        "the evaluation worker failed in harness code (not in a kernel)",
        fix="report it",
        detail='request: /x/request.json\nTraceback (most recent call last):\n  File "w.py", line 3\n'
        "optimize.harness.errors.ContractError: scalar 'type' of run has no value to call with\n",
    )
    assert health._cause(err) == (
        "the evaluation worker failed in harness code (not in a kernel): "
        "optimize.harness.errors.ContractError: scalar 'type' of run has no value to call with"
    )
    assert health._cause(ValueError("plain\nsecond line")) == "plain"


def test_bench_budget_flag_sets_the_sweep_budget():
    from cli.parser import build_parser
    from cli.parser import overrides as _overrides
    from cli.stages import bench_options
    from pipeline.config import load_config

    args = build_parser().parse_args(["bench", "--all", "--budget-s", "280"])
    assert load_config(overrides=_overrides(args), environ={}).harness.sweep_budget_s == 280.0
    assert (
        sections.canonical_command(bench_options(args)) == "kernelsmith bench --all"
    )  # the section key ignores the budget


def test_health_names_a_contract_the_worker_cannot_call_before_any_build(tmp_path):
    from pipeline.records import ArgSpec, ScalarSpec, TensorSpec

    work = tmp_path / "work"
    # names no completion rule covers (contract/completion.toml)
    _write_task(
        work, "s.op", extra_args=[ArgSpec(kind="scalar", scalar=ScalarSpec(name="chunk_rows", type="int", value=None))]
    )
    _write_task(
        work,
        "i.op",
        extra_args=[
            ArgSpec(kind="tensor", tensor=TensorSpec(name="ids", shape=["num_tokens"], dtype="int32", role="input"))
        ],
    )
    scalar = health.prepare(work / "tasks" / "s.op")
    assert scalar.plan is None and scalar.row.built is None
    assert scalar.row.reason.startswith("contract: scalar 'chunk_rows' of e has no value to call with")
    assert scalar.row.still_open == ["scalar chunk_rows (int): no value to call with"]
    index = health.prepare(work / "tasks" / "i.op")
    assert index.plan is None and index.row.reason.startswith("contract: integer tensor ids has no value_range")


def test_health_fills_what_a_completion_rule_covers_and_names_the_rule(tmp_path):
    from pipeline.records import ArgSpec, ScalarSpec, TensorSpec

    work = tmp_path / "work"
    table = ArgSpec(
        kind="tensor", tensor=TensorSpec(name="cache", shape=["slots", "hidden_size"], dtype="T", role="input")
    )
    loc = ArgSpec(kind="tensor", tensor=TensorSpec(name="cache_loc", shape=["num_tokens"], dtype="int64", role="input"))
    page = ArgSpec(kind="scalar", scalar=ScalarSpec(name="page_size", type="int", value=None))
    _write_task(work, "f.op", extra_args=[table, loc, page], sizes={"num_tokens": 8, "hidden_size": 64, "slots": 32})
    prep = health.prepare(work / "tasks" / "f.op")
    assert prep.plan is not None, prep.row.reason
    assert prep.row.filled == [
        "cache_loc = [0, slots - 1] (completion.toml: gather *_loc)",
        "page_size = 64 (completion.toml: page_size)",
    ]
    assert prep.row.still_open == []
    passed = [
        prep.row.model_copy(update={"op_id": f"f.op{i}", "passed": i == 1}) for i in range(3)
    ]  # one module, three ops
    section = health.health_section(
        "kernelsmith bench --all", [*passed, health.HealthRow(op_id="g.op", module="g.py")], "2026-11-29", "cpu"
    )
    assert "- f.op0: cache_loc = [0, slots - 1]" in section
    assert "by op module: 2 modules have a task, 1 of them at least one passing baseline" in section


def test_a_role_the_baseline_disproves_is_fixed_named_and_checked_again(tmp_path, monkeypatch):
    """Found on the H200 (2026-11-29): extract called `k` of fused_inplace_qknorm an input
    and `gating_output` of topk_softmax an output; the baselines wrote the one and never
    wrote the other. The oracle's behaviour settles the role, and the row says so."""
    from optimize.harness.isolate import WorkerRun
    from optimize.harness.protocol import WorkerResult
    from pipeline.config import load_config
    from pipeline.records import ArgSpec, TensorSpec

    work = tmp_path / "work"
    extra = [
        ArgSpec(kind="tensor", tensor=TensorSpec(name="k", shape=["num_tokens"], dtype="T", role="input")),
        ArgSpec(kind="tensor", tensor=TensorSpec(name="gating_output", shape=["num_tokens"], dtype="T", role="output")),
    ]
    _write_task(work, "r.op", extra_args=extra)
    config = load_config(overrides={"work_dir": str(work)}, environ={})
    prep = health.prepare(work / "tasks" / "r.op")
    seen = []

    def worker(request, config, workdir):
        roles = {a.tensor.name: a.tensor.role for a in request.contract.args if a.tensor is not None}
        seen.append(roles)
        if roles["k"] == "input":
            result = WorkerResult(
                status="baseline_failed", detail="input k was modified", role_evidence={"k": "written"}
            )
        elif roles["gating_output"] == "output":
            result = WorkerResult(
                status="incorrect",
                detail="leaves gating_output unwritten",
                role_evidence={"gating_output": "never_written"},
            )
        else:
            result = WorkerResult(status="ok")
        return WorkerRun(status="finished", returncode=0, seconds=0.1, stderr_tail="", result=result)

    monkeypatch.setattr("optimize.harness.evaluate.run_request", worker)
    row = health.check(prep, ["lib.so"], config)
    assert [r["k"] + "/" + r["gating_output"] for r in seen] == ["input/output", "inout/output", "inout/inout"]
    assert (
        row.passed
        and row.ran
        and row.filled
        == [
            "k: role inout (baseline: written)",
            "gating_output: role inout (baseline: never written)",
        ]
    )

    # evidence never loops: with the same evidence every time, it stops after ROLE_REPAIRS re-checks
    seen.clear()
    stubborn = WorkerResult(status="baseline_failed", detail="input k was modified", role_evidence={"k": "written"})
    monkeypatch.setattr(
        "optimize.harness.evaluate.run_request",
        lambda request, config, workdir: (
            seen.append(1) or WorkerRun(status="finished", returncode=0, seconds=0.1, stderr_tail="", result=stubborn)
        ),
    )
    row = health.check(prep, ["lib.so"], config)
    assert len(seen) == 2 and row.passed is False and row.reason == "input k was modified"


def test_a_crashed_baseline_row_quotes_the_cuda_error_not_torchs_hint(tmp_path, monkeypatch):
    from optimize.harness.isolate import WorkerRun
    from pipeline.config import load_config

    work = tmp_path / "work"
    _write_task(work, "c.op")
    config = load_config(overrides={"work_dir": str(work)}, environ={})
    tail = (
        "[worker 18:40:01] checking\ntorch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
        "CUDA kernel errors might be asynchronously reported at some other API call.\n"
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
    )
    monkeypatch.setattr(
        "optimize.harness.evaluate.run_request",
        lambda request, config, workdir: WorkerRun(
            status="crashed", returncode=1, seconds=0.5, stderr_tail=tail, result=None
        ),
    )
    row = health.check(health.prepare(work / "tasks" / "c.op"), ["lib.so"], config)
    assert row.ran is False and row.reason.endswith(
        "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"
    )


def test_a_synthetic_size_the_baseline_rejects_is_replaced_by_the_one_it_expects(tmp_path, monkeypatch):
    """Found on the H200 (2026-11-29): fifteen synthetic shapes were rejected with the
    size the kernel wanted ("Size mismatch for shape#1: expected 6144 but got 128")."""
    from optimize.harness.isolate import WorkerRun
    from optimize.harness.protocol import CheckResult, WorkerResult
    from pipeline.config import load_config
    from pipeline.records import ArgSpec, TensorSpec

    work = tmp_path / "work"
    w = ArgSpec(kind="tensor", tensor=TensorSpec(name="w", shape=["num_tokens", "width"], dtype="T", role="input"))
    _write_task(work, "s.op", catalog=False, extra_args=[w], sizes={"num_tokens": 8, "width": 64})
    config = load_config(overrides={"work_dir": str(work)}, environ={})
    prep = health.prepare(work / "tasks" / "s.op")
    assert prep.row.shapes == "synthetic"
    widths = []

    def worker(request, config, workdir):
        # like the real worker: a held-out shape the baseline rejects is skipped, the
        # (synthetic) catalog shape rejected ends the checks
        done = []
        for case in request.checks:
            if case.sizes["width"] == 6144:
                continue
            if case.held_out:
                done.append(
                    CheckResult(
                        label=case.label,
                        sizes=case.sizes,
                        dtype=case.dtype,
                        distribution=case.distribution,
                        layout=case.layout,
                        held_out=True,
                        status="skipped",
                        reason="rejected",
                    )
                )
                continue
            widths.append(case.sizes["width"])
            n, got = case.sizes["num_tokens"], case.sizes["width"]
            detail = (
                f"the baseline rejects catalog shape {case.label}: Tensor match failed for Tensor<{n}, {got}>[strides=<{got}, 1>, "
                f"dtype=bfloat16, device=cuda:0] at k.cuh:9 - Root cause: Size mismatch for shape#1: expected 6144 but got {got}"
            )
            result = WorkerResult(status="baseline_failed", detail=detail, checks=done)
            return WorkerRun(status="finished", returncode=0, seconds=0.1, stderr_tail="", result=result)
        widths.append(6144)
        return WorkerRun(
            status="finished", returncode=0, seconds=0.1, stderr_tail="", result=WorkerResult(status="ok", checks=done)
        )

    monkeypatch.setattr("optimize.harness.evaluate.run_request", worker)
    row = health.check(prep, ["lib.so"], config)
    assert widths[-1] == 6144 and len(widths) == 2 and row.passed, row.reason
    assert row.filled == ["width = 6144 (baseline: the synthetic shape's width was rejected, the kernel expects 6144)"]


def test_a_resized_shape_keeps_to_the_modules_built(tmp_path, monkeypatch):
    """Found on the H200 (2026-11-29): fused_eh_norm's output width was rejected ("expected
    8192"), but the re-planned held-out draws wanted the 7168-wide instantiation, which the
    sweep had not built, so the repair was dropped. Now those cases are left out."""
    from optimize.harness.isolate import WorkerRun
    from optimize.harness.protocol import CheckResult, WorkerResult
    from pipeline.config import load_config
    from pipeline.record_io import read_record, write_record
    from pipeline.records import ArgSpec, Instantiation, Task, TensorSpec

    work = tmp_path / "work"
    x = ArgSpec(kind="tensor", tensor=TensorSpec(name="emb", shape=["num_tokens", "hidden"], dtype="T", role="input"))
    y = ArgSpec(
        kind="tensor", tensor=TensorSpec(name="out", shape=["num_tokens", "hidden_x2"], dtype="T", role="output")
    )
    _write_task(
        work, "h.op", catalog=False, extra_args=[x, y], sizes={"num_tokens": 8, "hidden": 4096, "hidden_x2": 128}
    )
    path = work / "tasks" / "h.op" / "task.json"
    task = read_record(Task, path)
    insts = [
        Instantiation(dtype="bf16", module_args=[w], template_args=[w, "bf16_t"], wrappers=[("e", f"E<{w}>")])
        for w in ("4096", "7168")
    ]
    write_record(task.model_copy(update={"instantiations": insts}), path)
    config = load_config(overrides={"work_dir": str(work)}, environ={})
    prep = health.prepare(work / "tasks" / "h.op")
    assert prep.row.shapes == "synthetic"
    built = len(prep.plan.units)  # the held-out draws may use the 7168-wide module too
    seen = []

    def worker(request, config, workdir):
        seen.append([(c.unit, c.sizes["hidden_x2"]) for c in request.checks])
        done = []
        for case in request.checks:
            if not case.held_out and case.sizes["hidden_x2"] != 8192:
                detail = (
                    f"the baseline rejects catalog shape {case.label}: Tensor match failed for Tensor<8, {case.sizes['hidden_x2']}>"
                    "[strides=<128, 1>, dtype=bfloat16, device=cuda:0] at k.cuh:92 - Root cause: Size mismatch for "
                    f"shape#1('hidden_x2'): expected 8192 but got {case.sizes['hidden_x2']}"
                )
                result = WorkerResult(status="baseline_failed", detail=detail, checks=done)
                return WorkerRun(status="finished", returncode=0, seconds=0.1, stderr_tail="", result=result)
            done.append(
                CheckResult(
                    label=case.label,
                    sizes=case.sizes,
                    dtype=case.dtype,
                    distribution=case.distribution,
                    layout=case.layout,
                    held_out=case.held_out,
                    status="skipped",
                    reason="rejected",
                )
            )
        return WorkerRun(
            status="finished", returncode=0, seconds=0.1, stderr_tail="", result=WorkerResult(status="ok", checks=done)
        )

    monkeypatch.setattr("optimize.harness.evaluate.run_request", worker)
    row = health.check(prep, ["lib.so"], config)
    assert row.passed, row.reason
    assert row.filled == [
        "hidden_x2 = 8192 (baseline: the synthetic shape's hidden_x2 was rejected, the kernel expects 8192)"
    ]
    assert len(seen) == 2 and all(unit < built for unit, _ in seen[1]) and (0, 8192) in seen[1]


def test_a_dtype_the_baseline_demands_is_taken_and_what_it_then_needs_is_checked_on_the_cpu(tmp_path, monkeypatch):
    """Found on the H200 (2026-11-29): mask_topk_ids' baseline said "num_token_non_padded
    on CUDA must be int32"; fixed, the tensor is an integer input, which the rules then
    range (or, with no rule, the row says so instead of a worker failure)."""
    from optimize.harness.isolate import WorkerRun
    from optimize.harness.protocol import WorkerResult
    from pipeline.config import load_config
    from pipeline.records import ArgSpec, TensorSpec

    work = tmp_path / "work"
    for op, name in (("d.op", "num_token_non_padded"), ("e.op", "n_pad")):
        _write_task(
            work,
            op,
            extra_args=[ArgSpec(kind="tensor", tensor=TensorSpec(name=name, shape=[1], dtype="T", role="input"))],
        )
    config = load_config(overrides={"work_dir": str(work)}, environ={})
    calls = []

    def worker(request, config, workdir):
        spec = request.contract.args[1].tensor
        calls.append((spec.name, spec.dtype))
        if spec.dtype == "T":
            result = WorkerResult(
                status="baseline_failed", detail=f"Failed at hash_topk.cuh:187: {spec.name} on CUDA must be int32"
            )
        else:
            result = WorkerResult(status="ok")
        return WorkerRun(status="finished", returncode=0, seconds=0.1, stderr_tail="", result=result)

    monkeypatch.setattr("optimize.harness.evaluate.run_request", worker)
    row = health.check(health.prepare(work / "tasks" / "d.op"), ["lib.so"], config)
    assert row.passed and calls == [("num_token_non_padded", "T"), ("num_token_non_padded", "int32")]
    assert row.filled == [
        "num_token_non_padded: dtype int32 (baseline: check)",
        "num_token_non_padded = [0, num_tokens] (completion.toml: bounded num_token_non_padded)",
    ]
    calls.clear()
    row = health.check(health.prepare(work / "tasks" / "e.op"), ["lib.so"], config)
    assert calls == [("n_pad", "T")] and row.ran is False
    assert row.reason.startswith("contract (after the baseline's fix): integer tensor n_pad has no value_range")


_REFUSALS = {
    # found on the H200 (2026-11-29): gelu_tanh_cat's loader instantiates fp16 too, its
    # launcher takes bf16 only
    "allowed options": ("fp16", "Dtype value [float16] not in the allowed options: [bfloat16]", True),
    # inkling's causal_conv1d / update_sconv_cache at fp32 (2026-11-29)
    "16-bit kernel": (
        "fp32",
        "Failed at causal_conv1d.cuh:186: causal_conv1d: bf16x2 kernel requires a 16-bit dtype",
        True,
    ),
    # a shape check: its TensorMatcher description names a dtype, the check is not about it
    "size mismatch": (
        "fp16",
        "Tensor match failed for Tensor<8, 64>[strides=<64, 1>, dtype=float16, device=cuda:0] at x.cuh:1 - "
        "Root cause: Size mismatch for shape#1: expected 128 but got 64",
        False,
    ),
}


@pytest.mark.parametrize("form", sorted(_REFUSALS))
def test_a_dtype_the_baseline_refuses_outright_is_not_tested(tmp_path, monkeypatch, form):
    """A refusal of the case's dtype by the baseline's own checks drops that dtype's
    cases (the baseline defines the op's dtypes); a refusal about anything else is the
    row's reason, even where the message shows a dtype."""
    from optimize.harness.isolate import WorkerRun
    from optimize.harness.protocol import CheckResult, WorkerResult
    from pipeline.config import load_config
    from pipeline.record_io import read_record, write_record
    from pipeline.records import Instantiation, Task

    refused, message, dropped = _REFUSALS[form]
    work = tmp_path / "work"
    _write_task(work, "g.op")
    path = work / "tasks" / "g.op" / "task.json"
    task = read_record(Task, path)
    other = Instantiation(dtype=refused, module_args=[], template_args=[f"{refused}_t"], wrappers=[("e", "E")])
    write_record(task.model_copy(update={"instantiations": [*task.instantiations, other]}), path)
    config = load_config(overrides={"work_dir": str(work)}, environ={})
    prep = health.prepare(work / "tasks" / "g.op")
    dtypes_seen = []

    def worker(request, config, workdir):
        done = []
        for case in request.checks:
            dtypes_seen.append(case.dtype)
            result = CheckResult(
                label=case.label,
                sizes=case.sizes,
                dtype=case.dtype,
                distribution=case.distribution,
                layout=case.layout,
                held_out=case.held_out,
                status="pass",
            )
            if case.dtype == refused:
                if case.held_out:  # the real worker skips a held-out case the baseline rejects
                    done.append(result.model_copy(update={"status": "skipped", "reason": "rejected"}))
                    continue
                detail = f"the baseline rejects catalog shape M[num_tokens=8]: {message}"
                return WorkerRun(
                    status="finished",
                    returncode=0,
                    seconds=0.1,
                    stderr_tail="",
                    result=WorkerResult(status="baseline_failed", detail=detail, checks=done),
                )
            done.append(result)
        return WorkerRun(
            status="finished", returncode=0, seconds=0.1, stderr_tail="", result=WorkerResult(status="ok", checks=done)
        )

    monkeypatch.setattr("optimize.harness.evaluate.run_request", worker)
    row = health.check(prep, ["lib.so"], config)
    assert refused in dtypes_seen
    if not dropped:
        assert not row.passed and row.filled == [] and message in row.reason
        return
    assert row.passed, row.reason
    cause = message if form != "allowed options" else "Dtype value [float16] not in the allowed options: [bfloat16]"
    assert row.filled == [f"dtype {refused} not tested (baseline: {cause})"]
    assert row.checks == sum(1 for c in prep.plan.checks if c.dtype == "bf16")


def _three_dtype_task(work):
    """(task c.op with bf16, fp16 and fp32 instantiations, written under ``work``; its config)."""
    from pipeline.config import load_config
    from pipeline.record_io import read_record, write_record
    from pipeline.records import Instantiation, Task

    _write_task(work, "c.op")
    path = work / "tasks" / "c.op" / "task.json"
    task = read_record(Task, path)
    more = [
        Instantiation(dtype=d, module_args=[], template_args=[f"{d}_t"], wrappers=[("e", "E")])
        for d in ("fp16", "fp32")
    ]
    task = task.model_copy(update={"instantiations": [*task.instantiations, *more]})
    write_record(task, path)
    return task, load_config(overrides={"work_dir": str(work)}, environ={})


def test_an_instantiation_nvcc_refuses_is_left_out_of_the_sweep_where_others_build(tmp_path, monkeypatch):
    """Found on the H200 (2026-12-01): tasks extracted with --no-compile reach the sweep
    unchecked; silu_and_mul_clamp's fp32 static_asserts "only fp16/bf16 supported", which
    had failed the whole task. Each instantiation is then built alone and the refused ones
    dropped from the task too (fused_eh_norm's later size repair had re-planned with its
    fp32 again and found it unbuilt); with none building, nvcc's error is the reason."""
    from pipeline.records import BuildReport

    work = tmp_path / "work"
    _, config = _three_dtype_task(work)
    refused = {"fp32"}
    built = []

    def build_units(task_dir, task, units, **kw):
        built.append([i.dtype for unit in units for i in unit])
        bad = any(i.dtype in refused for unit in units for i in unit)
        stderr = 'x.cuh(9): error: static assertion failed with "only fp16/bf16 supported"' if bad else ""
        return BuildReport(ok=not bad, key="k", seconds=1.0, stderr=stderr), ["lib.so"] * len(units)

    monkeypatch.setattr("optimize.harness.evaluate.build_units", build_units)
    prep = health.prepare(work / "tasks" / "c.op")
    report, libraries = health.build_one(prep, config)
    assert report.ok and {c.dtype for c in prep.plan.checks} == {"bf16", "fp16"}
    assert len(libraries) == len(prep.plan.units) and {i.dtype for i in prep.task.instantiations} == {"bf16", "fp16"}
    assert prep.row.filled[-1].startswith(
        "not tested, nvcc refuses fp32 <fp32_t> (x.cuh(9): error: static assertion failed"
    )
    assert [d for b in built[1:4] for d in b] == ["bf16", "fp16", "fp32"]  # each alone, then what is kept
    refused = {"bf16", "fp16", "fp32"}
    prep = health.prepare(work / "tasks" / "c.op")
    report, _ = health.build_one(prep, config)
    assert not report.ok and {c.dtype for c in prep.plan.checks} == {"bf16", "fp16", "fp32"}
    refused = {"bf16"}  # whichever dtype it is
    prep = health.prepare(work / "tasks" / "c.op")
    report, _ = health.build_one(prep, config)
    assert report.ok and {c.dtype for c in prep.plan.checks} == {"fp16", "fp32"}


def test_bench_and_the_census_time_an_op_whose_untimed_instantiation_nvcc_refuses(tmp_path, monkeypatch):
    """Found on the H200 (2026-12-02): the census's --no-compile tarballs keep rmsnorm_hf's and
    fused_inplace_qknorm's fp32 instantiations, which static_assert; the op got no row in any release.
    bench/track run narrow as the sweep does (each instantiation alone) and say so in the row."""
    from bench import bench
    from pipeline.records import BuildReport

    work = tmp_path / "work"
    task, config = _three_dtype_task(work)
    path = work / "tasks" / "c.op" / "task.json"
    refused = {"fp32"}

    def build_units(task_dir, task, units, **kw):
        bad = any(i.dtype in refused for unit in units for i in unit)
        stderr = 'x.cuh(9): error: static assertion failed with "DType must be fp16_t or bf16_t"' if bad else ""
        return BuildReport(ok=not bad, key="k", seconds=1.0, stderr=stderr), [f"lib-{len(units)}.so"] * len(units)

    monkeypatch.setattr("optimize.harness.evaluate.build_units", build_units)
    made = bench.bench_request(path.parent, task, config, dtypes=None, compile_=False)
    assert not isinstance(made, bench.OpBench), made
    request, notes = made
    assert notes == [
        'not timed, nvcc refuses fp32 <fp32_t> (x.cuh(9): error: static assertion failed with "DType '
        'must be fp16_t or bf16_t")'
    ]
    assert {t.dtype for t in request.timings} == {"bf16"} and request.baseline_libraries
    refused = {"bf16", "fp16", "fp32"}  # nothing builds: the op's row is nvcc's error, as before
    made = bench.bench_request(path.parent, task, config, dtypes=None, compile_=False)
    assert isinstance(made, bench.OpBench) and made.error.startswith("baseline does not build: x.cuh(9)")


def test_with_an_llm_the_sweep_asks_the_testing_agent_for_what_the_rules_leave_open(tmp_path):
    import json

    from optimize.llm.fakes import ScriptedModel
    from pipeline.records import ArgSpec, ScalarSpec

    work = tmp_path / "work"
    _write_task(
        work, "m.op", extra_args=[ArgSpec(kind="scalar", scalar=ScalarSpec(name="chunk_rows", type="int", value=None))]
    )
    offline = health.prepare(work / "tasks" / "m.op")
    assert offline.plan is None and offline.row.still_open == ["scalar chunk_rows (int): no value to call with"]
    model = ScriptedModel(
        [json.dumps({"scalars": {"chunk_rows": 4}, "why": {"chunk_rows": "rows per CTA"}})], name="m1"
    )
    asked = health.prepare(work / "tasks" / "m.op", model)
    assert model.agents() == ["testing"]
    assert asked.plan is not None and asked.row.filled == ["chunk_rows = 4 (llm:m1)"] and asked.row.still_open == []
    assert asked.key != offline.key  # the verdict is keyed on the model's answer too


def test_bench_all_hands_the_testing_agent_to_the_sweep_only_with_an_endpoint(tmp_path, monkeypatch):
    import json

    from optimize.llm.fakes import ScriptedModel
    from pipeline.config import load_config
    from pipeline.records import ArgSpec, ScalarSpec

    work = tmp_path / "work"
    _write_task(
        work, "m.op", extra_args=[ArgSpec(kind="scalar", scalar=ScalarSpec(name="chunk_rows", type="int", value=None))]
    )
    _fake_build(monkeypatch, ok=True)
    monkeypatch.setattr(
        health, "check", lambda prep, libs, cfg: prep.row.model_copy(update={"ran": True, "passed": True})
    )
    scripted = ScriptedModel([json.dumps({"scalars": {"chunk_rows": 4}})], name="m1")
    monkeypatch.setattr("optimize.llm.client.LlmClient", lambda llm, cache_dir: scripted)
    out = tmp_path / "B.md"
    args = BenchOptions(all_ops=True, output=str(out))

    offline = load_config(overrides={"work_dir": str(work)}, environ={})
    assert bench.run(args, offline) == 1 and scripted.prompts == []  # no endpoint: the scalar stays open
    assert "scalar 'chunk_rows' of e has no value to call with" in out.read_text()
    online = load_config(overrides={"work_dir": str(work), "llm": {"base_url": "http://127.0.0.1:9/v1"}}, environ={})
    assert bench.run(args, online) == 0 and scripted.agents() == ["testing"]
    assert "- m.op: chunk_rows = 4 (llm:m1)" in out.read_text()


def test_a_contract_naming_an_unknown_reference_stops_on_the_cpu():
    """Found on the H200 (2026-12-01): seven curated contracts named a PyTorch reference
    that does not exist, and every check failed in the worker; planning says so first."""
    from pipeline.records import ArgSpec, Contract, TensorSpec

    x = ArgSpec(kind="tensor", tensor=TensorSpec(name="x", shape=["n"], dtype="T", role="inout"))
    assert health.uncallable(Contract(entry="e", args=[x], symbols=["n"]), []) == ""
    named = Contract(entry="e", args=[x], symbols=["n"], reference="hopper_bf16_gemv")
    assert health.uncallable(named, []).startswith("contract names reference 'hopper_bf16_gemv', known:")


# ---------------------------------------------------------------------------- bench --ops: one op's failure (issue 16 row 1)


def _bench_worker(monkeypatch, *, fixable: str | None, calls: list):
    """A fake GPU: every op's bench times one shape, except d.op, whose baseline raises in the
    worker until its contract is fixed (``fixable``: "dtype", "role" or None for never)."""
    from types import SimpleNamespace

    from optimize.harness.errors import HarnessError
    from optimize.harness.isolate import WorkerRun
    from optimize.harness.protocol import WorkerResult

    def spec(request, name):
        return next(a.tensor for a in request.contract.args if a.tensor is not None and a.tensor.name == name)

    def d_is_fixed(request) -> bool:
        if fixable == "dtype":
            return spec(request, "correction_bias").dtype != "T"
        if fixable == "role":
            return spec(request, "correction_bias").role == "inout"
        return False

    def worker(request, config, workdir):
        calls.append((request.op_id, request.mode))
        if request.op_id == "d.op" and not d_is_fixed(request):
            if request.mode == "bench":
                raise HarnessError(
                    "the evaluation worker failed in harness code (not in a kernel)",
                    fix="report this with the worker's request file",
                    detail='request: /w/request.json\nTraceback (most recent call last):\n  File "t.py", line 1\n'
                    "RuntimeError: Failed at topk_softmax.cuh:88: correction_bias must be float32\n",
                )
            evidence = {"correction_bias": "written"} if fixable == "role" else {}
            result = WorkerResult(
                status="baseline_failed",
                detail="the baseline rejects catalog shape M[num_tokens=8] bf16: correction_bias must be float32"
                if fixable != "role"
                else "input correction_bias was modified",
                role_evidence=evidence,
            )
        elif request.mode == "bench":
            (case,) = request.timings
            timing = TimingResult(
                label=case.label,
                sizes=case.sizes,
                dtype=case.dtype,
                bytes=32,
                calls_per_graph=20,
                buffer_sets=9,
                repeats=15,
                baseline_us=2.5,
                baseline_spread_pct=0.7,
            )
            result = WorkerResult(status="ok", timings=[timing], device=DEVICE)
        else:
            result = WorkerResult(status="ok")
        return WorkerRun(status="finished", returncode=0, seconds=0.1, stderr_tail="", result=result)

    monkeypatch.setattr("optimize.harness.evaluate.run_request", worker)
    monkeypatch.setattr(
        "optimize.harness.evaluate.build_units",
        lambda task_dir, task, units, *, config, **kw: (SimpleNamespace(ok=True, stderr=""), ["lib.so"] * len(units)),
    )


def _four_ops(tmp_path):
    from pipeline.config import load_config
    from pipeline.records import ArgSpec, TensorSpec

    work = tmp_path / "work"
    for op in ("a.op", "b.op", "c.op"):
        _write_task(work, op)
    bias = ArgSpec(
        kind="tensor", tensor=TensorSpec(name="correction_bias", shape=["num_tokens"], dtype="T", role="input")
    )
    _write_task(work, "d.op", extra_args=[bias])
    return work, load_config(overrides={"work_dir": str(work)}, environ={})


def test_bench_keeps_every_other_ops_figures_when_one_baseline_raises(tmp_path, monkeypatch, capsys):
    from pipeline.store import ResultsStore

    work, config = _four_ops(tmp_path)
    calls: list = []
    _bench_worker(monkeypatch, fixable=None, calls=calls)
    out = tmp_path / "BENCH.md"
    args = BenchOptions(ops=("a.op", "b.op", "c.op", "d.op"), torch_compile=False, output=str(out))
    assert bench.run(args, config) == 1, "an op not measured still fails the run"
    text = out.read_text()
    for op in ("a.op", "b.op", "c.op"):
        assert f"| {op} | bf16 | M[num_tokens=8] | 2.50 |" in text
    (d_row,) = [line for line in text.splitlines() if line.startswith("| d.op |")]
    assert "not measured" in d_row and "correction_bias must be float32" in d_row, d_row
    (key,) = ResultsStore(work).keys()
    assert sorted({r.op_id for r in ResultsStore(work).get(key).rows}) == ["a.op", "b.op", "c.op"]
    assert ("d.op", "evaluate") in calls, "the baseline was checked to learn from it"
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out + text, "the worker's traceback stays in its log"


@pytest.mark.parametrize(
    ("fixable", "named"),
    [("dtype", "correction_bias: dtype float32 (baseline: check)"), ("role", "correction_bias: role inout")],
)
def test_bench_fixes_the_contract_from_the_baseline_as_the_sweep_does(tmp_path, monkeypatch, fixable, named):
    work, config = _four_ops(tmp_path)
    calls: list = []
    _bench_worker(monkeypatch, fixable=fixable, calls=calls)
    out = tmp_path / "BENCH.md"
    args = BenchOptions(ops=("a.op", "d.op"), torch_compile=False, output=str(out))
    assert bench.run(args, config) == 0
    text = out.read_text()
    assert "| d.op | bf16 | M[num_tokens=8] | 2.50 |" in text
    assert "contract fixed from the baseline" in text and named in text, text
    assert calls.count(("d.op", "bench")) == 2


def test_bench_without_a_gpu_mid_run_keeps_what_was_measured(tmp_path, monkeypatch):
    from optimize.errors import GpuRequired

    work, config = _four_ops(tmp_path)
    calls: list = []
    _bench_worker(monkeypatch, fixable=None, calls=calls)
    import optimize.harness.evaluate as evaluate_mod

    timed = evaluate_mod.run_request

    def gone_after_a(request, config, workdir):
        if request.op_id != "a.op":
            raise GpuRequired("the evaluation worker found no CUDA device", fix="run on the GPU machine")
        return timed(request, config, workdir)

    monkeypatch.setattr("optimize.harness.evaluate.run_request", gone_after_a)
    out = tmp_path / "BENCH.md"
    args = BenchOptions(ops=("a.op", "b.op", "c.op"), torch_compile=False, output=str(out))
    assert bench.run(args, config) == 1
    text = out.read_text()
    assert "| a.op | bf16 | M[num_tokens=8] | 2.50 |" in text
    assert "| b.op | — | — | not measured: the evaluation worker found no CUDA device" in text
    assert "| c.op | — | — | not measured" in text


def test_bench_in_a_read_only_work_dir_is_one_line_naming_it_and_writes_no_section(tmp_path, monkeypatch, capsys):
    """A work dir bench cannot write in is every op's problem, not one op's row: on 2026-12-02 each op's
    row said "not measured: NotWritable" and a section was written for a bench that timed nothing."""
    from test_faults_files import read_only

    from cli.main import main
    from pipeline.record_io import write_record

    work, _ = _four_ops(tmp_path)
    _bench_worker(monkeypatch, fixable=None, calls=[])
    import optimize.harness.evaluate as evaluate_mod

    fake = evaluate_mod.run_request

    def writes_its_request_first(request, config, workdir):  # as the real worker run does
        write_record(request, pathlib.Path(workdir) / "request.json")
        return fake(request, config, workdir)

    monkeypatch.setattr("optimize.harness.evaluate.run_request", writes_its_request_first)
    out = tmp_path / "BENCH.md"
    with read_only(work):
        code = main(["bench", "--ops", "a.op", "b.op", "--work-dir", str(work), "--output", str(out)])
    captured = capsys.readouterr()
    assert code == 2, captured.out + captured.err
    assert f"error: cannot write in {work}:" in captured.err and "fix:" in captured.err
    assert "Traceback" not in captured.err and "not measured" not in captured.out
    assert not out.exists(), "no section for a bench that measured nothing"
