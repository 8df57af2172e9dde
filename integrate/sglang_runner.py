"""Prove the patch through SGLang itself: its public ops, its own ``load_jit``, on the GPU.

Two worker processes (:mod:`integrate.sglang_worker`, each a
:class:`integrate.tree_worker.TreeWorker`) each import ``sglang`` from ONE tree:
the pristine one and the patched copy. Each points SGLang's JIT cache (and every
third-party cache) at its own private folder, so the patched worker really compiles
the patched sources with SGLang's nvcc/ninja/tvm-ffi path and the pristine worker
really compiles the originals; nothing is shared with ``~/.cache/sglang``. The calls are planned from each task's contract
(:mod:`integrate.calls`): every catalog shape (or the contract's synthetic shape
when no model sizes it) and a few held-out draws, x every dtype SGLang
instantiates. First both workers build every module the checks need at once
(SGLang's ``parallel_compile`` over one planned call per module). Then, case by
case, both workers fill the same seeded inputs, call the op's public function by
parameter name (through its ``BaseFusedOp`` with the JIT backend forced and
traced, where SGLang registered one; a Triton op through its ``KernelSpec`` with its
kernels' launches counted, :mod:`integrate.triton_probe`, Triton compiling into each
worker's own ``TRITON_CACHE_DIR``), the pristine worker hands everything it
observed (every tensor argument after the call, every returned value) over
through a file, and the patched worker judges its own with the optimize stage's
rules (poisoned outputs, NaN rules, per-dtype tolerances, bitwise equality
reported). A case the pristine op itself rejects is ``skipped`` (it tests
nothing of the patch); a patched call that raises or kills its worker is an
``error`` (a failure), and the worker is restarted, since CUDA errors are sticky.

Optionally the patched worker then runs a few cases under compute-sanitizer
(memcheck), where the tool exists and the GPU allows it.

The GPU machine lacks some packages SGLang's kernel import path needs; the
minimal set, found by importing the op modules from the unpacked wheel in a
venv holding only what the GPU image has (see ``integrate/README.md``), is
:data:`GPU_WHEELS`. ``integrate/wheels.sh`` downloads exactly these.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from contract.layout import IntegrateFolder
from integrate import tree_worker
from integrate.calls import HELD_OUT, OpPlan, PlannedCase, plan_op, sanitizer_picks, warm_cases
from integrate.errors import CallRaised, WorkerError, WorkerTimeout
from integrate.records import CheckCase, OpCheck, SanitizerRun
from pipeline.config import IntegrateConfig
from pipeline.records import Task

# Packages the GPU image lacks that `import sglang.kernels.ops.{activation,layernorm.norm,
# attention.rope}` (through sglang.kernels.jit.utils, sglang.srt.environ,
# sglang.srt.utils.custom_op, sglang.kernels.kernel_api_logging) and load_jit's tvm-ffi
# loading need, when sglang/__init__.py is not run (integrate.sglang_bare). Pinned to the
# versions this import closure was checked with; apache-tvm-ffi is sglang 0.5.23's pin, and
# pydantic-core matches the pydantic kernelsmith's own venv uses (one version of each).
GPU_WHEELS: tuple[str, ...] = (
    "apache-tvm-ffi==0.1.11",  # load_jit -> tvm_ffi.load_module; headers and libtvm_ffi for the build
    "msgspec==0.23.0",  # sglang.kernels.fused_op, jit/utils/compile/{spec,cache}.py
    "orjson==3.13.0",  # sglang.srt.utils.common (imported by jit/utils/arch.py)
    "pybase64==1.5.1",  # sglang.srt.utils.common
    "pydantic-core==2.50.5",  # sglang.srt.utils.msgspec_utils (imported by srt.utils.common)
    "pyzmq==27.3.0",  # sglang.srt.utils.network (imported by sglang.srt.utils)
    "starlette==1.10.0",  # sglang.srt.utils.common (starlette.routing.Mount)
)

# The warm and case limits and the warm batch size are config (pipeline.config.IntegrateConfig,
# where their measured reasons are written); these are its defaults for callers without a Config.
_LIMITS = IntegrateConfig()
WARM_TIMEOUT_S = _LIMITS.warm_timeout_s
CASE_TIMEOUT_S = _LIMITS.case_timeout_s
SANITIZER_CASES = 2  # per op: the smallest and one mid-size catalog shape, first dtype


# --------------------------------------------------------------------------- cases


EXCHANGE_MIN_FREE = 8 << 30  # the largest catalog output is about 1 GiB; keep room


def _exchange_dir(out_dir: pathlib.Path) -> pathlib.Path:
    """Where the pristine worker's outputs wait for the patched one: RAM when /dev/shm has room."""
    shm = pathlib.Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free >= EXCHANGE_MIN_FREE:
        return pathlib.Path(tempfile.mkdtemp(prefix="ks-exchange-", dir=shm))
    path = IntegrateFolder(out_dir).exchange
    path.mkdir(parents=True, exist_ok=True)
    return path


