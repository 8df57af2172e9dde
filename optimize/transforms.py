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
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from extract import treesitter as ts
from optimize.cuda_facts import (
    SLOW_MATH,
    float_names,
    is_float_expr,
    iter_literal_constants,
    loops_of,
    owner_name,
)
from optimize.cuda_regions import Region
from optimize.cuda_text import (
    Node,
    contains_double,
    last_name,
    matches,
    strip_parens,
    text_of,
)
from optimize.dispatch_transforms import MAX_CASE, extend_size_dispatch
from optimize.divmod_transforms import incremental_divmod
from optimize.features import Features
from optimize.grid_transforms import cap_grid
from optimize.hint_transforms import WHICH, streaming_hints
from optimize.pdl_transforms import enable_pdl, pdl_early_trigger, pdl_late_wait
from optimize.transform_edits import Edit, NotApplicable, TransformError, apply_edits, line_start
from optimize.triton_coarsen import coarsen_programs
from optimize.triton_transforms import autotune_pin, block_size, constexpr_default, launch_option

# --------------------------------------------------------------------------- tune_constant


def tune_constant(regions: Mapping[str, str], *, name: str, value: int, owner: str | None = None) -> dict[str, str]:
    """Set the integer literal of compile-time constant ``name`` to ``value``.

    Applies to ``constexpr``/``const`` declarations whose initializer is an
    integer literal, possibly inside ``static_cast<...>(...)``; only the digits
    change (a ``u`` suffix stays). ``owner`` (struct or function name) picks one
    when several scopes define the same name.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise TransformError(f"tune_constant: value must be a positive integer, got {value!r}")
    region = Region(regions)
    found = []
    for doc, decl, const_name, literal in iter_literal_constants(region):
        if const_name != name:
            continue
        f = region.func_of(doc, decl)
        where = owner_name(doc, decl) or (f.qualname if f is not None else None)
        if owner is not None and where != owner:
            continue
        found.append((doc, literal, where))
    if not found:
        raise NotApplicable(
            "tune_constant",
            f"no compile-time constant {name!r} with an integer literal value" + (f" in {owner!r}" if owner else ""),
        )
    if owner is None and len({w for _d, _l, w in found}) > 1:
        raise NotApplicable(
            "tune_constant",
            f"{name!r} is defined in several scopes ({sorted(str(w) for _d, _l, w in found)}); pass owner=",
        )
    edits = []
    for doc, literal, _where in found:
        text = text_of(doc.src, literal)
        digits = re.match(r"(0[xX][0-9a-fA-F']+|[0-9']+)", text)
        assert digits is not None
        if int(digits.group(1).replace("'", ""), 0 if digits.group(1).lower().startswith("0x") else 10) == value:
            continue
        edits.append(
            Edit(doc.span, literal.start_byte, literal.start_byte + len(digits.group(1).encode()), str(value).encode())
        )
    if not edits:
        raise NotApplicable("tune_constant", f"{name} is already {value}")
    return apply_edits("tune_constant", regions, edits)


# --------------------------------------------------------------------------- set_launch_bounds

_EXPR_OK = re.compile(r"^[\w\s+\-*/%()<>:.]+$")


def set_launch_bounds(
    regions: Mapping[str, str], *, kernel: str, max_threads: int | str | None = None, min_blocks: int = 0
) -> dict[str, str]:
    """Add or set ``__launch_bounds__(max_threads[, min_blocks])`` on kernel ``kernel``.

    ``max_threads`` None keeps the kernel's existing first argument (and is an
    error when it has none). ``min_blocks`` 0 leaves the minimum-blocks argument
    out. What must hold for the result to run: every launch of the kernel uses at
    most ``max_threads`` threads per block; the caller (policy) takes it from the
    features' launch analysis.
    """
    if isinstance(max_threads, bool) or (isinstance(max_threads, int) and not 1 <= max_threads <= 1024):
        raise TransformError(f"set_launch_bounds: max_threads must be 1..1024, got {max_threads!r}")
    if isinstance(max_threads, str) and (not max_threads.strip() or not _EXPR_OK.match(max_threads)):
        raise TransformError(
            f"set_launch_bounds: max_threads expression {max_threads!r} is not a plain constant expression"
        )
    if isinstance(min_blocks, bool) or not isinstance(min_blocks, int) or min_blocks < 0:
        raise TransformError(f"set_launch_bounds: min_blocks must be an integer >= 0, got {min_blocks!r}")
    region = Region(regions)
    targets = [k for k in region.kernels if k.name == kernel]
    if not targets:
        raise NotApplicable("set_launch_bounds", f"no __global__ kernel named {kernel!r} in the region")
    edits = []
    for k in targets:
        src = k.doc.src
        lb = next((c for c in k.node.children if c.type == "launch_bounds"), None)
        if lb is not None:
            open_paren = next(c for c in lb.children if c.type == "(")
            close_paren = next(c for c in reversed(lb.children) if c.type == ")")
            args = [c for c in lb.children if c.is_named]
            first = str(max_threads) if max_threads is not None else text_of(src, args[0])
            inner = first + (f", {min_blocks}" if min_blocks else "")
            if inner == src[open_paren.end_byte : close_paren.start_byte].decode():
                continue
            edits.append(Edit(k.doc.span, open_paren.end_byte, close_paren.start_byte, inner.encode()))
        else:
            if max_threads is None:
                raise NotApplicable(
                    "set_launch_bounds", f"{kernel} has no __launch_bounds__ and no max_threads was given"
                )
            glob = next((c for c in k.node.children if c.type == "__global__"), None)
            if glob is None:
                raise NotApplicable(
                    "set_launch_bounds", f"{kernel}: __global__ is spelled through a macro; cannot place the attribute"
                )
            inner = str(max_threads) + (f", {min_blocks}" if min_blocks else "")
            edits.append(Edit(k.doc.span, glob.end_byte, glob.end_byte, f" __launch_bounds__({inner})".encode()))
    if not edits:
        raise NotApplicable("set_launch_bounds", f"{kernel} already has these launch bounds")
    return apply_edits("set_launch_bounds", regions, edits)


# --------------------------------------------------------------------------- fast_math

#: op name -> what it does (function swaps are SLOW_MATH entries with an intrinsic)
FAST_MATH_OPS: dict[str, str] = {
    **{name: f"{name}(x) -> {fast}(x)" for name, fast in SLOW_MATH.items() if fast},
    "rcp": "1.0f / x -> __frcp_rn(x) (correctly rounded, same result)",
    "rsqrt": "1.0f / sqrtf(x) -> rsqrtf(x) (approximate)",
    "fdividef": "a / b (float) -> __fdividef(a, b) (approximate; 0 when |b| > 2^126)",
}


def _in_constant_context(node: Node, src: bytes) -> bool:
    cursor = node.parent
    while cursor is not None:
        if cursor.type in ("template_argument_list", "static_assert_declaration"):
            return True
        if cursor.type in ("declaration", "field_declaration"):
            quals = {text_of(src, c) for c in cursor.children if c.type == "type_qualifier"}
            return "constexpr" in quals
        if cursor.type in ("function_definition", "compound_statement"):
            return False
        cursor = cursor.parent
    return False


def fast_math(regions: Mapping[str, str], *, ops: Sequence[str] = tuple(FAST_MATH_OPS)) -> dict[str, str]:
    """Swap precise math for fast intrinsics in device code (``ops`` picks which).

    Function swaps rename the callee only; ``rcp``/``rsqrt``/``fdividef`` rewrite
    the division expression around its operands, which stay byte-identical.
    Divisions in constant contexts (constexpr, template arguments) and double
    divisions are left alone. Host code is never touched.
    """
    unknown = sorted(set(ops) - set(FAST_MATH_OPS))
    if unknown or not ops:
        raise TransformError(f"fast_math: unknown ops {unknown}; known: {sorted(FAST_MATH_OPS)}")
    wanted = set(ops)
    region = Region(regions)
    edits: list[Edit] = []
    for f in region.device_code:
        src = f.doc.src
        rules: dict[tuple[int, int], Callable[[Node], bytes]] = {}
        for m in matches("calls", f.body):
            callee = m["callee"][0]
            raw = text_of(src, callee).strip()
            name = last_name(raw)
            fast = SLOW_MATH.get(name)
            if name in wanted and fast and raw in (name, f"::{name}", f"std::{name}"):

                def fast_call(_n: Node, fast: str = fast) -> bytes:
                    return fast.encode()

                rules[(callee.start_byte, callee.end_byte)] = fast_call
        scalars, pairs = float_names(region, f)
        for m in matches("arithmetic", f.body):
            if text_of(src, m["op"][0]) != "/":
                continue
            expr, left, right = m["expr"][0], m["left"][0], m["right"][0]
            if not (is_float_expr(src, left, scalars, pairs) or is_float_expr(src, right, scalars, pairs)):
                continue
            if contains_double(src, expr) or _in_constant_context(expr, src):
                continue
            if region.is_compile_time(f.doc, left) and region.is_compile_time(f.doc, right):
                continue
            inner = strip_parens(right)
            one = strip_parens(left).type == "number_literal" and text_of(src, strip_parens(left)).strip() in (
                "1.0f",
                "1.f",
                "1.0F",
                "1.F",
                "1.00f",
            )
            is_sqrt = (
                inner.type == "call_expression"
                and last_name(text_of(src, inner.child_by_field_name("function"))) == "sqrtf"
            )
            if one and is_sqrt and "rsqrt" in wanted:
                arg = inner.child_by_field_name("arguments")
                assert arg is not None  # a call_expression always has its argument list

                def rsqrt(_n: Node, arg: Node = arg) -> bytes:
                    return b"rsqrtf" + render(arg)

                rules[(expr.start_byte, expr.end_byte)] = rsqrt
            elif one and not is_sqrt and "rcp" in wanted:

                def rcp(_n: Node, r: Node = right) -> bytes:
                    return b"__frcp_rn(" + render(r) + b")"

                rules[(expr.start_byte, expr.end_byte)] = rcp
            elif not one and "fdividef" in wanted:

                def fdividef(_n: Node, lhs: Node = left, rhs: Node = right) -> bytes:
                    return b"__fdividef(" + render(lhs) + b", " + render(rhs) + b")"

                rules[(expr.start_byte, expr.end_byte)] = fdividef

        def render(node: Node, src: bytes = src, rules: dict = rules) -> bytes:
            key = (node.start_byte, node.end_byte)
            if key in rules:
                rule = rules.pop(key)  # a node is rewritten once
                out = rule(node)
                rules[key] = rule
                return out
            if not node.children:
                return src[node.start_byte : node.end_byte]
            pieces = []
            pos = node.start_byte
            for child in node.children:
                pieces.append(src[pos : child.start_byte])
                pieces.append(render(child))
                pos = child.end_byte
            pieces.append(src[pos : node.end_byte])
            return b"".join(pieces)

        outermost = sorted(rules)
        top = [k for k in outermost if not any(o != k and o[0] <= k[0] and k[1] <= o[1] for o in outermost)]
        for start, end in top:
            node = _node_at(f.body, start, end)
            edits.append(Edit(f.doc.span, start, end, render(node)))
    if not edits:
        raise NotApplicable("fast_math", f"no {'/'.join(sorted(wanted))} site in device code")
    return apply_edits("fast_math", regions, edits)


def _node_at(root: Node, start: int, end: int) -> Node:
    """Some node spanning exactly ``start``-``end`` (render keys rules by byte range)."""
    for node in ts.walk(root):
        if node.start_byte == start and node.end_byte == end:
            return node
    raise LookupError(f"no node at {start}-{end}")


# --------------------------------------------------------------------------- add_pragma_unroll


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
