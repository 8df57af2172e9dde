"""``kernelsmith bench``: measure the baselines and write BENCHMARKS.md.

Two modes:

- ``--ops A B ...`` (default: the three default ops): for each op, its baseline
  at every catalog shape (bf16, the dtype models are served in; ``--dtypes``
  widens it), next to the PyTorch reference run
  eagerly and through ``torch.compile`` with default settings (static first,
  then dynamic shapes; ``--no-torch-compile`` skips it). Raw table: op,
  dtype, shape, µs, spread, GB/s, % of copy bandwidth, time/floor, eager µs,
  compile µs.
- ``--all``: every task under ``work/tasks``: does its baseline build, run and
  pass its own generated tests? One line per task with the reason for each
  failure, and the contracts static inference could not fully determine
  (``contract.unresolved``). The sweep itself lives in
  :mod:`bench.health_sweep` (parallel builds, concurrent checks, resumable), each
  task's verdict in :mod:`bench.health`.

Every run replaces its own section of BENCHMARKS.md (sections are keyed by the
exact command) and keeps every other section; it also adds a batch to the
results store (``work/results``) for regression tracking.

An op whose baseline fails in the worker (its own check refuses the call, the
worker raises) does not stop the bench: the baseline is checked once at the
smallest catalog shape, the contract is fixed from what it showed through the
same loop the ``bench --all`` sweep uses
(:func:`optimize.harness.baseline_repair.repair_baseline`: a dtype its check
demands, a role it disproves), and the op is timed again; what still fails is
that op's row, and every other op's figures are written as usual.

What must stay true: every figure written here was measured in this run on the
GPU named in the section header; a task that cannot be measured says why
instead of leaving a blank; one op's failure never loses another op's figures.
"""

from __future__ import annotations

import pathlib
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

from bench.one_op import bench_config, bench_op, bench_request, from_worker
from bench.sections import DEFAULT_OUTPUT, BenchOptions, OpBench, canonical_command, timing_section, write_section
from optimize.harness import evaluate
from optimize.harness.protocol import WorkerRequest, WorkerResult
from pipeline.config import DEFAULT_OPS, Config
from pipeline.output import emit
from pipeline.records import Task

# ---------------------------------------------------------------------------- running


def _task_dirs(config: Config, ops: Sequence[str] | None) -> list[tuple[str, pathlib.Path]]:
    from contract import layout
    from optimize.errors import TaskMissing

    root = layout.tasks_root(config.work)
    if ops is None:
        if not root.is_dir():
            raise TaskMissing(f"no tasks under {root}", fix="run `kernelsmith extract --all` first")
        return [(p.name, p) for p in sorted(root.iterdir()) if layout.has_task(p)]
    out = []
    for op in ops:
        path = layout.task_dir(config.work, op)
        if not layout.has_task(path):
            raise TaskMissing(f"no extracted task for {op} at {path}", fix=f"run `kernelsmith extract --ops {op}`")
        out.append((op, path))
    return out


BATCH_OPS = 8  # ops per batch worker (bench --ops, track run): progress is shown after each batch


@dataclass(frozen=True)
class BatchAnswer:
    """What one batch worker gave: ``rows`` {position: row} of the ops it measured, and ``unmeasured``
    {position: why in one line} of the others, which the caller times alone."""

    rows: dict[int, OpBench]
    unmeasured: dict[int, str]


