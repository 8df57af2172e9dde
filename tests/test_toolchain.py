"""Tests of pipeline.toolchain: finding nvcc, the host compiler and tvm-ffi, and saying the fix when one is missing."""

from __future__ import annotations

import sys

import pytest

from pipeline import toolchain
from pipeline.errors import ToolchainError


@pytest.fixture(autouse=True)
def _fresh_memos():
    toolchain.find_tvm_ffi.cache_clear()
    yield
    toolchain.find_tvm_ffi.cache_clear()


@pytest.mark.nvcc
def test_find_nvcc_and_fingerprint():
    nvcc = toolchain.find_nvcc()
    assert nvcc.path.is_file() and nvcc.release >= toolchain.MIN_NVCC_RELEASE
    assert (nvcc.home / "bin" / "nvcc").is_file()  # the real toolkit, even when PATH holds a wrapper script
    assert (nvcc.lib_dir / "libcudart.so").exists()
    fingerprint = toolchain.toolchain_fingerprint()
    assert set(fingerprint) == {"nvcc", "nvcc_release", "host_cc", "tvm_ffi"}
    assert "Cuda compilation tools" in fingerprint["nvcc"]
    assert fingerprint["nvcc_release"] == f"{nvcc.release[0]}.{nvcc.release[1]}"
    assert fingerprint["tvm_ffi"] == "0.1.11"
    assert str(nvcc.home) not in repr(fingerprint)  # versions only, no install paths


def test_cuda_home_without_nvcc_is_a_toolchain_error(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    with pytest.raises(ToolchainError) as info:
        toolchain.find_nvcc()
    assert "has no bin/nvcc" in info.value.message and "CUDA_HOME" in info.value.fix


def test_no_nvcc_anywhere_is_a_toolchain_error(monkeypatch, tmp_path):
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(toolchain, "_DEFAULT_CUDA_HOME", str(tmp_path / "no-cuda"))
    with pytest.raises(ToolchainError) as info:
        toolchain.find_nvcc()
    assert "nvcc not found" in str(info.value) and "CUDA toolkit 12.8+" in info.value.fix


def test_old_nvcc_is_refused(monkeypatch, tmp_path):
    fake = tmp_path / "bin" / "nvcc"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.131'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    with pytest.raises(ToolchainError, match="CUDA 12.4"):
        toolchain.find_nvcc()


def test_missing_host_compiler(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-c++-compiler")
    with pytest.raises(ToolchainError) as info:
        toolchain.find_host_compiler()
    assert "no-such-c++-compiler" in info.value.message and "g++" in info.value.fix


def test_missing_tvm_ffi(monkeypatch):
    monkeypatch.setitem(sys.modules, "tvm_ffi", None)  # import tvm_ffi now raises ImportError
    with pytest.raises(ToolchainError) as info:
        toolchain.find_tvm_ffi()
    assert "pip install apache-tvm-ffi==0.1.11" in info.value.fix


def test_demangle_batches_and_tolerates_c_names():
    if toolchain.find_demangler() is None:
        assert toolchain.demangle(["_Z1fv"]) == {"_Z1fv": None}
        return
    out = toolchain.demangle(["_Z11smem_kernelPfPKfi", "plain_c"])
    assert out == {"_Z11smem_kernelPfPKfi": "smem_kernel(float*, float const*, int)", "plain_c": "plain_c"}
