"""optimize.transforms' CUDA members on SGLang's real regions: exact bytes, refusals, targets, and one nvcc build.

Every expected text is built here with plain string operations on the original
region, independently of tree-sitter, and compared whole: a transform that
changes one byte more than intended fails.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest

from optimize.cuda_spans import definition_spans, region_texts
from optimize.features import features_of_regions
from optimize.transforms import registry as T
from optimize.transforms.edits import Edit, NotApplicable, TransformError, apply_edits
from optimize.transforms.fast_math import fast_math
from optimize.transforms.knobs import set_launch_bounds, tune_constant
from optimize.transforms.pdl import enable_pdl, pdl_early_trigger, pdl_late_wait
from optimize.transforms.streaming import streaming_hints
from optimize.transforms.unroll import add_pragma_unroll

ELEMENTWISE = "kernels/jit/csrc/elementwise"

#: The in-kernel test of a grid of at most 4 blocks per SM (optimize.transforms.pdl._grid_guard).
GUARD_4 = (
    "if (gridDim.x * gridDim.y * gridDim.z <= 4u * [] { unsigned ids; "
    'asm("mov.u32 %0, %%nsmid;" : "=r"(ids)); return ids + 1u; }()) '
)


def load(root: str, name: str) -> tuple[str, bytes, list, dict[str, str]]:
    path = f"{ELEMENTWISE}/{name}"
    data = (pathlib.Path(root) / path).read_bytes()
    spans = definition_spans(path, data)
    return path, data, spans, region_texts({path: data}, spans)


def spliced(data: bytes, spans: list, regions: dict[str, str]) -> bytes:
    """The file with every span's region text put back."""
    out = bytearray(data)
    for span in sorted(spans, key=lambda s: -s.start_byte):
        out[span.start_byte : span.end_byte] = regions[span.name].encode()
    return bytes(out)


