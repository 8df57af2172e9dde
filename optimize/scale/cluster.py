"""The same units as Ray tasks with ``num_gpus=1`` (``--ray ADDRESS``, ``scale.ray_address``).

Ray, not a scheduler of our own, places the units on a cluster's GPUs: each task gets one
GPU (Ray sets ``CUDA_VISIBLE_DEVICES`` for it), runs the unit whole there
(:func:`optimize.scale.units.run_shipped`) and returns the result to the driver, with the
build-cache entries it made on a host that lacked the driver's folders, which the driver
adopts into its own cache. ``local`` starts (or joins) a cluster on this machine, which is
what the tests use, with GPUs declared. Every node runs the units with its own install of
kernelsmith (the same commit as the driver's: units name its functions) and its own toolchain.

What must stay true:
- without the ``ray`` package, ``--ray`` is one line saying how to install it (``.[scale]``);
- an address that does not answer is found by a TCP check bounded by
  ``scale.ray_connect_timeout_s`` before Ray is asked to connect (Ray itself retries for
  minutes); a cluster with no GPU is refused, not waited on;
- a task whose worker process dies, or that raises what is not ours, is that unit's ``Lost``
  (``max_retries=0``: a kernel that kills its worker is not run again on another GPU).
"""

from __future__ import annotations

import importlib
import socket
import threading
from concurrent.futures import Future
from types import ModuleType, TracebackType
from typing import Any

from optimize.scale.errors import ClusterUnreachable, RayMissing
from optimize.scale.units import Done, Lost, Result, Unit, adopt_builds, run_shipped, task_files

LOCAL = "local"


def import_ray() -> ModuleType:
    """The ``ray`` module, or :class:`RayMissing` with the install line."""
    try:
        return importlib.import_module("ray")
    except ImportError as err:
        raise RayMissing(
            f"--ray needs the ray package, which is not installed here ({err})",
            fix="pip install -e '.[scale]' (ray[default]), or leave --ray out to run on this host's GPUs",
        ) from err


def host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a ``HOST:PORT`` or ``ray://HOST:PORT`` address; None for ``auto``/``local``."""
    if address in ("auto", LOCAL):
        return None
    bare = address.removeprefix("ray://")
    host, sep, port = bare.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ClusterUnreachable(
            f"Ray address {address!r} is not HOST:PORT, ray://HOST:PORT, auto or local",
            fix="pass --ray HOST:6379 (the head node's GCS port), ray://HOST:10001 or local",
        )
    return host.strip("[]"), int(port)


def check_reachable(address: str, timeout_s: float) -> None:
    """A TCP connection to the address's port within ``timeout_s``, else :class:`ClusterUnreachable`."""
    target = host_port(address)
    if target is None:
        return
    try:
        with socket.create_connection(target, timeout=timeout_s):
            return
    except OSError as err:
        raise ClusterUnreachable(
            f"the Ray cluster at {address} does not answer within {timeout_s:g} s ({err})",
            fix="start it (`ray start --head` on the head node), check the address and port, "
            "or leave --ray out to run on this host's GPUs",
        ) from err


class RayPool:
    """Units as Ray tasks; ``devices`` has one name per GPU the cluster declares."""

    kind = "ray"

    def __init__(self, address: str, *, connect_timeout_s: float) -> None:
        ray = import_ray()
        self.address = address
        if not ray.is_initialized():
            check_reachable(address, connect_timeout_s)
            try:
                ray.init(address=None if address == LOCAL else address, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as err:
                raise ClusterUnreachable(
                    f"Ray could not join the cluster at {address}: {str(err).splitlines()[0] if str(err) else err}",
                    fix="check that the address is the head node's and that its Ray version is this one's",
                ) from err
        gpus = int(ray.cluster_resources().get("GPU", 0))
        if gpus < 1:
            raise ClusterUnreachable(
                f"the Ray cluster at {address} declares no GPU, so no unit (num_gpus=1) could start",
                fix="add GPU nodes (`ray start --address ... --num-gpus N`), or leave --ray out",
            )
        self.devices = [f"ray{i}" for i in range(gpus)]
        self.ran: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._ray = ray
        self._remote = ray.remote(num_gpus=1, max_retries=0)(run_shipped)

    def describe(self) -> str:
        return f"Ray cluster at {self.address}: {len(self.devices)} GPUs, one task (num_gpus=1) per unit"

    def submit(self, unit: Unit) -> Future[Result]:
        outer: Future[Result] = Future()
        inner = self._remote.remote(unit, task_files(unit.task_dir)).future()

        def landed(done: Future[Any]) -> None:
            result: Result
            try:
                result = done.result()
                if isinstance(result, Done) and result.builds:
                    adopt_builds(unit.config.cache, result.builds)
                    result = Done(result.key, result.value, result.device, result.seconds)
            except Exception as error:  # noqa: BLE001 - a dead worker, a task Ray could not run: this unit alone
                text = str(error).strip().splitlines()
                result = Lost(unit.key, "ray", f"{type(error).__name__}: {text[-1][:300] if text else ''}")
            with self._lock:
                self.ran.append((unit.key, result.device))
            outer.set_result(result)

        inner.add_done_callback(landed)
        return outer

    def close(self, *, wait: bool = True) -> None:
        """Leaves the cluster as it is (a cluster this command started on this machine ends with the process)."""

    def __enter__(self) -> RayPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close(wait=kind is None)


__all__ = ["LOCAL", "RayPool", "check_reachable", "host_port", "import_ray"]
