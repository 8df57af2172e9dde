"""The edit machinery every mechanical transform uses: byte edits on region texts, checked to parse.

What must stay true: edits are byte-exact and never overlap; an edit that makes a region
parse worse than before is :class:`TransformError` (a bug of the transform), one that
changes nothing is :class:`NotApplicable`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from source import treesitter as ts
from source.treesitter import Node


class NotApplicable(Exception):
    """The transform has nothing to do on this code; ``reason`` says why."""

    def __init__(self, transform: str, reason: str) -> None:
        super().__init__(f"{transform}: {reason}")
        self.transform = transform
        self.reason = reason


class TransformError(ValueError):
    """Bad parameters for a transform, or an edit that would break the parse (a bug)."""


# --------------------------------------------------------------------------- edit machinery


@dataclass(frozen=True)
class Edit:
    span: str
    start: int  # byte offsets in the span's UTF-8 text
    end: int
    text: bytes


def apply_edits(transform: str, regions: Mapping[str, str], edits: Iterable[Edit]) -> dict[str, str]:
    """Apply non-overlapping byte edits; check each edited region still parses as well as before."""
    by_span: dict[str, list[Edit]] = {}
    for e in edits:
        by_span.setdefault(e.span, []).append(e)
    out = dict(regions)
    for span, span_edits in by_span.items():
        data = regions[span].encode("utf-8")
        span_edits.sort(key=lambda e: (e.start, e.end))
        for a, b in zip(span_edits, span_edits[1:]):
            if b.start < a.end:
                raise TransformError(
                    f"{transform}: overlapping edits in span {span!r} at bytes {a.start}-{a.end} and {b.start}-{b.end}"
                )
        new = bytearray(data)
        for e in reversed(span_edits):
            new[e.start : e.end] = e.text
        before = len(ts.problems(ts.parse(data).root_node))
        after = len(ts.problems(ts.parse(bytes(new)).root_node))
        if after > before:
            raise TransformError(
                f"{transform}: the edit of span {span!r} does not parse ({after} problem nodes, {before} before)",
                new.decode("utf-8", "replace")[:2000],
            )
        out[span] = bytes(new).decode("utf-8")
    if all(out[k] == regions[k] for k in regions):
        raise NotApplicable(transform, "the edits change nothing")
    return out


def line_start(src: bytes, pos: int) -> int:
    return src.rfind(b"\n", 0, pos) + 1


def line_end(src: bytes, pos: int) -> int:
    end = src.find(b"\n", pos)
    return len(src) if end < 0 else end + 1


def indent_of(src: bytes, node: Node) -> bytes:
    start = line_start(src, node.start_byte)
    prefix = src[start : node.start_byte]
    return prefix if prefix.strip() == b"" else b""


__all__ = ["Edit", "NotApplicable", "TransformError", "apply_edits", "indent_of", "line_end", "line_start"]
