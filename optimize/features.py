"""Static features of a task's editable region, plus the profile facts the planner uses.

Why: the planning policy (:mod:`optimize.policy`) decides which skill to try next
from *facts*, not from an LLM's impression of the code: "the kernel uses 16-byte
vectors", "the launcher turns PDL on through a template flag", "there is a
grid-stride loop whose weight load does not depend on the row". This module reads
those facts from the region's source with tree-sitter (queries in
``optimize/queries/*.scm``) and merges them with what a measurement said
(:class:`ProfileFacts`). Skills' applicability rules (:mod:`optimize.skills`)
are written over the flat view :meth:`Features.flat`.

What must stay true:
- Features are read from the region texts only (the editable spans), so the same
  function describes the baseline and any candidate (``features_of_regions``).
  Headers outside the region are not read; the few SGLang constants a region
  leans on for sizes are in :data:`KNOWN_CONSTANTS` for the Hopper target
  (``SGL_CUDA_ARCH=900``: ``kMaxVecBytes`` is 16 there, 32 only on Blackwell).
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

The tree-sitter swap point is :func:`parse_region` / :func:`load_query` (the only
functions here that touch the binding, through :mod:`extract.treesitter`).
"""

from __future__ import annotations

import functools
import os
import pathlib
import re
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Literal, Mapping, Sequence

from pydantic import Field

from extract import treesitter as ts
from pipeline.records import Evaluation, KernelResources, Record, Span

QUERY_DIR = pathlib.Path(__file__).resolve().parent / "queries"
GRAMMAR = "cuda"

Node = Any  # tree_sitter.Node, kept opaque like extract.treesitter does

# --------------------------------------------------------------------------- tree-sitter access


def parse_region(text: str | bytes) -> Node:
    """Root node of ``text`` parsed with the CUDA grammar (the one parse entry point here)."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    return ts.parse(data, GRAMMAR).root_node


@functools.lru_cache(maxsize=None)
def load_query(name: str) -> Any:
    """Compile ``optimize/queries/<name>.scm`` for the CUDA grammar (cached).

    ``extract.treesitter.load_query`` only reads ``extract/queries/``; until it
    takes a folder, this is the one place in optimize/ that builds a query object.
    """
    path = QUERY_DIR / f"{name}.scm"
    if not path.is_file():
        raise ValueError(f"no query file {path}")
    import tree_sitter  # noqa: PLC0415  (the only direct use; see the docstring)

    try:
        return tree_sitter.Query(ts.language(GRAMMAR), path.read_text(encoding="utf-8"))
    except Exception as err:  # QueryError by version
        raise ValueError(f"{path}: the {GRAMMAR} grammar rejects the query: {err}") from err


def matches(name: str, node: Node) -> list[dict[str, list[Node]]]:
    """Run query ``name`` on ``node``: one ``{capture: [nodes]}`` per match, in document order."""
    return ts.matches(load_query(name), node)


# --------------------------------------------------------------------------- constants and tables

#: SGLang constants a region uses for sizes, as they are on Hopper (sm_90a).
KNOWN_CONSTANTS: dict[str, int] = {
    "kMaxVecBytes": 16,  # sgl_kernel/utils.cuh: 32 only on Blackwell or newer
    "kWarpThreads": 32,
    "kWarpSize": 32,
    "warpSize": 32,
    "kFullWidth": 32,
    "MAX_GMEM": 16,
    "MAX_SMEM": 16,
    "MAX_PORTABLE": 16,
}

_TYPE_BYTES: dict[str, int] = {
    "float": 4, "fp32_t": 4, "int": 4, "unsigned": 4, "uint": 4, "int32_t": 4, "uint32_t": 4,
    "double": 8, "int64_t": 8, "uint64_t": 8, "long": 8, "size_t": 8,
    "half": 2, "__half": 2, "fp16_t": 2, "bf16_t": 2, "__nv_bfloat16": 2, "int16_t": 2, "uint16_t": 2,
    "char": 1, "int8_t": 1, "uint8_t": 1, "fp8_e4m3_t": 1, "fp8_e5m2_t": 1, "bool": 1,
    "float2": 8, "fp32x2_t": 8, "int2": 8, "uint2": 8,
    "half2": 4, "__half2": 4, "fp16x2_t": 4, "bf16x2_t": 4, "__nv_bfloat162": 4,
    "float4": 16, "fp32x4_t": 16, "int4": 16, "uint4": 16, "double2": 16, "longlong2": 16, "ulonglong2": 16,
}  # fmt: skip
_VECTOR_TYPES_16 = {"float4", "fp32x4_t", "int4", "uint4", "double2", "longlong2", "ulonglong2"}
_ALIGNED_VECTOR = {"AlignedVector", "AlignedStorage"}

#: precise libm calls -> the fast intrinsic that replaces them (None: no direct intrinsic).
SLOW_MATH: dict[str, str | None] = {
    "expf": "__expf", "exp10f": "__exp10f", "logf": "__logf", "log2f": "__log2f", "log10f": "__log10f",
    "sinf": "__sinf", "cosf": "__cosf", "tanf": "__tanf", "powf": "__powf",
    "tanhf": None, "erff": None, "exp": None, "log": None, "pow": None, "sqrt": None, "tanh": None,
}  # fmt: skip
FAST_INTRINSICS = {
    "__expf", "__exp10f", "__logf", "__log2f", "__log10f", "__sinf", "__cosf", "__tanf", "__powf",
    "__fdividef", "__frcp_rn", "__frsqrt_rn", "__fsqrt_rn", "rsqrtf", "rsqrt", "__saturatef",
}  # fmt: skip
_FLOAT_FUNCS = set(SLOW_MATH) | FAST_INTRINSICS | {"sqrtf", "fabsf", "fmaxf", "fminf", "fmaf", "erff", "tanhf"}
_FLOAT_TYPES = {"float", "fp32_t"}
_FLOAT_PAIR_TYPES = {"float2", "fp32x2_t", "float4", "fp32x4_t"}
_LOAD_NAMES = {
    "load", "load_as", "__ldg", "ldg", "SGLANG_LDG", "load_bytes", "__ldcs", "__ldcg", "__ldca", "__ldlu", "__ldcv",
}  # fmt: skip
_CACHE_HINT_NAMES = {"__ldg", "SGLANG_LDG", "__ldcs", "__ldcg", "__ldlu", "__ldcv", "__stcs", "__stwt", "__stcg"}
_WAIT_NAMES = {"PDLWaitPrimary", "cudaGridDependencySynchronize"}
_TRIGGER_NAMES = {"PDLTriggerSecondary", "cudaTriggerProgrammaticLaunchCompletion"}

_ROLE_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("unroll", re.compile(r"unroll", re.I)),
    ("vec_bytes", re.compile(r"vec\w*byte|byte\w*vec|vec_?size", re.I)),
    ("items", re.compile(r"item|elems?_?per|per_?thread|\bk?ipt\b|rows?_?per", re.I)),
    ("block_size", re.compile(r"block_?size|block_?dim|num_?threads|threads_?per_?block|cta_?size|kThreads", re.I)),
]

ConstantRole = Literal["block_size", "vec_bytes", "items", "unroll"]
GridKind = Literal["per_item", "per_row", "persistent", "mixed", "unknown", "none"]
PdlMode = Literal["flag", "on", "off", "absent", "unsupported"]

# --------------------------------------------------------------------------- records


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
    top_stall: str | None = Field(None, description="warp-stall reason with most warps stalled per issue (Nsight Compute)")
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
    ) -> "ProfileFacts":
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
        from optimize.harness.tools import top_stall

        stall = top_stall(ncu)
        timings = evaluation.timings
        res = list(resources if resources is not None else (evaluation.build.resources if evaluation.build else []))
        tokens = [t.sizes[token_symbol] for t in timings if token_symbol in t.sizes]
        return cls(
            time_over_floor=max((t.time_over_floor for t in timings), default=None),
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
        False, description="the op is built with --use_fast_math, so nvcc already uses the fast intrinsics (False also when no build flags were given)"
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
    cp_async: bool = Field(False, description="cp.async (Ampere-style asynchronous copies)")
    tma: bool = Field(False, description="bulk / tensor copies (cp.async.bulk, CUtensorMap, mbarrier)")
    tensor_core_ops: bool = Field(False, description="mma / wgmma / wmma in device code")
    register_arrays: int = Field(0, description="local arrays in kernels (stay in registers only when unrolled)")
    packed_casts: bool = Field(False, description="device code converts through packed pairs (fp32x2_t, bf16x2)")
    elementwise: bool = Field(False, description="no kernel reduces or uses shared memory")
    memory_bound_from_profile: bool = Field(False, description="memory_bound came from a measurement, not a guess")


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


#: Preprocessor symbols as the Hopper build sees them (``-DSGL_CUDA_ARCH=900``, CUDA 13);
#: ``None`` = known to be undefined. Symbols not listed are unknown: both branches count.
PREPROCESSOR: dict[str, int | None] = {
    "SGL_CUDA_ARCH": 900,
    "SGL_ARCH_HOPPER_OR_GREATER": 1,
    "SGL_ARCH_BLACKWELL_OR_GREATER": 0,
    "USE_ROCM": None,
}


def _pp_value(src: bytes, node: Node) -> int | None:
    """Value of a preprocessor condition, or None when it depends on an unknown symbol."""
    t = node.type
    if t == "number_literal":
        value = _number(text_of(src, node))
        return int(value) if isinstance(value, (int, float)) else None
    if t == "identifier":
        name = text_of(src, node)
        if name in PREPROCESSOR:
            value = PREPROCESSOR[name]
            return 0 if value is None else value
        return None
    if t == "preproc_defined":
        ident = next((c for c in node.children if c.type == "identifier"), None)
        if ident is None or text_of(src, ident) not in PREPROCESSOR:
            return None
        return int(PREPROCESSOR[text_of(src, ident)] is not None)
    if t == "parenthesized_expression" and node.named_child_count == 1:
        return _pp_value(src, node.named_children[0])
    if t == "unary_expression":
        value = _pp_value(src, node.child_by_field_name("argument"))
        op = text_of(src, node.children[0])
        return None if value is None else int(not value) if op == "!" else -value if op == "-" else value
    if t == "binary_expression":
        op = text_of(src, node.child_by_field_name("operator"))
        left = _pp_value(src, node.child_by_field_name("left"))
        right = _pp_value(src, node.child_by_field_name("right"))
        if op == "&&" and (left == 0 or right == 0):
            return 0
        if op == "||" and ((left or 0) != 0 or (right or 0) != 0):
            return 1
        value = _binary(op, left, right)
        return None if value is None else int(value)
    return None


def _pp_condition(src: bytes, node: Node) -> bool | None:
    """Truth of a preproc_if / preproc_elif / preproc_ifdef node's own condition."""
    if node.type == "preproc_ifdef":
        name_node = node.child_by_field_name("name")
        name = text_of(src, name_node) if name_node is not None else ""
        if name not in PREPROCESSOR:
            return None
        defined = PREPROCESSOR[name] is not None
        negated = node.children[0].type == "#ifndef"
        return defined != negated
    cond = node.child_by_field_name("condition")
    value = _pp_value(src, cond) if cond is not None else None
    return None if value is None else bool(value)


