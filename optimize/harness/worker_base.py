"""The GPU worker's shared pieces: its log line, the typed failure of one case, the implementation
under test (baseline or candidate) and its run's snapshot, the reference call, and the pauses and
frees between runs. :mod:`optimize.harness.worker` says what the worker does and must keep true."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from optimize.harness import loader, references
from optimize.harness.protocol import (
    CheckCase,
)
from optimize.harness.triton_library import LibraryLoadFailed
from pipeline.records import Contract

SLEEP_CYCLES = 1_000_000  # ~0.5 ms at H200 clocks: far longer than any launch latency


TIMING_MEMORY_FRACTION = 0.5  # memory the timing buffers may take, as a fraction of what is free


def log(message: str) -> None:
    print(f"[worker {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class CaseFailure(Exception):
    """Ends a case: ``kind`` says whose fault and how (incorrect/crashed: the candidate's;
    baseline_failed: the baseline's, raised out of the checks; skipped: a held-out shape
    the baseline itself rejects)."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind  # incorrect | crashed | baseline_failed | skipped
        self.reason = reason


def is_cuda_error(err: BaseException) -> bool:
    text = f"{type(err).__name__}: {err}".lower()
    return any(
        s in text for s in ("cuda error", "cudaerror", "illegal", "misaligned", "launch failure", "acceleratorerror")
    )


@dataclass
class Impl:
    name: str  # "baseline" | "candidate"
    libraries: list[str]

    def fn(self, unit: int, export: str) -> Callable[..., Any]:
        try:
            return loader.function(self.libraries[unit], export, owner=self.name)
        except LibraryLoadFailed as err:  # a Triton file that does not import: its author's fault
            raise CaseFailure("baseline_failed" if self.name == "baseline" else "incorrect", str(err)) from None


@dataclass
class RunOutput:
    storages: dict[str, Any]  # output/inout name -> flat storage snapshot after the run
    repeatable: bool | None = None  # run 1 only: its inputs replayed once more gave its outputs bit for bit


def ref_call(contract: Contract, plan: Any, views: dict[str, Any]) -> references.RefCall:
    """The reference's view of one call: tensor names and roles in order, ``views``, and the scalar arguments."""
    scalars = {
        arg.scalar.name: value
        for arg, value in zip(contract.args, plan.args)
        if arg.kind == "scalar" and arg.scalar is not None
    }
    return references.RefCall([t.name for t in plan.tensors], [t.role for t in plan.tensors], views, scalars)


def case_name(case: CheckCase) -> str:
    kind = "held-out" if case.held_out else "catalog"
    return (
        f"{kind} shape {case.label} {case.dtype} ({case.distribution} inputs, {case.layout} layout, seed {case.seed})"
    )


def pause() -> None:
    import torch

    sleep = getattr(torch.cuda, "pause", None)
    if sleep is not None:
        sleep(SLEEP_CYCLES)


def free_memory(fraction: float = 0.4) -> None:
    """Return cached blocks to the driver only when the cache holds a large share of the card.

    Emptying after every case would make the next case pay cudaMalloc for every
    buffer; never emptying lets a run of large shapes fragment the cache.
    """
    import torch

    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    if torch.cuda.memory_reserved() > fraction * total:
        torch.cuda.empty_cache()
