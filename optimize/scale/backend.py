"""A measurement backend whose calls are units: what the optimize loop talks to when it scales out.

:class:`ScaledBackend` implements :class:`optimize.backends.Backend`. Each ``evaluate``,
``evaluate_many`` (a search population), ``profile`` and ``validate_cases`` call is one
unit (:func:`call_backend`): on its lane the real backend is made afresh from a
:class:`BackendSpec` (the GPU harness, or the replay file) and called there, so an
evaluation is built, checked and timed whole on one GPU, exactly as in a serial run.

What must stay true:
- ``gpu_s`` is the calling thread's own total (one op runs per thread in
  :mod:`optimize.scale.ops`), so the round records and the run's GPU budget charge each op
  what its own units spent, as the serial path does;
- the replay file of a GPU run (``record_to``) is written on the driver, one writer at a time;
- a lost unit is a typed outcome: an evaluation ``crashed`` (each member of a population),
  a profile ``failed``, a testing proposal refused, each saying why.
"""

from __future__ import annotations

import collections
import os
import pathlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from optimize.scale.pool import Pool
from optimize.scale.units import Done, Lost, Raised, Unit
from pipeline.config import Config
from pipeline.records import Task
from pipeline.run_records import Candidate, Evaluation, Outcome


@dataclass(frozen=True)
class BackendSpec:
    """How a lane makes the real backend: ``gpu`` (the harness) or ``replay`` (the file at ``replay``)."""

    kind: Literal["gpu", "replay"]
    replay: str | None = None

    def make(self, config: Config) -> Any:
        if self.kind == "replay":
            from optimize.backends.replay import ReplayBackend

            assert self.replay is not None
            return ReplayBackend(self.replay)
        from optimize.backends.gpu import GpuBackend

        return GpuBackend(config)


def call_backend(
    task_dir: pathlib.Path | None, config: Config, spec: BackendSpec, method: str, *args: Any, **kwargs: Any
) -> tuple[Any, float]:
    """One backend call on this lane: (its value, the GPU seconds it charged)."""
    backend = spec.make(config)
    value = getattr(backend, method)(task_dir, *args, **kwargs)
    return value, float(backend.gpu_s)


class ScaledBackend:
    """The backend of ``spec``, its calls sent to ``pool`` as units; see the module doc."""

    def __init__(
        self,
        spec: BackendSpec,
        pool: Pool,
        config: Config,
        *,
        description: str,
        simulated: bool,
        record_to: str | os.PathLike[str] | None = None,
        device: str = "unknown GPU",
    ) -> None:
        self.spec = spec
        self.pool = pool
        self.config = config
        self.simulated = simulated
        self.name = f"{spec.kind}@{pool.kind}x{len(pool.devices)}"
        self.record_to = pathlib.Path(record_to) if record_to is not None else None
        self.device = device
        self.used: collections.Counter[str] = collections.Counter()  # units per device
        self._description = description
        self._spent = threading.local()
        self._lock = threading.Lock()
        if spec.kind == "gpu":  # only the GPU harness validates testing proposals (the session asks getattr)
            setattr(self, "validate_cases", self._validate_cases)  # noqa: B010

    @property
    def gpu_s(self) -> float:
        return float(getattr(self._spent, "gpu_s", 0.0))

    def available(self) -> tuple[bool, str]:
        return True, self.describe()

    def describe(self) -> str:
        return f"{self._description}; units on {self.pool.describe()}"

    def _call(self, key: str, task_dir: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        path = pathlib.Path(task_dir) if task_dir is not None else None
        unit = Unit(key, call_backend, path, self.config, (self.spec, method, *args), kwargs)
        result = self.pool.submit(unit).result()
        if isinstance(result, Raised):
            raise result.error
        if isinstance(result, Lost):
            return result
        assert isinstance(result, Done)
        value, gpu_s = result.value
        self._spent.gpu_s = self.gpu_s + gpu_s
        with self._lock:
            self.used[result.device] += 1
        return value

    def evaluate(
        self,
        task_dir: str | os.PathLike[str] | None,
        task: Task,
        candidate: Candidate,
        *,
        stage: Literal["round", "final"] = "round",
    ) -> Evaluation:
        value = self._call(
            f"{task.op_id} {candidate.id[:12]} ({stage})", task_dir, "evaluate", task, candidate, stage=stage
        )
        if isinstance(value, Lost):
            return _lost(task, candidate, value)
        self._record(value, baseline=candidate.is_baseline, stage=stage)
        return value

    def evaluate_many(
        self, task_dir: str | os.PathLike[str] | None, task: Task, candidates: Sequence[Candidate]
    ) -> list[Evaluation]:
        value = self._call(
            f"{task.op_id} population of {len(candidates)}", task_dir, "evaluate_many", task, list(candidates)
        )
        if isinstance(value, Lost):
            return [_lost(task, c, value) for c in candidates]
        for evaluation in value:
            self._record(evaluation, baseline=False, stage="round")
        return list(value)

    def profile(self, task_dir: Any, task: Task, candidate: Candidate | None) -> Any:
        from optimize.harness.tools import NcuResult

        value = self._call(f"{task.op_id} profile", task_dir, "profile", task, candidate)
        if isinstance(value, Lost):
            return NcuResult(status="failed", detail=value.text())
        return value

    def _validate_cases(self, task_dir: Any, task: Task, cases: Any) -> list[tuple[bool, str]]:
        value = self._call(f"{task.op_id} testing proposals", task_dir, "validate_cases", task, list(cases))
        if isinstance(value, Lost):
            return [(False, value.text())] * len(cases)
        return list(value)

    def _record(self, evaluation: Evaluation, *, baseline: bool, stage: Literal["round", "final"]) -> None:
        if self.record_to is None:
            return
        from optimize.backends import replay

        with self._lock:
            replay.record(self.record_to, evaluation, baseline=baseline, stage=stage, device=self.device)


def _lost(task: Task, candidate: Candidate, lost: Lost) -> Evaluation:
    return Evaluation(op_id=task.op_id, candidate=candidate.id, outcome=Outcome.crashed, detail=lost.text())


__all__ = ["BackendSpec", "ScaledBackend", "call_backend"]