def is_active(src: bytes, node: Node) -> bool:
    """False when ``node`` sits in a preprocessor branch the Hopper build leaves out."""
    child = node
    cursor = node.parent
    while cursor is not None:
        if cursor.type in ("preproc_if", "preproc_elif", "preproc_ifdef"):
            alt = cursor.child_by_field_name("alternative")
            in_alt = alt is not None and alt.start_byte <= child.start_byte and child.end_byte <= alt.end_byte
            cond = _pp_condition(src, cursor)
            if (in_alt and cond is True) or (not in_alt and cond is False):
                return False
        child = cursor
        cursor = cursor.parent
    return True


def active_children(src: bytes, node: Node) -> list[Node]:
    """Named children of ``node`` with preprocessor conditionals flattened to their active parts."""
    return [y for c in _named(node) for y in _flatten_pp(src, c)]


_PP_CONDITIONALS = ("preproc_if", "preproc_elif", "preproc_ifdef", "preproc_else")


def _flatten_pp(src: bytes, node: Node) -> list[Node]:
    if node.type not in _PP_CONDITIONALS:
        return [node]
    if node.type == "preproc_else":
        return [y for c in _named(node) for y in _flatten_pp(src, c)]
    cond_node = node.child_by_field_name("name" if node.type == "preproc_ifdef" else "condition")
    alt = node.child_by_field_name("alternative")
    cond = _pp_condition(src, node)
    out: list[Node] = []
    if cond is not False:
        for c in _named(node):
            if c != cond_node and c != alt:
                out.extend(_flatten_pp(src, c))
    if alt is not None and cond is not True:
        out.extend(_flatten_pp(src, alt))
    return out


# --------------------------------------------------------------------------- region model


@dataclass(eq=False)
class _Doc:
    span: str
    src: bytes
    root: Node


@dataclass(eq=False)
class _Func:
    doc: _Doc
    node: Node  # function_definition
    body: Node
    name: str
    kind: Literal["kernel", "device", "host"]
    owner: Node | None  # enclosing struct/class specifier
    owner_name: str | None
    templates: list[Node]  # enclosing template_declarations, innermost first

    @property
    def qualname(self) -> str:
        return f"{self.owner_name}::{self.name}" if self.owner_name else self.name


def _key(doc: _Doc, node: Node) -> tuple[int, int, int, str]:
    return (id(doc), node.start_byte, node.end_byte, node.type)


def text_of(src: bytes, node: Node) -> str:
    return src[node.start_byte : node.end_byte].decode("utf-8", "replace")


def _last_name(text: str) -> str:
    """``device::warp::reduce_sum<32>`` -> ``reduce_sum``."""
    text = re.sub(r"<.*>$", "", text.strip(), flags=re.S)
    return re.split(r"::|\.|->", text)[-1].strip()


def _named(node: Node) -> list[Node]:
    return [c for c in node.children if c.is_named and c.type != "comment"]


def _template_params(template: Node, src: bytes) -> list[tuple[str, str]]:
    """(name, "type" | "value") of a template_declaration's parameters, in order."""
    params = template.child_by_field_name("parameters")
    out: list[tuple[str, str]] = []
    if params is None:
        return out
    for p in _named(params):
        if p.type in ("type_parameter_declaration", "optional_type_parameter_declaration", "variadic_type_parameter_declaration"):
            ident = next((c for c in p.children if c.type == "type_identifier"), None)
            if ident is not None:
                out.append((text_of(src, ident), "type"))
        elif p.type in ("parameter_declaration", "optional_parameter_declaration", "variadic_parameter_declaration"):
            decl = p.child_by_field_name("declarator")
            if decl is not None:
                out.append((text_of(src, decl).lstrip("&*. "), "value"))
    return out


