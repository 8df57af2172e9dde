"""The results store's batches as plain data kept with the project: one JSON-lines file per batch.

Why: the census and nightly batches are what tracking exists for, and the SQLite store lives in
one machine's work folder (``<work>/results/results.sqlite``), where it can be lost with that
machine (issue 46: the census of four releases was). Each batch is also written as
``<folder>/<date>-<key>.jsonl``: a first line for the batch (``"kind": "batch"``: when, device,
command, SGLang release, the measuring code's commit, notes), then one self-contained line per row
(``"kind": "row"``: op, dtype, shape, variant, release, device, time and spread, GB/s, floor). The
folder can be committed (these are our own measurements, not SGLang source), and
:func:`rebuild` makes a store from it, so a clone redraws the dashboard with no GPU.

What must stay true: a file is written whole (staging file, then rename) and never rewritten (its
name holds the batch's content key); a batch read back is the batch written (its key is checked);
a corrupt file or line costs that batch, named by file and line, never the others.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Iterator
from dataclasses import dataclass

from pydantic import ValidationError

from pipeline.record_io import SCHEMA_VERSION
from pipeline.store import ResultsStore, batch_key
from pipeline.store_records import Measurement, Row

_ROW_FIELDS = ("op_id", "dtype", "shape", "variant", "time_us", "spread_pct", "gbps", "floor_us")


@dataclass(frozen=True)
class Problem:
    """A file or line that could not be read back: where, and what."""

    path: pathlib.Path
    line: int  # 1-based; 0: the file as a whole
    what: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else str(self.path)
        return f"{where}: {self.what}"


def file_name(key: str, measurement: Measurement) -> str:
    return f"{measurement.taken_at[:10]}-{key}.jsonl"


def lines(key: str, m: Measurement) -> list[str]:
    """The batch as JSON lines: its header, then one self-contained line per row."""
    head = {
        "kind": "batch",
        "key": key,
        "schema_version": m.schema_version,
        "taken_at": m.taken_at,
        "device": m.device,
        "command": m.command,
        "sglang": m.sglang,
        "kernelsmith": m.kernelsmith,
        "notes": m.notes,
        "rows": len(m.rows),
    }
    body = [
        {"kind": "row", "batch": key, "sglang": m.sglang, "device": m.device, "taken_at": m.taken_at}
        | {f: getattr(r, f) for f in _ROW_FIELDS}
        for r in m.rows
    ]
    return [json.dumps(x, sort_keys=True) for x in (head, *body)]


def write_batch(folder: pathlib.Path, key: str, measurement: Measurement) -> pathlib.Path:
    """``<folder>/<date>-<key>.jsonl``, written whole; a batch already there is left as it is."""
    path = folder / file_name(key, measurement)
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    staging.write_text("\n".join(lines(key, measurement)) + "\n", encoding="utf-8")
    staging.replace(path)
    return path


def read_file(path: pathlib.Path) -> tuple[str, Measurement] | Problem:
    """One file back as (key, batch), or the first problem found in it."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        return Problem(path, 0, f"cannot be read: {err}")
    records = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            records.append((number, json.loads(raw)))
        except json.JSONDecodeError as err:
            return Problem(path, number, f"not JSON ({err.msg}); the batch is left out")
    if not records or records[0][1].get("kind") != "batch":
        return Problem(path, 1, "no batch line first; the batch is left out")
    head = records[0][1]
    rows = []
    for number, record in records[1:]:
        if record.get("kind") != "row" or record.get("batch") != head.get("key"):
            return Problem(path, number, "not a row of this file's batch; the batch is left out")
        try:
            rows.append(Row(**{f: record[f] for f in _ROW_FIELDS if f in record}))
        except ValidationError as err:
            return Problem(path, number, f"not a row: {err.errors()[0]['msg']}; the batch is left out")
    if len(rows) != head.get("rows"):
        return Problem(path, 0, f"{len(rows)} rows where the batch line says {head.get('rows')}; the batch is left out")
    try:
        measurement = Measurement(
            schema_version=head.get("schema_version", SCHEMA_VERSION),
            device=head["device"],
            taken_at=head["taken_at"],
            command=head["command"],
            sglang=head["sglang"],
            kernelsmith=head.get("kernelsmith", ""),
            notes=head.get("notes", {}),
            rows=rows,
        )
    except (KeyError, ValidationError) as err:
        return Problem(path, 1, f"not a batch line: {err}; the batch is left out")
    key = batch_key(measurement)
    if key != head.get("key"):
        return Problem(
            path, 1, f"its figures do not hash to its key {head.get('key')} (edited?); the batch is left out"
        )
    return key, measurement


def read_folder(folder: pathlib.Path) -> Iterator[tuple[str, Measurement] | Problem]:
    for path in sorted(folder.glob("*.jsonl")):
        yield read_file(path)


def export(store: ResultsStore, folder: pathlib.Path) -> list[pathlib.Path]:
    """Every batch of the store not yet in ``folder``, written; returns the files written now. Only the
    missing batches are read from the store (a file's name ends with its batch's key): the census
    exports after every batch, and a store holds many."""
    there = {p.stem.rpartition("-")[2] for p in folder.glob("*.jsonl")} if folder.is_dir() else set()
    return [write_batch(folder, key, store.get(key)) for key in store.keys() if key not in there]


def rebuild(store: ResultsStore, folder: pathlib.Path) -> tuple[int, list[Problem]]:
    """Add every readable batch of ``folder`` to ``store`` (a batch it has is a no-op); returns how many
    batches were read and what could not be."""
    read, problems = 0, []
    for item in read_folder(folder):
        if isinstance(item, Problem):
            problems.append(item)
            continue
        store.add(item[1])
        read += 1
    return read, problems


__all__ = ["Problem", "export", "read_file", "read_folder", "rebuild", "write_batch"]
