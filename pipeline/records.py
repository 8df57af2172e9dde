"""Typed, frozen, versioned records: the only way stages talk to each other.

Every record that crosses a stage boundary is defined here and written to disk as JSON by
:func:`write_record` (staging file + rename, so a reader never sees half a record). A run can
therefore be inspected with `cat`, resumed after a crash and replayed in a test.

What must stay true:
- Records are frozen and reject unknown keys (``extra="forbid"``): a typo in a
  producer is an error at write time, not a silent ``None`` downstream.
- Every top-level record carries ``schema_version``. Bump :data:`SCHEMA_VERSION`
  when a field changes meaning; readers refuse other versions with a clear fix
  ("re-run `kernelsmith extract`") rather than guessing. A record that only gains
  fields bumps its own version instead and keeps reading the older ones
  (``READS``): :class:`Task` 2 added ``language`` and ``triton``, and a version-1
  task.json still loads, as CUDA; 3 added ``TensorSpec.returned`` (a Triton wrapper's
  returned outputs), and a version-2 task.json loads with none.
- Paths inside records are relative: to the sglang *package root* (the folder that holds
  ``kernels/``) for sources, to the task folder for task files, so records stay valid across
  machines (this one and the GPU machine).
- This module imports neither torch nor CUDA.
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import pathlib
import shutil
import tempfile
import uuid
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pipeline.target import TARGET

SCHEMA_VERSION = 1
#: Task records: 2 added ``language`` ("cuda" | "triton") and ``triton`` (issue 19); 1 still reads.
TASK_SCHEMA_VERSION = 3
Language = Literal["cuda", "triton"]

Dtype = Literal["bf16", "fp16", "fp32"]
DTYPES: tuple[Dtype, ...] = ("bf16", "fp16", "fp32")
# SGLang's make_cpp_args spelling of each dtype (kernels/jit/utils/compile/cpp_args.py).
CPP_DTYPE: dict[str, str] = {"bf16": "bf16_t", "fp16": "fp16_t", "fp32": "fp32_t"}


class Record(BaseModel):
    """Base of every on-disk record: frozen, strict about keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class VersionedRecord(Record):
    schema_version: int = SCHEMA_VERSION
    #: the schema versions :func:`read_record` accepts for this record (the ones that only lacked fields)
    READS: ClassVar[tuple[int, ...]] = (SCHEMA_VERSION,)


# --------------------------------------------------------------------------- source


class FileDigest(Record):
    path: str  # relative to the sglang package root, e.g. kernels/jit/csrc/elementwise/activation.cuh
    sha256: str
    size: int


class SourceInfo(Record):
    """Where the SGLang sources came from; enough to fetch the same bytes again."""

    kind: Literal["wheel", "checkout", "package"]
    root: str  # absolute path of the sglang package root on the machine that extracted
    version: str | None = None
    commit: str | None = None
    wheel: str | None = None  # wheel file name when kind == "wheel"
    jit_dirs: list[str] = Field(default_factory=list)  # relative, e.g. kernels/jit
    aot_dirs: list[str] = Field(default_factory=list)  # relative, e.g. kernels/aot/csrc


# --------------------------------------------------------------------------- index


class Param(Record):
    name: str
    type: str  # source text of the type, whitespace-normalised
    default: str | None = None


class KernelDef(Record):
    """A `__global__` kernel or a `__device__` function, as tree-sitter saw it."""

    name: str
    qualified_name: str  # namespace::Struct::name
    kind: Literal["kernel", "device_function"]
    file: str
    start_byte: int  # span covers the template<> header when there is one
    end_byte: int
    line: int  # 1-based line of start_byte
    template_params: list[Param] = Field(default_factory=list)
    params: list[Param] = Field(default_factory=list)


class LauncherDef(Record):
    """A struct or function that launches kernels (`<<<>>>`, LaunchKernel(...), cudaLaunch*)."""

    name: str
    qualified_name: str
    kind: Literal["struct", "function"]
    file: str
    start_byte: int
    end_byte: int
    line: int
    launches: list[str] = Field(default_factory=list)  # kernel names referenced at launch sites
    methods: list[str] = Field(default_factory=list)  # static member functions (entry-point candidates)