def rows_width(case: PlannedCase) -> tuple[int, int]:
    """(rows, width) of the case's first tensor: its leading dimensions multiplied, its last one."""
    tensors = case.request.get("tensors")
    if not isinstance(tensors, list) or not tensors or not isinstance(tensors[0], dict):
        return 0, 0
    shape = tensors[0].get("shape")
    dims = [int(d) for d in shape] if isinstance(shape, list) else []  # type: ignore[arg-type]
    if not dims:
        return 1, 1
    rows = 1
    for d in dims[:-1]:
        rows *= d
    return rows, dims[-1]


def _case_fields(case: PlannedCase) -> dict[str, Any]:
    """What a :class:`CheckCase` says of the planned case, whatever the outcome."""
    from optimize.harness.compare import tolerance

    tol = tolerance(case.dtype)
    rows, width = rows_width(case)
    return dict(
        label=case.label,
        sizes=case.sizes,
        rows=rows,
        width=width,
        dtype=case.dtype,
        rtol=tol.rtol,
        atol=tol.atol,
        seed=case.seed,
        held_out=case.held_out,
    )


def _check_case(
    case: PlannedCase,
    base: tree_worker.TreeWorker,
    new: tree_worker.TreeWorker,
    exchange: pathlib.Path,
    index: int,
    *,
    timeout_s: float,
) -> CheckCase:
    """One case: the pristine worker saves what it observes, the patched one judges its own against it."""
    common = _case_fields(case)
    path = exchange / f"{index}-{case.dtype}.pt"
    try:
        try:
            a = base.request({**case.request, "mode": "save", "path": str(path)}, timeout_s=timeout_s)
        except WorkerError as err:
            _recover(base, err)
            return CheckCase(
                **common,
                status="skipped",
                reason=f"the pristine op fails here too: {err.message}",
                timed_out=isinstance(err, WorkerTimeout),
            )
        if a.get("status") == "error":
            return CheckCase(**common, status="skipped", reason=f"pristine tree: {a['reason']}")
        try:
            b = new.request({**case.request, "mode": "compare", "path": str(path)}, timeout_s=timeout_s)
        except WorkerError as err:
            _recover(new, err)
            return CheckCase(
                **common,
                status="error",
                reason=f"the patched op failed: {err.message}; {err.detail[-600:]}",
                timed_out=isinstance(err, WorkerTimeout),
            )
    finally:
        path.unlink(missing_ok=True)
    return CheckCase(
        **common,
        status=b.get("status", "error"),
        reason=b.get("reason", ""),
        bitwise_equal=b.get("bitwise_equal"),
        max_abs_err=b.get("max_abs_err"),
        outputs=list(b.get("outputs", [])),
        poisoned=bool(b.get("poisoned")),
        first_call_s=b.get("first_call_s"),
        via=str(b.get("via") or ""),
        launches={str(k): int(v) for k, v in (b.get("launches") or {}).items()},
    )


