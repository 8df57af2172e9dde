"""What the optimize loop writes in a run folder besides the trajectories.

Why: a run folder (``work/runs/<run>/``) is read by people, by a resumed run and
by ``integrate``. Three of its pieces are plain file writing with rules of their
own, kept out of the loop's round logic: ``run.json`` (the options a run was
started with; a resume with other options is refused, since its rounds would
mix), ``<op>/best/`` (the validated best, published by rename) and the one-line
reasons a round record carries.

What must stay true:
- ``best/`` appears whole or not at all (staged, then :func:`pipeline.records.replace_dir`),
  and is readable by others (``integrate`` may run as another user).
- ``run.json`` is written once, by rename, when the run starts; it is never edited.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import tempfile
from typing import Mapping, Sequence

from extract.splice import apply_regions
from pipeline.errors import ConfigError
from pipeline.records import Candidate, Evaluation, Outcome, Span, replace_dir, write_record


def write_best(
    op_dir: pathlib.Path,
    files: Mapping[str, bytes],
    editable: Sequence[Span],
    candidate: Candidate,
    evaluation: Evaluation | None,
) -> None:
    """``op_dir/best/``: candidate.json, evaluation.json, regions/<name>.txt and
    src/<the files the candidate's regions change>; published by rename."""
    patched = apply_regions(files, list(editable), candidate.regions)
    staging = pathlib.Path(tempfile.mkdtemp(prefix=".best.", dir=op_dir))
    staging.chmod(0o755)  # mkdtemp makes it private; best/ is for people and `integrate` to read
    try:
        write_record(candidate, staging / "candidate.json")
        if evaluation is not None:
            write_record(evaluation, staging / "evaluation.json")
        for name, text in candidate.regions.items():
            (staging / "regions").mkdir(exist_ok=True)
            (staging / "regions" / f"{name}.txt").write_text(text, encoding="utf-8")
        for rel, data in patched.items():
            if data != files.get(rel):
                target = staging / "src" / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
        replace_dir(staging, op_dir / "best")
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def why(evaluation: Evaluation) -> str:
    """The reason an evaluation gives: nvcc's output for a compile failure, else its detail."""
    if evaluation.outcome == Outcome.compile_failed and evaluation.build is not None and evaluation.build.stderr:
        return evaluation.build.stderr
    return evaluation.detail


def clip(text: str, limit: int = 2000) -> str:
    """``text`` cut to ``limit`` characters (``...`` marks a cut), so a record stays small."""
    text = text or ""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def run_meta_check(run_dir: pathlib.Path, meta: Mapping[str, str | None], *, write: bool = True) -> None:
    """Refuse to resume a run with another mode/coder/backend (its rounds would mix); record a new run's."""
    path = run_dir / "run.json"
    if path.exists():
        old = json.loads(path.read_text(encoding="utf-8"))
        for key in ("mode", "coder", "backend"):
            if old.get(key) != meta.get(key):
                raise ConfigError(
                    f"run {run_dir.name} was started with {key}={old.get(key)!r}, this command asks for {meta.get(key)!r}",
                    fix="use a new --run name, or repeat the original options to resume",
                )
        return
    if not write:
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".run.", dir=run_dir)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(meta, handle, indent=2)
    os.replace(tmp, path)
