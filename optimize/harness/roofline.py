"""How far a kernel is from the hardware: bytes it must move, and the device's ceilings.

*Bytes* come from the contract alone: each input tensor read once, each output
written once, each inout tensor read and written (METHOD.md's "fewest bytes").
Padding and guard bands are not counted; a broadcast input (rmsnorm's weight)
counts once, which is what an ideal kernel pays. ``contract.extra_bytes``
entries whose value is an arithmetic expression of the size symbols are added
(for traffic the tensors do not show); other entries are notes and add nothing.

*Ceilings*, measured once per device and cached in
``<cache>/device/<gpu-name>.json``:

- copy bandwidth: a large device-to-device copy (2 x 1 GiB), bytes read plus
  bytes written over the median time;
- smallest-kernel time: an empty kernel launched back to back in a CUDA graph, plain
  and with PDL, the per-launch median of the faster: no kernel of any size takes less;
- copy latency: at sizes from 4 KiB to 256 MiB moved, copies back to back in a CUDA
  graph (:func:`copy_latency_us`), the fastest of torch's ``copy_`` and a hand-written
  16-byte-vector copy, plain and with PDL (:mod:`optimize.harness.floor_kernels`):
  what a well-written streaming kernel needs to move that many bytes where a dependent
  DRAM round trip, not bandwidth, sets the time. Every variant's times are kept in the
  record (``floor_variants_us``), so a report can say which one set the floor.

- read and write latency (issue 14 item 6, "per access pattern"): the same, for a
  stream that only reads (16-byte vector loads) and one that only writes (16-byte
  stores, and torch's ``zero_``), at the same sizes (bytes read, bytes written).

Per shape: ``floor = max(bytes / copy bandwidth, smallest-kernel time, latency floor)``.
The latency floor prices the shape's access pattern (:class:`Traffic`: R bytes read, W
written through its tensors): the largest of the copy moving ``2 min(R, W)`` bytes, the
read stream of R bytes and the write stream of W bytes, each read off its curve at the
largest size not above (a lower bound: time grows with size). A call must do at least
each of those three streams' work, so none of them can exceed it, while a copy of
``R + W`` bytes, the floor before, overprices a call that reads far more than it writes
(or the reverse). Without the split (an older worker) or the read and write curves (an
older cache), the copy time at ``R + W`` bytes stands in. A kernel's ``time / floor``
says how much room is left (1.0 = at the ceiling).

The byte counting and floors are pure Python (CPU-tested); measuring imports
torch lazily.
"""

from __future__ import annotations

import functools
import pathlib
import re
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from contract.plan import CallPlan
from contract.sizes import eval_expr
from optimize.harness.errors import ContractError
from optimize.harness.protocol import DeviceInfo, Traffic
from pipeline.records import Contract
from pipeline.run_records import ShapeTiming

COPY_BYTES = 1 << 30  # each of source and destination
COPY_REPEATS = 20
COPY_WARMUP = 20
COPIES_PER_SAMPLE = 5
EMPTY_LAUNCHES = 512
EMPTY_REPEATS = 15
IMPLAUSIBLE_FRACTION = 0.8
"""A timed median below this fraction of :func:`must_move_floor_us` is not a measurement but a skipped launch.

Why 0.8 and not closer to 1: the floor divides the bytes every call must move (for an op
whose outputs are all it is sure of, bytes *written*) by the measured copy bandwidth,
which counts read plus write traffic; a pure write stream can beat a copy
by about 10 % on HBM (the H200's copy reaches ~4.27 TB/s of a 4.8 TB/s peak), and a
median still carries the timing spread (a few percent). 0.8 leaves room for both,
while a launcher that skips the work on most calls of a graph lands at a small
fraction of the floor (1/20 for one launch in a 20-call graph)."""


def contract_bytes(plan: CallPlan, contract: Contract | None = None) -> int:
    """Fewest bytes one call must move: what :func:`contract_traffic` reads and writes (inout both
    ways, scratch neither), plus the contract's ``extra_bytes``."""
    traffic = contract_traffic(plan)
    total = traffic.read + traffic.written
    if contract is not None:
        for value in contract.extra_bytes.values():
            try:
                total += int(eval_expr(value, plan.sizes))
            except ContractError:
                continue  # a note, not a formula
    return total


