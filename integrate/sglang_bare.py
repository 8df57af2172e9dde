"""Import SGLang's kernel packages from a given tree without running ``sglang/__init__.py``.

Why: ``sglang/__init__.py`` builds SGLang's front-end language API and patches
``transformers`` at import; that pulls 22 packages the GPU machine lacks
(IPython, pydantic, aiohttp's clients, ...) and none of it is on the path from
``sglang.kernels.ops.*`` to ``load_jit``. Registering ``sglang`` as a plain
package whose ``__path__`` is the tree's ``sglang/`` folder makes every
``sglang.*`` submodule import from that tree, through the normal import
system, with only the packages the kernel path needs (see
``integrate/README.md``). The op code, ``load_jit``, its cache and the
tvm-ffi loading are SGLang's own, unchanged.

The only side effect of the real ``__init__`` that matters for kernels,
redirecting third-party JIT caches under ``SGLANG_CACHE_DIR``, is reproduced by
the caller setting every cache variable to a private folder
(:func:`private_cache_env`). For a Triton op that includes ``TRITON_CACHE_DIR``:
the pristine and the patched worker each compile their own tree's kernels into
their own folder, so neither can load a kernel the other compiled. A Triton op's
module (``sglang.kernels.ops.attention.merge_state``) imports torch and triton at
the top and nothing that needs a GPU; ``tests/test_integrate_triton.py`` imports
it through :func:`install` in a fresh interpreter where torch is installed.

Also a pytest plugin: ``-p integrate.sglang_bare`` with ``KS_SGLANG_PACKAGE``
set installs the same package before SGLang's tests are collected.

This module imports only the standard library and :mod:`pipeline.sglang_package` (where
:func:`install` lives, shared with the harness's Triton worker): it runs inside worker
processes whose ``sys.path`` holds just the project, the tree and the GPU machine's packages.
"""

from __future__ import annotations

import os

from pipeline.sglang_package import install

ENV_PACKAGE = "KS_SGLANG_PACKAGE"


def private_cache_env(cache_dir: str) -> dict[str, str]:
    """Environment pointing SGLang's JIT cache and every third-party cache at ``cache_dir``."""
    return {
        "SGLANG_CACHE_DIR": cache_dir,
        "SGLANG_JIT_CACHE_DIR": os.path.join(cache_dir, "jit"),
        "TRITON_CACHE_DIR": os.path.join(cache_dir, "triton"),  # a Triton op's kernels: one cache per tree
        "TRITON_HOME": cache_dir,  # Triton's other folders (~/.triton: dumps, overrides) under the same
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(cache_dir, "inductor"),
        "CUDA_CACHE_PATH": os.path.join(cache_dir, "nv"),
        "TILELANG_CACHE_DIR": os.path.join(cache_dir, "tilelang"),
        "FLASHINFER_WORKSPACE_BASE": cache_dir,
        "PYTHONDONTWRITEBYTECODE": "1",  # never write __pycache__ into a tree we compare
    }


def pytest_configure(config) -> None:  # noqa: ARG001 - pytest plugin hook
    package = os.environ.get(ENV_PACKAGE)
    if package:
        install(package)


__all__ = ["ENV_PACKAGE", "install", "private_cache_env"]
