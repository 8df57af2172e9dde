"""Program coarsening for Triton kernels: one program does the work of several along a grid axis.

Why: many of SGLang's Triton kernels give each program a tiny piece of work (merge_state_kernel:
one (token, head) pair, a few hundred bytes), so at prefill sizes millions of programs are
launched and each is too short to keep enough loads in flight; the H200 measured
merge_state_triton at 3.3-6.5x its floor at T >= 512 (BENCHMARKS.md section 6). Launch knobs
(``num_warps``) do not change that; running ``K`` consecutive programs' bodies in one program,
unrolled, does: their loads are independent, so each program has ``K`` times the bytes in flight
and the grid is ``K`` times smaller.

The edit, on axis ``a`` with factor ``K`` (:func:`coarsen_programs`):

- the kernel region gains two parameters with neutral defaults, ``coarse_extent_<a>=-1`` (the axis's
  real extent) and ``COARSE_PROGRAMS_<a>: tl.constexpr = 1`` (the factor), and its body (a docstring
  stays first) runs inside ``for _coarse_step_<a> in tl.static_range(COARSE_PROGRAMS_<a>)``, guarded by
  ``_coarse_pid_<a> < coarse_extent_<a>`` for the last program's overhang; ``tl.program_id(a)`` reads
  ``_coarse_pid_<a>`` and ``tl.num_programs(a)`` the real extent. A launch that passes neither
  parameter runs the body once, unguarded, as before: another caller of the kernel is unaffected;
- the launch region's grid entry ``E`` becomes ``triton.cdiv(E, K)`` and the launch passes
  ``coarse_extent_<a>=E`` and ``COARSE_PROGRAMS_<a>=K``. With a token bucket, ``K`` is the same
  per-bucket chain as a launch option's (:func:`optimize.transforms.triton_edits.bucket_test`), the
  baseline's 1 the fallback, written in the grid and the keyword alike; Triton compiles one
  specialization per factor.

What must stay true: the kernel is edited once per axis (a second edit of the same axis changes
the launch only); only a grid written as a literal tuple in the launch is edited, and only a kernel
with no ``return``, no ``*args`` and no keyword-only parameters (the body moves into a loop);
everything else is :class:`~optimize.transforms.edits.NotApplicable`. Correctness is the harness's
to judge (a ``@triton.jit`` helper the kernel calls that reads ``tl.program_id`` itself would see
the coarsened id: the oracle catches it).
"""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst

from optimize.transforms import triton_edits as tt
from optimize.transforms.edits import NotApplicable, TransformError
from optimize.transforms.spec import TransformSpec, no_targets

FACTORS = (2, 4, 8)
TRANSFORM = "triton_coarsen_programs"


def extent_param(axis: int) -> str:
    return f"coarse_extent_{axis}"


def factor_param(axis: int) -> str:
    return f"COARSE_PROGRAMS_{axis}"


def grid_entries(call: cst.Call) -> list[cst.BaseExpression] | None:
    """The entries of the launch's grid when it is a literal tuple (``kernel[(a, b)]`` or ``kernel[a, b]``)."""
    sub = call.func
    assert isinstance(sub, cst.Subscript)
    if len(sub.slice) > 1:
        return [s.slice.value for s in sub.slice if isinstance(s.slice, cst.Index)]
    index = sub.slice[0].slice
    value = tt.bare(index.value) if isinstance(index, cst.Index) else None
    if isinstance(value, cst.Tuple):
        return [e.value for e in value.elements]
    return None


def _axis_of(call: cst.Call, name: str) -> int | None:
    """``tl.<name>(a)`` / ``tl.<name>(axis=a)`` -> a (an integer literal), else None."""
    if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == name) or len(call.args) != 1:
        return None
    return tt.literal_int(call.args[0].value)


class _Reads(cst.CSTVisitor):
    def __init__(self) -> None:
        self.axes: set[int] = set()
        self.returns = False

    def visit_Call(self, node: cst.Call) -> None:
        axis = _axis_of(node, "program_id")
        if axis is not None:
            self.axes.add(axis)

    def visit_Return(self, node: cst.Return) -> None:
        self.returns = True


def program_axes(fn: cst.FunctionDef) -> tuple[set[int], bool]:
    """(the grid axes the kernel reads with ``tl.program_id``, whether it has a ``return``)."""
    reads = _Reads()
    fn.body.visit(reads)
    return reads.axes, reads.returns


class _Rewrite(cst.CSTTransformer):
    def __init__(self, axis: int) -> None:
        self.axis = axis

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        base = tt.code(original.func.value) if isinstance(original.func, cst.Attribute) else "tl"
        if _axis_of(original, "program_id") == self.axis:
            return cst.Name(f"_coarse_pid_{self.axis}")
        if _axis_of(original, "num_programs") == self.axis:
            extent = extent_param(self.axis)
            return cst.parse_expression(f"{base}.where({extent} < 0, {tt.code(updated)}, {extent})")
        return updated


def why_not(fn: cst.FunctionDef) -> str:
    """Why no axis of kernel ``fn`` can be coarsened ("" when one may be)."""
    params = fn.params
    if params.star_arg is not cst.MaybeSentinel.DEFAULT or params.kwonly_params or params.star_kwarg:
        return f"{fn.name.value} takes *args or keyword-only parameters"
    if program_axes(fn)[1]:
        return f"{fn.name.value} returns early: its body cannot move into a loop"
    return ""


