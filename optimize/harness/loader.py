"""Load a built module and call its exports, exactly the way SGLang does at run time.

Two kinds of library, told apart here and nowhere else in the worker: a tvm-ffi module (a CUDA
task's, below) and a Triton task's spliced Python file (:mod:`optimize.harness.triton_library`,
its manifest's path: :func:`triton_library.is_library`). Either way :func:`function` returns a
callable taking the contract's arguments, so the worker's checks and timing are the same for both.

SGLang's ``load_jit`` ends in ``tvm_ffi.load_module(path)`` and calls
``module.<export>(tensor, ...)`` with torch tensors; tvm-ffi converts them through
DLPack and sets its environment stream to torch's *current* stream for the call,
so a kernel launched with ``LaunchKernel(..., device)`` runs on whatever stream
the caller made current (a CUDA-graph capture stream included). The harness uses
the same path, so what it measures is what SGLang runs.

What must stay true:
- ``tvm_ffi`` loads each module with ``RTLD_LOCAL``: the baseline and a candidate
  that define the same template symbols stay separate, each module calls its own
  kernels.
- Modules stay loaded for the life of the process (``keep_module_alive``): tvm-ffi
  objects returned by an export must never outlive their library's code.
- A Triton library's module is one per (library, ``owner``): the worker passes the implementation's
  name, so the baseline and the candidate never share a module (tvm-ffi modules need no owner).
- Imports tvm_ffi lazily; this module is GPU-side but importable anywhere.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from optimize.harness import triton_library
from optimize.harness.errors import HarnessError

_MODULES: dict[str, Any] = {}


def load(path: str | os.PathLike[str]) -> Any:
    """The tvm-ffi module at ``path`` (loaded once per process)."""
    key = os.fspath(path)
    if key not in _MODULES:
        if not os.path.isfile(key):
            raise HarnessError(f"built module {key} does not exist", fix="rebuild it (the build cache may have moved)")
        import tvm_ffi

        _MODULES[key] = tvm_ffi.load_module(key)
    return _MODULES[key]


def use_package(package_dir: str | None) -> None:
    """The carried sglang package a Triton library's ``import sglang.<...>`` resolves in (None: none needed)."""
    triton_library.use_package(package_dir)


def function(path: str | os.PathLike[str], export: str, *, owner: str = "") -> Callable[..., Any]:
    """The export ``export`` of the library at ``path`` (``owner``'s module of a Triton library); a clear
    error when it is not there."""
    if triton_library.is_library(path):
        return triton_library.function(path, export, owner=owner or "module")
    module = load(path)
    try:
        return module.get_function(export)
    except AttributeError as err:
        raise HarnessError(
            f"module {os.fspath(path)} has no export {export!r}",
            fix="the build and the request disagree on export names; rebuild with pipeline.build",
        ) from err
