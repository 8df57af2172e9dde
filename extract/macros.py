"""Specifier macros of a C++/CUDA tree, and their masking before parsing.

Why: SGLang spells kernel and device specifiers through macros the grammar cannot
know (``SGL_DEVICE`` = ``__forceinline__ __device__``, per-file ``C4_KERNEL``,
CUTLASS/CuTe's ``CUTLASS_DEVICE``), and attribute calls (``__launch_bounds__(...)``)
it knows only in some positions. :func:`collect_macros` classifies every
``#define`` of the tree whose expansion is only specifiers; :func:`mask_macros`
blanks those names and attribute calls before tree-sitter parses a file.

What must stay true: masking keeps every offset (same-length blanks, newlines
kept), so spans found in the masked text index the original bytes; each mask
remembers whether it meant "kernel", "device" or "attr".
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from extract.cxx import balanced_end, strip_comments

# Tokens that may appear in a specifier macro's expansion.
_SPECIFIER_WORDS = {
    b"__global__": "kernel",
    b"__device__": "device",
    b"__host__": "attr",
    b"__forceinline__": "attr",
    b"__noinline__": "attr",
    b"__inline__": "attr",
    b"inline": "attr",
    b"static": "attr",
    b"constexpr": "attr",
    b"extern": "attr",
}
# Attribute calls the grammar does not know (or knows only in some positions);
# masked with their parenthesised arguments.
_ATTRIBUTE_CALLS = (b"__launch_bounds__", b"__cluster_dims__", b"__maxnreg__", b"__align__")
ATTRIBUTE_CALL = re.compile(rb"\b(?:" + b"|".join(_ATTRIBUTE_CALLS) + rb")\s*\(")

# Well-known macros of headers outside the tree (CUTLASS, CuTe) that SGLang's
# vendored kernels use as specifiers or statements. What they expand to is
# what matters here: a kernel marker, a device marker, or nothing syntactic.
EXTERNAL_MACROS: dict[str, str] = {
    "CUTLASS_GLOBAL": "kernel",
    "CUTLASS_DEVICE": "device",
    "CUTLASS_HOST_DEVICE": "device",
    "CUTE_DEVICE": "device",
    "CUTE_HOST_DEVICE": "device",
    "CUTE_UNROLL": "attr",
    "CUTE_NO_UNROLL": "attr",
    "CUTLASS_PRAGMA_UNROLL": "attr",
    "CUTLASS_PRAGMA_NO_UNROLL": "attr",
}

_DEFINE = re.compile(rb"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(?![\w(])((?:[^\n]*\\\n)*[^\n]*)", re.M)
_TOKEN = re.compile(rb"\[\[.*?\]\]|__attribute__\s*\(\(.*?\)\)|_Pragma\s*\(\s*\"[^\"]*\"\s*\)|[A-Za-z_]\w*|\S")


def _classify_expansion(body: bytes, known: dict[str, str]) -> str | None:
    """'kernel' / 'device' / 'attr' when ``body`` is only specifiers, else None.

    An empty body is not a specifier macro: include guards and feature flags
    are empty too, and blanking them in code would gain nothing.
    """
    body = strip_comments(body.replace(b"\\\n", b" ")).strip()
    if not body:
        return None
    # drop attribute calls with their arguments
    while True:
        match = ATTRIBUTE_CALL.search(body)
        if not match:
            break
        end = balanced_end(body, match.end() - 1, strings=False, unbalanced=-1)
        if end < 0:
            return None
        body = body[: match.start()] + b" " + body[end:]
    strongest = "attr"
    rank = {"attr": 0, "device": 1, "kernel": 2}
    for token in _TOKEN.findall(body):
        kind: str | None
        if token.startswith((b"[[", b"__attribute__", b"_Pragma")):
            kind = "attr"
        else:
            kind = _SPECIFIER_WORDS.get(token) or known.get(token.decode())
        if kind is None:
            return None
        if rank[kind] > rank[strongest]:
            strongest = kind
    return strongest


def _file_defines(data: bytes) -> list[tuple[str, bytes]]:
    return [(m.group(1).decode(), m.group(2)) for m in _DEFINE.finditer(data)]


def collect_macros(texts: Iterable[bytes]) -> dict[str, str]:
    """Tree-wide specifier macros: name -> 'kernel' | 'device' | 'attr'.

    A name counts only when every definition of it in the tree is made of
    specifiers; definitions may build on each other
    (``#define CLUSTER_TOPK_KERNEL TOPK_KERNEL __cluster_dims__(...)``), so the
    classification is iterated to a fixed point.
    """
    bodies: dict[str, list[bytes]] = {}
    for data in texts:
        for name, body in _file_defines(data):
            bodies.setdefault(name, []).append(body)
    table: dict[str, str] = dict(EXTERNAL_MACROS)
    rank = {"attr": 0, "device": 1, "kernel": 2}
    changed = True
    while changed:
        changed = False
        for name, defs in bodies.items():
            classified = [_classify_expansion(b, table) for b in defs]
            kinds = [k for k in classified if k is not None]
            if len(kinds) != len(classified):
                continue
            kind = max(kinds, key=rank.__getitem__)
            if table.get(name) != kind:
                table[name] = kind
                changed = True
    return table


def local_macros(data: bytes, tree_wide: dict[str, str]) -> dict[str, str]:
    """The macro table for one file: its own definitions win over the tree-wide ones."""
    table = dict(tree_wide)
    for name, body in _file_defines(data):
        kind = _classify_expansion(body, table)
        if kind is None:
            table.pop(name, None)
        else:
            table[name] = kind
    return table


@dataclasses.dataclass
class Mask:
    start: int
    end: int
    kind: str  # kernel | device | attr


def mask_macros(data: bytes, code: bytes, macros: dict[str, str]) -> tuple[bytes, list[Mask]]:
    """Blank specifier macros and attribute calls (same length), remembering what they meant."""
    masks: list[Mask] = []
    if macros:
        names = sorted(macros, key=len, reverse=True)
        pattern = re.compile(rb"\b(?:" + b"|".join(re.escape(n.encode()) for n in names) + rb")\b")
        for match in pattern.finditer(code):
            masks.append(Mask(match.start(), match.end(), macros[match.group().decode()]))
    for match in ATTRIBUTE_CALL.finditer(code):
        end = balanced_end(code, match.end() - 1, strings=False, unbalanced=-1)
        if end > 0:
            masks.append(Mask(match.start(), end, "attr"))
    if not masks:
        return data, []
    masks.sort(key=lambda m: m.start)
    buffer = bytearray(data)
    for m in masks:
        buffer[m.start : m.end] = re.sub(rb"[^\n]", b" ", data[m.start : m.end])
    return bytes(buffer), masks
