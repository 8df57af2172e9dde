"""Errors of the evaluation harness (families in :mod:`pipeline.errors`).

Why separate types: a broken *setup* (no GPU, a baseline that does not build, a
contract the harness cannot turn into tensors) must stop a run with the fix,
while a broken *candidate* is never an exception at all: it is a typed
:class:`pipeline.run_records.Outcome` in its Evaluation. Nothing in here may be used
to report a candidate's failure.
"""

from __future__ import annotations

from collections.abc import Mapping

from contract.errors import ContractError
from optimize.errors import GpuRequired
from pipeline.errors import KernelsmithError


class BaselineError(KernelsmithError):
    """The baseline kernel itself failed (build, crash, or rejecting a catalog shape).

    Not the candidate's fault, so it is raised rather than recorded as the
    candidate's outcome. The message carries the tool output; ``evidence`` what the
    baseline showed about its contract (``WorkerResult.role_evidence``).
    """

    def __init__(self, message: str, *, evidence: Mapping[str, str] | None = None, **kwargs: str) -> None:
        super().__init__(message, **kwargs)
        self.evidence = dict(evidence or {})


class HarnessError(KernelsmithError):
    """The harness's own machinery failed (worker protocol, a bug): never blamed on a kernel."""


__all__ = ["BaselineError", "ContractError", "GpuRequired", "HarnessError"]
