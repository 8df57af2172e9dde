"""Run one worker process with a deadline; whatever it does, the parent goes on.

A candidate kernel can fault (illegal address: the CUDA context is lost for the
rest of the process), hang (a spin on a flag no one sets), or abort the
interpreter. So every evaluation runs in ``python -m optimize.harness.worker
request.json result.json``, started in its own process session, and this module
turns what happened to it into one of: finished (a result file was written),
crashed (it exited without one: signal or non-zero exit), or timeout (killed at
the deadline, its whole process group with it). A worker given a stall limit is
also killed, as a timeout, when its log has not grown for that long: the worker
logs every check case and every timed shape, so silence means a kernel that never
returns. Without it a hung kernel holds its worker to the deadline: 590 s for a bench
worker, more than a census gives a whole release.

What must stay true:
- Only the process group this module started is ever killed, by its id.
- The worker's stderr goes to a file, not a pipe: a chatty or stuck worker can
  never block on a full pipe, and its last lines are kept as evidence
  (``stderr_tail``) for the Evaluation's detail.
- Untrusted code: the worker's environment holds no credentials, and it runs without
  network and with the homes and the non-system top-level folders hidden where bubblewrap
  works (:mod:`pipeline.sandbox`).
- No torch here.
- A worker started while :func:`pinned` holds a device sees that GPU alone
  (``CUDA_VISIBLE_DEVICES``): the scale-out scheduler (:mod:`optimize.scale`) runs one
  lane per GPU, and each lane's workers, baseline and candidate timed in one process,
  stay on its GPU. Outside :func:`pinned` the environment decides, as before.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal

from optimize.harness.protocol import WorkerRequest, WorkerResult
from pipeline import sandbox
from pipeline.record_io import write_record

TAIL_CHARS = 4000
WORKER_MODULE = "optimize.harness.worker"
WorkerStatus = Literal["finished", "crashed", "timeout"]

#: The GPU (a ``CUDA_VISIBLE_DEVICES`` entry) the workers this thread starts run on; None: the environment's.
_DEVICE: ContextVar[str | None] = ContextVar("kernelsmith_worker_device", default=None)


@contextmanager
def pinned(device: str | None) -> Iterator[None]:
    """Every worker started in this thread (and context) while inside runs on ``device`` alone."""
    token = _DEVICE.set(device)
    try:
        yield
    finally:
        _DEVICE.reset(token)


def pinned_device() -> str | None:
    """The device :func:`pinned` holds here, else None."""
    return _DEVICE.get()


@dataclass(frozen=True)
class WorkerRun:
    status: WorkerStatus
    returncode: int | None
    seconds: float
    stderr_tail: str
    result: WorkerResult | None
    stalled_s: float | None = None  # a timeout for silence: how long the log had not grown

    @property
    def summary(self) -> str:
        if self.status == "timeout" and self.stalled_s is not None:
            last = last_line(self.stderr_tail)
            return (
                f"worker killed after {self.seconds:.1f} s: its log had not grown for {self.stalled_s:.0f} s"
                + (f", the last line being {last!r}" if last else "")
                + " (a kernel that never returns: a hang; if that step is only slow, raise harness.stall_s)"
            )
        if self.status == "timeout":
            return f"worker killed after its deadline ({self.seconds:.1f} s)"
        if self.status == "crashed":
            code = self.returncode
            if code is not None and code < 0:
                try:
                    return f"worker died on signal {signal.Signals(-code).name}"
                except ValueError:
                    return f"worker died on signal {-code}"
            return f"worker exited with status {code} without a result"
        return "worker finished"


def tail(text: str, limit: int = TAIL_CHARS) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else ""


POLL_S = 0.5  # how often a waiting parent looks at the worker's log (the stall limit's resolution)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_process(
    argv: Sequence[str],
    *,
    timeout_s: float,
    workdir: pathlib.Path,
    result_path: pathlib.Path,
    env: dict[str, str] | None = None,
    stall_s: float | None = None,
) -> tuple[WorkerStatus, int | None, float, str, float | None]:
    """Run ``argv`` in a new session; return (status, returncode, seconds, stderr tail, stalled s).

    ``stall_s``: kill it as a timeout once its stderr has not grown for that long (the
    last value is how long it had been silent; None when it was not killed for silence).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    stdout_path = workdir / "worker.stdout"
    stderr_path = workdir / "worker.stderr"
    start = time.monotonic()
    status: WorkerStatus
    stalled: float | None = None
    returncode: int | None = None
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        proc = subprocess.Popen(list(argv), stdout=out, stderr=err, env=env, start_new_session=True)
        try:
            size, grew = 0, start
            while True:
                now = time.monotonic()
                left = start + timeout_s - now
                try:
                    returncode = proc.wait(timeout=max(0.0, min(POLL_S, left)) if stall_s else max(0.0, left))
                    status = "finished" if returncode == 0 and result_path.is_file() else "crashed"
                    break
                except subprocess.TimeoutExpired:
                    now = time.monotonic()
                    if now - start >= timeout_s:
                        _kill(proc)
                        status = "timeout"
                        break
                    grown = stderr_path.stat().st_size
                    if grown != size:
                        size, grew = grown, now
                    elif stall_s and now - grew >= stall_s:
                        _kill(proc)
                        status, stalled = "timeout", now - grew
                        break
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the worker (its own session) must not outlive us
            _kill(proc)
            raise
    seconds = time.monotonic() - start
    text = stderr_path.read_text(encoding="utf-8", errors="replace")
    stdout_text = stdout_path.read_text(encoding="utf-8", errors="replace")
    if stdout_text.strip():
        text = text + ("\n[stdout]\n" + stdout_text if text else stdout_text)
    return status, returncode, seconds, tail(text), stalled


