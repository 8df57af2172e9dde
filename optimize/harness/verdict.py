"""A worker's result turned into an :class:`~pipeline.run_records.Evaluation`: the outcome of the
closed set, the per-shape timings with their speedups, the verdict over the shapes, and the
detail a person reads.

Why a module of its own: :mod:`optimize.harness.evaluate` builds and runs; what a result *means*
(incorrect, implausibly fast, slower, no change, faster) is decided here, once, for the optimizer,
``bench`` and ``track ab`` alike.

What must stay true: a timed median below the physical floor of the bytes a call must move is
``incorrect`` (:func:`implausible_times`), never a speedup; "slower" needs the geometric mean
below 1 by more than the noise threshold (:func:`overall`).
"""

from __future__ import annotations

from collections.abc import Sequence

from optimize.harness import isolate, timing
from optimize.harness.errors import BaselineError
from optimize.harness.protocol import WorkerResult
from pipeline.config import Config
from pipeline.records import BuildReport
from pipeline.run_records import Evaluation, Outcome, ShapeTiming


def to_evaluation(
    op_id: str,
    cid: str,
    run: isolate.WorkerRun,
    *,
    build: BuildReport | None,
    build_s: float,
    config: Config,
    candidate_given: bool = True,
) -> Evaluation:
    """Turn a worker run into an Evaluation (pure: CPU-tested with hand-made results)."""
    seconds = {"build": round(build_s, 3)}
    if run.status in ("timeout", "crashed") or run.result is None:  # the worker gave no result to judge
        return Evaluation(
            op_id=op_id,
            candidate=cid,
            outcome=Outcome.timeout if run.status == "timeout" else Outcome.crashed,
            build=build,
            seconds=seconds | {"test": round(run.seconds, 3)},
            detail=f"{run.summary}; stderr tail:\n{run.stderr_tail}",
        )
    result: WorkerResult = run.result
    seconds |= {k: round(v, 3) for k, v in result.seconds.items()}
    seconds["worker_overhead"] = round(max(0.0, run.seconds - sum(result.seconds.values())), 3)
    if result.status == "baseline_failed":
        raise BaselineError(
            f"the baseline of {op_id} failed its checks",
            fix="check the task",
            detail=result.detail,
            evidence=result.role_evidence,
        )
    passed = sum(1 for c in result.checks if c.status == "pass")
    failed = sum(1 for c in result.checks if c.status == "fail")
    skipped = [c for c in result.checks if c.status == "skipped"]
    bitwise = [c.bitwise_equal for c in result.checks if c.bitwise_equal is not None]
    errors = [c.max_abs_err for c in result.checks if c.max_abs_err is not None]
    common = dict(
        op_id=op_id,
        candidate=cid,
        build=build,
        checks_passed=passed,
        checks_failed=failed,
        bitwise_equal=all(bitwise) if bitwise else None,
        max_abs_err=max(errors) if errors else None,
        seconds=seconds,
        role_evidence=dict(result.role_evidence),
        timed_sets_validated=sum(t.validated_sets for t in result.timings),
    )
    if result.status in ("incorrect", "crashed"):
        outcome = Outcome.incorrect if result.status == "incorrect" else Outcome.crashed
        return Evaluation(**common, outcome=outcome, detail=result.detail)
    implausible = implausible_times(result, candidate_given)
    if implausible:
        return Evaluation(**common, outcome=Outcome.incorrect, detail=implausible)
    timings = shape_timings(result, candidate_given)
    held = sum(1 for c in result.checks if c.held_out and c.status == "pass")
    parts = [f"{passed} checks passed ({passed - held} catalog, {held} held-out)"]
    if common["timed_sets_validated"]:
        parts.append(f"{common['timed_sets_validated']} timed buffer sets match the baseline")
    if skipped:
        parts.append(f"{len(skipped)} held-out cases skipped ({skipped[0].reason})")
    unrepeatable = [c for c in result.checks if c.baseline_repeatable is False]
    if unrepeatable:
        parts.append(
            f"the baseline does not repeat bit for bit at {len(unrepeatable)} case(s) (atomics?), so no repeat is "
            f"asked of the candidate there (first: {unrepeatable[0].label} {unrepeatable[0].dtype})"
        )
    if bitwise:
        parts.append("bitwise equal to the baseline" if all(bitwise) else "not bitwise equal (within tolerance)")
    outcome = Outcome.ok
    if candidate_given and timings:
        speedup, threshold, verdict = overall(timings, config.harness.noise_pct)
        parts.append(
            f"geomean speedup {speedup:.4f}x over {len(timings)} shapes: {verdict.replace('_', ' ')} (threshold {threshold:.2f}%)"
        )
        if verdict == "slower":
            outcome = Outcome.slower
    return Evaluation(**common, outcome=outcome, detail="; ".join(parts), timings=timings)


def implausible_times(result: WorkerResult, candidate_given: bool) -> str:
    """The first timed median below the physical floor (:func:`roofline.implausible_reason`), or "".

    The baseline is judged too: a baseline time below the floor means the measurement
    itself cannot be trusted, and no speedup is reported against it.
    """
    from optimize.harness import roofline

    if result.device is None:
        return ""
    for t in result.timings:
        timed = [("baseline", t.baseline_us)]
        if candidate_given and t.candidate_us is not None:
            timed.append(("candidate", t.candidate_us))
        for who, time_us in timed:
            reason = roofline.implausible_reason(
                who, t.label, t.dtype, time_us, t.must_move_bytes, result.device.copy_gbps
            )
            if reason:
                return reason
    return ""


def shape_timings(result: WorkerResult, candidate_given: bool) -> list[ShapeTiming]:
    from optimize.harness import roofline

    out: list[ShapeTiming] = []
    if result.device is None:
        return out
    for t in result.timings:
        if candidate_given and t.candidate_us is not None:
            time_us, spread, base = (
                t.candidate_us,
                max(t.candidate_spread_pct or 0.0, t.baseline_spread_pct),
                t.baseline_us,
            )
        else:
            time_us, spread, base = t.baseline_us, t.baseline_spread_pct, None
        out.append(
            roofline.shape_timing(
                label=t.label,
                sizes=t.sizes,
                dtype=t.dtype,
                time_us=time_us,
                spread_pct=spread,
                nbytes=t.bytes,
                device=result.device,
                baseline_us=base,
                byte_bound=t.byte_bound,
                tokens=t.tokens,
                traffic=t.traffic,
            )
        )
    return out


def overall(timings: Sequence[ShapeTiming], noise_pct: float) -> tuple[float, float, str]:
    """(geomean speedup, threshold %, verdict) over the shapes that have a speedup."""
    speedups = [t.speedup for t in timings if t.speedup is not None]
    spreads = sorted(t.spread_pct for t in timings if t.speedup is not None)
    median_spread = timing.percentile(spreads, 50) if spreads else 0.0
    threshold = timing.threshold_pct(noise_pct, median_spread)
    speedup = timing.geomean(speedups)
    return speedup, threshold, timing.verdict(1.0, 1.0 / speedup, threshold) if speedups else "no_change"