def contract_traffic(plan: CallPlan) -> Traffic:
    """The tensors' bytes of one call, split: inputs and inout read, outputs and inout written (scratch: neither)."""
    read = sum(t.nbytes for t in plan.tensors if t.filled)
    return Traffic(read=read, written=sum(t.nbytes for t in plan.tensors if t.judged))


def floor_us(nbytes: int, copy_gbps: float, min_kernel_us: float, latency: Sequence[tuple[int, float]] = ()) -> float:
    """The fastest any kernel moving ``nbytes`` can be on this device, in microseconds."""
    return max(nbytes / (copy_gbps * 1e3), min_kernel_us, latency_floor_us(nbytes, latency))


def latency_floor_us(nbytes: int, latency: Sequence[tuple[int, float]]) -> float:
    """The measured copy time at the largest size not above ``nbytes`` (0 below the smallest size)."""
    below = [us for size, us in latency if size <= nbytes]
    return max(below, default=0.0)


def pattern_latency_us(traffic: Traffic, device: DeviceInfo) -> float:
    """The latency floor of ``traffic``'s access pattern (see the module doc); 0 where no curve reaches."""
    return max(
        latency_floor_us(2 * min(traffic.read, traffic.written), device.copy_latency_us),
        latency_floor_us(traffic.read, device.read_latency_us),
        latency_floor_us(traffic.written, device.write_latency_us),
    )


def device_floor_us(nbytes: int, device: DeviceInfo, traffic: Traffic | None = None) -> float:
    """:func:`floor_us` with every ceiling ``device`` measured, the latency floor of ``traffic``'s
    pattern where both are known (else the copy's at ``nbytes``)."""
    if traffic is None or not (device.read_latency_us and device.write_latency_us):
        return floor_us(nbytes, device.copy_gbps, device.min_kernel_us, device.copy_latency_us)
    return max(floor_us(nbytes, device.copy_gbps, device.min_kernel_us), pattern_latency_us(traffic, device))


def row_symbol(contract: Contract) -> str | None:
    """The size symbol the op's rows run along (the token count): the leading dimension of its outputs,
    else the leading dimension most of its tensors share (an in-place op); None when it is not one."""
    specs = [a.tensor for a in contract.args if a.tensor is not None and a.tensor.shape]
    leading = [str(t.shape[0]) for t in specs if t.role == "output"]
    if leading:
        return leading[0] if len(set(leading)) == 1 else None
    counts: dict[str, int] = {}
    for t in specs:
        counts[str(t.shape[0])] = counts.get(str(t.shape[0]), 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])
    if not ranked or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
        return None
    return ranked[0][0]


def must_move_bytes(plan: CallPlan, contract: Contract) -> int:
    """Bytes every call certainly moves, the floor a timed median is held to (:func:`implausible_reason`).

    Every element of every ``output`` is written. For an op whose floor applies (``Contract.byte_bound``),
    so is read every input, and read and written every inout, that runs along the op's rows
    (:func:`row_symbol`: the same leading size as its outputs): silu_and_mul's input, fused_add_rmsnorm's
    input and residual, rope's q and k. A tensor of another leading size may be touched at a few rows
    (a cos/sin table gathered by position, a KV cache written at T slots) and is not counted; scratch never.

    Why: counting outputs alone gave an op whose outputs are all in place (fused_add_rmsnorm) no floor at
    all, and silu_and_mul a quarter of its traffic, so a skipped launch could pass as a fast one."""
    written = sum(t.nbytes for t in plan.tensors if t.role == "output")
    row = row_symbol(contract) if contract.byte_bound else None
    if row is None:
        return written
    specs = {a.tensor.name: a.tensor for a in contract.args if a.tensor is not None}
    along = {n for n, t in specs.items() if t.shape and str(t.shape[0]) == row}
    for t in plan.tensors:
        if t.name in along and t.role == "input":
            written += t.nbytes
        elif t.name in along and t.role == "inout":
            written += 2 * t.nbytes
    return written


def must_move_floor_us(nbytes: int, copy_gbps: float) -> float:
    """The time below which moving ``nbytes`` (:func:`must_move_bytes`) cannot happen on this device (0 when unknown)."""
    return nbytes / (copy_gbps * 1e3) if copy_gbps > 0 and nbytes > 0 else 0.0


