"""What a region's kernels and launches are, read from its code: each launch site (its grid and
block, PDL mode, the kernels it launches), each kernel's own facts (vector width, launch bounds,
PDL statements, loops, shared memory, reductions), and what all its device code does (math,
divisions, memory paths). :mod:`optimize.features` flattens these into the planner's features.

What must stay true: everything here is read from the region texts alone, and a fact that cannot
be read is ``None``, never a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import Field

from optimize.cuda_facts import (
    CACHE_HINT_NAMES,
    CTA_REDUCE_RE,
    FAST_INTRINSICS,
    SLOW_MATH,
    WARP_REDUCE_RE,
    GridKind,
    LoopInfo,
    PdlMode,
    asm_texts,
    calls_in,
    classify_grid,
    declares_int64,
    division_counts,
    loops_of,
    pdl_mode,
    pdl_statements,
    shared_declarations,
    widest_vector_bytes,
)
from optimize.cuda_regions import Region
from pipeline.record_io import Record
from source import treesitter as ts
from source.cuda_text import named_children, text_of


class KernelFeatures(Record):
    """Facts about one ``__global__`` kernel of the region."""

    name: str
    span: str
    vector_bytes: int | None = None  # widest vector the kernel uses
    block_sizes: list[int] = Field(default_factory=list)  # compile-time block sizes of its launches
    block_size_runtime: bool = False
    launch_bounds: str | None = None  # argument text of __launch_bounds__(...)
    template_params: list[str] = Field(default_factory=list)
    launched: bool = False  # some active launch site in the region launches it
    pdl_wait: bool = False
    pdl_trigger: bool = False
    pdl_trigger_at_end: bool = False
    loops: int = 0
    constant_loops: int = 0
    runtime_loops: int = 0
    loops_missing_unroll: int = 0
    grid_stride_loop: bool = False
    loop_invariant_loads: int = 0
    smem_bytes: int | None = 0
    syncthreads: int = 0
    warp_reduce: bool = False
    cta_reduce: bool = False
    int_divmod_runtime: int = 0
    register_arrays: int = 0

    @property
    def block_size(self) -> int | None:
        """The one compile-time block size every launch uses, else None."""
        if self.block_size_runtime or len(set(self.block_sizes)) != 1:
            return None
        return self.block_sizes[0]


class LaunchSite(Record):
    """One kernel launch expression in a host function."""

    span: str
    function: str  # Struct::method or function name
    grid: str
    block: str
    block_size: int | None = None
    grid_kind: GridKind = "unknown"
    pdl: PdlMode = "absent"
    kernels: list[str] = Field(default_factory=list)


def launch_sites(region: Region) -> tuple[list[LaunchSite], dict[str, list[int]], dict[str, bool], set[str], bool]:
    """Each launch of the region: its site, and per kernel the block sizes it is launched with (or
    that one is chosen at run time); the kernels launched; whether any block size is a run-time one."""
    launches: list[LaunchSite] = []
    kernel_blocks: dict[str, list[int]] = {}
    kernel_runtime_block: dict[str, bool] = {}
    launched: set[str] = set()
    runtime_blocks = False
    for launch in region.launches:
        src = launch.doc.src
        block_size = region.evaluate(launch.doc, launch.block) if launch.block is not None else None
        block_size = (
            int(block_size) if isinstance(block_size, (int, float)) and not isinstance(block_size, bool) else None
        )
        runtime_block = (
            launch.block is not None and block_size is None and not region.is_compile_time(launch.doc, launch.block)
        )
        runtime_blocks = runtime_blocks or runtime_block
        grid_blob = region.expand(launch.doc, launch.grid) if launch.grid is not None else ""
        names = region.launched_kernels(launch)
        launched.update(names)
        for name in names:
            if block_size is not None:
                kernel_blocks.setdefault(name, []).append(block_size)
            elif runtime_block:
                kernel_runtime_block[name] = True
        launches.append(
            LaunchSite(
                span=launch.doc.span,
                function=launch.func.qualname if launch.func is not None else "",
                grid=text_of(src, launch.grid) if launch.grid is not None else "",
                block=text_of(src, launch.block) if launch.block is not None else "",
                block_size=block_size,
                grid_kind=classify_grid(grid_blob) if launch.grid is not None else "unknown",
                pdl=pdl_mode(region, launch),
                kernels=names,
            )
        )
    return launches, kernel_blocks, kernel_runtime_block, launched, runtime_blocks


def kernel_features(
    region: Region, kernel_blocks: dict[str, list[int]], kernel_runtime_block: dict[str, bool], launched: set[str]
) -> list[KernelFeatures]:
    """Each kernel's own facts: vector width, launch bounds, PDL statements, loops, shared memory,
    reductions, divisions."""
    kernels: list[KernelFeatures] = []
    for k in region.kernels:
        src = k.doc.src
        loops = loops_of(region, k)
        lb = next((c for c in k.node.children if c.type == "launch_bounds"), None)
        lb_text = None
        if lb is not None:
            inner = [c for c in lb.children if c.is_named]
            lb_text = ", ".join(text_of(src, c) for c in inner)
        wait, trigger, at_end = pdl_statements(src, k.body)
        calls = calls_in(src, k.body)
        asm = " ".join(asm_texts(src, k.body))
        smem_bytes, _two_d, _dyn = shared_declarations(region, k)
        callees = [re.sub(r"<.*>$", "", text.strip(), flags=re.S) for _n, text, _c in calls]
        warp = any(WARP_REDUCE_RE.search(text) for text in callees)
        cta = any(CTA_REDUCE_RE.search(text) for text in callees)
        syncs = sum(1 for n, _t, _c in calls if n.startswith("__syncthreads")) + asm.count("bar.sync")
        if warp and syncs and smem_bytes != 0:  # per-warp partials through shared memory
            cta = True
        kernels.append(
            KernelFeatures(
                name=k.name,
                span=k.doc.span,
                vector_bytes=widest_vector_bytes(region, k),
                block_sizes=sorted(set(kernel_blocks.get(k.name, []))),
                block_size_runtime=kernel_runtime_block.get(k.name, False),
                launch_bounds=lb_text,
                template_params=[n for n, _ in region.template_params(k)],
                launched=k.name in launched,
                pdl_wait=wait is not None or "griddepcontrol.wait" in asm,
                pdl_trigger=trigger is not None or "launch_dependents" in asm,
                pdl_trigger_at_end=at_end
                and wait is not None
                and trigger is not None  # at_end says so already; the type checker is told here
                and named_children(k.body).index(trigger) - named_children(k.body).index(wait) > 1,
                loops=len(loops),
                constant_loops=sum(1 for l in loops if l.compile_time),
                runtime_loops=sum(1 for l in loops if not l.compile_time),
                loops_missing_unroll=sum(1 for l in loops if l.compile_time and not l.unrolled),
                grid_stride_loop=any(l.grid_stride for l in loops),
                loop_invariant_loads=sum(l.invariant_loads for l in loops),
                smem_bytes=smem_bytes,
                syncthreads=syncs,
                warp_reduce=warp,
                cta_reduce=cta,
                int_divmod_runtime=division_counts(region, k)["int_runtime"],
                register_arrays=sum(
                    1
                    for node in ts.walk(k.body)
                    if node.type == "declaration"
                    and "__shared__" not in text_of(src, node).split("[")[0]
                    and any(d.type == "array_declarator" for d in node.children_by_field_name("declarator"))
                ),
            )
        )
    return kernels


@dataclass
class DeviceFacts:
    """What the device code (kernels and device functions) does: math, divisions, memory paths."""

    math_sites: dict[str, int]
    slow: int
    swappable: int
    fast: int
    float_div: int
    uses_expf: bool
    cache_hints: bool
    cp_async: bool
    tma: bool
    tensor: bool
    packed: bool
    int64: bool
    device_loops: list[LoopInfo]
    smem_any: bool
    dynamic: bool
    two_d_total: int


def device_facts(region: Region) -> DeviceFacts:
    """Math calls (slow, swappable, fast), divisions, cache hints, async copies, TMA, tensor cores,
    packed types, 64-bit indexing, device-function loops and shared memory, over all device code."""
    math_sites: dict[str, int] = {}
    slow = swappable = fast = float_div = 0
    uses_expf = cache_hints = cp_async = tma = tensor = packed = int64 = False
    device_loops: list[LoopInfo] = []
    smem_any = dynamic = False
    two_d_total = 0
    for f in region.device_code:
        src = f.doc.src
        for name, text, _call in calls_in(src, f.body):
            plain = text.strip().lstrip(":")
            if name in SLOW_MATH and plain in (name, f"std::{name}"):
                slow += 1
                if SLOW_MATH[name]:
                    swappable += 1
                    math_sites[name] = math_sites.get(name, 0) + 1
                uses_expf = uses_expf or name == "expf"
            if name in FAST_INTRINSICS or text.strip().endswith("math::rsqrt"):
                fast += 1
            if name in CACHE_HINT_NAMES:
                cache_hints = True
            if re.search(r"(__pipeline_memcpy_async|memcpy_async|cp_async(?!_bulk))", text):
                cp_async = True
            if re.search(r"(cp_async_bulk|tma|TensorMap|mbarrier)", text, re.I):
                tma = True
            if re.search(r"(\bmma\b|wgmma|wmma::|mma_sync|\bmma_)", text):
                tensor = True
        body_text = text_of(src, f.body)
        for asm in asm_texts(src, f.body):
            if re.search(r"ld\.global\.nc|L1::no_allocate|evict_first|\.cs\b|ld\.global\.L", asm):
                cache_hints = True
            if "cp.async.bulk" in asm or "mbarrier" in asm:
                tma = True
            elif "cp.async" in asm:
                cp_async = True
            if re.search(r"\b(w?gmma|mma\.sync|wgmma)\b", asm):
                tensor = True
        if re.search(r"\b(CUtensorMap|cuda::barrier|mbarrier)\b", body_text):
            tma = True
        if re.search(r"\b(fp32x2_t|float2|bf16x2_t|fp16x2_t|__half2|__nv_bfloat162|packed_t)\b", body_text):
            packed = True
        div = division_counts(region, f)
        float_div += div["float"]
        for op in ("rcp", "rsqrt", "fdividef"):
            if div[op]:
                math_sites[op] = math_sites.get(op, 0) + div[op]
        if f.kind == "kernel":
            int64 = int64 or declares_int64(src, f)
        device_loops += loops_of(region, f) if f.kind == "device" else []
        bytes_, two_d, dyn = shared_declarations(region, f)
        smem_any = smem_any or dyn or bytes_ is None or bytes_ > 0
        dynamic = dynamic or dyn
        two_d_total += two_d
    return DeviceFacts(
        math_sites=math_sites,
        slow=slow,
        swappable=swappable,
        fast=fast,
        float_div=float_div,
        uses_expf=uses_expf,
        cache_hints=cache_hints,
        cp_async=cp_async,
        tma=tma,
        tensor=tensor,
        packed=packed,
        int64=int64,
        device_loops=device_loops,
        smem_any=smem_any,
        dynamic=dynamic,
        two_d_total=two_d_total,
    )
