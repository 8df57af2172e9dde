"""Static features of a task's editable region, plus the profile facts the planner uses.

Why: the planning policy (:mod:`optimize.policy`) decides which skill to try next
from *facts*, not from an LLM's impression of the code: "the kernel uses 16-byte
vectors", "the launcher turns PDL on through a template flag", "there is a
grid-stride loop whose weight load does not depend on the row". This module turns
what the CUDA-region toolkit reads (:mod:`optimize.cuda_regions`: the region
model; :mod:`optimize.cuda_facts`: what its code does) into flat features and
merges them with what a measurement said (:class:`ProfileFacts`). Skills'
applicability rules (:mod:`optimize.skills`) are written over the flat view
:meth:`Features.flat`.

What must stay true:
- Features are read from the region texts only (the editable spans), so the same
  function describes the baseline and any candidate (``features_of_regions``).
- Every flat feature name is a field of :class:`StaticFeatures` or
  :class:`ProfileFacts` (no name in both); the rule language validates names
  against :data:`FEATURE_NAMES`, so a typo in a skill file is an error at load.
- A fact that cannot be read is ``None`` ("unknown"), never a guess dressed as a
  fact; the rule language treats unknown as undecided. The one declared guess is
  ``memory_bound`` when no profile says otherwise: a region without tensor-core
  instructions is taken as memory bound and ``memory_bound_from_profile`` says so.
- Sizes assume the instantiation dtype is ``dtype_bytes`` wide (2: bf16/fp16, the
  dtypes SGLang's hot paths run) when a template type parameter's size matters.
- No torch, no CUDA: this runs on the CPU machine.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import Field

from optimize.cuda_facts import (
    GridKind,
    iter_literal_constants,
    launch_site_keys,
    launches_on_path,
    owner_name,
)
from optimize.cuda_regions import Region
from optimize.cuda_sites import size_switches, strided_divmod_sites, typed_access_sites
from optimize.cuda_spans import region_texts
from optimize.kernel_facts import KernelFeatures, LaunchSite, device_facts, kernel_features, launch_sites
from pipeline.record_io import Record
from pipeline.records import KernelResources, Span
from pipeline.run_records import Evaluation
from source.cuda_text import parse_number, text_of

_ROLE_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("unroll", re.compile(r"unroll", re.I)),
    ("vec_bytes", re.compile(r"vec\w*byte|byte\w*vec|vec_?size", re.I)),
    ("items", re.compile(r"item|elems?_?per|per_?thread|\bk?ipt\b|rows?_?per", re.I)),
    ("block_size", re.compile(r"block_?size|block_?dim|num_?threads|threads_?per_?block|cta_?size|kThreads", re.I)),
]

ConstantRole = Literal["block_size", "vec_bytes", "items", "unroll"]


# --------------------------------------------------------------------------- records


def top_stall(metrics: Mapping[str, float]) -> tuple[str, float] | None:
    """The warp-stall reason with the most warps stalled per issue in :meth:`optimize.harness.tools.NcuResult.metrics`
    (its ``stall_<reason>`` entries), or None when the profile has none. Here, not in the tools module, so
    the search's modules (policy -> features) never reach the harness's evaluation (tools -> evaluate)."""
    stalls = [(key.removeprefix("stall_"), value) for key, value in metrics.items() if key.startswith("stall_")]
    return max(stalls, key=lambda kv: kv[1]) if stalls else None


class ProfileFacts(Record):
    """What a measurement said, reduced to the numbers the rules use (``None`` = not measured)."""

    time_over_floor: float | None = Field(None, description="worst shape: measured time / time at copy bandwidth")
    pct_of_copy_bw: float | None = Field(None, description="worst shape: achieved bandwidth, % of a device copy")
    min_time_us: float | None = Field(None, description="fastest shape's time (a few us = launch-latency bound)")
    registers: int | None = Field(None, description="most registers per thread of any kernel (ptxas)")
    spills: int | None = Field(None, description="spill stores + loads over all kernels (ptxas)")
    stack_bytes: int | None = Field(None, description="largest stack frame of any kernel (ptxas)")
    smem_bytes: int | None = Field(None, description="largest static shared memory of any kernel (ptxas)")
    occupancy: float | None = Field(None, description="achieved or theoretical occupancy, 0..1")
    dram_pct: float | None = Field(None, description="DRAM throughput, % of peak (Nsight Compute)")
    top_stall: str | None = Field(
        None, description="warp-stall reason with most warps stalled per issue (Nsight Compute)"
    )
    memory_bound: bool | None = Field(None, description="the roofline puts the op under the bandwidth roof")
    small_batch: bool | None = Field(None, description="the shapes include a small batch (tokens <= 16)")
    min_tokens: int | None = Field(None, description="smallest token count among the measured shapes")
    max_tokens: int | None = Field(None, description="largest token count among the measured shapes")

    @classmethod
    def from_evaluation(
        cls,
        evaluation: Evaluation,
        *,
        resources: Sequence[KernelResources] | None = None,
        memory_bound: bool | None = None,
        occupancy: float | None = None,
        ncu: Mapping[str, float] | None = None,
        token_symbol: str = "num_tokens",
        small_batch_tokens: int = 16,
    ) -> ProfileFacts:
        """Reduce an :class:`Evaluation` (timings + ptxas resources) to profile facts.

        Worst shapes are used (highest time over floor, lowest % of copy
        bandwidth): the planner looks for where time is lost. ``memory_bound``
        is not derivable from timings alone and stays as given. ``ncu`` is
        :meth:`optimize.harness.tools.NcuResult.metrics` of the same code: it
        gives the achieved occupancy (unless ``occupancy`` is given), the DRAM
        throughput and the top warp-stall reason.
        """
        ncu = ncu or {}
        if occupancy is None and "achieved_occupancy_pct" in ncu:
            occupancy = ncu["achieved_occupancy_pct"] / 100.0
        stall = top_stall(ncu)
        timings = evaluation.timings
        res = list(resources if resources is not None else (evaluation.build.resources if evaluation.build else []))
        tokens = [t.sizes[token_symbol] for t in timings if token_symbol in t.sizes]
        return cls(
            time_over_floor=max((t.time_over_floor for t in timings if t.floor_applies), default=None),
            pct_of_copy_bw=min((t.pct_of_copy_bw for t in timings), default=None),
            min_time_us=min((t.time_us for t in timings), default=None),
            registers=max((r.registers for r in res), default=None),
            spills=sum(r.spill_stores + r.spill_loads for r in res) if res else None,
            stack_bytes=max((r.stack_bytes for r in res), default=None),
            smem_bytes=max((r.smem_bytes for r in res), default=None),
            occupancy=occupancy,
            dram_pct=ncu.get("dram_throughput_pct"),
            top_stall=stall[0] if stall else None,
            memory_bound=memory_bound,
            small_batch=(min(tokens) <= small_batch_tokens) if tokens else None,
            min_tokens=min(tokens) if tokens else None,
            max_tokens=max(tokens) if tokens else None,
        )


class StaticFeatures(Record):
    """Flat facts read from the region's source (see the module docstring)."""

    num_kernels: int = Field(0, description="__global__ definitions in the region")
    num_device_functions: int = Field(0, description="__device__ / SGL_DEVICE functions in the region")
    num_launchers: int = Field(0, description="host functions that launch kernels")
    load_bytes: int | None = Field(None, description="narrowest per-kernel vector width in bytes (known kernels)")
    max_load_bytes: int | None = Field(None, description="widest vector width in bytes of any kernel")
    vector_loads: bool = Field(False, description="some kernel moves data through vector types")
    fast_math_flag: bool = Field(
        False,
        description="the op is built with --use_fast_math, so nvcc already uses the fast intrinsics (False also when no build flags were given)",
    )
    block_size: int | None = Field(None, description="threads per block when every launch uses the same constant")
    block_size_min: int | None = Field(None, description="smallest compile-time block size of any launch")
    block_size_max: int | None = Field(None, description="largest compile-time block size of any launch")
    block_size_runtime: bool = Field(False, description="some launch computes its block size at run time")
    tunable_block_size: bool = Field(False, description="a block-size constant has a literal value")
    tunable_items: bool = Field(False, description="an items-per-thread constant has a literal value")
    tunable_unroll: bool = Field(False, description="an unroll-factor constant has a literal value")
    tunable_vec_bytes: bool = Field(False, description="a vector-bytes constant has a literal value")
    launch_sites: int = Field(0, description="kernel launch expressions in the region")
    launches_per_entry: int = Field(0, description="most launches one entry call makes on one path")
    grid_kind: str = Field("none", description="per_item | per_row | persistent | mixed | unknown | none")
    per_item_grid: bool = Field(False, description="a grid of ceil(items / block) CTAs")
    per_row_grid: bool = Field(False, description="a grid of one CTA per row (token)")
    persistent_grid: bool = Field(False, description="a grid capped at occupancy x SM count")
    warp_per_row: bool = Field(False, description="a launch of 32-thread blocks over rows")
    pdl_launch: bool = Field(False, description="every launch enables PDL (literal or template flag)")
    pdl_flag: bool = Field(False, description="a launch switches PDL by a template flag (kUsePDL)")
    pdl_off: bool = Field(False, description="a launch leaves PDL off (enable_pdl(false) or no attribute)")
    pdl_wait: bool = Field(False, description="every kernel waits on the primary grid")
    pdl_trigger: bool = Field(False, description="every kernel triggers its dependents")
    pdl_trigger_at_end: bool = Field(False, description="a kernel triggers only as its last statement")
    launch_bounds: bool = Field(False, description="every kernel declares __launch_bounds__")
    kernels_without_launch_bounds: int = Field(0, description="kernels with no __launch_bounds__")
    launch_bounds_min_blocks: bool = Field(False, description="a kernel's launch bounds name min blocks per SM")
    loops: int = Field(0, description="loops in device code")
    constant_loops: int = Field(0, description="loops with a compile-time trip count")
    runtime_loops: int = Field(0, description="loops bounded by a run-time value")
    loops_missing_unroll: int = Field(0, description="compile-time loops without #pragma unroll")
    grid_stride_loop: bool = Field(False, description="a loop strides by gridDim")
    loop_invariant_loads: int = Field(0, description="loads inside run-time loops that do not depend on the loop")
    slow_math_calls: int = Field(0, description="precise libm calls in device code (expf, tanhf, erff, ...)")
    fast_math_swappable: int = Field(0, description="of those, calls with a direct fast intrinsic")
    fast_intrinsics: int = Field(0, description="fast intrinsics already used (__expf, rsqrtf, ...)")
    float_divisions: int = Field(0, description="float divisions in device code")
    reciprocal_divisions: int = Field(0, description="1.0f / x divisions in device code")
    uses_expf: bool = Field(False, description="device code calls expf")
    shared_memory: bool = Field(False, description="a kernel declares __shared__ memory")
    smem_static_bytes: int | None = Field(None, description="largest static shared memory of a kernel (None: unknown)")
    smem_2d_arrays: int = Field(0, description="two-dimensional __shared__ arrays (bank-conflict candidates)")
    dynamic_smem: bool = Field(False, description="extern __shared__ (dynamic) memory is used")
    syncthreads: int = Field(0, description="most __syncthreads() in one kernel")
    warp_reduce: bool = Field(False, description="warp shuffles / warp reductions in device code")
    cta_reduce: bool = Field(False, description="a block-wide reduction (CTA helpers or smem partials + barrier)")
    reduction: bool = Field(False, description="some reduction across threads")
    int_divmod_runtime: int = Field(0, description="integer / or % by a run-time value in kernels")
    int64_index: bool = Field(False, description="kernel code declares 64-bit integer values")
    cache_hints: bool = Field(False, description="cache-hinted loads or stores (__ldg, ld.global.nc, __stcs ...)")
    typed_accesses: int = Field(
        0, description="device::load_as / store_as calls in device code outside structs (streaming_hints can hint them)"
    )
    strided_divmod: int = Field(
        0, description="v / m and v % m of a kernel's strided loop variable (incremental_divmod can carry them)"
    )
    size_dispatch: int = Field(
        0,
        description="host switches over a run-time size with power-of-two cases and a generic default "
        "(extend_size_dispatch can add larger cases)",
    )
    cp_async: bool = Field(False, description="cp.async (Ampere-style asynchronous copies)")
    tma: bool = Field(False, description="bulk / tensor copies (cp.async.bulk, CUtensorMap, mbarrier)")
    tensor_core_ops: bool = Field(False, description="mma / wgmma / wmma in device code")
    register_arrays: int = Field(0, description="local arrays in kernels (stay in registers only when unrolled)")
    packed_casts: bool = Field(False, description="device code converts through packed pairs (fp32x2_t, bf16x2)")
    elementwise: bool = Field(False, description="no kernel reduces or uses shared memory")
    memory_bound_from_profile: bool = Field(False, description="memory_bound came from a measurement, not a guess")


