"""The request and result records exchanged with the worker process.

Why a file protocol: every evaluation runs in a separate process
(:mod:`optimize.harness.worker`) so that an illegal memory access, a hang or an
abort in a candidate kills only that process. The parent writes a
:class:`WorkerRequest` as JSON, starts ``python -m optimize.harness.worker
request.json result.json``, and reads a :class:`WorkerResult` back. Both are
frozen pydantic records (``extra="forbid"``), so a field typo on either side is an
error, not a silently ignored setting.

What must stay true:
- The request is complete: the worker reads nothing else (no task folder, no
  config file). A request file alone reproduces an evaluation, bit for bit in
  its inputs, because every case carries its own seed.
- A result file exists only if the worker got to the end; a missing file means
  the worker died, and the parent reports ``crashed`` or ``timeout``.
- These records are internal to the harness; what other stages see is
  :class:`pipeline.run_records.Evaluation`.
- No torch here: the parent imports this on CPU-only machines.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.plan import Layout
from pipeline.config import HarnessConfig
from pipeline.record_io import Record, VersionedRecord
from pipeline.records import Contract, Dtype

Distribution = Literal["normal", "uniform", "edge"]
DISTRIBUTIONS: tuple[Distribution, ...] = ("normal", "uniform", "edge")


class CheckCase(Record):
    """One correctness check: a shape, a dtype, how to fill the inputs."""

    label: str
    sizes: dict[str, int]  # every size symbol of the contract -> value
    dtype: Dtype
    export: str  # the export name to call in both libraries
    unit: int = 0  # which built module (index into the request's library lists) serves this case
    distribution: Distribution = "normal"
    layout: Layout = "contiguous"
    held_out: bool = False  # drawn fresh for this evaluation (not in the catalog)
    seed: int  # seeds the input values of this case (from os.urandom in the parent)


class TimingCase(Record):
    label: str
    sizes: dict[str, int]
    dtype: Dtype
    export: str
    unit: int = 0
    tokens: int | None = None  # the catalog shape's token count (ShapeCase.tokens); None: read from sizes


class WorkerRequest(VersionedRecord):
    mode: Literal["evaluate", "bench", "single", "population", "batch"] = "evaluate"
    op_id: str
    contract: Contract
    # one module per build unit (a unit holds at most one instantiation per dtype)
    baseline_libraries: list[str]
    candidate_libraries: list[str] | None = None  # None: the baseline is checked on its own
    # mode "population": one library list per member, each checked and timed as "evaluate" would,
    # its result written to member-<i>.json beside the result file as soon as it is known
    population: list[list[str]] = Field(default_factory=list)
    # mode "batch": whole requests of other ops (bench mode), run in turn in this one process,
    # each result written to member-<i>.json as soon as it is known (bench --ops, track run:
    # one worker start for many ops instead of one each)
    batch: list[WorkerRequest] = Field(default_factory=list)
    checks: list[CheckCase] = Field(default_factory=list)
    timings: list[TimingCase] = Field(default_factory=list)
    harness: HarnessConfig = Field(default_factory=HarnessConfig)
    device_cache_dir: str  # where <gpu-name>.json with copy bandwidth / latency lives
    stop_at_first_failure: bool = True
    torch_eager: bool = False  # bench: also time the PyTorch reference eagerly
    torch_compile: bool = False  # bench: also time it through torch.compile
    # mode "single" (profilers): call the candidate (else the baseline) a few times per case
    single_calls: int = 3
    # a Triton task's carried sglang package folder: its file's `import sglang.<...>` resolves there
    # (optimize.harness.triton_library.use_package); None for CUDA and for a file that imports no sglang
    sglang_package: str | None = None
    # track ab --plant N: the baseline's timed graphs call its entry N times per call (an extra pass: a
    # regression of known size, which the release A/B must flag; bench.release_ab)
    planted_passes: int = Field(default=1, ge=1)


class CheckResult(Record):
    label: str
    sizes: dict[str, int]
    dtype: Dtype
    distribution: Distribution
    layout: Layout
    held_out: bool
    status: Literal["pass", "fail", "skipped"]
    failure: Literal["incorrect", "crashed"] | None = None
    reason: str = ""
    bitwise_equal: bool | None = None  # candidate == baseline bit for bit, on every output
    max_abs_err: float | None = None  # candidate vs baseline, over finite elements
    ref_rel_err: float | None = None  # ||impl - ref|| / ||ref|| of the checked impl
    baseline_ref_rel_err: float | None = None
    # the baseline's graph replayed on run 1's inputs gave run 1's outputs bit for bit (None: not tried);
    # where it did not (atomics), the candidate is not held to repeatability at this case
    baseline_repeatable: bool | None = None
    seconds: float = 0.0


class Traffic(Record):
    """Bytes one call reads and writes through the contract's tensors (inputs read once, outputs
    written once, inout both, scratch neither; ``Contract.extra_bytes`` is in neither, its direction unknown): the
    access pattern :func:`optimize.harness.roofline.device_floor_us` prices."""

    read: int
    written: int


class TimingResult(Record):
    label: str
    sizes: dict[str, int]
    dtype: Dtype
    bytes: int  # contract-counted bytes moved by one call
    calls_per_graph: int
    buffer_sets: int
    repeats: int
    baseline_us: float
    baseline_spread_pct: float
    candidate_us: float | None = None
    candidate_spread_pct: float | None = None
    eager_us: float | None = None
    compile_us: float | None = None
    notes: list[str] = Field(default_factory=list)
    # bytes every call certainly moves (outputs written; inputs and inouts along the rows read): the floor's bytes
    # (roofline.must_move_bytes); 0 = not counted (no floor check)
    must_move_bytes: int = 0
    # buffer sets whose outputs, after the timed replays, were compared with the baseline's
    validated_sets: int = 0
    byte_bound: bool = True  # the contract's Contract.byte_bound: whether time ÷ floor applies
    tokens: int | None = None  # TimingCase.tokens, passed through
    traffic: Traffic | None = None  # the bytes' split into read and written; None from older workers


class DeviceInfo(Record):
    """Per-device ceilings, measured once and cached (see :mod:`optimize.harness.roofline`)."""

    name: str
    sm_count: int
    l2_bytes: int
    copy_gbps: float  # large device-to-device copy, bytes read + written per second / 1e9
    copy_spread_pct: float
    min_kernel_us: float  # an empty kernel back to back in a CUDA graph, the faster of plain and PDL
    # (bytes moved, µs): device-to-device copies moving that many bytes (half read, half
    # written), back to back in a CUDA graph; [] in caches from before it (issue 14 item 6)
    copy_latency_us: list[tuple[int, float]] = Field(default_factory=list)
    # what the floors above were the fastest of (optimize.harness.floor_kernels): variant ->
    # [(bytes moved, µs per call)], bytes 0 for the empty kernels; {} in caches from before it
    floor_variants_us: dict[str, list[tuple[int, float]]] = Field(default_factory=dict)
    # (bytes read, µs) of a read-only stream and (bytes written, µs) of a write-only one, timed like
    # the copies (the fastest variant at each size); [] in caches from before them
    read_latency_us: list[tuple[int, float]] = Field(default_factory=list)
    write_latency_us: list[tuple[int, float]] = Field(default_factory=list)
    torch: str
    cuda: str
    measured_at: str


class WorkerResult(VersionedRecord):
    status: Literal["ok", "incorrect", "crashed", "baseline_failed"]
    detail: str = ""
    checks: list[CheckResult] = Field(default_factory=list)
    timings: list[TimingResult] = Field(default_factory=list)
    device: DeviceInfo | None = None
    seconds: dict[str, float] = Field(default_factory=dict)  # test / profile inside the worker
    notes: list[str] = Field(default_factory=list)
    # What the *baseline* did that its contract did not say (baseline-only checks):
    # "written" = an input it modifies; "never_written" = an output it leaves whole.
    # The contract was wrong, not the kernel: the sweep re-checks it with the role inout.
    role_evidence: dict[str, Literal["written", "never_written"]] = Field(default_factory=dict)
