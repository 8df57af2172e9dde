"""Scale-out over Ray (optimize.scale.cluster): the optimize test of tests/test_scale.py on a local
Ray cluster with two declared GPUs, replayed measurements (SYNTHETIC). Skips where ray is not installed."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest
from test_loop import write_task
from test_scale import OPS, essence, replay_of, summary_of

from optimize.backends.replay import ReplayBackend
from optimize.loop import Loop
from optimize.scale.backend import BackendSpec, ScaledBackend
from optimize.scale.cluster import RayPool
from optimize.scale.ops import run_ops
from optimize.scale.pool import map_units
from optimize.scale.units import Done, Lost, Unit
from optimize.session import LoopOptions
from pipeline.config import Config

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="ray is not installed (pip install -e '.[scale]')"
)


@pytest.fixture(scope="module")
def cluster():
    import ray
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # this module's unit functions travel by value
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # the local cluster reports nothing anywhere (no network in tests)
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield RayPool("local", connect_timeout_s=5)
    finally:
        ray.shutdown()


def config(work) -> Config:
    return Config.model_validate({"work_dir": str(work), "budget": {"rounds": 2}})


def test_optimize_over_a_local_ray_cluster_spreads_the_units_and_equals_the_serial_run(tmp_path, cluster):
    ops = [write_task(tmp_path, op) for op in OPS]
    replay = replay_of(tmp_path)
    serial = Loop(config(tmp_path), LoopOptions(run="serial"), ReplayBackend(replay)).run(ops)
    assert all(o.status == "improved" for o in serial.ops)
    backend = ScaledBackend(
        BackendSpec("replay", str(replay)), cluster, config(tmp_path), description="replay", simulated=True
    )
    wide, _ = run_ops(config(tmp_path), LoopOptions(run="wide"), backend, ops, lanes=len(cluster.devices))
    runs = tmp_path / "runs"
    assert essence(runs / "wide") == essence(runs / "serial") and set(essence(runs / "wide")) == set(OPS)
    assert summary_of(runs / "wide") == summary_of(runs / "serial")
    assert set(backend.used) == {"0", "1"}, "Ray gave the units both GPUs (its CUDA_VISIBLE_DEVICES)"
    assert sum(backend.used.values()) == len(cluster.ran) > len(OPS)


def dies(task_dir, config, code):
    os._exit(code)  # the worker process goes, as a kernel that takes its process down would take it


def answers(task_dir, config, value):
    return value, os.environ.get("CUDA_VISIBLE_DEVICES")


def refuses(task_dir, config):
    from optimize.harness.errors import BaselineError

    raise BaselineError("the baseline of demo.scale failed its checks", fix="check the task", evidence={"out": "input"})


def test_a_ray_worker_that_dies_loses_only_its_unit_and_our_errors_come_back_typed(tmp_path, cluster):
    from optimize.harness.errors import BaselineError
    from optimize.scale.units import Raised

    conf = Config(work_dir=str(tmp_path))
    units = [Unit(f"u{i}", answers, None, conf, (i,)) for i in range(4)]
    units.insert(2, Unit("doomed", dies, None, conf, (3,)))
    units.append(Unit("refused", refuses, None, conf))
    results = map_units(cluster, units)
    raised = results.pop()
    assert isinstance(raised, Raised) and isinstance(raised.error, BaselineError), "the serial path's handling applies"
    assert raised.error.fix == "check the task" and raised.error.evidence == {"out": "input"}
    lost = results[2]
    assert isinstance(lost, Lost) and "doomed" in lost.text() and "Error" in lost.reason
    kept = [r for r in results if isinstance(r, Done)]
    assert len(kept) == 4, results
    assert [r.value[0] for r in kept] == [0, 1, 2, 3] and {r.value[1] for r in kept} <= {"0", "1"}
