"""What the in-process release A/B (``kernelsmith track ab``) says of a step the census found.

A step across census batches is a trend (different days, often different machines); only the release
A/B, both releases' kernels timed in one worker, may confirm it as a regression or retract it. The
command line (:mod:`pipeline.track`) and the dashboard (:mod:`pipeline.dashboard`) read the verdict
here, so they never disagree.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping

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


def confirmation(reg: Regression, ab: Mapping[tuple[str, str, str], ReleaseAB]) -> str:
    """What the in-process release A/B says of a step found across batches (the only verdict: batches
    of different days and machines give a trend)."""
    record = ab.get((reg.op_id, reg.before_sglang, reg.introduced_sglang))
    if record is None:
        return (
            "a trend across batches, not a verdict: confirm it with `kernelsmith track ab --old <tasks of "
            f"{reg.before_sglang or 'the release before'}> --new <tasks of {reg.introduced_sglang or 'this one'}> --ops {reg.op_id}`"
        )
    if record.verdict == "regression":
        return f"confirmed by the release A/B in one worker ({record.change_pct:+.2f}%)"
    detail = f" ({record.detail})" if record.detail else ""
    if record.verdict in ("no change", "improvement"):
        return f"retracted: the release A/B in one worker found {record.verdict}{detail}"
    return f"not confirmed: the release A/B was {record.verdict}{detail}"
