"""`kernelsmith optimize`: run the agent loop on extracted tasks.

    kernelsmith optimize --ops OP... [--coder llm|offline] [--mode multi|single]
                         [--rounds N] [--run NAME] [--replay FILE] [--gpus I,J,...] [--ray ADDRESS]

- ``--coder`` defaults to ``llm`` when ``llm.base_url`` is configured, else
  ``offline`` (the deterministic skill-driven optimizer: policy + mechanical
  transforms, no model).
- Evaluation needs a CUDA GPU. Without one and without ``--replay`` the command
  stops before spending anything, exits non-zero and says how to get real
  numbers. ``--replay FILE`` simulates evaluations from recorded timings (see
  :mod:`optimize.backends.replay`); everything it writes says SIMULATED.
- ``--run NAME`` names the run folder ``work/runs/NAME``; an existing run is
  resumed (finished rounds are not redone). Without it a new timestamped run
  starts.
- ``--gpus`` / ``--ray``: ops run at once, one per GPU lane, each evaluation a unit on one GPU
  (:mod:`optimize.scale`); one GPU or fewer is the serial path. The run is one run either way.
- Output: ``work/runs/<run>/<op>/`` (best/, trajectory.jsonl, report.md, ...)
  and ``work/runs/<run>/summary.json``.

Exit codes: 0 when every op ran (a budget stop is a clean stop), 1 when an op
failed (its baseline did not evaluate) or every LLM call of an op failed
(status ``model_failed``: the endpoint's error and its fix are printed), 2 for a
setup problem (no GPU, no task, no endpoint).
"""

from __future__ import annotations

import contextlib
import datetime
import io
import pathlib
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from contract import layout
from optimize import report
from optimize.budget import FINISHED
from optimize.loop import Loop
from optimize.run_folder import run_meta_check
from optimize.session import CODERS, MODES, OP_DONE, Coder, LoopOptions, Mode, load_op_task
from optimize.trajectory import now_iso
from pipeline.config import DEFAULT_OPS, Config
from pipeline.output import emit

if TYPE_CHECKING:
    from rich.progress import TaskID

    from optimize.backends import Backend
    from optimize.backends.gpu import GpuBackend
    from optimize.backends.replay import ReplayBackend
    from optimize.scale.pool import Pool
    from pipeline.records import Task


@dataclass(frozen=True)
class OptimizeOptions:
    """What one ``kernelsmith optimize`` is asked: the command line's flags, or ``kernelsmith run``'s choice.

    ``ops`` empty with ``all_ops`` False means the default ops; ``coder`` None means ``llm`` where an
    endpoint is configured, else ``offline``; ``run`` None a new time-stamped run (a name that exists
    resumes); ``replay`` a file of recorded measurements instead of a GPU (SIMULATED); ``emitted``
    the list ``--json`` collects the result in (:mod:`pipeline.output`), None without it."""

    ops: tuple[str, ...] = ()
    all_ops: bool = False
    coder: str | None = None
    mode: str = "multi"
    run: str | None = None
    replay: str | None = None
    emitted: list[object] | None = None


def _ops(options: OptimizeOptions, config: Config) -> list[str]:
    if options.ops:
        return list(dict.fromkeys(options.ops))
    if options.all_ops:
        root = layout.tasks_root(config.work)
        found = sorted(p.parent.name for p in root.glob(f"*/{layout.TASK_FILE}")) if root.is_dir() else []
        if not found:
            from optimize.errors import TaskMissing

            raise TaskMissing(f"no extracted tasks under {root}", fix="run `kernelsmith extract --all` first")
        return found
    return list(DEFAULT_OPS)


_Choice = TypeVar("_Choice", bound=str)


def _choice(value: object, choices: tuple[_Choice, ...], flag: str) -> _Choice:
    """``value`` as one of ``choices`` (the command line already restricts it to them)."""
    from optimize.errors import ConfigError

    for choice in choices:
        if value == choice:
            return choice
    raise ConfigError(f"{flag} {value!r} is not one of {', '.join(choices)}", fix=f"pass {flag} {choices[0]}")


def run(options: OptimizeOptions, config: Config) -> int:
    from optimize.errors import ConfigError

    coder = _choice(options.coder or ("llm" if config.llm.configured else "offline"), CODERS, "--coder")
    mode = _choice(options.mode or "multi", MODES, "--mode")
    if mode == "single" and coder != "llm":
        raise ConfigError(
            "--mode single is one LLM agent doing everything; it has no offline form",
            fix="configure llm.base_url (or pass --coder llm with an endpoint), or use --mode multi",
        )
    if coder == "llm" and not config.llm.configured:
        raise ConfigError(
            "--coder llm needs an LLM endpoint",
            fix="set llm.base_url in kernelsmith.toml (or KERNELSMITH_LLM__BASE_URL), or use --coder offline",
        )

    if coder == "offline":
        from optimize.search.tuner import check_strategy

        check_strategy(config.search.strategy)  # before any work: an unknown one leaves no run folder
    # The measurement backend comes first: no tokens are spent where nothing can be measured.
    replay_file = options.replay
    if replay_file:
        from optimize.backends.replay import ReplayBackend

        backend: ReplayBackend | GpuBackend = ReplayBackend(replay_file)
    else:
        from optimize.backends.gpu import GpuBackend

        backend = GpuBackend(config)
        if not config.scale.ray_address:  # on a Ray cluster the GPUs are the cluster's, not this host's
            backend.require()
    from optimize.scale.pool import open_pool

    pool = open_pool(config, simulated=bool(replay_file))  # None: one GPU or fewer, the serial path
    try:
        return _measured(options, config, coder=coder, mode=mode, replay_file=replay_file, backend=backend, pool=pool)
    finally:
        if pool is not None:
            pool.close(wait=False)