def _recover(worker: tree_worker.TreeWorker, err: WorkerError) -> None:
    """A fresh worker after a failure, unless the op only raised and the worker stays usable."""
    if not isinstance(err, CallRaised):
        worker.restart()


#: After this many cases in a row that the pristine op rejects with the same reason, the op's
#: other cases are skipped: the reason is the contract's, not the shape's (2026-12-02: 78 cases
#: of run_unary_activation, each rejected by SGLang's wrapper for the same argument).
SAME_REJECTIONS = 3


def _check_plan(
    plan: OpPlan, base: tree_worker.TreeWorker, new: tree_worker.TreeWorker, exchange: pathlib.Path, *, timeout_s: float
) -> list[CheckCase]:
    """Every case of one op; after a case that did not answer in ``timeout_s``, the op's other cases are skipped.

    A call that hangs once hangs again (the same kernel on the same kind of input): one
    hang costs one time limit, not one per case, and the sweep goes on to the next op.
    """
    cases: list[CheckCase] = []
    hung = ""
    for index, case in enumerate(plan.cases):
        if hung:
            cases.append(CheckCase(**_case_fields(case), status="skipped", reason=f"not run: {hung}"))
            continue
        checked = _check_case(case, base, new, exchange, index, timeout_s=timeout_s)
        cases.append(checked)
        if checked.timed_out:
            hung = f"case {case.label} ({case.dtype}) did not answer within {timeout_s:.0f} s"
        elif _same_rejections(cases):
            hung = f"the pristine op rejected {SAME_REJECTIONS} cases in a row: {checked.reason[:300]}"
    return cases


def _same_rejections(cases: Sequence[CheckCase]) -> bool:
    """Whether the last :data:`SAME_REJECTIONS` cases were all skipped by the pristine op for one reason."""
    last = cases[-SAME_REJECTIONS:]
    return (
        len(last) == SAME_REJECTIONS
        and all(c.status == "skipped" and not c.timed_out for c in last)
        and len({c.reason for c in last}) == 1
    )


def check_ops(
    tasks: Sequence[Task],
    baseline_pkg: pathlib.Path,
    patched_pkg: pathlib.Path,
    out_dir: pathlib.Path,
    *,
    timeout_s: float = CASE_TIMEOUT_S,
    warm_timeout_s: float = WARM_TIMEOUT_S,
    warm_batch_modules: int = _LIMITS.warm_batch_modules,
    sanitizer: bool = True,
    command: str = "",
    python: str = sys.executable,
    held_out: int = HELD_OUT,
    progress: Callable[[OpCheck], None] | None = None,
) -> list[OpCheck]:
    """Correctness of every task's op, patched tree against pristine tree, through SGLang's public ops.

    Each task must already carry the contract its run called it with
    (:func:`contract.layout.completed_in_run`). One worker per tree serves
    every op; both build every module at once first. An op that cannot be called from
    its contract, or whose every case the pristine tree rejects, is recorded with the
    reason and the others go on.
    """
    plans = [plan_op(t, held_out=held_out) for t in tasks]
    results: list[OpCheck] = []
    for plan in plans:
        if not plan.cases:
            results.append(
                OpCheck(
                    op_id=plan.op_id,
                    function=plan.function,
                    ran=False,
                    planned=False,
                    reason=plan.reason,
                    command=command,
                )
            )
            if progress is not None:
                progress(results[-1])
    runnable = [p for p in plans if p.cases]
    if not runnable:
        return results
    exchange = _exchange_dir(out_dir)
    folder = IntegrateFolder(out_dir)
    logs = folder.logs
    try:
        with (
            tree_worker.TreeWorker(
                "baseline", baseline_pkg, folder.cache("baseline"), logs / "worker-baseline.log", python=python
            ) as base,
            tree_worker.TreeWorker(
                "patched", patched_pkg, folder.cache("patched"), logs / "worker-patched.log", python=python
            ) as new,
        ):
            build_s: dict[str, float] = {}
            first_build: dict[str, dict[str, float | None]] = {"baseline": {}, "patched": {}}
            for batch in warm_batches(runnable, warm_batch_modules):
                _warm(batch, (base, new), build_s, first_build, logs, timeout_s=warm_timeout_s)
                for plan in batch:
                    cases = _check_plan(plan, base, new, exchange, timeout_s=timeout_s)
                    passed = sum(c.status == "pass" for c in cases)
                    skipped = sum(c.status == "skipped" for c in cases)
                    keys = sorted({c.key for c in plan.cases})
                    module_s = [first_build.get("patched", {}).get(k) for k in keys]
                    results.append(
                        OpCheck(
                            op_id=plan.op_id,
                            function=plan.function,
                            ran=len(cases) > skipped,
                            reason=""
                            if len(cases) > skipped
                            else "the pristine op rejected every case: " + cases[0].reason,
                            cases=cases,
                            passed=passed,
                            failed=len(cases) - passed - skipped,
                            skipped=skipped,
                            jit_build_s=dict(build_s),
                            first_call_s=sum(s for s in module_s if s is not None)
                            if any(s is not None for s in module_s)
                            else None,
                            modules=len(keys),
                            unplanned=dict(plan.unplanned),
                            command=command,
                            via=common_via(cases),
                            kda_cases=kda_cases(cases),
                        )
                    )
                    if progress is not None:
                        progress(results[-1])
    finally:
        shutil.rmtree(exchange, ignore_errors=True)
    if sanitizer:
        run = run_sanitizer(
            [p for p in runnable if any(r.ran and r.op_id == p.op_id for r in results)], patched_pkg, out_dir
        )
        results = [r.model_copy(update={"sanitizer": [run]}) if r.ran else r for r in results]
    order = {t.op_id: i for i, t in enumerate(tasks)}
    return sorted(results, key=lambda r: order.get(r.op_id, len(order)))


