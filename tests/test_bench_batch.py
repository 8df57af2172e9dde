"""Many ops' baselines timed in one worker process (bench --ops, track run), and what a batch does on failure.

On the H200 (2026-12-02) the census spent about 8 s an op starting a worker (torch, CUDA, the
sandbox) and ~1 s timing it; a batch starts one worker for several ops. The worker needs a GPU,
so here its parent side is driven by a stand-in ``run_request`` that writes the member files a
real batch worker writes, and the worker's loop runs with ``run`` and ``torch`` stood in.
"""

from __future__ import annotations

import pytest
from test_harness_evaluate import DEVICE, timing
from test_loop import write_task

from bench import bench
from bench.bench import BatchInterrupted, OpBench
from optimize.harness import evaluate, worker
from optimize.harness.protocol import WorkerRequest, WorkerResult
from pipeline.config import Config
from pipeline.record_io import write_record


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
    monkeypatch.setattr(bench, "bench_request", _request)
    monkeypatch.setattr(
        evaluate, "run_request", _fake_worker({"demo.a": _ok(10), "demo.b": _ok(20), "demo.c": _ok(30)}, seen)
    )
    rows = bench.batch_members(items, config, dtypes=None, compile_=False).rows
    assert seen == [["demo.a", "demo.b", "demo.c"]], "one worker for the three ops"
    assert {i: (r.op_id, r.rows[0].baseline_us) for i, r in rows.items()} == {
        0: ("demo.a", 10),
        1: ("demo.b", 20),
        2: ("demo.c", 30),
    }
    assert rows[1].notes[0] == "demo.b: a note of its request", "each op keeps its request's notes"


def _on_a_gpu(monkeypatch):
    from pipeline import gpu

    monkeypatch.setattr(gpu, "gpu_available", lambda: (True, "NVIDIA H200 (pretend)"))
    monkeypatch.setattr(evaluate, "prebuild", lambda items, config, **kw: [True] * len(items))


def _folders(items):
    return [(path, task) for path, task in items]


def test_an_op_a_batch_did_not_measure_is_timed_alone_after_every_batch_and_says_why(
    tmp_path, config, monkeypatch, capsys
):
    """A member that raised (baseline_failed), or one lost with the worker (no file), goes through
    bench_op, which reports the failure in full and repairs the contract: the batch changes no row.
    Those solo runs come after every batch: one can take a minute, and a census stopped by its
    time limit must have measured every op a batch could."""
    names = ["demo.a", "demo.raises", "demo.lost", "demo.d"] + [f"demo.n{i}" for i in range(bench.BATCH_OPS)]
    items = _items(tmp_path, names)
    outcomes = {name: _ok(10 + i) for i, name in enumerate(names)}
    outcomes["demo.raises"] = WorkerResult(status="baseline_failed", detail="TypeError: Mismatched number of arguments")
    outcomes["demo.lost"] = None
    seen: list[list[str]] = []
    order: list[str] = []

    def bench_op(folder, task, config, *, dtypes, compile_):
        order.append(f"alone {task.op_id}")
        return OpBench(op_id=task.op_id, error=f"{task.op_id}: its own words")

    fake = _fake_worker(outcomes, seen)

    def run_request(request, config, workdir):
        order.append(f"batch {len(seen)}")
        return fake(request, config, workdir)

    _on_a_gpu(monkeypatch)
    monkeypatch.setattr(bench, "bench_request", _request)
    monkeypatch.setattr(evaluate, "run_request", run_request)
    monkeypatch.setattr(bench, "bench_op", bench_op)
    rows, _ = bench.bench_folders(_folders(items), config, dtypes=None, compile_=False, label="bench")
    assert order == ["batch 0", "batch 1", "alone demo.raises", "alone demo.lost"], "solo runs after every batch"
    assert [r.op_id for r in rows] == names, "rows in the ops' order"
    assert rows[1].error == "demo.raises: its own words" and rows[3].rows[0].baseline_us == 13
    said = capsys.readouterr().out
    assert "demo.raises: not measured in the batch (baseline_failed: TypeError: Mismatched number of arguments)" in said
    assert "demo.lost: not measured in the batch (no result: the batch worker stopped before it)" in said
    assert said.index("demo.lost: not measured") < said.index(f"bench {bench.BATCH_OPS + 1}-"), (
        "said at once, not after the batches"
    )


