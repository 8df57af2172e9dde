"""Measurement backends: where the loop's evaluations come from.

One module per backend, one entry point each:
- :mod:`optimize.backends.gpu`: the real harness on a CUDA GPU (the only source
  of numbers that may be reported as measurements);
- :mod:`optimize.backends.replay`: a simulation from a file of recorded timings,
  so the loop is tested without a GPU.

Both implement :class:`Backend`. ``gpu_s`` accumulates the GPU seconds spent (the
GPU budget reads it); ``simulated`` tells reports to say SIMULATED.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Literal, Protocol

from pipeline.records import Task
from pipeline.run_records import Candidate, Evaluation


class Backend(Protocol):
    name: str
    simulated: bool

    @property
    def gpu_s(self) -> float:
        """GPU seconds spent so far (read by the budget; a plain attribute or a property)."""
        ...

    def available(self) -> tuple[bool, str]:
        """(usable here, one line saying what it is or why not)."""

    def describe(self) -> str: ...

    def evaluate(
        self,
        task_dir: str | os.PathLike[str] | None,
        task: Task,
        candidate: Candidate,
        *,
        stage: Literal["round", "final"] = "round",
    ) -> Evaluation: ...

    def evaluate_many(
        self, task_dir: str | os.PathLike[str] | None, task: Task, candidates: Sequence[Candidate]
    ) -> list[Evaluation]:
        """Round evaluations of a search population, one per candidate in order (GPU: built at once, one worker)."""
        ...