class TunableConstant(Record):
    """A compile-time integer constant with a literal value that a transform may set."""

    span: str
    name: str
    owner: str | None  # enclosing struct or function
    value: int
    role: ConstantRole


class Features(Record):
    """Everything the planner knows about a region: static facts, details, profile."""

    static: StaticFeatures
    profile: ProfileFacts = Field(default_factory=ProfileFacts)
    kernels: list[KernelFeatures] = Field(default_factory=list)
    launches: list[LaunchSite] = Field(default_factory=list)
    constants: list[TunableConstant] = Field(default_factory=list)
    math_sites: dict[str, int] = Field(default_factory=dict)  # fast_math op -> occurrences in device code
    # (host function, the name it switches on, its largest case), one per distinct switch, sorted
    # (optimize.cuda_sites.size_switches; a launcher may switch over two sizes)
    size_switches: list[tuple[str, str, int]] = Field(default_factory=list)
    # size symbol -> its values among the measured shapes, sorted ({} without an evaluation)
    measured_sizes: dict[str, list[int]] = Field(default_factory=dict)
    spans: list[str] = Field(default_factory=list)

    def flat(self) -> dict[str, Any]:
        """Feature name -> value, the namespace applicability rules are evaluated in."""
        view = self.static.model_dump()
        view.update(self.profile.model_dump())
        if self.profile.memory_bound is None:
            view["memory_bound"] = not self.static.tensor_core_ops
        else:
            view["memory_bound_from_profile"] = True
        return view

    def kernel(self, name: str) -> KernelFeatures | None:
        return next((k for k in self.kernels if k.name == name), None)


