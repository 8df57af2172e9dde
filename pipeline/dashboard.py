"""``kernelsmith track --html DIR``: the results store as static HTML pages a CI job can publish.

- ``index.html``: ops x measured SGLang sources (versions or commits, in the order first
  measured), each cell the geomean kernel time over the op's shapes there and its geomean
  time ÷ floor (``Row.floor_us``, where the batch recorded it), coloured red
  where a standing regression was introduced by that source and green where the geomean
  fell beyond the noise band;
- ``op-<op>.html``: per token bucket, a time plot of every shape across the batches
  (matplotlib, inline SVG) with the noise band shaded around the first point, the release A/B's
  A/A band (dashed) where ``track ab`` timed the release against itself, and each step the
  release A/B confirmed marked where it was introduced; then the steps with what the A/B says of
  each, the kernel files that changed and the release diff they are in, and every point with the
  command that reproduces it.

A step found across batches is a trend; only the release A/B (:mod:`pipeline.ab_verdicts`) confirms
or retracts it, and a retracted one is not coloured red.

What must stay true: the pages are self-contained (inline SVG and CSS, no script, no
network), and every figure on them comes from the store.
"""

from __future__ import annotations

import html
import io
import pathlib
import re
from collections.abc import Mapping

from pipeline.ab_verdicts import confirmation, step_status
from pipeline.buckets import BUCKETS, bucket_for, tokens_in_label
from pipeline.stats import geomean
from pipeline.store import ResultsStore
from pipeline.store_records import REFERENCE_VARIANTS, Measurement, Regression, ReleaseAB, Row

ABVerdicts = Mapping[tuple[str, str, str], ReleaseAB]
RELEASE_DIFF = "https://github.com/sgl-project/sglang/compare/v{old}...v{new}"

STYLE = """body{font-family:sans-serif;margin:2em;color:#222}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}th{background:#f4f4f4}td.op{text-align:left}
td.reg{background:#f8d0d0}td.imp{background:#d4f0d4}code{font-size:90%}"""


def _page(title: str, body: str) -> str:
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>{body}</body></html>\n"
    )


