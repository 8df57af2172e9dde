"""What the target machine answers, and how its dtypes are spelled.

Tasks are built for one target, CUDA on sm_90a (an H200, 132 SMs): every platform
probe and GPU query a loader makes is answered for it here, so a loader takes the
branch SGLang takes on that machine. The dtype tables map torch's attribute names to
our short names and those to ``make_cpp_args``' C++ spellings.

What must stay true: these are plain data (no torch, no SGLang); a probe missing here
is not known statically, never guessed.
"""

from __future__ import annotations

import math
import pathlib
from collections.abc import Callable
from typing import Any

from contract import dtypes as dtype_table
from extract.jit_layout import layout_of_module
from pipeline.target import TARGET

# Platform probes SGLang's helpers consult, answered for CUDA on sm_90a.
PLATFORM: dict[str, Any] = {
    "is_arch_support_pdl": True,
    "is_cuda": True,
    "is_cuda_alike": True,
    "is_hip": False,
    "is_hip_runtime": False,
    "is_musa_runtime": False,
    "is_sail_runtime": False,
    "is_musa": False,
    "is_xpu": False,
    "is_npu": False,
    "is_cpu": False,
    "is_gfx95_supported": False,
    "is_blackwell": False,
    "is_sm100_supported": False,
    "is_sm120_supported": False,
    "is_sm90_supported": True,
}


class Facts(dict[str, Any]):
    """A platform object answered statically (``get_jit_cuda_arch()``): attributes are its keys."""


# Calls that probe the GPU, answered for one H200 (sm_90a, 132 SMs): the machine tasks target.
PLATFORM_CALLS: dict[str, Any] = {
    "get_jit_cuda_arch": Facts(
        major=TARGET.capability[0],
        minor=TARGET.capability[1],
        suffix=TARGET.suffix,
        target_name=TARGET.target_name,
        jit_flag=TARGET.jit_flag,
    ),
    "torch.cuda.get_device_capability": TARGET.capability,
    "torch.cuda.current_device": 0,
    "torch.cuda.is_available": True,
    "torch.cuda.device_count": 1,
    "torch.cuda.get_device_properties": Facts(
        major=TARGET.capability[0],
        minor=TARGET.capability[1],
        multi_processor_count=TARGET.sm_count,
        name=TARGET.name,
    ),
    "get_device_capability": TARGET.capability,
    "get_device_sm": TARGET.sm,
}

# Package paths SGLang's loaders build include directories from
# (``(KERNEL_PATH / "csrc" / "fast-hadamard-transform").resolve()``), relative to the
# package root: SGLang computes KERNEL_PATH with importlib at import time, which no
# static reading can follow, and extract maps such a path back into the package.


def package_paths(rel: str) -> dict[str, pathlib.PurePosixPath]:
    """The package paths SGLang's loader module defines, as the module at ``rel`` sees them:
    ``KERNEL_PATH``, the folder of ``csrc/`` and ``include/`` in that module's layout."""
    return {"KERNEL_PATH": pathlib.PurePosixPath(layout_of_module(rel).jit_dir)}


# Pure functions of the standard library a loader may compute a template argument with.
STDLIB_CALLS: dict[str, Callable[..., Any]] = {
    "math.gcd": math.gcd,
    "math.lcm": math.lcm,
    "math.ceil": math.ceil,
    "math.floor": math.floor,
    "math.log2": math.log2,
    "math.isqrt": math.isqrt,
    "math.prod": math.prod,
}

# The interpreter's dtype names are SGLang's own (``fp8_e4m3``, as make_cpp_args spells it
# in Python); every other fact comes from the one table, contract.dtypes.
_SGLANG_SPELLING: dict[str, str] = {"fp8e4m3": "fp8_e4m3", "fp8e5m2": "fp8_e5m2"}


def _spelled(short: str) -> str:
    return _SGLANG_SPELLING.get(short, short)


# torch dtype attribute -> the interpreter's short name (every dtype make_cpp_args maps,
# with torch's own aliases and the fnuz fp8 variants it treats as their plain formats).
TORCH_DTYPES: dict[str, str] = {
    **{d.torch: _spelled(d.short) for d in dtype_table.TABLE.values()},
    "double": "fp64",
    "float": "fp32",
    "half": "fp16",
    "float8_e4m3fnuz": "fp8_e4m3",
    "float8_e5m2fnuz": "fp8_e5m2",
}
# Spelling make_cpp_args gives each dtype (kernels/jit/utils/compile/cpp_args.py).
CPP_SPELLING: dict[str, str] = {_spelled(d.short): d.cpp for d in dtype_table.TABLE.values()}
ITEMSIZE: dict[str, int] = {_spelled(d.short): d.nbytes for d in dtype_table.TABLE.values()}