def _descriptions() -> dict[str, str]:
    out: dict[str, str] = {}
    for model in (StaticFeatures, ProfileFacts):
        for name, info in model.model_fields.items():
            out[name] = info.description or ""
    return out


_overlap = set(StaticFeatures.model_fields) & set(ProfileFacts.model_fields)
assert not _overlap, f"feature names in both StaticFeatures and ProfileFacts: {_overlap}"
#: every name a rule may use, with its one-line meaning
FEATURE_NAMES: dict[str, str] = _descriptions()


def features(
    task_src_files: Mapping[str, bytes | str] | os.PathLike[str] | str,
    editable_spans: Sequence[Span],
    *,
    profile: ProfileFacts | Evaluation | None = None,
    dtype_bytes: int = 2,
    build_flags: Sequence[str] | None = None,
) -> Features:
    """Static features of the task's editable region merged with profile facts.

    ``task_src_files`` maps package-relative paths to contents, or is the task's
    ``src/`` folder. An :class:`Evaluation` profile is reduced with
    :meth:`ProfileFacts.from_evaluation` (memory_bound left to the static guess).
    """
    return features_of_regions(
        region_texts(task_src_files, editable_spans), profile=profile, dtype_bytes=dtype_bytes, build_flags=build_flags
    )


def measured_sizes(evaluation: Evaluation) -> dict[str, list[int]]:
    """Each size symbol's values among ``evaluation``'s timed shapes, sorted."""
    symbols = {name for t in evaluation.timings for name in t.sizes}
    return {name: sorted({t.sizes[name] for t in evaluation.timings if name in t.sizes}) for name in sorted(symbols)}