class Region:
    """The editable region parsed once: functions, scopes, launch sites, bindings.

    Shared by :mod:`optimize.features` and :mod:`optimize.transforms`, so both
    see the same kernels and the same launch/kernel association.
    """

    def __init__(self, regions: Mapping[str, str], *, dtype_bytes: int = 2) -> None:
        self.dtype_bytes = dtype_bytes
        self.docs = [
            _Doc(name, text.encode("utf-8"), parse_region(text)) for name, text in regions.items()
        ]
        self.funcs: list[_Func] = []
        for doc in self.docs:
            for m in matches("functions", doc.root):
                self.funcs.append(self._func(doc, m["function"][0], m["body"][0], m["declarator"][0]))
        # function_definitions nested in another function (rare: local structs) are kept; lambdas are not functions
        self._scopes: dict[tuple, dict[str, Node]] = {}
        self._bindings: dict[tuple, dict[str, int | bool]] = {}
        self.kernels = [f for f in self.funcs if f.kind == "kernel"]
        self.device_code = [f for f in self.funcs if f.kind in ("kernel", "device")]
        self.hosts = [f for f in self.funcs if f.kind == "host"]
        self._bind_kernel_templates()
        self.launches = self._launch_sites()

    # -------------------------------------------------------------- functions

    def _func(self, doc: _Doc, node: Node, body: Node, declarator: Node) -> _Func:
        head = doc.src[node.start_byte : body.start_byte]
        if re.search(rb"\b__global__\b", head):
            kind = "kernel"
        elif re.search(rb"\b(__device__|SGL_DEVICE|SGL_DEVICE_HOST)\b", head):
            kind = "device"
        else:
            kind = "host"
        inner = declarator
        while inner is not None and inner.type in ("function_declarator", "pointer_declarator", "reference_declarator"):
            inner = inner.child_by_field_name("declarator")
        name = _last_name(text_of(doc.src, inner)) if inner is not None else "?"
        owner = None
        templates: list[Node] = []
        cursor = node.parent
        while cursor is not None:
            if cursor.type == "template_declaration":
                templates.append(cursor)
            if cursor.type in ("struct_specifier", "class_specifier") and owner is None:
                owner = cursor
            cursor = cursor.parent
        owner_name = None
        if owner is not None:
            name_node = owner.child_by_field_name("name")
            owner_name = text_of(doc.src, name_node) if name_node is not None else None
        return _Func(doc, node, body, name, kind, owner, owner_name, templates)

    def func_of(self, doc: _Doc, node: Node) -> _Func | None:
        """The innermost function whose definition contains ``node``."""
        best = None
        for f in self.funcs:
            if f.doc is doc and f.node.start_byte <= node.start_byte and node.end_byte <= f.node.end_byte:
                if best is None or f.node.start_byte >= best.node.start_byte:
                    best = f
        return best

    def template_params(self, f: _Func) -> list[tuple[str, str]]:
        """The kernel's own template parameters (the innermost template_declaration)."""
        if not f.templates or f.templates[0] != f.node.parent:
            return []
        return _template_params(f.templates[0], f.doc.src)

    # -------------------------------------------------------------- scopes and lookup

    def _scope_defs(self, doc: _Doc, scope: Node) -> dict[str, Node]:
        key = _key(doc, scope)
        if key in self._scopes:
            return self._scopes[key]
        defs: dict[str, Node] = {}

        def take(node: Node) -> None:
            if node.type == "template_declaration":
                for c in _named(node):
                    take(c)
                return
            if node.type in ("declaration", "field_declaration", "alias_declaration"):
                for m in matches("declarations", node):
                    if m["decl"][0].start_byte != node.start_byte:
                        continue
                    name = text_of(doc.src, m["name"][0]).lstrip("&* ")
                    defs.setdefault(name, m["value"][0])
            elif node.type == "function_definition":
                f = next((f for f in self.funcs if f.doc is doc and f.node.start_byte == node.start_byte), None)
                if f is not None:
                    defs.setdefault(f.name, node)
            elif node.type in ("namespace_definition",):
                body = node.child_by_field_name("body")
                if body is not None:
                    for c in active_children(doc.src, body):
                        take(c)

        children = active_children(doc.src, scope)
        for child in children:
            take(child)
        self._scopes[key] = defs
        return defs

    def lookup(self, doc: _Doc, at: Node, name: str) -> Node | None:
        """The definition (value / type / function node) ``name`` refers to at ``at``.

        Scopes searched: the enclosing blocks, struct bodies and namespaces of
        ``at``, then every region's top level (regions are pieces of one file).
        """
        cursor = at
        while cursor is not None:
            if cursor.type in ("compound_statement", "field_declaration_list", "declaration_list", "translation_unit"):
                found = self._scope_defs(doc, cursor).get(name)
                if found is not None and not (found.start_byte <= at.start_byte < found.end_byte):
                    return found
            cursor = cursor.parent
        for other in self.docs:
            found = self._scope_defs(other, other.root).get(name)
            if found is not None:
                return found
            for f in self.funcs:
                if f.doc is other and f.name == name and f.owner is None:
                    return f.node
        return None

    def _doc_of(self, node: Node) -> _Doc:
        for doc in self.docs:
            root = doc.root
            if root.start_byte <= node.start_byte and node.end_byte <= root.end_byte:
                # several docs can overlap in byte ranges; the tree identity decides
                cursor = node
                while cursor.parent is not None:
                    cursor = cursor.parent
                if cursor == root:
                    return doc
        raise LookupError("node from no region")

    def template_binding(self, doc: _Doc, at: Node, name: str) -> tuple[bool, int | bool | None]:
        """(is a template parameter in scope, its bound value when a launch fixes it)."""
        cursor = at
        while cursor is not None:
            if cursor.type == "template_declaration":
                names = [n for n, _k in _template_params(cursor, doc.src)]
                if name in names:
                    return True, self._bindings.get(_key(doc, cursor), {}).get(name)
            cursor = cursor.parent
        return False, None

    # -------------------------------------------------------------- evaluation

    def evaluate(self, doc: _Doc, node: Node, depth: int = 0) -> int | float | bool | None:
        """Value of a compile-time integer expression, or None when it is not known here."""
        if node is None or depth > 12:
            return None
        t = node.type
        src = doc.src
        if t == "number_literal":
            return _number(text_of(src, node))
        if t in ("true", "false"):
            return t == "true"
        if t in ("parenthesized_expression", "type_descriptor", "template_argument", "argument_list") and node.named_child_count == 1:
            return self.evaluate(doc, _named(node)[0], depth + 1)
        if t in ("identifier", "type_identifier", "qualified_identifier", "field_identifier", "namespace_identifier"):
            name = _last_name(text_of(src, node))
            is_param, bound = self.template_binding(doc, node, name)
            if is_param:
                return bound
            found = self.lookup(doc, node, name)
            if found is not None and found.type != "function_definition":
                found_doc = self._doc_of(found)
                # only names that cannot change: a variable's initial value is not its value
                return self.evaluate(found_doc, found, depth + 1) if _is_const_def(found_doc.src, found) else None
            if name in KNOWN_CONSTANTS:
                return KNOWN_CONSTANTS[name]
            return None
        if t == "sizeof_expression":
            inner = node.child_by_field_name("type") or (node.named_children[0] if node.named_child_count else None)
            if inner is None:
                return None
            if inner.type == "parenthesized_expression" and inner.named_child_count == 1:
                inner = inner.named_children[0]
            return self.type_bytes(doc, inner, depth + 1)
        if t == "call_expression":
            callee = node.child_by_field_name("function")
            args = node.child_by_field_name("arguments")
            name = _last_name(text_of(src, callee)) if callee is not None else ""
            if name in ("static_cast", "int", "uint32_t", "int64_t", "size_t") and args is not None and args.named_child_count == 1:
                return self.evaluate(doc, args.named_children[0], depth + 1)
            return None
        if t == "unary_expression":
            operand = node.child_by_field_name("argument")
            op = text_of(src, node.children[0])
            value = self.evaluate(doc, operand, depth + 1)
            if value is None:
                return None
            return {"-": lambda v: -v, "+": lambda v: v, "!": lambda v: not v, "~": lambda v: ~int(v)}.get(op, lambda v: None)(value)
        if t == "binary_expression":
            left = self.evaluate(doc, node.child_by_field_name("left"), depth + 1)
            right = self.evaluate(doc, node.child_by_field_name("right"), depth + 1)
            op = text_of(src, node.child_by_field_name("operator"))
            return _binary(op, left, right)
        if t == "conditional_expression":
            cond = self.evaluate(doc, node.child_by_field_name("condition"), depth + 1)
            if cond is None:
                return None
            branch = node.child_by_field_name("consequence" if cond else "alternative")
            return self.evaluate(doc, branch, depth + 1)
        return None

    def type_bytes(self, doc: _Doc, node: Node, depth: int = 0) -> int | None:
        """sizeof of a type node (aliases resolved; template type parameters are dtype_bytes)."""
        if node is None or depth > 12:
            return None
        src = doc.src
        t = node.type
        if t in ("type_descriptor", "parenthesized_expression") and node.named_child_count >= 1:
            named = [c for c in _named(node) if c.type not in ("type_qualifier",)]
            if len(named) == 1:
                return self.type_bytes(doc, named[0], depth + 1)
            return None
        if t == "template_type":
            name = _last_name(text_of(src, node.child_by_field_name("name")))
            args = _named(node.child_by_field_name("arguments"))
            if name in _ALIGNED_VECTOR and len(args) == 2:
                elem = self.type_bytes(doc, args[0], depth + 1)
                count = self.evaluate(doc, args[1], depth + 1)
                return elem * int(count) if elem is not None and isinstance(count, (int, float)) else None
            if name == "packed_t" and len(args) == 1:
                elem = self.type_bytes(doc, args[0], depth + 1)
                return 2 * elem if elem is not None and elem <= 2 else elem
            return None
        if t in ("primitive_type", "type_identifier", "identifier", "qualified_identifier", "sized_type_specifier"):
            text = text_of(src, node)
            name = _last_name(text)
            if name in _TYPE_BYTES:
                return _TYPE_BYTES[name]
            if t == "sized_type_specifier":
                return 8 if "long" in text else 4
            is_param, _bound = self.template_binding(doc, node, name)
            if is_param:
                return self.dtype_bytes
            found = self.lookup(doc, node, name)
            if found is not None and found.type in ("type_descriptor", "template_type", "type_identifier", "primitive_type"):
                return self.type_bytes(self._doc_of(found), found, depth + 1)
            return None
        return None

    def is_compile_time(self, doc: _Doc, node: Node, depth: int = 0) -> bool:
        """Whether ``node`` is a compile-time expression (literals, constexpr names, template params)."""
        if node is None or depth > 12:
            return False
        if self.evaluate(doc, node) is not None:
            return True
        t = node.type
        if t in ("number_literal", "true", "false", "sizeof_expression"):
            return True
        if t in ("identifier", "type_identifier", "qualified_identifier"):
            name = _last_name(text_of(doc.src, node))
            is_param, _ = self.template_binding(doc, node, name)
            if is_param or name in KNOWN_CONSTANTS:
                return True
            found = self.lookup(doc, node, name)
            if found is not None and found.parent is not None:
                decl = found.parent if found.parent.type != "init_declarator" else found.parent.parent
                if decl is not None and re.search(rb"\bconstexpr\b", doc_text_bytes(self, decl)):
                    return True
            # SGLang (and common CUDA) convention: kCamelCase names are compile-time constants
            return bool(re.fullmatch(r"k[A-Z]\w*", name))
        if t in ("parenthesized_expression", "binary_expression", "unary_expression", "conditional_expression"):
            return all(self.is_compile_time(doc, c, depth + 1) for c in _named(node) if c.type not in ("comment",))
        if t == "call_expression":
            callee = node.child_by_field_name("function")
            args = node.child_by_field_name("arguments")
            name = _last_name(text_of(doc.src, callee)) if callee is not None else ""
            return name == "static_cast" and args is not None and all(self.is_compile_time(doc, a, depth + 1) for a in _named(args))
        return False

    # -------------------------------------------------------------- expansion (host code)

    def expand(self, doc: _Doc, node: Node, depth: int = 0, seen: set | None = None) -> str:
        """``node``'s text followed by the definitions of the names it uses, transitively.

        Used to classify a grid expression (``num_blocks`` -> ``div_ceil(...)``) and to
        find which kernels a launch's kernel argument refers to (through local
        variables, struct fields and helper methods).
        """
        seen = set() if seen is None else seen
        parts = [text_of(doc.src, node)]
        if depth > 5:
            return parts[0]
        for ident in ts.walk(node):
            if ident.type not in ("identifier", "field_identifier", "type_identifier"):
                continue
            name = text_of(doc.src, ident)
            if name in seen:
                continue
            seen.add(name)
            found = self.lookup(doc, ident, name)
            if found is None:
                continue
            found_doc = self._doc_of(found)
            parts.append(self.expand(found_doc, found, depth + 1, seen))
        return " ; ".join(parts)

    # -------------------------------------------------------------- kernel template bindings

    def _bind_kernel_templates(self) -> None:
        """Fix kernel template parameters that every instantiation in the region sets alike."""
        for k in self.kernels:
            params = self.template_params(k)
            if not params:
                continue
            template = k.templates[0]
            seen: dict[str, set] = {}
            for doc in self.docs:
                for m in matches("templates", doc.root):
                    if "use" not in m or _last_name(text_of(doc.src, m["name"][0])) != k.name:
                        continue
                    args = _named(m["args"][0])
                    for (pname, pkind), arg in zip(params, args):
                        if pkind != "value":
                            continue
                        seen.setdefault(pname, set()).add(self.evaluate(doc, arg))
            binding = {n: next(iter(v)) for n, v in seen.items() if len(v) == 1 and None not in v}
            self._bindings[_key(k.doc, template)] = binding

    # -------------------------------------------------------------- launch sites

    def _launch_sites(self) -> list["_Launch"]:
        out: list[_Launch] = []
        for doc in self.docs:
            for m in matches("launches", doc.root):
                f = None
                if "launch" in m:
                    ctor = m["launch"][0]
                    args = _named(m["args"][0])
                    outer, pdl_args, final_args = _launch_chain(ctor)
                    f = self.func_of(doc, ctor)
                    out.append(_Launch(doc, f, outer, ctor, args[0] if args else None, args[1] if len(args) > 1 else None,
                                       pdl_args, final_args[0] if final_args else None))
                elif "chevron" in m:
                    call = m["chevron"][0]
                    cfg = _named(m["config"][0])
                    f = self.func_of(doc, call)
                    out.append(_Launch(doc, f, call, call, cfg[0] if cfg else None, cfg[1] if len(cfg) > 1 else None,
                                       None, m["kernel"][0], chevron=True))
                elif "runtime" in m:
                    call = m["runtime"][0]
                    args = _named(m["args"][0])
                    f = self.func_of(doc, call)
                    kernel = args[1] if text_of(doc.src, m["raw"][0]).endswith("Ex") and len(args) > 1 else (args[0] if args else None)
                    out.append(_Launch(doc, f, call, call, None, None, None, kernel, runtime=True))
        # a launch in a branch the Hopper build compiles out launches nothing here
        return [l for l in out if is_active(l.doc.src, l.outer)]

    def launched_kernels(self, launch: "_Launch") -> list[str]:
        names = [k.name for k in self.kernels]
        if launch.kernel is not None:
            blob = self.expand(launch.doc, launch.kernel)
            found = [n for n in names if re.search(rf"\b{re.escape(n)}\b", blob)]
            if found:
                return found
        # fall back to every kernel the launching struct / function mentions
        scope = launch.func.owner if launch.func is not None and launch.func.owner is not None else (
            launch.func.node if launch.func is not None else launch.doc.root)
        mentioned = {
            text_of(launch.doc.src, n)
            for n in ts.walk(scope)
            if n.type in ("identifier", "field_identifier", "type_identifier") and is_active(launch.doc.src, n)
        }
        return [n for n in names if n in mentioned]


