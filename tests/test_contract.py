"""extract.contract: inference from the real launchers, curated contracts, and the C++ text helpers."""

from __future__ import annotations

import pathlib

import pytest

from extract import cexpr, cxx, launcher_facts, pyops, wrapper_facts
from extract import contract as C
from extract.command import build_index
from pipeline.records import ArgSpec, ScalarSpec, TensorSpec

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def index(sglang_source):
    return build_index(sglang_source, ROOT / "work" / "cache")[0]


@pytest.fixture(scope="module")
def program(sglang_source):
    return pyops.Program(pathlib.Path(sglang_source.root))


def _op(index, op_id):
    return next(op for op in index.ops if op.id == op_id)


def _tensors(contract):
    return {a.tensor.name: a.tensor for a in contract.args if a.tensor is not None}


# --------------------------------------------------------------------------- inferred, real sources


@pytest.mark.wheel
def test_inferred_silu_and_mul(index, program, sglang_source):
    op = _op(index, "activation.silu_and_mul")
    c = C.infer_contract(op, index, pathlib.Path(sglang_source.root), program=program, entry="run_activation")
    assert c.origin == "inferred"
    assert [a.kind for a in c.args] == ["tensor", "tensor", "scalar"]
    t = _tensors(c)
    # D_in == 2 * D_out (RuntimeCheck) folds input's width into a multiple of the output's
    assert t["input"].shape == ["num_tokens", "2*output_width"]
    assert t["out"].shape == ["num_tokens", "output_width"]
    assert t["out"].role == "output" and t["input"].role == "input"
    assert t["out"].strides is None  # the plain (non-reuse) matcher: contiguous
    assert c.args[2].scalar.name == "type" and c.args[2].scalar.type == "str"
    # kVecSize = kMaxVecBytes / sizeof(T) = 16 / 2 for the strictest dtype
    assert c.divisibility == {"output_width": 8}
    assert any("kVecSize" in check for check in c.checks)
    # silu_and_mul -> _run_activation_inplace("silu", ...) -> module.run_activation(..., op_name)
    assert c.args[2].scalar.value == "silu" and not any("string argument `type`" in u for u in c.unresolved)


@pytest.mark.wheel
def test_inferred_rmsnorm(index, program, sglang_source):
    op = _op(index, "layernorm.rmsnorm")
    c = C.infer_contract(op, index, pathlib.Path(sglang_source.root), program=program, dtypes=["bf16", "fp16"])
    t = _tensors(c)
    assert list(t) == ["input", "weight", "output"]
    assert t["input"].strides == ["input_stride", 1]
    assert t["weight"].shape == ["hidden_size"]
    assert t["output"].role == "output"
    eps = c.args[3].scalar
    assert (eps.name, eps.type, eps.value) == ("eps", "float", 1e-6)  # default of the public function
    assert any("kDim" in check for check in c.checks)
    assert c.symbols[:2] == ["num_tokens", "hidden_size"]


@pytest.mark.wheel
def test_inferred_fused_add_rmsnorm(index, program, sglang_source):
    op = _op(index, "layernorm.fused_add_rmsnorm")
    c = C.infer_contract(op, index, pathlib.Path(sglang_source.root), program=program, dtypes=["bf16", "fp16"])
    t = _tensors(c)
    assert t["residual"].role == "inout"
    assert t["input"].role == "inout"  # the public function returns nothing: it writes input in place
    assert t["weight"].role == "input"
    assert c.divisibility == {"hidden_size": 8}
    # if (hidden_size <= (kMaxVecBytes == 32 ? 12288 : 8192)) {...} else { RuntimeCheck(false, ...) }
    assert c.max_values == {"hidden_size": 8192}


# --------------------------------------------------------------------------- curated


