"""Kernel timing: CUDA-graph replays of back-to-back calls, interleaved, with a spread.

How a time is taken (METHOD.md's rules, made mechanical):

- Warm up first (module load, lazy statics, the first launch), outside the timing.
- Capture ``calls`` calls into one CUDA graph and time its replays with CUDA
  events on the capturing stream; one sample = replay time / ``calls``. A graph
  removes the host's launch gaps, so small shapes measure the kernel, not Python.
- The calls of one graph rotate over ``sets`` independent buffer sets whose
  total size is at least ``l2_multiple`` times the L2 cache, so that no call
  finds its inputs in L2 left there by the previous one (:func:`buffer_sets`).
- Baseline and candidate are replayed alternately within each repeat (ABAB...,
  the order flipped every repeat), so clock and thermal drift hit both alike.
- The reported time is the median over ``repeats`` samples; the spread is
  ``(p90 - p10) / median`` in percent. A difference smaller than the larger of
  the two spreads and ``noise_pct`` is "no change" (:func:`verdict`).

The statistics here are pure Python (CPU-tested); the GPU part imports torch
lazily.
"""

from __future__ import annotations

import functools
import math
import os
import random
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pipeline import stats

Verdict = Literal["faster", "slower", "no_change"]
MAX_SETS = 4096  # a graph of this many tiny calls still captures in well under a second
# Buffer sets whose outputs are compared after the timed replays, per shape and implementation:
# the first two (the first call and the first call a "skip after the first" trick skips), the
# last, and a fresh random draw of the rest; every set when there are no more than this.
MAX_VALIDATED_SETS = 8


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]) of a non-empty sample."""
    if not values:
        raise ValueError("percentile of an empty sample")
    ordered = sorted(values)
    if len(ordered) == 1:
        return float(ordered[0])
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return float(ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo))


@dataclass(frozen=True)
class Stats:
    median: float
    p10: float
    p90: float
    n: int

    @property
    def spread_pct(self) -> float:
        return (self.p90 - self.p10) / self.median * 100.0 if self.median > 0 else math.inf


def summarize(samples: Sequence[float]) -> Stats:
    return Stats(
        median=percentile(samples, 50), p10=percentile(samples, 10), p90=percentile(samples, 90), n=len(samples)
    )


def threshold_pct(noise_pct: float, *spreads: float) -> float:
    """The smallest change in percent that counts as real."""
    return max([noise_pct, *[s for s in spreads if math.isfinite(s)]])


def verdict(baseline_us: float, candidate_us: float, threshold: float) -> Verdict:
    """faster / slower / no_change, for a time change beyond ``threshold`` percent."""
    change = (baseline_us / candidate_us - 1.0) * 100.0
    if change > threshold:
        return "faster"
    if change < -threshold:
        return "slower"
    return "no_change"


def geomean(values: Sequence[float]) -> float:
    """:func:`pipeline.stats.geomean` of the finite values; NaN when none is positive."""
    found = stats.geomean(v for v in values if math.isfinite(v))
    return math.nan if found is None else found


def buffer_sets(bytes_per_set: int, l2_bytes: int, l2_multiple: float, max_sets: int = MAX_SETS) -> int:
    """How many buffer sets make the rotation's footprint at least ``l2_multiple`` x L2.

    One set is enough when a single set is already that large (its own first
    bytes are evicted before the next call wants them).
    """
    if bytes_per_set <= 0:
        return 1
    need = math.ceil(l2_multiple * l2_bytes / bytes_per_set)
    return max(1, min(max_sets, need))


def calls_per_graph(graph_calls: int, sets: int) -> int:
    """Every set is used at least once per replay, and at least ``graph_calls`` calls."""
    return max(graph_calls, sets)


def input_partner(set_index: int, sets: int) -> int:
    """The set whose inputs set ``set_index``'s every other call reads: a neighbour holding the other
    input image (:func:`optimize.harness.inputs.load_sets` gives odd sets the second image)."""
    partner = set_index ^ 1
    return partner if partner < sets else max(0, set_index - 1)


def rotated_calls(graph_calls: int, sets: int) -> int:
    """Calls per graph: at least ``graph_calls``, and every set used an even number of times, so
    its uses alternate between the two input images within a replay and from one replay to the next."""
    per_set = max(2, math.ceil(max(graph_calls, sets) / max(1, sets)))
    return sets * (per_set + per_set % 2)


def rotation(calls: int, sets: int) -> list[tuple[int, int]]:
    """Call ``i``'s (buffer set, set whose inputs it reads): outputs, inout and scratch of set ``i % sets``,
    inputs of that set on its even uses and of its :func:`input_partner` on its odd ones.

    Why: every set started from one input image, so from the second replay on each call found its
    own correct result already in its output buffers, and a kernel that skips the work when the
    output already holds the answer timed as a 1.26x win (H200, 2026-12-07). Now two consecutive
    calls on the same output buffers never read the same inputs (with at least two sets)."""
    return [(i % sets, i % sets if (i // sets) % 2 == 0 else input_partner(i % sets, sets)) for i in range(calls)]


def sets_to_validate(sets: int, rng: random.Random, limit: int = MAX_VALIDATED_SETS) -> list[int]:
    """Which of ``sets`` buffer sets to compare after the timed replays, ascending.

    Every set when ``sets <= limit``; otherwise sets 0 and 1, the last set, and
    ``limit - 3`` others drawn by ``rng`` (a fresh draw each evaluation, so a
    candidate cannot know which sets are looked at).
    """
    if sets <= 0 or limit <= 0:
        return []
    if sets <= limit:
        return list(range(sets))
    fixed = sorted({0, 1, sets - 1})[:limit]
    rest = [i for i in range(sets) if i not in fixed]
    return sorted(fixed + rng.sample(rest, max(0, limit - len(fixed))))


def set_uses(set_index: int, sets: int, calls: int) -> int:
    """How many calls of one replay use buffer set ``set_index`` (call ``i`` uses set ``i % sets``)."""
    return calls // sets + (1 if set_index < calls % sets else 0)


def timed_failure(label: str, dtype: str, set_index: int, sets: int, calls: int, who: str, reason: str) -> str:
    """The failure report of a timed graph whose outputs differ from the baseline's.

    Same shape as a correctness check's: where (shape, dtype, how it was run), then
    the comparison's reason (tensor, index, expected and actual values).
    """
    return (
        f"timed shape {label} {dtype}, buffer set {set_index} of {sets} "
        f"(CUDA-graph timing replay, {calls} calls rotating over the sets, {who}'s graph): {reason}"
    )


# ---------------------------------------------------------------------------- GPU


@functools.cache
def process_stream() -> Any:
    """The one CUDA stream this process checks and times on, made on first use.

    Why one: once a process has run a kernel on a second (non-default) stream, graphs on its
    first take about 0.17 µs a call more, for good (H100, 2026-12-05, ``tools/stream-probe.py``:
    a 4 KiB copy graph 0.99 -> 1.17 µs a call). Each population member used to make its own
    ``torch.cuda.Stream()`` (the next stream of torch's pool), so members 0 and 1 were timed in
    the fast state and the others in the slow one (silu_and_mul's paired baseline 1.51 against
    1.85 µs), and a PDL candidate, whose overlap hides the gap, screened faster than it was.
    With one stream every member, its baseline and the device floors are timed alike.
    """
    import torch

    return torch.cuda.Stream()


def capture(calls: Sequence[Callable[[], Any]], stream: Any) -> Any:
    """A CUDA graph of ``calls`` made back to back on ``stream`` (a non-default stream).

    Uses ``capture_begin``/``capture_end`` directly rather than the
    ``torch.cuda.graph`` context, which runs ``gc.collect()`` and
    ``empty_cache()`` on every entry (tens of milliseconds, paid per check
    case). Allocations made while capturing still go to the graph's private
    pool. A call that fails ends the capture before the error propagates, so
    the stream is never left capturing.
    """
    import torch

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        graph.capture_begin()
        try:
            for call in calls:
                call()
        finally:
            graph.capture_end()
    return graph


def time_graphs(
    graphs: dict[str, Any], calls: dict[str, int], repeats: int, stream: Any, warmup: int = 2
) -> dict[str, list[float]]:
    """Per-call microseconds of each graph, ``repeats`` samples each, interleaved.

    Every repeat replays every graph once; the order flips on odd repeats.
    """
    import torch

    names = list(graphs)
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            for name in names:
                graphs[name].replay()
        events: list[tuple[str, Any, Any]] = []
        for rep in range(repeats):
            order = names if rep % 2 == 0 else list(reversed(names))
            for name in order:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record(stream)
                graphs[name].replay()
                end.record(stream)
                events.append((name, start, end))
    stream.synchronize()
    out: dict[str, list[float]] = {name: [] for name in names}
    for name, start, end in events:
        out[name].append(start.elapsed_time(end) * 1000.0 / calls[name])
    return out


#: The clocks, power and temperature of the device, as nvidia-smi reports them (one line, no units).
CLOCK_QUERY = ("--query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu", "--format=csv,noheader,nounits")


def clock_note() -> str:
    """The device's clocks now, for a worker's log (", SM 1980 MHz, memory 3201 MHz, 121.4 W, 38 C"),
    or "" when nvidia-smi is missing or says nothing usable.

    Why: on the H200 (2026-12-05) a paired baseline's time took one of two values, about 0.35 µs a
    launch apart, from one member of a population to the next; the log says whether the clocks
    moved with it. The first ordinal of ``CUDA_VISIBLE_DEVICES`` is the worker's device."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    which = ["-i", visible] if visible.isdigit() else []
    try:
        done = subprocess.run(["nvidia-smi", *which, *CLOCK_QUERY], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return ""
    return clock_text(done.stdout)


def clock_text(csv: str) -> str:
    """:func:`clock_note`'s text from nvidia-smi's first line of :data:`CLOCK_QUERY` ("" if it is not that)."""
    fields = [f.strip() for f in (csv.strip().splitlines() or [""])[0].split(",")]
    try:
        sm, mem, power, temp = (float(f) for f in fields)
    except ValueError:  # "[N/A]", an error text, or not four fields
        return ""
    return f", SM {sm:g} MHz, memory {mem:g} MHz, {power:g} W, {temp:g} C"