def _is_const_def(src: bytes, value: Node) -> bool:
    """Whether the declaration that gives ``value`` is ``constexpr`` or ``const``."""
    decl = value.parent
    if decl is not None and decl.type == "init_declarator":
        decl = decl.parent
    if decl is None or decl.type not in ("declaration", "field_declaration"):
        return decl is not None and decl.type == "alias_declaration"
    quals = {text_of(src, c) for c in decl.children if c.type == "type_qualifier"}
    return bool(quals & {"constexpr", "const"})


def doc_text_bytes(region: Region, node: Node) -> bytes:
    doc = region._doc_of(node)
    return doc.src[node.start_byte : node.end_byte]


@dataclass(eq=False)
class _Launch:
    doc: _Doc
    func: _Func | None
    outer: Node  # the whole launch expression
    ctor: Node  # LaunchKernel(...) call, or the chevron / runtime call
    grid: Node | None
    block: Node | None
    pdl_args: list[tuple[str, Node]] | None  # (method, argument list) of .enable_pdl / .config
    kernel: Node | None
    chevron: bool = False
    runtime: bool = False


def _launch_chain(ctor: Node) -> tuple[Node, list[tuple[str, Node]], list[Node]]:
    """Climb ``LaunchKernel(...).enable_pdl(x)(kernel, args...)`` from the constructor call."""
    current = ctor
    methods: list[tuple[str, Node]] = []
    final_args: list[Node] = []
    while True:
        parent = current.parent
        if parent is None:
            break
        if parent.type == "field_expression" and parent.child_by_field_name("argument") == current:
            call = parent.parent
            if call is None or call.type != "call_expression":
                break
            field_node = parent.child_by_field_name("field")
            method = field_node.text.decode() if field_node is not None else ""
            methods.append((method, call.child_by_field_name("arguments")))
            current = call
            continue
        if parent.type == "call_expression" and parent.child_by_field_name("function") == current:
            final_args = _named(parent.child_by_field_name("arguments"))
            current = parent
            break
        break
    return current, methods, final_args


