"""One lane per local GPU, fed from one queue of units.

Each lane is a thread of the driver that takes the next unit, runs it with its workers
pinned to the lane's GPU (:func:`optimize.scale.units.run_here`: ``CUDA_VISIBLE_DEVICES``
set for every worker it starts) and hands back the result. The lanes' builds share the
host's cores: while the pool is open, at most ``build_slots`` compiler processes run at
once in the whole process (:func:`pipeline.build.shared_compilers`), however many lanes build.

What must stay true:
- a unit that raises or whose lane fails is that unit's result (``Lost``); the lane
  goes on with the next unit and every other result is kept;
- a lane whose GPU is gone (the unit raised :class:`~optimize.errors.GpuRequired`) gives
  its unit back to the queue and stops, while another lane is still running; the last
  lane's GPU error is the unit's result, so a machine without any GPU still says so;
- closing cancels the units not started; the ones running finish in their own worker
  deadlines (the lanes are daemon threads, so an interrupted command does not wait on them).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from types import TracebackType

from optimize.errors import GpuRequired
from optimize.scale.units import Lost, Raised, Result, Unit, run_here


class LocalPool:
    """Lanes over local GPUs (``devices``: their ``CUDA_VISIBLE_DEVICES`` entries)."""

    kind = "local"

    def __init__(self, devices: Sequence[str], *, build_slots: int) -> None:
        from pipeline.build import shared_compilers

        if not devices:
            raise ValueError("a local pool needs at least one device")
        self.devices = list(devices)
        self.ran: list[tuple[str, str]] = []  # (unit key, device), in the order the units finished
        self._queue: queue.Queue[tuple[Unit, Future[Result]] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._alive = len(self.devices)
        self._compilers = contextlib.ExitStack()
        self._compilers.enter_context(shared_compilers(build_slots))
        self._threads = [
            threading.Thread(target=self._lane, args=(device,), name=f"kernelsmith-gpu{device}", daemon=True)
            for device in self.devices
        ]
        for thread in self._threads:
            thread.start()

    def describe(self) -> str:
        return f"{len(self.devices)} local GPUs ({', '.join(self.devices)}), one lane each"

    def submit(self, unit: Unit) -> Future[Result]:
        future: Future[Result] = Future()
        self._queue.put((unit, future))
        return future

    def _lane(self, device: str) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            unit, future = item
            if future.cancelled():
                continue
            try:
                result: Result = run_here(unit, device)
            except BaseException as err:  # noqa: BLE001 - SystemExit and the like: this unit is lost, the lane goes on
                result = Lost(unit.key, device, f"{type(err).__name__}: {err}")
            if isinstance(result, Raised) and isinstance(result.error, GpuRequired) and self._retire():
                self._queue.put(item)  # another lane runs it; this GPU is gone
                return
            with self._lock:
                self.ran.append((unit.key, result.device))
            future.set_result(result)

    def _retire(self) -> bool:
        """Stop this lane if another is still running (True), else keep it (the last one reports)."""
        with self._lock:
            if self._alive <= 1:
                return False
            self._alive -= 1
            return True

    def close(self, *, wait: bool = True) -> None:
        """Cancel what has not started, stop the lanes; ``wait`` joins them (not on an interrupt)."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[1].cancel()
        for _ in self._threads:
            self._queue.put(None)
        if wait:
            for thread in self._threads:
                thread.join()
        self._compilers.close()

    def __enter__(self) -> LocalPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close(wait=kind is None)


__all__ = ["LocalPool"]
