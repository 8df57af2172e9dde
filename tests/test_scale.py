"""Scale-out on the CPU (optimize.scale): lanes over fake GPUs, replayed measurements (SYNTHETIC).

What is proved: the units are spread over the lanes, a lane that fails loses only its unit
(the others' results are kept, the failure is a typed outcome saying why), and the results
equal a serial run's; with one GPU the serial path runs. The same optimize test over a local
Ray cluster is in tests/test_scale_ray.py.
"""

from __future__ import annotations

import json
import pathlib
import threading
import time

import pytest
from test_harness_evaluate import DEVICE, timing
from test_loop import REPLAY, write_task

from bench import bench
from bench.bench import OpBench
from cli.main import main as cli
from optimize.backends.replay import ReplayBackend
from optimize.errors import GpuRequired
from optimize.scale import local, units
from optimize.scale.devices import lanes
from optimize.scale.local import LocalPool
from optimize.scale.pool import map_units, open_pool
from optimize.scale.units import Done, Lost, Raised, Unit
from pipeline.config import Config
from pipeline.record_io import read_record
from pipeline.run_records import RunSummary
from pipeline.store import ResultsStore

OPS = ("demo.scale", "demo.copy", "demo.fill", "demo.norm")


def replay_of(tmp_path: pathlib.Path) -> pathlib.Path:
    """The demo replay (SYNTHETIC timings) with every op of OPS, each its own copy of demo.scale's entries."""
    data = json.loads(REPLAY.read_text())
    for op in OPS:
        data["ops"][op] = json.loads(json.dumps(data["ops"]["demo.scale"]))
    path = tmp_path / "ops.replay.json"
    path.write_text(json.dumps(data))
    return path


def essence(run_dir: pathlib.Path) -> dict[str, list[tuple]]:
    """Each op's trajectory without times: what a run decided, round by round."""
    out = {}
    for path in sorted(run_dir.glob("*/trajectory.jsonl")):
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        out[path.parent.name] = [
            (
                r["kind"],
                r["round"],
                r.get("skill"),
                r.get("candidate"),
                r["outcome"],
                r.get("speedup_geomean"),
                r.get("accepted"),
                r.get("best"),
                r.get("stop_reason"),
                r.get("gpu_s"),  # each op charged what its own units spent
                tuple((a.get("candidate"), a.get("outcome")) for a in r.get("attempts", [])),
            )
            for r in lines
        ]
    return out


def summary_of(run_dir: pathlib.Path) -> list[tuple]:
    summary = read_record(RunSummary, run_dir / "summary.json")
    return [(o.op_id, o.status, o.rounds, o.best, o.speedup_geomean, o.stop_reason, o.skills) for o in summary.ops]


class Spy:
    """Which lane ran which unit, and at most how many ran at once (the real run_here underneath)."""

    def __init__(self, monkeypatch, *, hold_s: float = 0.0) -> None:
        self.ran: list[tuple[str, str | None]] = []
        self.busy: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.lock = threading.Lock()
        real = units.run_here

        def run_here(unit, device):
            kind = "population" if "population" in unit.key else "other"
            with self.lock:
                self.busy[kind] = self.busy.get(kind, 0) + 1
                self.most[kind] = max(self.most.get(kind, 0), self.busy[kind])
            try:
                time.sleep(hold_s)
                return real(unit, device)
            finally:
                with self.lock:
                    self.busy[kind] -= 1
                    self.ran.append((unit.key, device))

        monkeypatch.setattr(local, "run_here", run_here)


def optimize(tmp_path, replay, run, *extra):
    return cli(
        [
            "optimize",
            "--work-dir",
            str(tmp_path),
            "--coder",
            "offline",
            "--rounds",
            "2",
            "--replay",
            str(replay),
            "--run",
            run,
            "--ops",
            *OPS,
            *extra,
        ]
    )


# --------------------------------------------------------------------------- optimize


