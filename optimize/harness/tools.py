"""Nsight Compute and compute-sanitizer, for final candidates.

Both wrap the worker in ``single`` mode (each case called a few times, nothing
else) so the tool sees the kernel in the same process, loaded the same way, on
the same kind of inputs as an evaluation.

- :func:`profile_ncu`: ``ncu --clock-control none`` (METHOD.md: never touch the
  clocks) for DRAM throughput, achieved occupancy and the top warp-stall
  reasons of the task's kernels.
- :func:`sanitize`: ``compute-sanitizer`` memcheck (out-of-bounds and misaligned
  accesses) and racecheck (shared-memory hazards). PyTorch's caching allocator
  is switched off for these runs (``PYTORCH_NO_CUDA_MEMORY_CACHING=1``) so every
  tensor is its own allocation and an out-of-bounds access is not hidden inside
  a larger cached block.

Each returns a typed result whose status is ``unavailable`` when the tool is
not installed (or cannot run on this machine, as on gVisor), so a caller can
always record what happened. The output parsers are pure and CPU-tested.
"""

from __future__ import annotations

import csv
import glob
import io
import os
import pathlib
import re
import shutil
import sys
from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from optimize.harness import isolate
from optimize.harness.languages import build_of
from optimize.harness.protocol import WorkerRequest
from pipeline.record_io import Record

NCU_CORE_METRICS = (
    "gpu__time_duration.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes.sum.per_second",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread",
)
STALL_REASONS = (
    "barrier",
    "branch_resolving",
    "dispatch_stall",
    "drain",
    "imc_miss",
    "lg_throttle",
    "long_scoreboard",
    "math_pipe_throttle",
    "membar",
    "mio_throttle",
    "misc",
    "no_instruction",
    "not_selected",
    "selected",
    "short_scoreboard",
    "sleeping",
    "tex_throttle",
    "wait",
)
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
TOP_STALLS = 4


class NcuKernel(Record):
    kernel: str
    duration_us: float | None = None
    dram_throughput_pct: float | None = None
    dram_gbps: float | None = None
    achieved_occupancy_pct: float | None = None
    registers: float | None = None
    top_stalls: list[tuple[str, float]] = Field(default_factory=list)  # (reason, warps stalled per issue)


class NcuResult(Record):
    status: Literal["ok", "unavailable", "failed"]
    detail: str = ""
    command: list[str] = Field(default_factory=list)
    kernels: list[NcuKernel] = Field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        """Flat figures of the longest kernel, for the profiling agent."""
        if not self.kernels:
            return {}
        k = max(self.kernels, key=lambda k: k.duration_us or 0.0)
        out = {
            "duration_us": k.duration_us,
            "dram_throughput_pct": k.dram_throughput_pct,
            "dram_gbps": k.dram_gbps,
            "achieved_occupancy_pct": k.achieved_occupancy_pct,
            "registers": k.registers,
        }
        out.update({f"stall_{reason}": value for reason, value in k.top_stalls})
        return {key: float(v) for key, v in out.items() if v is not None}


class SanitizerResult(Record):
    tool: str  # memcheck | racecheck | initcheck | synccheck
    status: Literal["clean", "errors", "unavailable", "failed"]
    errors: int = 0
    detail: str = ""
    command: list[str] = Field(default_factory=list)


# ---------------------------------------------------------------------------- finding tools


def find_tool(name: str) -> str | None:
    """A CUDA tool on PATH, under CUDA_HOME, /usr/local/cuda, or Nsight Compute's own folder."""
    found = shutil.which(name)
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for root in filter(None, roots):
        for sub in ("bin", "compute-sanitizer", "nsight-compute"):
            path = pathlib.Path(root) / sub / name
            if path.is_file() and os.access(path, os.X_OK):
                return str(path)
    for candidate in sorted(glob.glob(f"/opt/nvidia/nsight-compute/*/{name}"), reverse=True):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


# ---------------------------------------------------------------------------- parsers


