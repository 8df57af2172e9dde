"""``fast_math``: precise device math swapped for Hopper's fast intrinsics (``expf`` -> ``__expf``,
``1.0f / x`` -> ``__frcp_rn(x)``, ...), one op family at a time.

A transform under the contract of :mod:`optimize.transforms` (byte-exact
edits that parse). What must stay true: nothing in a constant expression or in double precision is
touched, and an op not in :data:`FAST_MATH_OPS` is a :class:`~optimize.transforms.edits.TransformError`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from optimize.cuda_facts import (
    SLOW_MATH,
    float_names,
    is_float_expr,
)
from optimize.cuda_regions import Region
from optimize.features import Features
from optimize.transforms.edits import Edit, NotApplicable, TransformError, apply_edits
from optimize.transforms.spec import Params, TransformSpec
from source import treesitter as ts
from source.cuda_text import contains_double, last_name, strip_parens, text_of
from source.treesitter import Node

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
        for m in ts.matches("calls", f.body):
            callee = m["callee"][0]
            raw = text_of(src, callee).strip()
            name = last_name(raw)
            fast = SLOW_MATH.get(name)
            if name in wanted and fast and raw in (name, f"::{name}", f"std::{name}"):

                def fast_call(_n: Node, fast: str = fast) -> bytes:
                    return fast.encode()

                rules[(callee.start_byte, callee.end_byte)] = fast_call
        scalars, pairs = float_names(region, f)
        for m in ts.matches("arithmetic", f.body):
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
                inner.type == "call_expression" and last_name(text_of(src, ts.field(inner, "function"))) == "sqrtf"
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


def _fast_math_targets(features: Features, point: Params) -> list[Params]:
    ops = point.get("ops") or list(FAST_MATH_OPS)
    present = [op for op in ops if features.math_sites.get(op)]
    return [{"ops": present}] if present else []


SPECS = (
    TransformSpec(
        "fast_math",
        fast_math,
        {"ops": f"subset of {sorted(FAST_MATH_OPS)}"},
        (),
        _fast_math_targets,
        "precise math -> fast intrinsics in device code",
        choice=("ops",),
    ),
)

__all__ = ["FAST_MATH_OPS", "SPECS", "fast_math"]
