"""What a node of CUDA text says: its text, names, literals, and whether the Hopper build compiles it.

Why: the readers of C++/CUDA must read the same text the same way: extract's scanners
(:mod:`extract.file_scan`, :mod:`extract.launch_sites`, :mod:`extract.cxx_nodes`), the launch
sites both stages find (:mod:`source.launches`), optimize's region model (:mod:`optimize.cuda_regions`), the facts
read from it (:mod:`optimize.cuda_facts`), the features the planner uses (:mod:`optimize.features`)
and the mechanical edits (:mod:`optimize.transforms`). This module is the small vocabulary they
share over :mod:`source.treesitter`'s nodes: a node's text, the names it spans, a qualified name's
last part, its operands, a C++ number literal's value, and which preprocessor branches the Hopper
build compiles.

What must stay true:
- Nodes come from :func:`source.treesitter.parse` (the one parse entry) and queries run through
  :func:`source.treesitter.matches`; nothing here builds a parser or a query itself.
- A value that cannot be read is ``None``, never a guess: :func:`parse_number`
  of a non-literal, :func:`binary_value` of an unknown operand.
- :data:`PREPROCESSOR` is the Hopper build (``-DSGL_CUDA_ARCH=900``, CUDA 13); a
  symbol not listed is unknown and both of its branches count as active.
- No torch, no CUDA: this runs on the CPU machine.
"""

from __future__ import annotations

import re

from pipeline.target import TARGET
from source import treesitter as ts
from source.treesitter import Node

#: A compile-time value as C++ would compute it (``true`` is a bool, not 1).
ConstValue = int | float | bool

# --------------------------------------------------------------------------- node text


def text_of(src: bytes, node: Node) -> str:
    """The source text of ``node`` (bytes that are no UTF-8 read as U+FFFD)."""
    return src[node.start_byte : node.end_byte].decode("utf-8", "replace")


def names_in(src: bytes, node: Node, *, fields: bool = False) -> set[str]:
    """The identifiers ``node`` spans; with ``fields``, member names too (``p.x`` gives ``p`` and ``x``)."""
    kinds = ("identifier", "field_identifier") if fields else ("identifier",)
    return {text_of(src, n) for n in ts.walk(node) if n.type in kinds}


def last_name(text: str) -> str:
    """``device::warp::reduce_sum<32>`` -> ``reduce_sum``."""
    text = re.sub(r"<.*>$", "", text.strip(), flags=re.S)
    return re.split(r"::|\.|->", text)[-1].strip()


def named_children(node: Node) -> list[Node]:
    """``node``'s named children without comments (a comment is never an operand)."""
    return [c for c in node.children if c.is_named and c.type != "comment"]


def strip_parens(node: Node) -> Node:
    """``((x))`` -> ``x``: the expression inside redundant parentheses."""
    while node.type == "parenthesized_expression" and node.named_child_count == 1:
        node = node.named_children[0]
    return node


def prev_named_sibling(node: Node) -> Node | None:
    """The named sibling before ``node``, comments skipped (where a ``#pragma`` sits)."""
    sib = node.prev_sibling
    while sib is not None and (not sib.is_named or sib.type == "comment"):
        sib = sib.prev_sibling
    return sib


def parse_number(text: str) -> int | float | None:
    """A C++ number literal's value (digit separators and ``u``/``l``/``f`` suffixes
    dropped), or None when ``text`` is no number."""
    raw = text.replace("'", "").strip()
    try:
        if re.fullmatch(r"0[xX][0-9a-fA-F]+[uUlL]*", raw):
            return int(raw.rstrip("uUlL"), 16)
        if re.fullmatch(r"\d+[uUlL]*", raw):
            return int(raw.rstrip("uUlL"))
        return float(raw.rstrip("fFlL"))
    except ValueError:
        return None


def binary_value(op: str, left: ConstValue | None, right: ConstValue | None) -> ConstValue | None:
    """``left op right`` with C++'s integer division; None when an operand is
    unknown, the operator is not arithmetic/logical/comparison, or C++ would be
    undefined (division by zero)."""
    if left is None or right is None:
        return None
    try:
        if op == "+":
            return left + right
        if op == "-":
            return left - right
        if op == "*":
            return left * right
        if op == "/":
            if right == 0:
                return None
            both_int = isinstance(left, int) and isinstance(right, int)
            return left // right if both_int else left / right
        if op == "%":
            return left % right if right else None
        if op == "<<":
            return int(left) << int(right)
        if op == ">>":
            return int(left) >> int(right)
        if op == "==":
            return left == right
        if op == "!=":
            return left != right
        if op == "<":
            return left < right
        if op == "<=":
            return left <= right
        if op == ">":
            return left > right
        if op == ">=":
            return left >= right
        if op == "&&":
            return bool(left) and bool(right)
        if op == "||":
            return bool(left) or bool(right)
        if op == "&":
            return int(left) & int(right)
        if op == "|":
            return int(left) | int(right)
    except TypeError:
        return None
    return None