def _coarsened_kernel(fn: cst.FunctionDef, axis: int) -> cst.FunctionDef:
    kernel = fn.name.value
    refused = why_not(fn)
    if refused:
        raise NotApplicable(TRANSFORM, refused)
    axes, _ = program_axes(fn)
    if axis not in axes:
        raise NotApplicable(TRANSFORM, f"{kernel} never reads tl.program_id({axis})")
    assert isinstance(fn.body, cst.IndentedBlock)
    body = list(fn.body.body)
    doc: list[cst.BaseStatement] = []
    if body and isinstance(body[0], cst.SimpleStatementLine) and isinstance(body[0].body[0], cst.Expr):
        if isinstance(body[0].body[0].value, cst.SimpleString | cst.ConcatenatedString):
            doc, body = body[:1], body[1:]
    extent, factor, step, pid = extent_param(axis), factor_param(axis), f"_coarse_step_{axis}", f"_coarse_pid_{axis}"
    loop = cst.parse_statement(
        f"for {step} in tl.static_range({factor}):\n"
        f"    {pid} = tl.program_id({axis}) * {factor} + {step}\n"
        f"    if ({extent} < 0) | ({pid} < {extent}):\n"
        "        pass\n"
    )
    assert isinstance(loop, cst.For) and isinstance(loop.body, cst.IndentedBlock)
    guard = loop.body.body[1]
    assert isinstance(guard, cst.If)
    moved = [s.visit(_Rewrite(axis)) for s in body]
    guard = guard.with_changes(body=guard.body.with_changes(body=moved))
    loop = loop.with_changes(body=loop.body.with_changes(body=[loop.body.body[0], guard]))
    tight = cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))
    new_params = [
        cst.Param(cst.Name(extent), default=cst.parse_expression("-1"), equal=tight),
        cst.Param(
            cst.Name(factor),
            annotation=cst.Annotation(cst.parse_expression("tl.constexpr")),
            default=cst.Integer("1"),
            equal=cst.AssignEqual(),
        ),
    ]
    params = fn.params
    existing = list(params.params)
    # the new parameters take the list's own layout: one a line when it is laid out so (a trailing comma)
    between = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    if len(existing) > 1 and isinstance(existing[-2].comma, cst.Comma):
        between = existing[-2].comma
    trailing = existing[-1].comma if existing else cst.MaybeSentinel.DEFAULT
    if existing:
        existing[-1] = existing[-1].with_changes(comma=between)
    new_params = [new_params[0].with_changes(comma=between), new_params[1].with_changes(comma=trailing)]
    return fn.with_changes(
        params=params.with_changes(params=[*existing, *new_params]),
        body=fn.body.with_changes(body=[*doc, loop]),
    )


def coarsen_programs(
    regions: Mapping[str, str],
    *,
    launch: str,
    kernel: str,
    axis: int,
    value: int,
    bucket: str = "",
    tokens: str = "",
) -> dict[str, str]:
    """Run ``value`` consecutive programs of grid axis ``axis`` in one program of ``kernel`` at ``launch``
    (in every token bucket, or in ``bucket`` only)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value & (value - 1):
        raise TransformError(f"{TRANSFORM}: the factor must be a power of two, not {value!r}")
    call = tt.launch_call(regions, launch)
    entries = grid_entries(call)
    if entries is None or not 0 <= axis < len(entries):
        raise NotApplicable(TRANSFORM, f"{launch}'s grid is not a literal tuple with an axis {axis}")
    out = dict(regions)
    module, fn = tt.kernel_region(regions, kernel)
    if not any(p.name.value == factor_param(axis) for p in fn.params.params):
        out = tt.kernel_edited(regions, kernel, module, fn, _coarsened_kernel(fn, axis), TRANSFORM)
    given = tt.keyword(call, factor_param(axis))
    extent = tt.keyword(call, extent_param(axis))
    entry = extent.value if extent is not None else entries[axis]
    factor = tt.new_value(given.value if given is not None else None, value, bucket, tokens, 1)
    grid_entry = cst.parse_expression(f"triton.cdiv({tt.code(entry)}, {tt.code(factor)})")
    sub = call.func
    assert isinstance(sub, cst.Subscript)
    old = entries[axis]
    new_sub = sub.deep_replace(old, grid_entry)
    assert isinstance(new_sub, cst.Subscript)
    edited = call.with_changes(func=new_sub)
    edited = tt.with_keyword(edited, extent_param(axis), entry)
    edited = tt.with_keyword(edited, factor_param(axis), factor)
    out[launch] = tt.edited_launch(regions, launch, edited, TRANSFORM)[launch]
    return out


SPECS = (
    TransformSpec(
        TRANSFORM,
        coarsen_programs,
        {
            "launch": "launch region",
            "kernel": "the launched kernel's region",
            "axis": "the grid axis",
            "value": "programs folded into one (a power of two)",
        }
        | tt.BUCKETED,
        (),
        no_targets,
        "run several consecutive programs of a Triton grid axis in one program (grid and kernel together)",
        choice=("value",),
    ),
)


__all__ = [
    "FACTORS",
    "SPECS",
    "TRANSFORM",
    "coarsen_programs",
    "extent_param",
    "factor_param",
    "grid_entries",
    "program_axes",
    "why_not",
]