@pytest.mark.wheel
@pytest.mark.parametrize(
    ("op_id", "reference", "dtypes"),
    [
        ("activation.silu_and_mul", "silu_and_mul", ["bf16", "fp16", "fp32"]),
        ("layernorm.rmsnorm", "rmsnorm", ["bf16", "fp16"]),
        ("layernorm.fused_add_rmsnorm", "fused_add_rmsnorm", ["bf16", "fp16"]),
    ],
)
def test_curated_contracts(index, program, sglang_source, op_id, reference, dtypes):
    c, curated = C.contract_for(_op(index, op_id), index, pathlib.Path(sglang_source.root), program=program)
    assert c.origin == "curated" and c.reference == reference
    assert curated["dtypes"] == dtypes
    assert c.unresolved == []
    assert curated["shapes"], "a curated contract maps its symbols to model dimensions"
    for arg in c.args:
        if arg.tensor is not None:
            for dim in arg.tensor.shape:
                assert isinstance(dim, int) or all(
                    part.strip().isdigit() or part.strip() in c.symbols for part in dim.split("*")
                )


@pytest.mark.wheel
def test_curated_silu_and_fused_add_details(index, program, sglang_source):
    c, _ = C.contract_for(
        _op(index, "activation.silu_and_mul"), index, pathlib.Path(sglang_source.root), program=program
    )
    t = _tensors(c)
    assert c.entry == "run_activation"
    assert t["input"].shape == ["num_tokens", "2*hidden_size"] and t["out"].shape == ["num_tokens", "hidden_size"]
    assert c.args[2].scalar.value == "silu"
    assert c.divisibility == {"hidden_size": 8}
    c, _ = C.contract_for(
        _op(index, "layernorm.fused_add_rmsnorm"), index, pathlib.Path(sglang_source.root), program=program
    )
    t = _tensors(c)
    assert (t["input"].role, t["residual"].role, t["weight"].role) == ("inout", "inout", "input")
    assert c.max_values == {"hidden_size": 8192} and c.divisibility == {"hidden_size": 8}


@pytest.mark.wheel
def test_rmsnorm_allowed_widths_come_from_norm_py(index, program, sglang_source):
    c, _ = C.contract_for(_op(index, "layernorm.rmsnorm"), index, pathlib.Path(sglang_source.root), program=program)
    # independent statement of the rule (norm.py + rmsnorm.cuh): warp sizes, multiples of
    # 256 up to 8192, multiples of 512 from 8192 to 16384
    expected = {64, 128, 256} | {256 * k for k in range(2, 33)} | {512 * k for k in range(16, 33)}
    assert set(c.allowed_values["hidden_size"]) == expected
    t = _tensors(c)
    assert t["output"].strides == ["output_stride", 1]


# --------------------------------------------------------------------------- C++ helpers


def test_c_expressions():
    env = dict(cexpr.ARCH_CONSTANTS)
    assert cexpr.eval_c("device::kMaxVecBytes / sizeof(T)", env, {"T": 2}) == 8
    assert cexpr.eval_c("(kMaxVecBytes == 32 ? 12288 : 8192)", env) == 8192
    assert cexpr.eval_c("static_cast<uint32_t>(3) * 4 + 1", env) == 13
    assert cexpr.eval_c("a && !b || 0", {"a": 1, "b": 0}) == 1
    assert cexpr.eval_c("unknown_name + 1", env) is None
    assert cxx.split_top("a, f(b, c), std::pair<int, int> x, n <= m") == [
        "a",
        "f(b, c)",
        "std::pair<int, int> x",
        "n <= m",
    ]


def test_c_conditions_translate_to_python_over_the_contracts_names():
    names = {"D": "hidden_dim", "kH": "heads", "flag": "use_gate"}
    assert (
        cexpr.c_to_python("D.unwrap() % 8 == 0 && !flag", names.get) == "(((hidden_dim % 8) == 0) and (not use_gate))"
    )
    assert cexpr.c_to_python("kH == 3 || kH / 2 == 6", names.get) == "((heads == 3) or ((heads // 2) == 6))"
    assert cexpr.c_to_python("flag ? D.unwrap() : 2 * kH", names.get) == "(hidden_dim if use_gate else (2 * heads))"
    assert cexpr.c_to_python("static_cast<int>(D.unwrap()) >= sizeof(float)", names.get) == "(hidden_dim >= 4)"
    # a name that means nothing outside the C++ (a local pointer, a method call) -> not translated
    assert cexpr.c_to_python("ptr != nullptr", names.get) is None
    assert cexpr.c_to_python("x.stride(0) == 1", names.get) is None


