"""optimize.features on SGLang's real kernels (activation, rmsnorm, fused_add_rmsnorm) and on small snippets.

The expectations below were read off the sources by hand (line numbers of
sglang 0.5.23's kernels/jit/csrc/elementwise/*.cuh): a wrong reading of any
fact the planner uses fails here.
"""

from __future__ import annotations

import pathlib

import pytest

from optimize.cuda_spans import definition_spans, region_texts
from optimize.features import (
    FEATURE_NAMES,
    Features,
    ProfileFacts,
    StaticFeatures,
    features,
    features_of_regions,
)
from pipeline.records import BuildReport, KernelResources
from pipeline.run_records import Evaluation, Outcome, ShapeTiming

ELEMENTWISE = "kernels/jit/csrc/elementwise"


def real_regions(root: str, name: str) -> tuple[str, bytes, dict[str, str]]:
    path = f"{ELEMENTWISE}/{name}"
    data = (pathlib.Path(root) / path).read_bytes()
    return path, data, region_texts({path: data}, definition_spans(path, data))


@pytest.fixture(scope="module")
def real(sglang_source):
    out = {}
    for name in ("activation.cuh", "rmsnorm.cuh", "fused_add_rmsnorm.cuh"):
        _path, _data, regions = real_regions(sglang_source.root, name)
        out[name] = features_of_regions(regions)
    return out


# --------------------------------------------------------------------------- real kernels


@pytest.mark.wheel
def test_definition_spans_find_kernels_device_functions_and_launchers(sglang_source):
    path, data, regions = real_regions(sglang_source.root, "activation.cuh")
    spans = definition_spans(path, data)
    assert [(s.name, s.kind) for s in spans] == [
        ("apply_activation_f32", "device_function"),
        ("act_and_mul_kernel", "kernel"),
        ("act_kernel", "kernel"),
        ("ActivationKernel", "launcher"),
    ]
    # spans include the template header and end at the closing brace (struct: before the ';')
    assert regions["act_and_mul_kernel"].startswith("template <\n    typename T,")
    assert regions["act_and_mul_kernel"].rstrip().endswith("PDLTriggerSecondary<kUsePDL>();\n}")
    assert regions["ActivationKernel"].startswith("template <typename T, bool kUsePDL>\nstruct ActivationKernel {")


@pytest.mark.wheel
def test_activation_features(real):
    f = real["activation.cuh"]
    k = f.kernel("act_and_mul_kernel")
    assert k is not None and k.launched
    assert k.vector_bytes == 16  # AlignedVector<T, kMaxVecBytes / sizeof(T)>, kMaxVecBytes = 16 on sm_90
    assert k.block_sizes == [256] and k.block_size == 256  # LaunchKernel(num_blocks, kBlockSize = 256u, ...)
    assert k.launch_bounds is None
    assert k.pdl_wait and k.pdl_trigger and k.pdl_trigger_at_end
    assert k.loops == 1 and k.constant_loops == 1 and k.loops_missing_unroll == 0  # `#pragma unroll` over kVecSize
    assert k.int_divmod_runtime == 4  # tid / num_vecs, tid % num_vecs, two token_id / expert_step
    assert "kUsePDL" in k.template_params
    s = f.static
    assert (s.load_bytes, s.max_load_bytes, s.vector_loads) == (16, 16, True)
    assert s.block_size == 256 and not s.block_size_runtime and s.tunable_block_size
    assert s.uses_expf and s.fast_math_swappable == 2 and s.slow_math_calls == 3  # expf, tanhf swappable; erff not
    assert s.float_divisions == 1 and f.math_sites == {"expf": 1, "tanhf": 1, "fdividef": 1}  # SiLU, GELU-tanh
    assert s.pdl_flag and s.pdl_launch and not s.pdl_off  # .enable_pdl(kUsePDL)
    assert s.pdl_wait and s.pdl_trigger and s.pdl_trigger_at_end
    assert s.kernels_without_launch_bounds == 2 and not s.launch_bounds
    assert s.grid_kind == "per_item" and s.per_item_grid and not s.persistent_grid  # div_ceil(items, kBlockSize)
    assert s.launch_sites == 5 and s.launches_per_entry == 1 and s.num_launchers == 1
    assert s.elementwise and not s.reduction and not s.shared_memory
    assert not s.packed_casts and not s.cache_hints and not s.tma and not s.tensor_core_ops
    assert [(c.name, c.value, c.role, c.owner) for c in f.constants] == [
        ("kBlockSize", 256, "block_size", "ActivationKernel")
    ]
    launches = {tuple(l.kernels) for l in f.launches}
    assert launches == {("act_and_mul_kernel",), ("act_kernel",)}
    assert all(l.pdl == "flag" and l.block_size == 256 for l in f.launches)


