"""Git-style unified diffs of byte strings, and the proof that only editable spans changed.

Why our own writer: the patch is taken between two in-memory versions of a few
files (no second tree on disk), and it must apply with both ``git apply`` and
``patch -p1``. The format written here is the subset both accept:

    diff --git a/<path> b/<path>
    index <old blob>..<new blob> <mode>
    --- a/<path>
    +++ b/<path>
    @@ -l,s +l,s @@
    ...

with git's ``\\ No newline at end of file`` marker where a side lacks the final
newline. Lines are compared as bytes, so a file in any encoding round-trips.

:func:`verify_spans` is the check that the patch changes nothing outside the
editable regions: the new file must be the old file's non-editable segments,
verbatim and in order, with arbitrary text between them. That is exactly "every
changed byte lies within an editable span", and unlike a line diff it cannot be
fooled by an alignment that smears a change across a span boundary.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from integrate.errors import PatchError

NO_NEWLINE = b"\\ No newline at end of file\n"


def git_blob_sha1(data: bytes) -> str:
    """The object id git gives a file with these bytes (for the ``index`` line)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_diff(
    path: str, old: bytes, new: bytes, *, mode: str = "100644", context: int = 3, created: bool = False
) -> bytes:
    """One file's git-style diff from ``old`` to ``new`` (``path`` without a/ b/); ``created``: a new
    file (``old`` empty), written as git writes one, from ``/dev/null``."""
    if old == new and not created:
        return b""
    a_lines = _lines(old)
    b_lines = _lines(new)
    body = list(
        difflib.diff_bytes(
            difflib.unified_diff,
            a_lines,
            b_lines,
            fromfile=b"a/" + path.encode(),
            tofile=b"b/" + path.encode(),
            n=context,
            lineterm=b"",
        )
    )
    out = [b"diff --git a/%s b/%s\n" % (path.encode(), path.encode())]
    if created:
        out += [
            b"new file mode %s\n" % mode.encode(),
            b"index %s..%s\n" % (b"0" * 12, git_blob_sha1(new)[:12].encode()),
        ]
        body[0] = b"--- /dev/null"
    else:
        out.append(
            b"index %s..%s %s\n" % (git_blob_sha1(old)[:12].encode(), git_blob_sha1(new)[:12].encode(), mode.encode())
        )
    # body[0:2] are the ---/+++ headers (lineterm=b"" left them bare); "@@" starts
    # a hunk header (content lines start with " ", "-" or "+").
    out += [body[0] + b"\n", body[1] + b"\n"]
    for line in body[2:]:
        if line.startswith(b"@@"):
            out.append(line + b"\n")
        elif line.endswith(b"\n"):
            out.append(line)
        else:  # the last line of a side that has no final newline
            out.append(line + b"\n" + NO_NEWLINE)
    return b"".join(out)


def _lines(data: bytes) -> list[bytes]:
    """Split on "\\n" only, keeping it (git and patch treat a lone "\\r" as line content)."""
    parts = data.split(b"\n")
    lines = [part + b"\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def patch_text(files: Iterable[tuple[str, bytes, bytes, str, bool]]) -> bytes:
    """Concatenate per-file diffs: (diff path, old, new, git mode, created) in the given order."""
    return b"".join(file_diff(path, old, new, mode=mode, created=created) for path, old, new, mode, created in files)


_DIFF_HEADER = re.compile(rb"^diff --git a/(\S+) b/(\S+)$", re.M)


def patched_paths(text: bytes) -> list[str]:
    """The paths a patch touches, from its ``diff --git`` headers (in order)."""
    paths = []
    for match in _DIFF_HEADER.finditer(text):
        a, b = match.group(1).decode(), match.group(2).decode()
        if a != b:
            raise PatchError(f"patch renames {a} to {b}; integrate never renames files")
        paths.append(a)
    return paths


@dataclass(frozen=True)
class Segment:
    """A non-editable stretch of the pristine file: [start, end)."""

    start: int
    end: int


def outside_segments(size: int, spans: Sequence[tuple[int, int]]) -> list[Segment]:
    """The complement of the (merged) spans in [0, size): always len(merged spans) + 1 segments."""
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if not 0 <= start <= end <= size:
            raise PatchError(f"span [{start}, {end}) lies outside the file (size {size})")
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    segments, pos = [], 0
    for start, end in merged:
        segments.append(Segment(pos, start))
        pos = end
    segments.append(Segment(pos, size))
    return segments


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def verify_spans(path: str, old: bytes, new: bytes, spans: Sequence[tuple[int, int]]) -> None:
    """Raise :class:`PatchError` unless ``new`` differs from ``old`` only inside ``spans``.

    ``spans`` are byte ranges of ``old``. The test: ``new`` = O0 R1 O1 R2 ... On
    where O0..On are ``old``'s segments outside the spans, verbatim, and R1..Rn
    are anything. O0 must be a prefix and On a suffix; the middle segments are
    matched leftmost-first, which finds a decomposition whenever one exists.
    """
    segments = outside_segments(len(old), spans)
    if len(segments) == 1:  # no spans at all: the file must be unchanged
        if new != old:
            raise PatchError(f"{path}: changed although it has no editable span")
        return
    first, last = segments[0], segments[-1]
    head = old[first.start : first.end]
    if not new.startswith(head):
        at = next(i for i in range(len(head)) if i >= len(new) or new[i] != head[i])
        raise PatchError(
            f"{path}: byte {at} (line {_line_of(old, at)}) changed, before the first editable span "
            f"(which starts at byte {first.end})",
            fix="a candidate may only rewrite its editable spans; regenerate the candidate or widen the task's spans",
        )
    tail = old[last.start : last.end]
    limit = len(new) - len(tail)
    if limit < len(head) or not new.endswith(tail):
        raise PatchError(
            f"{path}: the text after the last editable span (from byte {last.start}, line "
            f"{_line_of(old, last.start)}) changed",
            fix="a candidate may only rewrite its editable spans; regenerate the candidate or widen the task's spans",
        )
    pos = len(head)
    for seg in segments[1:-1]:
        piece = old[seg.start : seg.end]
        found = new.find(piece, pos, limit)
        if found < 0:
            raise PatchError(
                f"{path}: the text between editable spans at bytes [{seg.start}, {seg.end}) "
                f"(lines {_line_of(old, seg.start)}-{_line_of(old, seg.end)}) changed",
                fix="a candidate may only rewrite its editable spans; regenerate the candidate or widen the task's spans",
            )
        pos = found + len(piece)