def is_float_literal(text: str) -> bool:
    raw = text.strip()
    if raw.lower().startswith("0x"):
        return False
    return bool(re.fullmatch(r"(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?[fF]", raw)) or bool(
        re.fullmatch(r"(\d+\.\d*|\.\d+)([eE][-+]?\d+)?[fF]?|\d+[eE][-+]?\d+[fF]?", raw)
    )


def is_double_literal(text: str) -> bool:
    return is_float_literal(text) and not text.strip().lower().endswith("f")


def contains_double(src: bytes, node: Node) -> bool:
    return any(n.type == "number_literal" and is_double_literal(text_of(src, n)) for n in ts.walk(node))


#: Preprocessor symbols as the Hopper build sees them (``-DSGL_CUDA_ARCH=900``, CUDA 13);
#: ``None`` = known to be undefined. Symbols not listed are unknown: both branches count.
PREPROCESSOR: dict[str, int | None] = {
    "SGL_CUDA_ARCH": TARGET.sgl_cuda_arch,
    "SGL_ARCH_HOPPER_OR_GREATER": 1,
    "SGL_ARCH_BLACKWELL_OR_GREATER": 0,
    "USE_ROCM": None,
}


def _pp_value(src: bytes, node: Node | None) -> int | None:
    """Value of a preprocessor condition, or None when it depends on an unknown symbol (or an operand
    the tree lacks)."""
    if node is None:
        return None
    t = node.type
    if t == "number_literal":
        value = parse_number(text_of(src, node))
        return int(value) if isinstance(value, (int, float)) else None
    if t == "identifier":
        name = text_of(src, node)
        if name in PREPROCESSOR:
            value = PREPROCESSOR[name]
            return 0 if value is None else value
        return None
    if t == "preproc_defined":
        ident = next((c for c in node.children if c.type == "identifier"), None)
        if ident is None or text_of(src, ident) not in PREPROCESSOR:
            return None
        return int(PREPROCESSOR[text_of(src, ident)] is not None)
    if t == "parenthesized_expression" and node.named_child_count == 1:
        return _pp_value(src, node.named_children[0])
    if t == "unary_expression":
        value = _pp_value(src, node.child_by_field_name("argument"))
        op = text_of(src, node.children[0])
        return None if value is None else int(not value) if op == "!" else -value if op == "-" else value
    if t == "binary_expression":
        op = text_of(src, ts.field(node, "operator"))
        left = _pp_value(src, node.child_by_field_name("left"))
        right = _pp_value(src, node.child_by_field_name("right"))
        if op == "&&" and (left == 0 or right == 0):
            return 0
        if op == "||" and ((left or 0) != 0 or (right or 0) != 0):
            return 1
        value = binary_value(op, left, right)
        return None if value is None else int(value)
    return None


def _pp_condition(src: bytes, node: Node) -> bool | None:
    """Truth of a preproc_if / preproc_elif / preproc_ifdef node's own condition."""
    if node.type == "preproc_ifdef":
        name_node = node.child_by_field_name("name")
        name = text_of(src, name_node) if name_node is not None else ""
        if name not in PREPROCESSOR:
            return None
        defined = PREPROCESSOR[name] is not None
        negated = node.children[0].type == "#ifndef"
        return defined != negated
    cond = node.child_by_field_name("condition")
    value = _pp_value(src, cond) if cond is not None else None
    return None if value is None else bool(value)


def is_active(src: bytes, node: Node) -> bool:
    """False when ``node`` sits in a preprocessor branch the Hopper build leaves out."""
    child = node
    cursor = node.parent
    while cursor is not None:
        if cursor.type in ("preproc_if", "preproc_elif", "preproc_ifdef"):
            alt = cursor.child_by_field_name("alternative")
            in_alt = alt is not None and alt.start_byte <= child.start_byte and child.end_byte <= alt.end_byte
            cond = _pp_condition(src, cursor)
            if (in_alt and cond is True) or (not in_alt and cond is False):
                return False
        child = cursor
        cursor = cursor.parent
    return True


def active_children(src: bytes, node: Node) -> list[Node]:
    """Named children of ``node`` with preprocessor conditionals flattened to their active parts."""
    return [y for c in named_children(node) for y in _flatten_pp(src, c)]


_PP_CONDITIONALS = ("preproc_if", "preproc_elif", "preproc_ifdef", "preproc_else")


def _flatten_pp(src: bytes, node: Node) -> list[Node]:
    if node.type not in _PP_CONDITIONALS:
        return [node]
    if node.type == "preproc_else":
        return [y for c in named_children(node) for y in _flatten_pp(src, c)]
    cond_node = node.child_by_field_name("name" if node.type == "preproc_ifdef" else "condition")
    alt = node.child_by_field_name("alternative")
    cond = _pp_condition(src, node)
    out: list[Node] = []
    if cond is not False:
        for c in named_children(node):
            if c != cond_node and c != alt:
                out.extend(_flatten_pp(src, c))
    if alt is not None and cond is not True:
        out.extend(_flatten_pp(src, alt))
    return out
