"""Byte-exact replacement of source regions: the one way candidate code enters a file.

Every stage that turns a candidate into files (build, integrate, the evaluator)
calls :func:`apply_regions`; nobody else edits source text. The index records
spans as byte offsets into the original file (``extract.index``), so edits here
are byte edits, never line or string searches.

What must stay true:
- ``splice(original, [])`` is ``original``; splicing a span's own bytes back in
  gives back the same file, byte for byte.
- Every byte outside the edited ranges is kept exactly, in order.
- Edits are validated before anything is built: offsets are integers inside the
  file, ranges are non-empty or insertion points, and no two edits overlap
  (two insertions at the same point are ambiguous and also refused). Bad input
  raises :class:`SpliceError` saying which edit or span and how to fix it.
- :func:`apply_regions` never writes files; it returns new contents for the
  files it touched, so a caller can stage and rename (record_io.write_record's
  discipline) or compile from memory. :func:`candidate_overrides` is the same over
  a task folder's own copies (``src/``).
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterable, Mapping

from contract.layout import SRC_DIR
from pipeline.errors import KernelsmithError
from pipeline.records import Span, Task

Edit = tuple[int, int, bytes]


class SpliceError(KernelsmithError, ValueError):
    """An edit or region that cannot be applied (out of range, overlapping, unknown span)."""


def _check(original: bytes, edits: Iterable[Edit]) -> list[tuple[int, int, bytes, int]]:
    checked = []
    size = len(original)
    for index, edit in enumerate(edits):
        try:
            start, end, replacement = edit
        except (TypeError, ValueError) as err:
            raise SpliceError(
                f"edit #{index} is {edit!r}, not a (start, end, bytes) triple",
                fix="pass edits as (start_byte, end_byte, replacement_bytes)",
            ) from err
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)):
            raise SpliceError(f"edit #{index} has non-integer offsets {start!r}, {end!r}", fix="use byte offsets (int)")
        if not isinstance(replacement, (bytes, bytearray, memoryview)):
            raise SpliceError(
                f"edit #{index} replacement is {type(replacement).__name__}, not bytes",
                fix="encode text first (text.encode('utf-8'))",
            )
        if not 0 <= start <= end <= size:
            raise SpliceError(
                f"edit #{index} range [{start}, {end}) is outside the file (0..{size}) or reversed",
                fix="take offsets from the index of this very file version (re-run `kernelsmith extract`)",
            )
        checked.append((start, end, bytes(replacement), index))
    checked.sort(key=lambda e: (e[0], e[1]))
    # Sorted by start, an overlap anywhere shows up between neighbours.
    for (s1, e1, _r1, i1), (s2, e2, _r2, i2) in zip(checked, checked[1:]):
        if s2 < e1 or s1 == e1 == s2 == e2:
            raise SpliceError(
                f"edit #{i1} [{s1}, {e1}) and edit #{i2} [{s2}, {e2}) overlap",
                fix="merge the two edits into one, or edit disjoint ranges",
            )
    return checked


def splice(original: bytes, edits: list[Edit]) -> bytes:
    """Replace each ``original[start:end]`` by its bytes; all offsets refer to ``original``.

    Edits may come in any order. Adjacent edits (one ends where the next
    starts) are fine; an insertion (``start == end``) placed at the start of a
    non-empty edit goes before it.
    """
    checked = _check(original, edits)
    pieces: list[bytes] = []
    cursor = 0
    for start, end, replacement, _index in checked:
        pieces.append(original[cursor:start])
        pieces.append(replacement)
        cursor = end
    pieces.append(original[cursor:])
    return b"".join(pieces)


def apply_regions(files: Mapping[str, bytes], editable: list[Span], regions: Mapping[str, str]) -> dict[str, bytes]:
    """New contents of the files whose spans ``regions`` replaces.

    ``files``: path -> current bytes (the baseline the spans were taken from).
    ``editable``: the task's spans; names must be unique among them.
    ``regions``: span name -> new text (UTF-8) for exactly that span. Spans not
    named keep their bytes. Returns only the files touched.
    """
    by_name: dict[str, Span] = {}
    for candidate in editable:
        if candidate.name in by_name:
            raise SpliceError(
                f"two editable spans are both named {candidate.name!r} ({by_name[candidate.name].file}, {candidate.file})",
                fix="give each editable span a unique name in the task (re-run `kernelsmith extract`)",
            )
        by_name[candidate.name] = candidate
    per_file: dict[str, list[tuple[int, int, bytes]]] = {}
    names_by_file: dict[str, list[str]] = {}
    for name, text in regions.items():
        span = by_name.get(name)
        if span is None:
            known = ", ".join(sorted(by_name)) or "(none)"
            raise SpliceError(
                f"region {name!r} names no editable span",
                fix=f"use one of the task's span names: {known}",
            )
        if not isinstance(text, str):
            raise SpliceError(f"region {name!r} is {type(text).__name__}, not text", fix="pass the region as a str")
        if span.file not in files:
            raise SpliceError(
                f"span {name!r} is in {span.file}, which was not given",
                fix="pass the baseline bytes of every file the task's spans live in",
            )
        per_file.setdefault(span.file, []).append((span.start_byte, span.end_byte, text.encode("utf-8")))
        names_by_file.setdefault(span.file, []).append(name)
    out: dict[str, bytes] = {}
    for path, edits in per_file.items():
        try:
            out[path] = splice(files[path], edits)
        except SpliceError as err:
            raise SpliceError(
                f"{path}: cannot apply regions {', '.join(names_by_file[path])}: {err.message}",
                fix=err.fix,
            ) from err
    return out


def candidate_overrides(task_dir: str | os.PathLike[str], task: Task, regions: Mapping[str, str]) -> dict[str, bytes]:
    """The candidate's versions of the files its regions live in (the task folder's sources spliced)."""
    src = pathlib.Path(task_dir) / SRC_DIR
    files = {}
    for span in task.editable:
        if span.file not in files:
            files[span.file] = (src / span.file).read_bytes()
    return apply_regions(files, list(task.editable), dict(regions))