def _number(text: str) -> int | float | None:
    raw = text.replace("'", "").strip()
    try:
        if re.fullmatch(r"0[xX][0-9a-fA-F]+[uUlL]*", raw):
            return int(raw.rstrip("uUlL"), 16)
        if re.fullmatch(r"\d+[uUlL]*", raw):
            return int(raw.rstrip("uUlL"))
        return float(raw.rstrip("fFlL"))
    except ValueError:
        return None


def _binary(op: str, left: Any, right: Any) -> Any:
    if left is None or right is None:
        return None
    try:
        if op == "+":
            return left + right
        if op == "-":
            return left - right
        if op == "*":
            return left * right
        if op == "/":
            if right == 0:
                return None
            both_int = isinstance(left, int) and isinstance(right, int)
            return left // right if both_int else left / right
        if op == "%":
            return left % right if right else None
        if op == "<<":
            return int(left) << int(right)
        if op == ">>":
            return int(left) >> int(right)
        if op == "==":
            return left == right
        if op == "!=":
            return left != right
        if op == "<":
            return left < right
        if op == "<=":
            return left <= right
        if op == ">":
            return left > right
        if op == ">=":
            return left >= right
        if op == "&&":
            return bool(left) and bool(right)
        if op == "||":
            return bool(left) or bool(right)
        if op == "&":
            return int(left) & int(right)
        if op == "|":
            return int(left) | int(right)
    except TypeError:
        return None
    return None


def is_float_literal(text: str) -> bool:
    raw = text.strip()
    if raw.lower().startswith("0x"):
        return False
    return bool(re.fullmatch(r"(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?[fF]", raw)) or bool(
        re.fullmatch(r"(\d+\.\d*|\.\d+)([eE][-+]?\d+)?[fF]?|\d+[eE][-+]?\d+[fF]?", raw)
    )


def is_double_literal(text: str) -> bool:
    return is_float_literal(text) and not text.strip().lower().endswith("f")


def float_names(region: Region, f: _Func) -> tuple[set[str], set[str]]:
    """(float scalars, float pair/quad containers) declared in ``f`` (params included)."""
    scalars: set[str] = set()
    pairs: set[str] = set()
    src = f.doc.src
    for node in ts.walk(f.node):
        if node.type not in ("declaration", "parameter_declaration"):
            continue
        type_node = node.child_by_field_name("type")
        type_name = _last_name(text_of(src, type_node)) if type_node is not None else ""
        declarators = [c for c in node.children_by_field_name("declarator")]
        names: list[tuple[str, Node | None]] = []
        for d in declarators:
            value = None
            if d.type == "init_declarator":
                value = d.child_by_field_name("value")
                d = d.child_by_field_name("declarator")
            if d is None:
                continue
            if d.type in ("structured_binding_declarator", "reference_declarator"):
                for ident in ts.walk(d):
                    if ident.type == "identifier":
                        names.append((text_of(src, ident), value))
            elif d.type == "identifier":
                names.append((text_of(src, d), value))
            elif d.type == "array_declarator":
                ident = d.child_by_field_name("declarator")
                if ident is not None:
                    names.append((text_of(src, ident), value))
        for name, value in names:
            if type_name in _FLOAT_TYPES:
                scalars.add(name)
            elif type_name in _FLOAT_PAIR_TYPES:
                pairs.add(name)
            elif value is not None and re.search(r"cast<\s*(fp32x2_t|float2)\s*>|make_float2", text_of(src, value)):
                # structured bindings of a float pair: `const auto [x, y] = cast<fp32x2_t>(v)`
                scalars.add(name)
    return scalars, pairs


def is_float_expr(src: bytes, node: Node, scalars: set[str], pairs: set[str], depth: int = 0) -> bool:
    """Whether an expression has float type, judged from literals, names and calls."""
    if node is None or depth > 20:
        return False
    t = node.type
    if t == "number_literal":
        return is_float_literal(text_of(src, node))
    if t == "identifier":
        return text_of(src, node) in scalars
    if t == "field_expression":
        base = node.child_by_field_name("argument")
        return base is not None and base.type == "identifier" and text_of(src, base) in pairs
    if t == "call_expression":
        callee = node.child_by_field_name("function")
        text = text_of(src, callee) if callee is not None else ""
        name = _last_name(text)
        if name in _FLOAT_FUNCS:
            return True
        return bool(re.search(r"(static_cast|cast)\s*<\s*(float|fp32_t)\s*>", text))
    if t in ("parenthesized_expression", "unary_expression", "binary_expression"):
        if t == "binary_expression":
            op = text_of(src, node.child_by_field_name("operator"))
            if op in ("<", ">", "<=", ">=", "==", "!=", "&&", "||", "%", "&", "|", "^", "<<", ">>"):
                return False
        return any(is_float_expr(src, c, scalars, pairs, depth + 1) for c in _named(node))
    if t == "conditional_expression":
        return any(
            is_float_expr(src, node.child_by_field_name(k), scalars, pairs, depth + 1) for k in ("consequence", "alternative")
        )
    return False


def contains_double(src: bytes, node: Node) -> bool:
    return any(n.type == "number_literal" and is_double_literal(text_of(src, n)) for n in ts.walk(node))


# --------------------------------------------------------------------------- per-kernel analyses


def prev_named_sibling(node: Node) -> Node | None:
    sib = node.prev_sibling
    while sib is not None and (not sib.is_named or sib.type == "comment"):
        sib = sib.prev_sibling
    return sib


def has_unroll_pragma(src: bytes, loop: Node) -> bool:
    prev = prev_named_sibling(loop)
    if prev is None or prev.type != "preproc_call":
        return False
    return bool(re.match(rb"\s*#\s*pragma\s+unroll\b", src[prev.start_byte : prev.end_byte]))


@dataclass
class LoopInfo:
    node: Node
    compile_time: bool
    unrolled: bool
    grid_stride: bool
    invariant_loads: int


