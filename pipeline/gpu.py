"""Is there a CUDA GPU here? The one question every stage asks before GPU work.

It lives on the ground floor so that :mod:`cli.run` and any stage can ask
without importing a higher floor. torch is imported only when installed, and
only inside the call: importing this module never loads torch.
"""

from __future__ import annotations

import importlib.util


def gpu_available() -> tuple[bool, str]:
    """(True, device name) when torch sees a CUDA device here, else (False, why not)."""
    if importlib.util.find_spec("torch") is None:
        return False, "torch is not installed"
    import torch

    if not torch.cuda.is_available():
        return False, "torch sees no CUDA device"
    return True, torch.cuda.get_device_name(0)


def visible_gpus(environ: dict[str, str] | None = None) -> list[str]:
    """The GPUs a worker started from here could be pinned to, as ``CUDA_VISIBLE_DEVICES`` entries.

    Ordinal ``i`` of this process's view is entry ``i`` of the list: where the environment already
    narrows the view (``CUDA_VISIBLE_DEVICES=2,3``) the entries are its own (``["2", "3"]``), so
    pinning a worker to ordinal 1 keeps it on physical GPU 3. Empty without torch or without a GPU.
    """
    import os

    if importlib.util.find_spec("torch") is None:
        return []
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    given = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    if given is None or not given.strip():
        return [str(i) for i in range(count)]
    return [part.strip() for part in given.split(",") if part.strip()][:count]
