"""Token-count buckets (decode, mid, prefill) and the floor's no-go rule, written once.

Why: the best configuration and the headroom differ between decode and prefill
sizes, and a bucket that already runs within :data:`AT_FLOOR` of its floor has
nothing left worth a round (issue 14: "a bucket within 1.1x of its floor is no-go").
The report, the loop's stop rule and the agent's census all speak in these buckets.

What must stay true: every timed shape falls in exactly one bucket; a shape without
a token count is in the first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Protocol

from pipeline.run_records import ShapeTiming
from pipeline.stats import geomean

#: (name, lowest token count, highest token count)
BUCKETS: tuple[tuple[str, int, int], ...] = (("T<=64", 0, 64), ("64<T<512", 65, 511), ("T>=512", 512, 1 << 62))
AT_FLOOR = 1.1  # time ÷ floor at or under which a bucket is no-go


def floor_text(timing: ShapeTiming) -> str:
    """A shape's time ÷ floor as tables show it: the ratio, or "n/a" where the floor does not apply."""
    return f"{timing.time_over_floor:.2f}" if timing.floor_applies else "n/a"


def tokens_in_sizes(sizes: Mapping[str, int]) -> int:
    """The token count a shape's sizes name (``num_tokens``, else ``tokens``); 0 if none."""
    return int(sizes.get("num_tokens", sizes.get("tokens", 0)))


class _Sized(Protocol):
    @property
    def sizes(self) -> Mapping[str, int]: ...


def tokens_of(shape: ShapeTiming | _Sized) -> int:
    """A timed shape's (or a timing case's) token count: the catalog's own where it was carried
    through (16 of the 53 catalog ops on 2026-12-02 name no ``num_tokens``), else from its sizes."""
    tokens = getattr(shape, "tokens", None)
    return int(tokens) if tokens is not None else tokens_in_sizes(shape.sizes)


def tokens_in_label(label: str) -> int:
    """The token count a shape label names (``model[hidden_size=4096,num_tokens=512]``, ``T=8192,H=..``); 0 if none."""
    found = re.search(r"(?:num_tokens|tokens|\bT)=(\d+)", label)
    return int(found.group(1)) if found else 0


def bucket_for(tokens: int) -> str:
    return next(name for name, low, high in BUCKETS if low <= tokens <= high)


def bucket_of(timing: ShapeTiming) -> str:
    return bucket_for(tokens_of(timing))


def by_bucket(timings: Sequence[ShapeTiming]) -> dict[str, dict[str, float]]:
    """Per bucket present: its shapes, the range of time ÷ floor, the geomean speedup where timings carry one."""
    out: dict[str, dict[str, float]] = {}
    for name, _, _ in BUCKETS:
        rows = [t for t in timings if bucket_of(t) == name]
        if not rows:
            continue
        entry = {"shapes": float(len(rows))}
        floors = [t.time_over_floor for t in rows if t.floor_applies]
        if floors:  # absent: the op is not byte-bound, so the bucket has no floor figure (never no-go)
            entry |= {"time_over_floor_min": min(floors), "time_over_floor_max": max(floors)}
        speedup = geomean(t.speedup for t in rows if t.speedup)
        if speedup is not None:
            entry["speedup_geomean"] = speedup
        out[name] = {k: round(v, 4) for k, v in entry.items()}
    return out


def no_go(timings: Sequence[ShapeTiming], at_floor: float = AT_FLOOR) -> list[str]:
    """The buckets whose every shape is within ``at_floor`` of its floor (and has a floor: ratio > 0)."""
    return [
        name
        for name, figures in by_bucket(timings).items()
        if 0 < figures.get("time_over_floor_min", 0.0) and figures.get("time_over_floor_max", 0.0) <= at_floor
    ]


__all__ = [
    "AT_FLOOR",
    "BUCKETS",
    "bucket_for",
    "bucket_of",
    "by_bucket",
    "floor_text",
    "no_go",
    "tokens_in_label",
    "tokens_in_sizes",
    "tokens_of",
]
