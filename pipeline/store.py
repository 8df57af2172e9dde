"""The results store: every GPU measurement ever taken, in SQLite, for history and regressions.

``<work>/results/results.sqlite`` (WAL journal, ``synchronous=FULL``): a table of batches
(one ``kernelsmith bench`` or ``track run``: device, date, command, SGLang version or
commit, kernelsmith commit) and a table of their rows (op, dtype, shape, variant, time
and spread). A batch is written in one transaction, so a writer killed mid-batch leaves
the store as it was before that batch, and every batch committed before it whole.

A batch's key is the content hash of its JSON (as in the first, JSON-file format):
adding the same batch twice is a no-op. The first format (``history.jsonl`` +
``objects/``, :mod:`pipeline.store_json`) is imported when the store is opened; its files
are kept, never rewritten.

Regressions (:meth:`ResultsStore.regressions`) are change points over each series' whole
history (op, dtype, shape, variant, device), found with asv's step detection
(``asv.step_detect``), and kept where the step exceeds a noise-aware band:
max(``noise_pct``, ``k_spread`` x the measured spread). Reference rows (PyTorch eager,
torch.compile) are never kernel regressions.

What must stay true: the store imports no torch; figures enter it only from GPU runs
(the caller names the device); nothing committed is ever rewritten or lost.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import sqlite3
import sys
from collections.abc import Iterable, Iterator

from pipeline.errors import NotWritable, StaleRecordError, not_writable
from pipeline.record_io import content_hash, file_mode
from pipeline.store_records import REFERENCE_VARIANTS, Measurement, Regression, Row, changed_files

DB_NAME = "results.sqlite"
K_SPREAD = 2.0  # a step must exceed this many times the measured spread (and noise_pct)

SCHEMA = """
CREATE TABLE IF NOT EXISTS batches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    taken_at TEXT NOT NULL,
    device TEXT NOT NULL,
    command TEXT NOT NULL,
    sglang TEXT NOT NULL,
    kernelsmith TEXT NOT NULL DEFAULT '',
    notes TEXT NOT NULL DEFAULT '{}',
    n_rows INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS rows (
    batch_seq INTEGER NOT NULL REFERENCES batches(seq),
    op_id TEXT NOT NULL,
    dtype TEXT NOT NULL,
    shape TEXT NOT NULL,
    variant TEXT NOT NULL,
    time_us REAL NOT NULL,
    spread_pct REAL NOT NULL,
    gbps REAL,
    floor_us REAL
);
CREATE INDEX IF NOT EXISTS rows_by_series ON rows (op_id, dtype, shape, variant);
"""


def batch_key(measurement: Measurement) -> str:
    return content_hash(measurement.model_dump_json())[:32]


class ResultsStore:
    def __init__(self, work_dir: str | os.PathLike[str], *, import_json: bool = True) -> None:
        self.root = pathlib.Path(work_dir) / "results"
        self.db_path = self.root / DB_NAME
        self._import_json = import_json
        self._imported = False

    # ------------------------------------------------------------------ connection

    def _read_only(self) -> bool:
        """The store's folder refuses writes (a read-only work dir): reads still work, writes are NotWritable."""
        return self.root.is_dir() and not os.access(self.root, os.W_OK)

    def _not_writable(self, err: OSError | sqlite3.Error) -> NotWritable:
        typed = not_writable(err, self.root) if isinstance(err, OSError) else None
        return typed or NotWritable(
            f"cannot write in {self.root}: {err}",
            fix="make the folder writable, or point --work-dir (KERNELSMITH_WORK_DIR) at a writable folder",
        )

    def _connect_read_only(self) -> sqlite3.Connection:
        """A WAL database in a folder that refuses writes: SQLite cannot make its ``-shm`` file there, so
        it is opened immutable (nothing can change it) unless a ``-wal`` file holds committed batches
        (a writer killed before its checkpoint), which read-only mode reads through the existing ``-shm``."""
        wal = self.db_path.with_name(self.db_path.name + "-wal").exists()
        uri = f"{self.db_path.as_uri()}?{'mode=ro' if wal else 'immutable=1'}"
        return sqlite3.connect(uri, uri=True, timeout=60)

    @contextlib.contextmanager
    def _db(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        if not write and not self.db_path.exists():
            yield sqlite3.connect(":memory:")  # nothing stored yet: an empty, schema-less answer
            return
        fix = f"move {self.db_path} aside (the batches in it are lost; `kernelsmith bench` measures again)"
        read_only = not write and self._read_only()
        try:
            if write:
                self.root.mkdir(parents=True, exist_ok=True)
                if not self.db_path.exists():  # SQLite would make it 0644: the umask decides, as for every record
                    os.close(os.open(self.db_path, os.O_CREAT | os.O_WRONLY, file_mode()))
            conn = self._connect_read_only() if read_only else sqlite3.connect(self.db_path, timeout=60)
        except (OSError, sqlite3.Error) as err:
            refused = isinstance(err, OSError) and not_writable(err, self.root) is not None
            if write and (refused or self._read_only()):
                raise self._not_writable(err) from err
            raise StaleRecordError(f"results store {self.db_path} cannot be opened: {err}", fix=fix) from err
        try:
            if not read_only:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
            if write:
                conn.executescript(SCHEMA)
                _migrate(conn)
            yield conn
        except sqlite3.DatabaseError as err:
            if write and self._read_only():
                raise self._not_writable(err) from err
            raise StaleRecordError(f"results store {self.db_path} is not a readable database: {err}", fix=fix) from err
        finally:
            conn.close()

    def _ensure_imported(self) -> None:
        if self._imported or not self._import_json:
            return
        self._imported = True
        from pipeline.store_json import JsonStore

        legacy = JsonStore(self.root.parent)
        if not legacy.history_file.exists() or self._read_only():  # a read-only folder: imported when writable
            return
        for key in legacy.keys():
            if self._has(key):
                continue
            try:
                self._insert(legacy.get(key), key)
            except StaleRecordError as err:  # one bad object costs that batch, named, never the import
                print(f"warning: not imported: {err}", file=sys.stderr)

    def _has(self, key: str) -> bool:
        if not self.db_path.exists():
            return False
        with self._db(write=True) as conn:
            return conn.execute("SELECT 1 FROM batches WHERE key = ?", (key,)).fetchone() is not None

    def _insert(self, measurement: Measurement, key: str) -> None:
        with self._db(write=True) as conn:
            with conn:  # one transaction: the batch and its rows, or nothing
                if conn.execute("SELECT 1 FROM batches WHERE key = ?", (key,)).fetchone():
                    return
                cur = conn.execute(
                    "INSERT INTO batches (key, taken_at, device, command, sglang, kernelsmith, notes, n_rows) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        key,
                        measurement.taken_at,
                        measurement.device,
                        measurement.command,
                        measurement.sglang,
                        measurement.kernelsmith,
                        json.dumps(measurement.notes, sort_keys=True),
                        len(measurement.rows),
                    ),
                )
                seq = cur.lastrowid
                conn.executemany(
                    "INSERT INTO rows (batch_seq, op_id, dtype, shape, variant, time_us, spread_pct, gbps, floor_us) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        (seq, r.op_id, r.dtype, r.shape, r.variant, r.time_us, r.spread_pct, r.gbps, r.floor_us)
                        for r in measurement.rows
                    ],
                )

    # ------------------------------------------------------------------ API

    def add(self, measurement: Measurement) -> str:
        """Store a batch in one transaction; returns its key. Idempotent."""
        self._ensure_imported()
        key = batch_key(measurement)
        self._insert(measurement, key)
        return key

    def keys(self) -> list[str]:
        """Batch keys in arrival order."""
        self._ensure_imported()
        with self._db(write=False) as conn:
            if not _has_schema(conn):
                return []
            return [k for (k,) in conn.execute("SELECT key FROM batches ORDER BY seq")]

    def _batches(self, key: str | None = None) -> list[tuple[str, Measurement]]:
        """Every batch (or the one ``key`` names) with its rows, in arrival order: two queries, one connection."""
        self._ensure_imported()
        with self._db(write=False) as conn:
            if not _has_schema(conn):
                return []
            where, args = ("WHERE key = ?", (key,)) if key is not None else ("", ())
            heads = conn.execute(
                f"SELECT seq, key, taken_at, device, command, sglang, kernelsmith, notes FROM batches {where} ORDER BY seq",
                args,
            ).fetchall()
            if not heads:
                return []
            rows: dict[int, list[Row]] = {seq: [] for seq, *_ in heads}
            only = (" WHERE batch_seq = ?", (heads[0][0],)) if key is not None else ("", ())
            floor = "floor_us" if "floor_us" in _columns(conn) else "NULL"  # a store no writer has migrated yet
            for seq, o, d, sh, v, t, sp, g, f in conn.execute(
                f"SELECT batch_seq, op_id, dtype, shape, variant, time_us, spread_pct, gbps, {floor} FROM rows"
                f"{only[0]} ORDER BY rowid",
                only[1],
            ):
                rows[seq].append(
                    Row(op_id=o, dtype=d, shape=sh, variant=v, time_us=t, spread_pct=sp, gbps=g, floor_us=f)
                )
        return [
            (
                k,
                Measurement(
                    device=device,
                    taken_at=taken_at,
                    command=command,
                    sglang=sglang,
                    kernelsmith=kernelsmith,
                    notes=json.loads(notes),
                    rows=rows[seq],
                ),
            )
            for seq, k, taken_at, device, command, sglang, kernelsmith, notes in heads
        ]

    def get(self, key: str) -> Measurement:
        found = self._batches(key)
        if not found:
            raise StaleRecordError(
                f"results store {self.db_path} has no batch {key}", fix="list them with `kernelsmith track`"
            )
        return found[0][1]

    def history(self, op_id: str | None = None, device: str | None = None) -> list[tuple[str, Measurement, Row]]:
        """Every row with its batch, in history order: releases in version order, any other
        source (a commit a nightly run measured) where the store first saw it, then by arrival.

        Why not plain arrival: a census of releases is resumed op by op, so an op's 0.5.22 rows
        can arrive after its 0.5.23 rows (on the H200, 2026-12-02, lora.kimi_k2_moe_fused_gate's
        did), and older releases are measured after newer ones when the history is extended back
        (on the H200, 2026-12-07, 0.5.19 before 0.5.18, which read as steps "introduced in 0.5.18,
        before: 0.5.19"). "Newest vs previous" or a step must compare releases in the order they
        came out. Sources that are not releases keep the place of their first arrival, and the
        releases fill the places releases held, in version order. Must stay true: two batches of
        one source keep their arrival order (a re-measurement is the newer figure).
        """
        batches = self._batches()
        order = _source_order(batch.sglang for _, batch in batches)
        ordered = sorted(enumerate(batches), key=lambda item: (order[item[1][1].sglang], item[0]))
        return [
            (key, batch, row)
            for _, (key, batch) in ordered
            if not device or batch.device == device
            for row in batch.rows
            if op_id is None or row.op_id == op_id
        ]

    def regressions(
        self, *, noise_pct: float = 3.0, op_id: str | None = None, k_spread: float = K_SPREAD
    ) -> list[Regression]:
        """Every step up still standing in a kernel series' history beyond its band (see the module doc)."""
        from asv.step_detect import detect_regressions, detect_steps

        series: dict[tuple[str, str, str, str, str], list[tuple[str, Measurement, Row]]] = {}
        for key, batch, row in self.history(op_id):
            if row.variant in REFERENCE_VARIANTS:
                continue
            series.setdefault((batch.device, row.op_id, row.dtype, row.shape, row.variant), []).append(
                (key, batch, row)
            )
        found: list[Regression] = []
        for (_, op, dtype, shape, variant), points in sorted(series.items()):
            if len(points) < 2:
                continue
            values = [p[2].time_us for p in points]
            _, _, steps = detect_regressions(detect_steps(values), threshold=noise_pct / 100.0, min_size=1)
            for before, after, low, high in steps or []:
                spread = max(points[before][2].spread_pct, points[after][2].spread_pct)
                band = max(noise_pct, k_spread * spread)
                slowdown = (high / low - 1.0) * 100.0
                if slowdown <= band:
                    continue
                found.append(
                    Regression(
                        op_id=op,
                        dtype=dtype,
                        shape=shape,
                        variant=variant,
                        best_us=low,
                        best_key=points[before][0],
                        now_us=high,
                        slowdown_pct=round(slowdown, 2),
                        introduced_key=points[after][0],
                        introduced_sglang=points[after][1].sglang,
                        before_sglang=points[before][1].sglang,
                        band_pct=round(band, 2),
                        changed_files=changed_files(points[before][1], points[after][1], op),
                    )
                )
        return found