def test_if_constexpr_chains_are_cut_to_the_arm_a_call_takes():
    body = """
  RuntimeCheck(dim % kMultiple == 0);
  if constexpr (kMultiple == 1) {
    RuntimeCheck(dim % 8 == 0);
  } else if constexpr (kMultiple == 12) {
    RuntimeCheck(dim % 48 == 0);
  } else {
    Panic("no");
  }
  if constexpr (kUnknown) { RuntimeCheck(a); } else { RuntimeCheck(b); }
"""
    twelve = launcher_facts.prune_constexpr(body, {"kMultiple": 12})
    assert "dim % 48" in twelve and "dim % 8 " not in twelve and "Panic" not in twelve
    assert "RuntimeCheck(a)" in twelve and "RuntimeCheck(b)" in twelve  # undecidable: kept whole
    other = launcher_facts.prune_constexpr(body, {"kMultiple": 5})
    assert "Panic" in other and "dim % 48" not in other and "dim % 8 " not in other
    assert launcher_facts.prune_constexpr(body, {}) == body


@pytest.mark.wheel
@pytest.mark.parametrize("op_id", ["moe.topk_softmax", "moe.topk_sigmoid", "moe.moe_topk_softmax_out"])
def test_a_tensor_the_launcher_only_reads_is_an_input_whatever_its_name(index, program, sglang_source, op_id):
    """``gating_output`` is the router's output and these ops' input: the launcher reads it through
    ``static_cast<const T*>``. Taken as an output (its name), it was poisoned before every call and
    every PDL candidate of topk_softmax was "incorrect" on the H200 (2026-12-02)."""
    c = C.infer_contract(_op(index, op_id), index, pathlib.Path(sglang_source.root), program=program)
    assert _tensors(c)["gating_output"].role == "input"


def test_read_only_tensors_needs_every_use_to_be_const():
    text = """void run(TensorView gating_output, TensorView out, TensorView ws, TensorView raw) {
      auto* g = static_cast<const bf16_t*>(gating_output.data_ptr());  // read
      auto* o = static_cast<float*>(out.data_ptr());
      const float* w = (const float*)ws.data_ptr();
      float* w2 = static_cast<float*>(ws.data_ptr());  // and written
      Params p{.a = raw.data_ptr()};
    }"""
    assert C.read_only_tensors(text, ["gating_output", "out", "ws", "raw", "unused"]) == {"gating_output"}
    assert C.read_only_tensors("(const float *) x.data_ptr()", ["x"]) == {"x"}


@pytest.mark.wheel
def test_a_forwarded_call_binds_template_arguments(index, program, sglang_source):
    """run_hadamard<12, DType>(...) checks `dim % (4 * 12)` only in the 12N arm of its
    `if constexpr` chain: the 12N op must not inherit the 20N/28N/40N arms' checks."""
    root = pathlib.Path(sglang_source.root)
    c = C.infer_contract(_op(index, "quantization.hadamard_transform_12n"), index, root, program=program)
    assert c.constraints == ["((dim % 12) == 0)", "((dim % (4 * 12)) == 0)", "(dim <= (12 * 1024))"]
    assert c.divisibility == {"dim": 48}


@pytest.mark.wheel
def test_checks_become_constraints_over_symbols_and_scalars(index, program, sglang_source):
    root = pathlib.Path(sglang_source.root)

    def constraints(op_id, entry=None):
        return C.infer_contract(_op(index, op_id), index, root, program=program, entry=entry).constraints

    # `const int64_t kH = A_log.shape()[0]; RuntimeCheck(kH == 3 || kH == 6 || kH == 12, ...)`: a local
    # defined from a tensor's matched dimension is read through its definition
    assert "((((kH) == 3) or ((kH) == 6)) or ((kH) == 12))" in constraints("attention.kda_fused_decode")
    # a scalar parameter and a bool in a ternary; the pointer-aliasing check is not translatable
    gate = constraints("diffusion.residual_gate_add2")
    assert gate == [
        "((hidden_size > 0) and ((numel % hidden_size) == 0))",
        "(gate_numel == (hidden_size if broadcast_gate else numel))",
    ]
    # `const auto H = static_cast<uint32_t>(num_q_heads)`: a local holding a scalar
    assert "(mixed_dim == (((2 * (num_q_heads)) * 128) + (num_v_heads * 128)))" in constraints(
        "attention.kda_packed_decode"
    )
    # a symbol extract folded into a relation is written as that relation (input_width -> 2*output_width)
    assert constraints("activation.silu_and_mul", "run_activation") == ["((output_width * 2) == (2*output_width))"]


