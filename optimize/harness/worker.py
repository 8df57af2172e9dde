"""The worker process: correctness checks, then interleaved timing, on one GPU.

Run as ``python -m optimize.harness.worker request.json result.json`` by
:mod:`optimize.harness.isolate`; never imported by the parent for its work.
It reads a :class:`~optimize.harness.protocol.WorkerRequest`, writes a
:class:`~optimize.harness.protocol.WorkerResult`, and exits 0. Anything worse
(a fault, an abort, a hang) is the parent's to report.

One correctness case, for each implementation (baseline first, then candidate),
on that implementation's own buffers:

Run 1 (eager, stream-ordered). Inputs are filled with *decoy* values and the
outputs with the NaN poison; the device is synchronised; then, on the
harness's own (non-default) stream, a ~0.5 ms sleep kernel, the copy of the
real inputs X, and the call. A kernel that runs on any other stream (a created
stream, the legacy default stream) is not ordered after that copy: it computes
from the decoys and fails the comparison.

Run 2 (CUDA graph, same buffers). The call is captured into a CUDA graph (as
SGLang serves it); then inputs get decoys again, outputs get *finite garbage*,
and after a sleep the fresh inputs Y are copied in and the graph is replayed.
This catches: work launched outside the capture stream (absent from the
graph: the garbage stays); a result cached from an earlier call keyed by
pointer or shape (same pointers, new values); a kernel that reads its output
before writing it (garbage in, garbage out); a kernel that cannot be captured.

After each run: every input storage is bit-identical to what was loaded (guard
bands and stride gaps included), every output's guard bands and gaps still hold
what was there (no write outside the tensor), and, for the candidate, every
output and inout element matches the baseline's (:mod:`optimize.harness.compare`),
plus the float64 reference where the contract names one.

Then timing (:mod:`optimize.harness.timing`): graphs of back-to-back calls over
rotating buffer sets, baseline and candidate interleaved. What is timed is
validated too: after the timed replays, every buffer set is reloaded with the
timing inputs (outputs poisoned), each implementation's *timed graph* is replayed
once more, and the sampled buffer sets (:func:`timing.sets_to_validate`) of the
candidate are compared with the baseline's. A launcher that behaves differently
inside a many-call capture than in an eager call or a one-call graph (skips the
2nd call on, writes only the first set) is ``incorrect`` there.

The parts: :mod:`optimize.harness.worker_base` (the shared pieces), :mod:`~optimize.harness.worker_check`
(the correctness runs), :mod:`~optimize.harness.worker_timing` (the timing); this module runs a request
(one, a population or a batch) and is the process's entry point.

What must stay true: every kernel call is followed by a synchronisation before
its results are used, so a fault is attributed to the call that caused it;
the first failure ends the checks (the CUDA context may be gone); no input
ever repeats between runs or cases.
"""

from __future__ import annotations

import os
import pathlib
import sys
import time
import traceback

from contract.plan import plan_call
from optimize.harness import inputs, loader, roofline, timing
from optimize.harness.protocol import (
    CheckCase,
    TimingResult,
    WorkerRequest,
    WorkerResult,
)
from optimize.harness.worker_base import (
    is_cuda_error,
    log,
)
from optimize.harness.worker_check import Checker
from optimize.harness.worker_timing import TimedMismatch, Timer
from pipeline.record_io import write_record

EXIT_NO_GPU = 3
EXIT_HARNESS = 4  # the harness itself raised: the parent reports a HarnessError, not a crashed candidate


# ---------------------------------------------------------------------------- timing


# ---------------------------------------------------------------------------- modes


def run(request: WorkerRequest) -> WorkerResult:
    import torch

    device, stream = torch.device("cuda", torch.cuda.current_device()), timing.process_stream()
    seconds: dict[str, float] = {}
    loader.use_package(request.sglang_package)  # a Triton file's `import sglang...` (no-op for CUDA)
    if request.mode == "single":
        # never measure the device here: under a profiler or sanitizer that would be slow and pointless
        return _single(
            request, device, stream, roofline.load_cached(request.device_cache_dir, torch.cuda.get_device_name())
        )
    info = roofline.device_info(request.device_cache_dir)
    start = time.monotonic()
    with torch.cuda.stream(stream):
        checker = Checker(request, device, stream)
        checks, status, detail = checker.check_all(request.checks)
    seconds["test"] = time.monotonic() - start
    timings: list[TimingResult] = []
    start = time.monotonic()
    if status == "ok" and request.timings:
        timer = Timer(request, device, stream, info)
        for case in request.timings:
            log(f"timing {case.label} {case.dtype}")
            try:
                with torch.cuda.stream(stream):
                    timings.append(timer.time_case(case))
            except TimedMismatch as mismatch:
                status, detail = "incorrect", str(mismatch)
                break
            except Exception as err:  # noqa: BLE001 - CUDA faults are the kernels'; anything else is ours
                if not is_cuda_error(err):
                    raise
                status, detail = "crashed", f"CUDA error while timing {case.label} {case.dtype}: {err}"
                break
    seconds["profile"] = time.monotonic() - start
    return WorkerResult(
        status=status,
        detail=detail,
        checks=checks,
        timings=timings,
        device=info,
        seconds=seconds,
        role_evidence=checker.role_evidence if checker.candidate is None else {},
    )


