"""Extract's records: the index of SGLang's kernels and ops, and each op's standalone task.

The base classes, the schema versions and the disk format (atomic writes, versioned reads) are
:mod:`pipeline.record_io`'s; optimize's records are :mod:`pipeline.run_records`'.

What must stay true:
- A record that only gains fields bumps its own version and keeps reading the older ones
  (``READS``): :class:`Task` 2 added ``language`` and ``triton``, and a version-1 task.json still
  loads, as CUDA; 3 added ``TensorSpec.returned`` (a Triton wrapper's returned outputs), and a
  version-2 task.json loads with none.
- Paths inside records are relative: to the sglang *package root* (the folder that holds
  ``kernels/``) for sources, to the task folder for task files, so records stay valid across
  machines (this one and the GPU machine).
- This module imports neither torch nor CUDA.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from pipeline.record_io import Record, VersionedRecord
from pipeline.target import TARGET

#: Task records: 2 added ``language`` ("cuda" | "triton") and ``triton`` (issue 19); 1 still reads.
TASK_SCHEMA_VERSION = 3
Language = Literal["cuda", "triton"]

Dtype = Literal["bf16", "fp16", "fp32"]
DTYPES: tuple[Dtype, ...] = ("bf16", "fp16", "fp32")
# SGLang's make_cpp_args spelling of each dtype (kernels/jit/utils/compile/cpp_args.py).
CPP_DTYPE: dict[str, str] = {"bf16": "bf16_t", "fp16": "fp16_t", "fp32": "fp32_t"}


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
