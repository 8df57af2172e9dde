"""Grid sizing from the device: cap a grid-stride kernel's grid at whole waves of the machine.

A launcher that starts ``ceil(items / block)`` blocks of a kernel that already loops over its
items with a grid stride schedules, at prefill sizes, hundreds of thousands of short blocks
and a ragged last wave. Capping the grid at ``waves`` x the blocks an SM holds at once (the
kernel's occupancy at its block size) x the SM count, both asked of the device at run time,
runs the same items in fewer, longer-lived blocks; below the cap the grid is the baseline's.
The figures come from the CUDA runtime calls SGLang's ``host::runtime::get_blocks_per_sm``
and ``get_sm_count`` make (written out: ``runtime.cuh`` is not included by every kernel
file), cached in a ``static const`` as SGLang's RMSNorm launchers cache theirs, so no card's
SM count is written into the source.

What must stay true: only the grid changes, and only where every item is still visited: the
launch is ``LaunchKernel(grid, block, device)`` with a one-dimensional, side-effect-free grid and
a compile-time block, and every kernel it launches reaches ``blockIdx.x`` only in the
initializer of a loop that strides by ``gridDim`` (so any grid size covers all items). The
harness then judges the result like any candidate, at every catalog and held-out shape.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from optimize.cuda_facts import classify_grid, loops_of
from optimize.cuda_regions import LaunchExpr, Region
from optimize.features import Features
from optimize.transforms.edits import Edit, NotApplicable, apply_edits, indent_of, line_start
from optimize.transforms.spec import Params, TransformSpec
from source import treesitter as ts
from source.cuda_text import named_children, text_of
from source.treesitter import Node

RESIDENT = "kMaxResidentBlocks"  # the static each edited launch caches its one-wave grid in
_SIDE_EFFECT = re.compile(r"\+\+|--|(?<![=!<>])=(?!=)")


def cap_grid(regions: Mapping[str, str], *, waves: int = 1) -> dict[str, str]:
    """Launch at most ``waves`` full waves of blocks (occupancy x SMs x waves) for grid-stride kernels.

    Each qualifying launch gets, before its statement, ``static const uint32_t kMaxResidentBlocks``
    set once to the kernel's resident blocks per SM at its block size and dynamic shared memory
    times the device's SM count (:func:`_one_wave`), and its grid ``G`` becomes
    ``std::min<uint32_t>(G, kMaxResidentBlocks * waves)``. The static is per instantiation of
    the launcher (its kernel and compile-time block size are fixed there); a second edited launch
    in one function gets a numbered name. A block size chosen at run time asks the device at
    each launch instead (no static: the occupancy follows the block).
    """
    if waves < 1:
        raise NotApplicable("cap_grid", f"waves must be at least 1, not {waves}")
    region = Region(regions)
    strided = _strided_kernels(region)
    edits: list[Edit] = []
    skipped: list[str] = []
    names: dict[str, int] = {}
    for launch in region.launches:
        where = launch.func.qualname if launch.func is not None else launch.doc.span
        why = _refusal(region, launch, strided)
        if why:
            skipped.append(f"{where}: {why}")
            continue
        assert launch.grid is not None and launch.block is not None and launch.kernel is not None
        src = launch.doc.src
        args = named_children(ts.field(launch.ctor, "arguments"))  # grid, block, device[, smem]
        smem = text_of(src, args[3]).strip() if len(args) > 3 else "0"
        body = _one_wave(
            text_of(src, launch.kernel).strip(), text_of(src, launch.block).strip(), smem, text_of(src, args[2]).strip()
        )
        if _constant(region, launch):
            count = names.get(where, 0)
            names[where] = count + 1
            name = RESIDENT if count == 0 else f"{RESIDENT}{count}"
            statement = _statement_of(launch.outer)
            indent = indent_of(src, statement)
            at = line_start(src, statement.start_byte)
            lines = [f"static const uint32_t {name} = [&] {{", *(f"  {line}" for line in body), "}();"]
            edits.append(Edit(launch.doc.span, at, at, b"".join(indent + line.encode() + b"\n" for line in lines)))
        else:
            name = "[&] { " + " ".join(body) + " }()"
        cap = name if waves == 1 else f"{name} * {waves}"
        grid = text_of(src, launch.grid).strip()
        edits.append(
            Edit(
                launch.doc.span,
                launch.grid.start_byte,
                launch.grid.end_byte,
                f"std::min<uint32_t>({grid}, {cap})".encode(),
            )
        )
    if not edits:
        raise NotApplicable("cap_grid", "no launch qualifies" + (f" ({'; '.join(skipped)})" if skipped else ""))
    return apply_edits("cap_grid", regions, edits)


def _strided_kernels(region: Region) -> set[str]:
    """Kernels whose every ``blockIdx.x`` lies in the initializer of a loop striding by ``gridDim``."""
    out: set[str] = set()
    for k in region.kernels:
        src = k.doc.src
        inits = [
            (init.start_byte, init.end_byte)
            for loop in loops_of(region, k)
            if loop.grid_stride and (init := loop.node.child_by_field_name("initializer")) is not None
        ]
        uses = [
            n.start_byte
            for n in ts.walk(k.body)
            if n.type == "field_expression" and text_of(src, n).replace(" ", "") == "blockIdx.x"
        ]
        if inits and uses and all(any(a <= u < b for a, b in inits) for u in uses):
            out.add(k.name)
    return out


def _refusal(region: Region, launch: LaunchExpr, strided: set[str]) -> str:
    """Why this launch may not be capped ("" when it may)."""
    if launch.chevron or launch.runtime:
        return "not a LaunchKernel(...) launch"
    if launch.grid is None or launch.block is None or launch.kernel is None:
        return "the launch's grid, block or kernel is not spelled out"
    src = launch.doc.src
    grid = text_of(src, launch.grid)
    if launch.grid.type in ("initializer_list", "compound_literal_expression") or re.search(r"\bdim3\b|\{", grid):
        return "a multi-dimensional grid"
    if _SIDE_EFFECT.search(grid):
        return "the grid expression has a side effect"
    if classify_grid(region.expand(launch.doc, launch.grid)) == "persistent":
        return "the grid is already sized to the machine"
    args = named_children(ts.field(launch.ctor, "arguments"))
    if len(args) < 3 or "stream" in text_of(src, args[2]).lower():
        return "the launch names a stream, not a device, to ask for the SM count"
    launched = region.launched_kernels(launch)
    if not launched or any(name not in strided for name in launched):
        return "a launched kernel does not reach every item through a grid-stride loop"
    return ""


def _one_wave(kernel: str, block: str, smem: str, device: str) -> list[str]:
    """The statements of a lambda that returns one wave's blocks: occupancy x SMs, asked of the device
    (the CUDA runtime calls SGLang's own ``host::runtime`` helpers make, checked by its
    ``host::RuntimeDeviceCheck``; ``runtime.cuh`` is not included by every kernel file, ``utils.cuh`` is)."""
    return [
        "int blocks_per_sm = 0, sm_count = 0;",
        f"host::RuntimeDeviceCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, {kernel}, {block}, {smem}));",
        f"host::RuntimeDeviceCheck(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, {device}.device_id));",
        "return static_cast<uint32_t>(blocks_per_sm * sm_count);",
    ]


def _constant(region: Region, launch: LaunchExpr) -> bool:
    """Whether the block size is fixed per instantiation (a compile-time value, or a name spelled as
    SGLang spells its constants, ``kBlockSize``): then the one-wave grid is cached in a static."""
    assert launch.block is not None
    text = text_of(launch.doc.src, launch.block).strip()
    return region.evaluate(launch.doc, launch.block) is not None or bool(re.fullmatch(r"k[A-Z]\w*", text))


def _statement_of(node: Node) -> Node:
    """The statement a launch expression belongs to."""
    current = node
    while current.parent is not None and not current.type.endswith("statement"):
        current = current.parent
    return current


def _cap_grid_targets(features: Features, point: Params) -> list[Params]:
    """A kernel that already strides by the grid, launched by a grid not yet sized to the machine
    (the transform checks each launch itself)."""
    if not features.static.grid_stride_loop or features.static.persistent_grid:
        return []
    return [{"waves": int(point.get("waves", 1))}]


SPECS = (
    TransformSpec(
        "cap_grid",
        cap_grid,
        {"waves": "the grid is capped at this many full waves: occupancy x SMs, asked of the device at run time"},
        (),
        _cap_grid_targets,
        "cap a grid-stride kernel's grid at whole waves of the device",
        choice=("waves",),
    ),
)

__all__ = ["RESIDENT", "SPECS", "cap_grid"]
