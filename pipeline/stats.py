"""The one geometric mean every figure uses (speedups, times, changes across batches)."""

from __future__ import annotations

import math
from collections.abc import Iterable


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of the positive values (zeros and missing figures are left out); None when none is."""
    vals = [v for v in values if v and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


__all__ = ["geomean"]