def kda_cases(cases: Sequence[CheckCase]) -> int | None:
    """Passing cases whose call reached the op's KDA implementation; None where the patched tree has none."""
    if not any(k.startswith("kda:") for c in cases for k in c.launches):
        return None
    return sum(c.status == "pass" and any(k.startswith("kda:") and n > 0 for k, n in c.launches.items()) for c in cases)


def common_via(cases: Sequence[CheckCase]) -> str:
    """The path the op's answered cases took, when they all took one (a Triton op's KernelSpec); else ""."""
    paths = {c.via for c in cases if c.status != "skipped" and c.via}
    return paths.pop() if len(paths) == 1 else ""


#: Modules built in one ``warm`` request: the builds of a batch run at once, and its ops are
#: checked (and recorded) before the next batch builds, so a long sweep shows progress and a
#: time limit keeps what was proved.
WARM_BATCH_MODULES = _LIMITS.warm_batch_modules


def warm_batches(plans: Sequence[OpPlan], limit: int = WARM_BATCH_MODULES) -> list[list[OpPlan]]:
    """``plans`` in order, cut into runs whose JIT modules number at most ``limit`` (an op with more is alone)."""
    batches: list[list[OpPlan]] = []
    modules: set[str] = set()
    for plan in plans:
        keys = {c.key for c in plan.cases}
        if batches and len(modules | keys) <= limit:
            batches[-1].append(plan)
            modules |= keys
        else:
            batches.append([plan])
            modules = set(keys)
    return batches


def _warm(
    batch: Sequence[OpPlan],
    workers: Sequence[tree_worker.TreeWorker],
    build_s: dict[str, float],
    first_build: dict[str, dict[str, float | None]],
    logs: pathlib.Path,
    *,
    timeout_s: float,
) -> None:
    """Build every module of ``batch`` in both trees at once; a build that kills its worker is logged."""
    warm = warm_cases(batch)
    for worker in workers:
        worker.send({"cmd": "warm", "cases": warm})
    for worker in workers:
        try:
            answer = worker.receive({"cmd": "warm"}, timeout_s=timeout_s)
        except WorkerError as err:  # a build that kills its worker: the cases build on first call instead
            worker.restart()
            (logs / f"warm-{worker.name}.error").write_text(f"{err.message}\n{err.detail}", encoding="utf-8")
            continue
        build_s[worker.name] = build_s.get(worker.name, 0.0) + float(answer["seconds"])
        first_build[worker.name].update(answer.get("first_call_s") or {})


