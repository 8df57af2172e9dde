"""Shared test fixtures.

- Every test runs with real LLM endpoints blocked: any connection to a
  non-loopback address fails the test. Tests use the scripted and
  replay fakes in optimize.llm.fakes instead.
- `gpu` tests skip cleanly where torch or a CUDA device is missing.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _no_real_llm_endpoint(monkeypatch):
    """Fail any test that would reach a real endpoint.

    Blocked at the socket, below every HTTP client (openai 3 uses httpx2, older
    releases httpx): only loopback and Unix sockets may connect, so a test can
    still talk to a server it started itself on 127.0.0.1.
    """
    import socket

    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def _allowed(sock, address) -> bool:
        if sock.family == getattr(socket, "AF_UNIX", None):
            return True
        host = address[0] if isinstance(address, tuple) else str(address)
        return host in ("127.0.0.1", "::1", "localhost") or str(host).startswith("127.")

    def guarded_connect(sock, address):
        if not _allowed(sock, address):
            pytest.fail(f"test tried to reach a real endpoint: {address!r}")
        return real_connect(sock, address)

    def guarded_connect_ex(sock, address):
        if not _allowed(sock, address):
            pytest.fail(f"test tried to reach a real endpoint: {address!r}")
        return real_connect_ex(sock, address)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", guarded_connect_ex)
    for name in list(os.environ):
        if name.startswith("KERNELSMITH_LLM__"):
            monkeypatch.delenv(name)
    yield


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config, items):
    has_gpu = _cuda_available()
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU and torch (run `make test-gpu` on the GPU machine)")
    import shutil

    skip_nvcc = pytest.mark.skip(reason="needs nvcc on PATH")
    has_nvcc = shutil.which("nvcc") is not None
    for item in items:
        if "gpu" in item.keywords and not has_gpu:
            item.add_marker(skip_gpu)
        if "nvcc" in item.keywords and not has_nvcc:
            item.add_marker(skip_nvcc)


@pytest.fixture(scope="session")
def sglang_source():
    """The pinned sglang wheel, downloaded once into work/cache and unpacked read-only.

    Tests that read real SGLang sources use this; CI downloads the wheel on its
    first run (about 40 MB) and reuses the cache after.
    """
    from extract.sources import acquire
    from pipeline.config import DEFAULT_SGLANG_VERSION

    src = os.environ.get("SGLANG_SRC")
    return acquire(DEFAULT_SGLANG_VERSION, ROOT / "work" / "cache", src)


@pytest.fixture(scope="session")
def triton_wheel_index(sglang_source):
    """The Triton index of the pinned wheel (:func:`extract.triton_ops.scan_tree`, cached in work/cache)."""
    from extract import triton_ops

    index, _ = triton_ops.scan_tree(sglang_source, ROOT / "work" / "cache")
    return index


def ensure_default_tasks() -> pathlib.Path:
    """work/tasks for the three default ops, extracted (without the compile check) if missing.

    Tests that need real tasks call this instead of skipping, so a fresh clone (CI)
    runs them too. Extraction is the real `kernelsmith extract`, on the pinned wheel.
    """
    from pipeline.config import DEFAULT_OPS

    tasks = ROOT / "work" / "tasks"
    if all((tasks / op / "task.json").is_file() for op in DEFAULT_OPS):
        return tasks
    from cli.main import main

    code = main(["extract", "--no-compile", "--work-dir", str(ROOT / "work"), "--ops", *DEFAULT_OPS])
    assert code == 0, "kernelsmith extract of the default ops failed"
    return tasks
