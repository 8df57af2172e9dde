"""A layer run's verdicts: the arithmetic that turns the three trees' samples (pristine, patched, the
pristine copy) into each point's change, its noise band, the A/A difference beside it and the verdict,
for the whole layer, the SGLang ops' part and each changed step in context.

Why a module of its own: :mod:`integrate.e2e` runs the trees and the recipes; what counts as "faster"
or "slower" is written once, here, and is the same for every recipe and for ``--pristine``.

What must stay true: a verdict of "faster" or "slower" needs a change beyond the band; the band is
:data:`COVERAGE` times the wider of the A/B spread band and the A/A copy's observed difference plus
its spread (:func:`verdict_band_pct`); an A/A difference is "inside" when within :data:`COVERAGE` times
its own spread band.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from integrate.layer_worker import CONTEXT
from integrate.recipe import Phase
from integrate.records import AATiming, Change, ContextTiming, LayerTiming, PartTiming
from optimize.harness.timing import Stats, summarize


def implied_tokens_per_s(tokens: int, layer_us: float, layers: int) -> float:
    """Tokens per second if a step cost only ``layers`` x this layer's time."""
    if layer_us <= 0:
        return float("nan")
    return tokens / (layer_us * layers * 1e-6)


#: How many times its measured noise a change must exceed to be called faster or slower. Chosen from
#: identical trees: in six pristine layer records (three byte-identical trees each, 30 layer points and
#: 152 in-context points; H100, 2026-12-07 and 2026-12-08; BENCHMARKS.md section 0) the rule at 1 called
#: 6.7 % of the layer points and 13.2 % of the in-context points faster or slower; at 2, 0 % and 2.0 %
#: (``tests/fixtures/aa_points.json`` holds those points; ``tests/test_integrate_e2e.py`` keeps the
#: rate at or under 5 %). The price: a real change must be twice as large to be shown.
COVERAGE = 2.0


def noise_band_pct(baseline: Stats, patched: Stats, layer_baseline_us: float | None = None) -> float:
    """The spread band of a comparison, in percent of ``layer_baseline_us`` (default: this part's baseline).

    Half the wider of the two trees' p10-p90 spreads, in microseconds: a patched
    median closer than that to the baseline median lies inside the band the
    replays of one tree scatter over, so the difference is not shown to be real.
    A verdict widens it by the A/A comparison and :data:`COVERAGE` (:func:`verdict_band_pct`).
    """
    reference = layer_baseline_us if layer_baseline_us is not None else baseline.median
    if reference <= 0:
        return float("inf")
    half_us = max(baseline.p90 - baseline.p10, patched.p90 - patched.p10) / 2.0
    return half_us / reference * 100.0


def aa_timing(baseline: Stats, copy: Stats) -> AATiming:
    """The pristine copy against the pristine tree: what a change measures as when there is none."""
    change = (copy.median - baseline.median) / baseline.median * 100.0
    band = COVERAGE * noise_band_pct(baseline, copy)
    return AATiming(
        copy_us=copy.median,
        copy_spread_pct=copy.spread_pct,
        change_pct=change,
        band_pct=band,
        inside=abs(change) <= band,
    )


def verdict_band_pct(spread_pct: float, aa_change_pct: float | None = None, aa_spread_pct: float = 0.0) -> float:
    """THE noise band a verdict uses, from the A/B spread band (:func:`noise_band_pct`) and, when there
    is an A/A copy, its observed difference and its own spread band (all in % of the same reference):
    :data:`COVERAGE` times the wider of the A/B spread band and the A/A difference plus its spread
    band. A verdict needs a change beyond both what two identical trees measured apart and how much
    that measure moves.

    Why: on the H200 (2026-12-07) the Llama layer's verdicts came out "slower" at +0.4 % against a
    spread band of 0.13-0.26 %, with nothing to say whether two identical trees differ that much. On
    the H100 (2026-12-07) the A/A copy measured +0.78 % (spread band 0.30 %) at decode T=1 and the
    patched tree +0.79 %: the larger of the two alone (0.78 %) called that "slower". With the A/A term
    and no coverage factor, identical trees were still called apart at 13 % of in-context points
    (:data:`COVERAGE`)."""
    if aa_change_pct is None:
        return COVERAGE * spread_pct
    return COVERAGE * max(spread_pct, abs(aa_change_pct) + aa_spread_pct)


def band_with_aa(band_pct: float, aa: AATiming | None, scale: float = 1.0) -> float:
    """:func:`verdict_band_pct` of a comparison whose A/B spread band is ``band_pct``, with the A/A
    figures of ``aa`` (whose ``band_pct`` has :data:`COVERAGE` in it already; ``scale`` turns the A/A's
    percentages of its part into the band's reference)."""
    if aa is None:
        return verdict_band_pct(band_pct)
    return verdict_band_pct(band_pct, aa.change_pct * scale, aa.band_pct / COVERAGE * scale)