SYNTHETIC = r"""
template <typename DType, int kWidth>
struct DemoKernel {
  static constexpr auto kVec = device::kMaxVecBytes / sizeof(DType);

  static void run(const tvm::ffi::TensorView x, const tvm::ffi::TensorView ids, const tvm::ffi::TensorView out, double scale, bool flag) {
    impl(x, ids, out, scale);
  }

  template <bool kFast = false>
  static void impl(const tvm::ffi::TensorView& src, const tvm::ffi::TensorView& idx, const tvm::ffi::TensorView& dst, double s) {
    using namespace host;
    auto N = SymbolicSize{"rows"};  // comment with TensorMatcher({X}) inside
    auto D = SymbolicSize{"width"};
    auto W = SymbolicSize{"wide"};
    TensorMatcher({N, W}).with_dtype<DType>().verify(src);
    TensorMatcher({N}).with_dtype<int32_t>().verify(idx);
    TensorMatcher({N, D}).with_strides({D, 1}).with_dtype<DType>().verify(dst);
    const auto width = static_cast<uint32_t>(D.unwrap());
    RuntimeCheck(width * 4 == W.unwrap(), "wide is four times width");
    RuntimeCheck(width % kVec == 0, "vector width");
    if (width <= 2048) {
      launch();
    } else {
      RuntimeCheck(false, "too wide");
    }
  }
};
"""


def test_cpp_facts_on_a_synthetic_launcher():
    facts = launcher_facts.cpp_facts(SYNTHETIC, "run", ["bf16", "fp32"])
    assert [name for _, name in facts.params] == ["x", "ids", "out", "scale", "flag"]
    # forwarded through impl(): matchers found under the callee's names, mapped back
    assert set(facts.matchers) == {"x", "ids", "out"}
    assert facts.matchers["ids"][0].dtype == "int32"
    # a type parameter, even the first: the instantiations settle it (settle_type_params),
    # "T" where each passes its own dtype there (minimax's first one is the position type)
    assert facts.matchers["x"][0].dtype == "?DType"
    assert facts.relations == {"wide": "4*width"}
    assert facts.divisibility == {"width": 8}  # 16 / sizeof(bf16), the strictest of bf16/fp32
    assert facts.max_values == {"width": 2048}
    assert "false" not in facts.checks


@pytest.mark.wheel
@pytest.mark.parametrize(
    ("op_id", "entry", "value"),
    [
        ("activation.gelu_and_mul", "run_activation", "gelu"),
        ("activation.gelu_tanh_and_mul", "run_activation", "gelu_tanh"),
        ("activation.relu2", "run_unary_activation", "relu2"),
        ("activation.run_unary_activation", "run_unary_activation", None),
    ],
)
def test_string_arguments_followed_through_the_callers(index, program, sglang_source, op_id, entry, value):
    """`gelu_and_mul` -> run_activation("gelu", ...) -> module.run_activation(..., op_name): type is "gelu".
    A public function that takes the name itself (run_unary_activation) leaves it open."""
    c = C.infer_contract(_op(index, op_id), index, pathlib.Path(sglang_source.root), program=program, entry=entry)
    (scalar,) = [a.scalar for a in c.args if a.scalar is not None and a.scalar.name == "type"]
    assert scalar.value == value
    assert ("string argument `type`: value not known" in c.unresolved) == (value is None)


def test_dimensions_lose_value_preserving_cpp():
    assert launcher_facts._dim("static_cast<int64_t>(num_layers)", {}) == "num_layers"
    assert launcher_facts._dim("static_cast<int64_t>(n)", {"n": "num_items"}) == "num_items"
    assert launcher_facts._dim("batch_size.unwrap() * draft_tokens.unwrap()", {"batch_size": "B"}) == "B * draft_tokens"
    assert launcher_facts._dim("static_cast<int>(a) + static_cast<int>(b)", {}) == "a + b"
    assert launcher_facts._dim("128u", {}) == 128 and launcher_facts._dim("-1", {}) == -1


