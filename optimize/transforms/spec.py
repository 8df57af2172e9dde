"""What a registered transform is: its edit, its parameters, where it applies, and how a search varies it.

Each member module of :mod:`optimize.transforms` ends with ``SPECS``, the transforms it defines
in the order they apply; :mod:`optimize.transforms.registry` puts the members in order and
collects them. A spec's ``targets`` turns one point of a skill's grid into the concrete parameter
sets for this code (which constant, which kernel, which switch), from the
:class:`~optimize.features.Features` the planner saw, so a transform is planned only where its edit
finds something to do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from optimize.features import Features

#: one point of a skill's grid, or one concrete parameter set of a transform
Params = dict[str, Any]
#: a spec's target finder: (the code's features, a grid point) -> the parameter sets that apply
Targets = Callable[[Features, Params], list[Params]]


@dataclass(frozen=True)
class TransformSpec:
    name: str
    fn: Callable[..., dict[str, str]]
    params: dict[str, str]  # parameter -> meaning
    selectors: tuple[str, ...]  # grid keys that choose targets and are not passed to fn
    targets: Targets
    summary: str
    # the parameters that choose *how* (a value, a factor); the others name *what* (a constant,
    # a kernel): a search makes one dimension per transform and target, its values the choices
    choice: tuple[str, ...] = ()
    # its gain is launch overlap with the kernels around it (PDL), which a kernel replayed after
    # itself misstates: a candidate made only of such transforms is judged on its in-context figure
    overlap: bool = False


def no_targets(features: Features, point: Params) -> list[Params]:
    """None from a CUDA region's features: a Triton task's targets come from its record
    (:mod:`optimize.search.triton_space`)."""
    return []


__all__ = ["Params", "Targets", "TransformSpec", "no_targets"]
