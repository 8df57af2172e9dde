"""The GPU target every stage builds for and reasons about, written once.

Why: the arch tasks are extracted and compiled for, the ``SGL_CUDA_ARCH`` value SGLang's JIT
passes, the compute capability platform probes answer and the SM count of the card are one fact
(an H200: sm_90a, 132 SMs). Extract reads SGLang's sources as this target would build them, the
builder compiles for it, and the preprocessor evaluates ``#if SGL_CUDA_ARCH`` branches with it;
each reads :data:`TARGET` instead of spelling the numbers again (a test fails on a second
spelling in code). ``extract.arch`` / ``build.arch`` in the config choose another arch where a
machine has another card; everything derived here follows :data:`TARGET` alone.

What must stay true: the fields agree with each other (:meth:`GpuTarget.__post_init__`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


def capability_of(arch: str) -> tuple[int, int]:
    """``sm_90a`` -> (9, 0), ``sm_100a`` -> (10, 0): the compute capability an nvcc arch names
    (the last digit is the minor version); ValueError for another form."""
    match = re.fullmatch(r"sm_(\d+)(\d)[a-z]?", arch)
    if match is None:
        raise ValueError(f"arch {arch!r} is not of the form sm_<N>[a]")
    return int(match.group(1)), int(match.group(2))


@dataclass(frozen=True)
class GpuTarget:
    arch: str  # nvcc's -gencode spelling: sm_<major><minor>[a]
    sm_count: int  # SMs of the card the figures are measured on
    name: str  # the card, as torch names it

    def __post_init__(self) -> None:
        if not re.fullmatch(r"sm_\d\d+a?", self.arch):
            raise ValueError(f"GPU target arch {self.arch!r} is not of the form sm_<N>[a]")

    @property
    def capability(self) -> tuple[int, int]:
        return capability_of(self.arch)

    @property
    def sm(self) -> int:
        """``90``: the capability as one number (Triton's target, SGLang's ``get_device_sm``)."""
        major, minor = self.capability
        return major * 10 + minor

    @property
    def suffix(self) -> str:
        return "a" if self.arch.endswith("a") else ""

    @property
    def sgl_cuda_arch(self) -> int:
        """The ``SGL_CUDA_ARCH`` SGLang's JIT defines: major x 100 + minor x 10 (900 on Hopper)."""
        return self.sm * 10

    @property
    def jit_flag(self) -> str:
        return f"-DSGL_CUDA_ARCH={self.sgl_cuda_arch}"

    @property
    def target_name(self) -> str:
        """``9.0a``: how SGLang's ``get_jit_cuda_arch()`` names it."""
        major, minor = self.capability
        return f"{major}.{minor}{self.suffix}"


TARGET = GpuTarget(arch="sm_90a", sm_count=132, name="NVIDIA H200")

__all__ = ["TARGET", "GpuTarget", "capability_of"]
