"""The records' base classes and their one way to and from disk.

Every record that crosses a stage boundary (:mod:`pipeline.records` for extract's index and tasks,
:mod:`pipeline.run_records` for optimize's candidates, evaluations and summaries, and each stage's
own) is a :class:`Record`, written by :func:`write_record` (staging file + rename, so a reader never
sees half a record) and read by :func:`read_record`. A run can therefore be inspected with `cat`,
resumed after a crash and replayed in a test.

What must stay true:
- Records are frozen and reject unknown keys (``extra="forbid"``): a typo in a
  producer is an error at write time, not a silent ``None`` downstream.
- Every top-level record carries ``schema_version``. Bump :data:`SCHEMA_VERSION`
  when a field changes meaning; readers refuse other versions with a clear fix
  ("re-run `kernelsmith extract`") rather than guessing. A record that only gains
  fields bumps its own version instead and keeps reading the older ones (``READS``).
- A published file or folder appears whole, by rename, with the mode the umask gives.
- This module imports neither torch nor CUDA.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import tempfile
import uuid
from typing import ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict

SCHEMA_VERSION = 1


class Record(BaseModel):
    """Base of every on-disk record: frozen, strict about keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class VersionedRecord(Record):
    schema_version: int = SCHEMA_VERSION
    #: the schema versions :func:`read_record` accepts for this record (the ones that only lacked fields)
    READS: ClassVar[tuple[int, ...]] = (SCHEMA_VERSION,)


R = TypeVar("R", bound=BaseModel)


def file_mode() -> int:
    """The mode a new file gets under this process's umask (``0o666 & ~umask``).

    ``tempfile.mkstemp`` creates its file 0600 whatever the umask says; a record written
    through it and renamed into place would stay unreadable to teammates and CI artifact
    readers, so every staging file is given this mode before it is published.
    """
    status = pathlib.Path("/proc/self/status")
    try:
        for line in status.read_text(encoding="ascii").splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # no /proc: read it by setting it (and restore it at once)
    os.umask(mask)
    return 0o666 & ~mask


def write_record(record: BaseModel, path: str | os.PathLike[str]) -> pathlib.Path:
    """Write atomically: a staging file in the same folder, then rename.

    The file gets the mode the umask decides (:func:`file_mode`). A folder that cannot
    be written raises :class:`pipeline.errors.NotWritable` naming it."""
    from pipeline.errors import not_writable

    path = pathlib.Path(path)
    text = record.model_dump_json(indent=2) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as err:
        typed = not_writable(err, path.parent)
        if typed is None:
            raise
        raise typed from err
    try:
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException as err:
        pathlib.Path(tmp).unlink(missing_ok=True)
        typed = not_writable(err, path.parent) if isinstance(err, OSError) else None
        if typed is None:
            raise
        raise typed from err
    return path


def replace_dir(staging: pathlib.Path, target: pathlib.Path) -> None:
    """Publish the finished folder ``staging`` at ``target`` by rename, replacing any folder there.

    A reader sees the old folder or the new one, never a mix: the old one is first
    renamed aside (``.old-<name>-<random>`` beside it), the new one renamed in, then
    the old one removed. ``staging`` must sit in the same filesystem as ``target``
    (the rename is what makes it atomic); cleaning it up on failure is the caller's.
    """
    if target.exists():
        trash = target.parent / f".old-{target.name}-{uuid.uuid4().hex[:8]}"
        os.replace(target, trash)
        os.replace(staging, target)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(staging, target)


def read_record(cls: type[R], path: str | os.PathLike[str]) -> R:
    """Read a record, refusing other schema versions with the fix in the message."""
    from pydantic import ValidationError

    from pipeline.errors import StaleRecordError

    path = pathlib.Path(path)
    fix = "re-run the stage that wrote it (for tasks: `kernelsmith extract`)"
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise StaleRecordError(f"{path} is not a record (not UTF-8 text)", fix=fix) from err
    if not text.strip():
        raise StaleRecordError(f"{path} is empty (a write that never finished?)", fix=fix)
    try:
        data = json.loads(text)
    except ValueError as err:
        raise StaleRecordError(f"{path} is not valid JSON (truncated?): {err}", fix=fix) from err
    reads = getattr(cls, "READS", (SCHEMA_VERSION,))
    version = data.get("schema_version", reads[-1]) if isinstance(data, dict) else None
    if version not in reads:
        raise StaleRecordError(
            f"{path} has schema_version {version}, this kernelsmith reads {' or '.join(map(str, reads))}",
            fix=fix,
        )
    try:
        return cls.model_validate(data)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top)"
        raise StaleRecordError(
            f"{path} does not hold a valid {cls.__name__} ({err.error_count()} problem(s); {where}: {first['msg']})",
            fix=fix,
        ) from err


def content_hash(*parts: str | bytes) -> str:
    """sha256 over length-prefixed parts, so ("ab","c") and ("a","bc") differ."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()
