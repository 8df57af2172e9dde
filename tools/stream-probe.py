"""Does a graph's per-call time depend on the streams its process has used? (GPU machine only)

Why: in one population worker (H100, 2026-12-05) the paired baseline of members 0 and 1 took
1.51 µs a call and that of members 2-7 1.85 µs, in every population, while each member's run
made its own ``torch.cuda.Stream()`` (the next stream of torch's pool); with one stream per
process (997c6c6) every member got 1.51 µs. This times the same small graph (a 4 KiB copy,
64 calls) on stream A, then again after one copy was run on each of streams B, C and D, and
prints µs per call. Usage: ``python3 tools/stream-probe.py``.
"""

from __future__ import annotations

import functools

import torch

from optimize.harness.roofline import graph_samples
from optimize.harness.timing import summarize


def per_call_us(stream: torch.cuda.Stream, calls: int = 64, repeats: int = 15) -> float:
    src = torch.zeros(2048, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return summarize(graph_samples("copy", functools.partial(dst.copy_, src), calls, repeats, stream)).median


def main() -> None:
    a = torch.cuda.Stream()
    for i in range(4):
        print(f"stream A, time {i}: {per_call_us(a):.3f} us per call")
    for name in "BCD":
        other = torch.cuda.Stream()
        with torch.cuda.stream(other):
            torch.zeros(16, device="cuda").add_(1)
        other.synchronize()
        print(f"stream A after one kernel on stream {name}: {per_call_us(a):.3f}, {per_call_us(a):.3f} us per call")


if __name__ == "__main__":
    main()