@contextlib.contextmanager
def building_ahead(tasks: Sequence[tuple[pathlib.Path, Task]], config: Config, *, enabled: bool) -> Iterator[None]:
    """The baselines of the ops after the first built into the build cache (one op at a time,
    every core) while the first op is measured, so an op's GPU time does not wait on nvcc.

    Why: on the H200 (2026-12-05) `kernelsmith run` spent 20 s, 15 s and, for rmsnorm's 12
    build units, more on each op's baseline build, one op after another, inside a 300 s
    budget. What must stay true: it only fills the content-addressed cache (an op whose build
    is not there yet builds it itself, and a failure is left to that build to report); a daemon
    thread, so an interrupt is never held up by nvcc.
    """
    if not enabled or len(tasks) < 2:
        yield
        return
    from contract.completion import complete
    from optimize.harness.evaluate import prebuild

    def build() -> None:
        try:
            items = [(path, complete(task, path)[0]) for path, task in tasks[1:]]
            prebuild(items, config, dtypes=None, stream=io.StringIO(), ops_at_once=1, unit_jobs=None)
        except Exception:  # noqa: BLE001 - each op's own build reports what went wrong
            return

    thread = threading.Thread(target=build, name="kernelsmith-build-ahead", daemon=True)
    thread.start()
    yield
    thread.join()


def _measured(
    options: OptimizeOptions,
    config: Config,
    *,
    coder: Coder,
    mode: Mode,
    replay_file: str | None,
    backend: Backend,
    pool: Pool | None,
) -> int:
    """The run itself, once the backend (and the pool, None for the serial path) is there."""
    ops = _ops(options, config)
    tasks = [load_op_task(config, op) for op in ops]
    if not replay_file:  # an instantiation that cannot build never reaches the GPU
        from extract.compile_check import check_unbuilt

        tasks = check_unbuilt(config, tasks, say=lambda line: print(line, file=sys.stderr))

    run = options.run or datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = layout.run_dir(config.work, run)
    meta = {
        "run": run,
        "mode": mode,
        "coder": coder,
        "backend": "replay" if replay_file else "gpu",
        "replay": str(replay_file) if replay_file else None,
        "started_at": now_iso(),
    }

    model = None
    if coder == "llm":
        from optimize.llm.client import LlmClient

        run_meta_check(run_dir, meta, write=False)
        model = LlmClient(config.llm, cache_dir=config.cache / "llm")
    run_meta_check(run_dir, meta)
    if not replay_file:
        from optimize.backends.gpu import GpuBackend

        assert isinstance(backend, GpuBackend)  # run() makes one wherever no replay file is given
        backend.record_to = run_dir / layout.REPLAY_FILE
    if pool is not None:
        from optimize.scale.backend import BackendSpec, ScaledBackend

        backend = ScaledBackend(
            BackendSpec("replay", str(replay_file)) if replay_file else BackendSpec("gpu"),
            pool,
            config,
            description=backend.describe(),
            simulated=backend.simulated,
            record_to=getattr(backend, "record_to", None),
            device=getattr(backend, "device", None) or "unknown GPU",
        )

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from pipeline.console import console as make_console

    console = make_console(stderr=True)
    if getattr(backend, "simulated", False):
        console.print(f"[yellow]{backend.describe()}[/yellow]")
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as progress:
        bars: dict[str, TaskID] = {}

        def tick(op_id: str, number: int, total: int) -> None:
            if op_id not in bars:
                bars[op_id] = progress.add_task(op_id, total=total)
            if number == OP_DONE:  # a full bar stops its clock at the op's end, not the run's
                progress.update(bars[op_id], completed=total)
                return
            progress.update(bars[op_id], completed=number - 1, description=f"{op_id} round {number}/{total}")

        loop_options = LoopOptions(run=run, mode=mode, coder=coder)
        if pool is None:
            loop = Loop(config, loop_options, backend, model=model, progress=tick)
            with building_ahead(tasks, config, enabled=not replay_file):
                summary = loop.run(tasks)
        else:
            from optimize.scale.ops import run_ops

            summary, loop = run_ops(
                config, loop_options, backend, tasks, lanes=len(pool.devices), model=model, progress=tick
            )
        for bar in bars.values():
            progress.update(bar, completed=progress.tasks[bar].total)

    make_console().print(report.console_table(summary))
    emit(options, summary)
    print(f"run folder: {run_dir}", file=sys.stderr)
    for op in summary.ops:
        if op.stop_reason and op.stop_reason not in ("rounds", *FINISHED):
            print(
                f"stopped ({op.op_id}): {op.stop_detail or loop.budget.message(op.stop_reason)}; "
                f"fix: {loop.budget.fix(op.stop_reason)}",
                file=sys.stderr,
            )
        if op.status == "failed":
            print(f"error ({op.op_id}): {op.detail}", file=sys.stderr)
        if op.status == "model_failed":
            print(
                f"error ({op.op_id}): the LLM endpoint never answered usefully, so nothing it would write was tried: "
                f"{op.detail}",
                file=sys.stderr,
            )
    return 1 if any(op.status in ("failed", "model_failed") for op in summary.ops) else 0