def test_ops_whose_baselines_did_not_build_at_once_are_timed_after_the_others(tmp_path, config, monkeypatch, capsys):
    """An op whose baseline did not build at once builds each instantiation alone in its own path,
    which can take minutes (on the H200, 2026-12-07, both census windows ended inside a batch that
    never answered, the rest of the release unmeasured): such ops come last, and the rows still come
    back in the folders' order."""
    names = ["demo.unbuilt", "demo.late"] + [f"demo.n{i}" for i in range(bench.BATCH_OPS)]
    items = _items(tmp_path, names)
    seen: list[list[str]] = []
    _on_a_gpu(monkeypatch)
    unbuilt = {"demo.unbuilt", "demo.late"}
    monkeypatch.setattr(evaluate, "prebuild", lambda items, config, **kw: [t.op_id not in unbuilt for _, t in items])
    monkeypatch.setattr(bench, "bench_request", _request)
    monkeypatch.setattr(evaluate, "run_request", _fake_worker({n: _ok(10 + i) for i, n in enumerate(names)}, seen))
    rows, _ = bench.bench_folders(_folders(items), config, dtypes=None, compile_=False, label="census")
    assert seen == [[f"demo.n{i}" for i in range(bench.BATCH_OPS)], ["demo.unbuilt", "demo.late"]], "unbuilt last"
    assert [r.op_id for r in rows] == names and [r.rows[0].baseline_us for r in rows[:3]] == [10, 11, 12]
    assert "census: 2 op(s) whose baselines did not build at once are timed last" in capsys.readouterr().out


def test_an_op_whose_request_cannot_be_made_is_left_to_its_own_path(tmp_path, config, monkeypatch):
    items = _items(tmp_path, ["demo.a", "demo.nobuild"])
    seen: list[list[str]] = []

    def request(path, task, config, *, dtypes, compile_):
        if task.op_id == "demo.nobuild":
            raise RuntimeError("a surprise while building")
        return _request(path, task, config, dtypes=dtypes, compile_=compile_)

    monkeypatch.setattr(bench, "bench_request", request)
    monkeypatch.setattr(evaluate, "run_request", _fake_worker({"demo.a": _ok(10)}, seen))
    answer = bench.batch_members(items, config, dtypes=None, compile_=False)
    assert seen == [["demo.a"]] and sorted(answer.rows) == [0], "demo.nobuild is not in the batch's answer"
    assert answer.unmeasured == {1: "its request could not be made (RuntimeError: a surprise while building)"}


def test_ctrl_c_in_a_batch_keeps_the_ops_measured_before_it(tmp_path, config, monkeypatch):
    items = _items(tmp_path, ["demo.a", "demo.b", "demo.c"])
    outcomes = {"demo.a": _ok(10), "demo.b": _ok(20), "demo.c": _ok(30)}
    monkeypatch.setattr(bench, "bench_request", _request)
    monkeypatch.setattr(evaluate, "run_request", _fake_worker(outcomes, [], interrupt_after=2))
    with pytest.raises(BatchInterrupted) as stop:
        bench.batch_members(items, config, dtypes=None, compile_=False)
    assert [(i, r.op_id) for i, r in stop.value.rows] == [(0, "demo.a"), (1, "demo.b")]


def test_ctrl_c_in_an_ops_solo_run_keeps_every_row_the_batches_measured(tmp_path, config, monkeypatch):
    """The census's time limit ended each release inside such a solo run on the H200; the rows
    of the batch before it must reach the caller (the census stores them as they come)."""
    items = _items(tmp_path, ["demo.a", "demo.raises", "demo.c"])
    outcomes = {"demo.a": _ok(10), "demo.raises": WorkerResult(status="baseline_failed", detail="x"), "demo.c": _ok(30)}
    told: list[str] = []

    def bench_op(folder, task, config, *, dtypes, compile_):
        raise KeyboardInterrupt

    _on_a_gpu(monkeypatch)
    monkeypatch.setattr(bench, "bench_request", _request)
    monkeypatch.setattr(evaluate, "run_request", _fake_worker(outcomes, []))
    monkeypatch.setattr(bench, "bench_op", bench_op)
    with pytest.raises(KeyboardInterrupt):
        bench.bench_folders(
            _folders(items),
            config,
            dtypes=None,
            compile_=False,
            label="census",
            measured=lambda row, task: told.append(row.op_id),
        )
    assert told == ["demo.a", "demo.c"]
