"""What the in-process release A/B (``kernelsmith track ab``) says of a step the census found.

A step across census batches is a trend (different days, often different machines); only the release
A/B, both releases' kernels timed in one worker, may confirm it as a regression or retract it. The
command line (:mod:`pipeline.track`) and the dashboard (:mod:`pipeline.dashboard`) read the verdict
here, so they never disagree.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping
from typing import Literal

from pipeline.errors import KernelsmithError
from pipeline.record_io import read_record
from pipeline.store_records import AB_DIR, Regression, ReleaseAB


def release_verdicts(work: pathlib.Path) -> dict[tuple[str, str, str], ReleaseAB]:
    """(op, old release, new release) -> the release A/B's record (``kernelsmith track ab``), the planted
    runs left out."""
    out: dict[tuple[str, str, str], ReleaseAB] = {}
    for path in sorted((work / AB_DIR).glob("*/*.json")):
        try:
            record = read_record(ReleaseAB, path)
        except KernelsmithError:
            continue  # a record that does not read confirms nothing; `track ab` writes it again
        if record.planted_passes == 1:
            out[(record.op_id, record.old, record.new)] = record
    return out


StepStatus = Literal["confirmed", "retracted", "not confirmed", "trend"]


def step_status(reg: Regression, ab: Mapping[tuple[str, str, str], ReleaseAB]) -> StepStatus:
    """The release A/B's verdict on a step found across batches, as a value: ``trend`` where no A/B
    compared its two releases (batches of different days and machines give only a trend)."""
    record = ab.get((reg.op_id, reg.before_sglang, reg.introduced_sglang))
    if record is None:
        return "trend"
    if record.verdict == "regression":
        return "confirmed"
    if record.verdict in ("no change", "improvement"):
        return "retracted"
    return "not confirmed"


def confirmation(reg: Regression, ab: Mapping[tuple[str, str, str], ReleaseAB]) -> str:
    """:func:`step_status` as the sentence a person reads, with the command that confirms a trend."""
    status = step_status(reg, ab)
    if status == "trend":
        return (
            "a trend across batches, not a verdict: confirm it with `kernelsmith track ab --old <tasks of "
            f"{reg.before_sglang or 'the release before'}> --new <tasks of {reg.introduced_sglang or 'this one'}> --ops {reg.op_id}`"
        )
    record = ab[(reg.op_id, reg.before_sglang, reg.introduced_sglang)]
    if status == "confirmed":
        return f"confirmed by the release A/B in one worker ({record.change_pct:+.2f}%)"
    detail = f" ({record.detail})" if record.detail else ""
    if status == "retracted":
        return f"retracted: the release A/B in one worker found {record.verdict}{detail}"
    return f"not confirmed: the release A/B was {record.verdict}{detail}"