#: A release as the census names it (``0.5.23``, ``v0.5.23``, ``0.5.23.post1``); a commit does not match.
_RELEASE = re.compile(r"v?(\d+(?:\.\d+)*)(?:\.post(\d+))?")


def release_key(source: str) -> tuple[tuple[int, ...], int] | None:
    """``source`` as a sortable release number, or None when it is not a release (a commit, a digest)."""
    found = _RELEASE.fullmatch(source.strip())
    if found is None:
        return None
    return tuple(int(part) for part in found.group(1).split(".")), int(found.group(2) or -1)


def _source_order(sources: Iterable[str]) -> dict[str, int]:
    """Each source's place in history: first arrival, with the places releases hold refilled by the
    releases in version order (see :meth:`ResultsStore.history`)."""
    seen = list(dict.fromkeys(sources))
    slots = [i for i, source in enumerate(seen) if release_key(source) is not None]
    releases = sorted((seen[i] for i in slots), key=lambda source: release_key(source) or ((), -1))
    for slot, source in zip(slots, releases):
        seen[slot] = source
    return {source: i for i, source in enumerate(seen)}


#: Columns added to ``rows`` after the first schema, with their SQL type: a store written before
#: them gets them (NULL in its old rows) the first time it is opened to write.
ADDED_COLUMNS = {"floor_us": "REAL"}


def _migrate(conn: sqlite3.Connection) -> None:
    have = _columns(conn)
    for name, sql_type in ADDED_COLUMNS.items():
        if name not in have:
            with conn:
                conn.execute(f"ALTER TABLE rows ADD COLUMN {name} {sql_type}")


def _columns(conn: sqlite3.Connection) -> set[str]:
    return {name for _, name, *_ in conn.execute("PRAGMA table_info(rows)")}


def _has_schema(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'batches'").fetchone() is not None


def now_iso() -> str:
    from pipeline.store_json import now_iso as _now

    return _now()


__all__ = ["DB_NAME", "K_SPREAD", "Measurement", "Regression", "ResultsStore", "Row", "batch_key", "now_iso"]
