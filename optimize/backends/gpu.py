"""GPU backend: evaluations measured by the real harness on a CUDA GPU.

The only backend whose numbers may be reported as measurements. It wraps
:func:`optimize.harness.evaluate` (build with nvcc, correctness against the
baseline on catalog and fresh held-out shapes, adversarial checks, timing in
CUDA graphs) and adds what the loop needs around it:

- ``available()`` answers, without importing torch into this process, whether a
  CUDA device is usable here; the command refuses to start a run when it is not
  (:class:`optimize.errors.GpuRequired`, exit non-zero, with the fix), so a CPU
  machine never pretends to optimize;
- ``gpu_s`` accumulates the test + profile seconds each evaluation reports, for
  the GPU budget;
- final validation adds compute-sanitizer passes (memcheck, racecheck, synccheck, initcheck) of the
  candidate where the tool is installed, the four at once (:meth:`GpuBackend._sanitize`);
- every evaluation is also written to a replay file
  (``<run>/measurements.replay.json``, :func:`optimize.backends.replay.record`),
  so the run can be replayed without a GPU.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import functools
import importlib.util
import math
import os
import pathlib
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from optimize.backends import replay
from optimize.errors import GpuRequired
from pipeline.config import Config
from pipeline.records import Task
from pipeline.run_records import Candidate, Evaluation, Outcome

if TYPE_CHECKING:
    from optimize.agents.testing import ProposedCase
    from optimize.harness.protocol import CheckCase, WorkerRequest
    from optimize.harness.tools import NcuResult, SanitizerResult

PROBE = "import torch, sys; ok = torch.cuda.is_available(); print(torch.cuda.get_device_name(0) if ok else ''); sys.exit(0 if ok else 3)"


@functools.lru_cache(maxsize=1)
def probe_device(python: str = sys.executable) -> tuple[bool, str]:
    """(a CUDA device is usable, its name or why not) — checked in a child process."""
    if importlib.util.find_spec("torch") is None:
        return False, "torch is not installed in this environment"
    try:
        done = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=180)
    except (OSError, subprocess.TimeoutExpired) as err:
        return False, f"probing CUDA failed: {err}"
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["torch.cuda.is_available() is False"])[-1]
        return False, f"no usable CUDA device ({tail})"
    return True, done.stdout.strip() or "CUDA device"


class GpuBackend:
    """Evaluations by :func:`optimize.harness.evaluate` on this machine's GPU."""

    simulated = False

    def __init__(self, config: Config, *, record_to: str | os.PathLike[str] | None = None) -> None:
        self.config = config
        self.record_to = pathlib.Path(record_to) if record_to is not None else None
        self.gpu_s = 0.0
        self.name = "gpu"
        self.device: str | None = None

    def available(self) -> tuple[bool, str]:
        ok, what = probe_device()
        if ok:
            self.device = what
        return ok, what

    def require(self) -> None:
        ok, why = self.available()
        if not ok:
            raise GpuRequired(
                f"evaluation needs a CUDA GPU, and this machine has none usable: {why}",
                fix=(
                    "run `kernelsmith optimize` on the GPU machine (`make optimize` there), or pass "
                    "--replay FILE to replay recorded timings (a simulation: nothing is measured)"
                ),
            )

    def describe(self) -> str:
        return f"the GPU harness on {self.device or 'this machine'}"

    def evaluate(
        self,
        task_dir: str | os.PathLike[str] | None,
        task: Task,
        candidate: Candidate,
        *,
        stage: Literal["round", "final"] = "round",
    ) -> Evaluation:
        """One harness evaluation; ``final`` adds a compute-sanitizer pass where the tool exists.

        Every harness evaluation draws fresh held-out shapes (``os.urandom``) and
        runs the adversarial checks, so the final stage is a new, independent
        evaluation; the baseline (``candidate.is_baseline``) is evaluated on its own.
        """
        from optimize.harness.errors import HarnessError
        from optimize.harness.evaluate import evaluate as harness_evaluate

        if task_dir is None:  # only the replay backend evaluates without the task's files
            raise HarnessError(
                f"the GPU harness needs the task folder of {task.op_id} to build its kernel",
                fix="pass the task's folder (work/tasks/<op>) to the backend",
            )
        baseline = candidate.is_baseline
        evaluation = harness_evaluate(task_dir, task, None if baseline else candidate, config=self.config)
        evaluation = evaluation.model_copy(update={"candidate": candidate.id})
        self.gpu_s += _gpu_seconds(evaluation)
        if stage == "final" and not baseline and evaluation.outcome == Outcome.ok:
            evaluation = self._sanitize(task_dir, task, candidate, evaluation)
        if self.record_to is not None:
            replay.record(
                self.record_to, evaluation, baseline=baseline, stage=stage, device=self.device or "unknown GPU"
            )
        return evaluation

    def evaluate_many(
        self, task_dir: str | os.PathLike[str] | None, task: Task, candidates: Sequence[Candidate]
    ) -> list[Evaluation]:
        """A search population: built at once on every core, checked and timed in one worker
        (:func:`optimize.harness.population.evaluate_population`); each recorded for replay."""
        from optimize.harness.errors import HarnessError
        from optimize.harness.population import evaluate_population

        if task_dir is None:
            raise HarnessError(
                f"the GPU harness needs the task folder of {task.op_id} to build its kernels",
                fix="pass the task's folder (work/tasks/<op>) to the backend",
            )
        evaluations = evaluate_population(task_dir, task, list(candidates), config=self.config)
        for evaluation in evaluations:
            self.gpu_s += _gpu_seconds(evaluation)
            if self.record_to is not None:
                replay.record(
                    self.record_to, evaluation, baseline=False, stage="round", device=self.device or "unknown GPU"
                )
        return evaluations

    def profile(self, task_dir: str | os.PathLike[str], task: Task, candidate: Candidate | None) -> NcuResult:
        """Nsight Compute figures of ``candidate`` (None: the baseline); an ``NcuResult`` whatever happened."""
        from optimize.harness.errors import BaselineError, HarnessError
        from optimize.harness.tools import NcuResult, profile_ncu

        start = time.monotonic()
        try:
            result = profile_ncu(task_dir, task, candidate, config=self.config)
        except (BaselineError, HarnessError) as err:  # no profile, not a failed run
            result = NcuResult(status="failed", detail=str(err))
        finally:
            self.gpu_s += time.monotonic() - start
        if self.record_to is not None and result.status == "ok":
            replay.record_ncu(
                self.record_to,
                task.op_id,
                "baseline" if candidate is None else candidate.id,
                [k.model_dump(mode="json") for k in result.kernels],
                device=self.device or "unknown GPU",
            )
        return result

    def buildable(self, task_dir: str | os.PathLike[str], task: Task) -> tuple[Task, list[str], str] | None:
        """A ``--no-compile`` task without the instantiations nvcc refuses (:func:`optimize.harness.evaluate.buildable`):
        (the narrowed task, the refused ones' keys, why), or None when nothing is to drop."""
        from contract.completion import instantiation_key
        from optimize.harness.evaluate import buildable

        found = buildable(task_dir, task, config=self.config)
        if found is None:
            return None
        narrowed, refused, why = found
        return narrowed, [instantiation_key(i) for i in refused], why

    def validate_cases(
        self, task_dir: str | os.PathLike[str], task: Task, cases: Sequence[ProposedCase]
    ) -> list[tuple[bool, str]]:
        """Run the testing agent's proposals on the baseline alone (kept only if clean)."""
        from optimize.harness.evaluate import validate_cases

        start = time.monotonic()
        try:
            return validate_cases(task_dir, task, cases, config=self.config)
        finally:
            self.gpu_s += time.monotonic() - start  # builds included: the harness reports no split here

    def _sanitize(
        self, task_dir: str | os.PathLike[str], task: Task, candidate: Candidate, evaluation: Evaluation
    ) -> Evaluation:
        """Run the candidate under each of :data:`SANITIZER_TOOLS` (``compute-sanitizer --tool <tool>``).

        Uses the harness's own case planning, builds (cached) and worker in its ``single`` mode
        (call the candidate, nothing else), so the sanitizer sees only the candidate's kernels:
        memcheck over :func:`sanitizer_checks`, racecheck, synccheck and initcheck over one small
        case per dtype (:func:`small_checks`; they slow kernels far more). The four run at once, each in
        its own process; their verdicts are read in :data:`SANITIZER_TOOLS` order. A memcheck error makes the
        outcome ``crashed``; a racecheck, synccheck or initcheck error ``incorrect``, unless the
        baseline reports errors under the same tool at the same cases (then it is noted, not held
        against the candidate). A missing tool or a sanitizer that outruns its deadline is stated in
        the detail as not run, never passed off as a clean run.
        """
        if shutil.which("compute-sanitizer") is None:
            return _note(evaluation, "compute-sanitizer: not on PATH here; " + ", ".join(SANITIZER_TOOLS) + " not run")
        from optimize.harness import evaluate as harness

        plan = harness.plan_cases(task, held_out=min(2, self.config.harness.held_out_shapes), profile=False)
        _, base_libs = harness.build_units(task_dir, task, plan.units, config=self.config)
        report, cand_libs = harness.build_units(
            task_dir, task, plan.units, config=self.config, regions=candidate.regions
        )
        if not report.ok:  # the same regions built a moment ago; a failure now is the machine's
            return _note(evaluation, "compute-sanitizer: the candidate did not rebuild, not run")

        def request(checks: list[CheckCase], libraries: list[str] | None) -> WorkerRequest:
            return harness.worker_request(
                task,
                base_libs,
                config=self.config,
                candidate_libraries=libraries,
                checks=checks,
                mode="single",
                single_calls=1,
            )

        seconds = dict(evaluation.seconds)
        cases = {
            name: sanitizer_checks(plan.checks) if name == "memcheck" else small_checks(plan.checks)
            for name in SANITIZER_TOOLS
        }
        # The four tools at once, each in its own process and folder: they share nothing, and in turn they
        # more than doubled final validation (fused_add_rmsnorm on an H100, 2026-12-08: 26.4 of 49.2 s).
        start = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(SANITIZER_TOOLS)) as pool:
            running = {
                name: pool.submit(self._sanitizer_run, name, request(cases[name], cand_libs), candidate.id)
                for name in SANITIZER_TOOLS
            }
            results = {name: future.result() for name, future in running.items()}
        self.gpu_s += time.monotonic() - start
        seconds.update({f"sanitize_{name}": spent for name, (_, spent) in results.items()})
        for name in SANITIZER_TOOLS:  # judged in this order: memcheck's crash first
            found = results[name][0]
            checks = cases[name]
            if found.status == "clean":
                evaluation = _note(evaluation, f"compute-sanitizer {name}: clean over {len(checks)} cases", seconds)
            elif found.status in ("unavailable", "failed"):  # the tool refused, crashed or outran its deadline
                why = found.detail.strip().splitlines()[-1:] or ["no output"]
                evaluation = _note(evaluation, f"compute-sanitizer {name}: not run ({found.status}: {why[0]})", seconds)
            elif name != "memcheck" and self._baseline_errors(name, request(checks, None), seconds):
                evaluation = _note(
                    evaluation, f"compute-sanitizer {name}: the baseline reports errors too, not held", seconds
                )
            else:
                return evaluation.model_copy(
                    update={
                        "outcome": Outcome.crashed if name == "memcheck" else Outcome.incorrect,
                        "seconds": seconds,
                        "detail": f"compute-sanitizer {name}: {found.errors} errors:\n{found.detail}",
                    }
                )
        return evaluation

    def _baseline_errors(self, name: str, request: WorkerRequest, seconds: dict[str, float]) -> bool:
        """Whether the baseline, under tool ``name`` at the same cases, reports errors too (its seconds charged)."""
        start = time.monotonic()
        found, spent = self._sanitizer_run(name, request, "baseline")
        self.gpu_s += time.monotonic() - start
        seconds[f"sanitize_{name}"] = round(seconds.get(f"sanitize_{name}", 0.0) + spent, 3)
        return found.errors > 0

    def _sanitizer_run(self, name: str, request: WorkerRequest, tag: str) -> tuple[SanitizerResult, float]:
        """:func:`optimize.harness.tools.run_sanitizer` of ``request`` in a folder of its own, and its seconds.

        Safe to run several at once (threads of :meth:`_sanitize`): it writes nothing shared."""
        from optimize.harness.tools import run_sanitizer

        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S%f")
        workdir = self.config.work / "harness" / f"{stamp}-{name}-{tag[:12]}"
        timeout_s = min(self.config.harness.worker_timeout_s * SANITIZER_SLOWDOWN, SANITIZER_MAX_S)
        start = time.monotonic()
        found = run_sanitizer(request, workdir, name, timeout_s=timeout_s)
        return found, round(time.monotonic() - start, 3)


