"""Which pool a command gets: Ray (``--ray``), local lanes (two GPUs or more), or none (the serial path).

With one GPU, or none, :func:`open_pool` gives None and the command runs exactly as it
did before scale-out: one op after another, one worker at a time. :func:`map_units`
runs a list of units on a pool and keeps their order, telling the caller each result
as soon as it lands.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, as_completed
from typing import Protocol

from optimize.scale.units import Result, Unit
from pipeline.config import Config


class Pool(Protocol):
    kind: str
    devices: list[str]
    ran: list[tuple[str, str]]

    def describe(self) -> str: ...

    def submit(self, unit: Unit) -> Future[Result]: ...

    def close(self, *, wait: bool = True) -> None: ...


def open_pool(config: Config, *, simulated: bool = False) -> Pool | None:
    """The pool ``config.scale`` asks for; None where the serial path runs (one lane or fewer).

    ``simulated``: the backend runs no kernel (replay), so ``--gpus`` ordinals are lanes as
    given (:func:`optimize.scale.devices.lanes`).
    """
    if config.scale.ray_address:
        from optimize.scale.cluster import RayPool

        return RayPool(config.scale.ray_address, connect_timeout_s=config.scale.ray_connect_timeout_s)
    from optimize.scale.devices import lanes

    devices = lanes(config, simulated=simulated)
    if len(devices) <= 1:
        return None
    from optimize.scale.local import LocalPool

    return LocalPool(devices, build_slots=config.search.build_jobs)


def map_units(
    pool: Pool, units: Sequence[Unit], *, landed: Callable[[int, Result], None] | None = None
) -> list[Result]:
    """Every unit's result, in the units' order; ``landed(index, result)`` as each one finishes."""
    futures = [pool.submit(unit) for unit in units]
    index = {id(future): i for i, future in enumerate(futures)}
    for future in as_completed(futures):
        if landed is not None:
            landed(index[id(future)], future.result())
    return [future.result() for future in futures]


__all__ = ["Pool", "map_units", "open_pool"]