def member_path(result_path: str | os.PathLike[str], index: int) -> pathlib.Path:
    """Where member ``index`` of a population request has its result (beside the request's result file)."""
    return pathlib.Path(result_path).with_name(f"member-{index}.json")


def run_population(request: WorkerRequest, result_path: str) -> WorkerResult:
    """Each member checked and timed in turn, in this one process (torch, the device and the baseline load once).

    A member's result is written as soon as it is known, so a member that kills the
    process loses nothing of the ones before it. After a member that crashed (a CUDA
    fault: this process's context is gone) no other member runs; the parent runs the
    rest in a fresh worker.
    """
    done, crashed = 0, False
    for index, libraries in enumerate(request.population):
        log(f"population member {index}{timing.clock_note()}")
        member = request.model_copy(update={"mode": "evaluate", "candidate_libraries": libraries, "population": []})
        result = run(member)
        write_record(result, member_path(result_path, index))
        done += 1
        if result.status == "crashed":
            crashed = True
            break
    # "crashed" also tells main() to skip the interpreter's teardown, which would touch the lost context
    return WorkerResult(
        status="crashed" if crashed else "ok", detail=f"{done} of {len(request.population)} members evaluated"
    )


def run_batch(request: WorkerRequest, result_path: str) -> WorkerResult:
    """Each request of ``request.batch`` (other ops' bench requests) run in turn in this one process.

    Why: starting a worker (torch, CUDA, the sandbox) cost about 8 s an op in the census on the
    H200 (2026-12-02), more than the op's timing. Each member's result is written as soon as it
    is known. A member that raises outside a kernel gets a ``baseline_failed`` result naming the
    error, and the batch goes on (the parent runs that op again on its own, where the error gets
    its full report and the contract repair). After a CUDA fault (this process's context is gone)
    no other member runs; the parent runs the rest in a fresh worker.
    """
    import torch

    done, crashed = 0, False
    for index, member in enumerate(request.batch):
        log(f"batch member {index}: {member.op_id}")
        started = time.monotonic()
        try:
            result = run(member)
        except Exception as err:  # noqa: BLE001 - recorded as the member's own failure
            if is_cuda_error(err):
                result = WorkerResult(status="crashed", detail=f"CUDA error in {member.op_id}: {err}")
            else:
                result = WorkerResult(status="baseline_failed", detail=f"{type(err).__name__}: {err}"[:2000])
        # the member's own time, so the census can say which op is slow
        result = result.model_copy(update={"seconds": {**result.seconds, "op": time.monotonic() - started}})
        write_record(result, member_path(result_path, index))
        done += 1
        if result.status == "crashed":
            crashed = True
            break
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # the next op's buffer sets start from a clean pool
    return WorkerResult(status="crashed" if crashed else "ok", detail=f"{done} of {len(request.batch)} ops run")


def _single(request: WorkerRequest, device, stream, info) -> WorkerResult:
    """Call one implementation a few times per case, nothing else: what a profiler should see."""
    import torch

    libraries = request.candidate_libraries or request.baseline_libraries
    cases = request.checks or [
        CheckCase(label=t.label, sizes=t.sizes, dtype=t.dtype, export=t.export, unit=t.unit, seed=1)
        for t in request.timings
    ]
    with torch.cuda.stream(stream):
        for case in cases:
            gen = torch.Generator(device=device)
            gen.manual_seed(case.seed)
            plan = plan_call(request.contract, case.sizes, case.dtype, case.layout)
            bufs = inputs.Buffers(plan, device)
            bufs.load(inputs.make_images(plan, case.distribution, gen, device))
            fn = loader.function(libraries[case.unit], case.export, owner="single")
            for _ in range(request.single_calls):
                fn(*bufs.args())
            torch.cuda.synchronize()
    return WorkerResult(status="ok", device=info)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2:
        print("usage: python -m optimize.harness.worker REQUEST.json RESULT.json", file=sys.stderr)
        return 2
    request = WorkerRequest.model_validate_json(open(argv[0], encoding="utf-8").read())
    try:
        import torch
    except ImportError:
        print("kernelsmith worker: torch is not installed here", file=sys.stderr)
        return EXIT_NO_GPU
    if not torch.cuda.is_available():
        print("kernelsmith worker: no CUDA device is visible to torch", file=sys.stderr)
        return EXIT_NO_GPU
    try:
        if request.mode == "population":
            result = run_population(request, argv[1])
        elif request.mode == "batch":
            result = run_batch(request, argv[1])
        else:
            result = run(request)
    except Exception as err:  # noqa: BLE001
        traceback.print_exc()
        # a CUDA fault surfacing outside a guarded call is still a kernel's doing
        return 1 if is_cuda_error(err) else EXIT_HARNESS
    write_record(result, argv[1])
    if result.status == "crashed":
        # the CUDA context is gone: skip interpreter teardown, which would touch it again
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
