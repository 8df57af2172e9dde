"""Header-only build dependencies: what SGLang's ``load_jit(extra_dependencies=[...])`` adds.

SGLang resolves a dependency name to include folders of an installed package
(``kernels/jit/utils/deps.py``): ``cutlass`` and ``flashinfer`` come from the
``flashinfer`` wheel's bundled ``data/`` tree. Kernelsmith resolves the same names
the same way, so a task that needs CuTe (``#include <cute/tensor.hpp>``) builds as it
does in SGLang. Extract records a dependency as the include token ``@dep:<name>``
in the task's recipe (location-free, like ``@tvm_ffi``); the builder expands it here.

Where the headers come from, first found wins:

1. ``$HEADER_DEPS_DIR``: a folder holding ``flashinfer/data/...`` as unpacked
   from the flashinfer wheel (``make deps`` writes ``.dev/deps`` with only the
   header folders, 4 MB compressed, small enough to carry to the GPU machine);
2. the installed ``flashinfer`` package (located, never imported).

What must stay true: the build key covers a dependency by its contents' identity
(:attr:`Dependency.digest`: every header's path and size, plus the recorded
version), never by where it lies, so two machines with the same headers share
cache entries and a changed header rebuilds. Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import os
import pathlib

from pipeline.errors import ConfigError

TOKEN_PREFIX = "@dep:"
DEPS_DIR_ENV = "HEADER_DEPS_DIR"  # like CUDA_HOME: where a tool lives, not a kernelsmith setting

# Folders under flashinfer's package root, per dependency name (SGLang's registry).
_FLASHINFER_LAYOUT: dict[str, tuple[str, ...]] = {
    "cutlass": ("data/cutlass/include", "data/cutlass/tools/util/include"),
    "flashinfer": (
        "data/include",
        "data/csrc",
        "data/cutlass/include",
        "data/cutlass/tools/util/include",
        "data/spdlog/include",
    ),
}
# The folders `make deps` keeps from the wheel: every one a name above needs, except
# flashinfer's own kernel sources (data/csrc, hundreds of MB), which no SGLang JIT
# header the tasks include reaches for.
CARRIED = ("data/cutlass/include", "data/cutlass/tools/util/include", "data/include", "data/spdlog/include")


@dataclasses.dataclass(frozen=True)
class Dependency:
    name: str
    include_dirs: tuple[pathlib.Path, ...]
    digest: str  # what the build key takes: contents' identity, not location


def token(name: str) -> str:
    return f"{TOKEN_PREFIX}{name}"


def name_of(entry: str) -> str | None:
    """The dependency an include entry names (``@dep:cutlass`` -> ``cutlass``), else None."""
    return entry[len(TOKEN_PREFIX) :] if entry.startswith(TOKEN_PREFIX) else None


def _flashinfer_roots() -> list[pathlib.Path]:
    roots = []
    carried = os.environ.get(DEPS_DIR_ENV)
    if carried:
        roots.append(pathlib.Path(carried).expanduser() / "flashinfer")
    spec = importlib.util.find_spec("flashinfer")
    if spec is not None and spec.origin is not None:
        roots.append(pathlib.Path(spec.origin).resolve().parent)
    return roots


def find(name: str) -> Dependency:
    """The include folders of dependency ``name``; ConfigError with the fix when absent."""
    layout = _FLASHINFER_LAYOUT.get(name)
    if layout is None:
        raise ConfigError(
            f"header dependency {name!r} is not one kernelsmith can provide (known: {', '.join(sorted(_FLASHINFER_LAYOUT))})",
            fix="this op needs headers outside SGLang's wheel that kernelsmith does not fetch; it cannot be built here",
        )
    for root in _flashinfer_roots():
        dirs = tuple(root / rel for rel in layout if (root / rel).is_dir())
        if dirs and (root / layout[0]).is_dir():
            return Dependency(name, dirs, _digest(root, dirs))
    raise ConfigError(
        f"header dependency {name!r} (flashinfer's bundled headers) not found",
        fix=f"run `make deps` (writes .dev/deps) and set {DEPS_DIR_ENV}=.dev/deps, or pip install flashinfer-python",
    )


@functools.lru_cache(maxsize=16)
def _digest(root: pathlib.Path, dirs: tuple[pathlib.Path, ...]) -> str:
    """Every header's path and size under ``dirs``, plus ``root/VERSION`` (what `make
    deps` records) where present: it changes with the headers, and is taken once per
    process per folder (every build of a sweep asks)."""
    digest = hashlib.sha256()
    for base in dirs:
        digest.update(base.relative_to(root).as_posix().encode() + b"\0")
        for path in sorted(p for p in base.rglob("*") if p.is_file()):
            digest.update(f"{path.relative_to(base).as_posix()}\0{path.stat().st_size}\0".encode())
    if (root / "VERSION").is_file():
        digest.update((root / "VERSION").read_bytes())
    return digest.hexdigest()[:16]
