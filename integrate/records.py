"""Records of the integrate stage, written under ``work/integrate/<run>/``.

They live here rather than in :mod:`pipeline.records` because no other stage
reads them; they follow the same rules (frozen, ``extra="forbid"``,
``schema_version`` on the top-level ones, written with
:func:`pipeline.record_io.write_record`).

Files of one integrate run:

- ``patch.json`` (:class:`Patch`): what was changed, where, with the sha256 of
  every touched file before and after, and how the patch was verified.
- ``sglang.patch``: the git-style unified diff itself.
- ``report.json`` (:class:`IntegrateReport`): the patch plus everything proven
  about it on the GPU (correctness through SGLang's own ops, SGLang's tests,
  end-to-end proxy), and what was *not* run and why.
- ``PR.md``: the pull-request text written from ``report.json``.
- ``self-check/self-check.json`` (:class:`SelfCheck`): ``--self-check``, the baseline
  checked against a pristine copy of itself through SGLang.

What must stay true: a check that did not run is recorded as not run
(``ran=False`` with the reason), never as passed; counts come from parsed tool
output, never from expectations.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from pipeline.record_io import Record, VersionedRecord
from pipeline.records import Dtype, SourceInfo, Span
from pipeline.run_records import Evaluation

Layout = Literal["wheel", "checkout", "package"]


# --------------------------------------------------------------------------- patch


class FileChange(Record):
    """One source file the patch rewrites."""

    path: str  # relative to the sglang package root, e.g. kernels/jit/csrc/elementwise/activation.cuh
    diff_path: str  # as written after a/ and b/ in sglang.patch, e.g. sglang/kernels/jit/csrc/...
    sha256_before: str
    sha256_after: str
    size_before: int
    size_after: int
    spans: list[Span]  # the editable spans replaced in this file (byte offsets of the pristine file)
    ops: list[str]  # op ids whose candidates edit this file
    created: bool = False  # a file the patch adds (a KDA landing's); sha256_before is the empty file's


class OpChange(Record):
    """One accepted candidate, as integrated."""

    op_id: str
    candidate: str  # Candidate.id
    task_dir: str
    spans: list[str]  # names of the spans the candidate replaces
    files: list[str]  # package-relative paths it touches
    evaluation: Evaluation | None = None  # the optimize stage's verdict on this candidate
    rationale: str = ""
    skills: list[str] = Field(default_factory=list)  # the skills whose transforms made it (Candidate.skill_ids)
    coder: str = ""  # Candidate.coder ("offline:search", "llm:coding", "external:claude"; "" in older records)
    # where it lands in SGLang (integrate.landing): its JIT kernel edited in place, or a rewrite as a
    # KDA implementation (kda_target: its KernelSpec target; kda_guard: the public function's guard)
    landing: Literal["in_place", "kda"] = "in_place"
    kda_target: str = ""
    kda_guard: str = ""
    landing_note: str = ""  # a rewrite left in place: why it could not land as a KDA implementation


class Patch(VersionedRecord):
    run: str
    source: SourceInfo  # the pristine tree the diff is taken against
    layout: Layout
    prefix: str  # where the package root sits inside the diff tree: "sglang" or "python/sglang"
    tree_root: str  # the pristine tree's root (the folder `git apply` / `patch -p1` run in)
    patch_file: str  # absolute path of sglang.patch
    patch_sha256: str
    files: list[FileChange]
    ops: list[OpChange]
    skipped: dict[str, str] = Field(default_factory=dict)  # op id -> why it is not in the patch
    patched_tree: str | None = None  # root of the patched copy (same layout as tree_root)
    baseline_tree: str | None = None  # root of a pristine copy, made only with --in-place
    in_place: bool = False
    backups: str | None = None  # where the in-place originals were saved
    verified: list[str] = Field(default_factory=list)  # checks that passed, e.g. "spans", "git apply"
    not_verified: dict[str, str] = Field(default_factory=dict)  # check -> why it did not run


# --------------------------------------------------------------------------- GPU checks


class CheckCase(Record):
    """One shape x dtype of the public op, patched tree against the pristine tree."""

    label: str
    sizes: dict[str, int]
    rows: int
    width: int
    dtype: Dtype
    seed: int  # seeds the inputs (same in both trees); reproduces the case
    # skipped: the pristine op itself rejects the case (not a test of the patch);
    # error: the patched side raised or crashed (counts as a failure)
    status: Literal["pass", "fail", "error", "skipped"]
    reason: str = ""
    bitwise_equal: bool | None = None
    max_abs_err: float | None = None
    rtol: float
    atol: float
    outputs: list[str] = Field(default_factory=list)  # names of the tensors compared
    poisoned: bool = False  # outputs were NaN-filled before the call (unwritten elements are caught)
    held_out: bool = False  # a fresh shape drawn for this check, not a catalog one
    first_call_s: float | None = None  # the patched call's wall time when it was the first of its JIT module
    timed_out: bool = False  # a worker did not answer within the case's time limit (killed, restarted)
    # the path the patched call took ("KernelSpec <op> (backend triton, get_kernel) -> <target>"); "" for CUDA
    via: str = ""
    launches: dict[str, int] = Field(
        default_factory=dict
    )  # Triton: "<module>:<kernel>" -> launches counted in the call


class SanitizerRun(Record):
    tool: str  # memcheck, racecheck, ...
    ran: bool
    reason: str = ""  # why it did not run
    errors: int | None = None  # from "ERROR SUMMARY: N errors"
    cases: list[str] = Field(default_factory=list)
    command: str = ""


class OpCheck(Record):
    """Correctness of one op through SGLang's public function and its own load_jit."""

    op_id: str
    function: str  # dotted path of the public function called in both trees
    ran: bool
    reason: str = ""  # why it did not run
    cases: list[CheckCase] = Field(default_factory=list)
    passed: int = 0
    failed: int = 0  # fail + error
    skipped: int = 0
    jit_build_s: dict[str, float] = Field(
        default_factory=dict
    )  # "baseline"/"patched" -> wall seconds SGLang's load_jit took to build every module of the checks (all ops, in parallel)
    planned: bool = True  # False: the op could not be called from its contract (``reason`` says why)
    first_call_s: float | None = (
        None  # patched tree: first call of each of the op's JIT modules (build + load + run), summed
    )
    modules: int = 0  # JIT modules the op's cases need
    unplanned: dict[str, str] = Field(default_factory=dict)  # "<case> <dtype>" -> why that case has no plan
    sanitizer: list[SanitizerRun] = Field(default_factory=list)
    command: str = ""  # reproduces this check
    via: str = ""  # the path every case that ran took (CheckCase.via), when they agree; "" for CUDA
    # a KDA landing (the patched tree registers a KDA KernelSpec for the op): passing cases whose call
    # reached it through the public function's dispatch; None where the tree has no KDA spec for the op
    kda_cases: int | None = None
    fixes: list[str] = Field(default_factory=list)  # contract fixes the pristine op's own check demanded (self-check)


