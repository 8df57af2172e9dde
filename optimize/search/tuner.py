"""Kernel Tuner's search strategies over a :class:`~optimize.search.space.Space`, a population at a time.

Why Kernel Tuner: its strategies (brute force, genetic algorithm, iterated local
search, random sampling, ...) are well tested and well documented; we supply the
space and a way to measure, not a search algorithm of our own. Kernel Tuner normally
compiles and times a kernel itself; here its strategies are driven directly with a
runner (:class:`BatchRunner`) that hands each batch the strategy asks for (the
genetic algorithm's generation, brute force's whole space) to ``measure`` at once,
so a batch becomes one population: built in parallel, timed in one worker.

The objective is ``cost`` = 1 / (geometric-mean speedup over the baseline), lower
is better; a point that failed (does not compose, does not build, is wrong, crashes)
is Kernel Tuner's ``RuntimeFailedConfig``; a point the budget left unmeasured is
``None``, which makes Kernel Tuner stop.

What must stay true: the same space, seed and measurements give the same points in
the same order (Python's and NumPy's global random states are seeded for the
search and restored after it); ``measure`` sees each point once per search.
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Protocol, SupportsInt, cast

from optimize.errors import SearchError
from optimize.search.space import Space

if TYPE_CHECKING:  # Kernel Tuner ships no type information: these name what is passed; mypy sees them untyped
    from kernel_tuner.interface import Options as TuningOptions
    from kernel_tuner.runners.runner import Runner
    from kernel_tuner.searchspace import Searchspace
    from kernel_tuner.util import RuntimeFailedConfig

#: The strategy ``auto`` picks for a space too large to walk: it evaluates a population per
#: generation, which is what a round builds and times at once.
SAMPLING_STRATEGY = "genetic_algorithm"

Point = dict[str, int]
#: A measured point as Kernel Tuner's runner returns it: the point's values, then ``time`` (the cost)
#: or ``__error__`` (a failed point)
Result = dict[str, "int | float | RuntimeFailedConfig"]
#: measure(points) -> one entry per point: its cost, "failed", or None (not measured: budget spent)
Measure = Callable[[Sequence[Point]], list[float | str | None]]


@dataclass(frozen=True)
class Trial:
    point: Point
    cost: float | None  # None: failed


def choose_strategy(requested: str, size: int, max_evals: int) -> str:
    """``auto``: walk every point when the space of ``size`` valid points (less its base) fits
    the round's evaluations, else sample."""
    if requested != "auto":
        return requested
    return "brute_force" if size - 1 <= max_evals else SAMPLING_STRATEGY


def check_strategy(requested: str) -> None:
    """Refuse an unknown ``search.strategy`` before any work starts (``auto``, ``off`` or a Kernel Tuner
    strategy); an unknown one found inside round 1 left a run folder of built candidates behind."""
    if requested in ("auto", "off"):
        return
    strategy_map = _kernel_tuner()[2]
    if requested not in strategy_map:
        raise SearchError(
            f"unknown search strategy {requested!r}",
            fix=f"pass --search auto, off or one of: {', '.join(sorted(strategy_map))}",
        )


class Strategy(Protocol):
    """A Kernel Tuner strategy (a module of ``interface.strategy_map``, loaded when first used)."""

    def tune(self, searchspace: Searchspace, runner: Runner, tuning_options: TuningOptions) -> object: ...


def _kernel_tuner() -> tuple[ModuleType, type[TuningOptions], Mapping[str, Strategy], type[Runner], type[Searchspace]]:
    """Kernel Tuner's ``util`` module, ``Options``, its strategies by name, ``Runner`` and ``Searchspace``."""
    try:
        from kernel_tuner import util
        from kernel_tuner.interface import Options, strategy_map
        from kernel_tuner.runners.runner import Runner
        from kernel_tuner.searchspace import Searchspace
    except ImportError as err:
        raise SearchError(
            f"Kernel Tuner is not installed here ({err})",
            fix="install it (`pip install kernel_tuner`; on the GPU machine carry its wheels, `make device-wheels`)"
            " or set search.strategy = 'off'",
        ) from err
    return util, Options, strategy_map, Runner, Searchspace