@pytest.mark.wheel
def test_rmsnorm_features(real):
    f = real["rmsnorm.cuh"]
    cta, double, wide, warp = (
        f.kernel(n) for n in ("rmsnorm_cta", "rmsnorm_cta_double", "rmsnorm_cta_wide", "rmsnorm_warp")
    )
    # rmsnorm_cta_wide is launched only under SGL_ARCH_BLACKWELL_OR_GREATER, false on sm_90
    assert not wide.launched and wide.vector_bytes == 32
    assert cta.launched and double.launched and warp.launched
    assert double.launch_bounds == "kDim / 16" and double.vector_bytes == 16  # AlignedVector<packed_t<Float>, 4>
    assert double.smem_bytes == 128 and double.syncthreads == 2 and double.warp_reduce and double.cta_reduce
    assert warp.block_size == 32 and warp.grid_stride_loop and warp.warp_reduce and not warp.cta_reduce
    # weight_ptr is loaded every row although it does not depend on the row
    assert cta.loop_invariant_loads == 1 and warp.loop_invariant_loads == 1
    assert cta.cta_reduce and cta.smem_bytes is None  # norm::kSmemBufferSize lives outside the region
    s = f.static
    assert (s.load_bytes, s.max_load_bytes) == (16, 16)  # the Blackwell-only 32-byte kernel does not count
    assert s.grid_kind == "mixed" and s.persistent_grid and s.per_row_grid and s.warp_per_row
    assert s.block_size is None and s.block_size_min == 32 and not s.block_size_runtime
    assert s.runtime_loops == 2 and s.grid_stride_loop and s.loop_invariant_loads == 2
    assert s.reduction and s.cta_reduce and s.warp_reduce and s.shared_memory and not s.elementwise
    assert s.pdl_flag and s.pdl_wait and s.pdl_trigger_at_end
    assert s.kernels_without_launch_bounds == 2  # rmsnorm_cta and rmsnorm_warp
    assert f.math_sites == {"fdividef": 4} and s.fast_intrinsics == 4  # sum / kDim; math::rsqrt


@pytest.mark.wheel
def test_fused_add_rmsnorm_features(real):
    f = real["fused_add_rmsnorm.cuh"]
    k = f.kernel("fused_add_rmsnorm_reg_kernel")
    # VecTypeTrait<T, VEC_SIZE_IN_BYTE>, VEC_SIZE_IN_BYTE bound to device::kMaxVecBytes at the launch
    assert k.vector_bytes == 16
    assert k.block_size_runtime and k.block_size is None  # threads = (vec_hidden_size + 31) / 32 * 32
    assert not k.pdl_wait and not k.pdl_trigger
    assert k.loops_missing_unroll == 2 and k.register_arrays == 1  # float2 inp_res_cache[inner_loop]
    assert k.smem_bytes == 128 and k.syncthreads == 2 and k.warp_reduce and k.cta_reduce
    assert k.int_divmod_runtime == 0  # only threadIdx.x % 32 and / 32
    s = f.static
    assert s.pdl_off and not s.pdl_launch and not s.pdl_flag and not s.pdl_wait
    assert [l.pdl for l in f.launches] == ["off"]  # .enable_pdl(false)
    assert s.grid_kind == "per_row" and s.block_size_runtime and s.block_size is None
    assert s.reciprocal_divisions == 1 and f.math_sites == {"rcp": 1}
    assert s.loops_missing_unroll == 2 and s.smem_static_bytes == 128 and s.packed_casts
    assert s.launches_per_entry == 1 and not s.tunable_block_size