# --------------------------------------------------------------------------- sanitizer

_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+error")


def run_sanitizer(
    plans: Sequence[OpPlan],
    patched_pkg: pathlib.Path,
    out_dir: pathlib.Path,
    *,
    tool: str = "memcheck",
    timeout_s: float = 600.0,
) -> SanitizerRun:
    """Run a few cases of every patched op under compute-sanitizer, in one process; parse its error summary.

    One process for all ops (the tool's start-up on a torch process is the slow
    part). PyTorch's caching allocator is switched off there, so every tensor
    is its own allocation and an access past its end is caught. The JIT cache
    is the patched worker's, so the modules are already built.
    """
    exe = shutil.which("compute-sanitizer")
    if exe is None:
        return SanitizerRun(tool=tool, ran=False, reason="compute-sanitizer is not on PATH")
    requests: list[dict[str, Any]] = []
    labels: list[str] = []
    for plan in plans:
        for case in sanitizer_picks(plan, SANITIZER_CASES):
            requests.append({**case.request, "mode": "run"})
            labels.append(f"{plan.op_id} {case.label} {case.dtype}")
    folder = IntegrateFolder(out_dir)
    logs = folder.logs
    logs.mkdir(parents=True, exist_ok=True)
    req_file = logs / f"sanitizer-{tool}.json"
    req_file.write_text(json.dumps(requests), encoding="utf-8")
    argv = [
        exe,
        "--tool",
        tool,
        "--error-exitcode",
        "99",
        *tree_worker.worker_argv(patched_pkg),
        "--oneshot",
        str(req_file),
    ]
    env = tree_worker.worker_env(folder.cache("patched"))
    env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    log = logs / f"sanitizer-{tool}.log"
    command = "PYTORCH_NO_CUDA_MEMORY_CACHING=1 " + " ".join(argv)
    start = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return SanitizerRun(
            tool=tool, ran=False, reason=f"timed out after {timeout_s:.0f} s", cases=labels, command=command
        )
    text = done.stdout + "\n" + done.stderr
    log.write_text(text, encoding="utf-8")
    match = _SUMMARY.search(text)
    if match is None:
        return SanitizerRun(
            tool=tool,
            ran=False,
            reason=f"compute-sanitizer gave no error summary (exit {done.returncode} after {time.monotonic() - start:.0f} s); see {log}",
            cases=labels,
            command=command,
        )
    answers = _oneshot_answers(done.stdout)
    if answers is not None and not all(a.get("ok") for a in answers):
        failed = [a.get("error", "") for a in answers if not a.get("ok")]
        return SanitizerRun(
            tool=tool, ran=False, reason=f"the ops failed under the tool: {failed[0]}", cases=labels, command=command
        )
    return SanitizerRun(tool=tool, ran=True, errors=int(match.group(1)), cases=labels, command=command)


def _oneshot_answers(stdout: str) -> list[dict[str, Any]] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith("["):
            try:
                answers: list[dict[str, Any]] = json.loads(line)
            except ValueError:
                return None
            return answers
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m integrate.sglang_runner --run RUN``: re-run only the correctness check of a run's patch."""
    import argparse

    from integrate.steps import check_only

    parser = argparse.ArgumentParser(prog="python -m integrate.sglang_runner", description=main.__doc__)
    parser.add_argument("--run", required=True)
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--no-sanitizer", action="store_true")
    args = parser.parse_args(argv)
    return check_only(args.run, check_ops, work_dir=args.work_dir, sanitizer=not args.no_sanitizer)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
