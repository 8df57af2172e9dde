"""``kernelsmith bench --all`` over every task: :mod:`bench.health`'s plan, build and check, overlapped.

Three phases, because the GPU machine has many cores and one GPU:

1. **plan** every task (pure Python; a task that does not load or plan is a row
   with its reason);
2. **build** the tasks' modules in one nvcc pool, one task per usable CPU,
   cheapest first (one task at a time left all but one core idle: the sweep is
   over a hundred modules, some of them minutes of nvcc each);
3. **check** each task as soon as its modules are built, with up to
   ``harness.health_workers`` worker processes at once. The
   checks are correctness only, nothing is timed, so sharing the GPU changes no
   verdict; each worker is its own process and CUDA context, so one that faults
   or hangs takes down only its own row (``crashed``/``timeout``).

With ``harness.sweep_budget_s`` set, nothing new starts once that many seconds
have passed; the rows not reached say so. Every finished row is written at once
to ``work/bench/health/<key>.json``, the
key hashing the task record and the harness's own sources: a rerun (after an
interruption, or the device tool's per-call time limit) skips every task already
judged by the same code, and re-judges all of them after the harness changed.

Kept apart from :mod:`bench.health`, which judges one task: this module only schedules,
and changes no verdict.

What must stay true: the rows come back in ``task_dirs`` order, one per task, whatever
finished first; a row the budget did not reach is never saved, and a verdict that lands
after the sweep returned is saved for the next sweep, not returned. :func:`bench.health.prepare`,
:func:`~bench.health.build_one` and :func:`~bench.health.check` are looked up through
:mod:`bench.health` at call time (tests stand in for them there).
"""

from __future__ import annotations

import concurrent.futures
import pathlib
import threading
import time
from collections.abc import Callable, Sequence

from bench import health
from bench.health import HealthRow
from pipeline.build import first_error, usable_cpus
from pipeline.record_io import read_record, write_record
from pipeline.records import BuildReport

CHECK_GRACE_S = 60.0  # with a budget: how long checks already running may take past it


def row_path(work: pathlib.Path, key: str) -> pathlib.Path:
    return work / "bench" / "health" / f"{key}.json"


def _build_cost(prep: health._Prepared) -> float:
    assert prep.task is not None
    recorded = prep.task.baseline_build
    return recorded.seconds if recorded is not None and recorded.ok else float("inf")


class _Sweep:
    """One sweep's state, shared by its build and check threads: each task's row, reported once as it lands."""

    def __init__(
        self,
        preps: list[health._Prepared],
        config,
        progress: Callable[[str], None],
        budget_s: float | None,
        start: float,
    ) -> None:
        self.preps, self.config, self.progress = preps, config, progress
        self.budget_s, self.start = budget_s, start
        self.total = len(preps)
        self.rows: list[HealthRow | None] = [None] * self.total
        self.done = 0
        self.lock = threading.Lock()
        self.closed = threading.Event()

    def out_of_time(self) -> bool:
        return self.budget_s is not None and time.monotonic() - self.start > self.budget_s

    def left(self, grace_s: float) -> float | None:
        return None if self.budget_s is None else max(0.0, self.start + self.budget_s + grace_s - time.monotonic())

    def finish(self, i: int, row: HealthRow, *, save: bool = True) -> None:
        with self.lock:
            if self.closed.is_set():
                if save:
                    write_record(row, row_path(self.config.work, self.preps[i].key))
                return
            if self.rows[i] is not None:
                return  # already reported (not reached) while its work was still running
            self.rows[i] = row
            self.done += 1
            if save:
                write_record(row, row_path(self.config.work, self.preps[i].key))
            verdict = "passed" if row.passed else ("built" if row.built else "stopped")
            self.progress(
                f"[{self.done}/{self.total}] {row.op_id}: {verdict}{': ' + row.reason[:160] if row.reason else ''}"
            )

    def not_reached(self, i: int, stage: str) -> None:
        reason = f"not judged: the sweep's {self.budget_s:g} s budget ran out before its {stage}; run the sweep again to resume"
        self.finish(i, self.preps[i].row.model_copy(update={"reason": reason}), save=False)

    def build_task(self, i: int) -> tuple[BuildReport, list[str]] | None:
        return None if self.out_of_time() else health.build_one(self.preps[i], self.config)

    def check_task(self, i: int, libraries: list[str]) -> None:
        if self.out_of_time():
            self.not_reached(i, "check")
        else:
            self.finish(i, health.check(self.preps[i], libraries, self.config))

    def results(self) -> list[HealthRow]:
        return [r for r in self.rows if r is not None]


