"""The results store: every GPU measurement ever taken, for history and regressions.

Layout under ``<work>/results/``:
- ``objects/<key>.json``: one :class:`Measurement` batch, content-addressed (the key is
  the sha256 of its canonical JSON), written to a staging file then renamed. An
  object never changes; writing the same batch twice is a no-op.
- ``history.jsonl``: append-only, one line per batch (key, when, what): the order in
  which batches arrived. A crash mid-append leaves at worst a torn last line: the next
  append moves that fragment to ``history.torn`` (kept, never thrown away) and starts its
  own line; readers skip a line they cannot read, with a warning, and still find a whole
  record glued onto a fragment by an older version.

Nightly tracking is `kernelsmith bench` on a schedule: each run adds a batch;
:func:`regressions` compares the newest batch with the best earlier figure for the
same (op, dtype, shape, variant) and reports slowdowns beyond the noise band.

What must stay true: the store imports no torch; figures enter it only from GPU
runs (the caller passes the device name); nothing is ever rewritten.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import tempfile
from datetime import UTC, datetime

from pydantic import Field

from pipeline.errors import StaleRecordError
from pipeline.records import SCHEMA_VERSION, Record, VersionedRecord, content_hash, file_mode


class Row(Record):
    op_id: str
    dtype: str
    shape: str  # ShapeCase label or "T=..,H=.."
    variant: str = "baseline"  # baseline | candidate:<id> | torch_eager | torch_compile
    time_us: float
    spread_pct: float = 0.0
    gbps: float | None = None


class Measurement(VersionedRecord):
    device: str  # GPU name as the driver reports it
    taken_at: str  # ISO-8601 UTC
    command: str
    sglang: str  # version or commit of the kernels measured
    rows: list[Row]
    notes: dict[str, str] = Field(default_factory=dict)


class Regression(Record):
    op_id: str
    dtype: str
    shape: str
    variant: str
    best_us: float
    best_key: str
    now_us: float
    slowdown_pct: float


class ResultsStore:
    def __init__(self, work_dir: str | os.PathLike[str]) -> None:
        self.root = pathlib.Path(work_dir) / "results"
        self.objects = self.root / "objects"
        self.history_file = self.root / "history.jsonl"
        self._warned: set[tuple[int, str]] = set()

    def add(self, measurement: Measurement) -> str:
        """Store a batch; returns its key. Idempotent."""
        text = measurement.model_dump_json()
        key = content_hash(text)[:32]
        self.objects.mkdir(parents=True, exist_ok=True)
        target = self.objects / f"{key}.json"
        if not target.exists():
            fd, tmp = tempfile.mkstemp(prefix=".obj.", dir=self.objects)
            os.fchmod(fd, file_mode())  # the umask decides, as for every record
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(tmp, target)
        elif key in self.keys():
            return key
        # Object written but no history line (a crash between the two, or a torn line
        # that held it): the line is added now, so the batch is never lost.
        line = json.dumps(
            {
                "key": key,
                "taken_at": measurement.taken_at,
                "device": measurement.device,
                "command": measurement.command,
                "rows": len(measurement.rows),
            }
        )
        self._repair_torn_tail()
        with open(self.history_file, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
        return key

    @property
    def torn_file(self) -> pathlib.Path:
        """Where torn history fragments are kept (one per line, as found)."""
        return self.root / "history.torn"

    def _repair_torn_tail(self) -> None:
        """Move a torn last line (no newline: a crash mid-append) to :attr:`torn_file`.

        Without this the next line would be glued onto the fragment and both would be
        unreadable. The fragment is copied out first, then the history is cut back to its
        last whole line, so a crash here loses nothing either.
        """
        if not self.history_file.exists():
            return
        data = self.history_file.read_bytes()
        if not data or data.endswith(b"\n"):
            return
        cut = data.rfind(b"\n") + 1
        with open(self.torn_file, "ab") as handle:
            handle.write(data[cut:] + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        with open(self.history_file, "r+b") as handle:
            handle.truncate(cut)
        print(
            f"warning: {self.history_file} ended in a torn line (a crash mid-write); "
            f"moved it to {self.torn_file} and started the new batch on its own line",
            file=sys.stderr,
        )

    def keys(self) -> list[str]:
        """Batch keys in arrival order; a torn line is skipped with a warning.

        A line an older version glued onto a torn fragment (``{"key": "ab{"key": ...}``)
        still yields the whole record at its end.
        """
        if not self.history_file.exists():
            return []
        keys: list[str] = []
        seen: set[str] = set()
        for number, line in enumerate(self.history_file.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            key = _history_key(line)
            if key is None:
                if (number, line) not in self._warned:  # once per store, not once per read
                    self._warned.add((number, line))
                    print(f"warning: {self.history_file}:{number}: skipped a torn line: {line[:80]!r}", file=sys.stderr)
            elif key not in seen:
                seen.add(key)
                keys.append(key)
        return keys

    def get(self, key: str) -> Measurement:
        """The batch ``key``. An object that is missing, is not the bytes its key names (cut
        short, edited) or is another schema raises :class:`StaleRecordError` naming the file."""
        path = self.objects / f"{key}.json"
        fix = (
            f"move {path} aside and delete the line with key {key} from {self.history_file} "
            "(that batch is lost; `kernelsmith bench` measures again)"
        )
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError as err:
            raise StaleRecordError(f"results object {path} (listed in history.jsonl) is missing", fix=fix) from err
        except UnicodeDecodeError as err:
            raise StaleRecordError(f"results object {path} is corrupt (not text)", fix=fix) from err
        if content_hash(text)[:32] != key:
            raise StaleRecordError(
                f"results object {path} is corrupt (its bytes are not the ones its key names)", fix=fix
            )
        try:
            data = json.loads(text)
            if data.get("schema_version") != SCHEMA_VERSION:
                raise StaleRecordError(
                    f"results object {path} has schema {data.get('schema_version')}, this kernelsmith reads "
                    f"{SCHEMA_VERSION}",
                    fix=fix,
                )
            return Measurement.model_validate(data)
        except (ValueError, AttributeError) as err:  # ValidationError is a ValueError
            raise StaleRecordError(f"results object {path} is not a measurement batch: {err}", fix=fix) from err

    def history(self, op_id: str | None = None, device: str | None = None) -> list[tuple[str, Measurement, Row]]:
        out = []
        for key in self.keys():
            batch = self.get(key)
            if device and batch.device != device:
                continue
            for row in batch.rows:
                if op_id is None or row.op_id == op_id:
                    out.append((key, batch, row))
        return out

    def regressions(self, *, noise_pct: float = 3.0) -> list[Regression]:
        """Rows of the newest batch slower than the best earlier figure beyond the noise band.

        Only batches from the same device are compared: an H100 figure says nothing
        about an H200 run.
        """
        keys = self.keys()
        if len(keys) < 2:
            return []
        newest_key = keys[-1]
        newest = self.get(newest_key)
        best: dict[tuple[str, str, str, str], tuple[float, str]] = {}
        for key in keys[:-1]:
            batch = self.get(key)
            if batch.device != newest.device:
                continue
            for row in batch.rows:
                ident = (row.op_id, row.dtype, row.shape, row.variant)
                if ident not in best or row.time_us < best[ident][0]:
                    best[ident] = (row.time_us, key)
        found = []
        for row in newest.rows:
            ident = (row.op_id, row.dtype, row.shape, row.variant)
            if ident not in best:
                continue
            best_us, best_key = best[ident]
            band = max(noise_pct, row.spread_pct)
            slowdown = (row.time_us / best_us - 1.0) * 100.0
            if slowdown > band:
                found.append(
                    Regression(
                        op_id=row.op_id,
                        dtype=row.dtype,
                        shape=row.shape,
                        variant=row.variant,
                        best_us=best_us,
                        best_key=best_key,
                        now_us=row.time_us,
                        slowdown_pct=round(slowdown, 2),
                    )
                )
        return found


def _history_key(line: str) -> str | None:
    """The batch key a history line holds, or None when it holds no whole record."""
    starts = [i for i in range(len(line)) if line.startswith('{"key"', i)]
    for start in starts:  # the first whole record from the left; a glued line's is its last
        try:
            key = json.loads(line[start:])["key"]
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(key, str):
            return key
    return None


def now_iso() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()
