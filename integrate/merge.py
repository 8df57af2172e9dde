"""One build of everything: the accepted candidates of several optimize runs as one run folder.

Why: a user of SGLang feels every accepted kernel at once, not one run's. ``kernelsmith integrate
--run NAME --from RUN [RUN ...]`` first writes ``work/runs/NAME`` from the given runs' op folders
(each op's whole folder: its best candidate, evaluations and trajectory, so the PR's evidence reads
as for any run), then integrates NAME as usual: one patch, every op checked through SGLang together,
each layer recipe that runs a changed op timed pristine against all-patched.

Which candidate an op gets: the accepted one (:func:`integrate.accepted.load_run`'s rules) with the
highest geomean speedup over the runs that have one. Candidates of different ops that rewrite the
same span differently are left to :func:`integrate.accepted.resolve_overlaps`, as within one run.

What must stay true:
- A merged run is built in a staging folder and published by rename; ``merged.json``
  (:class:`MergedRun`) names the run each op came from. A name that holds an ordinary run is never
  overwritten; merging again into a merged run replaces it.
- A simulated run (timings replayed from a file) is refused: a merged build is proven on a GPU or not
  at all, and its PR must not mix replayed figures with measured ones.
"""

from __future__ import annotations

import datetime
import pathlib
import shutil
from collections.abc import Sequence

from contract.layout import MERGED_FILE, tasks_root
from contract.layout import run_dir as run_folder
from integrate.accepted import geomean_of, load_run
from integrate.errors import ConfigError
from integrate.evidence import simulated_run
from integrate.records import MergedRun
from pipeline.record_io import read_record, write_record


def merge_runs(work: pathlib.Path, name: str, sources: Sequence[str]) -> MergedRun:
    """Write ``work/runs/<name>`` from the best accepted candidate of each op over ``sources``."""
    target = run_folder(work, name)
    if name in sources:
        raise ConfigError(f"--run {name} is also one of --from's runs", fix="name the merged build something new")
    if target.exists() and not (target / MERGED_FILE).is_file():
        raise ConfigError(
            f"work/runs/{name} holds an optimize run, not a merged build", fix="name the merged build something new"
        )
    best: dict[str, tuple[float, str, pathlib.Path]] = {}
    left_out: dict[str, str] = {}
    for source in sources:
        folder = run_folder(work, source)
        simulated, backend = simulated_run(folder) if folder.is_dir() else (False, "")
        if simulated:
            raise ConfigError(
                f"run {source} is simulated (backend {backend}: timings replayed, not measured)",
                fix="merge only runs measured on a GPU",
            )
        accepted, skipped = load_run(folder, tasks_root(work))
        for op_id, why in skipped.items():
            left_out.setdefault(op_id, f"{source}: {why}")
        for acc in accepted:
            score = geomean_of(acc)
            if _better(best.get(acc.op_id), score):
                best[acc.op_id] = (score, source, folder / acc.op_id)
    if not best:
        reasons = "; ".join(f"{op}: {why}" for op, why in sorted(left_out.items())) or "they hold no op folders"
        raise ConfigError(f"no accepted candidate in runs {', '.join(sources)}: {reasons}", fix="optimize first")
    staging = target.with_name(f".{name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for op_id, (_, _, op_dir) in sorted(best.items()):
        shutil.copytree(op_dir, staging / op_id, symlinks=True)
    record = MergedRun(
        run=name,
        date=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        sources=list(sources),
        ops={op_id: source for op_id, (_, source, _) in sorted(best.items())},
        left_out={op: why for op, why in sorted(left_out.items()) if op not in best},
    )
    write_record(record, staging / MERGED_FILE)
    old = target.with_name(f".{name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    staging.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    return record


def _better(current: tuple[float, str, pathlib.Path] | None, score: float) -> bool:
    """Whether a candidate of ``score`` replaces the one kept so far (the first run wins a tie)."""
    return current is None or score > current[0]


def read_merged(run_dir: pathlib.Path) -> MergedRun | None:
    """The provenance of a merged build, or None for an ordinary run."""
    path = run_dir / MERGED_FILE
    return read_record(MergedRun, path) if path.is_file() else None
