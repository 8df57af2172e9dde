"""The optimize loop over several ops at once: one op per lane, one run.

An op's rounds depend on each other (each starts from the best so far), so what runs in
parallel is ops: :func:`run_ops` runs up to ``lanes`` ops at once, each in its own thread
with its own :class:`~optimize.loop.Loop` (its own metered model and per-op state), all
sharing one :class:`~optimize.budget.Budget` and one backend whose calls are units on the
pool's GPUs (:class:`optimize.scale.backend.ScaledBackend`). Trajectories, candidates,
evaluations and reports are written per op as in a serial run, and ``summary.json`` lists
the ops in the order given.

What must stay true: an op's results are those a serial run gives it (its rounds see only
its own evaluations); a run-wide budget spent by one op skips the ops not yet started, as the
serial loop skips the ops after it; a configuration error stops the run as it does serially.
"""

from __future__ import annotations

import pathlib
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from optimize.budget import BUDGETS
from optimize.loop import Loop
from optimize.session import LoopOptions, Progress
from optimize.trajectory import now_iso
from pipeline.config import Config
from pipeline.errors import ConfigError, KernelsmithError
from pipeline.records import Task
from pipeline.run_records import OpSummary, RunSummary


def run_ops(
    config: Config,
    options: LoopOptions,
    backend: Any,
    ops: Sequence[tuple[pathlib.Path, Task]],
    *,
    lanes: int,
    model: Any = None,
    progress: Progress | None = None,
    hooks: Any = None,
) -> tuple[RunSummary, Loop]:
    """Every op of ``ops``, up to ``lanes`` at once; the run's summary (written) and the loop that wrote it."""
    head = Loop(config, options, backend, model=model, hooks=hooks, progress=progress)
    head.run_dir.mkdir(parents=True, exist_ok=True)
    started = now_iso()
    lock = threading.Lock()
    stopped: list[str] = []

    def one(item: tuple[pathlib.Path, Task]) -> OpSummary:
        task_dir, task = item
        with lock:
            stop = stopped[0] if stopped else None
        if stop is not None:
            return OpSummary(op_id=task.op_id, status="skipped", stop_reason=stop, detail=head.budget.message(stop))
        loop = Loop(config, options, backend, model=model, hooks=hooks, progress=progress)
        loop.budget = head.budget  # one run, one budget: every op charges it
        try:
            summary = loop.run_op(task_dir, task)
        except ConfigError:
            raise
        except KernelsmithError as err:
            return OpSummary(op_id=task.op_id, status="failed", detail=str(err))
        if summary.stop_reason in BUDGETS:
            with lock:
                stopped.append(summary.stop_reason)
        return summary

    with ThreadPoolExecutor(max_workers=max(1, lanes), thread_name_prefix="kernelsmith-op") as threads:
        summaries = list(threads.map(one, ops))
    return head.run_summary(summaries, started), head


__all__ = ["run_ops"]