def implausible_reason(who: str, label: str, dtype: str, time_us: float, nbytes: int, copy_gbps: float) -> str:
    """Empty when ``time_us`` is physically possible for a call writing ``nbytes``, else why not."""
    floor = must_move_floor_us(nbytes, copy_gbps)
    if floor <= 0 or time_us >= IMPLAUSIBLE_FRACTION * floor:
        return ""
    return (
        f"implausible time: the {who} takes {time_us:.4g} us per call at timed shape {label} {dtype}, "
        f"below {IMPLAUSIBLE_FRACTION:g} x the physical floor of {floor:.4g} us "
        f"({nbytes} bytes every call must move at the measured copy bandwidth of {copy_gbps:g} GB/s): "
        "it cannot have done the work on every call of the timed graph (skipped launches inside the capture?)"
    )


def shape_timing(
    *,
    label: str,
    sizes: dict[str, int],
    dtype: str,
    time_us: float,
    spread_pct: float,
    nbytes: int,
    device: DeviceInfo,
    baseline_us: float | None = None,
    byte_bound: bool = True,
    tokens: int | None = None,
    traffic: Traffic | None = None,
) -> ShapeTiming:
    gbps = nbytes / (time_us * 1e3) if time_us > 0 else 0.0
    floor = device_floor_us(nbytes, device, traffic)
    return ShapeTiming(
        label=label,
        sizes=sizes,
        dtype=dtype,
        time_us=round(time_us, 4),
        spread_pct=round(spread_pct, 3),
        gbps=round(gbps, 2),
        pct_of_copy_bw=round(100.0 * gbps / device.copy_gbps, 2) if device.copy_gbps else 0.0,
        time_over_floor=round(time_us / floor, 3) if floor > 0 else 0.0,
        baseline_us=round(baseline_us, 4) if baseline_us is not None else None,
        speedup=round(baseline_us / time_us, 4) if baseline_us is not None and time_us > 0 else None,
        floor_applies=byte_bound,
        tokens=tokens,
    )


def latency_lines(device: DeviceInfo) -> list[str]:
    """Markdown: the latency floors per size (copy, read, write), and every timed variant's figures (what set them)."""
    if not device.copy_latency_us:
        return []
    lines = []
    for what, moved, curve in (
        ("Copy", "bytes moved", device.copy_latency_us),
        ("Read", "bytes read", device.read_latency_us),
        ("Write", "bytes written", device.write_latency_us),
    ):
        if curve:
            shown = ", ".join(f"{size // 1024} KiB {us:.2f} µs" for size, us in curve)
            lines += [
                f"{what} latency ({moved}: µs per call, back to back in a graph, the fastest variant): {shown}",
                "",
            ]
    copies = {v: dict(times) for v, times in device.floor_variants_us.items() if any(size for size, _ in times)}
    empties = {v: times[0][1] for v, times in device.floor_variants_us.items() if v not in copies and times}
    if copies:
        lines += ["| bytes moved | " + " | ".join(copies) + " |", "|---|" + "---|" * len(copies)]
        for size, _ in device.copy_latency_us:
            lines.append(
                f"| {size // 1024} KiB | " + " | ".join(f"{t.get(size, 0.0):.3f}" for t in copies.values()) + " |"
            )
        lines.append("")
    if empties:
        lines += ["Empty kernel (µs per launch): " + ", ".join(f"{v} {us:.3f}" for v, us in empties.items()), ""]
    return lines


def cache_path(cache_dir: str | pathlib.Path, gpu_name: str) -> pathlib.Path:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", gpu_name).strip("-") or "gpu"
    return pathlib.Path(cache_dir) / f"{safe}.json"


def load_cached(cache_dir: str | pathlib.Path, gpu_name: str) -> DeviceInfo | None:
    path = cache_path(cache_dir, gpu_name)
    try:
        return DeviceInfo.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def save(info: DeviceInfo, cache_dir: str | pathlib.Path) -> pathlib.Path:
    from pipeline.record_io import write_record

    return write_record(info, cache_path(cache_dir, info.name))


# ---------------------------------------------------------------------------- GPU


