"""The registry of the mechanical transforms: every member's ``SPECS``, in the order they apply.

:data:`TRANSFORMS` is the registry the skill files name; each entry also knows how
to turn a skill's parameter grid into concrete parameter sets for given
:class:`~optimize.features.Features` (``targets``). A transform is defined once, in its member
module (its edit, targets and spec together); the order in which a composed point applies them is
:data:`MEMBERS`' order, written here once (``search.space.ORDER`` reads it), and a test fails
when a member module of the package is not in it.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

from optimize.features import Features
from optimize.transforms import (
    carried_divmod,
    fast_math,
    grid,
    knobs,
    pdl,
    size_dispatch,
    streaming,
    triton_block_size,
    triton_coarsen,
    triton_kernel,
    triton_launch_option,
    unroll,
)
from optimize.transforms.edits import Edit, NotApplicable, TransformError, apply_edits
from optimize.transforms.spec import TransformSpec

#: The members, in the order a composed point applies their transforms (each member's ``SPECS`` in
#: its own order): PDL first (the early trigger moves the trigger PDL placed), constants before the
#: attributes that depend on them, the grid cap, the carried divisions before the unroll pragma (a
#: pragma must stay next to its loop, and the carries are declared above the loop), the size switch,
#: the hinted accesses before fast math (both rename callees; fast math, anywhere, last); then
#: Triton's (one task never mixes them with the CUDA ones): the kernel's, the block size, program
#: coarsening, then the launch options.
MEMBERS: tuple[ModuleType, ...] = (
    pdl,
    knobs,
    grid,
    carried_divmod,
    unroll,
    size_dispatch,
    streaming,
    fast_math,
    triton_kernel,
    triton_block_size,
    triton_coarsen,
    triton_launch_option,
)

TRANSFORMS: dict[str, TransformSpec] = {spec.name: spec for member in MEMBERS for spec in member.SPECS}


def apply(name: str, regions: Mapping[str, str], params: Mapping[str, Any]) -> dict[str, str]:
    """Run transform ``name`` with ``params`` (selector keys are ignored)."""
    spec = TRANSFORMS.get(name)
    if spec is None:
        raise TransformError(f"unknown transform {name!r}; known: {sorted(TRANSFORMS)}")
    call = {k: v for k, v in params.items() if k not in spec.selectors}
    unknown = sorted(set(call) - set(spec.params))
    if unknown:
        raise TransformError(f"{name}: unknown parameters {unknown}; it takes {sorted(spec.params)}")
    return spec.fn(regions, **call)


def expand_targets(name: str, features: Features, grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Concrete parameter sets for transform ``name`` on ``features``, over a skill's grid.

    The grid's keys are the transform's parameters or selectors; each grid point
    is handed to the transform's target finder, which binds what the code decides
    (which constant, which kernel, its block size) and drops points that do not
    apply. The result is deduplicated and in a stable order.
    """
    spec = TRANSFORMS[name]
    keys = sorted(grid)
    points = [dict(zip(keys, combo)) for combo in itertools.product(*(list(grid[k]) for k in keys))] or [{}]
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for point in points:
        for params in spec.targets(features, point):
            key = repr(sorted(params.items(), key=lambda kv: kv[0]))
            if key not in seen:
                seen.add(key)
                out.append(params)
    return out


__all__ = [
    "MEMBERS",
    "TRANSFORMS",
    "Edit",
    "NotApplicable",
    "TransformError",
    "TransformSpec",
    "apply",
    "apply_edits",
    "expand_targets",
]