def loops_of(region: Region, f: _Func) -> list[LoopInfo]:
    out: list[LoopInfo] = []
    src = f.doc.src
    for m in matches("loops", f.body):
        if "for" in m:
            node = m["for"][0]
            cond = m.get("cond", [None])[0]
            bound = None
            if cond is not None and cond.type == "binary_expression":
                op = text_of(src, cond.child_by_field_name("operator"))
                if op in ("<", "<=", "!="):
                    bound = cond.child_by_field_name("right")
                elif op in (">", ">="):
                    bound = cond.child_by_field_name("left")
            compile_time = bound is not None and region.is_compile_time(f.doc, bound)
            update = m.get("update", [None])[0]
            grid_stride = update is not None and b"gridDim" in src[update.start_byte : update.end_byte]
            loop_var = None
            init = m.get("init", [None])[0]
            if init is not None:
                for ident in ts.walk(init):
                    if ident.type == "identifier":
                        loop_var = text_of(src, ident)
                        break
            invariant = 0 if compile_time or loop_var is None else _invariant_loads(src, m["body"][0], loop_var)
            out.append(LoopInfo(node, compile_time, has_unroll_pragma(src, node), grid_stride, invariant))
        else:
            node = m.get("while", m.get("do"))[0]
            out.append(LoopInfo(node, False, has_unroll_pragma(src, node), False, 0))
    return out


def _idents(src: bytes, node: Node) -> set[str]:
    return {text_of(src, n) for n in ts.walk(node) if n.type == "identifier"}


def _invariant_loads(src: bytes, body: Node, loop_var: str) -> int:
    """Loads in a run-time loop whose arguments do not depend on the loop variable."""
    dependent = {loop_var}
    for node in ts.walk(body):
        if node.type != "declaration":
            continue
        for d in node.children_by_field_name("declarator"):
            if d.type != "init_declarator":
                continue
            value = d.child_by_field_name("value")
            if value is not None and _idents(src, value) & dependent:
                dependent |= _idents(src, d.child_by_field_name("declarator"))
    count = 0
    for m in matches("calls", body):
        name = _last_name(text_of(src, m["callee"][0]))
        if name not in _LOAD_NAMES:
            continue
        args = m["args"][0]
        ids = _idents(src, args)
        if ids and not ids & dependent:
            count += 1
    return count


def _statement_call_name(src: bytes, stmt: Node) -> str:
    if stmt.type != "expression_statement" or stmt.named_child_count == 0:
        return ""
    expr = stmt.named_children[0]
    if expr.type == "call_expression":
        callee = expr.child_by_field_name("function")
        return _last_name(text_of(src, callee)) if callee is not None else ""
    if expr.type == "gnu_asm_expression":
        text = text_of(src, expr)
        if "griddepcontrol.wait" in text:
            return "PDLWaitPrimary"
        if "griddepcontrol.launch_dependents" in text:
            return "PDLTriggerSecondary"
    return ""


def pdl_statements(src: bytes, body: Node) -> tuple[Node | None, Node | None, bool]:
    """(wait statement, trigger statement, trigger is the body's last statement) at the body's top level."""
    stmts = _named(body)
    wait = next((s for s in stmts if _statement_call_name(src, s) in _WAIT_NAMES), None)
    trigger = next((s for s in stmts if _statement_call_name(src, s) in _TRIGGER_NAMES), None)
    at_end = bool(stmts) and trigger is not None and stmts[-1] == trigger
    return wait, trigger, at_end


def _calls(src: bytes, node: Node) -> list[tuple[str, str, Node]]:
    out = []
    for m in matches("calls", node):
        callee_text = text_of(src, m["callee"][0])
        out.append((_last_name(callee_text), callee_text, m["call"][0]))
    return out


def _asm_texts(src: bytes, node: Node) -> list[str]:
    return [text_of(src, n) for n in ts.walk(node) if n.type == "gnu_asm_expression"]


_WARP_RE = re.compile(r"(__shfl_\w*sync|__reduce_\w+_sync|\bwarp::|cooperative_groups::reduce|\bcg::reduce|_warp$|WarpReduce)")
_CTA_RE = re.compile(r"(\bcta::|_cta$|BlockReduce|block_reduce|blockReduce)")


def _shared_decls(region: Region, f: _Func) -> tuple[int | None, int, bool]:
    """(static shared bytes or None when unknown, 2-D shared arrays, dynamic shared used)."""
    src = f.doc.src
    total: int | None = 0
    two_d = 0
    dynamic = False
    for node in ts.walk(f.body):
        if node.type != "declaration":
            continue
        quals = [text_of(src, c) for c in node.children if c.type in ("type_qualifier", "storage_class_specifier")]
        if "__shared__" not in quals:
            continue
        if "extern" in quals:
            dynamic = True
            continue
        elem = region.type_bytes(f.doc, node.child_by_field_name("type"))
        for d in node.children_by_field_name("declarator"):
            dims: list[Node] = []
            cursor = d
            while cursor is not None and cursor.type == "array_declarator":
                size = cursor.child_by_field_name("size")
                if size is not None:
                    dims.append(size)
                cursor = cursor.child_by_field_name("declarator")
            if len(dims) >= 2:
                two_d += 1
            values = [region.evaluate(f.doc, s) for s in dims]
            if total is None or elem is None or any(not isinstance(v, int) for v in values):
                total = None
                continue
            n = elem
            for v in values:
                n *= v
            total += n
    return total, two_d, dynamic


def _vector_bytes(region: Region, f: _Func) -> int | None:
    src = f.doc.src
    widths: list[int] = []
    scope = f.templates[0] if f.templates and f.templates[0] == f.node.parent else f.node
    for m in matches("templates", f.body):
        if "type" not in m:
            continue
        node = m["type"][0]
        name = _last_name(text_of(src, m["name"][0]))
        if name in _ALIGNED_VECTOR:
            size = region.type_bytes(f.doc, node)
            if size:
                widths.append(size)
        elif "vec" in name.lower():
            for arg in _named(m["args"][0]):
                value = region.evaluate(f.doc, arg)
                if isinstance(value, int) and value in (4, 8, 16, 32):
                    widths.append(value)
    for node in ts.walk(scope):
        if node.type == "type_identifier" and text_of(src, node) in _VECTOR_TYPES_16:
            widths.append(16)
    return max(widths) if widths else None


def _int64_values(src: bytes, f: _Func) -> bool:
    for node in ts.walk(f.body):
        if node.type == "declaration":
            type_node = node.child_by_field_name("type")
            if type_node is not None and _last_name(text_of(src, type_node)) in ("int64_t", "uint64_t", "size_t", "long"):
                if not any(d.type == "pointer_declarator" or (d.type == "init_declarator" and d.child_by_field_name("declarator").type == "pointer_declarator") for d in node.children_by_field_name("declarator")):
                    return True
    return False


def _divisions(region: Region, f: _Func) -> dict[str, int]:
    src = f.doc.src
    scalars, pairs = float_names(region, f)
    counts = {"float": 0, "rcp": 0, "rsqrt": 0, "fdividef": 0, "int_runtime": 0}
    for m in matches("arithmetic", f.body):
        op = text_of(src, m["op"][0])
        left, right, expr = m["left"][0], m["right"][0], m["expr"][0]
        floaty = is_float_expr(src, left, scalars, pairs) or is_float_expr(src, right, scalars, pairs)
        if op == "/" and floaty:
            counts["float"] += 1
            if contains_double(src, expr):
                continue
            if _is_one(src, left):
                inner = _strip_parens(right)
                if inner.type == "call_expression" and _last_name(text_of(src, inner.child_by_field_name("function"))) == "sqrtf":
                    counts["rsqrt"] += 1
                else:
                    counts["rcp"] += 1
            else:
                counts["fdividef"] += 1
        elif not floaty and not region.is_compile_time(f.doc, right):
            counts["int_runtime"] += 1
    return counts


def _strip_parens(node: Node) -> Node:
    while node.type == "parenthesized_expression" and node.named_child_count == 1:
        node = node.named_children[0]
    return node


def _is_one(src: bytes, node: Node) -> bool:
    node = _strip_parens(node)
    return node.type == "number_literal" and text_of(src, node).strip() in ("1.0f", "1.f", "1.0F", "1.F", "1.00f")


# --------------------------------------------------------------------------- launches