def test_literals_of_every_scalar_kind():
    import libcst as cst

    lit = lambda text: wrapper_facts._literal(cst.parse_expression(text))  # noqa: E731
    assert (lit('"gelu"'), lit("64"), lit("-2"), lit("1e-6"), lit("True"), lit("False")) == (
        "gelu",
        64,
        -2,
        1e-6,
        True,
        False,
    )
    assert lit("x") is wrapper_facts._NOT_LITERAL and lit("x.shape[1]") is wrapper_facts._NOT_LITERAL
    assert C._fits_scalar("float", 64) and not C._fits_scalar("int", True) and not C._fits_scalar("str", 3)


def test_a_template_type_parameter_dtype_is_settled_by_what_the_instantiations_pass():
    from pipeline.records import ArgSpec, Contract, Instantiation, TensorSpec

    def t(name, dtype):
        return ArgSpec(kind="tensor", tensor=TensorSpec(name=name, shape=["n"], dtype=dtype, role="input"))

    # template <bool kNeox, int64_t kDim, bool kPDL, typename DType, typename QDType, typename OutT, typename W>
    contract = Contract(
        entry="run",
        args=[t("q", "?QDType"), t("out", "?OutT"), t("w", "?W"), t("k", "T")],
        symbols=["n"],
        unresolved=[
            f"tensor `{n}`: element type `{p}` is not the instantiation dtype"
            for n, p in (("q", "QDType"), ("out", "OutT"), ("w", "W"))
        ],
        type_params={"QDType": 4, "OutT": 5, "W": 6},
    )
    insts = [
        Instantiation(
            dtype=d,
            module_args=[],
            template_args=["true", "64", "true", cpp, cpp, "fp32_t", "fp32_t" if d == "bf16" else "bf16_t"],
            wrappers=[],
        )
        for d, cpp in (("bf16", "bf16_t"), ("fp16", "fp16_t"))
    ]
    settled = C.settle_type_params(contract, insts)
    assert [a.tensor.dtype for a in settled.args] == ["T", "float32", "?W", "T"]  # W differs per instantiation: open
    assert settled.unresolved == ["tensor `w`: element type `W` is not the instantiation dtype"]
    assert C.settle_type_params(contract, []) == contract


def test_the_type_a_launcher_casts_data_to_is_the_dtype():
    body = "float* w = static_cast<float*>(weights.data_ptr()); auto i = ids.data_ptr<int64_t>(); auto* t = static_cast<T*>(x.data_ptr());"
    assert [launcher_facts._cast_dtype([(body, n)]) for n in ("weights", "ids", "x", "y")] == [
        "float32",
        "int64",
        None,
        None,
    ]
    mixed = "static_cast<float*>(y.data_ptr()); static_cast<int32_t*>(y.data_ptr());"
    assert launcher_facts._cast_dtype([(mixed, "y")]) is None  # read as two types: not guessed


def test_a_symbolic_size_display_name_becomes_an_identifier():
    """Found in the coverage sweep (2026-11-29): SymbolicSize{"hidden_dim x 2"} made a
    shape entry no harness can evaluate; three tasks could not be planned."""
    body = 'auto D = SymbolicSize{"hidden_dim x 2"};\nauto M = SymbolicSize{"num tokens"};\nSymbolicSize K{"2k"};\nauto N = SymbolicSize{"n"};'
    assert launcher_facts._body_symbols(body) == {"D": "hidden_dim_x_2", "M": "num_tokens", "K": "K", "N": "n"}


