"""Build a task's kernels (or a candidate's) exactly as SGLang's ``load_jit`` would.

What one build is (its translation unit, flags, export names and cache key) is
:mod:`pipeline.build_plan`'s; this module runs it, caches it and reports it.

Sources: a task folder holds ``src/<package-relative path>``. A build never reads
the task folder in place and never writes to it: it copies ``src/`` (with the
caller's ``overrides`` — a candidate's spliced files — applied) into a private
staging folder and compiles there, with relative paths (``cwd`` = staging), so
compiler messages name package-relative files and nothing depends on where the
cache lives.

Cache (``cache_root/<key>/``), what must stay true:
- ``key`` = :func:`pipeline.record_io.content_hash` over the wrapper text, every file
  of the task's ``src/`` tree with overrides applied, the compile and link
  argument lists (in a location-free form: ``@tvm_ffi``-style tokens, paths
  relative to the staging folder), whether we link, the arch, and the toolchain
  fingerprint (nvcc and host compiler ``--version`` text, tvm-ffi version).
  Anything that can change the produced binary is in it; install paths are not,
  so the same inputs key the same on every machine.
- A build happens in ``cache_root/.staging-<uuid>/`` and is published by one
  ``os.replace`` rename, so an entry is complete or absent; entries are never
  edited after publication. Concurrent builders of one key both compile; the
  loser of the rename discards its copy and uses the winner's (identical) entry.
  Inside one process, builders of one key are serialised so only one compiles.
- Only successful builds are cached. Failures depend on things outside the key
  (timeouts, a killed compiler, a full disk) and are cheap to repeat.
- A cache hit does not compile; it returns the stored report with
  ``cached=True``, ``seconds`` = this lookup's time and ``library`` pointing into
  the entry as it is found now (the cache folder may have moved).

Failures: a compile error, a timeout or a crashed compiler is a
``BuildReport(ok=False, stderr=...)``, never an exception. A missing toolchain
(nvcc, host compiler, tvm-ffi) raises :class:`pipeline.errors.ToolchainError`: it
is the machine's fault, not the candidate's, and must stop the run. Compiler
messages that point into a file with editable spans are annotated with the
region's own line numbers (``[region act_and_mul_kernel line 12]``), which is
what a repair prompt can act on.

This module imports neither torch nor CUDA.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence

from pipeline import toolchain
from pipeline.build_plan import (
    INPUTS_NAME,
    KEY_SCHEMA,
    LOG_NAME,
    OBJECT_NAME,
    REPORT_NAME,
    SRC_DIR,
    STAGING_PREFIX,
    WRAPPER_NAME,
    BuildPlan,
    plan,
)
from pipeline.compiler_output import annotate_diagnostics, first_error, parse_ptxas, relocate_spans, strip_ptxas  # noqa: F401  (re-exported: the build API)
from pipeline.errors import ConfigError, ToolchainError
from pipeline.record_io import content_hash
from pipeline.records import BuildReport, Instantiation, Span, Task
from pipeline.sandbox import scrubbed_env
from pipeline.toolchain import find_nvcc, toolchain_fingerprint  # noqa: F401  (re-exported: the build API)

# --------------------------------------------------------------------------- build

_key_locks: dict[str, threading.Lock] = {}
_key_locks_guard = threading.Lock()


def _lock_for(key: str) -> threading.Lock:
    with _key_locks_guard:
        return _key_locks.setdefault(key, threading.Lock())


def _read_entry(entry: pathlib.Path) -> BuildReport | None:
    """The stored report of a published entry, with ``library`` made absolute; None if unusable."""
    try:
        report = BuildReport.model_validate_json((entry / REPORT_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not report.ok or report.library is None or not (entry / report.library).is_file():
        return None
    return report.model_copy(update={"library": str(entry / report.library)})


def _publish(staging: pathlib.Path, entry: pathlib.Path) -> bool:
    """Rename *staging* to *entry*. True if ours was published; False if a valid entry
    was already there (another builder won the race: its build is identical, ours is
    dropped). A broken entry left by a crash is moved aside and replaced."""
    for _ in range(2):
        try:
            os.replace(staging, entry)
            return True
        except OSError:
            if _read_entry(entry) is not None:
                shutil.rmtree(staging, ignore_errors=True)
                return False
            trash = entry.with_name(f".trash-{uuid.uuid4().hex}")
            try:
                os.replace(entry, trash)
            except OSError:
                pass
            shutil.rmtree(trash, ignore_errors=True)
    os.replace(staging, entry)  # last try; an error here is a real filesystem problem
    return True


@dataclasses.dataclass
class _Run:
    returncode: int | None  # None when killed for time
    output: str
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


#: Compiler processes at once across every thread of this process while :func:`shared_compilers` holds.
_compiler_slots: threading.BoundedSemaphore | None = None


@contextlib.contextmanager
def shared_compilers(slots: int) -> Iterator[None]:
    """At most ``slots`` nvcc/linker processes at once in this process, whoever starts them.

    Why: the scale-out scheduler (``optimize.scale``) runs one lane per GPU, and each lane
    builds with its own :func:`build_many` pool; without one count the lanes would start a
    pool's worth of nvcc each and share the host's cores by contention. Outside it, each
    pool's ``max_workers`` is the only limit, as it always was. The time spent waiting for
    a slot does not count against a build's ``timeout_s``.
    """
    global _compiler_slots
    previous = _compiler_slots
    _compiler_slots = threading.BoundedSemaphore(max(1, slots))
    try:
        yield
    finally:
        _compiler_slots = previous


def _run(argv: list[str], cwd: pathlib.Path, timeout_s: float) -> _Run:
    """Run a compiler in its own process group; on timeout kill that group (nvcc's
    cicc/ptxas children included) by its id. Waits for a slot first under :func:`shared_compilers`."""
    slots = _compiler_slots
    if slots is None:
        return _run_now(argv, cwd, timeout_s)
    waited = time.monotonic()
    with slots:
        return _run_now(argv, cwd, timeout_s + (time.monotonic() - waited))


def _run_now(argv: list[str], cwd: pathlib.Path, timeout_s: float) -> _Run:
    start = time.monotonic()
    if timeout_s <= 0:
        return _Run(None, "", 0.0)
    home = pathlib.Path(tempfile.mkdtemp(prefix="kernelsmith-nvcc-"))
    try:
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                start_new_session=True,
                env=scrubbed_env(home),  # generated code is compiled here: no credentials in reach
            )
        except FileNotFoundError as error:
            raise ToolchainError(
                f"{argv[0]} cannot be run: {error}",
                fix="reinstall the toolchain (CUDA 12.8+, g++) or fix PATH/CUDA_HOME/CXX",
            ) from error
        try:
            output, _ = proc.communicate(timeout=timeout_s)
            return _Run(proc.returncode, output, time.monotonic() - start)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            output, _ = proc.communicate()
            return _Run(None, output or "", time.monotonic() - start)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _clean_paths(text: str, staging: pathlib.Path) -> str:
    """Make compiler output name package-relative files: drop the staging folder and ``src/``."""
    text = text.replace(f"{staging}/{SRC_DIR}/", "").replace(f"{staging}/", "")
    return re.sub(rf"(?<![\w./-]){SRC_DIR}/(?=[\w.-])", "", text)


def _failure_text(what: str, run: _Run, timeout_s: float) -> str:
    if run.timed_out:
        return f"{what} timed out: no result within {timeout_s:g} s (killed)\n{run.output}"
    if run.returncode is not None and run.returncode < 0:
        try:
            name = signal.Signals(-run.returncode).name
        except ValueError:
            name = str(-run.returncode)
        return f"{what} crashed: killed by signal {name}\n{run.output}"
    return f"{what} failed (exit {run.returncode})\n{run.output}"


def build(
    task_dir: str | os.PathLike[str],
    task: Task,
    instantiations: Sequence[Instantiation],
    *,
    overrides: Mapping[str, bytes] | None = None,
    link: bool = True,
    cache_root: str | os.PathLike[str],
    extra_cuda_cflags: Sequence[str] = (),
    timeout_s: float = 600,
    editable: Sequence[Span] | None = None,
) -> BuildReport:
    """Compile (and with ``link`` link) the requested instantiations; see the module doc.

    ``overrides`` maps package-relative paths to the bytes to compile instead of
    the task's copy. ``editable`` are spans in the coordinates of the files as
    compiled (for a candidate: :func:`relocate_spans` of the task's spans); they
    only annotate error messages. ``timeout_s`` bounds compile plus link.
    """
    start = time.monotonic()
    if task.language != "cuda":  # nvcc has nothing to build: optimize.harness.languages sends Triton elsewhere
        return BuildReport(
            ok=False,
            key="",
            seconds=0.0,
            stderr=f"{task.op_id} is a {task.language} task: nvcc builds CUDA tasks only "
            "(a Triton task's library is its spliced Python file: optimize.harness.evaluate.build_units, "
            "through optimize.harness.languages)",
        )
    the_plan = plan(task_dir, task, instantiations, overrides=overrides, link=link, extra_cuda_cflags=extra_cuda_cflags)
    cache_root = pathlib.Path(cache_root)
    entry = cache_root / the_plan.key
    with _lock_for(the_plan.key):
        hit = _read_entry(entry)
        if hit is not None:
            return hit.model_copy(update={"cached": True, "seconds": time.monotonic() - start})
        cache_root.mkdir(parents=True, exist_ok=True)
        staging = cache_root / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
        try:
            return _build_in(the_plan, staging, entry, task, instantiations, editable, timeout_s, start)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _build_in(
    the_plan: BuildPlan,
    staging: pathlib.Path,
    entry: pathlib.Path,
    task: Task,
    instantiations: Sequence[Instantiation],
    editable: Sequence[Span] | None,
    timeout_s: float,
    start: float,
) -> BuildReport:
    deadline = start + timeout_s
    for rel, data in the_plan.files.items():
        target = staging / SRC_DIR / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (staging / WRAPPER_NAME).write_text(the_plan.wrapper, encoding="utf-8")

    def failed(text: str) -> BuildReport:
        text = _clean_paths(text, staging)
        text = annotate_diagnostics(text, the_plan.files, editable or (), the_plan.overridden)
        return BuildReport(ok=False, key=the_plan.key, seconds=time.monotonic() - start, stderr=text)

    compiled = _run(
        [str(the_plan.nvcc.path), *the_plan.resolve(the_plan.compile_args)], staging, deadline - time.monotonic()
    )
    log = compiled.output
    if compiled.returncode != 0:
        return failed(_failure_text("nvcc", compiled, timeout_s))
    if the_plan.link_args is not None:
        linked = _run([the_plan.host_cc, *the_plan.resolve(the_plan.link_args)], staging, deadline - time.monotonic())
        log += linked.output
        if linked.returncode != 0:
            return failed(_failure_text("link", linked, timeout_s))
        (staging / OBJECT_NAME).unlink(missing_ok=True)  # the module is what we keep
    if not (staging / the_plan.output_name).is_file():
        return failed(f"compiler reported success but wrote no {the_plan.output_name}\n{log}")

    output = _clean_paths(log, staging)
    resources = parse_ptxas(output)
    demangled = toolchain.demangle(sorted({r.kernel for r in resources}))
    resources = [r.model_copy(update={"demangled": demangled.get(r.kernel)}) for r in resources]
    report = BuildReport(
        ok=True,
        key=the_plan.key,
        seconds=time.monotonic() - start,
        library=the_plan.output_name,
        stderr=strip_ptxas(output),
        resources=resources,
    )
    shutil.rmtree(staging / SRC_DIR)  # the inputs are recorded (by digest) in inputs.json
    (staging / LOG_NAME).write_text(output, encoding="utf-8")
    inputs = {
        "key_schema": KEY_SCHEMA,
        "op_id": task.op_id,
        "instantiations": [inst.model_dump(mode="json") for inst in instantiations],
        "arch": the_plan.arch,
        "compile_args": list(the_plan.compile_args),
        "link_args": None if the_plan.link_args is None else list(the_plan.link_args),
        "fingerprint": the_plan.fingerprint,
        "files": {rel: hashlib.sha256(data).hexdigest() for rel, data in sorted(the_plan.files.items())},
        "overridden": sorted(the_plan.overridden),
    }
    (staging / INPUTS_NAME).write_text(json.dumps(inputs, indent=2) + "\n", encoding="utf-8")
    (staging / REPORT_NAME).write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
    _publish(staging, entry)
    return report.model_copy(update={"library": str(entry / the_plan.output_name)})


@dataclasses.dataclass(frozen=True)
class BuildJob:
    """The arguments of one :func:`build` call, for :func:`build_many`."""

    task_dir: pathlib.Path
    task: Task
    instantiations: tuple[Instantiation, ...]
    cache_root: pathlib.Path
    overrides: Mapping[str, bytes] | None = None
    link: bool = True
    extra_cuda_cflags: tuple[str, ...] = ()
    timeout_s: float = 600
    editable: tuple[Span, ...] | None = None


def usable_cpus() -> int:
    """CPUs this process may run on: the affinity mask, capped by a cgroup v2 CPU quota.

    ``os.cpu_count()`` counts the host's CPUs, which in a container or VM can be
    far more than the process gets; one nvcc per counted CPU then only adds
    contention and memory (a cicc process holds ~1 GB).
    """
    count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = pathlib.Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            count = min(count, max(1, int(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, count)


def build_many(jobs: Sequence[BuildJob], max_workers: int | None = None, *, isolate: bool = False) -> list[BuildReport]:
    """Build independent modules in parallel threads (each thread waits on an nvcc
    subprocess); reports come back in job order. ``max_workers`` defaults to the CPU
    count: nvcc is single-threaded, more jobs than cores only add contention.

    A ToolchainError (no nvcc, no host compiler) is always raised: it would hit
    every job. A job that cannot even be planned (ConfigError/ValueError: a region
    that does not splice, an instantiation the wrapper cannot express) is raised
    too, unless ``isolate``: then it becomes that job's failed report and the other
    jobs still build, which is what a sweep over many unrelated tasks needs.
    """
    if not jobs:
        return []
    workers = max(1, min(len(jobs), max_workers or usable_cpus()))

    def one(job: BuildJob) -> BuildReport:
        try:
            return build(
                job.task_dir,
                job.task,
                job.instantiations,
                overrides=job.overrides,
                link=job.link,
                cache_root=job.cache_root,
                extra_cuda_cflags=job.extra_cuda_cflags,
                timeout_s=job.timeout_s,
                editable=job.editable,
            )
        except ToolchainError:
            raise
        except (ConfigError, ValueError) as err:
            if not isolate:
                raise
            return BuildReport(ok=False, key="", seconds=0.0, stderr=str(err))

    with concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nvcc") as pool:
        return list(pool.map(one, jobs))


# --------------------------------------------------------------------------- reports


def merge_reports(reports: Sequence[BuildReport]) -> BuildReport:
    """One report for a task built as several units (one module each): ok only when
    every unit built; seconds summed; every unit's ptxas resources; the stderr of the
    first unit that failed (what a repair or a table row needs; the others fail the
    same way or later); ``key`` the hash of the unit keys; ``library`` only for a single
    unit (callers keep the per-unit libraries); ``cached`` when every unit was."""
    if len(reports) == 1:
        return reports[0]
    failed = next((r for r in reports if not r.ok), None)
    return BuildReport(
        ok=failed is None,
        key=content_hash(*[r.key for r in reports]),
        seconds=sum(r.seconds for r in reports),
        library=None,
        stderr=failed.stderr if failed is not None else "",
        resources=[res for r in reports for res in r.resources],
        cached=all(r.cached for r in reports),
    )