def _classify_grid(blob: str) -> GridKind:
    if re.search(r"\bmin\b", blob) and re.search(r"(sm_count|num_?sm|kNumSM|multiProcessorCount|occupancy)", blob, re.I):
        return "persistent"
    if re.search(r"(div_ceil|ceil_div|cdiv|DIV_UP|\+\s*\w+\s*-\s*1\s*\)\s*/)", blob):
        return "per_item"
    if re.search(r"(token|\brows?\b|num_rows|batch|\bN\.unwrap\(\))", blob, re.I):
        return "per_row"
    return "unknown"


def _pdl_mode(region: Region, launch: _Launch) -> PdlMode:
    if launch.chevron:
        return "unsupported"
    src = launch.doc.src
    if launch.runtime:
        scope = launch.func.node if launch.func is not None else launch.doc.root
        return "on" if b"cudaLaunchAttributeProgrammaticStreamSerialization" in src[scope.start_byte : scope.end_byte] else "absent"
    for method, args in launch.pdl_args or []:
        if method == "enable_pdl":
            named = _named(args)
            if not named:
                return "on"  # enable_pdl() defaults to true
            arg = named[0]
            value = region.evaluate(launch.doc, arg)
            if value is True:
                return "on"
            if value is False:
                return "off"
            is_param, _ = region.template_binding(launch.doc, arg, _last_name(text_of(src, arg)))
            return "flag" if is_param else "on"
        if method == "config":
            text = text_of(src, args)
            hit = re.search(r"\.use_pdl\s*=\s*([^,}]+)", text)
            if hit:
                value = hit.group(1).strip()
                return "on" if value == "true" else "off" if value == "false" else "flag"
    return "absent"


def _launch_count(region: Region, f: _Func, sites: set, node: Node, visiting: set[str]) -> int:
    src = f.doc.src
    if (node.start_byte, node.end_byte) in sites:
        return 1
    if node.type == "if_statement":
        cond = node.child_by_field_name("condition")
        then = node.child_by_field_name("consequence")
        other = node.child_by_field_name("alternative")
        n_cond = _launch_count(region, f, sites, cond, visiting) if cond is not None else 0
        n_then = _launch_count(region, f, sites, then, visiting) if then is not None else 0
        n_else = _launch_count(region, f, sites, other, visiting) if other is not None else 0
        return n_cond + max(n_then, n_else)
    if node.type == "call_expression":
        callee = node.child_by_field_name("function")
        name = _last_name(text_of(src, callee)) if callee is not None else ""
        inner = sum(_launch_count(region, f, sites, c, visiting) for c in node.children)
        target = next((h for h in region.hosts if h.name == name and h.owner_name == f.owner_name), None)
        if target is not None and target.qualname not in visiting:
            inner += _launch_count(region, target, _site_keys(region, target), target.body, visiting | {target.qualname})
        return inner
    return sum(_launch_count(region, f, sites, c, visiting) for c in node.children)


def _site_keys(region: Region, f: _Func) -> set:
    return {(l.outer.start_byte, l.outer.end_byte) for l in region.launches if l.func is f}


# --------------------------------------------------------------------------- entry points


def region_texts(files: Mapping[str, bytes | str] | os.PathLike[str] | str, spans: Iterable[Span]) -> dict[str, str]:
    """Span name -> its text, cut from ``files`` (path -> contents) or a task's ``src/`` folder."""
    out: dict[str, str] = {}
    for span in spans:
        if isinstance(files, Mapping):
            data = files[span.file]
            data = data.encode("utf-8") if isinstance(data, str) else data
        else:
            data = (pathlib.Path(files) / span.file).read_bytes()
        if span.name in out:
            raise ValueError(f"two editable spans are named {span.name!r}; span names must be unique")
        out[span.name] = data[span.start_byte : span.end_byte].decode("utf-8")
    return out


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


def features_of_regions(
    regions: Mapping[str, str],
    *,
    profile: ProfileFacts | Evaluation | None = None,
    dtype_bytes: int = 2,
    build_flags: Sequence[str] | None = None,
) -> Features:
    """Features of region texts (span name -> text): the baseline's or a candidate's.

    ``build_flags`` are the op's nvcc flags (the task's recipe): they decide facts the
    source cannot, such as ``--use_fast_math`` already turning ``expf`` into ``__expf``
    (an H200 round spent on that swap measured 1.000x, 2026-11-29).
    """
    found = _features_of_regions(regions, profile=profile, dtype_bytes=dtype_bytes)
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

    launches: list[LaunchSite] = []
    kernel_blocks: dict[str, list[int]] = {}
    kernel_runtime_block: dict[str, bool] = {}
    launched: set[str] = set()
    runtime_blocks = False
    for launch in region.launches:
        src = launch.doc.src
        block_size = region.evaluate(launch.doc, launch.block) if launch.block is not None else None
        block_size = int(block_size) if isinstance(block_size, (int, float)) and not isinstance(block_size, bool) else None
        runtime_block = launch.block is not None and block_size is None and not region.is_compile_time(launch.doc, launch.block)
        runtime_blocks = runtime_blocks or runtime_block
        grid_blob = region.expand(launch.doc, launch.grid) if launch.grid is not None else ""
        kernels = region.launched_kernels(launch)
        launched.update(kernels)
        for k in kernels:
            if block_size is not None:
                kernel_blocks.setdefault(k, []).append(block_size)
            elif runtime_block:
                kernel_runtime_block[k] = True
        launches.append(
            LaunchSite(
                span=launch.doc.span,
                function=launch.func.qualname if launch.func is not None else "",
                grid=text_of(src, launch.grid) if launch.grid is not None else "",
                block=text_of(src, launch.block) if launch.block is not None else "",
                block_size=block_size,
                grid_kind=_classify_grid(grid_blob) if launch.grid is not None else "unknown",
                pdl=_pdl_mode(region, launch),
                kernels=kernels,
            )
        )

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
        calls = _calls(src, k.body)
        asm = " ".join(_asm_texts(src, k.body))
        smem_bytes, _two_d, _dyn = _shared_decls(region, k)
        callees = [re.sub(r"<.*>$", "", text.strip(), flags=re.S) for _n, text, _c in calls]
        warp = any(_WARP_RE.search(text) for text in callees)
        cta = any(_CTA_RE.search(text) for text in callees)
        syncs = sum(1 for n, _t, _c in calls if n.startswith("__syncthreads")) + asm.count("bar.sync")
        if warp and syncs and smem_bytes != 0:  # per-warp partials through shared memory
            cta = True
        kernels.append(
            KernelFeatures(
                name=k.name,
                span=k.doc.span,
                vector_bytes=_vector_bytes(region, k),
                block_sizes=sorted(set(kernel_blocks.get(k.name, []))),
                block_size_runtime=kernel_runtime_block.get(k.name, False),
                launch_bounds=lb_text,
                template_params=[n for n, _ in region.template_params(k)],
                launched=k.name in launched,
                pdl_wait=wait is not None or "griddepcontrol.wait" in asm,
                pdl_trigger=trigger is not None or "launch_dependents" in asm,
                pdl_trigger_at_end=at_end and wait is not None and _named(k.body).index(trigger) - _named(k.body).index(wait) > 1,
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
                int_divmod_runtime=_divisions(region, k)["int_runtime"],
                register_arrays=sum(
                    1
                    for node in ts.walk(k.body)
                    if node.type == "declaration"
                    and "__shared__" not in text_of(src, node).split("[")[0]
                    and any(d.type == "array_declarator" for d in node.children_by_field_name("declarator"))
                ),
            )
        )

    # device code (kernels + device functions): math, divisions, hints
    math_sites: dict[str, int] = {}
    slow = swappable = fast = float_div = 0
    uses_expf = cache_hints = cp_async = tma = tensor = packed = int64 = False
    device_loops: list[LoopInfo] = []
    smem_any = dynamic = False
    two_d_total = 0
    for f in region.device_code:
        src = f.doc.src
        for name, text, _call in _calls(src, f.body):
            plain = text.strip().lstrip(":")
            if name in SLOW_MATH and plain in (name, f"std::{name}"):
                slow += 1
                if SLOW_MATH[name]:
                    swappable += 1
                    math_sites[name] = math_sites.get(name, 0) + 1
                uses_expf = uses_expf or name == "expf"
            if name in FAST_INTRINSICS or text.strip().endswith("math::rsqrt"):
                fast += 1
            if name in _CACHE_HINT_NAMES:
                cache_hints = True
            if re.search(r"(__pipeline_memcpy_async|memcpy_async|cp_async(?!_bulk))", text):
                cp_async = True
            if re.search(r"(cp_async_bulk|tma|TensorMap|mbarrier)", text, re.I):
                tma = True
            if re.search(r"(\bmma\b|wgmma|wmma::|mma_sync|\bmma_)", text):
                tensor = True
        body_text = text_of(src, f.body)
        for asm in _asm_texts(src, f.body):
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
        div = _divisions(region, f)
        float_div += div["float"]
        for op in ("rcp", "rsqrt", "fdividef"):
            if div[op]:
                math_sites[op] = math_sites.get(op, 0) + div[op]
        if f.kind == "kernel":
            int64 = int64 or _int64_values(src, f)
        device_loops += loops_of(region, f) if f.kind == "device" else []
        bytes_, two_d, dyn = _shared_decls(region, f)
        smem_any = smem_any or dyn or bytes_ is None or bytes_ > 0
        dynamic = dynamic or dyn
        two_d_total += two_d

    constants = _tunable_constants(region)
    known_blocks = [l.block_size for l in launches if l.block_size is not None]
    # aggregates describe the kernels the region launches (all kernels when it launches none)
    live = [k for k in kernels if k.launched] or kernels
    widths = [k.vector_bytes for k in live if k.vector_bytes is not None]
    kinds = {l.grid_kind for l in launches}
    grid_kind: GridKind = "none" if not launches else (kinds.pop() if len(kinds) == 1 else "mixed")
    pdl_modes = [l.pdl for l in launches]
    smem_sizes = [k.smem_bytes for k in kernels]
    launchers = {(l.span, l.function.split("::")[0]) for l in launches}
    per_entry = max(
        (_launch_count(region, h, _site_keys(region, h), h.body, {h.qualname}) for h in region.hosts), default=0
    )
    reduction = any(k.warp_reduce or k.cta_reduce for k in kernels)
    static = StaticFeatures(
        num_kernels=len(kernels),
        num_device_functions=sum(1 for f in region.funcs if f.kind == "device"),
        num_launchers=len(launchers),
        load_bytes=min(widths) if widths else None,
        max_load_bytes=max(widths) if widths else None,
        vector_loads=bool(widths),
        block_size=known_blocks[0] if known_blocks and len(set(known_blocks)) == 1 and len(known_blocks) == len(launches) else None,
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
        slow_math_calls=slow,
        fast_math_swappable=swappable,
        fast_intrinsics=fast,
        float_divisions=float_div,
        reciprocal_divisions=math_sites.get("rcp", 0) + math_sites.get("rsqrt", 0),
        uses_expf=uses_expf,
        shared_memory=smem_any,
        smem_static_bytes=None if any(s is None for s in smem_sizes) else max(smem_sizes, default=0),
        smem_2d_arrays=two_d_total,
        dynamic_smem=dynamic,
        syncthreads=max((k.syncthreads for k in kernels), default=0),
        warp_reduce=any(k.warp_reduce for k in kernels),
        cta_reduce=any(k.cta_reduce for k in kernels),
        reduction=reduction,
        int_divmod_runtime=sum(k.int_divmod_runtime for k in kernels),
        int64_index=int64,
        cache_hints=cache_hints,
        cp_async=cp_async,
        tma=tma,
        tensor_core_ops=tensor,
        register_arrays=sum(k.register_arrays for k in kernels),
        packed_casts=packed,
        elementwise=bool(kernels) and not reduction and not smem_any,
    )
    return Features(
        static=static,
        profile=profile or ProfileFacts(),
        kernels=kernels,
        launches=launches,
        constants=constants,
        math_sites=math_sites,
        spans=list(regions),
    )