def features_of_regions(
    regions: Mapping[str, str],
    *,
    profile: ProfileFacts | Evaluation | None = None,
    dtype_bytes: int = 2,
    build_flags: Sequence[str] | None = None,
    sizes: Mapping[str, list[int]] | None = None,
) -> Features:
    """Features of region texts (span name -> text): the baseline's or a candidate's.

    ``build_flags`` are the op's nvcc flags (the task's recipe): they decide facts the
    source cannot, such as ``--use_fast_math`` already turning ``expf`` into ``__expf``
    (an H200 round spent on that swap measured 1.000x, 2026-11-29). ``sizes``: the measured
    shapes' size values (:func:`measured_sizes`, which :func:`optimize.hooks.region_features` passes).
    """
    found = _features_of_regions(regions, profile=profile, dtype_bytes=dtype_bytes)
    if sizes:
        found = found.model_copy(update={"measured_sizes": {k: list(v) for k, v in sizes.items()}})
    if build_flags is None:
        return found
    fast = any(flag in ("--use_fast_math", "-use_fast_math") for flag in build_flags)
    return found.model_copy(update={"static": found.static.model_copy(update={"fast_math_flag": fast})})


def _features_of_regions(
    regions: Mapping[str, str],
    *,
    profile: ProfileFacts | Evaluation | None = None,
    dtype_bytes: int = 2,
) -> Features:
    if isinstance(profile, Evaluation):
        profile = ProfileFacts.from_evaluation(profile)
    region = Region(regions, dtype_bytes=dtype_bytes)

    launches, kernel_blocks, kernel_runtime_block, launched, runtime_blocks = launch_sites(region)
    kernels = kernel_features(region, kernel_blocks, kernel_runtime_block, launched)
    dev = device_facts(region)
    math_sites = dev.math_sites
    device_loops = dev.device_loops
    smem_any = dev.smem_any

    constants = _tunable_constants(region)
    known_blocks = [l.block_size for l in launches if l.block_size is not None]
    # aggregates describe the kernels the region launches (all kernels when it launches none)
    live = [k for k in kernels if k.launched] or kernels
    widths = [k.vector_bytes for k in live if k.vector_bytes is not None]
    kinds = {l.grid_kind for l in launches}
    grid_kind: GridKind = "none" if not launches else (kinds.pop() if len(kinds) == 1 else "mixed")
    pdl_modes = [l.pdl for l in launches]
    smem_sizes = [k.smem_bytes for k in kernels]
    known_smem = [s for s in smem_sizes if s is not None]
    launchers = {(l.span, l.function.split("::")[0]) for l in launches}
    per_entry = max(
        (launches_on_path(region, h, launch_site_keys(region, h), h.body, {h.qualname}) for h in region.hosts),
        default=0,
    )
    reduction = any(k.warp_reduce or k.cta_reduce for k in kernels)
    switches = size_switches(region)
    static = StaticFeatures(
        num_kernels=len(kernels),
        num_device_functions=sum(1 for f in region.funcs if f.kind == "device"),
        num_launchers=len(launchers),
        load_bytes=min(widths) if widths else None,
        max_load_bytes=max(widths) if widths else None,
        vector_loads=bool(widths),
        block_size=known_blocks[0]
        if known_blocks and len(set(known_blocks)) == 1 and len(known_blocks) == len(launches)
        else None,
        block_size_min=min(known_blocks) if known_blocks else None,
        block_size_max=max(known_blocks) if known_blocks else None,
        block_size_runtime=runtime_blocks,
        tunable_block_size=any(c.role == "block_size" for c in constants),
        tunable_items=any(c.role == "items" for c in constants),
        tunable_unroll=any(c.role == "unroll" for c in constants),
        tunable_vec_bytes=any(c.role == "vec_bytes" for c in constants),
        launch_sites=len(launches),
        launches_per_entry=per_entry,
        grid_kind=grid_kind,
        per_item_grid="per_item" in {l.grid_kind for l in launches},
        per_row_grid="per_row" in {l.grid_kind for l in launches},
        persistent_grid="persistent" in {l.grid_kind for l in launches},
        warp_per_row=any(l.block_size == 32 and l.grid_kind in ("per_row", "persistent") for l in launches),
        pdl_launch=bool(pdl_modes) and all(m in ("on", "flag") for m in pdl_modes),
        pdl_flag="flag" in pdl_modes,
        pdl_off=any(m in ("off", "absent") for m in pdl_modes),
        pdl_wait=bool(live) and all(k.pdl_wait for k in live),
        pdl_trigger=bool(live) and all(k.pdl_trigger for k in live),
        pdl_trigger_at_end=any(k.pdl_trigger_at_end for k in kernels),
        launch_bounds=bool(live) and all(k.launch_bounds for k in live),
        kernels_without_launch_bounds=sum(1 for k in live if not k.launch_bounds),
        launch_bounds_min_blocks=any(k.launch_bounds and "," in k.launch_bounds for k in kernels),
        loops=sum(k.loops for k in kernels) + len(device_loops),
        constant_loops=sum(k.constant_loops for k in kernels) + sum(1 for l in device_loops if l.compile_time),
        runtime_loops=sum(k.runtime_loops for k in kernels) + sum(1 for l in device_loops if not l.compile_time),
        loops_missing_unroll=sum(k.loops_missing_unroll for k in kernels)
        + sum(1 for l in device_loops if l.compile_time and not l.unrolled),
        grid_stride_loop=any(k.grid_stride_loop for k in kernels),
        loop_invariant_loads=sum(k.loop_invariant_loads for k in kernels),
        slow_math_calls=dev.slow,
        fast_math_swappable=dev.swappable,
        fast_intrinsics=dev.fast,
        float_divisions=dev.float_div,
        reciprocal_divisions=math_sites.get("rcp", 0) + math_sites.get("rsqrt", 0),
        uses_expf=dev.uses_expf,
        shared_memory=smem_any,
        smem_static_bytes=None if len(known_smem) < len(smem_sizes) else max(known_smem, default=0),
        smem_2d_arrays=dev.two_d_total,
        dynamic_smem=dev.dynamic,
        syncthreads=max((k.syncthreads for k in kernels), default=0),
        warp_reduce=any(k.warp_reduce for k in kernels),
        cta_reduce=any(k.cta_reduce for k in kernels),
        reduction=reduction,
        int_divmod_runtime=sum(k.int_divmod_runtime for k in kernels),
        int64_index=dev.int64,
        cache_hints=dev.cache_hints,
        typed_accesses=typed_access_sites(region),
        strided_divmod=strided_divmod_sites(region),
        size_dispatch=len(switches),
        cp_async=dev.cp_async,
        tma=dev.tma,
        tensor_core_ops=dev.tensor,
        register_arrays=sum(k.register_arrays for k in kernels),
        packed_casts=dev.packed,
        elementwise=bool(kernels) and not reduction and not smem_any,
    )
    return Features(
        static=static,
        profile=profile or ProfileFacts(),
        kernels=kernels,
        launches=launches,
        constants=constants,
        math_sites=math_sites,
        size_switches=sorted({(s.function.name, s.subject, max(s.labels)) for s in switches}),
        spans=list(regions),
    )


def _tunable_constants(region: Region) -> list[TunableConstant]:
    out: list[TunableConstant] = []
    for doc, node, name, literal in iter_literal_constants(region):
        role = next((r for r, pattern in _ROLE_PATTERNS if pattern.search(name)), None)
        value = parse_number(text_of(doc.src, literal))
        if role is None or not isinstance(value, int):
            continue
        f = region.func_of(doc, node)
        owner = owner_name(doc, node) or (f.qualname if f is not None else None)
        out.append(TunableConstant(span=doc.span, name=name, owner=owner, value=value, role=role))
    return out