class ParseIssue(Record):
    file: str
    message: str
    line: int | None = None


class LoadJitCall(Record):
    """One `load_jit(...)` call in a Python op module, read with libcst."""

    module: str  # relative to package root, e.g. kernels/ops/activation/activation.py
    function: str  # enclosing Python function
    line: int
    marker_args: list[str]  # source text of each positional argument
    cuda_files: list[str] = Field(default_factory=list)  # relative to kernels/jit/csrc as SGLang resolves them
    cpp_files: list[str] = Field(default_factory=list)
    cuda_wrappers: list[tuple[str, str]] = Field(default_factory=list)  # (export, C++ entry template text)
    cpp_wrappers: list[tuple[str, str]] = Field(default_factory=list)
    template_args: list[str] = Field(default_factory=list)  # make_cpp_args(...) argument source text
    extra_cuda_cflags: list[str] = Field(default_factory=list)
    extra_cflags: list[str] = Field(default_factory=list)
    extra_include_paths: list[str] = Field(default_factory=list)
    extra_dependencies: list[str] = Field(default_factory=list)
    header_only: bool = True
    unresolved: list[str] = Field(default_factory=list)  # argument text libcst could not evaluate


class OpEntry(Record):
    id: str  # <ops group>.<public function>, e.g. activation.silu_and_mul
    module: str
    public_functions: list[str]
    entry_points: list[str]  # export names reachable from the public functions
    files: list[str]  # cuda/cpp files the op compiles, relative to package root
    kernels: list[str] = Field(default_factory=list)  # __global__ names launched through the entry points
    load_jit: list[LoadJitCall] = Field(default_factory=list)


class Index(VersionedRecord):
    source: SourceInfo
    files: list[FileDigest]
    grammar: dict[str, str]  # file suffix -> grammar used ("cuda" | "cpp")
    kernels: list[KernelDef]
    device_functions: list[KernelDef]
    launchers: list[LauncherDef]
    includes: dict[str, list[str]]  # file -> included files it resolves (relative) or <system> names
    ops: list[OpEntry]
    op_modules: list[str]  # every Python module that calls load_jit
    parse_issues: list[ParseIssue] = Field(default_factory=list)
    elapsed_s: float = 0.0


# --------------------------------------------------------------------------- task


class Span(Record):
    """A byte range of one source file: an editable region or one of its pieces."""

    file: str  # relative to the package root
    start_byte: int
    end_byte: int
    name: str
    kind: Literal["kernel", "device_function", "launcher", "other"] = "other"


class Instantiation(Record):
    """One template instantiation SGLang makes for a dtype, ready to compile."""

    dtype: Dtype
    module_args: list[str]
    template_args: list[str]  # C++ spelling, e.g. ["bf16_t", "true"]
    wrappers: list[tuple[str, str]]  # (export name, resolved C++ entry)
    # Contract sizes the loader read from a tensor to make this instantiation
    # (SGLang's `_jit_gemv_module(w.shape[0], w.shape[1])`): it serves those sizes only.
    # Empty: its integer template arguments, if any, are the widths it serves.
    sizes: dict[str, int] = Field(default_factory=dict)
    # True when no size reached the loader (it takes no parameters, or only dtypes and
    # flags): its integer template arguments are constants (a thread count, kimi's
    # MlaOutputGateKernel<256>), never widths, and it serves every shape.
    size_free: bool = False
    # Loader parameters SGLang's caller chooses at run time with no default (``is_neox``),
    # at the value this instantiation was built for (a curated loader value, or a bool flag's
    # plain path, named in the task's notes): integrate passes it to the public function's
    # parameter that reaches the loader (EntryParam ``via="build"``).
    run_time: dict[str, bool | int | float | str] = Field(default_factory=dict)

    def serves(self, sizes: Mapping[str, int]) -> bool | None:
        """Whether this instantiation was made for ``sizes``; None when it records no sizes."""
        if not self.sizes:
            return None
        return all(sizes.get(name) == value for name, value in self.sizes.items())