def _tunable_constants(region: Region) -> list[TunableConstant]:
    out: list[TunableConstant] = []
    for doc, node, name, literal in iter_literal_constants(region):
        role = next((r for r, pattern in _ROLE_PATTERNS if pattern.search(name)), None)
        value = _number(text_of(doc.src, literal))
        if role is None or not isinstance(value, int):
            continue
        f = region.func_of(doc, node)
        owner = _owner_name(doc, node) or (f.qualname if f is not None else None)
        out.append(TunableConstant(span=doc.span, name=name, owner=owner, value=value, role=role))  # type: ignore[arg-type]
    return out


def _owner_name(doc: _Doc, node: Node) -> str | None:
    cursor = node.parent
    while cursor is not None:
        if cursor.type == "function_definition":
            return None
        if cursor.type in ("struct_specifier", "class_specifier"):
            name = cursor.child_by_field_name("name")
            return text_of(doc.src, name) if name is not None else None
        cursor = cursor.parent
    return None


def iter_literal_constants(region: Region) -> Iterator[tuple[_Doc, Node, str, Node]]:
    """(doc, declaration, name, integer literal node) of every constexpr/const integer with a literal value.

    The literal may sit inside ``static_cast<...>(...)`` or parentheses; the node
    yielded is the literal itself, so an edit touches only its digits.
    """
    for doc in region.docs:
        for m in matches("declarations", doc.root):
            decl = m["decl"][0]
            if decl.type == "alias_declaration":
                continue
            quals = {text_of(doc.src, c) for c in decl.children if c.type in ("type_qualifier", "storage_class_specifier")}
            if not quals & {"constexpr", "const"}:
                continue
            literal = _strip_parens(m["value"][0])
            while literal.type == "call_expression":
                callee = literal.child_by_field_name("function")
                args = literal.child_by_field_name("arguments")
                if callee is None or _last_name(text_of(doc.src, callee)) != "static_cast" or args is None or args.named_child_count != 1:
                    break
                literal = _strip_parens(args.named_children[0])
            if literal.type != "number_literal" or not isinstance(_number(text_of(doc.src, literal)), int):
                continue
            yield doc, decl, text_of(doc.src, m["name"][0]).strip(), literal


# --------------------------------------------------------------------------- spans without an index


def definition_spans(file: str, data: bytes) -> list[Span]:
    """Every kernel, device function and launcher definition of a file, as Spans.

    For callers without an extract index (tests, ad-hoc runs); it cuts the same
    spans as ``extract.tasks.editable_spans`` on these files (a test checks it). A
    span covers the ``template<...>`` header when there is one and, for a struct,
    stops at its closing brace; a launcher is a struct or host function that
    launches kernels. Names are the kernel / function / struct names.
    """
    region_like = Region({"_": data.decode("utf-8")})
    doc = region_like.docs[0]
    spans: list[Span] = []
    seen: set[tuple[int, int]] = set()
    launch_funcs = {id(l.func) for l in region_like.launches if l.func is not None}
    for f in region_like.funcs:
        if f.owner is not None:
            if not any(id(g) in launch_funcs for g in region_like.funcs if g.owner is not None and g.owner == f.owner):
                continue
            node = f.owner
            kind = "launcher"
            name_node = node.child_by_field_name("name")
            name = text_of(doc.src, name_node) if name_node is not None else f.owner_name or "?"
        else:
            node = f.node
            kind = {"kernel": "kernel", "device": "device_function"}.get(f.kind, "launcher" if id(f) in launch_funcs else "other")
            if kind == "other":
                continue
            name = f.name
        end = node.end_byte  # a struct's span stops at its closing brace, before the ';'
        while node.parent is not None and node.parent.type == "template_declaration":
            node = node.parent
        key = (node.start_byte, end)
        if key in seen:
            continue
        seen.add(key)
        spans.append(Span(file=file, start_byte=node.start_byte, end_byte=end, name=name, kind=kind))
    return spans