def _library_dirs(request: WorkerRequest) -> list[str]:
    """The folders of every module the worker will load (the build cache, wherever it lives)."""
    libraries = [*request.baseline_libraries, *(request.candidate_libraries or [])]
    libraries += [lib for member in request.population for lib in member]
    libraries += [lib for member in request.batch for lib in member.baseline_libraries]
    folders = {os.path.dirname(os.path.abspath(lib)) for lib in libraries if lib}
    packages = [request.sglang_package, *(member.sglang_package for member in request.batch)]
    folders.update(os.path.abspath(package) for package in packages if package)  # a Triton file's `import sglang`
    return sorted(folders)


def run_worker(
    request: WorkerRequest,
    workdir: str | os.PathLike[str],
    *,
    timeout_s: float,
    argv_prefix: Sequence[str] | None = None,
    env: dict[str, str] | None = None,
    use_sandbox: bool = True,
    stall_s: float | None = None,
) -> WorkerRun:
    """Write the request, run the worker under a deadline, read the result if there is one.

    ``argv_prefix`` replaces ``[python, -m, optimize.harness.worker]`` (tests use
    it to run a stand-in; profilers wrap the worker in ``ncu``/``compute-sanitizer``).
    The environment is always scrubbed (:func:`pipeline.sandbox.scrubbed_env`: no
    credentials; ``CUDA_VISIBLE_DEVICES`` is the device :func:`pinned` holds, if any); the plain
    worker also runs in the sandbox (:func:`pipeline.sandbox.wrap`:
    no network, homes and ``/tmp`` hidden) unless ``use_sandbox`` is False.
    """
    workdir = pathlib.Path(workdir)
    request_path = workdir / "request.json"
    result_path = workdir / "result.json"
    result_path.unlink(missing_ok=True)
    write_record(request, request_path)
    prefix = list(argv_prefix) if argv_prefix is not None else [sys.executable, "-m", WORKER_MODULE]
    run_env = sandbox.scrubbed_env(workdir / "home", os.environ if env is None else env)
    root = str(pathlib.Path(__file__).resolve().parents[2])
    run_env["PYTHONPATH"] = root + (os.pathsep + run_env["PYTHONPATH"] if run_env.get("PYTHONPATH") else "")
    run_env.setdefault("PYTHONUNBUFFERED", "1")
    device = _DEVICE.get()
    if device is not None:
        run_env["CUDA_VISIBLE_DEVICES"] = device
    argv = [*prefix, str(request_path), str(result_path)]
    if argv_prefix is None:  # the worker runs candidate code; profilers keep their own tool paths
        argv = sandbox.wrap(
            argv,
            writable=[workdir, request.device_cache_dir],
            readable=[*sandbox.project_paths(), *_library_dirs(request)],
            enabled=use_sandbox,
        )
    status, code, seconds, stderr_tail, stalled = run_process(
        argv,
        timeout_s=timeout_s,
        workdir=workdir,
        result_path=result_path,
        env=run_env,
        stall_s=stall_s,
    )
    result = None
    if status == "finished":
        try:
            result = WorkerResult.model_validate_json(result_path.read_text(encoding="utf-8"))
        except ValueError as err:
            status = "crashed"
            stderr_tail = tail(f"{stderr_tail}\nunreadable result file {result_path}: {err}")
    return WorkerRun(
        status=status, returncode=code, seconds=seconds, stderr_tail=stderr_tail, result=result, stalled_s=stalled
    )
