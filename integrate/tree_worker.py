"""One worker process bound to one SGLang tree: how it starts, the environment it runs in, its JSON-lines pipe.

:mod:`integrate.sglang_runner` (the correctness check) and :mod:`integrate.e2e` (a model layer
timed) each run :mod:`integrate.sglang_worker` as one :class:`TreeWorker` per tree; the processes
that run the patched tree otherwise (the compute-sanitizer run, SGLang's own tests, the generated
upstream test and benchmark) take the same :func:`worker_env`. Kept apart from the runner, so every
stage starts a tree's code the one way, and a test stands in for the worker here, once.

What must stay true: the patched tree's code is candidate code, so every process that runs it
gets the scrubbed environment (no credentials; HOME, TMPDIR and every cache under its own folder;
SGLang's settings kept, Triton's kernel overrides dropped). A worker that does not answer in time
is killed, one that dies is reported with its log's tail, and a replaced worker's pump never
speaks for the new one (:meth:`TreeWorker._pump`).
"""

from __future__ import annotations

import json
import os
import pathlib
import queue
import shutil
import subprocess
import sys
import threading
from typing import Any, TextIO

from integrate.errors import CallRaised, WorkerError, WorkerTimeout
from pipeline import sandbox

WORKER = pathlib.Path(__file__).with_name("sglang_worker.py")
KERNELSMITH_ROOT = pathlib.Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 300.0  # importing sglang.kernels (torch, triton) on a cold machine

#: SGLang's and its JIT stack's own settings, kept in the workers' scrubbed environment
WORKER_KEEP_PREFIXES = ("SGLANG_", "TVM_FFI_", "FLASHINFER_", "TRITON_")
#: Triton settings never passed on: with them both trees would run one substituted kernel, not their own
TRITON_DROPPED = ("TRITON_KERNEL_OVERRIDE", "TRITON_OVERRIDE_DIR")


def worker_env(cache_dir: pathlib.Path) -> dict[str, str]:
    """The environment of the processes that run the patched tree (the worker, the sanitizer, SGLang's
    tests): candidate code runs there, so it is scrubbed as the evaluation worker's is
    (:func:`pipeline.sandbox.scrubbed_env`: no credentials; HOME and TMPDIR under ``cache_dir``), with
    SGLang's own settings kept and every cache pointed into ``cache_dir``."""
    from integrate.sglang_bare import private_cache_env

    env = sandbox.scrubbed_env(cache_dir / "home", os.environ, keep_prefixes=WORKER_KEEP_PREFIXES)
    env.update(private_cache_env(str(cache_dir)))
    for name in TRITON_DROPPED:
        env.pop(name, None)
    env["SGLANG_FORCE_FUSED_OP_BACKEND"] = "jit"
    env["PYTHONUNBUFFERED"] = "1"
    # load_jit runs `ninja` from PATH; a venv's ninja (pip package) is not on it unless activated.
    if shutil.which("ninja", path=env.get("PATH")) is None:
        for folder in (os.path.dirname(sys.executable), _ninja_bin_dir()):
            if folder and os.path.isfile(os.path.join(folder, "ninja")):
                env["PATH"] = os.pathsep.join([folder, env.get("PATH", "")])
                break
    return env


def _ninja_bin_dir() -> str | None:
    try:
        import ninja  # the pip package ships the binary
    except ImportError:
        return None
    return getattr(ninja, "BIN_DIR", None)


def worker_argv(package: pathlib.Path, python: str = sys.executable) -> list[str]:
    return [python, str(WORKER), "--package", str(package), "--kernelsmith", str(KERNELSMITH_ROOT)]


class TreeWorker:
    """One worker process bound to one SGLang tree; JSON lines over its pipes."""

    def __init__(
        self,
        name: str,
        package: pathlib.Path,
        cache_dir: pathlib.Path,
        log: pathlib.Path,
        *,
        python: str = sys.executable,
    ) -> None:
        self.name, self.package, self.cache_dir, self.log = name, package, cache_dir, log
        self.python = python
        self.proc: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._log_handle: TextIO | None = None

    def __enter__(self) -> TreeWorker:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def start(self) -> dict[str, Any]:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._log_handle = open(self.log, "a", encoding="utf-8")
        self.proc = subprocess.Popen(
            worker_argv(self.package, self.python),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log_handle,
            text=True,
            env=worker_env(self.cache_dir),
            cwd=str(self.cache_dir),
        )
        threading.Thread(target=self._pump, args=(self.proc, self._lines), daemon=True).start()
        return self.request({"cmd": "ping"}, timeout_s=START_TIMEOUT_S)

    @staticmethod
    def _pump(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
        """One process's answers into its own queue, then None at its end. The queue is bound here,
        not read from ``self``: a killed worker's pump ends after :meth:`restart` swapped in the new
        worker's queue, and its None must not tell the new worker's first request that it died."""
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    def _tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""

    def request(self, req: dict[str, Any], *, timeout_s: float) -> dict[str, Any]:
        self.send(req)
        return self.receive(req, timeout_s=timeout_s)

    def send(self, req: dict[str, Any]) -> None:
        """Send without waiting (two workers can then work at once); :meth:`receive` the answer."""
        if self.proc is None or self.proc.stdin is None:
            raise WorkerError(f"{self.name} worker is not running")
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError as err:
            raise WorkerError(f"{self.name} worker died", detail=self._tail()) from err

    def receive(self, req: dict[str, Any], *, timeout_s: float) -> dict[str, Any]:
        assert self.proc is not None
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty as err:
            self.kill()
            raise WorkerTimeout(
                f"{self.name} worker did not answer {req.get('cmd')} within {timeout_s:.0f} s; killed",
                fix="look at the worker log for a hang (a kernel that never ends, nvcc stuck)",
                detail=self._tail(),
            ) from err
        if line is None:
            try:
                code: int | None = self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # its output closed but it lives on: not a worker to keep
                self.kill()
                code = self.proc.returncode
            raise WorkerError(
                f"{self.name} worker exited with code {code} during {req.get('cmd')}", detail=self._tail()
            )
        answer = json.loads(line)
        if not answer.get("ok"):
            raise (CallRaised if answer.get("usable") else WorkerError)(
                f"{self.name} worker failed {req.get('cmd')}: {answer.get('error')}",
                detail=answer.get("traceback", "") + "\n" + self._tail(2000),
            )
        return answer

    def restart(self) -> None:
        """A fresh process on the same tree and cache (after a failed call: CUDA errors are sticky)."""
        self.close()
        self._lines = queue.Queue()
        self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.request({"cmd": "exit"}, timeout_s=30)
                self.proc.wait(timeout=30)
            except (WorkerError, subprocess.TimeoutExpired):
                self.kill()
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None