class TestRun(Record):
    """SGLang's own tests for one op, run against the patched tree."""

    __test__ = False  # not a pytest class

    op_id: str
    ran: bool
    reason: str = ""
    files: list[str] = Field(default_factory=list)  # checkout-relative test files
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    errors: int = 0
    xfailed: int = 0
    xpassed: int = 0
    exit_code: int | None = None
    summary: str = ""  # pytest's closing line, verbatim
    command: str = ""
    log: str = ""  # path of the full output


class BenchRun(Record):
    """A generated ``marker`` benchmark (integrate.upstream_tests) run against one tree."""

    op_id: str
    tree: Literal["pristine", "patched"]
    ran: bool
    reason: str = ""  # why it did not run, or how it failed
    table: str = ""  # marker's printed table, verbatim
    command: str = ""
    log: str = ""


#: Under an integrate folder: the generated test and benchmark, laid out as SGLang's repository.


class UpstreamCheck(Record):
    """The SGLang-form test and benchmark generated for one op of the PR, and what they showed."""

    op_id: str
    generated: bool
    missing: str = ""  # what is missing for them, when not generated
    test_file: str = ""  # SGLang-repository-relative
    bench_file: str = ""
    test: TestRun | None = None  # the generated test against the patched tree
    bench: list[BenchRun] = Field(default_factory=list)  # the benchmark, pristine then patched


# --------------------------------------------------------------------------- end to end


Change = Literal["faster", "slower", "no change"]