def batch_members(
    items: Sequence[tuple[pathlib.Path, Task]], config: Config, *, dtypes: Sequence[str] | None, compile_: bool
) -> BatchAnswer:
    """The ops of ``items`` one batch worker (:func:`optimize.harness.worker.run_batch`) measured, and why not the rest.

    The fast path of :func:`bench_op`: same requests, same timing, one worker start for all.
    An op missing from the answer (its request could not be made, its baseline raised, a CUDA
    fault, the worker lost) is the caller's to run alone (:func:`bench_op`): that path can take
    a minute (a fresh worker, the contract repair's rebuilds), so :func:`bench_folders` runs
    those after every batch, and a census stopped by its time limit has measured every op a
    batch could. Each one's reason is said at once (on the H200, 2026-12-07, a census whose
    window ended before the solo runs said nothing of eight ops a batch had skipped). On Ctrl-C
    the members already written reach the caller through :class:`BatchInterrupted`.
    """
    from optimize.harness.evaluate import run_request, worker_dir
    from optimize.harness.worker import member_path

    rows: dict[int, OpBench] = {}
    unmeasured: dict[int, str] = {}
    requests: list[tuple[int, WorkerRequest]] = []
    notes: dict[int, list[str]] = {}
    for index, (path, task) in enumerate(items):
        try:
            made = bench_request(path, task, config, dtypes=dtypes, compile_=compile_)
        except Exception as err:  # noqa: BLE001 - planning or building refused: the op's own path (bench_op) says why
            unmeasured[index] = f"its request could not be made ({type(err).__name__}: {_first_line(err)})"
            continue
        if isinstance(made, OpBench):
            rows[index] = made
        else:
            requests.append((index, made[0]))
            notes[index] = made[1]

    def collect(workdir: pathlib.Path) -> None:
        for position, (index, _) in enumerate(requests):
            member = member_path(workdir / "result.json", position)
            try:
                worker = WorkerResult.model_validate_json(member.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                unmeasured[index] = "no result: the batch worker stopped before it"
                continue
            if worker.status == "ok" and worker.timings:
                rows[index] = from_worker(items[index][1], worker, notes.get(index, []))
            else:
                unmeasured[index] = f"{worker.status}: {_first_line(worker.detail) or 'nothing timed'}"

    if requests:
        batch = WorkerRequest(
            mode="batch",
            op_id=f"batch of {len(requests)}",
            contract=requests[0][1].contract,
            baseline_libraries=[],
            device_cache_dir=str(config.cache / "device"),
            batch=[request for _, request in requests],
        )
        workdir = worker_dir(config, items[requests[0][0]][1].op_id, "bench-batch")
        try:
            run_request(batch, bench_config(config, len(requests)), workdir)
        except KeyboardInterrupt:
            collect(workdir)
            raise BatchInterrupted([(i, rows[i]) for i in sorted(rows)]) from None
        collect(workdir)
    return BatchAnswer(rows, unmeasured)


def _first_line(text: object, limit: int = 120) -> str:
    return (str(text).strip().splitlines() or [""])[0][:limit]


class BatchInterrupted(KeyboardInterrupt):
    """Ctrl-C during a batch; ``rows`` holds (position in the batch, row) of the ops measured before it."""

    def __init__(self, rows: list[tuple[int, OpBench]]) -> None:
        super().__init__()
        self.rows = rows


def store_batch(
    config: Config, command: str, results: Sequence[OpBench], sglang: str, notes: dict[str, str] | None = None
) -> None:
    """The measured rows of ``results`` as one batch of the results store (none without a device)."""
    from optimize.harness import roofline
    from pipeline.digest import kernelsmith_version
    from pipeline.store import Measurement, ResultsStore, Row, now_iso

    rows = []
    device = None
    for op in results:
        device = device or op.device
        for t in op.rows:
            gbps = t.bytes / (t.baseline_us * 1e3) if t.baseline_us else None
            floor = roofline.device_floor_us(t.bytes, op.device, t.traffic) if op.device and t.byte_bound else None
            rows.append(
                Row(
                    op_id=op.op_id,
                    dtype=t.dtype,
                    shape=t.label,
                    time_us=t.baseline_us,
                    spread_pct=t.baseline_spread_pct,
                    gbps=gbps,
                    floor_us=floor,
                )
            )
            for variant, us in (("torch_eager", t.eager_us), ("torch_compile", t.compile_us)):
                if us is not None:
                    rows.append(Row(op_id=op.op_id, dtype=t.dtype, shape=t.label, variant=variant, time_us=us))
    if rows and device is not None:
        ResultsStore(config.work).add(
            Measurement(
                device=device.name,
                taken_at=now_iso(),
                command=command,
                sglang=sglang,
                rows=rows,
                kernelsmith=kernelsmith_version(),
                notes=dict(notes or {}),
            )
        )


def run(options: BenchOptions, config: Config) -> int:
    """Entry point of ``kernelsmith bench`` (see the module doc). Exit 1 when any op was not measured."""
    from contract.layout import load_task

    command = canonical_command(options)
    when = datetime.now(UTC).strftime("%Y-%m-%d")
    output = pathlib.Path(options.output or DEFAULT_OUTPUT)
    start = time.monotonic()
    if options.all_ops:
        from bench.health import health_section
        from bench.health_sweep import health_all

        model = None
        if config.llm.configured:  # the testing agent fills what the completion rules leave open
            from optimize.llm.client import LlmClient

            model = LlmClient(config.llm, cache_dir=config.cache / "llm")
            print(f"bench --all: open contract items go to the testing agent ({config.llm.model})", flush=True)
        rows = health_all(
            [path for _, path in _task_dirs(config, None)], config, budget_s=config.harness.sweep_budget_s, model=model
        )
        env = (
            f"Wall time {time.monotonic() - start:.0f} s (this run; verdicts of earlier runs of the same code are reused); "
            f"{config.harness.health_workers} check worker(s) at once; "
            f"nvcc time summed over tasks {sum(r.build_s for r in rows):.0f} s (cached builds count 0)."
        )
        section = health_section(command, rows, when, _device_name(config), env)
        failed = any(not r.passed for r in rows)
    else:
        from optimize.scale.pool import open_pool

        ops = list(options.ops or DEFAULT_OPS)
        folders = [(path, load_task(path)) for _, path in _task_dirs(config, ops)]
        pool = open_pool(config)  # several GPUs or a Ray cluster: one op per GPU; None: the serial loop
        so_far: list[tuple[OpBench, Task]] = []  # each op's row as soon as it is known
        try:
            results, tasks = bench_folders(
                folders,
                config,
                dtypes=options.dtypes,
                compile_=options.torch_compile,
                label="bench",
                pool=pool,
                measured=lambda row, task: so_far.append((row, task)),
            )
        except KeyboardInterrupt:  # Ctrl-C or a time limit: the ops measured so far get their section
            if so_far:
                order = {path.name: i for i, (path, _) in enumerate(folders)}
                kept = sorted(so_far, key=lambda pair: order.get(pair[0].op_id, len(order)))
                env = (
                    f"Interrupted after {time.monotonic() - start:.0f} s: {len(kept)} of {len(folders)} ops "
                    "measured (the others have no row; re-run the command to measure every op)."
                )
                _write_timing(config, output, command, [r for r, _ in kept], [t for _, t in kept], when, env)
            raise
        finally:
            if pool is not None:
                pool.close(wait=False)
        env = f"Wall time of the bench run: {time.monotonic() - start:.0f} s."
        _write_timing(config, output, command, results, tasks, when, env)
        emit(options, results)
        return 1 if any(r.error for r in results) else 0
    write_section(output, command, section)
    return 1 if failed else 0


def _write_timing(
    config: Config,
    output: pathlib.Path,
    command: str,
    results: Sequence[OpBench],
    tasks: Sequence[Task],
    when: str,
    env: str,
) -> None:
    """``bench --ops``'s section in ``output`` and its batch in the results store."""
    store_batch(config, command, list(results), source_of(tasks, config.sglang.version))
    write_section(output, command, timing_section(command, list(results), when, env))


def source_of(tasks: Sequence[Task], default: str) -> str:
    """The SGLang version or commit the tasks were extracted from (the last one that names it), else ``default``."""
    return next((v for t in reversed(tasks) if (v := t.source.version or t.source.commit)), default)


def bench_folders(
    folders: Sequence[tuple[pathlib.Path, Task]],
    config: Config,
    *,
    dtypes: Sequence[str] | None,
    compile_: bool,
    label: str,
    stream: TextIO | None = None,
    measured: Callable[[OpBench, Task], None] | None = None,
    pool: Any = None,
) -> tuple[list[OpBench], list[Task]]:
    """Each (folder, task)'s baseline timed in turn (``bench --ops``, ``track run``), with progress on ``stream``.

    Every task is completed first, as the sweep completes it (open contract items filled).
    One op's failure is its own row; a GPU lost (or a work dir that cannot be written) mid-run
    keeps what was measured and names the ops left (nothing measured at all: the error itself,
    whose fix is a GPU machine or a writable work dir, and no section is written).
    ``measured`` is told each op's result as soon as it is known, so a caller interrupted
    part-way (Ctrl-C, SIGTERM) still holds everything measured before. On a GPU machine every
    baseline is built first, all at once (:func:`optimize.harness.evaluate.prebuild`), so the timing loop finds them in
    the build cache instead of waiting on one nvcc at a time. Ops are timed in batches of
    :data:`BATCH_OPS` (:func:`batch_members`); an op a batch did not measure is timed alone
    after every batch, because its path (a fresh worker, the contract repair's rebuilds) can
    take a minute: a census stopped by its time limit has then measured every op a batch could
    (on the H200, 2026-12-02, three releases' census were stopped inside a batch with MoE
    members and kept none of its rows). The ops whose baselines the prebuild could not build are timed
    after the others: their own build (each instantiation alone, the refused ones dropped) can take
    minutes, and no op that is ready should wait behind it (on the H200, 2026-12-07, both census
    windows ended inside a batch of layernorm ops that never answered, the rest of the release
    unmeasured). Rows come back in the folders' order.

    ``pool`` (an :class:`optimize.scale.pool.Pool`: several GPUs, a Ray cluster) times the ops
    at once, one op per GPU (:func:`_bench_pooled`); None is the serial loop.
    """
    from contract.completion import complete
    from pipeline.gpu import gpu_available

    out = stream or sys.stdout
    tasks: list[Task] = [complete(loaded, path)[0] for path, loaded in folders]
    items = [(path, task) for (path, _), task in zip(folders, tasks)]
    batched = len(items) > 1 and gpu_available()[0]
    order = list(range(len(items)))  # the timing order: ops whose baselines built first
    if batched:
        built = evaluate.prebuild(items, config, dtypes=dtypes, stream=out)
        order = [i for i in order if built[i]] + [i for i in order if not built[i]]
        if not all(built):
            print(
                f"{label}: {len(built) - sum(built)} op(s) whose baselines did not build at once are timed last "
                "(their own build may take minutes)",
                file=out,
                flush=True,
            )
    if pool is not None:
        return _bench_pooled(
            pool, items, config, dtypes=dtypes, compile_=compile_, label=label, out=out, measured=measured
        ), tasks
    return _bench_serial(
        items, order, config, batched=batched, dtypes=dtypes, compile_=compile_, label=label, out=out, measured=measured
    ), tasks


def _bench_serial(
    items: Sequence[tuple[pathlib.Path, Task]],
    order: list[int],
    config: Config,
    *,
    batched: bool,
    dtypes: Sequence[str] | None,
    compile_: bool,
    label: str,
    out: TextIO,
    measured: Callable[[OpBench, Task], None] | None,
) -> list[OpBench]:
    """:func:`bench_folders`' serial loop: ``items`` timed in ``order``, in batches of :data:`BATCH_OPS`
    when ``batched`` (an op a batch did not measure alone, after every batch), else each alone; rows
    in the items' order. A GPU lost (or a work dir that cannot be written) keeps what was measured."""
    from optimize.errors import GpuRequired
    from pipeline.errors import NotWritable

    step = BATCH_OPS if batched else 1
    done: dict[int, OpBench] = {}  # position in ``items`` -> its row
    later: list[int] = []  # ops a batch did not measure: each alone, after every batch

    def report(index: int, result: OpBench, alone: bool) -> None:
        took = f" in {result.worker_s:.1f} s" if result.worker_s is not None else ""
        shapes = f"{len(result.rows)} shapes{took}{': ' + result.error if result.error else ''}"
        print(f"  {shapes}" if alone else f"  {result.op_id}: {shapes}", file=out, flush=True)
        done[index] = result
        if measured is not None:
            measured(result, items[index][1])

    def alone(index: int, where: str) -> None:
        print(f"{label} {where}/{len(items)}: {items[index][0].name} ...", file=out, flush=True)
        path, task = items[index]
        report(index, bench_op(path, task, config, dtypes=dtypes, compile_=compile_), True)

    first = 0
    positions: list[int] = []
    try:
        for first in range(0, len(items), step):
            positions = order[first : first + step]
            chunk = [items[i] for i in positions]
            if not batched or len(chunk) == 1:
                alone(positions[0], f"{first + 1}")
                continue
            names = ", ".join(path.name for path, _ in chunk)
            print(f"{label} {first + 1}-{first + len(chunk)}/{len(items)}: {names} ...", file=out, flush=True)
            got = batch_members(chunk, config, dtypes=dtypes, compile_=compile_)
            for offset in range(len(chunk)):
                if offset in got.rows:
                    report(positions[offset], got.rows[offset], False)
                else:
                    why = got.unmeasured.get(offset, "not in the batch's answer")
                    print(
                        f"  {chunk[offset][0].name}: not measured in the batch ({why}); timed alone after the batches",
                        file=out,
                        flush=True,
                    )
                    later.append(positions[offset])
        if later:
            print(
                f"{label}: {len(later)} op{'s' if len(later) != 1 else ''} the batches did not measure, "
                "each in its own worker now "
                "(its failure in full, the contract repair)",
                file=out,
                flush=True,
            )
        for index in later:
            alone(index, f"{index + 1}")
    except BatchInterrupted as stop:  # what the batch measured before Ctrl-C is kept
        for offset, result in stop.rows:
            report(positions[offset], result, False)
        raise KeyboardInterrupt from None
    except (GpuRequired, NotWritable) as err:
        if not any(r.rows for r in done.values()):
            raise
        for index, (path, _) in enumerate(items):
            done.setdefault(index, OpBench(op_id=path.name, error=err.message))
    return [done[i] for i in sorted(done)]


def bench_unit(
    task_dir: pathlib.Path, config: Config, task: Task, *, dtypes: Sequence[str] | None, compile_: bool
) -> OpBench:
    """:func:`bench_op` as a scale-out unit (``fn(task_dir, config, ...)``, :class:`optimize.scale.units.Unit`)."""
    return bench_op(task_dir, task, config, dtypes=dtypes, compile_=compile_)


def _bench_pooled(
    pool: Any,
    pairs: Sequence[tuple[pathlib.Path, Task]],
    config: Config,
    *,
    dtypes: Sequence[str] | None,
    compile_: bool,
    label: str,
    out: TextIO,
    measured: Callable[[OpBench, Task], None] | None,
) -> list[OpBench]:
    """Every op timed as one unit on the pool's GPUs, results in the folders' order.

    As in the serial loop, one op's failure is its row: a unit whose worker was lost names
    the GPU and why (:meth:`optimize.scale.units.Lost.text`), and a GPU error with nothing
    measured anywhere is raised (its fix is a GPU machine).
    """
    from optimize.errors import GpuRequired
    from optimize.scale.pool import map_units
    from optimize.scale.units import Done, Lost, Raised, Result, Unit

    units = [
        Unit(f"{label} {task.op_id}", bench_unit, path, config, (task,), {"dtypes": dtypes, "compile_": compile_})
        for path, task in pairs
    ]
    results: list[OpBench | None] = [None] * len(units)
    gpu_errors: list[GpuRequired] = []
    print(f"{label}: {len(units)} ops on {pool.describe()}", file=out, flush=True)

    def landed(index: int, result: Result) -> None:
        path, task = pairs[index]
        if isinstance(result, Done):
            row: OpBench = result.value
        elif isinstance(result, Lost):
            row = OpBench(op_id=task.op_id, error=result.text())
        else:
            assert isinstance(result, Raised)
            if isinstance(result.error, GpuRequired):
                gpu_errors.append(result.error)
            row = OpBench(op_id=task.op_id, error=f"{type(result.error).__name__}: {result.error.message}")
        results[index] = row
        number = sum(1 for r in results if r is not None)
        print(
            f"{label} {number}/{len(units)}: {path.name} on GPU {result.device}: {len(row.rows)} shapes"
            + (f": {row.error}" if row.error else ""),
            file=out,
            flush=True,
        )
        if measured is not None and not (isinstance(result, Raised) and isinstance(result.error, GpuRequired)):
            measured(row, task)

    map_units(pool, units, landed=landed)
    final = [r for r in results if r is not None]
    if gpu_errors and not any(r.rows for r in final):
        raise gpu_errors[0]
    return final


def _device_name(config: Config) -> str:
    from optimize.harness import roofline

    cache = config.cache / "device"
    for path in sorted(cache.glob("*.json")) if cache.is_dir() else []:
        info = roofline.load_cached(cache, path.stem)
        if info is not None:
            return info.name
    return "GPU (name not recorded)"