class BuildRecipe(Record):
    """Exactly what SGLang's load_jit would compile, for one target arch.

    Include dirs are relative to the task's ``src/`` folder (which mirrors the
    package root), except the tokens ``@tvm_ffi`` and ``@dlpack`` that the builder
    resolves from the installed tvm-ffi, and ``@dep:<name>`` (SGLang's
    ``extra_dependencies``: ``cutlass``, ``flashinfer``) that it resolves through
    :mod:`pipeline.deps`.
    """

    cuda_files: list[str]  # relative to package root
    cpp_files: list[str] = Field(default_factory=list)
    include_dirs: list[str]
    cuda_cflags: list[str]  # SGLang's defaults + the op's extra flags
    cflags: list[str] = Field(default_factory=lambda: ["-std=c++20", "-O3"])
    arch: str = TARGET.arch
    header_only: bool = True


class TensorSpec(Record):
    name: str
    shape: list[str | int]  # symbols from the contract's SymbolicSize names, or literals
    dtype: str  # "T" = the instantiation dtype, else a concrete torch dtype name ("int32")
    # "scratch": a buffer the op may use for intermediate values, which SGLang's wrapper allocates
    # and drops (moe_topk_sigmoid's workspace, "float32 scratch" in its docstring): it starts as
    # poison, a write outside it still fails, and its contents are never compared, so a candidate
    # that needs no scratch (a fused path) is not held to the baseline's intermediate values.
    role: Literal["input", "output", "inout", "scratch"]
    strides: list[str | int] | None = None  # None = contiguous
    # For index tensors: [low, high], inclusive; an entry may be an expression of size
    # symbols and integer scalars ("num_experts - 1", "min(capacity, 128) - 1").
    value_range: tuple[float | str, float | str] | None = None
    # How the values relate to each other (None: each drawn alone within value_range).
    # "offsets": a prefix sum over a batch of sequences (cu_seqlens, query_start_loc):
    # non-decreasing, the first element value_range's low, the last its high.
    # "distinct": no value twice (KV slots out_cache_loc, request pool rows: two threads
    # writing one slot would race); the range must hold at least numel values.
    structure: Literal["offsets", "distinct"] | None = None
    # How an output is compared (None: element by element). "rows": each row (the last
    # dimension) is a set whose order the kernel does not fix (a top-k selected with
    # atomics); both sides are sorted along the last dimension first, so the values must
    # still match one for one and every element must still be written.
    order: Literal["rows"] | None = None
    # A Triton wrapper's output that it allocates and returns, with no parameter to pass it in:
    # its index among the leaves of the wrapper's result. Such an output is role "output", comes
    # after every argument the wrapper takes, and the harness hands its buffer to the wrapper's own
    # allocation (optimize.harness.returned_outputs). None: an argument (every CUDA tensor).
    returned: int | None = None


class ScalarSpec(Record):
    name: str
    type: str  # "float" | "int" | "bool" | "str"
    value: float | int | bool | str | None = None


class ArgSpec(Record):
    """One argument of the tested entry point, in call order."""

    kind: Literal["tensor", "scalar"]
    tensor: TensorSpec | None = None
    scalar: ScalarSpec | None = None