def device_info(cache_dir: str | pathlib.Path, *, remeasure: bool = False) -> DeviceInfo:
    """This GPU's ceilings: from the cache, or measured now and cached."""
    import torch

    name = torch.cuda.get_device_name()
    if not remeasure:
        cached = load_cached(cache_dir, name)
        if cached is not None:
            return cached
    info = measure(name)
    save(info, cache_dir)
    return info


def measure(name: str | None = None) -> DeviceInfo:
    import torch

    from optimize.harness.timing import summarize

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    copy = copy_bandwidth()
    empties = {variant: summarize(samples).median for variant, samples in empty_kernel_us().items()}
    curves = {pattern: latency_us(pattern) for pattern in PATTERNS}
    return DeviceInfo(
        name=name or props.name,
        sm_count=props.multi_processor_count,
        l2_bytes=int(getattr(props, "L2_cache_size", 0)),
        copy_gbps=round(copy.median, 2),
        copy_spread_pct=round(copy.spread_pct, 3),
        min_kernel_us=round(min(empties.values()), 4),
        copy_latency_us=curves["copy"][0],
        read_latency_us=curves["read"][0],
        write_latency_us=curves["write"][0],
        floor_variants_us={
            **{variant: [(0, round(us, 4))] for variant, us in empties.items()},
            **{variant: times for _, by_variant in curves.values() for variant, times in by_variant.items()},
        },
        torch=torch.__version__,
        cuda=str(torch.version.cuda),
        measured_at=datetime.now(UTC).replace(microsecond=0).isoformat(),
    )


def copy_bandwidth(nbytes: int = COPY_BYTES, repeats: int = COPY_REPEATS):
    """GB/s of a device-to-device copy, bytes read + written; returns Stats over repeats."""
    import torch

    from optimize.harness.timing import summarize

    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    # Warm up long enough for the clocks to leave idle (the SM clock reads ~400 MHz
    # on an idle H200), then time several back-to-back copies per sample: one copy
    # per event pair measured 4.06 TB/s with a 4.3 % spread there, against
    # 4.27 TB/s for ten back-to-back copies.
    for _ in range(COPY_WARMUP):
        dst.copy_(src)
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(COPIES_PER_SAMPLE):
            dst.copy_(src)
        end.record()
        end.synchronize()
        seconds = start.elapsed_time(end) / 1e3 / COPIES_PER_SAMPLE
        samples.append(2 * nbytes / seconds / 1e9)
    del src, dst
    torch.cuda.empty_cache()
    return summarize(samples)


#: bytes moved at which the latencies are measured, 4 KiB .. 256 MiB (a copy: half read, half written)
LATENCY_BYTES = tuple(4096 * 4**i for i in range(9))
LATENCY_CALLS = 64  # calls back to back in one graph
#: the access patterns timed, each a family of variants (:func:`_pattern_calls`)
PATTERNS = ("copy", "read", "write")


def latency_us(
    pattern: str, sizes: Sequence[int] = LATENCY_BYTES, calls: int = LATENCY_CALLS, repeats: int = EMPTY_REPEATS
) -> tuple[list[tuple[int, float]], dict[str, list[tuple[int, float]]]]:
    """Per size of bytes moved, the fastest per-call µs of ``pattern``'s variants (:data:`PATTERNS`).

    Returns (the fastest at each size, every variant's times). Each call is timed back to
    back in a CUDA graph, the same buffers every call, so the data is L2-resident where it
    fits: that makes the time a lower bound for a kernel whose data the harness rotates out
    of L2. Without the floor kernels (no driver library, or a GPU older than sm_90) only
    torch's variants are timed (the read pattern has none: its curve is then empty).
    """
    import torch

    from optimize.harness.timing import process_stream, summarize

    stream = process_stream()  # the stream the worker times on (timing.process_stream says why)

    def medians(total: int) -> dict[str, float]:
        """Each variant's median at ``total`` bytes; its buffers, held by the calls, go when it returns."""
        timed = {
            v: graph_samples(v, call, calls, repeats, stream)
            for v, call in _pattern_calls(pattern, total, stream).items()
        }
        return {variant: round(summarize(samples).median, 4) for variant, samples in timed.items() if samples}

    by_variant: dict[str, list[tuple[int, float]]] = {}
    for total in sizes:
        for variant, us in medians(total).items():
            by_variant.setdefault(variant, []).append((total, us))
        torch.cuda.empty_cache()
    at = {variant: dict(times) for variant, times in by_variant.items()}
    fastest = [
        (size, min(t[size] for t in at.values() if size in t)) for size in sizes if any(size in t for t in at.values())
    ]
    return fastest, by_variant