def test_optimize_over_two_fake_gpus_spreads_the_ops_and_equals_the_serial_run(tmp_path, monkeypatch, capsys):
    for op in OPS:
        write_task(tmp_path, op)
    replay = replay_of(tmp_path)
    spy = Spy(monkeypatch, hold_s=0.05)
    assert optimize(tmp_path, replay, "serial", "--gpus", "0") == 0
    assert spy.ran == [], "one GPU is the serial path: no lane, no unit"
    assert optimize(tmp_path, replay, "wide", "--gpus", "0,1") == 0
    capsys.readouterr()
    serial, wide = tmp_path / "runs" / "serial", tmp_path / "runs" / "wide"
    assert essence(wide) == essence(serial) and set(essence(wide)) == set(OPS)
    assert summary_of(wide) == summary_of(serial)
    devices = {device for _, device in spy.ran}
    assert devices == {"0", "1"} and spy.most["population"] == 2, "both lanes ran search populations at once"
    totals = [read_record(RunSummary, run / "summary.json").gpu_s for run in (serial, wide)]
    assert totals[0] == totals[1] > 0, "the run's GPU budget was charged every unit once"
    per_op = {op: {d for key, d in spy.ran if key.startswith(op + " ")} for op in OPS}
    assert all(per_op.values()) and len({frozenset(v) for v in per_op.values()}) >= 1
    assert read_record(RunSummary, wide / "summary.json").simulated, "a replayed run stays SIMULATED"


def test_a_lane_whose_unit_fails_loses_that_op_alone_and_says_why(tmp_path, monkeypatch, capsys):
    # The demo ops share one source file, so each is every other's companion in final validation, and
    # a companion whose evaluation raises leaves a candidate unproven (test_reach_ops). This test is about
    # a lane's failure staying in its lane, so the ops are judged at their own entry points alone.
    monkeypatch.setenv("KERNELSMITH_SEARCH__JUDGE_COMPANIONS", "false")
    for op in OPS:
        write_task(tmp_path, op)
    replay = replay_of(tmp_path)
    assert optimize(tmp_path, replay, "serial", "--gpus", "0") == 0
    real = ReplayBackend.evaluate

    def evaluate(self, task_dir, task, candidate, *, stage="round"):
        if task.op_id == "demo.fill":
            raise RuntimeError("the lane's worker died")
        return real(self, task_dir, task, candidate, stage=stage)

    monkeypatch.setattr(ReplayBackend, "evaluate", evaluate)
    assert optimize(tmp_path, replay, "wide", "--gpus", "0,1") == 1
    err = capsys.readouterr().err
    wide = read_record(RunSummary, tmp_path / "runs" / "wide" / "summary.json")
    (failed,) = [o for o in wide.ops if o.status == "failed"]
    assert failed.op_id == "demo.fill" and "lost: the worker running demo.fill" in failed.detail
    assert "RuntimeError: the lane's worker died" in failed.detail and "error (demo.fill)" in err
    kept = {k: v for k, v in essence(tmp_path / "runs" / "serial").items() if k != "demo.fill"}
    assert {k: v for k, v in essence(tmp_path / "runs" / "wide").items() if k != "demo.fill"} == kept
    assert len(kept) == 3


# --------------------------------------------------------------------------- census


def census_tasks(work: pathlib.Path) -> None:
    for op in OPS:
        write_task(work, op)


def fake_bench(times: dict[str, float], fail: str | None = None):
    def bench_op(folder, task, config, *, dtypes, compile_):
        if task.op_id == fail:
            raise RuntimeError("Segmentation fault in the lane")
        time.sleep(0.4 if task.op_id == "demo.copy" else 0.05)  # the first op lands last
        return OpBench(op_id=task.op_id, rows=[timing(times[task.op_id], None)], device=DEVICE)

    return bench_op


def rows(work: pathlib.Path) -> list[tuple]:
    (key,) = ResultsStore(work).keys()
    return [(r.op_id, r.shape, r.time_us) for r in ResultsStore(work).get(key).rows]