SANITIZER_SLOWDOWN = 20  # memcheck runs kernels this many times slower, roughly
SANITIZER_MAX_S = 300.0
SANITIZER_MAX_TOKENS = 8


def sanitizer_checks(checks: Sequence[CheckCase]) -> list[CheckCase]:
    """The check cases worth running under memcheck: every width, dtype and held-out
    shape, but catalog shapes only at small token counts. Memcheck slows kernels
    ~20x and tracks every access; out-of-bounds and uninitialised accesses show at
    T=1 and T=8 as well as at T=16384 (the indexing is the same), so the multi-GB
    catalog cases add time, not coverage. The token count is the smallest size of a
    case (widths are >= 64 everywhere in the catalog).
    """
    return [c for c in checks if c.held_out or min(c.sizes.values(), default=0) <= SANITIZER_MAX_TOKENS]


SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")


def small_checks(checks: Sequence[CheckCase]) -> list[CheckCase]:
    """One check case per dtype, the smallest (fewest elements): racecheck, synccheck and initcheck
    track every shared-memory access or barrier and slow kernels 100x or more; a missing barrier or a
    read of memory nothing wrote shows at one small shape as well as at any."""
    by_dtype: dict[str, list[CheckCase]] = {}
    for case in checks:
        by_dtype.setdefault(case.dtype, []).append(case)
    return [min(cases, key=lambda c: math.prod(c.sizes.values()) if c.sizes else 0) for cases in by_dtype.values()]


def _gpu_seconds(evaluation: Evaluation) -> float:
    return float(evaluation.seconds.get("test", 0.0)) + float(evaluation.seconds.get("profile", 0.0))


def _note(evaluation: Evaluation, note: str, seconds: dict[str, float] | None = None) -> Evaluation:
    update: dict[str, str | dict[str, float]] = {
        "detail": f"{evaluation.detail}; {note}" if evaluation.detail else note
    }
    if seconds is not None:
        update["seconds"] = seconds
    return evaluation.model_copy(update=update)