class Contract(Record):
    entry: str  # export name the harness calls
    args: list[ArgSpec]
    symbols: list[str]  # size symbols, e.g. ["num_tokens", "hidden_size"]
    divisibility: dict[str, int] = Field(default_factory=dict)  # symbol -> multiple it must be
    allowed_values: dict[str, list[int]] = Field(default_factory=dict)  # symbol -> the only widths accepted
    max_values: dict[str, int] = Field(default_factory=dict)
    checks: list[str] = Field(default_factory=list)  # RuntimeCheck condition texts
    # The checks extract could translate into Python over the contract's symbols and
    # scalar names ("(kH == 3) or ..."): what the harness solves when it invents sizes.
    constraints: list[str] = Field(default_factory=list)
    unresolved: list[str] = Field(default_factory=list)  # what static inference could not determine
    origin: Literal["inferred", "curated"] = "inferred"
    reference: str | None = None  # name of a PyTorch reference in optimize.harness.references
    extra_bytes: dict[str, str] = Field(default_factory=dict)  # notes for byte counting
    # Launcher template type parameters a tensor's dtype names ("?QDType") -> their position
    # in the template argument list, so extract can settle them per instantiation.
    type_params: dict[str, int] = Field(default_factory=dict)
    # False: the op's cost is not the bytes it moves (a sort, a top-k selection, a scan), so
    # time ÷ floor means nothing for it and is reported as "n/a" (issue 14 item 6)
    byte_bound: bool = True

    def accepts(self, symbol: str, value: int) -> bool:
        """Whether ``value`` for the width ``symbol`` passes the declared limits:
        positive, one of ``allowed_values``, a multiple of ``divisibility``, at most
        ``max_values``. Extract (catalog shapes) and the harness (held-out draws,
        the testing agent) both ask this one question, so they cannot disagree."""
        if value <= 0:
            return False
        if symbol in self.allowed_values and value not in self.allowed_values[symbol]:
            return False
        if symbol in self.divisibility and value % self.divisibility[symbol]:
            return False
        if symbol in self.max_values and value > self.max_values[symbol]:
            return False
        return True


class ShapeCase(Record):
    model: str
    tokens: int
    sizes: dict[str, int]  # symbol -> value
    source: str = ""  # where the figure comes from (catalog file + config key)

    @property
    def label(self) -> str:
        dims = ",".join(f"{k}={v}" for k, v in sorted(self.sizes.items()))
        return f"{self.model}[{dims}]"


class KernelResources(Record):
    """One kernel's line of the ptxas report."""

    kernel: str  # mangled name
    registers: int
    spill_stores: int = 0
    spill_loads: int = 0
    stack_bytes: int = 0
    smem_bytes: int = 0
    cmem_bytes: int = 0
    barriers: int = 0
    demangled: str | None = None  # cu++filt/c++filt spelling; None when no demangler is installed


class BuildReport(Record):
    ok: bool
    key: str  # content hash of every input
    seconds: float
    library: str | None = None  # path of the built module (.so) or object
    stderr: str = ""
    resources: list[KernelResources] = Field(default_factory=list)
    cached: bool = False  # True when served from the build cache without compiling


ParamKind = Literal["positional_only", "positional_or_keyword", "keyword_only", "var_positional", "var_keyword"]


class EntryParam(Record):
    """One parameter of an op's public Python function, and the contract argument it feeds."""

    name: str
    kind: ParamKind
    has_default: bool
    default: str | None = None  # the default's source text ("None", "1e-6")
    # name of the contract argument (Contract.args[i].tensor/scalar.name) this parameter's
    # value reaches the JIT entry as; None: it feeds none (a mode flag, an optional extra)
    feeds: str | None = None
    # how it was found: traced through the wrapper's call, same name, or a size symbol's name
    # (then ``feeds`` names the size symbol, Contract.symbols, not an argument); "build": it
    # feeds no argument but reaches the JIT loader's parameter ``loader_param``, which the
    # build fixed (Instantiation.run_time): it is passed the value the module was built for
    via: Literal["name", "call", "size", "build", ""] = ""
    loader_param: str | None = None
    # string values the wrapper asserts the parameter is one of (``assert op_name in SUPPORTED``,
    # SUPPORTED a module-level set/tuple/list of string literals), sorted; [] = none stated
    allowed: list[str] = Field(default_factory=list)