def compile_for_sm90a(unit: pathlib.Path, root: pathlib.Path, tmp_path: pathlib.Path, *extra: str):
    """``nvcc -c`` of ``unit`` as SGLang's JIT builds for Hopper (its include dirs and flags); the
    completed process, whose stderr carries ptxas' report with ``-Xptxas -v``."""
    import tvm_ffi.libinfo

    cmd = [
        "nvcc",
        "-std=c++20",
        "-O3",
        "--expt-relaxed-constexpr",
        "-DSGL_CUDA_ARCH=900",
        "-gencode=arch=compute_90a,code=sm_90a",
        f"-I{tvm_ffi.libinfo.find_include_path()}",
        f"-I{root / 'kernels/jit/include'}",
        *extra,
        "-c",
        str(unit),
        "-o",
        str(tmp_path / "check.o"),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def act(sglang_source):
    return load(sglang_source.root, "activation.cuh")[3]


@pytest.fixture(scope="module")
def rms(sglang_source):
    return load(sglang_source.root, "rmsnorm.cuh")[3]


@pytest.fixture(scope="module")
def fused(sglang_source):
    return load(sglang_source.root, "fused_add_rmsnorm.cuh")[3]


def once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"expected exactly one {old!r}"
    return text.replace(old, new)


def only_changed(before: dict[str, str], after: dict[str, str], expected: dict[str, str]) -> None:
    assert set(after) == set(before)
    for name in before:
        assert after[name] == expected.get(name, before[name]), name


# --------------------------------------------------------------------------- activation.cuh


@pytest.mark.wheel
def test_tune_constant_changes_only_the_digits(act):
    out = tune_constant(act, name="kBlockSize", value=512)
    only_changed(
        act, out, {"ActivationKernel": once(act["ActivationKernel"], "kBlockSize = 256u;", "kBlockSize = 512u;")}
    )
    with pytest.raises(NotApplicable, match="already 256"):
        tune_constant(act, name="kBlockSize", value=256)
    with pytest.raises(NotApplicable, match="no compile-time constant 'kVecSize'"):
        tune_constant(act, name="kVecSize", value=4)  # kMaxVecBytes / sizeof(T): not a literal
    with pytest.raises(NotApplicable, match="in 'Other'"):
        tune_constant(act, name="kBlockSize", value=512, owner="Other")
    with pytest.raises(TransformError, match="positive integer"):
        tune_constant(act, name="kBlockSize", value=0)


@pytest.mark.wheel
def test_set_launch_bounds_inserts_after_global(act):
    out = set_launch_bounds(act, kernel="act_and_mul_kernel", max_threads=256)
    old = "__global__ void act_and_mul_kernel("
    only_changed(
        act,
        out,
        {
            "act_and_mul_kernel": once(
                act["act_and_mul_kernel"], old, "__global__ __launch_bounds__(256) void act_and_mul_kernel("
            )
        },
    )
    out2 = set_launch_bounds(out, kernel="act_and_mul_kernel", min_blocks=2)  # keeps the 256
    only_changed(
        out,
        out2,
        {"act_and_mul_kernel": once(out["act_and_mul_kernel"], "__launch_bounds__(256)", "__launch_bounds__(256, 2)")},
    )
    with pytest.raises(NotApplicable, match="already has"):
        set_launch_bounds(out2, kernel="act_and_mul_kernel", max_threads=256, min_blocks=2)
    with pytest.raises(NotApplicable, match="no max_threads"):
        set_launch_bounds(act, kernel="act_kernel")
    with pytest.raises(NotApplicable, match="no __global__ kernel named 'nope'"):
        set_launch_bounds(act, kernel="nope", max_threads=128)
    for bad in (0, 2048, True):
        with pytest.raises(TransformError, match="max_threads"):
            set_launch_bounds(act, kernel="act_kernel", max_threads=bad)
    with pytest.raises(TransformError, match="not a plain constant expression"):
        set_launch_bounds(act, kernel="act_kernel", max_threads="256; evil()")


@pytest.mark.wheel
def test_fast_math_swaps_expf_and_rewrites_the_division_around_its_operands(act):
    out = fast_math(act, ops=["expf", "fdividef"])
    expected = once(
        act["apply_activation_f32"],
        "return x_f32 / (1.0f + expf(-x_f32));",
        "return __fdividef(x_f32, (1.0f + __expf(-x_f32)));",
    )
    only_changed(act, out, {"apply_activation_f32": expected})
    only_expf = fast_math(act, ops=["expf"])
    only_changed(
        act, only_expf, {"apply_activation_f32": once(act["apply_activation_f32"], "expf(-x_f32)", "__expf(-x_f32)")}
    )
    # tanhf only when asked; erff has no intrinsic and stays; no sine anywhere
    assert "erff(" in out["apply_activation_f32"] and "tanhf(" in out["apply_activation_f32"]
    text = act["apply_activation_f32"]
    only_changed(act, fast_math(act, ops=["tanhf"]), {"apply_activation_f32": once(text, "tanhf(", "__tanhf(")})
    with pytest.raises(NotApplicable, match="no sinf site"):
        fast_math(act, ops=["sinf"])
    with pytest.raises(TransformError, match="unknown ops"):
        fast_math(act, ops=["erff"])


@pytest.mark.wheel
def test_pdl_early_trigger_moves_the_trigger_line_after_the_wait(act):
    out = pdl_early_trigger(act, kernel="act_and_mul_kernel")
    text = act["act_and_mul_kernel"]
    wait, trigger = "  PDLWaitPrimary<kUsePDL>();\n", "  PDLTriggerSecondary<kUsePDL>();\n"
    expected = once(once(text, trigger, ""), wait, wait + trigger)
    only_changed(act, out, {"act_and_mul_kernel": expected})
    both = pdl_early_trigger(act)
    assert both["act_kernel"] != act["act_kernel"] and sorted(both["act_kernel"]) == sorted(act["act_kernel"])
    with pytest.raises(NotApplicable):
        pdl_early_trigger(out, kernel="act_and_mul_kernel")  # already early


@pytest.mark.wheel
def test_pdl_early_trigger_below_a_grid_size_keeps_the_trailing_trigger(act):
    """blocks_per_sm: a guarded copy of the trigger after the wait; the baseline's trailing trigger stays.
    The guard counts the device's SMs from inside the kernel: no card's block count is written in."""
    out = pdl_early_trigger(act, kernel="act_and_mul_kernel", blocks_per_sm=4)
    text = act["act_and_mul_kernel"]
    wait = "  PDLWaitPrimary<kUsePDL>();\n"
    guarded = f"  {GUARD_4}PDLTriggerSecondary<kUsePDL>();\n"
    only_changed(act, out, {"act_and_mul_kernel": once(text, wait, wait + guarded)})
    assert out["act_and_mul_kernel"].rstrip().endswith("PDLTriggerSecondary<kUsePDL>();\n}".rstrip())
    assert T.apply("pdl_early_trigger", act, {"blocks_per_sm": 0}) == pdl_early_trigger(act), "0: always early"
    grid = {"blocks_per_sm": [1, 4, 16]}
    assert T.expand_targets("pdl_early_trigger", features_of_regions(act), grid) == [
        {"blocks_per_sm": 1},
        {"blocks_per_sm": 4},
        {"blocks_per_sm": 16},
    ]


@pytest.mark.wheel
def test_activation_refusals(act):
    with pytest.raises(NotApplicable, match="template flag"):
        enable_pdl(act)  # .enable_pdl(kUsePDL): SGLang's flag, on for Hopper
    with pytest.raises(NotApplicable, match="compile-time for-loop"):
        add_pragma_unroll(act)  # both constant loops already carry #pragma unroll


@pytest.mark.wheel
def test_streaming_hints_rename_only_the_typed_accesses_and_define_the_helpers_once(act, fused):
    from optimize.transforms.streaming import HELPERS

    out = streaming_hints(act, what="loads")
    first = "act_and_mul_kernel"
    assert out[first].startswith(HELPERS.decode()), "the helpers go before the first edited kernel, once"
    for name in act:
        body = out[name].removeprefix(HELPERS.decode()) if name == first else out[name]
        assert body == act[name].replace("device::load_as<", "load_as_streaming<"), name
    assert sum(o.count("#define SGL_STREAMING_ACCESS_DEFINED") for o in out.values()) == 1
    both = streaming_hints(act)
    assert "store_as_streaming<vec_t>(params.out, out, vec_id);" in both["act_kernel"]
    assert "device::store_as" not in "".join(both.values())
    with pytest.raises(NotApplicable, match="no device::load_as/store_as call"):
        streaming_hints(fused)  # its accesses go through other helpers
    with pytest.raises(TransformError, match="what="):
        streaming_hints(act, what="weights")
    feats = features_of_regions(act)
    assert feats.static.typed_accesses == 6 and not feats.static.cache_hints
    assert features_of_regions(both).static.cache_hints, "once hinted, the skill no longer applies"


# --------------------------------------------------------------------------- rmsnorm.cuh


@pytest.mark.wheel
def test_rmsnorm_min_blocks_keeps_the_existing_bound_and_unroll_marks_grid_stride_loops(rms):
    out = set_launch_bounds(rms, kernel="rmsnorm_cta_double", min_blocks=4)
    only_changed(
        rms,
        out,
        {
            "rmsnorm_cta_double": once(
                rms["rmsnorm_cta_double"], "__launch_bounds__(kDim / 16)", "__launch_bounds__(kDim / 16, 4)"
            )
        },
    )
    loop = "  for (uint32_t i = blockIdx.x; i < num_tokens; i += gridDim.x) {"
    out = add_pragma_unroll(rms, factor=2, runtime_loops=True)
    only_changed(
        rms,
        out,
        {
            "rmsnorm_cta": once(rms["rmsnorm_cta"], loop, "#pragma unroll 2\n" + loop),
            "rmsnorm_warp": once(rms["rmsnorm_warp"], loop, "#pragma unroll 2\n" + loop),
        },
    )
    with pytest.raises(TransformError, match="factor >= 2"):
        add_pragma_unroll(rms, runtime_loops=True)


@pytest.mark.wheel
def test_rmsnorm_fdividef_leaves_math_rsqrt_alone(rms):
    out = fast_math(rms, ops=["fdividef"])
    for name in ("rmsnorm_cta_double", "rmsnorm_cta_wide"):
        expected = rms[name].replace(
            "math::rsqrt(sum_of_squares / kDim + eps)", "math::rsqrt(__fdividef(sum_of_squares, kDim) + eps)"
        )
        assert expected.count("__fdividef") == 2
        assert out[name] == expected
    assert out["rmsnorm_cta"] == rms["rmsnorm_cta"] and out["RMSNormKernel"] == rms["RMSNormKernel"]


# --------------------------------------------------------------------------- fused_add_rmsnorm.cuh


@pytest.mark.wheel
def test_enable_pdl_flips_the_literal_and_guards_the_kernel(fused):
    out = enable_pdl(fused)
    kernel = fused["fused_add_rmsnorm_reg_kernel"]
    head = "float eps) {\n"
    tail = "    p_out[threadIdx.x] = v_out;\n  }\n}"
    expected_kernel = once(
        once(kernel, head, head + "  device::PDLWaitPrimary<true>();\n"),
        tail,
        "    p_out[threadIdx.x] = v_out;\n  }\n  device::PDLTriggerSecondary<true>();\n}",
    )
    expected_launcher = once(fused["FusedAddRMSNormKernel"], ".enable_pdl(false)(", ".enable_pdl(true)(")
    only_changed(
        fused, out, {"fused_add_rmsnorm_reg_kernel": expected_kernel, "FusedAddRMSNormKernel": expected_launcher}
    )
    after = features_of_regions(out).static
    assert after.pdl_launch and after.pdl_wait and after.pdl_trigger and not after.pdl_off
    with pytest.raises(NotApplicable):
        enable_pdl(out)


@pytest.mark.wheel
def test_enable_pdl_below_a_grid_size_decides_at_run_time_from_the_launch_grid(fused):
    """The bucketed form (pdl_small_grids): the literal becomes a test of the launch's own grid,
    the kernel gets the same wait and trigger as with PDL always on."""
    out = enable_pdl(fused, blocks_per_sm=4)
    always = enable_pdl(fused)
    grid = "static_cast<uint>(N.unwrap())"
    assert fused["FusedAddRMSNormKernel"].count(f"LaunchKernel({grid}, threads") == 1
    switch = (
        f"[&] {{ const dim3 pdl_grid = {grid}; static const unsigned long long sm_count = [] {{ int device = 0, "
        "count = 0; cudaGetDevice(&device); cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device); "
        "return static_cast<unsigned long long>(count); }(); return static_cast<unsigned long long>(pdl_grid.x) * "
        "pdl_grid.y * pdl_grid.z <= 4ull * sm_count; }()"
    )
    expected_launcher = once(fused["FusedAddRMSNormKernel"], ".enable_pdl(false)(", f".enable_pdl({switch})(")
    only_changed(
        fused,
        out,
        {
            "fused_add_rmsnorm_reg_kernel": always["fused_add_rmsnorm_reg_kernel"],
            "FusedAddRMSNormKernel": expected_launcher,
        },
    )
    assert T.apply("enable_pdl", fused, {"blocks_per_sm": 0}) == always, "0 blocks: PDL for every grid"
    assert "528" not in out["FusedAddRMSNormKernel"] and "132" not in out["FusedAddRMSNormKernel"]


def test_enable_pdl_below_a_grid_size_refuses_a_grid_with_a_side_effect():
    kern = "__global__ void k(int n) { if (n) {} }"
    bumped = {"L": "void run(int n) { LaunchKernel(n++, 128, dev)(k, n); }", "k": kern}
    with pytest.raises(NotApplicable, match="side-effect-free"):
        enable_pdl(bumped, blocks_per_sm=1)
    plain = {"L": "void run(int n) { LaunchKernel(n == 1 ? 2 : n, 128, dev)(k, n); }", "k": kern}
    assert "const dim3 pdl_grid = n == 1 ? 2 : n;" in enable_pdl(plain, blocks_per_sm=1)["L"]


def test_enable_pdl_in_kernel_runs_the_wait_and_trigger_only_in_the_grids_that_get_pdl():
    """in_kernel: the kernel's statements are guarded by the launch's own test, seen from inside; a
    kernel also launched another way (here with PDL already on, for every grid) keeps the plain wait."""
    kern = "__global__ void k(int n) {\n  if (n) {}\n}"
    one = {"L": "void run(int n) {\n  LaunchKernel(n, 128, dev)(k, n);\n}", "k": kern}
    guard = GUARD_4
    out = enable_pdl(one, blocks_per_sm=4, in_kernel=True)
    assert out["k"] == (
        "__global__ void k(int n) {\n"
        f"  {guard}device::PDLWaitPrimary<true>();\n"
        "  if (n) {}\n"
        f"  {guard}device::PDLTriggerSecondary<true>();\n"
        "}"
    )
    assert out["L"] == enable_pdl(one, blocks_per_sm=4)["L"], "the launch's switch is the same"
    two = {
        "L": "void run(int n) {\n  LaunchKernel(n, 128, dev)(k, n);\n  LaunchKernel(n, 128, dev).enable_pdl(true)(k, n);\n}",
        "k": kern,
    }
    with pytest.raises(NotApplicable, match="also launched another way"):
        enable_pdl(two, blocks_per_sm=4, in_kernel=True)
    assert guard not in enable_pdl(two, blocks_per_sm=4)["k"]
    with pytest.raises(NotApplicable, match="needs blocks_per_sm"):
        enable_pdl(one, in_kernel=True)


@pytest.mark.wheel
def test_fused_unroll_and_exact_reciprocal(fused):
    kernel = fused["fused_add_rmsnorm_reg_kernel"]
    out = add_pragma_unroll(fused)
    loop = "    for (int i = 0; i < inner_loop; i++) {"
    assert kernel.count(loop) == 2
    only_changed(fused, out, {"fused_add_rmsnorm_reg_kernel": kernel.replace(loop, "#pragma unroll\n" + loop)})
    out = fast_math(fused, ops=["rcp"])
    old = "(1.0f / static_cast<float>(vec_hidden_size * (VEC_SIZE_IN_BYTE / sizeof(T))))"
    new = "(__frcp_rn(static_cast<float>(vec_hidden_size * (VEC_SIZE_IN_BYTE / sizeof(T)))))"
    only_changed(fused, out, {"fused_add_rmsnorm_reg_kernel": once(kernel, old, new)})
    with pytest.raises(NotApplicable):
        pdl_early_trigger(fused)
    out = set_launch_bounds(fused, kernel="fused_add_rmsnorm_reg_kernel", max_threads=1024)
    assert out["fused_add_rmsnorm_reg_kernel"] == kernel.replace(
        "__global__ void", "__global__ __launch_bounds__(1024) void", 1
    )


# --------------------------------------------------------------------------- snippets, machinery, registry


def test_fast_math_nesting_constant_contexts_doubles_and_host_code():
    src = """__device__ float f(float a, float b, float c) {
  constexpr float kThird = 1.0f / 3.0f;
  double d = a / 2.0;
  return a / (b / c) + 1.0f / sqrtf(c) + kThird + d;
}
float host_side(float a, float b) { return expf(a) / b; }
"""
    out = fast_math({"f": src})
    expected = src.replace("a / (b / c)", "__fdividef(a, (__fdividef(b, c)))").replace("1.0f / sqrtf(c)", "rsqrtf(c)")
    assert out["f"] == expected


def test_enable_pdl_adds_the_attribute_to_a_bare_launch_and_refuses_chevrons():
    src = """struct L {
  static void run(int n) {
    LaunchKernel(n, 128, dev)(k, n);
    LaunchKernel(n, 128, dev).config({.use_pdl = false})(k, n);
  }
};"""
    kern = "__global__ void k(int n) { if (n) {} }"
    out = enable_pdl({"L": src, "k": kern})
    assert out["L"] == src.replace(
        "LaunchKernel(n, 128, dev)(k", "LaunchKernel(n, 128, dev).enable_pdl(true)(k"
    ).replace(".use_pdl = false", ".use_pdl = true")
    assert (
        out["k"]
        == "__global__ void k(int n) {\n  device::PDLWaitPrimary<true>(); if (n) {}  device::PDLTriggerSecondary<true>(); }"
    )
    chevron = {"L": "void run(int n) { k<<<n, 128>>>(n); }", "k": kern}
    with pytest.raises(NotApplicable, match="<<<>>>"):
        enable_pdl(chevron)


def test_apply_edits_refuses_overlaps_and_broken_parses():
    regions = {"a": "int f() { return 1; }\n"}
    with pytest.raises(TransformError, match="overlapping"):
        apply_edits("t", regions, [Edit("a", 0, 5, b"x"), Edit("a", 3, 8, b"y")])
    with pytest.raises(TransformError, match="does not parse"):
        apply_edits("t", regions, [Edit("a", 8, 9, b"")])  # drop the opening brace
    with pytest.raises(NotApplicable, match="change nothing"):
        apply_edits("t", regions, [Edit("a", 0, 3, b"int")])
    out = T.apply_edits("t", regions, [Edit("a", 17, 18, b"2")])
    assert out == {"a": "int f() { return 2; }\n"}


def test_apply_validates_names_and_parameters():
    with pytest.raises(TransformError, match="unknown transform 'nope'"):
        T.apply("nope", {}, {})
    with pytest.raises(TransformError, match=r"unknown parameters \['width'\]"):
        T.apply(
            "tune_constant", {"a": "constexpr int kBlockSize = 128;"}, {"name": "kBlockSize", "value": 256, "width": 4}
        )
    out = T.apply(
        "tune_constant",
        {"a": "constexpr int kBlockSize = 128;"},
        {"name": "kBlockSize", "value": 256, "role": "block_size"},
    )
    assert out == {"a": "constexpr int kBlockSize = 256;"}


@pytest.mark.wheel
def test_targets_bind_constants_and_kernels_and_respect_launch_bounds(act, fused):
    feats = features_of_regions(act)
    targets = T.expand_targets("tune_constant", feats, {"role": ["block_size"], "value": [128, 256, 2000]})
    assert targets == [
        {"name": "kBlockSize", "owner": "ActivationKernel", "value": 128}
    ]  # 256 is current, 2000 invalid
    bounds = T.expand_targets("set_launch_bounds", feats, {"min_blocks": [0, 16]})
    assert bounds == [
        {"kernel": "act_and_mul_kernel", "max_threads": 256, "min_blocks": 0},
        {"kernel": "act_kernel", "max_threads": 256, "min_blocks": 0},
    ]  # 256 x 16 blocks cannot fit an SM
    bounded = set_launch_bounds(act, kernel="act_and_mul_kernel", max_threads=256)
    grown = T.expand_targets(
        "tune_constant", features_of_regions(bounded), {"role": ["block_size"], "value": [128, 512]}
    )
    assert grown == [{"name": "kBlockSize", "owner": "ActivationKernel", "value": 128}]  # 512 would exceed the bound
    assert T.expand_targets("enable_pdl", feats, {}) == []
    fused_feats = features_of_regions(fused)
    assert T.expand_targets("enable_pdl", fused_feats, {}) == [{}]
    assert T.expand_targets("set_launch_bounds", fused_feats, {"min_blocks": [0]}) == [
        {"kernel": "fused_add_rmsnorm_reg_kernel", "max_threads": 1024, "min_blocks": 0}
    ]  # run-time block size
    assert T.expand_targets("fast_math", fused_feats, {"ops": [["expf"], ["rcp", "rsqrt"]]}) == [{"ops": ["rcp"]}]
    for params in T.expand_targets("set_launch_bounds", fused_feats, {"min_blocks": [0, 2]}):
        T.apply("set_launch_bounds", fused, params)  # every target applies


# --------------------------------------------------------------------------- nvcc


@pytest.mark.nvcc
@pytest.mark.wheel
def test_transformed_kernels_compile_for_sm90a(tmp_path, sglang_source):
    """activation (fast math, tanhf included, + launch bounds + early trigger + block 128 + streaming hints) and
    fused_add_rmsnorm (PDL below 528 blocks + unroll + __frcp_rn + launch bounds) patched into their files,
    instantiated, built with -c (no --use_fast_math); the hinted accesses are evict-first (.cs) in the PTX and
    __tanhf is the one-instruction tanh.approx.f32, which the precise tanhf never emits."""
    pytest.importorskip("tvm_ffi.libinfo")
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    root = pathlib.Path(sglang_source.root)
    patched = {}
    for name, steps in {
        "activation.cuh": [
            ("fast_math", {"ops": ["expf", "tanhf", "fdividef"]}),
            ("set_launch_bounds", {"kernel": "act_and_mul_kernel", "max_threads": 128, "min_blocks": 2}),
            ("tune_constant", {"name": "kBlockSize", "value": 128}),
            ("pdl_early_trigger", {"blocks_per_sm": 1}),  # the grid-guarded trigger compiles in the kernel
            ("streaming_hints", {"what": "both"}),
        ],
        "fused_add_rmsnorm.cuh": [
            ("enable_pdl", {"blocks_per_sm": 4, "in_kernel": True}),  # the switch, in the launcher and the kernel
            ("add_pragma_unroll", {}),
            ("fast_math", {"ops": ["rcp"]}),
            ("set_launch_bounds", {"kernel": "fused_add_rmsnorm_reg_kernel", "max_threads": 1024}),
        ],
    }.items():
        path, data, spans, regions = load(str(root), name)
        for transform, params in steps:
            regions = T.apply(transform, regions, params)
        patched[name] = tmp_path / name
        patched[name].write_bytes(spliced(data, spans, regions))
    unit = tmp_path / "check.cu"
    unit.write_text(
        f'#include "{patched["activation.cuh"]}"\n#include "{patched["fused_add_rmsnorm.cuh"]}"\n'
        "template struct sglang::ActivationKernel<sglang::bf16_t, true>;\n"
        "template struct sglang::FusedAddRMSNormKernel<false, sglang::bf16_t>;\n"
    )
    done = compile_for_sm90a(unit, root, tmp_path, "-Xptxas", "-v", "-keep", f"-keep-dir={tmp_path}")  # PTX kept
    assert done.returncode == 0, done.stderr[-4000:]
    # the kernels really were generated (ptxas reports them), with the fused one at 1024 threads max
    assert "act_and_mul_kernel" in done.stderr and "fused_add_rmsnorm_reg_kernel" in done.stderr
    ptx = "".join(p.read_text(errors="replace") for p in tmp_path.glob("*.ptx"))
    assert "ld.global.cs" in ptx and "st.global.cs" in ptx, "streaming_hints' accesses are evict-first (.cs) in the PTX"
    assert "tanh.approx.f32" in ptx, "fast_math's tanhf -> __tanhf is the hardware tanh"


@pytest.mark.wheel
def test_pdl_late_wait_moves_the_wait_past_memory_free_setup_only(fused):
    """After PDL is on, the wait goes down past the constants, aliases, shared declaration and index math
    of fused_add_rmsnorm's kernel, and stops at the first statement that may read memory."""
    on = enable_pdl(fused)
    out = pdl_late_wait(on)
    kernel = out["fused_add_rmsnorm_reg_kernel"]
    lines = [line.strip() for line in kernel.splitlines()]
    wait = lines.index("device::PDLWaitPrimary<true>();")
    before = lines[3:wait]
    assert "auto token_id = blockIdx.x;" in before and any(
        line.startswith("constexpr int inner_loop") for line in before
    )
    assert any(line.startswith("float2 acc_square = make_float2(") for line in before)
    assert lines[wait + 1] == "if (threadIdx.x < vec_hidden_size) {", "it stops at the branch whose body loads"
    assert sorted(kernel.splitlines()) == sorted(on["fused_add_rmsnorm_reg_kernel"].splitlines()), "only the line moved"
    only_changed(on, out, {"fused_add_rmsnorm_reg_kernel": kernel})
    with pytest.raises(NotApplicable):
        pdl_late_wait(fused)  # PDL off: no wait to move
    with pytest.raises(NotApplicable):
        pdl_late_wait(out)  # already as late as the data allows


# --------------------------------------------------------------------------- upstream form


@pytest.mark.wheel
def test_no_transform_writes_a_tool_name_into_sglangs_sources(act, rms, fused, sglang_source):
    """What goes upstream carries SGLang's names, not ours (issue 44): every mechanical CUDA skill's every
    target on four of SGLang's own files adds no 'kernelsmith', ks_ or KS_ to the text."""
    import re

    from optimize.skills import load_skills

    rope = load(sglang_source.root, "rope.cuh")[3]
    branded = re.compile(r"kernelsmith|\bks_|\bKS_", re.IGNORECASE)
    applied = 0
    for skill in load_skills():
        if skill.transform is None or skill.transform.startswith("triton_"):
            continue
        for regions in (act, rms, fused, rope):
            feats = features_of_regions(regions)
            for params in T.expand_targets(skill.transform, feats, skill.grid):
                try:
                    out = T.apply(skill.transform, regions, params)
                except (NotApplicable, TransformError):
                    continue
                applied += 1
                for name, text in out.items():
                    before = len(branded.findall(regions.get(name, "")))
                    assert len(branded.findall(text)) == before, (skill.id, params, name, branded.findall(text))
    assert applied > 20, "the test must see the transforms at work"