def _slug(op: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", op)


def _plot(
    series: dict[str, list[tuple[int, float, float]]],
    labels: list[str],
    noise_pct: float,
    *,
    aa_pct: float | None = None,
    steps: Mapping[int, str] | None = None,
) -> str:
    """One bucket's shapes over the batches, as inline SVG (matplotlib, Agg). ``aa_pct``: the release
    A/B's A/A band (dashed, around each shape's first point); ``steps``: batch index -> the label of a
    step the release A/B confirmed there (a vertical line)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.2))
    for shape, points in sorted(series.items()):
        xs = [p[0] for p in points]
        ys = [p[1] for p in points]
        ax.plot(xs, ys, marker="o", label=shape)
        band = max(noise_pct, 2.0 * points[0][2]) / 100.0
        ax.fill_between(xs, [ys[0] * (1 - band)] * len(xs), [ys[0] * (1 + band)] * len(xs), alpha=0.12)
        if aa_pct is not None:
            for sign in (-1, 1):
                ax.plot(
                    xs, [ys[0] * (1 + sign * aa_pct / 100.0)] * len(xs), linestyle="--", linewidth=0.7, color="grey"
                )
    for index, text in sorted((steps or {}).items()):
        ax.axvline(index, color="red", linewidth=1.0)
        ax.annotate(
            text, (index, 1.0), xycoords=("data", "axes fraction"), fontsize=6, color="red", ha="left", va="top"
        )
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("time (µs)")
    ax.legend(fontsize=6, loc="best")
    fig.tight_layout()
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg")
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def write_dashboard(
    store: ResultsStore, out_dir: str | pathlib.Path, *, noise_pct: float, ab: ABVerdicts | None = None
) -> list[pathlib.Path]:
    """Write index.html and one page per op into ``out_dir``; returns the files written. ``ab``: the
    release A/B records (:func:`pipeline.ab_verdicts.release_verdicts`) that confirm or retract steps."""
    ab = ab or {}
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    history = [(k, b, r) for k, b, r in store.history() if r.variant not in REFERENCE_VARIANTS]
    batches: dict[str, Measurement] = {}
    for key, batch, _ in history:
        batches.setdefault(key, batch)
    keys = list(batches)
    sources: list[str] = []
    for key in keys:
        if batches[key].sglang not in sources:
            sources.append(batches[key].sglang)
    regressions = store.regressions(noise_pct=noise_pct)
    by_op: dict[str, list[tuple[str, Measurement, Row]]] = {}
    for item in history:
        by_op.setdefault(item[2].op_id, []).append(item)
    written = [_index(out, by_op, sources, regressions, noise_pct, ab)]
    for op, items in sorted(by_op.items()):
        mine = [r for r in regressions if r.op_id == op]
        written.append(_op_page(out, op, items, keys, batches, mine, noise_pct, ab))
    return written


def _index(
    out: pathlib.Path,
    by_op: dict[str, list[tuple[str, Measurement, Row]]],
    sources: list[str],
    regressions: list[Regression],
    noise_pct: float,
    ab: ABVerdicts,
) -> pathlib.Path:
    if not by_op:  # an empty store: a page that says so, rather than an empty table or no page at all
        path = out / "index.html"
        empty = (
            "<p>No measurements yet: the results store holds no batch. Run <code>kernelsmith bench</code> or "
            "<code>kernelsmith track run</code> on a GPU machine, then <code>kernelsmith track --html</code> again.</p>"
        )
        path.write_text(_page("Kernelsmith: SGLang kernel performance", empty), encoding="utf-8")
        return path
    head = "".join(f"<th>{html.escape(s)}</th>" for s in sources)
    lines = [f"<table><tr><th>op</th>{head}</tr>"]
    for op, items in sorted(by_op.items()):
        cells = []
        previous: float | None = None
        for source in sources:
            here = [r for _, b, r in items if b.sglang == source]
            if not here:
                cells.append("<td>—</td>")
                continue
            value = geomean(r.time_us for r in here) or 0.0
            over = geomean(r.time_us / r.floor_us for r in here if r.floor_us)
            css, mark = "", ""
            found = [r for r in regressions if r.op_id == op and r.introduced_sglang == source]
            if found:
                state = step_status(found[0], ab)
                css = "" if state == "retracted" else "reg"
                mark = f" <small>{'A/B: ' + state if state in ('confirmed', 'retracted') else 'trend'}</small>"
            elif previous is not None and value < previous * (1 - noise_pct / 100.0):
                css = "imp"
            shown = f"{value:.2f}" + (f" <small>({over:.2f}× floor)</small>" if over is not None else "") + mark
            cells.append(f"<td class='{css}'>{shown}</td>")
            previous = value
        link = f"<a href='op-{_slug(op)}.html'>{html.escape(op)}</a>"
        lines.append(f"<tr><td class='op'>{link}</td>{''.join(cells)}</tr>")
    lines.append("</table>")
    note = (
        f"<p>Geomean kernel time (µs) over each op's shapes, per SGLang source, and in brackets the geomean "
        f"time ÷ floor (floor = max(bytes ÷ copy bandwidth, the smallest kernel, a copy's latency at that size) on "
        f"the batch's GPU; 1 = at the "
        f"ceiling; absent where the batch did not record its floor). Red: a standing regression "
        f"introduced there (asv step detection, band max({noise_pct:g}%, 2 × spread)), marked <em>A/B: confirmed</em> "
        f"where the release A/B (both releases' kernels in one worker, <code>kernelsmith track ab</code>) found it "
        f"too and <em>trend</em> where none has yet; a step the release A/B retracted is not red. Green: faster "
        f"than the source before beyond {noise_pct:g}%. {len(regressions)} step(s) across batches.</p>"
    )
    path = out / "index.html"
    path.write_text(_page("Kernelsmith: SGLang kernel performance", note + "\n".join(lines)), encoding="utf-8")
    return path


def _op_page(
    out: pathlib.Path,
    op: str,
    items: list[tuple[str, Measurement, Row]],
    keys: list[str],
    batches: dict[str, Measurement],
    regressions: list[Regression],
    noise_pct: float,
    ab: ABVerdicts,
) -> pathlib.Path:
    labels = [f"{batches[k].sglang} {batches[k].taken_at[:10]}" for k in keys]
    body = ["<p><a href='index.html'>all ops</a></p>"]
    mine = [r for (o, _, _), r in sorted(ab.items()) if o == op]
    aa = [r for r in mine if r.old == r.new and r.change_pct is not None and r.threshold_pct is not None]
    aa_pct = max(abs(r.change_pct or 0.0) + (r.threshold_pct or 0.0) for r in aa) if aa else None
    steps: dict[int, str] = {}
    if regressions:
        body.append("<ul>")
        for r in regressions:
            said = confirmation(r, ab)
            diff = ""
            if all(re.fullmatch(r"\d+(\.\d+)+", v or "") for v in (r.before_sglang, r.introduced_sglang)):
                url = RELEASE_DIFF.format(old=r.before_sglang, new=r.introduced_sglang)
                diff = f"; <a href='{html.escape(url)}'>the release diff</a>"
            body.append(
                f"<li>{html.escape(r.dtype)} {html.escape(r.shape)}: {r.best_us:.2f} → {r.now_us:.2f} µs "
                f"(+{r.slowdown_pct}%), introduced in sglang {html.escape(r.introduced_sglang)}"
                + (f"; kernel files changed: {html.escape(', '.join(r.changed_files))}" if r.changed_files else "")
                + f"{diff}; {html.escape(said)}</li>"
            )
            if step_status(r, ab) == "confirmed":
                first = next((i for i, k in enumerate(keys) if batches[k].sglang == r.introduced_sglang), None)
                if first is not None:
                    steps[first] = f"A/B: {r.introduced_sglang} slower"
        body.append("</ul>")
    if mine:
        body.append("<h2>Release A/B in one worker</h2><ul>")
        for rec in mine:
            what = "A/A (the release against itself)" if rec.old == rec.new else f"{rec.old} → {rec.new}"
            change = f"{rec.change_pct:+.2f}%" if rec.change_pct is not None else "—"
            band = f" (threshold {rec.threshold_pct:.2f}%)" if rec.threshold_pct is not None else ""
            body.append(f"<li>{html.escape(what)}: {html.escape(rec.verdict)}, {change}{band}</li>")
        body.append("</ul>")
    for name, _, _ in BUCKETS:
        series: dict[str, list[tuple[int, float, float]]] = {}
        for key, _, row in items:
            if bucket_for(tokens_in_label(row.shape)) == name:
                series.setdefault(f"{row.shape} {row.dtype} {row.variant}", []).append(
                    (keys.index(key), row.time_us, row.spread_pct)
                )
        if series:
            plot = _plot(series, labels, noise_pct, aa_pct=aa_pct, steps=steps)
            body.append(f"<h2>{html.escape(name)}</h2>{plot}")
    body.append("<h2>Every point</h2><table><tr><th>batch</th><th>shape</th><th>dtype</th><th>variant</th>")
    body.append("<th>µs</th><th>spread %</th><th>reproduce</th></tr>")
    for _, batch, row in items:
        body.append(
            f"<tr><td>{html.escape(batch.sglang)} {html.escape(batch.taken_at)}</td><td>{html.escape(row.shape)}</td>"
            f"<td>{html.escape(row.dtype)}</td><td>{html.escape(row.variant)}</td><td>{row.time_us:.2f}</td>"
            f"<td>{row.spread_pct:.1f}</td><td class='op'><code>{html.escape(batch.command)}</code></td></tr>"
        )
    body.append("</table>")
    path = out / f"op-{_slug(op)}.html"
    path.write_text(_page(op, "\n".join(body)), encoding="utf-8")
    return path


__all__ = ["write_dashboard"]
