"""``kernelsmith track run``: the census of one SGLang source, appended to the results store as one batch.

Every task with real-model shapes (a shape from the catalog, not only the synthetic one
:func:`contract.shapes.synthetic_shape` invents) has its baseline timed at those shapes
(:func:`bench.one_op.bench_op`); the rows go into the store as one batch
labelled with the tasks' SGLang version or commit, so ``kernelsmith track`` follows the
kernels across releases.

The tasks come from ``--tasks`` (a folder holding ``tasks/``, or a tarball of one, made on
the CPU machine with ``kernelsmith extract --all --no-compile``, so the GPU spends no
time extracting), else from the work folder's own ``tasks/``.

Each batch also notes, per op, the sha256 of every source file its task holds
(``files:<op>``), so a regression between two releases names the kernel files that changed.

With several GPUs (``--gpus``, default every visible one) or a Ray cluster (``--ray``) the ops
are timed at once, one op per GPU (:mod:`optimize.scale`); the batch is the same one batch.

What must stay true: one op's failure is its own row (``error``) and the census goes on;
what was measured before a lost GPU is kept; progress is shown per op.
"""

from __future__ import annotations

import json
import pathlib
import shlex
import sys
import tarfile
import time
from dataclasses import dataclass

from bench.bench import OpBench, bench_folders, source_of, store_batch
from contract.layout import has_task, load_task, tasks_root
from contract.sizes import SYNTHETIC_MODEL
from optimize.errors import TaskMissing
from pipeline.config import Config
from pipeline.records import Task
from pipeline.store_records import files_note


def tasks_root_of(config: Config, given: str | None) -> pathlib.Path:
    """The tasks/ folder of ``given`` (a folder holding tasks/, or a tarball of one), else the work folder's."""
    if not given:
        return tasks_root(config.work)
    path = pathlib.Path(given)
    if path.is_file():  # a tarball of tasks/: unpacked once under work/track/<its name>
        name = next((path.name[: -len(x)] for x in (".tar.gz", ".tgz", ".tar") if path.name.endswith(x)), path.name)
        dest = config.work / "track" / name
        if not (dest / "tasks").is_dir():
            dest.mkdir(parents=True, exist_ok=True)
            with tarfile.open(path) as tar:
                tar.extractall(dest, filter="data")
        path = dest
    return path / "tasks" if (path / "tasks").is_dir() else path


def real_shaped(tasks_root: pathlib.Path) -> list[tuple[pathlib.Path, Task]]:
    """(folder, task) of every task whose shapes include a real model's (synthetic-only tasks are left out)."""
    loaded = [(folder, load_task(folder)) for folder in sorted(tasks_root.iterdir()) if has_task(folder)]
    return [(folder, task) for folder, task in loaded if any(s.model != SYNTHETIC_MODEL for s in task.shapes)]


@dataclass(frozen=True)
class CensusOptions:
    """What ``kernelsmith track run`` is asked: ``tasks`` a folder with ``tasks/`` or a tarball of one
    (None: the work folder's), ``ops`` only these (empty: every task with a catalog shape)."""

    tasks: str | None = None
    ops: tuple[str, ...] = ()


def run(options: CensusOptions, config: Config) -> int:
    """One census batch into the store (see the module doc); a rerun skips the ops already in it."""
    root = tasks_root_of(config, options.tasks)
    if not root.is_dir():
        raise TaskMissing(f"no tasks under {root}", fix="run `kernelsmith extract --all --no-compile`, or pass --tasks")
    folders = real_shaped(root)
    ops = options.ops
    if ops:
        folders = [(f, t) for f, t in folders if f.name in set(ops)]
    command = shlex.join(
        [
            "kernelsmith",
            "track",
            "run",
            *(["--tasks", options.tasks] if options.tasks else []),
            *(["--ops", *ops] if ops else []),
        ]
    )
    source = source_of([t for _, t in folders], config.sglang.version)
    done = censused(config, source)
    if done:
        kept = [(f, t) for f, t in folders if t.op_id not in done]
        print(
            f"census of sglang {source}: {len(folders) - len(kept)} ops already in the store, "
            f"{len(kept)} to measure (a rerun resumes)",
            file=sys.stderr,
        )
        folders = kept
    start = time.monotonic()
    results: list[OpBench] = []
    tasks: list[Task] = []

    def keep(result: OpBench, task: Task) -> None:
        results.append(result)
        tasks.append(task)

    from optimize.scale.pool import open_pool

    pool = open_pool(config)  # several GPUs or a Ray cluster: one op per GPU; None: the serial loop
    order = {task.op_id: i for i, (_, task) in enumerate(folders)}
    try:
        bench_folders(
            folders, config, dtypes=None, compile_=False, label="census", stream=sys.stderr, measured=keep, pool=pool
        )
    except KeyboardInterrupt:  # stopped part-way: what was measured goes into the store, then the CLI says so
        _store(config, command, results, tasks, source, order)
        reached = {r.op_id for r in results}
        left = [task.op_id for _, task in folders if task.op_id not in reached]
        print(
            f"census of sglang {source}: stopped after {len(results)} of {len(folders)} ops in "
            f"{time.monotonic() - start:.0f} s; not reached ({len(left)}): {_listed(left)}; the same command resumes",
            file=sys.stderr,
        )
        raise
    finally:
        if pool is not None:
            pool.close(wait=False)
    _store(config, command, results, tasks, source, order)
    measured = sum(1 for r in results if r.rows and not r.error)
    failed = [r for r in results if r.error]
    print(
        f"census of sglang {source}: {measured} of {len(folders)} ops measured in {time.monotonic() - start:.0f} s"
        + (f"; not measured: {', '.join(f'{r.op_id} ({r.error[:80]})' for r in failed)}" if failed else ""),
        file=sys.stderr,
    )
    return 1 if failed and not measured else 0


def _listed(ops: list[str], most: int = 12) -> str:
    return ", ".join(ops[:most]) + (f" and {len(ops) - most} more" if len(ops) > most else "")


def censused(config: Config, source: str) -> set[str]:
    """Ops already measured by a ``track run`` of ``source`` in the results store: a rerun skips them."""
    from pipeline.store import ResultsStore

    return {
        row.op_id
        for _, batch, row in ResultsStore(config.work).history()
        if batch.sglang == source and batch.command.startswith("kernelsmith track run") and row.variant == "baseline"
    }


def _store(
    config: Config, command: str, results: list[OpBench], tasks: list[Task], source: str, order: dict[str, int]
) -> None:
    """One batch of ``results`` (with each task's source-file digests) in the store; nothing when nothing was timed.

    Rows go in the census's op order (``order``), whatever order the GPUs finished them in."""
    results = sorted(results, key=lambda r: order.get(r.op_id, len(order)))
    tasks = sorted(tasks, key=lambda t: order.get(t.op_id, len(order)))
    notes = {files_note(t.op_id): json.dumps({f.path: f.sha256[:16] for f in t.files}, sort_keys=True) for t in tasks}
    store_batch(config, command, results, source, notes)
    if config.history is not None:  # the batch as plain data too, in a folder the project keeps
        from pipeline.history import export
        from pipeline.store import ResultsStore

        for path in export(ResultsStore(config.work), config.history):
            print(f"history: {path}", file=sys.stderr)


__all__ = ["CensusOptions", "censused", "real_shaped", "run"]
