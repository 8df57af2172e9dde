"""PDL's three mechanical choices: turn it on, place the wait as late as the data allows, trigger early.

Programmatic dependent launch lets a kernel be scheduled while the previous kernel in
the stream drains; ``griddepcontrol.wait`` (``device::PDLWaitPrimary``) then holds it
until that kernel's writes are visible. What each transform keeps true is in its
docstring; all three move or insert whole statements, nothing else.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from optimize.cuda_facts import pdl_statements
from optimize.cuda_regions import LaunchExpr, Region
from optimize.features import Features
from optimize.transforms.edits import Edit, NotApplicable, apply_edits, indent_of, line_end, line_start
from optimize.transforms.spec import Params, TransformSpec
from source import treesitter as ts
from source.cuda_text import last_name, named_children, text_of
from source.treesitter import Node

_WAIT_STMT = b"device::PDLWaitPrimary<true>();"
_TRIGGER_STMT = b"device::PDLTriggerSecondary<true>();"


def enable_pdl(regions: Mapping[str, str], *, blocks_per_sm: int = 0, in_kernel: bool = False) -> dict[str, str]:
    """Launch with programmatic dependent launch where the launcher leaves it off.

    ``blocks_per_sm`` > 0: only launches of at most that many blocks per SM of the device get
    PDL, decided at run time from the launch's own grid and the device's SM count
    (``[&] { const dim3 pdl_grid = GRID; ... }()`` in place of ``true``; :func:`_pdl_switch`), so
    one launcher serves both sides of a size threshold on every card: the grid grows with the
    token count, and on the H200 (2026-12-02) PDL made moe.shuffle_weighted_sum 1.15-1.2x
    faster at 1-8 tokens and 2x slower at 512+ tokens of top-2 routing. The grid
    expression is evaluated once more, so one with a side effect (``++``, ``--``, an
    assignment) is refused. The kernels get their wait either way: without PDL it returns
    at once.

    ``.enable_pdl(false)`` becomes ``.enable_pdl(true)``, ``.config({.use_pdl =
    false})`` becomes ``true``, and a ``LaunchKernel(...)`` chain with neither gets
    ``.enable_pdl(true)``. Launches switched by a template flag (``kUsePDL``) are
    SGLang's to decide (``is_arch_support_pdl()`` is true on Hopper) and are left
    alone; triple-chevron launches cannot carry the attribute and need a rewrite.

    ``in_kernel`` (with ``blocks_per_sm``): the kernel's added wait and trigger run only in grids
    of at most that many blocks per SM too (:func:`_grid_guard`), so a
    launch above the threshold runs none of PDL's instructions. Why: on the H200
    (2026-12-02) moe.shuffle_weighted_sum with the switch was still 0.51x at Mixtral top-2,
    T >= 512, where its grid (T x 16 blocks of 128 threads) is far above the threshold and PDL is
    off; what differs from the baseline there is these statements in 262144 tiny blocks (T=16384) (which
    of the two costs is not measured, nor yet whether the guard helps). The guard is the launch's own
    test seen from inside (the grid is the launch's, and the kernel's count of SMs is never below
    the launcher's), so a kernel that may start early always waits. It is applied only to a kernel every launch of which this edit switches; a kernel
    also launched another way keeps the plain wait. A wait the grid product overflows into
    running is harmless: without PDL it returns at once.

    What must stay true: a PDL-launched kernel may start before the previous
    kernel in the stream has finished, so every kernel these launches start gets a
    ``device::PDLWaitPrimary<true>()`` as its first statement when it has no wait
    (before any global read), and a ``device::PDLTriggerSecondary<true>()`` as its
    last when it has no trigger (exit implies the trigger anyway; this only makes it
    explicit).
    """
    if in_kernel and blocks_per_sm <= 0:
        raise NotApplicable("enable_pdl", "in_kernel needs blocks_per_sm > 0 (the grid size to test)")
    region = Region(regions)
    edits, started, skipped, switched = _switch_launches(region, blocks_per_sm)
    if not edits:
        raise NotApplicable("enable_pdl", "no launch leaves PDL off" + (f" ({'; '.join(skipped)})" if skipped else ""))
    guard = _grid_guard(blocks_per_sm)
    if in_kernel and not any(all(switched.get(name, [False])) for name in started):
        # the same edit as without in_kernel: say so, so a search does not build it twice
        raise NotApplicable("enable_pdl", "in_kernel: every started kernel is also launched another way")
    for k in region.kernels:
        if k.name not in started:
            continue
        guarded = in_kernel and all(switched.get(k.name, [False]))
        wait_stmt = guard + _WAIT_STMT if guarded else _WAIT_STMT
        trigger_stmt = guard + _TRIGGER_STMT if guarded else _TRIGGER_STMT
        edits += _wait_and_trigger(k, wait_stmt, trigger_stmt)
    return apply_edits("enable_pdl", regions, edits)


def _switch_launches(
    region: Region, blocks_per_sm: int
) -> tuple[list[Edit], set[str], list[str], dict[str, list[bool]]]:
    """Step 1 of :func:`enable_pdl`: every launch's edit in order, the kernels started, the skips, the switches."""
    edits: list[Edit] = []
    started: set[str] = set()
    skipped: list[str] = []
    switched: dict[str, list[bool]] = {}  # kernel -> for each launch of it: did this edit switch that launch
    for launch in region.launches:
        launched = region.launched_kernels(launch)
        for name in launched:
            switched.setdefault(name, []).append(False)
        src = launch.doc.src
        where = launch.func.qualname if launch.func is not None else launch.doc.span
        if launch.chevron or launch.runtime:
            skipped.append(
                f"{where}: {'<<<>>>' if launch.chevron else 'runtime'} launch (needs a rewrite to add the attribute)"
            )
            continue
        on = _pdl_switch(src, launch.grid, blocks_per_sm)
        if on is None:
            skipped.append(f"{where}: the grid has no side-effect-free expression to size PDL by")
            continue
        if _switch_launch(launch, where, on, edits, skipped):
            started.update(launched)
            for name in launched:
                switched[name][-1] = True
    return edits, started, skipped, switched


def _switch_launch(launch: LaunchExpr, where: str, on: bytes, edits: list[Edit], skipped: list[str]) -> bool:
    """Step 1's edit of one ``LaunchKernel`` chain (``false`` -> ``on``, else ``.enable_pdl(on)``); True if switched."""
    src = launch.doc.src
    changed = False
    handled = False
    for method, args in launch.pdl_args or []:
        if method == "enable_pdl":
            handled = True
            named = named_children(args)
            if named and text_of(src, named[0]).strip() == "false":
                edits.append(Edit(launch.doc.span, named[0].start_byte, named[0].end_byte, on))
                changed = True
            elif named and text_of(src, named[0]).strip() != "true":
                skipped.append(f"{where}: PDL follows {text_of(src, named[0]).strip()} (a template flag SGLang sets)")
        elif method == "config":
            text = src[args.start_byte : args.end_byte]
            hit = re.search(rb"\.use_pdl\s*=\s*(false)\b", text)
            if hit:
                handled = True
                edits.append(Edit(launch.doc.span, args.start_byte + hit.start(1), args.start_byte + hit.end(1), on))
                changed = True
            elif re.search(rb"\.use_pdl\s*=", text):
                handled = True
    if not handled:
        edits.append(Edit(launch.doc.span, launch.ctor.end_byte, launch.ctor.end_byte, b".enable_pdl(" + on + b")"))
        changed = True
    return changed


def _wait_and_trigger(k: Any, wait_stmt: bytes, trigger_stmt: bytes) -> list[Edit]:
    """Step 2 of :func:`enable_pdl`: a started kernel's wait first and trigger last, each only where it has none."""
    edits: list[Edit] = []
    src = k.doc.src
    wait, trigger, _ = pdl_statements(src, k.body)
    asm = b" ".join(src[n.start_byte : n.end_byte] for n in ts.walk(k.body) if n.type == "gnu_asm_expression")
    stmts = named_children(k.body)
    indent = indent_of(src, stmts[0]) if stmts else b""
    if not indent:  # the body does not start on a line of its own: one level below the function's line
        line = src[line_start(src, k.node.start_byte) : k.node.start_byte]
        indent = (line if not line.strip() else b"") + b"  "
    if wait is None and b"griddepcontrol.wait" not in asm:
        open_brace = k.body.children[0]
        edits.append(Edit(k.doc.span, open_brace.end_byte, open_brace.end_byte, b"\n" + indent + wait_stmt))
    if trigger is None and b"launch_dependents" not in asm:
        close_brace = k.body.children[-1]
        at = line_start(src, close_brace.start_byte)
        if src[at : close_brace.start_byte].strip():  # `}` shares its line with code
            edits.append(Edit(k.doc.span, close_brace.start_byte, close_brace.start_byte, b" " + trigger_stmt + b" "))
        else:
            edits.append(Edit(k.doc.span, at, at, indent + trigger_stmt + b"\n"))
    return edits


def _grid_guard(blocks_per_sm: int) -> bytes:
    """The device-side test that this grid has at most ``blocks_per_sm`` blocks per SM (uniform: every
    thread sees one grid).

    The kernel counts SMs with PTX's ``%nsmid`` (the SM identifiers' bound), plus one: PTX says it may
    exceed the SM count (identifiers need not be contiguous), and on sm_90 and sm_100 it has been seen
    one below it. Either way the kernel's bound is at least the launcher's (:func:`_pdl_switch`, the
    device's attribute), which is what safety needs: every grid the launcher gives PDL waits."""
    return (
        b"if (gridDim.x * gridDim.y * gridDim.z <= " + str(int(blocks_per_sm)).encode() + b"u * [] { unsigned ids; "
        b'asm("mov.u32 %0, %%nsmid;" : "=r"(ids)); return ids + 1u; }()) '
    )


_SIDE_EFFECT = re.compile(rb"\+\+|--|(?<![=!<>])=(?!=)")


def _pdl_switch(src: bytes, grid: Node | None, blocks_per_sm: int) -> bytes | None:
    """``true``, or the run-time test that the launch's grid has at most ``blocks_per_sm`` blocks per SM
    of the current device (None: no grid expression that may be evaluated twice).

    Why per SM: a literal block count is one card's (528 = the H200's 132 SMs x 4); the device's own
    count (``cudaDevAttrMultiProcessorCount``, read once per launcher) makes the same rule fit the
    H100 PCIe's 114 SMs and the B200's 148. The CUDA runtime's call, not SGLang's
    ``host::runtime::get_sm_count``: most kernel files do not include ``sgl_kernel/runtime.cuh``."""
    if blocks_per_sm <= 0:
        return b"true"
    if grid is None:
        return None
    text = src[grid.start_byte : grid.end_byte]
    if _SIDE_EFFECT.search(text):
        return None
    return (
        b"[&] { const dim3 pdl_grid = " + text + b"; static const unsigned long long sm_count = [] { int device = 0, "
        b"count = 0; cudaGetDevice(&device); cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device); "
        b"return static_cast<unsigned long long>(count); }(); return static_cast<unsigned long long>(pdl_grid.x) * "
        b"pdl_grid.y * pdl_grid.z <= " + str(int(blocks_per_sm)).encode() + b"ull * sm_count; }()"
    )


def _alone_on_line(src: bytes, node: Node) -> bool:
    """The statement has its line to itself (a trailing ``//`` comment aside)."""
    start, end = line_start(src, node.start_byte), line_end(src, node.end_byte)
    rest = src[node.end_byte : end].strip()
    return not src[start : node.start_byte].strip() and (not rest or rest.startswith(b"//"))


def _move_line(span: str, src: bytes, node: Node, to: int) -> list[Edit]:
    """Edits moving ``node``'s whole line (its trailing comment included) to byte ``to`` (a line start)."""
    start, end = line_start(src, node.start_byte), line_end(src, node.end_byte)
    line = src[start:end]
    return [Edit(span, to, to, line if line.endswith(b"\n") else line + b"\n"), Edit(span, start, end, b"")]


def _pdl_kernels(
    region: Region, kernel: str | None
) -> Iterator[tuple[Any, bytes, list[Node], Node | None, Node | None, bool]]:
    """(kernel, source, top-level statements, wait, trigger, trigger is last) for each kernel chosen."""
    for k in region.kernels:
        if kernel is None or k.name == kernel:
            src = k.doc.src
            wait, trigger, at_end = pdl_statements(src, k.body)
            yield k, src, named_children(k.body), wait, trigger, at_end


def pdl_early_trigger(
    regions: Mapping[str, str], *, kernel: str | None = None, blocks_per_sm: int = 0
) -> dict[str, str]:
    """Move a kernel's trailing PDL trigger to just after its PDL wait.

    The trigger only lets the next PDL-launched kernel be *scheduled*; per the PTX
    ISA its ``griddepcontrol.wait`` still waits for this grid to complete and
    flush, so triggering early is safe and buys the dependent's prologue overlap.
    It can also cost: the dependent's CTAs may take SM slots while this grid still
    runs. The whole line (statement and its trailing comment) moves; nothing else
    changes. Applies to kernels whose trigger is the body's last statement, with
    the wait at the body's top level and work between them.

    ``blocks_per_sm`` > 0: the trailing trigger stays, and a copy of it runs right after the
    wait only in grids of at most that many blocks per SM (:func:`_grid_guard`; the grid is the
    same for every thread, so every block takes the same branch). Small, decode-sized grids get the head start; large grids, whose last
    wave the dependent's blocks would crowd (bias_gelu_tanh at 5120x512 on the H200,
    2026-12-02: 0.94x with the early trigger, 1.11x at one token), trigger as the
    baseline does. A second trigger in a block that has triggered has no further effect.
    """
    edits: list[Edit] = []
    for k, src, stmts, wait, trigger, at_end in _pdl_kernels(Region(regions), kernel):
        if wait is None or trigger is None or not at_end or stmts.index(trigger) - stmts.index(wait) < 2:
            continue
        if not (_alone_on_line(src, trigger) and _alone_on_line(src, wait)):
            continue
        if blocks_per_sm > 0:
            at = line_end(src, wait.end_byte)
            copy = (
                indent_of(src, wait) + _grid_guard(blocks_per_sm) + src[trigger.start_byte : trigger.end_byte] + b"\n"
            )
            edits.append(Edit(k.doc.span, at, at, copy))
        else:
            edits += _move_line(k.doc.span, src, trigger, line_end(src, wait.end_byte))
    if not edits:
        what = f"kernel {kernel}" if kernel else "no kernel"
        raise NotApplicable(
            "pdl_early_trigger", f"{what} has a trailing PDL trigger after a top-level wait with work between"
        )
    return apply_edits("pdl_early_trigger", regions, edits)


#: Calls that read no memory: a statement made of these and arithmetic may run before the PDL wait.
PURE_CALLS = frozenset({"min", "max", "abs", "fabsf", "div_ceil", "static_cast", "__popc", "__clz", "__ffs"})
#: Syntax that may read memory (or leave the statement list): a statement holding any is not moved past.
_MEMORY_NODES = frozenset({"subscript_expression", "pointer_expression", "return_statement", "goto_statement"})


def _memory_free(src: bytes, stmt: Node) -> bool:
    """The statement reads no memory a predecessor kernel could write: only locals, parameters passed by
    value (``p.n``), built-ins (``threadIdx``) and :data:`PURE_CALLS`; no ``[]``, ``*p``, ``->`` or other call."""
    if stmt.type in ("alias_declaration", "type_definition", "static_assert_declaration"):
        return True  # compile time only
    if stmt.type not in ("declaration", "expression_statement"):
        return False
    for node in ts.walk(stmt):
        if node.type in _MEMORY_NODES:
            return False
        if node.type == "field_expression" and b"->" in src[node.start_byte : node.end_byte]:
            return False
        if node.type == "call_expression":
            callee = node.child_by_field_name("function")
            name = last_name(text_of(src, callee)) if callee is not None else ""
            if name not in PURE_CALLS and not name.startswith("make_"):  # make_float2 & co. build a value
                return False
    return True


def pdl_late_wait(regions: Mapping[str, str], *, kernel: str | None = None) -> dict[str, str]:
    """Move a kernel's top-level PDL wait down past the statements after it that read no memory.

    Index math, bounds, parameters passed by value: work that cannot depend on what the
    previous kernel writes then runs while that kernel drains, and the wait sits just
    before the first statement that may read memory (a subscript, a dereference, ``->``,
    a call outside :data:`PURE_CALLS`, a branch or loop). Nothing moves across such a
    statement, so every global read still follows the wait. The wait's whole line moves;
    nothing else changes.
    """
    edits: list[Edit] = []
    for k, src, stmts, wait, _, _ in _pdl_kernels(Region(regions), kernel):
        if wait is None:
            continue
        after = stmts[stmts.index(wait) + 1 :]
        free = 0
        while free < len(after) and _memory_free(src, after[free]):
            free += 1
        if free == 0 or free == len(after) or not _alone_on_line(src, wait):
            continue  # nothing to move past, nothing after it reads memory, or the line holds other code
        edits += _move_line(k.doc.span, src, wait, line_start(src, after[free].start_byte))
    if not edits:
        what = f"kernel {kernel}" if kernel else "no kernel"
        raise NotApplicable("pdl_late_wait", f"{what} has a top-level PDL wait followed by memory-free statements")
    return apply_edits("pdl_late_wait", regions, edits)


# --------------------------------------------------------------------------- registered


def _enable_pdl_targets(features: Features, point: Params) -> list[Params]:
    if not any(l.pdl in ("off", "absent") for l in features.launches):
        return []
    per_sm = int(point.get("blocks_per_sm", 0))
    if not per_sm:
        return [{}]
    return [{"blocks_per_sm": per_sm, "in_kernel": True} if point.get("in_kernel") else {"blocks_per_sm": per_sm}]


def _late_wait_targets(features: Features, point: Params) -> list[Params]:
    return [{}] if any(k.pdl_wait and k.launched for k in features.kernels) else []


def _early_trigger_targets(features: Features, point: Params) -> list[Params]:
    if not any(k.pdl_trigger_at_end and k.launched for k in features.kernels):
        return []
    per_sm = int(point.get("blocks_per_sm", 0))
    return [{"blocks_per_sm": per_sm} if per_sm else {}]


#: PDL applies first: the early trigger moves the trigger that turning PDL on placed
SPECS = (
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
)

__all__ = ["PURE_CALLS", "SPECS", "enable_pdl", "pdl_early_trigger", "pdl_late_wait"]
