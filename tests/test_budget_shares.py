"""optimize.budget: how the run's wall seconds are shared among ops, population by population."""

from __future__ import annotations

from optimize.budget import Budget
from pipeline.config import Config


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def budget(wall_s: float) -> tuple[Budget, Clock]:
    clock = Clock()
    return Budget(Config.model_validate({"budget": {"wall_s": wall_s}}), clock=clock), clock


def test_an_op_gets_its_first_population_even_past_its_share():
    # 300 s over three ops: 100 s each; the baseline and its profile took 120 s of it
    b, clock = budget(300.0)
    b.begin_share(3)
    clock.now_s = 120.0
    assert b.stop() is None, "no population yet: only a run-wide budget stops the first"
    b.note_population(50.0)
    clock.now_s = 170.0
    assert b.stop() == "wall_share"


def test_a_population_expected_to_end_past_the_share_does_not_start():
    b, clock = budget(300.0)
    b.begin_share(3)  # 0 .. 100 s
    clock.now_s = 40.0
    b.note_population(30.0)
    assert b.stop() is None, "40 + 30 ends inside 100"
    clock.now_s = 75.0
    b.note_population(35.0)
    assert b.stop() == "wall_share", "75 + 35 would end at 110, past the share"
    assert "about 35 s" in b.message("wall_share")
    # the next op's share is what is left over the ops left, and it starts with no population
    b.begin_share(2)
    assert b.share_end_s() == 75.0 + (300.0 - 75.0) / 2 and b.stop() is None


def test_the_last_op_is_held_to_the_run_budget_and_a_run_wide_stop_wins():
    b, clock = budget(300.0)
    clock.now_s = 200.0
    b.begin_share(1)
    assert b.share_end_s() == 300.0 and b.stop() is None
    b.note_population(60.0)
    clock.now_s = 250.0
    assert b.stop() == "wall_share", "250 + 60 would end past the run's 300 s"
    clock.now_s = 300.0
    assert b.stop() == "wall_time"
