"""Mechanical source transforms: small, exact edits a skill can make without an LLM.

Why: many optimizations are a one-token change once you know where the token is
(a block-size constant, a ``__launch_bounds__``, ``expf`` -> ``__expf``, PDL on).
Doing those mechanically makes the loop useful offline, makes its candidates
reproducible, and keeps LLM budget for the rewrites that need judgement.

Contract of every transform function ``fn(regions, **params) -> dict[str, str]``:
- ``regions`` maps span name -> region text (the baseline's or a candidate's).
  The result has the same keys; spans the transform does not touch are returned
  unchanged (the very same strings).
- Edits are byte-exact: only the intended bytes change (a literal's digits, an
  inserted attribute, a callee name). Everything else, whitespace and comments
  included, is kept. Each edited region must parse with no more tree-sitter
  problem nodes than before, else :class:`TransformError` (a bug here, not in the
  candidate).
- Nothing to do is :class:`NotApplicable` with the reason (the loop records the
  round as ``not_applicable``); bad parameters are :class:`TransformError`.
- Transforms locate code with tree-sitter through :class:`optimize.cuda_regions.Region`,
  so they agree with the features the policy planned from.

:data:`TRANSFORMS` is the registry the skill files name; each entry also knows how
to turn a skill's parameter grid into concrete parameter sets for given
:class:`~optimize.features.Features` (``targets``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optimize.dispatch_transforms import MAX_CASE, extend_size_dispatch
from optimize.divmod_transforms import incremental_divmod
from optimize.features import Features
from optimize.grid_transforms import cap_grid
from optimize.hint_transforms import WHICH, streaming_hints
from optimize.knob_transforms import add_pragma_unroll, set_launch_bounds, tune_constant
from optimize.math_transforms import FAST_MATH_OPS, fast_math
from optimize.pdl_transforms import enable_pdl, pdl_early_trigger, pdl_late_wait
from optimize.transform_edits import Edit, NotApplicable, TransformError, apply_edits
from optimize.triton_coarsen import coarsen_programs
from optimize.triton_transforms import autotune_pin, block_size, constexpr_default, launch_option

# --------------------------------------------------------------------------- registry and targets


@dataclass(frozen=True)
class TransformSpec:
    name: str
    fn: Callable[..., dict[str, str]]
    params: dict[str, str]  # parameter -> meaning
    selectors: tuple[str, ...]  # grid keys that choose targets and are not passed to fn
    targets: Callable[[Features, dict[str, Any]], list[dict[str, Any]]]
    summary: str
    # the parameters that choose *how* (a value, a factor); the others name *what* (a constant,
    # a kernel): a search makes one dimension per transform and target, its values the choices
    choice: tuple[str, ...] = ()
    # its gain is launch overlap with the kernels around it (PDL), which a kernel replayed after
    # itself misstates: a candidate made only of such transforms is judged on its in-context figure
    overlap: bool = False


def _tune_targets(features: Features, point: dict[str, Any]) -> list[dict[str, Any]]:
    role = point.get("role")
    value = point.get("value")
    out = []
    for c in features.constants:
        if role is not None and c.role != role or value is None or c.value == value:
            continue
        if c.role == "block_size":
            if not (isinstance(value, int) and value % 32 == 0 and 32 <= value <= 1024):
                continue
            # a kernel this owner launches with tighter launch bounds would refuse the launch
            bounds = [
                int(k.launch_bounds.split(",")[0])
                for l in features.launches
                if l.function.split("::")[0] == c.owner
                for k in features.kernels
                if k.name in l.kernels and k.launch_bounds and k.launch_bounds.split(",")[0].strip().isdigit()
            ]
            if bounds and value > min(bounds):
                continue
        out.append({"name": c.name, "owner": c.owner, "value": value})
    return out


def _launch_bounds_targets(features: Features, point: dict[str, Any]) -> list[dict[str, Any]]:
    min_blocks = int(point.get("min_blocks", 0))
    out = []
    for k in features.kernels:
        if not k.launched:
            continue
        if k.launch_bounds:
            parts = [p.strip() for p in k.launch_bounds.split(",")]
            if parts[1:] == ([str(min_blocks)] if min_blocks else []):
                continue
            first = parts[0]
            if min_blocks and first.isdigit() and int(first) * min_blocks > 2048:
                continue
            out.append({"kernel": k.name, "max_threads": None, "min_blocks": min_blocks})
            continue
        threads = k.block_size if k.block_size is not None else (1024 if k.block_size_runtime else None)
        if threads is None or (min_blocks and threads * min_blocks > 2048):
            continue
        out.append({"kernel": k.name, "max_threads": threads, "min_blocks": min_blocks})
    return out


def _fast_math_targets(features: Features, point: dict[str, Any]) -> list[dict[str, Any]]:
    ops = point.get("ops") or list(FAST_MATH_OPS)
    present = [op for op in ops if features.math_sites.get(op)]
    return [{"ops": present}] if present else []


def _enable_pdl_targets(features: Features, point: dict[str, Any]) -> list[dict[str, Any]]:
    if not any(l.pdl in ("off", "absent") for l in features.launches):
        return []
    per_sm = int(point.get("blocks_per_sm", 0))
    if not per_sm:
        return [{}]
    return [{"blocks_per_sm": per_sm, "in_kernel": True} if point.get("in_kernel") else {"blocks_per_sm": per_sm}]


def _early_trigger_targets(features: Features, point: dict[str, Any]) -> list[dict[str, Any]]:
    if not any(k.pdl_trigger_at_end and k.launched for k in features.kernels):
        return []
    per_sm = int(point.get("blocks_per_sm", 0))
    return [{"blocks_per_sm": per_sm} if per_sm else {}]


def _late_wait_targets(features: Features, point: dict[str, Any]) -> list[dict[str, Any]]:
    return [{}] if any(k.pdl_wait and k.launched for k in features.kernels) else []


def _unroll_targets(features: Features, point: dict[str, Any]) -> list[dict[str, Any]]:
    factor = int(point.get("factor", 0))
    runtime = bool(point.get("runtime_loops", False))
    if runtime:
        return [{"factor": factor, "runtime_loops": True}] if factor >= 2 and features.static.runtime_loops else []
    return [{"factor": factor, "runtime_loops": False}] if features.static.loops_missing_unroll else []


def _streaming_targets(features: Features, point: dict[str, Any]) -> list[dict[str, Any]]:
    what = str(point.get("what", "both"))
    return [{"what": what}] if features.static.typed_accesses and what in WHICH else []


def _cap_grid_targets(features: Features, point: dict[str, Any]) -> list[dict[str, Any]]:
    """A kernel that already strides by the grid, launched by a grid not yet sized to the machine
    (the transform checks each launch itself)."""
    if not features.static.grid_stride_loop or features.static.persistent_grid:
        return []
    return [{"waves": int(point.get("waves", 1))}]


def _divmod_targets(features: Features, point: dict[str, Any]) -> list[dict[str, Any]]:
    return [{}] if features.static.strided_divmod else []


def _dispatch_targets(features: Features, point: dict[str, Any]) -> list[dict[str, Any]]:
    """Per size switch, the next ``above`` powers of two past its largest case (as one choice). With
    the measured shapes known, only when the switched name is one of their sizes and each value is
    one it takes there (a case serves its value alone: no build goes to a size no shape has)."""
    above = int(point.get("above", 1))
    out = []
    for function, subject, top in features.size_switches:
        measured = set(features.measured_sizes.get(subject, ())) if features.measured_sizes else None
        values = [top << i for i in range(1, above + 1) if top << i <= MAX_CASE]
        if len(values) == above and (measured is None or set(values) <= measured):
            out.append({"function": function, "subject": subject, "values": values})
    return out


def _triton_targets(features: Features, point: dict[str, Any]) -> list[dict[str, Any]]:
    """None on a CUDA region: a Triton task's targets come from its record (:mod:`optimize.search.triton_space`)."""
    return []


