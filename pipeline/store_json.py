"""The results store's first format (JSON files), kept so that :mod:`pipeline.store` can import it.

The store itself is SQLite now (:mod:`pipeline.store`); this module reads, and for the
tests writes, the format earlier versions wrote. Layout under ``<work>/results/``:
- ``objects/<key>.json``: one :class:`Measurement` batch, content-addressed (the key is
  the sha256 of its canonical JSON), written to a staging file then renamed. An
  object never changes; writing the same batch twice is a no-op.
- ``history.jsonl``: append-only, one line per batch (key, when, what): the order in
  which batches arrived. A crash mid-append leaves at worst a torn last line: the next
  append moves that fragment to ``history.torn`` (kept, never thrown away) and starts its
  own line; readers skip a line they cannot read, with a warning, and still find a whole
  record glued onto a fragment by an older version.

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

from pipeline.errors import StaleRecordError
from pipeline.record_io import SCHEMA_VERSION, content_hash, file_mode
from pipeline.store_records import Measurement


class JsonStore:
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
