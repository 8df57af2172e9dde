"""The one geometric mean every figure uses (speedups, times, changes across batches)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of the positive values (zeros and missing figures are left out); None when none is."""
    vals = [v for v in values if v and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def speedup_geomean(timings: Iterable[Any]) -> float | None:
    """Geometric mean of the speedups the timings carry (``ShapeTiming.speedup``); None when none does."""
    return geomean(t.speedup for t in timings if t.speedup is not None)


__all__ = ["geomean", "speedup_geomean"]
