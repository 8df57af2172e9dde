"""`kernelsmith track`: the results store summarized, regressions first, and the nightly verdict.

Nightly tracking is ``kernelsmith bench`` (or a census) on a schedule, each run adding a
batch to the store, then ``kernelsmith track --fail-on-regression [--max-age-h 26]``.
The verdict's semantics are fixed:

- a regression is a step up still standing in a kernel series' history
  (:meth:`pipeline.store.ResultsStore.regressions`: asv's step detection, a noise-aware
  band); PyTorch reference rows never are;
- ``--op`` filters the regressions and the verdict, not only the table;
- no measurement at all, or a newest batch older than ``--max-age-h``, is a missing
  night: a failure, not a pass.

The terminal shows the regressions (with the SGLang version that introduced each), then
one line per op: its batches, the newest figures' change against the batch before.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from rich.console import Console
from rich.table import Table

from pipeline.ab_verdicts import confirmation, release_verdicts, step_status
from pipeline.config import Config
from pipeline.console import console as make_console
from pipeline.output import emit
from pipeline.stats import geomean
from pipeline.store import ResultsStore
from pipeline.store_records import REFERENCE_VARIANTS


@dataclass(frozen=True)
class TrackOptions:
    """What ``kernelsmith track`` with ``show``, ``export`` or ``rebuild`` is asked (the census and the
    release A/B measure, and take :class:`bench.census.CensusOptions` and
    :class:`bench.release_ab.ReleaseABOptions`). ``op`` filters the table, the regressions and the
    verdict; ``history`` is the JSON-lines folder of export and rebuild (None: ``harness.history_dir``);
    ``emitted`` collects the result for ``--json``."""

    action: Literal["show", "export", "rebuild"] = "show"
    op: str | None = None
    fail_on_regression: bool = False
    max_age_h: float | None = None
    html: str | None = None
    history: str | None = None
    emitted: list[Any] | None = None


def _age_h(taken_at: str) -> float | None:
    try:
        when = datetime.fromisoformat(taken_at)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (datetime.now(UTC) - when).total_seconds() / 3600.0


def per_op_lines(store: ResultsStore, op: str | None) -> list[tuple[str, int, str, str, str, str]]:
    """(op, batches, newest SGLang, change of the newest batch's geomean vs the one before,
    the newest batch's geomean time ÷ floor ("—" where it recorded none), device)."""
    by_op: dict[str, dict[str, dict[tuple[str, str, str], float]]] = {}
    floors: dict[str, dict[str, list[float]]] = {}
    meta: dict[str, tuple[str, str]] = {}
    for key, batch, row in store.history(op):
        if row.variant in REFERENCE_VARIANTS:
            continue
        by_op.setdefault(row.op_id, {}).setdefault(key, {})[(row.dtype, row.shape, row.variant)] = row.time_us
        if row.floor_us:
            floors.setdefault(row.op_id, {}).setdefault(key, []).append(row.time_us / row.floor_us)
        meta[row.op_id] = (batch.sglang, batch.device)
    out = []
    for name, batches in sorted(by_op.items()):
        keys = list(batches)
        change = "—"
        if len(keys) >= 2:
            new, old = batches[keys[-1]], batches[keys[-2]]
            common = [k for k in new if k in old and old[k] > 0]
            ratio = geomean(new[k] / old[k] for k in common)
            if ratio is not None:
                change = f"{(ratio - 1) * 100:+.1f}% over {len(common)} shapes"
        over = geomean(floors.get(name, {}).get(keys[-1], []))
        out.append((name, len(keys), meta[name][0], change, "—" if over is None else f"{over:.2f}", meta[name][1]))
    return out


def _history(options: TrackOptions, config: Config, store: ResultsStore, console: Console) -> int:
    """``track export`` / ``track rebuild``: the store and the JSON-lines folder (pipeline.history)."""

    from pipeline import history

    folder = pathlib.Path(options.history) if options.history else config.history
    if folder is None:
        console.print('no history folder: harness.history_dir is "" (off); give --history DIR')
        emit(options, {"read": 0, "problems": []} if options.action == "rebuild" else {"written": []})
        return 1
    if options.action == "export":
        written = history.export(store, folder)
        console.print(f"{len(written)} batch(es) written to {folder} ({len(store.keys())} in the store)")
        emit(options, {"written": [str(p) for p in written]})
        return 0
    if not folder.is_dir():
        console.print(f"no history folder at {folder}: nothing to rebuild from (give --history DIR)")
        emit(options, {"read": 0, "problems": []})
        return 1
    read, problems = history.rebuild(store, folder)
    for problem in problems:
        console.print(f"[yellow]left out: {problem}[/yellow]")
    console.print(f"{read} batch(es) read from {folder} into {store.db_path}; {len(problems)} left out")
    emit(options, {"read": read, "problems": [str(p) for p in problems]})
    return 0


def show(options: TrackOptions, config: Config) -> int:
    """``kernelsmith track`` with ``show``, ``export`` or ``rebuild``: what the store holds (the census and
    the release A/B, which measure, are :mod:`cli.track`'s to call)."""
    store = ResultsStore(config.work)
    console = make_console()
    if options.action in ("export", "rebuild"):
        return _history(options, config, store, console)
    op = options.op
    fail = options.fail_on_regression
    keys = store.keys()
    rows = store.history(op)
    html_dir = options.html
    if not rows:
        scope = f" for {op}" if op else ""
        said = f"no measurements{scope} in {store.root} yet: run `kernelsmith bench` on a GPU machine first"
        if html_dir:
            from pipeline.dashboard import write_dashboard

            pages = write_dashboard(store, html_dir, noise_pct=config.harness.noise_pct)
            said += f"; the dashboard says so ({pages[0]})"
        console.print(said)
        emit(options, {"batches": 0, "regressions": [], "ops": []})
        return 1 if fail else 0
    found = store.regressions(noise_pct=config.harness.noise_pct, op_id=op)
    ab = release_verdicts(config.work)
    confirmed = [confirmation(reg, ab) for reg in found]
    standing = [reg for reg in found if step_status(reg, ab) != "retracted"]
    if found:
        console.print(f"[red]{len(standing)} regression(s)[/red] ({len(found) - len(standing)} retracted):")
        for reg, why in zip(found, confirmed, strict=True):
            where = f" (introduced in sglang {reg.introduced_sglang}, before: {reg.before_sglang})"
            if reg.changed_files:
                where += f"; kernel files changed: {', '.join(reg.changed_files)}"
            console.print(
                f"  {reg.op_id} {reg.dtype} {reg.shape} {reg.variant}: {reg.best_us:.2f} -> {reg.now_us:.2f} us "
                f"(+{reg.slowdown_pct}%, band {reg.band_pct}%){where}; {why}"
            )
    else:
        console.print("no regressions")
    table = Table(title=f"measurement history ({len(keys)} batches)")
    for col in ("op", "batches", "newest sglang", "newest vs previous", "time ÷ floor", "device"):
        table.add_column(col, overflow="fold")
    for line in per_op_lines(store, op):
        table.add_row(line[0], str(line[1]), *line[2:])
    console.print(table)
    columns = ("op", "batches", "newest_sglang", "newest_vs_previous", "time_over_floor", "device")
    emit(
        options,
        {
            "batches": len(keys),
            "regressions": [
                reg.model_dump() | {"confirmation": why} for reg, why in zip(found, confirmed, strict=True)
            ],
            "ops": [dict(zip(columns, line, strict=False)) for line in per_op_lines(store, op)],
        },
    )
    if html_dir:
        from pipeline.dashboard import write_dashboard

        pages = write_dashboard(store, html_dir, noise_pct=config.harness.noise_pct, ab=ab)
        console.print(f"dashboard: {len(pages)} pages in {html_dir} (open {pages[0]})")
    newest = store.get(keys[-1])
    age = _age_h(newest.taken_at)
    limit = options.max_age_h
    if limit is not None and (age is None or age > limit):
        shown = f"{age:.1f} h" if age is not None else f"of unknown age ({newest.taken_at!r})"
        console.print(
            f"[red]the newest batch is {shown} old, more than --max-age-h {limit:g}: a night is missing[/red]"
        )
        return 1 if fail else 0
    return 1 if standing and fail else 0