@pytest.mark.wheel
def test_a_launcher_without_tensor_matchers_gives_shapes_by_its_uses(index, program, sglang_source):
    """moe_topk_sigmoid checks `gating_output.dim() == 2` and reads `num_tokens =
    gating_output.shape()[0]`; gelu_tanh_cat checks `attn.ndim() >= 2` and reads the
    other tensors only from the end (`mlp.size(-1)`, `output.size(-1) == a + m`).
    Before, every such tensor was 0-d and the baseline refused the call."""
    root = pathlib.Path(sglang_source.root)
    sig = _tensors(C.infer_contract(_op(index, "moe.topk_sigmoid"), index, root, program=program))
    assert sig["gating_output"].shape == ["num_tokens", "num_experts"]
    assert sig["topk_weights"].shape == sig["topk_ids"].shape == ["num_tokens", "topk"]  # from `== num_tokens` checks
    assert sig["correction_bias"].shape == ["num_experts"]  # through `const auto& bias = correction_bias.value()`
    # `static_cast<float*>(topk_weights.data_ptr())`: the data is float32, whatever the dtype
    # of the instantiation (bf16 there made the kernel write past the tensor's end)
    assert sig["topk_weights"].dtype == "float32" and sig["topk_ids"].dtype == "int32"
    gelu = C.infer_contract(_op(index, "diffusion.fused_gelu_tanh_cat"), index, root, program=program)
    t = _tensors(gelu)
    assert (
        t["attn"].shape == ["attn_dim0", "a"]
        and t["mlp"].shape == ["attn_dim0", "m"]
        and t["output"].shape == ["attn_dim0", "a + m"]
    )
    assert any("no TensorMatcher; shape" in u for u in gelu.unresolved)


@pytest.mark.wheel
def test_a_refusing_switch_gives_the_allowed_values(index, program, sglang_source):
    """kimi_k2_moe_fused_gate: `switch (num_experts) { case 256: ... case 384: ... default: Panic(...) }`;
    the sweep had tested it at Mixtral's 8 experts and the baseline refused."""
    root = pathlib.Path(sglang_source.root)
    c = C.infer_contract(_op(index, "lora.kimi_k2_moe_fused_gate"), index, root, program=program)
    assert c.allowed_values == {"num_experts": [256, 384]}
    assert c.accepts("num_experts", 256) and not c.accepts("num_experts", 8)


@pytest.mark.wheel
def test_a_scalar_the_wrapper_reads_from_a_tensor_size_is_tied_to_it(index, program, sglang_source):
    """Found in the coverage sweep (2026-11-29): store_cache's wrapper passes `size_limit =
    k_cache.shape[0]` when the caller gives 0; the contract took the default 0 and the
    kernel's `assert(index < size_limit)` fired on the GPU. The cache's open row count
    is now the symbol `size_limit`, which the harness passes for the scalar."""
    root = pathlib.Path(sglang_source.root)
    c = C.infer_contract(_op(index, "kvcache.store_cache"), index, root, program=program)
    t = _tensors(c)
    assert t["k_cache"].shape == ["size_limit", "k_element_size"] and "size_limit" in c.symbols
    scalars = {a.scalar.name: a.scalar.value for a in c.args if a.scalar is not None}
    assert scalars == {"size_limit": None, "reserved_skip_index": 0}
    tied = C._tie_sized_scalars(
        [
            ArgSpec(kind="tensor", tensor=TensorSpec(name="x", shape=["T", "D"], dtype="T", role="input")),
            ArgSpec(kind="scalar", scalar=ScalarSpec(name="width", type="int")),
        ],
        {1: (0, -1)},
    )
    assert tied[1] == {"width": "(width == D)"}  # a named dimension: the scalar is settled equal to it


@pytest.mark.wheel
def test_a_scalar_the_wrapper_computes_from_its_defaults_takes_that_value(index, program, sglang_source):
    """Found in the coverage sweep (2026-11-29): fused_muse_spark_routing passes
    `router_output_multiplier if router_output_multiplier is not None else 1.0`; the
    contract left it open. A caller passing nothing gets 1.0, and so does the harness;
    a required argument (`route_scale`) stays open."""
    root = pathlib.Path(sglang_source.root)
    c = C.infer_contract(_op(index, "moe.fused_muse_spark_routing_jit"), index, root, program=program)
    scalars = {a.scalar.name: a.scalar.value for a in c.args if a.scalar is not None}
    assert scalars == {"router_output_multiplier": 1.0, "route_scale": None, "division_eps": 0.0}


def test_a_type_alias_extract_does_not_follow_is_the_element_type():
    """Found in the coverage sweep (2026-11-29): block_amax checks
    `.with_dtype<typename C::DType>()` (`using DType = InT` in a config struct); the
    contract's dtype was the name `DType`, which no harness can fill."""
    body = "TensorMatcher({N, D}).with_dtype<typename C::DType>().with_device(device).verify(scores);"
    matchers, _notes = launcher_facts._matchers(body, {"N": "N", "D": "D"}, {})
    assert matchers["scores"][0].dtype == "T"


