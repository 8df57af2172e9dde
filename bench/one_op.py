"""One op's baseline measured for ``kernelsmith bench`` and the census: its worker request, the
worker's answer as the op's row, and the contract repaired from the baseline when the baseline
itself fails in the worker.

:mod:`bench.bench` times many ops with these (in batches of one worker, each alone after, or over a
pool of GPUs); :mod:`optimize.scale.units` runs :func:`bench_op` on a pool's lanes.

What must stay true: a failure is the op's row (``OpBench.error``), never another op's; only a
missing GPU or an unwritable work dir raises, since every other op would fail the same way.
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from typing import Any

from bench.sections import OpBench
from optimize.harness.languages import build_of
from optimize.harness.protocol import WorkerRequest, WorkerResult
from pipeline.config import Config

BENCH_WORKER_TIMEOUT_S = 590.0  # one op's baseline + eager + compile at every catalog shape


def bench_op(
    task_dir: pathlib.Path, task: Any, config: Config, *, dtypes: Sequence[str] | None, compile_: bool
) -> OpBench:
    """Time one op's baseline (and the PyTorch reference); a failure is the row's ``error``.

    When the baseline itself fails in the worker, its contract is repaired from the
    baseline's own behaviour (:func:`learn_contract`) and the op is timed once more.
    Raises only :class:`~optimize.errors.GpuRequired` and :class:`~pipeline.errors.NotWritable`
    (the machine's or the work dir's problem, not the op's: every other op would fail the same way).
    """
    first = _bench_once(task_dir, task, config, dtypes=dtypes, compile_=compile_)
    if not first.error or first.error.startswith(_NO_BUILD):
        return first
    fixed, learned = learn_contract(task_dir, task, config)
    if not learned:
        return first
    again = _bench_once(task_dir, fixed, config, dtypes=dtypes, compile_=compile_)
    fixes = "; ".join(learned)
    again.notes.insert(0, f"contract fixed from the baseline, as `bench --all` fixes it: {fixes}")
    if again.error:
        again.error = f"{again.error} (after fixing the contract from the baseline: {fixes})"
    return again


_NO_BUILD = "baseline does not build"


def _bench_once(
    task_dir: pathlib.Path, task: Any, config: Config, *, dtypes: Sequence[str] | None, compile_: bool
) -> OpBench:
    from bench.health import _cause
    from optimize.errors import GpuRequired
    from optimize.harness.evaluate import run_request, worker_dir
    from pipeline.errors import KernelsmithError, NotWritable

    try:
        made = bench_request(task_dir, task, config, dtypes=dtypes, compile_=compile_)
        if isinstance(made, OpBench):
            return made
        request, notes = made
        run = run_request(request, bench_config(config, 1), worker_dir(config, task.op_id, "bench"))
    except (GpuRequired, NotWritable):
        raise
    except (
        KernelsmithError,
        ValueError,
        OSError,
    ) as err:  # the baseline raised in the worker, a contract it cannot call
        return OpBench(op_id=task.op_id, error=f"{type(err).__name__}: {_cause(err)}")
    if run.result is None:
        return OpBench(op_id=task.op_id, error=f"{run.summary}: {run.stderr_tail.strip()[-300:]}")
    row = from_worker(task, run.result, notes)
    row.worker_s = run.seconds
    return row


def bench_request(
    task_dir: pathlib.Path, task: Any, config: Config, *, dtypes: Sequence[str] | None, compile_: bool
) -> tuple[WorkerRequest, list[str]] | OpBench:
    """(the worker request that times ``task``'s baseline, notes for its row), or the op's row when its
    baseline does not build.

    An instantiation nvcc refuses (:func:`~optimize.harness.evaluate.without_refused`: a
    ``--no-compile`` task keeps an fp32 one that the kernel's ``static_assert`` refuses, which
    extract's compile check would have dropped) is left out, with a note, instead of costing the op
    its row: on the H200 (2026-12-02) that cost the census rmsnorm_hf and fused_inplace_qknorm in
    every release.
    """
    from optimize.harness.evaluate import build_units, plan_cases, refusal, without_refused

    plan = plan_cases(task, held_out=0, timing_dtypes=dtypes, profile=True)
    report, libs = build_units(task_dir, task, plan.units, config=config)
    notes: list[str] = []
    found = (
        None
        if report.ok
        else without_refused(task, plan.units, lambda u: build_units(task_dir, task, u, config=config)[0])
    )
    if found is not None:
        narrowed, refused = found
        narrowed_plan = plan_cases(narrowed, held_out=0, timing_dtypes=dtypes, profile=True)
        narrowed_report, narrowed_libs = build_units(task_dir, narrowed, narrowed_plan.units, config=config)
        if narrowed_report.ok:
            notes.append(f"not timed, {refusal(refused, report.stderr)}")
            task, plan, report, libs = narrowed, narrowed_plan, narrowed_report, narrowed_libs
    if not report.ok:
        return OpBench(op_id=task.op_id, error=f"{_NO_BUILD}: {report.stderr.strip()[-300:]}")
    return WorkerRequest(
        mode="bench",
        op_id=task.op_id,
        contract=task.contract,
        baseline_libraries=libs,
        timings=plan.timings,
        harness=config.harness,
        device_cache_dir=str(config.cache / "device"),
        torch_eager=task.contract.reference is not None,
        torch_compile=compile_ and task.contract.reference is not None,
        sglang_package=build_of(task).sglang_package(task, config),
    ), notes


def bench_config(config: Config, ops: int) -> Config:
    """``config`` with a worker deadline long enough for ``ops`` ops' baselines, eager and compile timings."""
    timeout = max(config.harness.worker_timeout_s, BENCH_WORKER_TIMEOUT_S) * ops
    return config.model_copy(update={"harness": config.harness.model_copy(update={"worker_timeout_s": timeout})})


def from_worker(task: Any, worker: WorkerResult, notes: Sequence[str] = ()) -> OpBench:
    """The op's row from its worker result (timings, notes; the failure when nothing was timed)."""
    result = OpBench(op_id=task.op_id, notes=list(notes), worker_s=worker.seconds.get("op"))
    if worker.status != "ok" and not worker.timings:
        result.error = f"{worker.status}: {worker.detail[:300]}"
        return result
    result.device = worker.device
    result.rows = list(worker.timings)
    if task.contract.reference is None:
        result.notes.append("no PyTorch reference named in the contract: eager/compile not timed")
    for t in worker.timings:
        result.notes += [f"{t.label} {t.dtype}: {n}" for n in t.notes]
    if worker.status != "ok":
        result.notes.append(f"stopped after {len(result.rows)} timing(s): {worker.detail[:300]}")
    return result


def learn_contract(task_dir: pathlib.Path, task: Any, config: Config) -> tuple[Any, list[str]]:
    """(task with its contract fixed, the fixes named) from the baseline's own checks.

    The baseline is checked at the smallest catalog shape, stopping at the first failure,
    and :func:`~optimize.harness.baseline_repair.repair_baseline` applies what it shows
    (a dtype its check demands, an input it writes, an output it never writes), the
    loop the sweep runs. Returns the task unchanged and no fixes when nothing was
    learned or the check could not run (the first failure then stays the row's reason).
    """
    from optimize.errors import GpuRequired
    from optimize.harness.baseline_repair import BaselineRun, repair_baseline
    from optimize.harness.evaluate import build_units, plan_cases, run_request, worker_dir
    from optimize.harness.protocol import WorkerRequest
    from pipeline.errors import KernelsmithError, NotWritable

    if not task.shapes:
        return task, []
    smallest = min(task.shapes, key=lambda s: (sum(s.sizes.values()), s.label))
    learned: list[str] = []

    def run_once(current: Any, attempt: int) -> BaselineRun[None]:
        try:
            plan = plan_cases(current, shapes=[smallest], held_out=0, profile=False)
            report, libs = build_units(task_dir, current, plan.units, config=config)
            if not report.ok:
                return BaselineRun(None, passed=False, final=True)
            request = WorkerRequest(
                mode="evaluate",
                op_id=current.op_id,
                contract=current.contract,
                baseline_libraries=libs,
                checks=plan.checks,
                harness=config.harness,
                device_cache_dir=str(config.cache / "device"),
                stop_at_first_failure=True,
                sglang_package=build_of(current).sglang_package(current, config),
            )
            done = run_request(request, config, worker_dir(config, current.op_id, "bench-check"))
        except (GpuRequired, NotWritable):
            raise
        except (KernelsmithError, ValueError, OSError):
            return BaselineRun(None, passed=False, final=True)
        res = done.result
        if res is None:
            return BaselineRun(None, passed=False, final=True)
        detail = res.detail if res.status == "baseline_failed" else ""
        return BaselineRun(None, passed=res.status == "ok", evidence=res.role_evidence, detail=detail)

    def on_fixed(current: Any, record: Any, attempt: int) -> str:
        learned.extend(f.describe() for f in record.filled)
        return ""

    repaired = repair_baseline(task, task_dir, run_once, on_fixed=on_fixed)
    return (repaired.task, learned) if learned else (task, [])


__all__ = [
    "BENCH_WORKER_TIMEOUT_S",
    "bench_config",
    "bench_op",
    "bench_request",
    "from_worker",
    "learn_contract",
]