@pytest.mark.wheel
def test_features_reads_a_task_src_folder_like_a_file_mapping(tmp_path, sglang_source):
    path, data, regions = real_regions(sglang_source.root, "fused_add_rmsnorm.cuh")
    spans = definition_spans(path, data)
    (tmp_path / path).parent.mkdir(parents=True)
    (tmp_path / path).write_bytes(data)
    from_folder = features(tmp_path, spans)
    from_mapping = features({path: data}, spans)
    assert from_folder == from_mapping == features_of_regions(regions)


# --------------------------------------------------------------------------- profile facts and the flat view


def test_profile_facts_from_an_evaluation_take_the_worst_shapes():
    def timing(tokens, time_us, pct, floor):
        return ShapeTiming(
            label=f"m[{tokens}]",
            sizes={"num_tokens": tokens, "hidden_size": 4096},
            dtype="bf16",
            time_us=time_us,
            spread_pct=1.0,
            gbps=1000.0,
            pct_of_copy_bw=pct,
            time_over_floor=floor,
        )

    build = BuildReport(
        ok=True,
        key="k",
        seconds=1.0,
        resources=[
            KernelResources(kernel="a", registers=40, spill_stores=4, spill_loads=8, stack_bytes=16, smem_bytes=128),
            KernelResources(kernel="b", registers=72),
        ],
    )
    ev = Evaluation(
        op_id="x",
        candidate="c",
        outcome=Outcome.ok,
        build=build,
        timings=[timing(1, 3.5, 12.0, 6.0), timing(8192, 80.0, 88.0, 1.1)],
    )
    p = ProfileFacts.from_evaluation(ev, memory_bound=True)
    assert (p.time_over_floor, p.pct_of_copy_bw, p.min_time_us) == (6.0, 12.0, 3.5)
    assert (p.registers, p.spills, p.stack_bytes, p.smem_bytes) == (72, 12, 16, 128)
    assert (p.small_batch, p.min_tokens, p.max_tokens, p.memory_bound) == (True, 1, 8192, True)
    empty = ProfileFacts.from_evaluation(Evaluation(op_id="x", candidate="c", outcome=Outcome.crashed))
    assert empty == ProfileFacts()


def test_flat_view_has_every_feature_name_and_says_where_memory_bound_came_from():
    guess = Features(static=StaticFeatures(tensor_core_ops=False))
    flat = guess.flat()
    assert set(flat) == set(FEATURE_NAMES)
    assert flat["memory_bound"] is True and flat["memory_bound_from_profile"] is False
    measured = Features(static=StaticFeatures(), profile=ProfileFacts(memory_bound=False)).flat()
    assert measured["memory_bound"] is False and measured["memory_bound_from_profile"] is True
    mma = Features(static=StaticFeatures(tensor_core_ops=True)).flat()
    assert mma["memory_bound"] is False
    assert (
        features_of_regions({"k": SNIPPET_LOADS}, profile=ProfileFacts(pct_of_copy_bw=42.0)).flat()["pct_of_copy_bw"]
        == 42.0
    )


# --------------------------------------------------------------------------- snippets

SNIPPET_LOADS = """
template <int kItems>
__global__ void copy_kernel(const float4* __restrict__ in, float4* __restrict__ out, int n, int64_t rows) {
  extern __shared__ char dyn[];
  __shared__ float tile[32][33];
  const int64_t base = blockIdx.x;
  float acc = 0.0f;
  for (int i = 0; i < kItems; ++i) {
    float4 v = __ldg(in + base * kItems + i);
    acc += __expf(v.x) + expf(v.y) + logf(v.z) + v.w / acc;
  }
  for (int r = blockIdx.x; r < n; r += gridDim.x) {
    acc += 1.0f / sqrtf(acc);
  }
  out[threadIdx.x % n] = make_float4(acc, acc, acc, acc);
}
void host_launch(const float4* in, float4* out, int n, cudaStream_t s) {
  copy_kernel<4><<<n / 256, 256, 0, s>>>(in, out, n, 0);
}
"""