class EntrySignature(Record):
    """How to call an op's public Python function from its contract (read with libcst at
    extraction, :mod:`extract.entry`). What must stay true: a parameter is bound to a
    contract argument only when the wrapper's source shows it (same name, or passed into
    the JIT module's entry call, directly or through local helpers); ``reason`` is set
    whenever the function cannot be called from the contract alone, and then nothing
    may call it by guessing."""

    module: str  # dotted import path, e.g. sglang.kernels.ops.layernorm.norm
    function: str
    params: list[EntryParam] = Field(default_factory=list)
    returns: str | None = None  # the return annotation's source text
    reason: str = ""  # why it cannot be called from the contract; "" when it can


# --------------------------------------------------------------------------- triton


class TritonParam(Record):
    """One parameter of a ``@triton.jit`` function."""

    name: str
    constexpr: bool = False  # annotated ``tl.constexpr``: a compile-time value (a block size, a flag)
    annotation: str | None = None  # the annotation's source text
    default: str | None = None


class TritonConfig(Record):
    """One ``triton.Config`` of an ``@triton.autotune`` list: meta-parameters and launch settings."""

    kwargs: dict[str, int | float | bool | str] = Field(default_factory=dict)
    num_warps: int | None = None
    num_stages: int | None = None
    unresolved: str = ""  # source text of a config extract could not read as literals


class TritonKernel(Record):
    """A ``@triton.jit`` function: its span is the decorators and the body (what a coder edits)."""

    name: str
    file: str  # relative to the package root
    start_byte: int  # first decorator
    end_byte: int
    line: int
    params: list[TritonParam] = Field(default_factory=list)
    autotune: list[TritonConfig] = Field(default_factory=list)  # @triton.autotune(configs=[...])
    autotune_key: list[str] = Field(default_factory=list)  # @triton.autotune(key=[...])
    heuristics: list[str] = Field(default_factory=list)  # constexprs @triton.heuristics computes
    decorators: list[str] = Field(default_factory=list)  # dotted names, outermost first
    calls: list[str] = Field(default_factory=list)  # names it calls that are other functions (helpers)
    # the non-constexpr parameters the pointer of a tl.store / tl.atomic_* (stores) or a tl.load (loads)
    # derives from: the pointers, and the integers that offset them (a stride, n_cols)
    stores: list[str] = Field(default_factory=list)
    loads: list[str] = Field(default_factory=list)


class TritonLaunch(Record):
    """One launch site ``kernel[grid](args, num_warps=..., BLOCK=...)``: where the launch configuration lives."""

    kernel: str  # the name as written at the site (a local alias resolves through TritonFile.imports)
    function: str  # the enclosing function (qualified for a method: Class.method)
    file: str
    start_byte: int  # the whole call expression kernel[grid](...)
    end_byte: int
    line: int
    grid: str  # source text of the subscript (a tuple, a lambda over META, a local)
    args: list[str] = Field(default_factory=list)  # positional arguments' source text
    kwargs: dict[str, str] = Field(default_factory=dict)  # keyword arguments' source text (num_warps, BLOCK_*)


class TritonFacts(Record):
    """What a Triton task is beyond the shared fields: its kernels, launch sites and wrapper."""

    wrapper: str  # dotted module:function the contract calls, e.g. sglang.kernels.ops.attention.merge_state:merge_state_triton
    kernels: list[TritonKernel]  # launched by the wrapper, then the jit helpers they call
    launches: list[TritonLaunch]
    registered_as: str | None = None  # the KernelSpec op of a TRITON-backend registration naming the wrapper


class TritonFile(Record):
    """One Python file with ``@triton.jit`` functions, as libcst read it."""

    module: str  # relative to the package root
    kernels: list[TritonKernel] = Field(default_factory=list)
    launches: list[TritonLaunch] = Field(default_factory=list)
    functions: list[str] = Field(default_factory=list)  # module-level functions (public and private)
    calls: dict[str, list[str]] = Field(default_factory=dict)  # module-level function -> names it calls
    imports: dict[str, str] = Field(default_factory=dict)  # local name -> dotted.module:name
    parse_error: str | None = None