_BUCKETED = {
    "bucket": "a token bucket of pipeline.buckets.BUCKETS ('' = every token count)",
    "tokens": "the wrapper's expression of the token count (with bucket)",
}

#: The registry, in the order a composed point applies its transforms (``search.space.ORDER`` is
#: this order): PDL first (the early trigger moves the trigger PDL placed), constants before the
#: attributes that depend on them, the carried divisions before the unroll pragma (a pragma must stay
#: next to its loop, and the carries are declared above the loop), the hinted accesses before fast
#: math (both rename callees; fast math, anywhere, last); then Triton's (one task never mixes them
#: with the CUDA ones): the kernel's list, then the launch.
TRANSFORMS: dict[str, TransformSpec] = {
    spec.name: spec
    for spec in (
        TransformSpec(
            "enable_pdl",
            enable_pdl,
            {
                "blocks_per_sm": "PDL only for launches of at most this many blocks per SM, decided at run time (0: always)",
                "in_kernel": "with blocks_per_sm: the kernel's wait and trigger run only in such grids too",
            },
            (),
            _enable_pdl_targets,
            "turn programmatic dependent launch on (for every grid, or for small ones)",
            choice=("blocks_per_sm", "in_kernel"),
            overlap=True,
        ),
        TransformSpec(
            "pdl_late_wait",
            pdl_late_wait,
            {"kernel": "one kernel (None: every kernel)"},
            (),
            _late_wait_targets,
            "move the PDL wait past the statements after it that read no memory",
            overlap=True,
        ),
        TransformSpec(
            "pdl_early_trigger",
            pdl_early_trigger,
            {
                "kernel": "one kernel (None: every kernel)",
                "blocks_per_sm": "trigger early only in grids of at most this many blocks per SM, decided at run time (0: always)",
            },
            (),
            _early_trigger_targets,
            "trigger dependents right after the PDL wait (in every grid, or in small ones)",
            choice=("blocks_per_sm",),
            overlap=True,
        ),
        TransformSpec(
            "tune_constant",
            tune_constant,
            {"name": "constant to set", "value": "new integer value", "owner": "struct/function that defines it"},
            ("role",),
            _tune_targets,
            "set a literal compile-time constant (block size, items, unroll, vector bytes)",
            choice=("value",),
        ),
        TransformSpec(
            "set_launch_bounds",
            set_launch_bounds,
            {
                "kernel": "kernel name",
                "max_threads": "threads per block bound (None keeps the existing one)",
                "min_blocks": "minimum resident blocks per SM (0 = leave out)",
            },
            (),
            _launch_bounds_targets,
            "add or set __launch_bounds__ on a kernel",
            choice=("max_threads", "min_blocks"),
        ),
        TransformSpec(
            "cap_grid",
            cap_grid,
            {"waves": "the grid is capped at this many full waves: occupancy x SMs, asked of the device at run time"},
            (),
            _cap_grid_targets,
            "cap a grid-stride kernel's grid at whole waves of the device",
            choice=("waves",),
        ),
        TransformSpec(
            "incremental_divmod",
            incremental_divmod,
            {"kernel": "one kernel (None: every kernel)"},
            (),
            _divmod_targets,
            "carry a strided loop variable's quotient and remainder instead of dividing every trip",
        ),
        TransformSpec(
            "add_pragma_unroll",
            add_pragma_unroll,
            {
                "factor": "0 = full unroll, else the factor",
                "runtime_loops": "also loops bounded at run time",
                "kernel": "one function (None: all device code)",
            },
            (),
            _unroll_targets,
            "#pragma unroll before for-loops",
            choice=("factor",),
        ),
        TransformSpec(
            "extend_size_dispatch",
            extend_size_dispatch,
            {
                "values": "the powers of two to add as cases",
                "function": "the launcher whose switch is extended",
                "subject": "the size the switch is over",
            },
            ("above",),
            _dispatch_targets,
            "add larger power-of-two cases to a launcher's switch over a size, copying its largest case",
            choice=("values",),
        ),
        TransformSpec(
            "streaming_hints",
            streaming_hints,
            {"what": f"which typed accesses get an evict-first hint: {sorted(WHICH)}"},
            (),
            _streaming_targets,
            "device::load_as / store_as -> evict-first (ld/st.global.cs) accesses",
            choice=("what",),
        ),
        TransformSpec(
            "fast_math",
            fast_math,
            {"ops": f"subset of {sorted(FAST_MATH_OPS)}"},
            (),
            _fast_math_targets,
            "precise math -> fast intrinsics in device code",
            choice=("ops",),
        ),
        TransformSpec(
            "triton_autotune_pin",
            autotune_pin,
            {"kernel": "kernel region", "index": "the config kept"},
            (),
            _triton_targets,
            "keep one config of a Triton kernel's autotune list",
            choice=("index",),
        ),
        TransformSpec(
            "triton_constexpr_default",
            constexpr_default,
            {"kernel": "kernel region", "name": "the constexpr parameter", "value": "a power of two"},
            (),
            _triton_targets,
            "set the default of a Triton kernel's block-size constexpr",
            choice=("value",),
        ),
        TransformSpec(
            "triton_block_size",
            block_size,
            {"launch": "launch region", "name": "the constexpr keyword", "value": "a power of two"} | _BUCKETED,
            (),
            _triton_targets,
            "set a block-size constexpr a Triton launch passes (grid and block together)",
            choice=("value",),
        ),
        TransformSpec(
            "triton_coarsen_programs",
            coarsen_programs,
            {
                "launch": "launch region",
                "kernel": "the launched kernel's region",
                "axis": "the grid axis",
                "value": "programs folded into one (a power of two)",
            }
            | _BUCKETED,
            (),
            _triton_targets,
            "run several consecutive programs of a Triton grid axis in one program (grid and kernel together)",
            choice=("value",),
        ),
        TransformSpec(
            "triton_launch_option",
            launch_option,
            {"launch": "launch region", "option": "num_warps or num_stages", "value": "the new value"} | _BUCKETED,
            (),
            _triton_targets,
            "set a Triton launch's num_warps / num_stages (in every bucket or one)",
            choice=("value",),
        ),
    )
}


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
    "Edit",
    "FAST_MATH_OPS",
    "NotApplicable",
    "TRANSFORMS",
    "TransformError",
    "TransformSpec",
    "add_pragma_unroll",
    "apply",
    "apply_edits",
    "enable_pdl",
    "expand_targets",
    "fast_math",
    "pdl_early_trigger",
    "pdl_late_wait",
    "set_launch_bounds",
    "tune_constant",
]