def _pattern_calls(pattern: str, total: int, stream: Any) -> dict[str, Callable[[], Any]]:
    """Variant name -> a call moving ``total`` bytes in ``pattern`` (the buffers live in the calls).

    copy: torch's ``copy_`` and the vector copy (half the bytes each way); read: the read stream
    over a zero-filled source; write: torch's ``zero_`` and the fill stream. Each floor kernel
    plain and with PDL, launched on ``stream``, which the calls are captured on."""
    import torch

    calls: dict[str, Callable[[], Any]] = {}
    args: tuple[Any, ...]  # the buffers the floor kernel takes before its stream
    if pattern == "copy":
        src = torch.zeros(max(16, total // 2), dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        calls["torch copy_"] = functools.partial(dst.copy_, src)
        variant, method, args = "vector copy", "copy", (dst, src)
    elif pattern == "read":
        src = torch.zeros(max(16, total), dtype=torch.uint8, device="cuda")
        variant, method, args = "read stream", "read", (src, torch.zeros(4, dtype=torch.int32, device="cuda"))
    elif pattern == "write":
        dst = torch.empty(max(16, total), dtype=torch.uint8, device="cuda")
        calls["torch zero_"] = dst.zero_
        variant, method, args = "fill stream", "fill", (dst,)
    else:
        raise ValueError(f"unknown access pattern {pattern!r}: one of {', '.join(PATTERNS)}")
    kernels = _floor_kernels()
    if kernels is not None:  # FloorKernels.copy/read/fill(*buffers, stream, *, pdl)
        for suffix, pdl in (("", False), (" + PDL", True)):
            calls[variant + suffix] = functools.partial(getattr(kernels, method), *args, stream, pdl=pdl)
    return calls


def empty_kernel_us(launches: int = EMPTY_LAUNCHES, repeats: int = EMPTY_REPEATS) -> dict[str, list[float]]:
    """Per-launch µs samples of the smallest kernels back to back in a CUDA graph, per variant.

    The empty floor kernel plain and with PDL, and a one-element torch ``add_`` (which
    always runs, so the result is never empty while torch works)."""
    import torch

    from optimize.harness.timing import process_stream

    stream = process_stream()  # the stream the worker times on (timing.process_stream says why)
    kernels = _floor_kernels()
    one = torch.zeros(1, device="cuda")
    calls_of: dict[str, Callable[[], Any]] = {"one-element add_": functools.partial(one.add_, 1.0)}
    if kernels is not None:  # launched on ``stream``, which the calls are captured on
        for variant, name in (("empty kernel", "ks_empty"), ("empty kernel + PDL", "ks_empty_pdl")):
            calls_of[variant] = functools.partial(kernels.launch, name, 1, stream)
    out = {variant: graph_samples(variant, call, launches, repeats, stream) for variant, call in calls_of.items()}
    return {variant: samples for variant, samples in out.items() if samples}


def graph_samples(variant: str, call: Any, calls: int, repeats: int, stream: Any) -> list[float]:
    """Per-call µs samples of ``call`` back to back in a CUDA graph; [] (and a warning) if it fails.

    A floor kernel the driver refuses to launch or capture costs its variant, never the
    measurement: the others still bound the floor (torch's copy always runs)."""
    import torch

    from optimize.harness.timing import capture, time_graphs

    try:
        with torch.cuda.stream(stream):
            call()
        stream.synchronize()
        graph = capture([call] * calls, stream)
        return time_graphs({variant: graph}, {variant: calls}, repeats, stream)[variant]
    except RuntimeError as error:
        print(f"device floors: {variant} left out: {error}", file=sys.stderr)
        return []


@functools.cache
def _floor_kernels():
    """:class:`optimize.harness.floor_kernels.FloorKernels`, or None where they cannot load (once a
    process: the smallest-kernel and the copy-latency measurements share one loaded module)."""
    from optimize.harness.floor_kernels import FloorKernels

    try:
        return FloorKernels()
    except (OSError, RuntimeError):
        return None