def judge(change_pct: float, band_pct: float) -> Change:
    """faster / slower / "no change" (a change no larger than the noise band)."""
    if abs(change_pct) <= band_pct:
        return "no change"
    return "faster" if change_pct < 0 else "slower"


def _stats(samples: Mapping[str, Mapping[str, list[float]]], tree: str, graph: str) -> Stats | None:
    values = samples.get(tree, {}).get(graph)
    return summarize(values) if values else None


def part_timing(baseline: Stats, patched: Stats, layer_baseline_us: float, copy: Stats | None = None) -> PartTiming:
    """One part of the layer: its own change and its change as a share of the whole layer, A/A beside it."""
    share = (patched.median - baseline.median) / layer_baseline_us * 100.0
    aa = aa_timing(baseline, copy) if copy is not None else None
    band = band_with_aa(noise_band_pct(baseline, patched, layer_baseline_us), aa, baseline.median / layer_baseline_us)
    return PartTiming(
        baseline_us=baseline.median,
        patched_us=patched.median,
        baseline_spread_pct=baseline.spread_pct,
        patched_spread_pct=patched.spread_pct,
        change_pct=(patched.median - baseline.median) / baseline.median * 100.0,
        share_of_layer_pct=share,
        verdict=judge(share, band),
        aa=aa,
        noise_band_pct=band,
    )


def context_timing(neighbours: Sequence[str], baseline: Stats, patched: Stats, copy: Stats | None) -> ContextTiming:
    """One SGLang step in its neighbourhood graph, judged on the neighbourhood's own time."""
    change = (patched.median - baseline.median) / baseline.median * 100.0
    aa = aa_timing(baseline, copy) if copy is not None else None
    band = band_with_aa(noise_band_pct(baseline, patched), aa)
    return ContextTiming(
        neighbours=list(neighbours),
        baseline_us=baseline.median,
        patched_us=patched.median,
        change_pct=change,
        noise_band_pct=band,
        verdict=judge(change, band),
        aa=aa,
    )


def layer_timing(
    phase: Phase,
    tokens: int,
    samples: dict[str, dict[str, list[float]]],
    *,
    layers: int,
    kv_len: int | None,
    steps: Sequence[str],
    contexts: Mapping[str, Sequence[str]] | None = None,
    rounds_us: Mapping[str, Sequence[float]] | None = None,
) -> LayerTiming:
    """The record of one point from the pooled samples of the trees (``samples[tree][graph]``; tree
    "baseline", "patched" and, for A/A, "copy"); ``rounds_us``: each tree's whole-layer median per round."""
    b, p = summarize(samples["baseline"]["layer"]), summarize(samples["patched"]["layer"])
    c = _stats(samples, "copy", "layer")
    change = (p.median - b.median) / b.median * 100.0
    aa = aa_timing(b, c) if c is not None else None
    band = band_with_aa(noise_band_pct(b, p), aa)
    non_gemm = None
    nb, np_ = _stats(samples, "baseline", "non_gemm"), _stats(samples, "patched", "non_gemm")
    if nb is not None and np_ is not None:
        non_gemm = part_timing(nb, np_, b.median, _stats(samples, "copy", "non_gemm"))
    context = {}
    for name, around in (contexts or {}).items():
        label = f"{CONTEXT}{name}"
        cb, cp = _stats(samples, "baseline", label), _stats(samples, "patched", label)
        if cb is not None and cp is not None:
            context[name] = context_timing(around, cb, cp, _stats(samples, "copy", label))
    return LayerTiming(
        phase=phase,
        tokens=tokens,
        kv_len=kv_len if phase == "decode" else None,
        baseline_us=b.median,
        patched_us=p.median,
        baseline_spread_pct=b.spread_pct,
        patched_spread_pct=p.spread_pct,
        change_pct=change,
        noise_band_pct=band,
        verdict=judge(change, band),
        baseline_tokens_per_s=implied_tokens_per_s(tokens, b.median, layers),
        patched_tokens_per_s=implied_tokens_per_s(tokens, p.median, layers),
        non_gemm=non_gemm,
        ops_us={
            name: {who: summarize(samples[who][name]).median for who in ("baseline", "patched")}
            for name in steps
            if samples["baseline"].get(name) and samples["patched"].get(name)
        },
        aa=aa,
        context=context,
        rounds_us={tree: list(values) for tree, values in (rounds_us or {}).items()},
    )
