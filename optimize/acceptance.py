"""When a correct candidate counts as better: regressions, the minimum gain, the verdict of a round.

Why: the optimize loop (:mod:`optimize.loop`) accepts a candidate only when it is
correct, slower than the baseline at no catalog shape beyond the noise band, and
its geometric-mean speedup beats the current best's by at least the minimum
gain. Those rules are numbers over an :class:`~pipeline.run_records.Evaluation`, so
they live here as plain functions, apart from the loop's bookkeeping.

What must stay true:
- A shape regresses only beyond the harness's noise band (``harness.noise_pct``),
  or beyond that shape's own measured spread when larger: noise is "no change".
- The minimum gain is at least the noise band (:func:`min_gain_pct`): a geomean
  gain smaller than what two runs of the same kernel differ by is not a win.
- A verdict's ``detail`` says why a correct candidate was not accepted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from optimize.run_folder import clip, why
from optimize.trajectory import RoundOutcome, RoundRecord, regions_hash
from pipeline.run_records import Candidate, Evaluation, NotEvaluated, Outcome, ReachVerdict, ShapeTiming
from pipeline.stats import geomean

MIN_GAIN_PCT = 1.0  # a new best must beat the current best's geomean by this much (or the noise band)


def min_gain_pct(noise_pct: float) -> float:
    """How much a new best must beat the current best's geomean by, in percent.

    At least the harness's noise band: a geomean gain smaller than what two runs
    of the same kernel differ by is "no change", not a win (the H200 run of
    2026-11-29 accepted rmsnorm at 1.015x while the harness called it no change).
    """
    return max(MIN_GAIN_PCT, noise_pct)


def regressed(timings: Sequence[ShapeTiming], noise_pct: float) -> list[ShapeTiming]:
    """Shapes slower than the baseline beyond the noise band (their own spread if larger)."""
    out = []
    for t in timings:
        if t.speedup is None:
            continue
        band = max(noise_pct / 100.0, t.spread_pct / 100.0)
        if t.speedup < 1.0 - band:
            out.append(t)
    return out


@dataclass(frozen=True)
class Verdict:
    """What an evaluation means for its candidate: the round's outcome and why."""

    outcome: RoundOutcome
    detail: str
    speedup_geomean: float | None
    speedup_min: float | None
    slow: list[ShapeTiming] = field(default_factory=list)  # regressed shapes
    accepted: bool = False


def judge_round(evaluation: Evaluation, best_geomean: float | None, noise_pct: float) -> Verdict:
    """The verdict of a round's evaluation against the current best (geomean ``best_geomean``,
    None or 0 for the baseline's 1.0): slower, correct but not better enough, or accepted."""
    speedups = [t.speedup for t in evaluation.timings if t.speedup is not None]
    geo = geomean(speedups)
    low = min(speedups) if speedups else None
    slow = regressed(evaluation.timings, noise_pct) if evaluation.outcome in (Outcome.ok, Outcome.slower) else []
    outcome = evaluation.outcome
    detail = why(evaluation)
    if outcome == Outcome.ok and (slow or (geo is not None and geo < 1.0)):
        outcome = Outcome.slower
        if slow:
            detail = f"slower than the baseline at {len(slow)} shape(s) beyond the {noise_pct:g}% noise band"
        else:
            detail = f"geomean speedup {geo:.3f}x < 1"
    best_geo = best_geomean or 1.0
    gain = min_gain_pct(noise_pct)
    accepted = outcome == Outcome.ok and geo is not None and geo > best_geo * (1.0 + gain / 100.0)
    if accepted and evaluation.screened:  # timed at a few shapes only: a figure to rank by, not to accept
        accepted = False
        detail = f"screened at {len(evaluation.timings)} shape(s), geomean {geo:.3f}x; not promoted to full timing"
    elif outcome == Outcome.ok and not accepted:
        if geo is not None:
            detail = f"correct, geomean {geo:.3f}x does not beat the best ({best_geo:.3f}x) by {gain:g}%"
        else:
            detail = "correct, but the evaluation carries no speedups to compare"
    return Verdict(outcome, detail, geo, low, slow, accepted)


def judge_final(evaluation: Evaluation, noise_pct: float) -> Verdict:
    """The verdict of final validation: correct on fresh shapes and slower at none of them."""
    outcome = evaluation.outcome
    slow = regressed(evaluation.timings, noise_pct) if evaluation.outcome == Outcome.ok else []
    detail = why(evaluation)
    if outcome == Outcome.ok and slow:
        outcome = Outcome.slower
        shapes = ", ".join(f"{t.label} {t.dtype}" for t in slow[:4])
        detail = f"final validation: slower than the baseline at {shapes}"
    speedups = [t.speedup for t in evaluation.timings if t.speedup is not None]
    low = min(speedups) if speedups else None
    return Verdict(outcome, detail, geomean(speedups), low, slow, accepted=outcome == Outcome.ok)


def judge_reach(verdict: Verdict, reach: Sequence[ReachVerdict]) -> Verdict:
    """Final validation's verdict once the candidate was judged at the ops that share its code
    (:mod:`optimize.reach_ops`): the first companion that blocks (failed, or not judged) makes it
    not accepted, with that op's outcome (``incorrect`` when it was never evaluated: unproven)."""
    blocking = [r for r in reach if r.blocks]
    if not verdict.accepted or not blocking:
        return verdict
    first = blocking[0]
    if first.outcome is not None and first.outcome != Outcome.ok:
        outcome = first.outcome
    else:
        outcome = Outcome.slower if first.regressed_shapes else Outcome.incorrect
    where = f" (it runs the changed {', '.join(first.regions)})" if first.regions else ""
    word = "not judged" if first.status == "not_judged" else outcome.value
    more = f"; {len(blocking) - 1} other op(s) too" if len(blocking) > 1 else ""
    detail = f"final validation: {word} at {first.op_id}{where}: {first.detail}{more}"
    return Verdict(outcome, detail, verdict.speedup_geomean, verdict.speedup_min, verdict.slow, accepted=False)


def round_record(
    fields: dict[str, Any],
    best: RoundRecord,
    candidate: Candidate | None,
    evaluation: Evaluation | None,
    guarded: bool,
    noise_pct: float,
) -> RoundRecord:
    """A round's trajectory line: ``fields`` (kind, round, plan, attempts...) and the verdict on its
    evaluation against ``best``; with nothing evaluated, the last attempt's status is the outcome."""
    attempts = fields.get("attempts") or []
    if evaluation is None or candidate is None:
        last = attempts[-1] if attempts else None
        outcome = last.status if last and last.status != "edited" else NotEvaluated.malformed_reply
        return RoundRecord(**fields, outcome=outcome, detail=last.detail if last else "", best=best.candidate)
    verdict = judge_round(evaluation, best.speedup_geomean, noise_pct)
    return RoundRecord(
        **fields,
        candidate=candidate.id,
        regions_hash=regions_hash(candidate.regions),
        outcome=verdict.outcome,
        detail=clip(verdict.detail),
        timings=evaluation.timings,
        speedup_geomean=verdict.speedup_geomean,
        speedup_min=verdict.speedup_min,
        regressed_shapes=[f"{t.label} {t.dtype}" for t in verdict.slow],
        guarded=guarded,
        accepted=verdict.accepted,
        best=candidate.id if verdict.accepted else best.candidate,
    )
