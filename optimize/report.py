"""Reports of an optimize run: ``<op>/report.md``, ``summary.json``, the console table.

Why markdown and JSON: a person reads ``report.md`` (per-shape table: baseline,
candidate, time over floor, speedup; the skills on the path to the best; every
round in one line); ``integrate`` reads ``summary.json``
(:class:`pipeline.run_records.RunSummary`).

What must stay true: a replayed run says SIMULATED at the top of every report and
``simulated: true`` in the summary; its figures are never presented as
measurements. Every figure comes from the evaluations stored in the run folder.
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence

from contract import layout
from optimize.trajectory import RoundRecord, Trajectory
from pipeline.buckets import AT_FLOOR, by_bucket, floor_text, no_go
from pipeline.record_io import write_record
from pipeline.run_records import Evaluation, OpSummary, RunSummary, ShapeTiming


def _fmt(value: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "—" if value is None else f"{value:{spec}}{suffix}"


def shape_table(baseline: Sequence[ShapeTiming], candidate: Sequence[ShapeTiming] | None) -> list[str]:
    """Markdown rows: shape, dtype, baseline us, candidate us, time/floor (base -> cand), speedup."""
    rows = [
        "| shape | dtype | baseline µs | candidate µs | time ÷ floor (baseline → candidate) | % copy BW (candidate) | speedup |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    by_key = {(t.label, t.dtype): t for t in (candidate or [])}
    for base in baseline:
        cand = by_key.get((base.label, base.dtype))
        rows.append(
            f"| {base.label} | {base.dtype} | {base.time_us:.2f} | {_fmt(cand.time_us if cand else None)} | "
            f"{floor_text(base)} → {floor_text(cand) if cand else '—'} | "
            f"{_fmt(cand.pct_of_copy_bw if cand else None, '.0f', '%')} | {_fmt(cand.speedup if cand else None, '.3f', '×')} |"
        )
    return rows


def params_text(params: dict) -> str:
    """A search point's steps as ``skill k=v; skill k=v`` (its target names left out), else ``k=v, ...``."""
    from optimize.transforms.registry import TRANSFORMS

    steps = params.get("steps")
    if isinstance(steps, list) and all(isinstance(s, dict) for s in steps):
        choice_keys = {k for spec in TRANSFORMS.values() for k in spec.choice}  # how, not what
        shown = []
        for step in steps:
            chosen = {k: v for k, v in (step.get("params") or {}).items() if k in choice_keys}
            shown.append(" ".join([str(step.get("skill"))] + [f"{k}={v}" for k, v in sorted(chosen.items())]))
        return "; ".join(shown)
    return ", ".join(f"{k}={v}" for k, v in sorted(params.items()))


def _attempts_cell(record: RoundRecord) -> str:
    """The attempts in order; a search round's members counted by outcome instead."""
    members = [a for a in record.attempts if a.agent == "search" and a.candidate]
    if members:
        counts: dict[str, int] = {}
        for a in members:
            key = a.outcome.value if a.outcome else a.status
            counts[key] = counts.get(key, 0) + 1
        rest = [a for a in record.attempts if a.agent == "search" and not a.candidate]
        text = f"search: {len(members)} candidates (" + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + ")"
        return text + ("; some points do not compose" if rest else "")
    return " → ".join(f"{a.agent}:{a.outcome.value if a.outcome else a.status}" for a in record.attempts)


def round_lines(records: Sequence[RoundRecord]) -> list[str]:
    rows = [
        "| round | kind | skill | params | outcome | geomean | min | accepted | attempts |",
        "|---:|---|---|---|---|---:|---:|---|---|",
    ]
    for r in records:
        if r.kind == "baseline":
            continue
        params = params_text(r.params) or ("—" if r.kind != "stop" else "")
        what = r.stop_reason if r.kind == "stop" else r.outcome.value
        attempts = _attempts_cell(r)
        rows.append(
            f"| {r.round} | {r.kind} | {r.skill or ''} | {params} | {what} | {_fmt(r.speedup_geomean, '.3f', '×')} | "
            f"{_fmt(r.speedup_min, '.3f', '×')} | {'yes' + (' (guarded)' if r.guarded else '') if r.accepted else ''} | {attempts} |"
        )
    return rows


def op_report(
    op_id: str,
    trajectory: Trajectory,
    summary: OpSummary,
    *,
    final: Evaluation | None,
    backend: str,
    simulated: bool,
) -> str:
    lines = [f"# {op_id}", ""]
    if simulated:
        lines += [f"> **{backend}**. These figures are replayed, not measured in this run.", ""]
    else:
        lines += [f"Measured with {backend}.", ""]
    lines.append(
        f"Status: **{summary.status}**" + (f" (stopped: {summary.stop_reason})" if summary.stop_reason else "")
    )
    lines.append(f"Rounds: {summary.rounds}")
    if summary.best:
        lines.append(
            f"Best candidate: `{summary.best}` ({summary.best_dir}), geomean speedup "
            f"{_fmt(summary.speedup_geomean, '.3f', '×')}, worst shape {_fmt(summary.speedup_min, '.3f', '×')}"
            + (" — keeps the baseline at some shapes through a shape dispatch" if summary.guarded else "")
        )
        lines.append(f"Skills applied: {', '.join(summary.skills) or '—'}")
    elif summary.detail:
        lines.append(summary.detail)
    baseline = trajectory.baseline()
    if baseline is not None and baseline.timings:
        figures = by_bucket(baseline.timings)
        parts = [
            f"{name} {f['time_over_floor_min']:.2f}–{f['time_over_floor_max']:.2f}"
            if "time_over_floor_min" in f
            else f"{name} n/a"
            for name, f in figures.items()
        ]
        lines.append(
            "Baseline time ÷ floor by token bucket: "
            + "; ".join(parts)
            + ("" if all(t.floor_applies for t in baseline.timings) else " (n/a: the op is not byte-bound)")
        )
        stopped = no_go(baseline.timings)
        if stopped:
            lines.append(f"No-go (within {AT_FLOOR}× of the floor, not worth a round): {', '.join(stopped)}")
    if baseline is not None:
        best_round = next((r for r in trajectory.rounds() if r.candidate == summary.best), None)
        timings = final.timings if final is not None and final.timings else (best_round.timings if best_round else None)
        lines += ["", "## Per-shape timings", ""]
        if final is not None and final.timings:
            lines.append("Candidate figures are from the final validation.")
            lines.append("")
        lines += shape_table(baseline.timings, timings)
    lines += ["", "## Rounds", ""] + round_lines(trajectory.records)
    return "\n".join(lines) + "\n"


def write_op_report(path: pathlib.Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def write_summary(run_dir: pathlib.Path, summary: RunSummary) -> pathlib.Path:
    return write_record(summary, layout.summary_path(run_dir))


def console_table(summary: RunSummary):
    """A rich Table of the run (imported lazily: only the command prints)."""
    from rich.table import Table

    title = f"optimize run {summary.run} ({summary.mode}, {summary.coder} coder)"
    if summary.simulated:
        title += " — SIMULATED (replayed timings)"
    table = Table(title=title)
    for col in ("op", "status", "rounds", "best", "geomean", "worst shape", "skills", "stop"):
        table.add_column(col)
    for op in summary.ops:
        table.add_row(
            op.op_id,
            op.status,
            str(op.rounds),
            op.best or "baseline",
            _fmt(op.speedup_geomean, ".3f", "×"),
            _fmt(op.speedup_min, ".3f", "×"),
            ", ".join(op.skills) or "—",
            op.stop_reason or "",
        )
    return table
