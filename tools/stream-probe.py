"""Does a graph's per-call time depend on which torch pool stream it is replayed on? (GPU machine only)

Why: in one population worker (H100, 2026-12-05) the paired baseline of members 0 and 1 took
1.51 µs a call and that of members 2-7 1.85 µs, in every population; each member's run made
its own ``torch.cuda.Stream()``, the next stream of torch's pool. This times the same small
baseline-like graph (a 4 KiB copy, 64 calls) on eight pool streams in turn, then on the first
again, and prints µs per call for each. Usage: ``python3 tools/stream-probe.py``.
"""

from __future__ import annotations

import torch

from optimize.harness.timing import capture, summarize, time_graphs


def per_call_us(stream: torch.cuda.Stream, calls: int = 64, repeats: int = 15) -> float:
    src = torch.zeros(2048, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    with torch.cuda.stream(stream):
        dst.copy_(src)
    stream.synchronize()
    graph = capture([lambda: dst.copy_(src)] * calls, stream)
    return summarize(time_graphs({"copy": graph}, {"copy": calls}, repeats, stream)["copy"]).median


def main() -> None:
    streams = [torch.cuda.Stream() for _ in range(8)]
    for _ in range(3):  # leave the idle clocks first
        per_call_us(streams[0])
    for i, stream in enumerate([*streams, streams[0]]):
        print(f"pool stream {i % 8} (id {stream.stream_id}): {per_call_us(stream):.3f} us per call")


if __name__ == "__main__":
    main()