def health_all(
    task_dirs: Sequence[pathlib.Path],
    config,
    *,
    progress: Callable[[str], None] = lambda line: print(line, flush=True),
    budget_s: float | None = None,
    model=None,
) -> list[HealthRow]:
    """Plan, build, check (module doc); rows in ``task_dirs`` order, each saved as soon as it is final.
    ``model``: the testing agent's LLM for what the completion rules leave open (see :func:`bench.health.prepare`).

    Builds and checks overlap: a task's check starts as soon as its modules are
    built. Builds start cheapest first (the seconds extract's compile check took),
    so a time-limited sweep judges as many tasks as it can. With ``budget_s``, no
    build or check starts after that many seconds; what was not reached is a row
    saying so, and is not saved: the next sweep judges it.
    """
    start = time.monotonic()
    sweep = _Sweep([health.prepare(d, model) for d in task_dirs], config, progress, budget_s, start)
    todo = _to_judge(sweep)
    if not todo:
        return sweep.results()
    progress(
        f"building {sum(len(p.units) for i in todo if (p := sweep.preps[i].plan) is not None)} module(s) for {len(todo)} task(s), checking each when built ..."
    )
    _build_and_check(sweep, todo)
    return sweep.results()


def _to_judge(sweep: _Sweep) -> list[int]:
    """The tasks left to build and check, cheapest build first; every other task's row is final now
    (the verdict saved by an earlier sweep of the same code, or why the task was not planned)."""
    todo: list[int] = []
    for i, prep in enumerate(sweep.preps):
        saved = row_path(sweep.config.work, prep.key)
        if saved.is_file():
            sweep.finish(i, read_record(HealthRow, saved), save=False)
        elif prep.plan is None:
            sweep.finish(i, prep.row)
        else:
            todo.append(i)
    todo.sort(key=lambda i: _build_cost(sweep.preps[i]))
    return todo


def _build_and_check(sweep: _Sweep, todo: list[int]) -> None:
    """Phases 2 and 3 (module doc): ``todo`` built in one pool, each task checked in another as soon
    as it built; what the budget leaves unreached is reported so."""
    config, preps = sweep.config, sweep.preps
    measured = False
    checks: dict[concurrent.futures.Future, int] = {}
    builders = concurrent.futures.ThreadPoolExecutor(max_workers=usable_cpus(), thread_name_prefix="build")
    checkers = concurrent.futures.ThreadPoolExecutor(
        max_workers=max(1, config.harness.health_workers), thread_name_prefix="check"
    )
    try:
        builds = {builders.submit(sweep.build_task, i): i for i in todo}
        try:
            for future in concurrent.futures.as_completed(builds, timeout=sweep.left(0.0)):
                i = builds[future]
                built = future.result()
                if built is None:
                    sweep.not_reached(i, "build")
                    continue
                report, libraries = built
                preps[i].row = preps[i].row.model_copy(update={"built": report.ok, "build_s": report.seconds})
                if not report.ok:
                    sweep.finish(i, preps[i].row.model_copy(update={"reason": f"nvcc: {first_error(report.stderr)}"}))
                elif not measured:
                    # Alone first: a worker measures and caches the device's ceilings on its first
                    # run, and several doing that at once would measure each other's load.
                    sweep.check_task(i, libraries)
                    measured = True
                else:
                    checks[checkers.submit(sweep.check_task, i, libraries)] = i
        except concurrent.futures.TimeoutError:  # budget spent with builds still running: not waited for
            for future, i in builds.items():
                if not future.done() or future.result() is None:
                    sweep.not_reached(i, "build")
        _, running = concurrent.futures.wait(checks, timeout=sweep.left(CHECK_GRACE_S))
        for future in running:
            sweep.not_reached(checks[future], "check")
    finally:
        sweep.closed.set()  # a verdict that arrives later is still saved for the next sweep, not returned
        builders.shutdown(wait=sweep.budget_s is None, cancel_futures=True)
        checkers.shutdown(wait=sweep.budget_s is None, cancel_futures=True)
