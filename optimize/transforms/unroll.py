"""``add_pragma_unroll``: ``#pragma unroll`` (or ``#pragma unroll N``) before device for-loops.

A transform under the contract of :mod:`optimize.transforms` (byte-exact edits that parse). It
applies after the carried divisions (:mod:`optimize.transforms.carried_divmod` declares its
carries above a loop, and a pragma must stay right before its loop).
"""

from __future__ import annotations

from collections.abc import Mapping

from optimize.cuda_facts import loops_of
from optimize.cuda_regions import Region
from optimize.features import Features
from optimize.transforms.edits import Edit, NotApplicable, TransformError, apply_edits, line_start
from optimize.transforms.spec import Params, TransformSpec


def add_pragma_unroll(
    regions: Mapping[str, str], *, factor: int = 0, runtime_loops: bool = False, kernel: str | None = None
) -> dict[str, str]:
    """Put ``#pragma unroll`` (``factor`` 0) or ``#pragma unroll N`` before for-loops in device code.

    Loops with a compile-time trip count get it by default; ``runtime_loops``
    extends it to loops bounded at run time (grid-stride loops), which needs a
    ``factor`` >= 2. Loops that already carry a pragma are left alone, and the
    pragma goes on a line of its own at column 0 (SGLang's style) only where the
    ``for`` starts its line. ``kernel`` limits the edit to one function.
    """
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 0:
        raise TransformError(f"add_pragma_unroll: factor must be an integer >= 0, got {factor!r}")
    if runtime_loops and factor < 2:
        raise TransformError("add_pragma_unroll: a run-time-bounded loop needs an unroll factor >= 2")
    region = Region(regions)
    pragma = b"#pragma unroll" + (f" {factor}".encode() if factor else b"") + b"\n"
    edits: list[Edit] = []
    for f in region.device_code:
        if kernel is not None and f.name != kernel:
            continue
        src = f.doc.src
        for loop in loops_of(region, f):
            if loop.node.type != "for_statement" or loop.unrolled:
                continue
            if not loop.compile_time and not runtime_loops:
                continue
            start = line_start(src, loop.node.start_byte)
            if src[start : loop.node.start_byte].strip():
                continue
            edits.append(Edit(f.doc.span, start, start, pragma))
    if not edits:
        raise NotApplicable(
            "add_pragma_unroll", "no " + ("" if runtime_loops else "compile-time ") + "for-loop without a pragma"
        )
    return apply_edits("add_pragma_unroll", regions, edits)


def _unroll_targets(features: Features, point: Params) -> list[Params]:
    factor = int(point.get("factor", 0))
    runtime = bool(point.get("runtime_loops", False))
    if runtime:
        return [{"factor": factor, "runtime_loops": True}] if factor >= 2 and features.static.runtime_loops else []
    return [{"factor": factor, "runtime_loops": False}] if features.static.loops_missing_unroll else []


SPECS = (
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
)


__all__ = ["SPECS", "add_pragma_unroll"]