class AATiming(Record):
    """A/A: a byte-for-byte copy of the pristine tree, built and timed like the patched one, in the same rounds.

    Why: two trees with identical ops can time apart (build, memory placement, which runs first); a
    change no larger than what the copy shows is not shown to be the patch's (integrate.e2e's METHOD)."""

    copy_us: float
    copy_spread_pct: float
    change_pct: float  # (copy - pristine) / pristine * 100: what no change at all measures as
    # COVERAGE x half the wider of the two trees' p10-p90 spreads, in % of the pristine median
    # (integrate.layer_verdicts; records written before COVERAGE have the spread band alone)
    band_pct: float
    inside: bool  # |change_pct| <= band_pct: the A/A difference is within its band


class PartTiming(Record):
    """One part of the decoder layer (the SGLang ops alone, or one step), both trees."""

    baseline_us: float
    patched_us: float
    baseline_spread_pct: float
    patched_spread_pct: float
    change_pct: float  # (patched - baseline) / this part's baseline * 100
    share_of_layer_pct: float  # (patched - baseline) / the WHOLE layer's baseline * 100
    verdict: Change  # integrate.layer_verdicts.judge: "no change" inside the noise band
    aa: AATiming | None = None  # the pristine copy against the pristine tree (None: a record from before A/A)
    noise_band_pct: float | None = (
        None  # in % of the whole layer, A/A included (integrate.layer_verdicts.noise_band_pct)
    )


class ContextTiming(Record):
    """One SGLang step in its neighbourhood: the step with the layer's steps before and after it, in one graph.

    Why: a gain from launch overlap (PDL's early trigger, a late wait) shows only when the kernels around
    the step are the ones a model runs; replayed after itself the op overlaps with its own copy."""

    neighbours: list[str]  # the steps of the graph, in order (the step in the middle)
    baseline_us: float
    patched_us: float
    change_pct: float  # (patched - baseline) / baseline * 100 of the neighbourhood
    noise_band_pct: float  # in % of the neighbourhood's baseline, A/A included
    verdict: Change
    aa: AATiming | None = None


class LayerTiming(Record):
    """One whole decoder layer at one token count, both trees (integrate.e2e's METHOD)."""

    phase: Literal["decode", "prefill"]
    tokens: int
    kv_len: int | None = None  # decode: KV-cache tokens each sequence attends to; prefill: causal over `tokens`
    baseline_us: float  # the whole layer (GEMMs, attention and SGLang's ops)
    patched_us: float
    baseline_spread_pct: float  # (p90 - p10) / median of the pooled replays
    patched_spread_pct: float
    change_pct: float  # (patched - baseline) / baseline * 100 of the whole layer; negative = faster
    noise_band_pct: float | None = (
        None  # integrate.layer_verdicts.noise_band_pct; |change| inside it is "no change" (None: an older record)
    )
    verdict: Change | None = None  # None: a record from before the whole-layer proxy (not judged)
    baseline_tokens_per_s: float  # tokens / (layers x whole-layer time): an upper bound (no embedding, head, sampling)
    patched_tokens_per_s: float
    non_gemm: PartTiming | None = None  # the SGLang ops alone, back to back (NOT the whole layer)
    ops_us: dict[str, dict[str, float]] = Field(default_factory=dict)  # step -> {"baseline": us, "patched": us}
    aa: AATiming | None = None  # the whole layer, pristine copy against pristine (None: a record from before A/A)
    context: dict[str, ContextTiming] = Field(default_factory=dict)  # SGLang step -> it in its neighbourhood
    # tree -> the whole layer's median in each round, in round order: an A/A offset that is the same in
    # every round belongs to the tree's worker process (where its memory landed), one that scatters to noise
    rounds_us: dict[str, list[float]] = Field(default_factory=dict)


class OneBatchResult(Record):
    ran: bool
    reason: str = ""
    command: str = ""
    baseline: dict[str, float] = Field(default_factory=dict)  # prefill/decode/total throughput token/s
    patched: dict[str, float] = Field(default_factory=dict)


