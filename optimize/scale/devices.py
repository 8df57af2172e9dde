"""Which local GPUs the lanes run on: ``scale.gpus`` (``--gpus 0,2``), default every visible one.

A lane is named by the ``CUDA_VISIBLE_DEVICES`` entry its workers get
(:func:`pipeline.gpu.visible_gpus`), so an environment that already narrows the view is honoured.

What must stay true: an ordinal the machine does not show is an error naming the ones it
does (never a lane that silently shares another's GPU); a simulated backend (replay) runs
no kernel, so there the ordinals given are lanes as they are (how the CPU tests spread work).
"""

from __future__ import annotations

from collections.abc import Sequence

from optimize.scale.errors import UnknownGpu
from pipeline.config import Config


def lanes(config: Config, *, simulated: bool = False, visible: Sequence[str] | None = None) -> list[str]:
    """The ``CUDA_VISIBLE_DEVICES`` entry of each lane, in order; empty: no GPU (and none asked for)."""
    asked = list(config.scale.gpus)
    if simulated:
        return [str(g) for g in asked]
    if visible is None:
        from pipeline.gpu import visible_gpus

        visible = visible_gpus()
    shown = list(visible)
    if not asked:
        return shown
    unknown = [g for g in asked if g >= len(shown)]
    if unknown:
        have = f"ordinals 0..{len(shown) - 1}" if shown else "no GPU"
        raise UnknownGpu(
            f"--gpus names GPU {', '.join(map(str, unknown))}, and this machine shows {have}",
            fix=f"pass ordinals below {len(shown)} (e.g. --gpus 0), or leave --gpus out to use every visible GPU"
            if shown
            else "run on a GPU machine, or leave --gpus out",
        )
    return [shown[g] for g in asked]


__all__ = ["lanes"]
