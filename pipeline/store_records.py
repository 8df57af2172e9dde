"""The results store's records: a batch of measurements, its rows, a regression found over the history,
and the release A/B of one op that confirms or retracts it (``kernelsmith track ab``)."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import Field

from pipeline.record_io import Record, VersionedRecord
from pipeline.run_records import Evaluation

#: Variants that time a reference (PyTorch), not a kernel: never a kernel regression.
REFERENCE_VARIANTS = ("torch_eager", "torch_compile")


class Row(Record):
    op_id: str
    dtype: str
    shape: str  # ShapeCase label or "T=..,H=.."
    variant: str = "baseline"  # baseline | candidate:<id> | torch_eager | torch_compile
    time_us: float
    spread_pct: float = 0.0
    gbps: float | None = None
    # the batch device's floor (optimize.harness.roofline.floor_us: bandwidth, smallest kernel,
    # copy latency); None: not known, or the op is not byte-bound
    floor_us: float | None = None


class Measurement(VersionedRecord):
    device: str  # GPU name as the driver reports it
    taken_at: str  # ISO-8601 UTC
    command: str  # what reproduces it
    sglang: str  # version or commit of the kernels measured
    rows: list[Row]
    notes: dict[str, str] = Field(default_factory=dict)
    kernelsmith: str = ""  # the commit of this tool that measured it ("" in batches from before it was kept)


class Regression(Record):
    """A step up in one series' time (op, dtype, shape, variant, device), found over its history."""

    op_id: str
    dtype: str
    shape: str
    variant: str
    best_us: float  # the step's level before
    best_key: str  # the last batch before the step
    now_us: float  # the step's level after (its minimum)
    slowdown_pct: float
    introduced_key: str = ""  # the first batch after the step
    introduced_sglang: str = ""  # its SGLang version or commit
    before_sglang: str = ""
    band_pct: float = 0.0  # the threshold it exceeded: max(noise_pct, k x spread)
    # the op's source files whose sha256 differs between the two batches (census batches note them)
    changed_files: list[str] = Field(default_factory=list)


def files_note(op_id: str) -> str:
    """The key under which a census batch notes an op's source files (path -> sha256 prefix, JSON)."""
    return f"files:{op_id}"


def changed_files(before: Measurement, after: Measurement, op_id: str) -> list[str]:
    """Source files of ``op_id`` added, removed or changed between two batches ([] where either notes none)."""
    key = files_note(op_id)
    if key not in before.notes or key not in after.notes:
        return []
    old, new = json.loads(before.notes[key]), json.loads(after.notes[key])
    return sorted(p for p in set(old) | set(new) if old.get(p) != new.get(p))


__all__ = ["Measurement", "REFERENCE_VARIANTS", "Regression", "Row", "changed_files", "files_note"]


Verdict = Literal["regression", "improvement", "no change", "not comparable", "failed"]
AB_DIR = "track/ab"  # under the work folder: <old>-vs-<new>/<op>.json


class ReleaseAB(Record):
    """One op's two releases, timed in one worker (the new one as the baseline)."""

    op_id: str
    old: str  # the releases' SGLang versions (or commits)
    new: str
    verdict: Verdict
    change_pct: float | None = None  # (new - old) / old over the timed shapes' geomean; + = the new one is slower
    threshold_pct: float | None = None  # the noise threshold the verdict used
    planted_passes: int = 1  # --plant: the new build ran its entry this many times per call (a known regression)
    detail: str = ""
    evaluation: Evaluation | None = None  # the worker's record: per-shape times (baseline = new, candidate = old)
