"""Many ops' baselines timed in one worker process (bench --ops, track run), and what a batch does on failure.

On the H200 (2026-12-02) the census spent about 8 s an op starting a worker (torch, CUDA, the
sandbox) and ~1 s timing it; a batch starts one worker for several ops. The worker needs a GPU,
so here its parent side is driven by a stand-in ``run_request`` that writes the member files a
real batch worker writes, and the worker's loop runs with ``run`` and ``torch`` stood in.
"""

from __future__ import annotations

import sys
import types

import pytest
from test_harness_evaluate import DEVICE, timing
from test_loop import write_task

from optimize.harness import bench, evaluate, worker
from optimize.harness.bench import BatchInterrupted, OpBench
from optimize.harness.protocol import WorkerRequest, WorkerResult
from pipeline.config import Config
from pipeline.records import write_record


def _items(work, names):
    return [write_task(work, name) for name in names]


def _request(path, task, config, *, dtypes, compile_):
    request = WorkerRequest(
        mode="bench",
        op_id=task.op_id,
        contract=task.contract,
        baseline_libraries=[f"/lib/{task.op_id}.so"],
        device_cache_dir=str(config.cache / "device"),
    )
    return request, [f"{task.op_id}: a note of its request"]


def _fake_worker(outcomes, seen, *, interrupt_after=None):
    """A ``run_request`` that answers each batch member with ``outcomes[op_id]`` (None: no file)."""

    def run_request(request, config, workdir):
        assert request.mode == "batch"
        seen.append([m.op_id for m in request.batch])
        workdir.mkdir(parents=True, exist_ok=True)
        for index, member in enumerate(request.batch):
            if interrupt_after is not None and index == interrupt_after:
                raise KeyboardInterrupt
            outcome = outcomes[member.op_id]
            if outcome is not None:
                write_record(outcome, worker.member_path(workdir / "result.json", index))
        return None

    return run_request


def _ok(us):
    return WorkerResult(status="ok", timings=[timing(us, None)], device=DEVICE)


@pytest.fixture
def config(tmp_path):
    return Config(work_dir=str(tmp_path))


def test_a_batch_times_every_op_in_one_worker_and_keeps_each_ops_own_figures(tmp_path, config, monkeypatch):
    items = _items(tmp_path, ["demo.a", "demo.b", "demo.c"])
    seen: list[list[str]] = []
    alone: list[str] = []
    monkeypatch.setattr(bench, "_bench_request", _request)
    monkeypatch.setattr(
        evaluate, "run_request", _fake_worker({"demo.a": _ok(10), "demo.b": _ok(20), "demo.c": _ok(30)}, seen)
    )
    monkeypatch.setattr(bench, "bench_op", lambda f, t, c, **k: alone.append(t.op_id) or OpBench(op_id=t.op_id))
    rows = bench.bench_batch(items, config, dtypes=None, compile_=False)
    assert seen == [["demo.a", "demo.b", "demo.c"]], "one worker for the three ops"
    assert alone == [], "no op needed its own worker"
    assert [(r.op_id, r.rows[0].baseline_us) for r in rows] == [("demo.a", 10), ("demo.b", 20), ("demo.c", 30)]
    assert rows[1].notes[0] == "demo.b: a note of its request", "each op keeps its request's notes"


def test_an_op_that_failed_or_never_came_back_in_the_batch_is_timed_alone_and_says_why(tmp_path, config, monkeypatch):
    """A member that raised (baseline_failed), or one lost with the worker (no file), goes through
    bench_op, which reports the failure in full and repairs the contract: the batch changes no row."""
    items = _items(tmp_path, ["demo.a", "demo.raises", "demo.lost", "demo.d"])
    outcomes = {
        "demo.a": _ok(10),
        "demo.raises": WorkerResult(status="baseline_failed", detail="TypeError: Mismatched number of arguments"),
        "demo.lost": None,
        "demo.d": _ok(40),
    }
    alone: list[str] = []

    def bench_op(folder, task, config, *, dtypes, compile_):
        alone.append(task.op_id)
        return OpBench(op_id=task.op_id, error=f"{task.op_id}: its own words")

    monkeypatch.setattr(bench, "_bench_request", _request)
    monkeypatch.setattr(evaluate, "run_request", _fake_worker(outcomes, []))
    monkeypatch.setattr(bench, "bench_op", bench_op)
    rows = bench.bench_batch(items, config, dtypes=None, compile_=False)
    assert alone == ["demo.raises", "demo.lost"]
    assert [r.op_id for r in rows] == ["demo.a", "demo.raises", "demo.lost", "demo.d"], "rows in the ops' order"
    assert rows[1].error == "demo.raises: its own words" and rows[3].rows[0].baseline_us == 40


