"""Run-wide budgets of the optimize loop (tokens, dollars, wall and GPU seconds) and its round budget.

Why: a run may be stopped by any of its budgets, and a rerun of the same run must
resume from what earlier sessions spent, not from zero. :class:`Budget` is the
one place that knows the limits, what was spent, which limit ran out first and
how the user lifts it.

What must stay true:
- ``spent`` restores what the run's trajectories on disk recorded (a round killed
  halfway has no line, so its spend is not counted; its cached replies and stored
  evaluations replay free).
- A spent budget is a :class:`~pipeline.errors.BudgetExhausted` raised *before* a
  model call (the loop records the stop reason), never a half-written record.
- The wall budget is shared fairly among the ops of a serial run: each op may spend the
  wall seconds left divided by the ops left (:meth:`Budget.begin_share`), so one op's long
  search cannot leave the next ones nothing. A spent share ends that op's rounds (stop
  reason ``wall_share``, checked between populations like every budget) and hands what it
  did not use to the ops after it; it is not a run-wide stop. Why: on the H200
  (2026-12-05) ``kernelsmith run`` spent its 300 s on silu_and_mul's one round (18
  candidates, 288 s), so fused_add_rmsnorm had no round and rmsnorm was skipped.
- Every op gets its first population (only a run-wide budget stops it), and after that a
  population starts only if it is expected to end inside the op's share (the last op: inside
  the run's budget), the expectation being as long as the op's last population
  (:meth:`Budget.note_population`). Why: checked only between populations, a share was
  overrun by a whole population: on an H100 (2026-12-05) fused_add_rmsnorm's second
  population took the seconds rmsnorm needed, and rmsnorm got no round (301 of 300 s).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Literal

from pipeline.buckets import AT_FLOOR
from pipeline.config import Config
from pipeline.errors import BudgetExhausted

StopReason = Literal[
    "rounds", "tokens", "dollars", "wall_time", "gpu_time", "wall_share", "no_options", "converged", "at_floor"
]
#: Run-wide budgets: one spent stops every op after it.
BUDGETS: tuple[StopReason, ...] = ("tokens", "dollars", "wall_time", "gpu_time")
#: Stops because an op's work is done, not because anything ran out (reported as a normal end).
FINISHED: tuple[StopReason, ...] = ("no_options", "converged", "at_floor")


class Budget:
    """Run-wide budgets (tokens, dollars, wall, GPU) and the per-op round budget.

    Implements :class:`optimize.llm.client.SpendGate`. ``spent`` restores what
    earlier sessions of the same run recorded on disk.
    """

    def __init__(
        self, config: Config, *, spent: Mapping[str, float] | None = None, clock: Callable[[], float] = time.monotonic
    ):
        self.limits = config.budget
        spent = dict(spent or {})
        self.tokens = int(spent.get("tokens", 0))
        self.cost_usd = float(spent.get("cost_usd", 0.0))
        self.gpu_s = float(spent.get("gpu_s", 0.0))
        self.wall_before_s = float(spent.get("wall_s", 0.0))
        self.clock = clock
        self.start = clock()
        self._lock = threading.Lock()  # ops running at once (optimize.scale.ops) charge one budget
        self.share_from_s: float | None = None  # wall_s when the current op's share began (None: no share)
        self.share_s = 0.0
        self.populations = 0  # measured by the current op since its share began
        self.population_s = 0.0  # wall seconds the current op's last population took

    @property
    def wall_s(self) -> float:
        return self.wall_before_s + (self.clock() - self.start)

    def exhausted(self) -> StopReason | None:
        """The first run-wide budget that is spent, if any."""
        if self.tokens >= self.limits.tokens:
            return "tokens"
        if self.cost_usd >= self.limits.dollars_usd:
            return "dollars"
        if self.wall_s >= self.limits.wall_s:
            return "wall_time"
        if self.gpu_s >= self.limits.gpu_s:
            return "gpu_time"
        return None

    def begin_share(self, ops_left: int) -> None:
        """The op starting now may spend the wall seconds left over ``ops_left`` (itself included).
        The last op (``ops_left`` 1) has the rest of the run's budget, which :meth:`exhausted` guards."""
        self.share_from_s = self.wall_s if ops_left > 1 else None
        self.share_s = max(0.0, self.limits.wall_s - self.wall_s) / max(ops_left, 1)
        self.populations, self.population_s = 0, 0.0

    def note_population(self, seconds: float) -> None:
        """The current op measured a population in ``seconds`` of wall time (what the next is expected to take)."""
        self.populations += 1
        self.population_s = max(0.0, float(seconds))

    def share_end_s(self) -> float:
        """The wall second the current op's share ends at (the run's budget for the last op)."""
        return self.share_from_s + self.share_s if self.share_from_s is not None else self.limits.wall_s

    def share_spent(self) -> bool:
        """After the op's first population: its share is spent, or the next population is expected to end past it."""
        return self.populations > 0 and self.wall_s + self.population_s >= self.share_end_s()

    def stop(self) -> StopReason | None:
        """Why no more GPU work may start for the current op: a run-wide budget, else its wall share."""
        return self.exhausted() or ("wall_share" if self.share_spent() else None)

    def message(self, reason: str) -> str:
        return {
            "tokens": f"token budget spent ({self.tokens} of {self.limits.tokens})",
            "dollars": f"dollar budget spent (${self.cost_usd:.4f} of ${self.limits.dollars_usd:g})",
            "wall_time": f"wall-time budget spent ({self.wall_s:.0f} of {self.limits.wall_s:g} s)",
            "gpu_time": f"GPU-time budget spent ({self.gpu_s:.0f} of {self.limits.gpu_s:g} s)",
            "wall_share": f"its share of the run's {self.limits.wall_s:g} s wall budget is spent (the seconds "
            f"left when it began, over the ops left), or its next population (about {self.population_s:.0f} s, as "
            "long as its last) would end past it, so the ops after it have their turn",
            "rounds": f"round budget reached ({self.limits.rounds} rounds per op)",
            "no_options": "the policy has no untried applicable skill left",
            "at_floor": f"every token bucket of the best runs within {AT_FLOOR:g}x of its floor: "
            "no round is worth its GPU time",
            "converged": "the last search round found nothing faster around the best (the next would search the same space)",
        }.get(reason, reason)

    def fix(self, reason: str) -> str:
        return {
            "tokens": "raise budget.tokens (KERNELSMITH_BUDGET__TOKENS) and rerun the same --run to continue",
            "dollars": "raise budget.dollars_usd and rerun the same --run to continue",
            "wall_time": "raise budget.wall_s and rerun the same --run to continue",
            "gpu_time": "raise budget.gpu_s and rerun the same --run to continue",
            "wall_share": "rerun the same --run to continue this op, or raise budget.wall_s",
            "rounds": "pass a larger --rounds with the same --run to continue",
        }.get(reason, "")

    # SpendGate
    def before_model_call(self) -> None:
        reason = self.exhausted()
        if reason is not None:
            raise BudgetExhausted(self.message(reason), fix=self.fix(reason), where=reason)

    def charge_model(self, tokens: int, cost_usd: float) -> None:
        with self._lock:
            self.tokens += int(tokens)
            self.cost_usd += float(cost_usd)

    def charge_gpu(self, seconds: float) -> None:
        with self._lock:
            self.gpu_s += float(seconds)
