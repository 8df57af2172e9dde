"""``kernelsmith track --html DIR``: the results store as static HTML pages a CI job can publish.

- ``index.html``: ops x measured SGLang sources (versions or commits, in the order first
  measured), each cell the geomean kernel time over the op's shapes there and its geomean
  time ÷ floor (``Row.floor_us``, where the batch recorded it), coloured red
  where a standing regression was introduced by that source and green where the geomean
  fell beyond the noise band;
- ``op-<op>.html``: per token bucket, a time plot of every shape across the batches
  (matplotlib, inline SVG) with the noise band shaded around the first point, then every
  point with the command that reproduces it.

What must stay true: the pages are self-contained (inline SVG and CSS, no script, no
network), and every figure on them comes from the store.
"""

from __future__ import annotations

import html
import io
import pathlib
import re

from pipeline.buckets import BUCKETS, bucket_for, tokens_in_label
from pipeline.stats import geomean
from pipeline.store import ResultsStore
from pipeline.store_records import REFERENCE_VARIANTS, Measurement, Regression, Row

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


def _plot(series: dict[str, list[tuple[int, float, float]]], labels: list[str], noise_pct: float) -> str:
    """One bucket's shapes over the batches, as inline SVG (matplotlib, Agg)."""
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


def write_dashboard(store: ResultsStore, out_dir: str | pathlib.Path, *, noise_pct: float) -> list[pathlib.Path]:
    """Write index.html and one page per op into ``out_dir``; returns the files written."""
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
    written = [_index(out, by_op, sources, regressions, noise_pct)]
    for op, items in sorted(by_op.items()):
        written.append(_op_page(out, op, items, keys, batches, [r for r in regressions if r.op_id == op], noise_pct))
    return written


def _index(
    out: pathlib.Path,
    by_op: dict[str, list[tuple[str, Measurement, Row]]],
    sources: list[str],
    regressions: list[Regression],
    noise_pct: float,
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
            css = ""
            if any(r.op_id == op and r.introduced_sglang == source for r in regressions):
                css = "reg"
            elif previous is not None and value < previous * (1 - noise_pct / 100.0):
                css = "imp"
            shown = f"{value:.2f}" + (f" <small>({over:.2f}× floor)</small>" if over is not None else "")
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
        f"introduced there (asv step detection, band max({noise_pct:g}%, 2 × spread)); green: faster than the "
        f"source before beyond {noise_pct:g}%. {len(regressions)} regression(s).</p>"
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
) -> pathlib.Path:
    labels = [f"{batches[k].sglang} {batches[k].taken_at[:10]}" for k in keys]
    body = ["<p><a href='index.html'>all ops</a></p>"]
    if regressions:
        body.append("<ul>")
        for r in regressions:
            body.append(
                f"<li>{html.escape(r.dtype)} {html.escape(r.shape)}: {r.best_us:.2f} → {r.now_us:.2f} µs "
                f"(+{r.slowdown_pct}%), introduced in sglang {html.escape(r.introduced_sglang)}"
                + (f"; changed: {html.escape(', '.join(r.changed_files))}" if r.changed_files else "")
                + "</li>"
            )
        body.append("</ul>")
    for name, _, _ in BUCKETS:
        series: dict[str, list[tuple[int, float, float]]] = {}
        for key, _, row in items:
            if bucket_for(tokens_in_label(row.shape)) == name:
                series.setdefault(f"{row.shape} {row.dtype} {row.variant}", []).append(
                    (keys.index(key), row.time_us, row.spread_pct)
                )
        if series:
            body.append(f"<h2>{html.escape(name)}</h2>{_plot(series, labels, noise_pct)}")
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