class TritonSpec(Record):
    """One ``KernelSpec(..., backend=KernelBackend.TRITON, target="module:function")`` registration."""

    op: str
    module: str  # dotted
    function: str  # may be Class.method
    registered_in: str  # the file of the register_kernel call, relative to the package root


class TritonOp(Record):
    id: str
    module: str  # relative to the package root
    function: str  # the wrapper SGLang calls
    kernels: list[str] = Field(default_factory=list)  # module:name of every kernel it launches
    registered_as: str | None = None
    reason: str = ""  # why it cannot become a task ("" when it can be tried)


class TritonIndex(VersionedRecord):
    """``work/triton_index.json``: every file with ``@triton.jit`` functions, the registrations, the ops."""

    source: SourceInfo
    files: list[TritonFile]
    specs: list[TritonSpec] = Field(default_factory=list)
    ops: list[TritonOp] = Field(default_factory=list)
    elapsed_s: float = 0.0


class Task(VersionedRecord):
    schema_version: int = TASK_SCHEMA_VERSION
    READS: ClassVar[tuple[int, ...]] = (1, 2, TASK_SCHEMA_VERSION)
    op_id: str
    module: str
    public_functions: list[str]
    entry_points: list[str]  # CUDA: the JIT module's exports; Triton: the kernels the wrapper launches
    source: SourceInfo
    files: list[FileDigest]  # copied under <task>/src/ at the same relative path
    instantiations: list[Instantiation]  # Triton: one per dtype, no template arguments (size_free)
    build: BuildRecipe  # Triton: no CUDA files; the arch the compile check targets
    editable: list[Span]  # Triton: the kernels (decorators included) and the wrapper's launch sites
    contract: Contract
    shapes: list[ShapeCase]
    baseline_build: BuildReport | None = None
    notes: list[str] = Field(default_factory=list)  # what extract could not settle (unmapped symbols, dropped dtypes)
    entry_signature: EntrySignature | None = (
        None  # the public function's parameters -> contract arguments (extract.entry)
    )
    # what the kernel is written in (version 2; a version-1 record is CUDA)
    language: Language = "cuda"
    triton: TritonFacts | None = None  # set exactly when language == "triton"

    @model_validator(mode="after")
    def _language_facts(self) -> Task:
        if (self.language == "triton") != (self.triton is not None):
            raise ValueError("a task has `triton` facts exactly when its language is triton")
        if self.schema_version < 2 and self.language != "cuda":
            raise ValueError("a schema_version 1 task is CUDA (language came with version 2)")
        return self


# --------------------------------------------------------------------------- optimize


class Outcome(str, enum.Enum):
    """The closed set of things an evaluation can end in."""

    ok = "ok"
    compile_failed = "compile_failed"
    incorrect = "incorrect"
    timeout = "timeout"
    crashed = "crashed"
    slower = "slower"
    budget_exhausted = "budget_exhausted"


class Step(Record):
    """One mechanical transform of a composed candidate: the skill and the parameters it was applied with."""

    skill: str
    params: dict[str, Any] = Field(default_factory=dict)


class Candidate(VersionedRecord):
    """A proposed replacement for a task's editable region."""

    op_id: str
    id: str  # content hash of the region texts
    parent: str | None  # candidate id it was derived from (None = baseline)
    regions: dict[str, str]  # span name -> new text for that span
    skill: str | None = None  # a composed candidate: its steps' skills joined by "+"
    params: dict[str, Any] = Field(default_factory=dict)
    coder: str = "baseline"
    rationale: str = ""
    # a search point: the transforms that made it from its parent, in the order applied
    steps: list[Step] = Field(default_factory=list)

    @property
    def skill_ids(self) -> list[str]:
        """The skills that made this candidate from its parent (its steps', else its one skill)."""
        if self.steps:
            return [s.skill for s in self.steps]
        return [self.skill] if self.skill else []

    @property
    def is_baseline(self) -> bool:
        """The unmodified SGLang kernel (no parent, made by no coder): evaluated on its own, as the reference."""
        return self.parent is None and self.coder == "baseline"


