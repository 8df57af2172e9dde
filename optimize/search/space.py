"""The search space of one round: dimensions found in the code, and the candidate a point stands for.

A dimension is one thing the code lets a transform change: a constant
(``tune_constant`` on ``kBlockSize`` of ``act_kernel``), a kernel's launch bounds,
PDL on the launches, the unroll of the loops. Its values are "keep" (index 0) and
each choice the policy proposed for it (a value, a min-blocks count). A point picks
one value per dimension; its candidate applies the chosen transforms to the base
regions in dimension order.

Where the dimensions come from: :func:`optimize.policy.plan`'s mechanical
proposals, so a search never tries what the policy would not (a rule that does not
hold, a pair that failed or was slower before). Two skills that drive one transform
on one target (``launch_bounds`` and ``occupancy_min_blocks`` both set a kernel's
``__launch_bounds__``) share its dimension: their choices exclude each other.

Composition: PDL is three choices (turn it on, place the wait as late as the data
allows, trigger dependents early); the later two have a target only once PDL is on, so
they are dimensions whenever PDL is.

What must stay true: pure (no I/O, no clock); the dimensions' order and values are
a function of the proposals alone, so a point names the same candidate every time.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optimize.policy import Decision
from optimize.transforms import registry as transforms
from pipeline.run_records import Step

#: Transforms applied in this order, whatever order the proposals came in: the registry's own
#: order (:data:`optimize.transforms.registry.TRANSFORMS` says why it is this one), written once.
ORDER = tuple(transforms.TRANSFORMS)

#: A transform whose target appears only after another one ran: (after, skill, transform, params).
FOLLOWERS: tuple[tuple[str, str, str, dict[str, Any]], ...] = (
    ("enable_pdl", "pdl_prologue_overlap", "pdl_late_wait", {}),
    ("enable_pdl", "pdl_early_trigger", "pdl_early_trigger", {}),
)


@dataclass(frozen=True)
class Choice:
    """One value of a dimension: a skill's transform with its parameters."""

    skill: str
    transform: str
    params: tuple[tuple[str, Any], ...]  # sorted items (hashable)

    @property
    def as_dict(self) -> dict[str, Any]:
        return dict(self.params)

    def label(self) -> str:
        spec = transforms.TRANSFORMS[self.transform]
        shown = {k: v for k, v in self.params if k in spec.choice}
        return f"{self.skill}{json.dumps(shown, sort_keys=True, default=str) if shown else ''}"


@dataclass(frozen=True)
class Dimension:
    """One transform on one target; value 0 keeps the base, value i applies ``choices[i - 1]``."""

    name: str
    transform: str
    choices: tuple[Choice, ...]

    @property
    def values(self) -> list[int]:
        return list(range(len(self.choices) + 1))


@dataclass(frozen=True)
class Space:
    dimensions: tuple[Dimension, ...]

    @property
    def size(self) -> int:
        """Points in the space, the base (every dimension kept) included."""
        return math.prod(len(d.choices) + 1 for d in self.dimensions) if self.dimensions else 0

    def tune_params(self) -> dict[str, list[int]]:
        """The space as Kernel Tuner's ``tune_params``: dimension name -> its value indices."""
        return {d.name: d.values for d in self.dimensions}

    def steps(self, point: Mapping[str, int]) -> list[Choice]:
        """The choices a point applies, in dimension order (kept dimensions left out)."""
        out = []
        for d in self.dimensions:
            index = int(point.get(d.name, 0))
            if not 0 <= index <= len(d.choices):
                raise ValueError(f"point {dict(point)}: {d.name} has values 0..{len(d.choices)}, not {index}")
            if index:
                out.append(d.choices[index - 1])
        return out

    def describe(self) -> str:
        parts = [f"{d.name} [{', '.join(c.label() for c in d.choices)}]" for d in self.dimensions]
        return f"{self.size} points over {len(self.dimensions)} dimensions: " + "; ".join(parts)


def _target(transform: str, params: Mapping[str, Any]) -> str:
    """What a transform's parameters aim at (its choice parameters left out), as a stable text."""
    spec = transforms.TRANSFORMS[transform]
    what = {k: v for k, v in params.items() if k not in spec.choice and k not in spec.selectors}
    return json.dumps(what, sort_keys=True, default=str) if what else ""


def build_space(decisions: Sequence[Decision], skills: Collection[str] = ()) -> Space:
    """The dimensions the proposals span (rejections and LLM-only proposals are ignored).

    ``skills``: the run's allowed skills (none: all); a follower whose skill is not among them
    is left out, so a run scoped with ``--skills`` never times a transform it did not name.
    """
    grouped: dict[tuple[str, str], list[Choice]] = {}
    for d in decisions:
        if not d.proposed or d.mode != "transform" or d.transform not in transforms.TRANSFORMS:
            continue
        choice = Choice(d.skill, d.transform, tuple(sorted(d.params.items())))
        key = (d.transform, _target(d.transform, d.params))
        if choice not in grouped.setdefault(key, []):
            grouped[key].append(choice)
    present = {transform for transform, _ in grouped}
    for after, skill, transform, params in FOLLOWERS:
        if after in present and transform not in present and (not skills or skill in skills):
            grouped[(transform, _target(transform, params))] = [Choice(skill, transform, tuple(sorted(params.items())))]
    dims = []
    for (transform, target), choices in sorted(grouped.items(), key=lambda kv: (ORDER.index(kv[0][0]), kv[0][1])):
        name = transform + (f" {target}" if target else "")
        dims.append(Dimension(name, transform, tuple(choices)))
    return Space(tuple(dims))


class Unrealizable(Exception):
    """A point whose transforms do not compose on this code (one finds nothing to do after another)."""


def _bounds_clash(chosen: Sequence[Choice]) -> str:
    """Why a block size and launch bounds chosen together cannot launch ("" when they can).

    ``__launch_bounds__(N)`` refuses a launch with more than N threads per block, so a
    point raising the block size above a bound it also sets would only fail on the GPU.
    """
    blocks = [int(c.as_dict["value"]) for c in chosen if c.skill == "tune_block_size" and "value" in c.as_dict]
    bounds = [
        int(c.as_dict["max_threads"])
        for c in chosen
        if c.transform == "set_launch_bounds" and isinstance(c.as_dict.get("max_threads"), int)
    ]
    if blocks and bounds and max(blocks) > min(bounds):
        return f"block size {max(blocks)} > launch bounds of {min(bounds)} threads: the launch would be refused"
    return ""


def realize(space: Space, point: Mapping[str, int], regions: Mapping[str, str]) -> tuple[dict[str, str], list[Step]]:
    """The regions of ``point``'s candidate and the steps that made them; :class:`Unrealizable` if they do not compose."""
    chosen = space.steps(point)
    clash = _bounds_clash(chosen)
    if clash:
        raise Unrealizable(clash)
    out = dict(regions)
    steps: list[Step] = []
    for choice in chosen:
        try:
            out = transforms.apply(choice.transform, out, choice.as_dict)
        except transforms.NotApplicable as err:
            raise Unrealizable(f"{choice.label()}: {err}") from err
        except transforms.TransformError as err:  # a bug of ours, recorded with the point, never fatal to a run
            raise Unrealizable(f"{choice.label()}: transform error (a kernelsmith bug, please report): {err}") from err
        steps.append(Step(skill=choice.skill, params=choice.as_dict))
    return out, steps


__all__ = ["Choice", "Dimension", "FOLLOWERS", "ORDER", "Space", "Unrealizable", "build_space", "realize"]
