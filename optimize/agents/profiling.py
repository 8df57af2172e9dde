"""Profiling agent: an Evaluation (and a profile when there is one) made compact.

Why deterministic: the planner needs the same few facts every round — how far
each shape is from its floor, what share of copy bandwidth it reaches, register
pressure and spills, and Nsight Compute metrics when a profile was taken — and
an LLM adds nothing to computing them. The summary is a typed record (the
policy and features read it) and renders to a few lines for prompts.

What must stay true: every number comes from the Evaluation / profile given;
the observations (``notes``) are rules over those numbers, stated with the
threshold that triggered them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from optimize.features import top_stall
from pipeline.record_io import Record
from pipeline.run_records import Evaluation
from pipeline.stats import geomean

LAUNCH_BOUND_US = 4.0  # below this a kernel is dominated by launch and tail latency
LOW_BW_PCT = 60.0  # a memory-bound kernel under this share of copy bandwidth has headroom
HIGH_REGISTERS = 128  # above this, occupancy drops on Hopper (64K registers per SM)
LOW_DRAM_PCT = 60.0  # ncu DRAM throughput under this (of peak) on a kernel long enough to matter
LOW_OCCUPANCY_PCT = 40.0  # ncu achieved occupancy under this leaves too few warps to hide memory latency
# What each top warp-stall reason usually means for these kernels (ncu's own wording is terse).
STALL_MEANING = {
    "long_scoreboard": "waiting on global/local memory loads: more loads in flight per thread, or prefetch",
    "lg_throttle": "the load/store queue is full: wider (vectorized) accesses, fewer instructions per byte",
    "barrier": "waiting at __syncthreads: fewer block-wide barriers, or warp-level reductions",
    "short_scoreboard": "waiting on shared memory or special-function results",
    "mio_throttle": "shared-memory / special-function instruction queue full",
    "math_pipe_throttle": "a math pipe is saturated: compute-bound there",
    "wait": "fixed-latency dependencies: more independent work per thread",
    "no_instruction": "instruction cache misses or too little work per warp",
    "membar": "memory fences",
    "branch_resolving": "divergent or frequent branches",
    "drain": "waiting for stores to drain at exit",
    "sleeping": "warps asleep (nanosleep / barriers of other warps)",
}


class ShapeProfile(Record):
    label: str
    dtype: str
    time_us: float
    time_over_floor: float | None  # None: the op is not byte-bound (Contract.byte_bound), no floor applies
    pct_of_copy_bw: float
    gbps: float
    speedup: float | None = None


class KernelProfile(Record):
    kernel: str
    registers: int
    spill_stores: int = 0
    spill_loads: int = 0
    smem_bytes: int = 0


class ProfileSummary(Record):
    op_id: str
    candidate: str
    outcome: str
    shapes: list[ShapeProfile] = Field(default_factory=list)
    kernels: list[KernelProfile] = Field(default_factory=list)
    ncu: dict[str, float] = Field(default_factory=dict)  # metric name -> value, when profiled
    geomean_time_over_floor: float | None = None
    worst_shape: str | None = None  # farthest from its floor
    notes: list[str] = Field(default_factory=list)

    def text(self, *, max_shapes: int = 8) -> str:
        """A few lines for a prompt."""
        lines = [f"candidate {self.candidate}: {self.outcome}"]
        if self.geomean_time_over_floor is not None:
            lines.append(f"geomean time/floor {self.geomean_time_over_floor:.2f}x; worst shape {self.worst_shape}")
        elif self.shapes:
            lines.append("time/floor: n/a (the op is not byte-bound: a sort, a selection or a scan)")
        shapes = sorted(self.shapes, key=lambda s: -(s.time_over_floor or 0.0))[:max_shapes]
        for s in shapes:
            extra = f", {s.speedup:.2f}x vs baseline" if s.speedup is not None else ""
            floor = f"{s.time_over_floor:.2f}x floor, " if s.time_over_floor is not None else ""
            lines.append(
                f"- {s.label} {s.dtype}: {s.time_us:.2f} us, {floor}{s.pct_of_copy_bw:.0f}% of copy bandwidth{extra}"
            )
        if len(self.shapes) > max_shapes:
            lines.append(f"- ... {len(self.shapes) - max_shapes} closer-to-floor shapes omitted")
        for k in self.kernels:
            lines.append(
                f"kernel {k.kernel}: {k.registers} registers, spills {k.spill_stores}/{k.spill_loads} bytes (st/ld), smem {k.smem_bytes} B"
            )
        if self.ncu:
            lines.append("ncu: " + ", ".join(f"{k}={v:g}" for k, v in sorted(self.ncu.items())))
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def summarize(evaluation: Evaluation, *, ncu: Mapping[str, Any] | None = None) -> ProfileSummary:
    """The summary of one evaluation; ``ncu`` is a {metric: value} map when profiled."""
    shapes = [
        ShapeProfile(
            label=t.label,
            dtype=t.dtype,
            time_us=t.time_us,
            time_over_floor=t.over_floor,
            pct_of_copy_bw=t.pct_of_copy_bw,
            gbps=t.gbps,
            speedup=t.speedup,
        )
        for t in evaluation.timings
    ]
    kernels = []
    if evaluation.build is not None:
        for r in evaluation.build.resources:
            kernels.append(
                KernelProfile(
                    kernel=getattr(r, "demangled", None) or r.kernel,
                    registers=r.registers,
                    spill_stores=r.spill_stores,
                    spill_loads=r.spill_loads,
                    smem_bytes=r.smem_bytes,
                )
            )
    metrics: dict[str, float] = {}
    for key, value in (ncu or {}).items():
        try:
            metrics[str(key)] = float(value)
        except (TypeError, ValueError):
            continue
    notes: list[str] = []
    floored = [s for s in shapes if s.time_over_floor is not None]
    worst = max(floored, key=lambda s: s.time_over_floor or 0.0) if floored else None
    small = [s for s in shapes if s.time_us < LAUNCH_BOUND_US]
    if small:
        notes.append(
            f"{len(small)} shape(s) under {LAUNCH_BOUND_US:g} us are launch/latency bound "
            f"(e.g. {small[0].label} {small[0].dtype}): fewer blocks or PDL help more than bandwidth"
        )
    low_bw = [s for s in shapes if s.time_us >= LAUNCH_BOUND_US and s.pct_of_copy_bw < LOW_BW_PCT]
    if low_bw:
        s = min(low_bw, key=lambda x: x.pct_of_copy_bw)
        notes.append(
            f"{len(low_bw)} large shape(s) under {LOW_BW_PCT:g}% of copy bandwidth "
            f"(lowest {s.pct_of_copy_bw:.0f}% at {s.label} {s.dtype}): memory access has headroom"
        )
    for k in kernels:
        if k.spill_stores or k.spill_loads:
            notes.append(f"{k.kernel} spills registers ({k.spill_stores} B stored, {k.spill_loads} B loaded)")
        if k.registers > HIGH_REGISTERS:
            notes.append(f"{k.kernel} uses {k.registers} registers (> {HIGH_REGISTERS}): occupancy is limited")
    notes += ncu_notes(metrics)
    slower = [s for s in shapes if s.speedup is not None and s.speedup < 1.0]
    if slower:
        notes.append(f"slower than the baseline at {len(slower)} shape(s), e.g. {slower[0].label} {slower[0].dtype}")
    return ProfileSummary(
        op_id=evaluation.op_id,
        candidate=evaluation.candidate,
        outcome=evaluation.outcome.value,
        shapes=shapes,
        kernels=kernels,
        ncu=metrics,
        geomean_time_over_floor=geomean(s.time_over_floor for s in floored if s.time_over_floor is not None),
        worst_shape=f"{worst.label} {worst.dtype}" if worst else None,
        notes=notes,
    )


def ncu_notes(metrics: Mapping[str, float]) -> list[str]:
    """Observations from Nsight Compute figures (of the longest profiled kernel), each with its threshold."""
    notes: list[str] = []
    if not metrics:
        return notes
    long_enough = metrics.get("duration_us", 0.0) >= LAUNCH_BOUND_US
    dram = metrics.get("dram_throughput_pct")
    if dram is not None and long_enough and dram < LOW_DRAM_PCT:
        notes.append(
            f"ncu: DRAM throughput {dram:.0f}% of peak (< {LOW_DRAM_PCT:g}%) on a {metrics['duration_us']:.1f} us kernel"
        )
    occ = metrics.get("achieved_occupancy_pct")
    if occ is not None and occ < LOW_OCCUPANCY_PCT:
        notes.append(f"ncu: achieved occupancy {occ:.0f}% (< {LOW_OCCUPANCY_PCT:g}%): few warps to hide latency")
    stall = top_stall(metrics)
    if stall is not None:
        reason, value = stall
        meaning = STALL_MEANING.get(reason, "see Nsight Compute's warp-state docs")
        notes.append(f"ncu: top warp stall {reason} ({value:.2f} warps per issue): {meaning}")
    return notes