class ShapeTiming(Record):
    label: str
    sizes: dict[str, int]
    dtype: Dtype
    time_us: float
    spread_pct: float
    gbps: float
    pct_of_copy_bw: float
    time_over_floor: float
    baseline_us: float | None = None
    speedup: float | None = None
    floor_applies: bool = True  # False: the contract says the op is not byte-bound; time_over_floor is not a figure
    # the catalog shape's token count (ShapeCase.tokens): the bucket of a shape whose sizes name no
    # num_tokens (bias_gelu_tanh's num_rows, dispatch_probability's num_topk_entries); None: from sizes
    tokens: int | None = None

    @property
    def over_floor(self) -> float | None:
        """time ÷ floor where it means something (None: the floor does not apply to this op)."""
        return self.time_over_floor if self.floor_applies else None


class Evaluation(VersionedRecord):
    op_id: str
    candidate: str
    outcome: Outcome
    detail: str = ""
    build: BuildReport | None = None
    checks_passed: int = 0
    checks_failed: int = 0
    bitwise_equal: bool | None = None
    max_abs_err: float | None = None
    timings: list[ShapeTiming] = Field(default_factory=list)
    seconds: dict[str, float] = Field(default_factory=dict)  # build / test / profile split
    # Baseline-only evaluations: tensors whose role the baseline contradicted
    # ("written" input, "never_written" output); see contract.completion.
    role_evidence: dict[str, str] = Field(default_factory=dict)
    # Buffer sets of the timed CUDA graphs whose outputs were compared with the baseline's
    # (summed over the timed shapes; 0 when nothing was timed or there was no candidate).
    timed_sets_validated: int = 0
    # A search population member checked at every shape but timed only at the screening
    # shapes (optimize.harness.population), not promoted to full timing: never accepted.
    screened: bool = False


class ReachVerdict(Record):
    """How a candidate fares at another op whose entry points run code it changes.

    Why: ops share kernel files (rope.cuh serves three ops), so a candidate judged at its own
    entry points alone can be slower where another op runs the same code. ``status``:

    - ``not_reached``: every change is code this op never runs (:mod:`optimize.reach`);
    - ``held``: evaluated at this op's own shapes, correct and slower at none beyond the band;
    - ``failed``: evaluated there and incorrect, or slower beyond the band;
    - ``not_judged``: reached but not evaluated (no task, a different copy of the region,
      a baseline that fails its own checks). It blocks acceptance: unproven is not proven.
    """

    op_id: str
    status: Literal["not_reached", "held", "failed", "not_judged"]
    detail: str = ""
    regions: list[str] = Field(default_factory=list)  # the changed regions this op runs
    outcome: Outcome | None = None  # the op's final evaluation outcome, when evaluated
    speedup_geomean: float | None = None
    speedup_min: float | None = None
    regressed_shapes: list[str] = Field(default_factory=list)

    @property
    def blocks(self) -> bool:
        """True when this verdict keeps the candidate from being accepted."""
        return self.status in ("failed", "not_judged")


class OpSummary(Record):
    """One op's result in an optimize run (what `integrate` reads)."""

    op_id: str
    # model_failed: every LLM call of the op failed (endpoint errors) and nothing was found faster
    status: Literal["improved", "no_improvement", "failed", "skipped", "model_failed"]
    stop_reason: str | None = None
    rounds: int = 0
    best: str | None = None  # validated best candidate id; None = the baseline stays
    best_dir: str | None = None  # relative to the run folder: <op>/best (candidate.json, regions/, src/)
    speedup_geomean: float | None = None  # over catalog shapes and dtypes, vs the baseline
    speedup_min: float | None = None
    guarded: bool = False  # best keeps the baseline at some shapes through a shape dispatch
    skills: list[str] = Field(default_factory=list)  # skills on the path from the baseline to the best
    detail: str = ""
    # why the op stopped, in the words of the moment it stopped (a budget's message read at the end
    # of the run would give every op the last op's figures); "" in records from before it
    stop_detail: str = ""