def _number(text: str) -> float | None:
    text = text.strip().replace(",", "")
    if not text or text.lower() in ("n/a", "nan"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def parse_ncu_csv(text: str) -> list[NcuKernel]:
    """Kernels from ``ncu --csv --page raw --print-units base`` output.

    The CSV is the lines that start with a double quote (ncu's own ``==PROF==``
    lines and the program's output are skipped): a header row, a units row, then
    one row per profiled kernel launch.
    """
    lines = [line for line in text.splitlines() if line.startswith('"')]
    if len(lines) < 2:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header = rows[0]
    units = rows[1] if len(rows) > 1 and not _looks_like_values(rows[1], header) else None
    body = rows[2:] if units is not None else rows[1:]
    col = {name: i for i, name in enumerate(header)}

    def get(row: list[str], metric: str) -> float | None:
        index = col.get(metric)
        if index is None or index >= len(row):
            return None
        value = _number(row[index])
        unit = units[index].strip().lower() if units is not None and index < len(units) else ""
        if value is not None and metric == "gpu__time_duration.sum":
            scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}.get(unit, 1e-3)
            value *= scale
        if value is not None and metric == "dram__bytes.sum.per_second":
            scale = {"byte/second": 1e-9, "byte/s": 1e-9, "gbyte/second": 1.0, "tbyte/second": 1e3}.get(unit, 1e-9)
            value *= scale
        return value

    kernels = []
    for row in body:
        if len(row) < len(header) // 2:
            continue
        name = row[col["Kernel Name"]] if "Kernel Name" in col else "?"
        stalls = []
        for reason in STALL_REASONS:
            value = get(row, STALL_METRIC.format(reason))
            if value is not None and reason != "selected":
                stalls.append((reason, value))
        stalls.sort(key=lambda item: -item[1])
        kernels.append(
            NcuKernel(
                kernel=name,
                duration_us=get(row, "gpu__time_duration.sum"),
                dram_throughput_pct=get(row, "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
                dram_gbps=get(row, "dram__bytes.sum.per_second"),
                achieved_occupancy_pct=get(row, "sm__warps_active.avg.pct_of_peak_sustained_active"),
                registers=get(row, "launch__registers_per_thread"),
                top_stalls=stalls[:TOP_STALLS],
            )
        )
    return kernels


def _looks_like_values(row: list[str], header: list[str]) -> bool:
    """A units row has empty ID/process cells; a value row has a numeric ID."""
    return bool(row) and _number(row[0]) is not None


_ERROR_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+error", re.I)
_RACE_SUMMARY = re.compile(
    r"RACECHECK SUMMARY:\s*(\d+)\s+hazards? displayed\s*\((\d+)\s+errors?,\s*(\d+)\s+warnings?\)", re.I
)


def parse_sanitizer(tool: str, text: str) -> tuple[str, int, str]:
    """(status, errors, first error lines) from compute-sanitizer output."""
    errors = None
    if match := _RACE_SUMMARY.search(text):
        errors = int(match.group(2))
    if match := _ERROR_SUMMARY.search(text):
        errors = max(errors or 0, int(match.group(1)))
    if errors is None:
        return "failed", 0, isolate.tail(text, 1500)
    if errors == 0:
        return "clean", 0, ""
    lines = [line for line in text.splitlines() if line.startswith("=========") and line.strip("= ")]
    return "errors", errors, "\n".join(lines[:25])


# ---------------------------------------------------------------------------- running


def _single(request: WorkerRequest) -> WorkerRequest:
    return request.model_copy(update={"mode": "single", "stop_at_first_failure": True})


def _worker_argv() -> list[str]:
    return [sys.executable, "-m", isolate.WORKER_MODULE]


def run_ncu(
    request: WorkerRequest,
    workdir: str | os.PathLike[str],
    kernel_names: Sequence[str],
    *,
    timeout_s: float = 300.0,
    launches: int = 4,
) -> NcuResult:
    """Profile the request's kernels (single mode) with Nsight Compute."""
    ncu = find_tool("ncu")
    if ncu is None:
        return NcuResult(status="unavailable", detail="ncu (Nsight Compute) is not installed on this machine")
    workdir = pathlib.Path(workdir)
    regex = "|".join(re.escape(k) for k in kernel_names) or ".*"
    result = None
    for metrics in (NCU_CORE_METRICS + tuple(STALL_METRIC.format(r) for r in STALL_REASONS), NCU_CORE_METRICS):
        prefix = [
            ncu,
            "--clock-control",
            "none",
            "--target-processes",
            "all",
            "--kernel-name",
            f"regex:{regex}",
            "--launch-count",
            str(launches),
            "--metrics",
            ",".join(metrics),
            "--csv",
            "--page",
            "raw",
            "--print-units",
            "base",
            *_worker_argv(),
        ]
        run = isolate.run_worker(_single(request), workdir, timeout_s=timeout_s, argv_prefix=prefix)
        stdout = (workdir / "worker.stdout").read_text(encoding="utf-8", errors="replace")
        kernels = parse_ncu_csv(stdout)
        if kernels:
            return NcuResult(status="ok", command=prefix, kernels=kernels)
        result = NcuResult(
            status="failed",
            command=prefix,
            detail=f"{run.summary}; no kernel rows\n{isolate.tail(stdout + run.stderr_tail, 2000)}",
        )
        if "metric" not in (stdout + run.stderr_tail).lower():
            break  # not a metric-name problem: a reduced set will not help
    return result or NcuResult(status="failed", detail="ncu did not run")


def run_sanitizer(
    request: WorkerRequest, workdir: str | os.PathLike[str], tool: str = "memcheck", *, timeout_s: float = 600.0
) -> SanitizerResult:
    """Run the request (single mode) under ``compute-sanitizer --tool <tool>``."""
    sanitizer = find_tool("compute-sanitizer")
    if sanitizer is None:
        return SanitizerResult(tool=tool, status="unavailable", detail="compute-sanitizer is not installed here")
    prefix = [sanitizer, "--tool", tool, "--print-limit", "20", *_worker_argv()]
    if tool == "racecheck":
        prefix[3:3] = ["--racecheck-report", "all"]
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    run = isolate.run_worker(_single(request), workdir, timeout_s=timeout_s, argv_prefix=prefix, env=env)
    text = (
        (pathlib.Path(workdir) / "worker.stdout").read_text(encoding="utf-8", errors="replace") + "\n" + run.stderr_tail
    )
    if run.status == "timeout":
        return SanitizerResult(
            tool=tool, status="failed", detail=f"{run.summary}\n{isolate.tail(text, 1500)}", command=prefix
        )
    if "device not supported" in text.lower() or "unable to find" in text.lower() and "device" in text.lower():
        return SanitizerResult(tool=tool, status="unavailable", detail=isolate.tail(text, 800), command=prefix)
    status, errors, detail = parse_sanitizer(tool, text)
    return SanitizerResult(tool=tool, status=status, errors=errors, detail=detail, command=prefix)


def _request_for(task_dir, task, candidate, config, shapes=None, held_out=0) -> tuple[WorkerRequest, list[str]]:
    """A single-mode request for the candidate (or baseline).

    Shapes: the smallest and largest catalog shape (timed dtype), plus
    ``held_out`` fresh shapes (T=1, odd token counts: the tails a sanitizer
    should see) in that dtype. With held-out shapes the worker runs the checks
    list, else the timing list.
    """
    from optimize.harness.errors import BaselineError
    from optimize.harness.evaluate import build_baseline, build_units, plan_cases

    catalog = list(shapes if shapes is not None else task.shapes)
    if len(catalog) > 2 and shapes is None:

        def size(shape):
            return sum(shape.sizes.values()) * max(shape.tokens, 1)

        catalog = [min(catalog, key=size), max(catalog, key=size)]
    plan = plan_cases(task, shapes=catalog, held_out=held_out, profile=True)
    timed = {t.dtype for t in plan.timings}
    checks = [c for c in plan.checks if c.dtype in timed] if held_out else []
    _, libs = build_baseline(task_dir, task, plan.units, config=config)
    cand_libs = None
    if candidate is not None:
        report, cand_libs = build_units(task_dir, task, plan.units, config=config, regions=candidate.regions)
        if not report.ok:
            raise BaselineError(
                f"candidate {candidate.id} does not build", fix="evaluate it first", detail=report.stderr
            )
    request = WorkerRequest(
        mode="single",
        op_id=task.op_id,
        contract=task.contract,
        baseline_libraries=libs,
        candidate_libraries=cand_libs,
        checks=checks,
        timings=plan.timings,
        harness=config.harness,
        device_cache_dir=str(config.cache / "device"),
        sglang_package=build_of(task).sglang_package(task, config),
    )
    kernels = sorted({span.name for span in task.editable if span.kind == "kernel"})
    return request, kernels


def profile_ncu(task_dir, task, candidate, *, config, shapes=None) -> NcuResult:
    """Nsight Compute figures of a candidate's (or, with None, the baseline's) kernels."""
    from optimize.harness.evaluate import worker_dir

    if find_tool("ncu") is None:
        return NcuResult(status="unavailable", detail="ncu (Nsight Compute) is not installed on this machine")
    request, kernels = _request_for(task_dir, task, candidate, config, shapes)
    tag = candidate.id[:12] if candidate is not None else "baseline"
    return run_ncu(request, worker_dir(config, task.op_id, f"ncu-{tag}"), kernels, launches=2 * len(request.timings))


def sanitize(task_dir, task, candidate, *, config, tools: Sequence[str] = ("memcheck", "racecheck"), shapes=None):
    """compute-sanitizer results (one per tool) for a candidate (or the baseline)."""
    from optimize.harness.evaluate import worker_dir

    if find_tool("compute-sanitizer") is None:
        return [
            SanitizerResult(tool=t, status="unavailable", detail="compute-sanitizer is not installed") for t in tools
        ]
    request, _ = _request_for(task_dir, task, candidate, config, shapes, held_out=2)
    request = request.model_copy(update={"single_calls": 1})
    tag = candidate.id[:12] if candidate is not None else "baseline"
    return [run_sanitizer(request, worker_dir(config, task.op_id, f"{t}-{tag}"), t) for t in tools]
