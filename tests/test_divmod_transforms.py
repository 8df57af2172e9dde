"""incremental_divmod (optimize.transforms.carried_divmod): on real SGLang source, its refusals, and its arithmetic run.

The arithmetic test compiles our own small kernels, before and after the transform, as host C++
(``__global__`` defined away, ``threadIdx``/``blockIdx`` as plain globals) and runs both over many
threads, steps and divisors: the carried quotient and remainder must index exactly what the
divisions did.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest

from optimize.cuda_regions import Region
from optimize.cuda_sites import strided_divmod_sites
from optimize.cuda_spans import definition_spans, region_texts
from optimize.transforms import registry as T
from optimize.transforms.carried_divmod import incremental_divmod
from optimize.transforms.edits import NotApplicable


def wheel_regions(sglang_source, path: str) -> dict[str, str]:
    data = (pathlib.Path(sglang_source.root) / path).read_bytes()
    return region_texts({path: data}, definition_spans(path, data))


def test_bias_gelu_s_bias_column_is_carried_instead_of_a_64_bit_modulo_per_vector(sglang_source):
    regions = wheel_regions(sglang_source, "kernels/jit/csrc/elementwise/bias_gelu.cuh")
    assert strided_divmod_sites(Region(regions)) == 1
    kernel = regions["bias_gelu_tanh_kernel"]
    assert "vec_id % row_vecs" in kernel, "bias_gelu.cuh changed in SGLang: update the test"
    new = T.apply("incremental_divmod", regions, {})
    edited = new["bias_gelu_tanh_kernel"]
    assert "vec_id % row_vecs" not in edited and "b.load(bias, carry_r0_0);" in edited
    assert (
        "auto carry_r0_0 = (static_cast<int64_t>(" in edited
        and "const auto carry_sr0_0 = (stride) % (row_vecs);" in edited
    )
    assert (
        "vec_id += stride, carry_r0_0 += carry_sr0_0, carry_r0_0 -= carry_r0_0 >= (row_vecs) ? (row_vecs) : 0)"
        in edited
    )
    assert {k for k in new if new[k] != regions[k]} == {"bias_gelu_tanh_kernel"}


def test_rope_s_token_and_head_come_from_one_carried_quotient_and_remainder(sglang_source):
    """rope.cuh's fused_rope_kernel starts from `start_worker_id`, a name initialized from blockIdx/threadIdx."""
    regions = wheel_regions(sglang_source, "kernels/jit/csrc/elementwise/rope.cuh")
    new = incremental_divmod(regions, kernel="fused_rope_kernel")
    edited = new["fused_rope_kernel"]
    assert "const int64_t token_id = carry_q0_0;" in edited and "const int64_t head_id = carry_r0_0;" in edited
    assert "idx / num_q_and_k_heads" not in edited and "idx % num_q_and_k_heads" not in edited
    assert "carry_q0_0 += carry_sq0_0 + (carry_r0_0 >= (num_q_and_k_heads))" in edited


KERNELS = {
    "pairs": """__global__ void pairs(long* out, long n, long cols, long step_extra) {
  const long stride = blockDim.x * gridDim.x + step_extra;
#pragma unroll 2
  for (long v = blockIdx.x * blockDim.x + threadIdx.x; v < n; v += stride) {
    if (v % 3 == 1) continue;
    out[v] = (v / cols) * 1000 + v % cols;
  }
}""",
    "narrow": """__global__ void narrow(unsigned* out, unsigned n, unsigned heads) {
  const auto first = (blockIdx.x * blockDim.x + threadIdx.x) / 2u;
  for (auto idx = first; idx < n; idx += gridDim.x * blockDim.x) {
    const unsigned token = idx / heads;
    const unsigned head = idx % heads;
    out[idx] = token * 100u + head;
  }
}""",
}

