"""What a region's device and launch code does, read from the region model.

Why: the features the planner uses (:mod:`optimize.features`) and the mechanical
transforms (:mod:`optimize.transforms`) ask the same questions of CUDA code: is
this a float expression, which loops have a compile-time trip count, where are
the PDL wait and trigger, how wide are the vectors a kernel moves, how much
static shared memory it declares, how a launch's grid is shaped and whether it
turns PDL on, which integer constants have a literal value. The answers are here, one function per question, over
:class:`optimize.cuda_regions.Region`.

What must stay true:
- Every answer is read from the region texts only; a fact that cannot be read
  is ``None`` (unknown), never a guess dressed as a fact.
- Name tables (:data:`SLOW_MATH`, :data:`FAST_INTRINSICS`, :data:`CACHE_HINT_NAMES`)
  are written once, here.
- No torch, no CUDA: this runs on the CPU machine.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from optimize.cuda_functions import RegionDoc, RegionFunction
from optimize.cuda_regions import ALIGNED_VECTOR_TYPES, LaunchExpr, Region
from source import treesitter as ts
from source.cuda_text import (
    contains_double,
    is_float_literal,
    last_name,
    named_children,
    names_in,
    parse_number,
    prev_named_sibling,
    strip_parens,
    text_of,
)
from source.treesitter import Node

#: precise libm calls -> the fast intrinsic that replaces them (None: no direct intrinsic).
SLOW_MATH: dict[str, str | None] = {
    "expf": "__expf",
    "exp10f": "__exp10f",
    "logf": "__logf",
    "log2f": "__log2f",
    "log10f": "__log10f",
    "sinf": "__sinf",
    "cosf": "__cosf",
    "tanf": "__tanf",
    "powf": "__powf",
    # tanh.approx.f32 (nvcc 13.0 here): one instruction where the precise tanhf is an ex2.approx, a
    # division and a dozen more; relative error about 2^-11, so the baseline oracle decides per op
    "tanhf": "__tanhf",
    "erff": None,
    "exp": None,
    "log": None,
    "pow": None,
    "sqrt": None,
    "tanh": None,
}
FAST_INTRINSICS = {
    "__expf",
    "__exp10f",
    "__logf",
    "__log2f",
    "__log10f",
    "__sinf",
    "__cosf",
    "__tanf",
    "__powf",
    "__tanhf",
    "__fdividef",
    "__frcp_rn",
    "__frsqrt_rn",
    "__fsqrt_rn",
    "rsqrtf",
    "rsqrt",
    "__saturatef",
}
_FLOAT_FUNCS = set(SLOW_MATH) | FAST_INTRINSICS | {"sqrtf", "fabsf", "fmaxf", "fminf", "fmaf", "erff", "tanhf"}
_FLOAT_TYPES = {"float", "fp32_t"}
_FLOAT_PAIR_TYPES = {"float2", "fp32x2_t", "float4", "fp32x4_t"}
_LOAD_NAMES = {
    "load",
    "load_as",
    "__ldg",
    "ldg",
    "SGLANG_LDG",
    "load_bytes",
    "__ldcs",
    "__ldcg",
    "__ldca",
    "__ldlu",
    "__ldcv",
}
CACHE_HINT_NAMES = {"__ldg", "SGLANG_LDG", "__ldcs", "__ldcg", "__ldlu", "__ldcv", "__stcs", "__stwt", "__stcg"}
_WAIT_NAMES = {"PDLWaitPrimary", "cudaGridDependencySynchronize"}
_TRIGGER_NAMES = {"PDLTriggerSecondary", "cudaTriggerProgrammaticLaunchCompletion"}


_VECTOR_TYPES_16 = {"float4", "fp32x4_t", "int4", "uint4", "double2", "longlong2", "ulonglong2"}


GridKind = Literal["per_item", "per_row", "persistent", "mixed", "unknown", "none"]
PdlMode = Literal["flag", "on", "off", "absent", "unsupported"]


def float_names(region: Region, f: RegionFunction) -> tuple[set[str], set[str]]:
    """(float scalars, float pair/quad containers) declared in ``f`` (params included)."""
    scalars: set[str] = set()
    pairs: set[str] = set()
    src = f.doc.src
    for node in ts.walk(f.node):
        if node.type not in ("declaration", "parameter_declaration"):
            continue
        type_node = node.child_by_field_name("type")
        type_name = last_name(text_of(src, type_node)) if type_node is not None else ""
        declarators = [c for c in node.children_by_field_name("declarator")]
        names: list[tuple[str, Node | None]] = []
        for declarator in declarators:
            value = None
            d: Node | None = declarator
            if declarator.type == "init_declarator":
                value = declarator.child_by_field_name("value")
                d = declarator.child_by_field_name("declarator")
            if d is None:
                continue
            if d.type in ("structured_binding_declarator", "reference_declarator"):
                for ident in ts.walk(d):
                    if ident.type == "identifier":
                        names.append((text_of(src, ident), value))
            elif d.type == "identifier":
                names.append((text_of(src, d), value))
            elif d.type == "array_declarator":
                array_of = d.child_by_field_name("declarator")
                if array_of is not None:
                    names.append((text_of(src, array_of), value))
        for name, value in names:
            if type_name in _FLOAT_TYPES:
                scalars.add(name)
            elif type_name in _FLOAT_PAIR_TYPES:
                pairs.add(name)
            elif value is not None and re.search(r"cast<\s*(fp32x2_t|float2)\s*>|make_float2", text_of(src, value)):
                # structured bindings of a float pair: `const auto [x, y] = cast<fp32x2_t>(v)`
                scalars.add(name)
    return scalars, pairs


def is_float_expr(src: bytes, node: Node | None, scalars: set[str], pairs: set[str], depth: int = 0) -> bool:
    """Whether an expression has float type, judged from literals, names and calls."""
    if node is None or depth > 20:
        return False
    t = node.type
    if t == "number_literal":
        return is_float_literal(text_of(src, node))
    if t == "identifier":
        return text_of(src, node) in scalars
    if t == "field_expression":
        base = node.child_by_field_name("argument")
        return base is not None and base.type == "identifier" and text_of(src, base) in pairs
    if t == "call_expression":
        callee = node.child_by_field_name("function")
        text = text_of(src, callee) if callee is not None else ""
        name = last_name(text)
        if name in _FLOAT_FUNCS:
            return True
        return bool(re.search(r"(static_cast|cast)\s*<\s*(float|fp32_t)\s*>", text))
    if t in ("parenthesized_expression", "unary_expression", "binary_expression"):
        if t == "binary_expression":
            op = text_of(src, ts.field(node, "operator"))
            if op in ("<", ">", "<=", ">=", "==", "!=", "&&", "||", "%", "&", "|", "^", "<<", ">>"):
                return False
        return any(is_float_expr(src, c, scalars, pairs, depth + 1) for c in named_children(node))
    if t == "conditional_expression":
        return any(
            is_float_expr(src, node.child_by_field_name(k), scalars, pairs, depth + 1)
            for k in ("consequence", "alternative")
        )
    return False


# --------------------------------------------------------------------------- per-kernel analyses


def has_unroll_pragma(src: bytes, loop: Node) -> bool:
    prev = prev_named_sibling(loop)
    if prev is None or prev.type != "preproc_call":
        return False
    return bool(re.match(rb"\s*#\s*pragma\s+unroll\b", src[prev.start_byte : prev.end_byte]))


@dataclass
class LoopInfo:
    node: Node
    compile_time: bool
    unrolled: bool
    grid_stride: bool
    invariant_loads: int


def initialized_from(src: bytes, body: Node, pattern: re.Pattern[str], before: int) -> set[str]:
    """Names ``body`` declares before byte ``before`` with an initializer matching ``pattern``
    (``const int64_t stride = blockDim.x * gridDim.x;`` for ``gridDim``)."""
    out: set[str] = set()
    for n in ts.walk(body):
        if n.type == "init_declarator" and n.start_byte < before:
            name, value = n.child_by_field_name("declarator"), n.child_by_field_name("value")
            if name is not None and value is not None and pattern.search(text_of(src, value)):
                out.add(text_of(src, name))
    return out


_GRID_DIM = re.compile(r"\bgridDim\b")


def loops_of(region: Region, f: RegionFunction) -> list[LoopInfo]:
    out: list[LoopInfo] = []
    src = f.doc.src
    for m in ts.matches("loops", f.body):
        if "for" in m:
            node = m["for"][0]
            cond = m.get("cond", [None])[0]
            bound = None
            if cond is not None and cond.type == "binary_expression":
                op = text_of(src, ts.field(cond, "operator"))
                if op in ("<", "<=", "!="):
                    bound = cond.child_by_field_name("right")
                elif op in (">", ">="):
                    bound = cond.child_by_field_name("left")
            compile_time = bound is not None and region.is_compile_time(f.doc, bound)
            update = m.get("update", [None])[0]
            # by gridDim itself, or by a name set from it (bias_gelu's `vec_id += stride`)
            grid_stride = update is not None and (
                b"gridDim" in src[update.start_byte : update.end_byte]
                or bool(names_in(src, update) & initialized_from(src, f.body, _GRID_DIM, update.start_byte))
            )
            loop_var = None
            init = m.get("init", [None])[0]
            if init is not None:
                for ident in ts.walk(init):
                    if ident.type == "identifier":
                        loop_var = text_of(src, ident)
                        break
            invariant = 0 if compile_time or loop_var is None else _invariant_loads(src, m["body"][0], loop_var)
            out.append(LoopInfo(node, compile_time, has_unroll_pragma(src, node), grid_stride, invariant))
        else:
            node = (m.get("while") or m["do"])[0]
            out.append(LoopInfo(node, False, has_unroll_pragma(src, node), False, 0))
    return out


def _invariant_loads(src: bytes, body: Node, loop_var: str) -> int:
    """Loads in a run-time loop whose arguments do not depend on the loop variable."""
    dependent = {loop_var}
    for node in ts.walk(body):
        if node.type != "declaration":
            continue
        for d in node.children_by_field_name("declarator"):
            if d.type != "init_declarator":
                continue
            value = d.child_by_field_name("value")
            if value is not None and names_in(src, value) & dependent:
                dependent |= names_in(src, ts.field(d, "declarator"))
    count = 0
    for m in ts.matches("calls", body):
        name = last_name(text_of(src, m["callee"][0]))
        if name not in _LOAD_NAMES:
            continue
        args = m["args"][0]
        ids = names_in(src, args)
        if ids and not ids & dependent:
            count += 1
    return count


def _statement_call_name(src: bytes, stmt: Node) -> str:
    if stmt.type != "expression_statement" or stmt.named_child_count == 0:
        return ""
    expr = stmt.named_children[0]
    if expr.type == "call_expression":
        callee = expr.child_by_field_name("function")
        return last_name(text_of(src, callee)) if callee is not None else ""
    if expr.type == "gnu_asm_expression":
        text = text_of(src, expr)
        if "griddepcontrol.wait" in text:
            return "PDLWaitPrimary"
        if "griddepcontrol.launch_dependents" in text:
            return "PDLTriggerSecondary"
    return ""


def pdl_statements(src: bytes, body: Node) -> tuple[Node | None, Node | None, bool]:
    """(wait statement, trigger statement, trigger is the body's last statement) at the body's top level."""
    stmts = named_children(body)
    wait = next((s for s in stmts if _statement_call_name(src, s) in _WAIT_NAMES), None)
    trigger = next((s for s in stmts if _statement_call_name(src, s) in _TRIGGER_NAMES), None)
    at_end = bool(stmts) and trigger is not None and stmts[-1] == trigger
    return wait, trigger, at_end


def calls_in(src: bytes, node: Node) -> list[tuple[str, str, Node]]:
    out = []
    for m in ts.matches("calls", node):
        callee_text = text_of(src, m["callee"][0])
        out.append((last_name(callee_text), callee_text, m["call"][0]))
    return out


def asm_texts(src: bytes, node: Node) -> list[str]:
    return [text_of(src, n) for n in ts.walk(node) if n.type == "gnu_asm_expression"]


WARP_REDUCE_RE = re.compile(
    r"(__shfl_\w*sync|__reduce_\w+_sync|\bwarp::|cooperative_groups::reduce|\bcg::reduce|_warp$|WarpReduce)"
)
CTA_REDUCE_RE = re.compile(r"(\bcta::|_cta$|BlockReduce|block_reduce|blockReduce)")


def shared_declarations(region: Region, f: RegionFunction) -> tuple[int | None, int, bool]:
    """(static shared bytes or None when unknown, 2-D shared arrays, dynamic shared used)."""
    src = f.doc.src
    total: int | None = 0
    two_d = 0
    dynamic = False
    for node in ts.walk(f.body):
        if node.type != "declaration":
            continue
        quals = [text_of(src, c) for c in node.children if c.type in ("type_qualifier", "storage_class_specifier")]
        if "__shared__" not in quals:
            continue
        if "extern" in quals:
            dynamic = True
            continue
        elem = region.type_bytes(f.doc, node.child_by_field_name("type"))
        for d in node.children_by_field_name("declarator"):
            dims: list[Node] = []
            cursor: Node | None = d
            while cursor is not None and cursor.type == "array_declarator":
                size = cursor.child_by_field_name("size")
                if size is not None:
                    dims.append(size)
                cursor = cursor.child_by_field_name("declarator")
            if len(dims) >= 2:
                two_d += 1
            values = [region.evaluate(f.doc, s) for s in dims]
            counts = [v for v in values if isinstance(v, int)]
            if total is None or elem is None or len(counts) != len(values):
                total = None
                continue
            n = elem
            for v in counts:
                n *= v
            total += n
    return total, two_d, dynamic


def widest_vector_bytes(region: Region, f: RegionFunction) -> int | None:
    src = f.doc.src
    widths: list[int] = []
    scope = f.templates[0] if f.templates and f.templates[0] == f.node.parent else f.node
    for m in ts.matches("templates", f.body):
        if "type" not in m:
            continue
        node = m["type"][0]
        name = last_name(text_of(src, m["name"][0]))
        if name in ALIGNED_VECTOR_TYPES:
            size = region.type_bytes(f.doc, node)
            if size:
                widths.append(size)
        elif "vec" in name.lower():
            for arg in named_children(m["args"][0]):
                value = region.evaluate(f.doc, arg)
                if isinstance(value, int) and value in (4, 8, 16, 32):
                    widths.append(value)
    for node in ts.walk(scope):
        if node.type == "type_identifier" and text_of(src, node) in _VECTOR_TYPES_16:
            widths.append(16)
    return max(widths) if widths else None


def declares_int64(src: bytes, f: RegionFunction) -> bool:
    for node in ts.walk(f.body):
        if node.type == "declaration":
            type_node = node.child_by_field_name("type")
            if type_node is not None and last_name(text_of(src, type_node)) in (
                "int64_t",
                "uint64_t",
                "size_t",
                "long",
            ):
                if not any(
                    d.type == "pointer_declarator"
                    or (d.type == "init_declarator" and ts.field(d, "declarator").type == "pointer_declarator")
                    for d in node.children_by_field_name("declarator")
                ):
                    return True
    return False


def division_counts(region: Region, f: RegionFunction) -> dict[str, int]:
    src = f.doc.src
    scalars, pairs = float_names(region, f)
    counts = {"float": 0, "rcp": 0, "rsqrt": 0, "fdividef": 0, "int_runtime": 0}
    for m in ts.matches("arithmetic", f.body):
        op = text_of(src, m["op"][0])
        left, right, expr = m["left"][0], m["right"][0], m["expr"][0]
        floaty = is_float_expr(src, left, scalars, pairs) or is_float_expr(src, right, scalars, pairs)
        if op == "/" and floaty:
            counts["float"] += 1
            if contains_double(src, expr):
                continue
            if _is_one(src, left):
                inner = strip_parens(right)
                if inner.type == "call_expression" and last_name(text_of(src, ts.field(inner, "function"))) == "sqrtf":
                    counts["rsqrt"] += 1
                else:
                    counts["rcp"] += 1
            else:
                counts["fdividef"] += 1
        elif not floaty and not region.is_compile_time(f.doc, right):
            counts["int_runtime"] += 1
    return counts


def _is_one(src: bytes, node: Node) -> bool:
    node = strip_parens(node)
    return node.type == "number_literal" and text_of(src, node).strip() in ("1.0f", "1.f", "1.0F", "1.F", "1.00f")


# --------------------------------------------------------------------------- launches


def classify_grid(blob: str) -> GridKind:
    if re.search(r"\bmin\b", blob) and re.search(
        r"(sm_count|num_?sm|kNumSM|multiProcessorCount|occupancy)", blob, re.I
    ):
        return "persistent"
    if re.search(r"(div_ceil|ceil_div|cdiv|DIV_UP|\+\s*\w+\s*-\s*1\s*\)\s*/)", blob):
        return "per_item"
    if re.search(r"(token|\brows?\b|num_rows|batch|\bN\.unwrap\(\))", blob, re.I):
        return "per_row"
    return "unknown"


def pdl_mode(region: Region, launch: LaunchExpr) -> PdlMode:
    if launch.chevron:
        return "unsupported"
    src = launch.doc.src
    if launch.runtime:
        scope = launch.func.node if launch.func is not None else launch.doc.root
        return (
            "on"
            if b"cudaLaunchAttributeProgrammaticStreamSerialization" in src[scope.start_byte : scope.end_byte]
            else "absent"
        )
    for method, args in launch.pdl_args or []:
        if method == "enable_pdl":
            named = named_children(args)
            if not named:
                return "on"  # enable_pdl() defaults to true
            arg = named[0]
            value = region.evaluate(launch.doc, arg)
            if value is True:
                return "on"
            if value is False:
                return "off"
            is_param, _ = region.template_binding(launch.doc, arg, last_name(text_of(src, arg)))
            return "flag" if is_param else "on"
        if method == "config":
            text = text_of(src, args)
            hit = re.search(r"\.use_pdl\s*=\s*([^,}]+)", text)
            if hit:
                flag = hit.group(1).strip()
                return "on" if flag == "true" else "off" if flag == "false" else "flag"
    return "absent"


def launches_on_path(region: Region, f: RegionFunction, sites: set, node: Node, visiting: set[str]) -> int:
    src = f.doc.src
    if (node.start_byte, node.end_byte) in sites:
        return 1
    if node.type == "if_statement":
        cond = node.child_by_field_name("condition")
        then = node.child_by_field_name("consequence")
        other = node.child_by_field_name("alternative")
        n_cond = launches_on_path(region, f, sites, cond, visiting) if cond is not None else 0
        n_then = launches_on_path(region, f, sites, then, visiting) if then is not None else 0
        n_else = launches_on_path(region, f, sites, other, visiting) if other is not None else 0
        return n_cond + max(n_then, n_else)
    if node.type == "call_expression":
        callee = node.child_by_field_name("function")
        name = last_name(text_of(src, callee)) if callee is not None else ""
        inner = sum(launches_on_path(region, f, sites, c, visiting) for c in node.children)
        target = next((h for h in region.hosts if h.name == name and h.owner_name == f.owner_name), None)
        if target is not None and target.qualname not in visiting:
            inner += launches_on_path(
                region, target, launch_site_keys(region, target), target.body, visiting | {target.qualname}
            )
        return inner
    return sum(launches_on_path(region, f, sites, c, visiting) for c in node.children)


def launch_site_keys(region: Region, f: RegionFunction) -> set:
    return {(l.outer.start_byte, l.outer.end_byte) for l in region.launches if l.func is f}


# --------------------------------------------------------------------------- literal constants


def owner_name(doc: RegionDoc, node: Node) -> str | None:
    cursor = node.parent
    while cursor is not None:
        if cursor.type == "function_definition":
            return None
        if cursor.type in ("struct_specifier", "class_specifier"):
            name = cursor.child_by_field_name("name")
            return text_of(doc.src, name) if name is not None else None
        cursor = cursor.parent
    return None


def iter_literal_constants(region: Region) -> Iterator[tuple[RegionDoc, Node, str, Node]]:
    """(doc, declaration, name, integer literal node) of every constexpr/const integer with a literal value.

    The literal may sit inside ``static_cast<...>(...)`` or parentheses; the node
    yielded is the literal itself, so an edit touches only its digits.
    """
    for doc in region.docs:
        for m in ts.matches("declarations", doc.root):
            decl = m["decl"][0]
            if decl.type == "alias_declaration":
                continue
            quals = {
                text_of(doc.src, c) for c in decl.children if c.type in ("type_qualifier", "storage_class_specifier")
            }
            if not quals & {"constexpr", "const"}:
                continue
            literal = strip_parens(m["value"][0])
            while literal.type == "call_expression":
                callee = literal.child_by_field_name("function")
                args = literal.child_by_field_name("arguments")
                if (
                    callee is None
                    or last_name(text_of(doc.src, callee)) != "static_cast"
                    or args is None
                    or args.named_child_count != 1
                ):
                    break
                literal = strip_parens(args.named_children[0])
            if literal.type != "number_literal" or not isinstance(parse_number(text_of(doc.src, literal)), int):
                continue
            yield doc, decl, text_of(doc.src, m["name"][0]).strip(), literal
