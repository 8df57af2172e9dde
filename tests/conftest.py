"""Shared test fixtures.

- Every test runs with real LLM endpoints blocked: any HTTP request made through
  httpx (which the openai package uses) fails the test. Tests use the scripted and
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
    import httpx

    def refuse(self, request, *args, **kwargs):  # noqa: ARG001
        pytest.fail(f"test tried to reach a real endpoint: {request.method} {request.url}")

    async def refuse_async(self, request, *args, **kwargs):  # noqa: ARG001
        pytest.fail(f"test tried to reach a real endpoint: {request.method} {request.url}")

    monkeypatch.setattr(httpx.Client, "send", refuse)
    monkeypatch.setattr(httpx.AsyncClient, "send", refuse_async)
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