def test_the_census_over_two_fake_gpus_is_one_batch_equal_to_the_serial_one(tmp_path, monkeypatch, capsys):
    from pipeline import gpu

    times = dict(zip(OPS, (10.0, 12.0, 14.0, 16.0)))
    monkeypatch.setattr(bench, "bench_op", fake_bench(times))
    monkeypatch.setattr(gpu, "visible_gpus", lambda environ=None: ["0", "1"])  # two fake GPUs
    spy = Spy(monkeypatch)
    for name, flags in (("serial", ["--gpus", "0"]), ("wide", [])):
        census_tasks(tmp_path / name)
        assert cli(["track", "run", "--work-dir", str(tmp_path / name), *flags]) == 0
    err = capsys.readouterr().err
    assert rows(tmp_path / "wide") == rows(tmp_path / "serial") and len(rows(tmp_path / "wide")) == 4
    assert {d for _, d in spy.ran} == {"0", "1"} and len(spy.ran) == 4, "the default is every visible GPU"
    assert "census: 4 ops on 2 local GPUs (0, 1)" in err and "on GPU 1" in err


def test_a_census_unit_that_fails_is_its_row_and_the_other_ops_are_stored(tmp_path, monkeypatch, capsys):
    from pipeline import gpu

    times = dict(zip(OPS, (10.0, 12.0, 14.0, 16.0)))
    monkeypatch.setattr(bench, "bench_op", fake_bench(times, fail="demo.fill"))
    monkeypatch.setattr(gpu, "visible_gpus", lambda environ=None: ["0", "1"])
    census_tasks(tmp_path)
    assert cli(["track", "run", "--work-dir", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert [r[0] for r in rows(tmp_path)] == ["demo.copy", "demo.norm", "demo.scale"], "in the census's op order"
    assert "not measured: demo.fill (lost: the worker running census demo.fill on GPU" in err
    assert "RuntimeError: Segmentation fault in the lane" in err


# --------------------------------------------------------------------------- the pool


def lane_fn(task_dir, config, name, *, fail_on=None):
    from optimize.harness import isolate

    time.sleep(0.05)  # both lanes take units
    device = isolate.pinned_device()
    if fail_on in (device, "every"):
        raise GpuRequired("the evaluation worker found no CUDA device", fix="run on the GPU machine")
    return name, device


def test_a_lane_whose_gpu_is_gone_gives_its_unit_back_and_the_last_lane_reports_the_error(tmp_path):
    config = Config(work_dir=str(tmp_path))
    with LocalPool(["0", "1"], build_slots=2) as pool:
        results = map_units(pool, [Unit(f"u{i}", lane_fn, None, config, (i,), {"fail_on": "1"}) for i in range(6)])
    assert all(isinstance(r, Done) for r in results), "GPU 1's units went to GPU 0"
    assert [r.value for r in results] == [(i, "0") for i in range(6)]
    with LocalPool(["0", "1"], build_slots=2) as pool:
        (nowhere,) = map_units(pool, [Unit("u", lane_fn, None, config, (0,), {"fail_on": "every"})])
        assert isinstance(nowhere, Raised) and isinstance(nowhere.error, GpuRequired), "the last lane says so"
        (after,) = map_units(pool, [Unit("v", lane_fn, None, config, (1,))])
    assert isinstance(after, Done), "the last lane is kept"


def boom(task_dir, config):
    raise ValueError("unexpected")


def leaves(task_dir, config):
    raise SystemExit(3)


def test_an_unexpected_error_is_that_units_loss_and_the_lane_goes_on(tmp_path):
    config = Config(work_dir=str(tmp_path))
    with LocalPool(["0", "1"], build_slots=2) as pool:
        bad = [Unit("bad", boom, None, config), Unit("exits", leaves, None, config)]
        results = map_units(pool, [*bad, *(Unit(f"u{i}", lane_fn, None, config, (i,)) for i in range(3))])
    lost, exited = results[:2]
    assert isinstance(lost, Lost) and lost.reason == "ValueError: unexpected" and "bad" in lost.text()
    assert isinstance(exited, Lost) and exited.reason == "SystemExit: 3"
    assert [r.value[0] for r in results[2:] if isinstance(r, Done)] == [0, 1, 2]


def test_a_gpu_runs_replay_file_is_written_on_the_driver_with_every_ops_evaluations(tmp_path, monkeypatch):
    from optimize.backends import replay as replay_module
    from optimize.scale.backend import BackendSpec, ScaledBackend

    load = replay_module._load_for_update

    def slow_load(path, device):  # read, then wait: two writers at once would lose one's update
        data = load(path, device)
        time.sleep(0.005)
        return data

    monkeypatch.setattr(replay_module, "_load_for_update", slow_load)
    from optimize.scale.ops import run_ops
    from optimize.session import LoopOptions

    ops = [write_task(tmp_path, op) for op in OPS]
    replay = replay_of(tmp_path)
    conf = Config.model_validate({"work_dir": str(tmp_path), "budget": {"rounds": 1}})
    record = tmp_path / "runs" / "r" / "measurements.replay.json"
    with LocalPool(["0", "1"], build_slots=2) as pool:
        backend = ScaledBackend(
            BackendSpec("replay", str(replay)), pool, conf, description="d", simulated=True, record_to=record
        )
        summary, _ = run_ops(conf, LoopOptions(run="r"), backend, ops, lanes=2)
    recorded = json.loads(record.read_text())["ops"]
    assert set(recorded) == set(OPS) and all(recorded[op]["baseline"] for op in OPS)
    assert all(len(recorded[op]["candidates"]) > 3 for op in OPS), "no op's writes were lost to another's"
    assert summary.gpu_s > 0 and set(backend.used) == {"0", "1"}


def test_one_gpu_or_none_is_the_serial_path_and_an_unknown_ordinal_is_refused(tmp_path):
    config = Config(work_dir=str(tmp_path))
    assert lanes(config, visible=["0"]) == ["0"] and lanes(config, visible=[]) == []
    assert lanes(config, visible=["2", "3"]) == ["2", "3"], "the environment's own view is kept"
    picked = Config(work_dir=str(tmp_path), scale={"gpus": [1]})
    assert lanes(picked, visible=["2", "3"]) == ["3"]
    assert open_pool(Config(work_dir=str(tmp_path))) is None, "no GPU on this machine: the serial path"
    from optimize.scale.errors import UnknownGpu

    with pytest.raises(UnknownGpu, match="this machine shows ordinals 0..1"):
        lanes(Config(work_dir=str(tmp_path), scale={"gpus": [0, 5]}), visible=["0", "1"])


def test_gpus_and_ray_errors_are_one_line_with_the_fix(tmp_path, monkeypatch, capsys):
    from optimize.scale import cluster
    from optimize.scale.errors import RayMissing

    census_tasks(tmp_path)
    assert cli(["track", "run", "--work-dir", str(tmp_path), "--gpus", "0,1"]) == 2
    err = capsys.readouterr().err
    assert "--gpus names GPU 0, 1, and this machine shows no GPU" in err and "Traceback" not in err
    assert cli(["track", "run", "--work-dir", str(tmp_path), "--gpus", "zero"]) == 2
    assert "is not a list of GPU ordinals" in capsys.readouterr().err

    def no_ray():
        raise RayMissing("--ray needs the ray package", fix="pip install -e '.[scale]' (ray[default])")

    monkeypatch.setattr(cluster, "import_ray", no_ray)
    assert cli(["bench", "--work-dir", str(tmp_path), "--ops", "demo.scale", "--ray", "auto"]) == 2
    err = capsys.readouterr().err
    assert "error: --ray needs the ray package" in err and "fix: pip install -e '.[scale]'" in err

    class NotConnected:
        @staticmethod
        def is_initialized():
            return False

        @staticmethod
        def init(**kwargs):
            raise AssertionError("Ray is not asked to connect to an address that does not answer")

    monkeypatch.setattr(cluster, "import_ray", lambda: NotConnected)
    start = time.monotonic()
    assert cli(["track", "run", "--work-dir", str(tmp_path), "--ray", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "the Ray cluster at 127.0.0.1:1 does not answer" in err and "ray start --head" in err
    assert time.monotonic() - start < 30 and "Traceback" not in err
    assert cli(["track", "run", "--work-dir", str(tmp_path), "--ray", "nohost"]) == 2
    assert "is not HOST:PORT" in capsys.readouterr().err


# --------------------------------------------------------------------------- another host


def test_a_unit_on_a_host_without_the_task_unpacks_it_and_its_builds_come_back(tmp_path):
    folder, _ = write_task(tmp_path / "driver")
    config = Config(work_dir=str(tmp_path / "driver"))
    files = units.task_files(folder)
    assert set(files) == {"task.json", "src/kernels/jit/csrc/demo/scale.cuh"}
    here, moved = units.arrive(Unit("u", boom, folder, config), files, root=tmp_path / "remote")
    assert not moved and here.task_dir == folder, "the driver's own folder is used where it is"
    away = Unit("u", boom, tmp_path / "elsewhere" / "demo.scale", config)
    there, moved = units.arrive(away, files, root=tmp_path / "remote")
    assert moved and there.task_dir is not None and there.task_dir.name == "demo.scale"
    assert (there.task_dir / "task.json").read_bytes() == files["task.json"]
    assert there.config.work == (tmp_path / "remote" / "work").resolve()
    since = time.time() - 1
    entry = there.config.cache / "builds" / "abc123"
    entry.mkdir(parents=True)
    (entry / "module.so").write_bytes(b"\x7fELF")
    (there.config.cache / "builds" / ".staging-x").mkdir()
    packed = units.pack_builds(there.config.cache, since)
    assert [key for key, _ in packed] == ["abc123"], "published entries only"
    assert units.adopt_builds(config.cache, packed) == 1 and units.adopt_builds(config.cache, packed) == 0
    assert (config.cache / "builds" / "abc123" / "module.so").read_bytes() == b"\x7fELF"


class LosingPool:
    """A pool whose every unit is lost (its worker died): what each backend call makes of it."""

    kind = "local"
    devices = ["0", "1"]
    ran: list = []

    def describe(self):
        return "2 lanes that lose everything"

    def submit(self, unit):
        from concurrent.futures import Future

        future = Future()
        future.set_result(Lost(unit.key, "1", "WorkerCrashedError: the worker died"))
        return future

    def close(self, *, wait=True):
        pass


def test_every_backend_call_of_a_lost_unit_is_a_typed_outcome_saying_why(tmp_path):
    from optimize.scale.backend import BackendSpec, ScaledBackend
    from pipeline.run_records import Candidate, Outcome

    folder, task = write_task(tmp_path)
    backend = ScaledBackend(
        BackendSpec("gpu"), LosingPool(), Config(work_dir=str(tmp_path)), description="d", simulated=False
    )
    members = [Candidate(op_id=task.op_id, id=f"c{i}", parent="baseline", regions={}) for i in range(3)]
    one = backend.evaluate(folder, task, members[0], stage="final")
    assert one.outcome == Outcome.crashed and "on GPU 1 failed (WorkerCrashedError: the worker died)" in one.detail
    many = backend.evaluate_many(folder, task, members)
    assert [e.outcome for e in many] == [Outcome.crashed] * 3 and [e.candidate for e in many] == ["c0", "c1", "c2"]
    profile = backend.profile(folder, task, None)
    assert profile.status == "failed" and "lost: the worker running demo.scale profile" in profile.detail
    verdicts = backend.validate_cases(folder, task, ["a", "b"])
    assert [ok for ok, _ in verdicts] == [False, False] and "WorkerCrashedError" in verdicts[0][1]
    assert backend.gpu_s == 0.0 and not backend.used