# Every key a curated contract may have: Contract fields it replaces (C._CONTRACT_KEYS),
# the argument list, and what extract.tasks / extract.shapes read. A misspelt key would
# otherwise be ignored without a word.
_CURATED_KEYS = {"args", "dtypes", "shapes", "allowed_values", "same_as"}  # same_as: extract.contract.load_curated


@pytest.mark.parametrize("path", sorted(C.CURATED_DIR.glob("*.toml")), ids=lambda p: p.stem)
def test_every_curated_contract_is_well_formed(path):
    """Each file says where its facts come from (a comment block first), uses only known
    keys and dtypes, and its arguments are valid records (roles, structures, ranges)."""
    import tomllib

    from pipeline.records import DTYPES

    if path.name == "loader_values.toml":
        return
    text = path.read_text(encoding="utf-8")
    assert text.startswith("#"), f"{path.name}: start with the comment block that cites the evidence"
    unknown = set(tomllib.loads(text)) - C._CONTRACT_KEYS - _CURATED_KEYS
    data = C.load_curated(path.stem)  # a twin's file resolved through same_as
    assert data is not None
    assert not unknown, f"{path.name}: unknown keys {sorted(unknown)}"
    assert set(data.get("dtypes", [])) <= set(DTYPES), path.name
    for item in data.get("args", []):
        item = dict(item)
        kind = item.pop("kind")
        spec = TensorSpec.model_validate(item) if kind == "tensor" else ScalarSpec.model_validate(item)
        ArgSpec(kind=kind, **{kind: spec})
    for sym, spec in (data.get("allowed_values") or {}).items():
        assert isinstance(spec, (list, dict)), f"{path.name}: allowed_values.{sym}"
    # a PyTorch reference it names must exist (seven files named their op: every check failed on the H200)
    from optimize.harness import references

    assert data.get("reference") is None or data["reference"] in references.REFERENCES, path.name


@pytest.mark.wheel
def test_the_topk_gates_scratch_and_bias_are_sized_as_sglangs_wrappers_allocate_them(tmp_path):
    """The inferred contracts had 0-d (one-element) workspaces and biases: on the H200 the sigmoid
    baseline wrote past its workspace at 512 experts, and every softmax PDL member was incorrect."""
    from cli.main import main
    from contract.layout import load_task

    ops = ["moe.topk_softmax", "moe.moe_topk_softmax_out", "moe.topk_sigmoid", "moe.moe_topk_sigmoid_out"]
    assert main(["extract", "--no-compile", "--work-dir", str(tmp_path), "--ops", *ops]) == 0
    for op in ops:
        contract = load_task(tmp_path / "tasks" / op).contract
        tensors = {a.tensor.name: a.tensor for a in contract.args if a.tensor is not None}
        scratch = tensors.get("workspace") or tensors["softmax_workspace"]
        # scratch, not inout: a fused path that never writes it must not fail on it (H100, 2026-12-05)
        assert (scratch.shape, scratch.dtype, scratch.role) == (["num_tokens * num_experts"], "float32", "scratch"), op
        bias = tensors["correction_bias"]
        assert (bias.shape, bias.dtype, bias.role) == (["num_experts"], "float32", "input"), op
        assert contract.origin == "curated"


def test_a_curated_twin_takes_its_ops_contract_and_a_missing_or_chained_twin_is_named(tmp_path, monkeypatch):
    from extract import contract as contract_mod
    from pipeline.errors import ConfigError

    monkeypatch.setattr(contract_mod, "CURATED_DIR", tmp_path)
    (tmp_path / "demo.a.toml").write_text('entry = "run"\nchecks = ["n > 0"]\n')
    (tmp_path / "demo.b.toml").write_text('same_as = "demo.a"\nchecks = ["n > 1"]\n')
    (tmp_path / "demo.c.toml").write_text('same_as = "demo.nope"\n')
    (tmp_path / "demo.d.toml").write_text('same_as = "demo.b"\n')
    assert contract_mod.load_curated("demo.b") == {"entry": "run", "checks": ["n > 1"]}
    for op in ("demo.c", "demo.d"):
        with pytest.raises(ConfigError, match="has no curated contract of its own"):
            contract_mod.load_curated(op)