def test_an_op_whose_request_cannot_be_made_is_left_to_its_own_path(tmp_path, config, monkeypatch):
    items = _items(tmp_path, ["demo.a", "demo.nobuild"])
    seen: list[list[str]] = []

    def request(path, task, config, *, dtypes, compile_):
        if task.op_id == "demo.nobuild":
            raise RuntimeError("a surprise while building")
        return _request(path, task, config, dtypes=dtypes, compile_=compile_)

    monkeypatch.setattr(bench, "_bench_request", request)
    monkeypatch.setattr(evaluate, "run_request", _fake_worker({"demo.a": _ok(10)}, seen))
    monkeypatch.setattr(bench, "bench_op", lambda f, t, c, **k: OpBench(op_id=t.op_id, error="reported alone"))
    rows = bench.bench_batch(items, config, dtypes=None, compile_=False)
    assert seen == [["demo.a"]] and rows[1].error == "reported alone"


def test_ctrl_c_in_a_batch_keeps_the_ops_measured_before_it(tmp_path, config, monkeypatch):
    items = _items(tmp_path, ["demo.a", "demo.b", "demo.c"])
    outcomes = {"demo.a": _ok(10), "demo.b": _ok(20), "demo.c": _ok(30)}
    monkeypatch.setattr(bench, "_bench_request", _request)
    monkeypatch.setattr(evaluate, "run_request", _fake_worker(outcomes, [], interrupt_after=2))
    with pytest.raises(BatchInterrupted) as stop:
        bench.bench_batch(items, config, dtypes=None, compile_=False)
    assert [(i, r.op_id) for i, r in stop.value.rows] == [(0, "demo.a"), (1, "demo.b")]


def test_the_census_on_a_gpu_machine_goes_through_batches_and_an_interrupted_batch_loses_nothing(
    tmp_path, monkeypatch, capsys
):
    from pipeline import gpu
    from pipeline.cli import main as cli
    from pipeline.store import ResultsStore

    for name in ["demo.a", "demo.b", "demo.c"]:
        write_task(tmp_path, name)
    monkeypatch.setattr(gpu, "gpu_available", lambda: (True, "NVIDIA H200 (pretend)"))
    monkeypatch.setattr(bench, "prebuild", lambda *a, **k: 0)
    monkeypatch.setattr(bench, "_bench_request", _request)
    outcomes = {"demo.a": _ok(10), "demo.b": _ok(20).model_copy(update={"seconds": {"op": 2.54}}), "demo.c": _ok(30)}
    monkeypatch.setattr(evaluate, "run_request", _fake_worker(outcomes, [], interrupt_after=2))
    assert cli(["track", "run", "--work-dir", str(tmp_path)]) == 130
    err = capsys.readouterr().err
    assert "census 1-3/3: demo.a, demo.b, demo.c ..." in err and "demo.b: 1 shapes in 2.5 s" in err
    (key,) = ResultsStore(tmp_path).keys()
    assert {r.op_id for r in ResultsStore(tmp_path).get(key).rows} == {"demo.a", "demo.b"}


def test_the_batch_worker_runs_each_member_writes_each_result_and_stops_after_a_cuda_fault(tmp_path, monkeypatch):
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(synchronize=lambda: None, empty_cache=lambda: None))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    ran: list[str] = []

    def run(member):
        ran.append(member.op_id)
        if member.op_id == "demo.raises":
            raise TypeError("Mismatched number of arguments")
        if member.op_id == "demo.faults":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return _ok(10)

    monkeypatch.setattr(worker, "run", run)
    names = ["demo.a", "demo.raises", "demo.faults", "demo.never"]
    _, task = write_task(tmp_path, "demo.a")
    members = [
        WorkerRequest(mode="bench", op_id=n, contract=task.contract, baseline_libraries=[], device_cache_dir="d")
        for n in names
    ]
    batch = WorkerRequest(
        mode="batch", op_id="b", contract=task.contract, baseline_libraries=[], device_cache_dir="d", batch=members
    )
    result_path = str(tmp_path / "result.json")
    summary = worker.run_batch(batch, result_path)
    assert ran == ["demo.a", "demo.raises", "demo.faults"], "nothing runs after a CUDA fault"
    read = [WorkerResult.model_validate_json(worker.member_path(result_path, i).read_text()) for i in range(3)]
    assert [r.status for r in read] == ["ok", "baseline_failed", "crashed"]
    assert all(r.seconds["op"] >= 0 for r in read), "each member says how long it took"
    assert "TypeError: Mismatched number of arguments" in read[1].detail
    assert not worker.member_path(result_path, 3).exists()
    assert summary.status == "crashed", "main() then skips the interpreter's teardown"