HOST = """#include <cstdio>
#include <vector>
#define __global__
struct Dim { unsigned x; };
Dim threadIdx, blockIdx, blockDim, gridDim;
%s
int main() {
  for (long cols : {1L, 3L, 7L, 64L, 1000L})
    for (unsigned grid : {1u, 2u, 5u})
      for (long extra : {0L, 5L}) {
        const long n = 4000;
        std::vector<long> a(n, -1);
        std::vector<unsigned> b(n, 7u);
        blockDim.x = 32; gridDim.x = grid;
        for (blockIdx.x = 0; blockIdx.x < grid; ++blockIdx.x)
          for (threadIdx.x = 0; threadIdx.x < 32; ++threadIdx.x) {
            pairs(a.data(), n, cols, extra);
            narrow(b.data(), (unsigned)n, (unsigned)cols);
          }
        for (long i = 0; i < n; ++i) printf("%%ld %%u\\n", a[i], b[i]);
      }
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler (g++)")
def test_the_carried_values_index_exactly_what_the_divisions_did(tmp_path):
    new = incremental_divmod(KERNELS)
    assert new["pairs"].index("#pragma unroll 2") > new["pairs"].index("carry_sr0_1"), "the pragma stays on its loop"
    assert "v % 3 ==" not in new["pairs"] and "v % cols" not in new["pairs"] and "v / cols" not in new["pairs"]

    def run(kernels: dict[str, str], name: str) -> str:
        source = tmp_path / f"{name}.cpp"
        source.write_text(HOST % "\n".join(kernels.values()))
        exe = tmp_path / name
        subprocess.run(["g++", "-std=c++17", "-O1", "-o", str(exe), str(source)], check=True, capture_output=True)
        return subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout

    before, after = run(KERNELS, "before"), run(new, "after")
    assert before.count("\n") == 3 * 2 * 5 * 4000 and after == before


@pytest.mark.parametrize(
    "kernel",
    [
        # the body changes the divisor
        "__global__ void k(long* o, long n, long m) { for (long v = threadIdx.x; v < n; v += 32) { o[v] = v % m; m++; } }",
        # the body changes the loop variable
        "__global__ void k(long* o, long n, long m) { for (long v = threadIdx.x; v < n; v += 32) { o[v] = v % m; v += 1; } }",
        # the start is not a thread index (it could be negative)
        "__global__ void k(long* o, long n, long m, long s) { for (long v = s; v < n; v += 32) { o[v] = v % m; } }",
        # the divisor mentions the loop variable
        "__global__ void k(long* o, long n) { for (long v = threadIdx.x; v < n; v += 32) { o[v] = v % (v + 1); } }",
        # the start is read from memory (evaluated again before the loop, and of unknown sign)
        "__global__ void k(long* o, long n, long m, long* s) { for (long v = s[threadIdx.x]; v < n; v += 32) { o[v] = v % m; } }",
        # the divisor is read from memory, which the body may write
        "__global__ void k(long* o, long n, long* m) { for (long v = threadIdx.x; v < n; v += 32) { o[v] = v % m[0]; } }",
        # an inner loop declares its own v: the outer v's divisions cannot be told apart by name
        "__global__ void k(long* o, long n, long m) { for (long v = threadIdx.x; v < n; v += 32) {"
        " for (long v = 0; v < 2; ++v) o[v] = v % m; } }",
        # a loop that is an if's whole body: declarations before it would change what the if runs
        "__global__ void k(long* o, long n, long m, bool c) {"
        " if (c) for (long v = threadIdx.x; v < n; v += 32) { o[v] = v % m; } }",
        # not a kernel
        "void k(long* o, long n, long m) { for (long v = threadIdx.x; v < n; v += 32) { o[v] = v % m; } }",
    ],
)
def test_a_loop_the_carry_would_get_wrong_is_left_alone(kernel):
    with pytest.raises(NotApplicable):
        incremental_divmod({"k": kernel})
    assert strided_divmod_sites(Region({"k": kernel})) == 0


def test_a_loop_stepping_by_a_name_set_from_griddim_is_a_grid_stride_loop(sglang_source):
    """bias_gelu's `vec_id += stride` with `const int64_t stride = ... * gridDim.x`: the loop features
    (and so unroll_grid_stride_loop) see it as the grid-stride loop it is."""
    from optimize.features import features_of_regions

    regions = wheel_regions(sglang_source, "kernels/jit/csrc/elementwise/bias_gelu.cuh")
    static = features_of_regions(regions).static
    assert static.grid_stride_loop and static.strided_divmod == 1
