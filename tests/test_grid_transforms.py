"""optimize.transforms.grid.cap_grid on SGLang's own sources (the pinned wheel): a grid-stride
kernel's ceil-div grid capped at whole waves of the device, and the launches it must leave alone.
The patched file is built for sm_90a with nvcc, as SGLang's load_jit would."""

from __future__ import annotations

import pathlib
import shutil

import pytest
from test_transforms import compile_for_sm90a, spliced

from optimize.cuda_spans import definition_spans, region_texts
from optimize.transforms import registry as T
from optimize.transforms.edits import NotApplicable
from optimize.transforms.grid import cap_grid

BIAS = "kernels/jit/csrc/diffusion/bias_residual_add.cuh"
ACT = "kernels/jit/csrc/elementwise/activation.cuh"
LAUNCH = "    LaunchKernel(blocks, kThreads, device.unwrap())(kernel<kChannelsInner>, params);\n"
CAPPED = (
    "    static const uint32_t kMaxResidentBlocks = [&] {\n"
    "      int blocks_per_sm = 0, sm_count = 0;\n"
    "      host::RuntimeDeviceCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, "
    "kernel<kChannelsInner>, kThreads, 0));\n"
    "      host::RuntimeDeviceCheck(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, "
    "device.unwrap().device_id));\n"
    "      return static_cast<uint32_t>(blocks_per_sm * sm_count);\n"
    "    }();\n"
    "    LaunchKernel(std::min<uint32_t>(blocks, kMaxResidentBlocks * 2), kThreads, device.unwrap())"
    "(kernel<kChannelsInner>, params);\n"
)


def load(root: str, path: str) -> tuple[bytes, list, dict[str, str]]:
    data = (pathlib.Path(root) / path).read_bytes()
    spans = definition_spans(path, data)
    return data, spans, region_texts({path: data}, spans)


def test_a_grid_stride_kernel_gets_a_grid_of_whole_waves(sglang_source):
    _, _, regions = load(sglang_source.root, BIAS)
    after = cap_grid(regions, waves=2)
    changed = [name for name in regions if after[name] != regions[name]]
    assert len(changed) == 1, "only the launcher changes"
    (name,) = changed
    assert LAUNCH in regions[name]
    assert after[name] == regions[name].replace(LAUNCH, CAPPED), "one line added, the grid wrapped: nothing else"
    one = cap_grid(regions, waves=1)[name]
    assert "std::min<uint32_t>(blocks, kMaxResidentBlocks)," in one
    assert T.apply("cap_grid", regions, {"waves": 4})[name].count("kMaxResidentBlocks * 4") == 1


def test_kernels_that_do_not_stride_by_the_grid_are_left_alone(sglang_source):
    """activation.cuh's kernels take one item per thread (blockIdx.x outside any grid-stride loop):
    a capped grid would skip items, so the transform refuses every launch and says why."""
    _, _, regions = load(sglang_source.root, ACT)
    with pytest.raises(NotApplicable, match="does not reach every item through a grid-stride loop"):
        cap_grid(regions)


def test_block_index_outside_the_loop_and_other_launch_forms_are_refused():
    kernel = """__global__ void k(const float* x, float* y, int n) {
  const int row = blockIdx.x;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = x[i] + row;
}
"""
    launcher = """void run(DLDevice device, int n) {
  const auto blocks = div_ceil(n, kThreads);
  LaunchKernel(blocks, kThreads, device)(k, x, y, n);
}
"""
    with pytest.raises(NotApplicable, match="grid-stride"):
        cap_grid({"k": kernel, "run": launcher})
    strided = kernel.replace("  const int row = blockIdx.x;\n", "").replace(" + row;", ";")
    assert "static const uint32_t kMaxResidentBlocks" in cap_grid({"k": strided, "run": launcher})["run"]
    for refused, why in (
        (
            launcher.replace("LaunchKernel(blocks, kThreads, device)(k, x, y, n)", "k<<<blocks, kThreads>>>(x, y, n)"),
            "not a LaunchKernel",
        ),
        (launcher.replace("(blocks, kThreads, device)", "(dim3(blocks, 2), kThreads, device)"), "multi-dimensional"),
        (launcher.replace("(blocks, kThreads, device)", "(blocks, kThreads, stream)"), "names a stream"),
        (launcher.replace("(blocks, kThreads, device)", "(blocks++, kThreads, device)"), "side effect"),
    ):
        with pytest.raises(NotApplicable, match=why):
            cap_grid({"k": strided, "run": refused})
    runtime_block = cap_grid({"k": strided, "run": launcher.replace("kThreads, device", "threads, device")})["run"]
    assert "static const" not in runtime_block, "a block chosen at run time asks the device at each launch"
    assert "std::min<uint32_t>(blocks, [&] { int blocks_per_sm = 0, sm_count = 0; " in runtime_block
    assert "cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, k, threads, 0)" in runtime_block


def test_the_capped_launcher_builds_for_sm90a(tmp_path, sglang_source):
    pytest.importorskip("tvm_ffi.libinfo")
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    root = pathlib.Path(sglang_source.root)
    data, spans, regions = load(str(root), BIAS)
    regions = cap_grid(regions, waves=2)
    patched = tmp_path / "bias_residual_add.cuh"
    patched.write_bytes(spliced(data, spans, regions))
    unit = tmp_path / "check.cu"
    unit.write_text(
        f'#include "{patched}"\n'
        "template struct sglang::bias_residual_add::Kernel<true>;\n"
        "template struct sglang::bias_residual_add::Kernel<false>;\n"
    )
    done = compile_for_sm90a(unit, root, tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