def run_search(
    space: Space,
    measure: Measure,
    *,
    strategy: str,
    population: int,
    max_evals: int,
    seed: int,
    valid: Callable[[Point], bool] | None = None,
    x0: Point | None = None,
) -> tuple[str, list[Trial], list[int]]:
    """Search ``space``; returns (the strategy used, every trial in order, the size of each batch measured).

    ``valid``: whether a point can be made at all (its transforms compose), given to Kernel
    Tuner as the space's restriction, so a population is never spent on points that cannot be
    built (the H200, 2026-12-02: 10 of fused_add_rmsnorm's 32 draws did not compose, and its
    populations of 16 built 8 candidates each).

    ``x0``: a point the genetic algorithm puts in its first population (it must be valid).
    """
    util, Options, strategy_map, Runner, Searchspace = _kernel_tuner()
    tune_params = space.tune_params()
    keys = list(tune_params)
    restrictions = None
    if valid is not None:

        def allowed(*values: SupportsInt | Mapping[str, SupportsInt]) -> bool:
            """Kernel Tuner's restriction: one dict of a point (several dimensions), else the one value."""
            point = (
                values[0]
                if len(values) == 1 and isinstance(values[0], dict)
                else dict(zip(keys, cast("tuple[SupportsInt, ...]", values)))  # values, one per dimension
            )
            return valid({k: int(v) for k, v in point.items()})

        restrictions = [allowed]  # a plain function: Kernel Tuner rewrites lambdas into expressions
    searchspace = Searchspace(tune_params, restrictions, 1024)
    name = choose_strategy(strategy, searchspace.size, max_evals)
    if name not in strategy_map:
        raise SearchError(
            f"unknown search strategy {name!r}",
            fix=f"set search.strategy to 'auto', 'off' or one of: {', '.join(sorted(strategy_map))}",
        )
    trials: list[Trial] = []
    batches: list[int] = []

    class BatchRunner(Runner):  # type: ignore[misc, valid-type]
        def get_device_info(self) -> None:
            return None

        def get_environment(self, tuning_options: TuningOptions) -> dict[str, object]:
            return {}

        def run(
            self, parameter_space: Iterable[Sequence[SupportsInt]], tuning_options: TuningOptions
        ) -> list[Result | None]:
            wanted: list[tuple[int, Point]] = []
            results: list[Result | None] = []
            for element in parameter_space:
                if tuning_options.budget.is_done():
                    results.append(None)
                    continue
                tuning_options.budget.add_evaluations(1)
                point = {k: int(v) for k, v in zip(keys, element)}
                wanted.append((len(results), point))
                results.append(dict(point))
            if wanted:
                batches.append(len(wanted))
                with _measuring():  # other ops' searches may draw meanwhile (optimize.scale.ops)
                    costs = measure([p for _, p in wanted])
                for (index, point), cost in zip(wanted, costs):
                    row = results[index]
                    assert row is not None
                    if cost is None:
                        results[index] = None
                    elif isinstance(cost, str):
                        row["__error__"] = util.RuntimeFailedConfig()
                        trials.append(Trial(point, None))
                    else:
                        row["time"] = float(cost)
                        trials.append(Trial(point, float(cost)))
            return results

    options: dict[str, int | float | list[int]] = {}
    if name == "genetic_algorithm":
        options = {"popsize": population, "maxiter": max(1, max_evals // max(1, population) + 1)}
        if x0 is not None:
            options["x0"] = [int(x0.get(k, 0)) for k in keys]
    elif name == "random_sample":
        options = {"fraction": min(1.0, max_evals / max(1, searchspace.size))}
    if searchspace.size <= 1:  # the base alone: nothing to search
        return name, trials, batches
    tuning = Options(
        objective=["time"],
        objective_higher_is_better=[False],
        verbose=False,
        strategy_options=Options(options),
        budget=util.TuningBudget(None, min(max_evals, searchspace.size)),
        tune_params=tune_params,
    )
    with _seeded(seed):
        try:
            strategy_map[name].tune(searchspace, BatchRunner(), tuning)
        except util.StopCriterionReached:
            pass
    return name, trials, batches


#: Held by the search that owns the global random states. Ops searched at once in threads
#: (optimize.scale.ops) take turns: a search gives the states up only while its batch is measured,
#: and gets its own back after, so each draws the sequence its seed gives, as in a serial run.
_RANDOM_STATES = threading.Lock()


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Python's and NumPy's global random states seeded (Kernel Tuner's strategies draw from both), then restored."""
    import numpy

    with _RANDOM_STATES:
        saved_py, saved_np = random.getstate(), numpy.random.get_state()
        random.seed(seed)
        numpy.random.seed(seed % (2**32))
        try:
            yield
        finally:
            random.setstate(saved_py)
            numpy.random.set_state(saved_np)


@contextlib.contextmanager
def _measuring() -> Iterator[None]:
    """Inside :func:`_seeded`: the random states given up while a batch is measured, then this search's back."""
    import numpy

    mine_py, mine_np = random.getstate(), numpy.random.get_state()
    _RANDOM_STATES.release()
    try:
        yield
    finally:
        _RANDOM_STATES.acquire()
        random.setstate(mine_py)
        numpy.random.set_state(mine_np)


__all__ = [
    "Measure",
    "Point",
    "SAMPLING_STRATEGY",
    "SearchError",
    "Trial",
    "check_strategy",
    "choose_strategy",
    "run_search",
]
