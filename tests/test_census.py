"""`kernelsmith track run`: the census of the real-shaped tasks as one batch; a failing op is its row."""

from __future__ import annotations

import tarfile

from test_harness_evaluate import DEVICE, timing
from test_loop import write_task

from bench import bench
from bench.bench import OpBench
from cli.main import main as cli
from contract.layout import save_task
from contract.sizes import SYNTHETIC_MODEL
from pipeline.records import ShapeCase
from pipeline.store import ResultsStore


def _tasks(work):
    write_task(work, "demo.scale")
    write_task(work, "demo.broken")
    _, synthetic = write_task(work, "demo.synthetic")
    shapes = [ShapeCase(model=SYNTHETIC_MODEL, tokens=8, sizes={"n": 8}, source="synthetic")]
    save_task(synthetic.model_copy(update={"shapes": shapes}), work)


def test_the_census_measures_real_shaped_ops_keeps_going_past_a_failure_and_stores_one_batch(
    tmp_path, monkeypatch, capsys
):
    _tasks(tmp_path)
    seen = []

    def bench_op(folder, task, config, *, dtypes, compile_):
        seen.append(task.op_id)
        if task.op_id == "demo.broken":
            return OpBench(op_id=task.op_id, error="correction_bias must be float32")
        return OpBench(op_id=task.op_id, rows=[timing(10.0, None)], device=DEVICE)

    monkeypatch.setattr(bench, "bench_op", bench_op)
    monkeypatch.setenv("KERNELSMITH_HARNESS__HISTORY_DIR", str(tmp_path / "history"))
    assert cli(["track", "run", "--work-dir", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert seen == ["demo.broken", "demo.scale"], "the synthetic-only task is not part of the census"
    assert "census 2/2: demo.scale" in err and "1 of 2 ops measured" in err and "correction_bias" in err
    (key,) = ResultsStore(tmp_path).keys()
    batch = ResultsStore(tmp_path).get(key)
    assert {r.op_id for r in batch.rows} == {"demo.scale"} and batch.command == "kernelsmith track run"
    from pipeline.history import read_folder

    (kept,) = list(read_folder(tmp_path / "history"))
    assert kept == (key, batch), "the batch is also plain data, in the folder the project keeps"


def test_the_census_reads_a_tarball_of_tasks_made_on_the_cpu_machine(tmp_path, monkeypatch, capsys):
    made = tmp_path / "cpu"
    _tasks(made)
    tarball = tmp_path / "tasks-0.5.23.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(made / "tasks", arcname="tasks")
    monkeypatch.setattr(
        bench, "bench_op", lambda f, t, c, **k: OpBench(op_id=t.op_id, rows=[timing(10.0, None)], device=DEVICE)
    )
    work = tmp_path / "gpu"
    assert cli(["track", "run", "--work-dir", str(work), "--tasks", str(tarball), "--ops", "demo.scale"]) == 0
    (key,) = ResultsStore(work).keys()
    stored = ResultsStore(work).get(key)
    assert {r.op_id for r in stored.rows} == {"demo.scale"}
    assert stored.command == f"kernelsmith track run --tasks {tarball} --ops demo.scale", (
        "the command reproduces the batch"
    )
    assert (work / "track" / "tasks-0.5.23" / "tasks" / "demo.scale" / "task.json").is_file()
    capsys.readouterr()


def test_a_regression_between_two_census_runs_names_the_kernel_files_that_changed(tmp_path, monkeypatch, capsys):
    """Two releases of demo.scale, the second with a changed kernel file and slower: the regression
    names the release and the file (SYNTHETIC timings)."""
    import hashlib

    from pipeline.records import FileDigest

    times = {"0.5.22": 10.0, "0.5.23": 14.0}
    for version in times:
        work = tmp_path / version
        folder, task = write_task(work, "demo.scale")
        if version == "0.5.23":
            src = folder / "src" / task.files[0].path
            src.write_text(src.read_text() + "\n// changed in 0.5.23\n")
            data = src.read_bytes()
            task = task.model_copy(
                update={
                    "files": [
                        FileDigest(path=task.files[0].path, sha256=hashlib.sha256(data).hexdigest(), size=len(data))
                    ]
                }
            )
        source = task.source.model_copy(update={"version": version})
        save_task(task.model_copy(update={"source": source}), work)
    monkeypatch.setattr(
        bench,
        "bench_op",
        lambda f, t, c, **k: OpBench(op_id=t.op_id, rows=[timing(times[t.source.version], None)], device=DEVICE),
    )
    store_dir = tmp_path / "store"
    for version in times:
        assert cli(["track", "run", "--work-dir", str(store_dir), "--tasks", str(tmp_path / version)]) == 0
    (reg,) = ResultsStore(store_dir).regressions(noise_pct=3.0)
    assert (reg.introduced_sglang, reg.before_sglang) == ("0.5.23", "0.5.22")
    assert reg.changed_files == ["kernels/jit/csrc/demo/scale.cuh"]
    assert cli(["track", "--work-dir", str(store_dir)]) == 0
    assert "kernel files changed: kernels/jit/csrc/demo/scale.cuh" in " ".join(capsys.readouterr().out.split())


def test_an_interrupted_census_keeps_what_it_measured_and_a_rerun_measures_only_the_rest(tmp_path, monkeypatch, capsys):
    """On the H200 (2026-12-02) four census runs were stopped by their time limit and nothing reached
    the store: now the ops measured before the interruption are one batch, and a rerun skips them."""
    _tasks(tmp_path)
    seen = []

    def bench_op(folder, task, config, *, dtypes, compile_):
        seen.append(task.op_id)
        if task.op_id == "demo.scale" and seen.count("demo.scale") == 1:
            raise KeyboardInterrupt  # the time limit's SIGTERM, as the CLI turns it into one
        return OpBench(op_id=task.op_id, rows=[timing(10.0, None)], device=DEVICE)

    monkeypatch.setattr(bench, "bench_op", bench_op)
    assert cli(["track", "run", "--work-dir", str(tmp_path)]) == 130
    said = capsys.readouterr().err
    assert "interrupted: results written so far are kept" in said
    assert "stopped after 1 of 2 ops" in said and "not reached (1): demo.scale; the same command resumes" in said
    (first,) = ResultsStore(tmp_path).keys()
    assert {r.op_id for r in ResultsStore(tmp_path).get(first).rows} == {"demo.broken"}
    assert cli(["track", "run", "--work-dir", str(tmp_path)]) == 0
    assert seen == ["demo.broken", "demo.scale", "demo.scale"], "the rerun measured only what was left"
    assert "1 ops already in the store, 1 to measure" in capsys.readouterr().err
    assert {r.op_id for _, _, r in ResultsStore(tmp_path).history()} == {"demo.broken", "demo.scale"}


def test_on_a_gpu_machine_every_baseline_is_built_at_once_before_the_timing(tmp_path, monkeypatch, capsys):
    """On the H200 (2026-12-02) the census spent ~15 s an op, one nvcc at a time: now every baseline is
    built first on all the build jobs, and the timing loop finds them in the cache."""
    from optimize.harness import evaluate
    from pipeline import gpu
    from pipeline.records import BuildReport

    _tasks(tmp_path)
    events: list[str] = []

    def build_units(task_dir, task, units, *, config, regions=None, max_workers=None, isolate=False):
        events.append(f"build {task.op_id} {max_workers}")
        if task.op_id == "demo.broken":
            raise RuntimeError("a surprise while building")  # left to the op's own build to report
        return BuildReport(ok=True, key="k", seconds=0.1), ["/lib/x.so"]

    def bench_op(folder, task, config, *, dtypes, compile_):
        events.append(f"time {task.op_id}")
        return OpBench(op_id=task.op_id, rows=[timing(10.0, None)], device=DEVICE)

    def batch_members(items, config, *, dtypes, compile_):  # the batch worker needs a GPU: each op in turn
        rows = {i: bench_op(f, t, config, dtypes=dtypes, compile_=compile_) for i, (f, t) in enumerate(items)}
        return bench.BatchAnswer(rows, {})

    monkeypatch.setattr(gpu, "gpu_available", lambda: (True, "NVIDIA H200 (pretend)"))
    monkeypatch.setattr(evaluate, "build_units", build_units)
    monkeypatch.setattr(bench, "bench_op", bench_op)
    monkeypatch.setattr(bench, "batch_members", batch_members)
    assert cli(["track", "run", "--work-dir", str(tmp_path)]) == 0
    builds = [e for e in events if e.startswith("build")]
    assert sorted(builds) == ["build demo.broken 1", "build demo.scale 1"], "each baseline once, one nvcc each"
    assert events.index("time demo.broken") > max(events.index(b) for b in builds), "all built before any timing"
    assert "built 1 of 2 baselines at once" in capsys.readouterr().err