def test_snippet_features_vectors_math_loops_and_chevron_launch():
    f = features_of_regions({"k": SNIPPET_LOADS})
    k = f.kernel("copy_kernel")
    assert k.vector_bytes == 16 and k.block_sizes == [256] and k.launched
    assert k.loops == 2 and k.constant_loops == 1 and k.runtime_loops == 1 and k.grid_stride_loop
    assert k.loops_missing_unroll == 1 and k.int_divmod_runtime == 1  # threadIdx.x % n
    s = f.static
    assert s.cache_hints and s.dynamic_smem and s.smem_2d_arrays == 1 and s.shared_memory
    assert s.int64_index  # const int64_t base
    assert f.math_sites == {"expf": 1, "logf": 1, "fdividef": 1, "rsqrt": 1}
    assert s.fast_intrinsics == 1 and s.slow_math_calls == 2 and s.reciprocal_divisions == 1
    assert [(l.pdl, l.grid_kind, l.kernels) for l in f.launches] == [("unsupported", "unknown", ["copy_kernel"])]
    assert s.pdl_off is False and s.pdl_launch is False  # a chevron launch cannot carry PDL at all


def test_variables_are_not_constants_and_preprocessor_branches_follow_hopper():
    src = """
struct L {
  static constexpr int kBlockSize = 128;
  static void run(int n) {
#if SGL_ARCH_BLACKWELL_OR_GREATER
    LaunchKernel(n, 1024, dev).enable_pdl(true)(wide_kernel, n);
#else
    LaunchKernel(n, kBlockSize, dev)(narrow_kernel, n);
#endif
  }
};
__global__ void narrow_kernel(int n) { float s = 0.0f; s = s / n; }
__global__ void wide_kernel(int n) {}
"""
    f = features_of_regions({"L": src})
    assert [l.kernels for l in f.launches] == [["narrow_kernel"]]
    assert f.launches[0].pdl == "absent" and f.static.pdl_off
    assert f.launches[0].grid_kind == "unknown"
    assert f.kernel("narrow_kernel").block_sizes == [128] and not f.kernel("wide_kernel").launched
    assert f.math_sites == {"fdividef": 1}  # s is a variable: its initial 0.0f is not its value


def test_two_launches_on_one_path_count_and_branches_take_the_max():
    src = """
struct Two {
  static void run(int n) {
    LaunchKernel(n, 128, dev)(first_kernel, n);
    if (n > 4) {
      LaunchKernel(n, 128, dev)(second_kernel, n);
    } else {
      helper(n);
    }
  }
  static void helper(int n) { LaunchKernel(n, 128, dev)(second_kernel, n); LaunchKernel(n, 128, dev)(first_kernel, n); }
};
__global__ void first_kernel(int n) {}
__global__ void second_kernel(int n) {}
"""
    f = features_of_regions({"Two": src})
    assert f.static.launch_sites == 4
    assert f.static.launches_per_entry == 3  # run: 1 + max(1, helper's 2)
    assert f.static.block_size == 128 and f.static.num_launchers == 1


@pytest.mark.wheel
def test_definition_spans_agree_with_the_extract_index(sglang_source):
    """The helper the tests use cuts the same spans as `kernelsmith extract` does."""
    from extract import index
    from extract.tasks import editable_spans

    scan = index.scan_tree(sglang_source)
    for name in ("activation.cuh", "rmsnorm.cuh", "fused_add_rmsnorm.cuh"):
        path = f"{ELEMENTWISE}/{name}"
        data = (pathlib.Path(sglang_source.root) / path).read_bytes()
        assert editable_spans(scan, [path]) == definition_spans(path, data), name


def test_build_flags_tell_whether_fast_math_is_already_on():
    """An H200 round (2026-11-29) spent on expf -> __expf in activation.cuh, which is
    built with --use_fast_math, measured 1.000x: the planner must know the flag."""
    from optimize.features import features_of_regions
    from optimize.skills import load_skills

    regions = {"k": "__global__ void k(float* o, const float* i) { o[threadIdx.x] = expf(i[threadIdx.x]); }\n"}
    skill = load_skills().get("fast_math_intrinsics")
    plain = features_of_regions(regions, build_flags=["-O3"])
    fast = features_of_regions(regions, build_flags=["-O3", "--use_fast_math"])
    assert plain.flat()["fast_math_flag"] is False and fast.flat()["fast_math_flag"] is True
    assert skill.applies(plain.flat()) and not skill.applies(fast.flat())