class E2EResult(Record):
    ran: bool
    reason: str = ""
    model: str = ""
    layers: int = 0
    dtype: Dtype = "bf16"
    recipe: str = ""  # the layer recipe, relative to the kernelsmith repository (integrate/layers/<model>.toml)
    kv_len: int | None = None  # decode points: KV-cache tokens each sequence attends to
    attention: str = ""  # what computed attention (torch SDPA and its version)
    ops: list[str] = Field(default_factory=list)  # step sequence of one layer, in order
    parts: dict[str, str] = Field(default_factory=dict)  # step -> "SGLang <op id>" or "torch <part>"
    sources: dict[str, str] = Field(default_factory=dict)  # step -> where SGLang's model runs it ("srt/models/x.py:N")
    skipped_ops: dict[str, str] = Field(default_factory=dict)  # step -> why it is not in the proxy
    rows: list[LayerTiming] = Field(default_factory=list)
    assumption: str = ""
    command: str = ""
    one_batch: OneBatchResult | None = None
    # the order the trees' workers started in (each its own process, CUDA context and allocations):
    # on the H100 (2026-12-07) the first-started tree was the fastest at decode T=256 in 4 of 4 runs
    start_order: list[str] = Field(default_factory=list)


# --------------------------------------------------------------------------- series


class SeriesPart(Record):
    """One family's part of a patch written as a series (:mod:`integrate.series`)."""

    index: int  # 1-based: apply parts 1..index-1 first
    family: str  # the op ids' group, e.g. "activation"
    ops: list[str]
    file: str  # relative to the integrate folder: series/NN-<family>.patch
    sha256: str
    files: list[str]  # package-relative paths the part changes
    branch: str = ""  # --git-branch: the part's branch (<branch>-<NN>-<family>), stacked on the part before
    commit: str = ""


# --------------------------------------------------------------------------- report


class IntegrateReport(VersionedRecord):
    run: str
    patch: Patch
    gpu: str | None = None  # device name where the GPU steps ran; None = no GPU here
    torch: str | None = None
    checks: list[OpCheck] = Field(default_factory=list)
    tests: list[TestRun] = Field(default_factory=list)
    # one per layer recipe the proxy ran (integrate.e2e.recipes_for: every recipe with a step that runs
    # changed code, else the default one); a record written before there were several held one result
    e2e: list[E2EResult] = Field(default_factory=list)
    not_run: dict[str, str] = Field(default_factory=dict)  # step -> why it did not run
    failed_steps: dict[str, str] = Field(default_factory=dict)  # step -> the error that broke it
    branch: str | None = None  # --git-branch result
    commit: str | None = None
    # op -> the other ops whose entry points run code its candidate changes (integrate.reached): checked
    # through SGLang beside it, and what tells whether a layer recipe's step runs the patch
    reach: dict[str, list[str]] = Field(default_factory=dict)
    reach_unknown: dict[str, str] = Field(default_factory=dict)  # companion op -> why its reach is unknown
    # per op of the PR: the SGLang-form test and benchmark generated for it (integrate.upstream_tests)
    upstream: list[UpstreamCheck] = Field(default_factory=list)
    # a merged build (integrate --from): op -> the optimize run its candidate came from (integrate.merge)
    merged_from: dict[str, str] = Field(default_factory=dict)
    # the patch as one part per op family, applying in order (integrate.series); [] for one family
    series: list[SeriesPart] = Field(default_factory=list)
    series_part: int = 0  # a family's PR: its part's index (0: the PR of the whole patch)

    @field_validator("e2e", mode="before")
    @classmethod
    def _one_result_before(cls, value: object) -> object:
        """A report of one recipe (before several were run) reads as a list of it."""
        if value is None:
            return []
        return [value] if isinstance(value, (dict, E2EResult)) else value


# --------------------------------------------------------------------------- merged build


class MergedRun(VersionedRecord):
    """``work/runs/<run>/merged.json``: a run folder assembled from several runs' accepted candidates
    (:mod:`integrate.merge`), the one build of everything."""

    run: str
    date: str
    sources: list[str]  # the runs merged, in the order given
    ops: dict[str, str]  # op id -> the run its candidate came from
    left_out: dict[str, str] = Field(default_factory=dict)  # op id -> why no run gave it an accepted candidate


# --------------------------------------------------------------------------- self-check


class SelfCheck(VersionedRecord):
    """The baseline checked against itself through SGLang, per op."""

    date: str
    command: str
    gpu: str | None = None  # None: no GPU here, nothing ran
    source: SourceInfo
    baseline_tree: str
    copy_tree: str
    checks: list[OpCheck] = Field(default_factory=list)
    not_loaded: dict[str, str] = Field(default_factory=dict)  # op id -> why its task could not be read
