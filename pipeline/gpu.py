"""Is there a CUDA GPU here? The one question every stage asks before GPU work.

It lives on the ground floor so that :mod:`pipeline.run` (and any stage) can ask
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
