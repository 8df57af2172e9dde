"""A unit of work, what comes back from it, and running one here on one GPU.

A :class:`Unit` is a module-level function called as ``fn(task_dir, config, *args,
**kwargs)``: one op's bench or census timing (:func:`bench.one_op.bench_op`),
one measurement-backend call (:func:`optimize.scale.backend.call_backend`). It runs
whole on one GPU (:func:`run_here` pins the workers it starts), so the baseline and
its candidates are timed interleaved in one process on one device, as in a serial run.

What comes back is one of three:

- :class:`Done`: the function's value;
- :class:`Raised`: a :class:`~pipeline.errors.KernelsmithError` it raised (a baseline
  that fails, no GPU): re-raised in the caller, who handles it as the serial path does;
- :class:`Lost`: anything else (an unexpected exception, a lane or Ray worker that died):
  the unit is lost, and only it; the caller turns it into that unit's typed outcome
  (an op's row with the reason, an evaluation ``crashed`` with the reason).

Across hosts (:mod:`optimize.scale.cluster`) a unit travels with its task folder's files
(:func:`task_files`); a host that lacks the folder unpacks them into a folder of its own
and builds into a work folder of its own (:func:`arrive`), and the build-cache entries it
made go back with the result (:func:`pack_builds`, :func:`adopt_builds` on the driver).

What must stay true: a unit never writes the run's records (the driver does, as today);
a unit's failure never touches another unit's result.
"""

from __future__ import annotations

import hashlib
import io
import os
import pathlib
import shutil
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from contract import layout
from optimize.harness import isolate
from pipeline.config import Config
from pipeline.errors import KernelsmithError

#: Where a host that lacks a unit's task folder keeps the copies it unpacks and its own work folder.
ARRIVALS = "kernelsmith-scale"
BUILDS = "builds"  # under the config's cache: pipeline.build's content-addressed entries
STAGING = ".staging-"


@dataclass(frozen=True)
class Unit:
    """One op's timing or one backend call, run whole on one GPU; ``key`` names it in progress and failures."""

    key: str
    fn: Callable[..., Any]
    task_dir: pathlib.Path | None
    config: Config
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Done:
    key: str
    value: Any
    device: str
    seconds: float
    builds: tuple[tuple[str, bytes], ...] = ()  # build-cache entries made on another host (key, tar.gz)


@dataclass(frozen=True)
class Raised:
    key: str
    error: KernelsmithError
    device: str


@dataclass(frozen=True)
class Lost:
    key: str
    device: str
    reason: str

    def text(self) -> str:
        return (
            f"lost: the worker running {self.key} on GPU {self.device} failed ({self.reason}); the other units are kept"
        )


Result = Done | Raised | Lost


def run_here(unit: Unit, device: str | None) -> Result:
    """Run ``unit`` in this process, its workers pinned to ``device`` (None: the environment's GPU)."""
    start = time.monotonic()
    label = device if device is not None else os.environ.get("CUDA_VISIBLE_DEVICES", "default")
    try:
        with isolate.pinned(device):
            value = unit.fn(unit.task_dir, unit.config, *unit.args, **dict(unit.kwargs))
    except KernelsmithError as err:
        return Raised(unit.key, err, label)
    except Exception as err:  # noqa: BLE001 - whatever else happened loses this unit alone (the module doc)
        first = str(err).strip().splitlines()[0][:300] if str(err).strip() else ""
        return Lost(unit.key, label, f"{type(err).__name__}: {first}" if first else type(err).__name__)
    return Done(unit.key, value, label, time.monotonic() - start)


# ---------------------------------------------------------------------------- another host


def task_files(task_dir: pathlib.Path | None) -> dict[str, bytes]:
    """Every file of a task folder (task.json, src/...), by relative path: what a unit carries to another host."""
    if task_dir is None or not task_dir.is_dir():
        return {}
    return {str(p.relative_to(task_dir)): p.read_bytes() for p in sorted(task_dir.rglob("*")) if p.is_file()}


def _same_task(task_dir: pathlib.Path, files: Mapping[str, bytes]) -> bool:
    try:
        return (task_dir / layout.TASK_FILE).read_bytes() == files.get(layout.TASK_FILE)
    except OSError:
        return False


def arrive(unit: Unit, files: Mapping[str, bytes], *, root: pathlib.Path | None = None) -> tuple[Unit, bool]:
    """``unit`` as this host can run it, and whether it was moved (this host lacks the driver's folders).

    Where the task folder is here with the same ``task.json`` and the work folder exists (the
    driver's host, a shared file system) the unit runs as it is. Elsewhere the files are unpacked
    once into ``<tmp>/kernelsmith-scale/tasks/<digest>/<op>`` and the unit builds and keeps its
    worker folders under ``<tmp>/kernelsmith-scale/work``.
    """
    if unit.task_dir is None or (_same_task(unit.task_dir, files) and unit.config.work.is_dir()):
        return unit, False
    root = root or pathlib.Path(tempfile.gettempdir()) / ARRIVALS
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    folder = root / "tasks" / digest.hexdigest()[:24] / unit.task_dir.name
    if not layout.has_task(folder):
        staging = folder.parent / f"{STAGING}{uuid.uuid4().hex}"
        for name, data in files.items():
            target = staging / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        try:
            os.replace(staging, folder)
        except OSError:  # another unit of the same task unpacked it first: the same bytes
            shutil.rmtree(staging, ignore_errors=True)
    config = unit.config.model_copy(update={"work_dir": str(root / "work")})
    if unit.config.sglang.cache_dir:  # a cache outside the work folder is the driver's path: use our own
        config = config.model_copy(update={"sglang": unit.config.sglang.model_copy(update={"cache_dir": None})})
    return replace(unit, task_dir=folder, config=config), True


def pack_builds(cache: pathlib.Path, since: float) -> tuple[tuple[str, bytes], ...]:
    """The build-cache entries published under ``cache`` since ``since`` (a ``time.time()``), each as a tar.gz."""
    builds = cache / BUILDS
    out = []
    for entry in sorted(builds.iterdir()) if builds.is_dir() else []:
        if entry.name.startswith(".") or not entry.is_dir() or entry.stat().st_mtime < since:
            continue
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            tar.add(entry, arcname=".")
        out.append((entry.name, buffer.getvalue()))
    return tuple(out)


def adopt_builds(cache: pathlib.Path, builds: tuple[tuple[str, bytes], ...]) -> int:
    """Publish entries another host built into this host's build cache (staging + rename); returns how many."""
    adopted = 0
    root = cache / BUILDS
    for key, data in builds:
        entry = root / key
        if entry.exists() or "/" in key or key.startswith("."):
            continue
        staging = root / f"{STAGING}{uuid.uuid4().hex}"
        staging.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            tar.extractall(staging, filter="data")
        try:
            os.replace(staging, entry)
            adopted += 1
        except OSError:  # published meanwhile: content-addressed, the same build
            shutil.rmtree(staging, ignore_errors=True)
    return adopted


def run_shipped(unit: Unit, files: Mapping[str, bytes]) -> Result:
    """A unit on a Ray worker: arrived (:func:`arrive`), run on the GPU Ray gave this process, builds packed."""
    since = time.time()
    here, moved = arrive(unit, files)
    result = run_here(here, None)
    if moved and isinstance(result, Done):
        result = replace(result, builds=pack_builds(here.config.cache, since))
    return result


__all__ = [
    "Done",
    "Lost",
    "Raised",
    "Result",
    "Unit",
    "adopt_builds",
    "arrive",
    "pack_builds",
    "run_here",
    "run_shipped",
    "task_files",
]