class RunSummary(VersionedRecord):
    """``work/runs/<run>/summary.json``: the run as a whole."""

    run: str
    mode: Literal["multi", "single"]
    coder: Literal["llm", "offline", "external"]
    backend: str
    simulated: bool  # True: timings replayed from a file, not measured in this run
    device: str | None = None
    started_at: str
    finished_at: str
    tokens: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    gpu_s: float = 0.0
    ops: list[OpSummary] = Field(default_factory=list)


# --------------------------------------------------------------------------- io

R = TypeVar("R", bound=BaseModel)


def file_mode() -> int:
    """The mode a new file gets under this process's umask (``0o666 & ~umask``).

    ``tempfile.mkstemp`` creates its file 0600 whatever the umask says; a record written
    through it and renamed into place would stay unreadable to teammates and CI artifact
    readers, so every staging file is given this mode before it is published.
    """
    status = pathlib.Path("/proc/self/status")
    try:
        for line in status.read_text(encoding="ascii").splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # no /proc: read it by setting it (and restore it at once)
    os.umask(mask)
    return 0o666 & ~mask


def write_record(record: BaseModel, path: str | os.PathLike[str]) -> pathlib.Path:
    """Write atomically: a staging file in the same folder, then rename.

    The file gets the mode the umask decides (:func:`file_mode`). A folder that cannot
    be written raises :class:`pipeline.errors.NotWritable` naming it."""
    from pipeline.errors import not_writable

    path = pathlib.Path(path)
    text = record.model_dump_json(indent=2) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as err:
        typed = not_writable(err, path.parent)
        if typed is None:
            raise
        raise typed from err
    try:
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException as err:
        pathlib.Path(tmp).unlink(missing_ok=True)
        typed = not_writable(err, path.parent) if isinstance(err, OSError) else None
        if typed is None:
            raise
        raise typed from err
    return path


def replace_dir(staging: pathlib.Path, target: pathlib.Path) -> None:
    """Publish the finished folder ``staging`` at ``target`` by rename, replacing any folder there.

    A reader sees the old folder or the new one, never a mix: the old one is first
    renamed aside (``.old-<name>-<random>`` beside it), the new one renamed in, then
    the old one removed. ``staging`` must sit in the same filesystem as ``target``
    (the rename is what makes it atomic); cleaning it up on failure is the caller's.
    """
    if target.exists():
        trash = target.parent / f".old-{target.name}-{uuid.uuid4().hex[:8]}"
        os.replace(target, trash)
        os.replace(staging, target)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(staging, target)


def read_record(cls: type[R], path: str | os.PathLike[str]) -> R:
    """Read a record, refusing other schema versions with the fix in the message."""
    from pydantic import ValidationError

    from pipeline.errors import StaleRecordError

    path = pathlib.Path(path)
    fix = "re-run the stage that wrote it (for tasks: `kernelsmith extract`)"
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise StaleRecordError(f"{path} is not a record (not UTF-8 text)", fix=fix) from err
    if not text.strip():
        raise StaleRecordError(f"{path} is empty (a write that never finished?)", fix=fix)
    try:
        data = json.loads(text)
    except ValueError as err:
        raise StaleRecordError(f"{path} is not valid JSON (truncated?): {err}", fix=fix) from err
    reads = getattr(cls, "READS", (SCHEMA_VERSION,))
    version = data.get("schema_version", reads[-1]) if isinstance(data, dict) else None
    if version not in reads:
        raise StaleRecordError(
            f"{path} has schema_version {version}, this kernelsmith reads {' or '.join(map(str, reads))}",
            fix=fix,
        )
    try:
        return cls.model_validate(data)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top)"
        raise StaleRecordError(
            f"{path} does not hold a valid {cls.__name__} ({err.error_count()} problem(s); {where}: {first['msg']})",
            fix=fix,
        ) from err


def content_hash(*parts: str | bytes) -> str:
    """sha256 over length-prefixed parts, so ("ab","c") and ("a","bc") differ."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()
