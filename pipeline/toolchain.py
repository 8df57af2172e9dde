"""The compilers and libraries a kernel build runs on: where they are, what they are.

:mod:`pipeline.build` compiles exactly what SGLang's ``load_jit`` compiles, so it
needs the same three things SGLang needs: ``nvcc``, the host C++ compiler that
nvcc hands host code to (and that links the module), and tvm-ffi's headers and
``libtvm_ffi``. This module finds them, says clearly what to install when one is
missing, and fingerprints them for the build cache key.

What must stay true:
- nvcc is resolved the way SGLang (and tvm-ffi) resolve it: ``CUDA_HOME`` /
  ``CUDA_PATH`` first, then ``nvcc`` on ``PATH``, then ``/usr/local/cuda``. The
  binary we fingerprint is the binary that compiles.
- The toolkit root used for ``-L<cuda>/lib64`` is asked of nvcc itself
  (``nvcc --dryrun`` prints ``TOP=``), because ``nvcc`` on ``PATH`` is often a
  wrapper script or symlink whose grandparent folder is not the toolkit.
- A missing or unusable tool raises :class:`pipeline.errors.ToolchainError` with a
  one-line cause and the fix. It never becomes a failed candidate: a broken
  toolchain must stop a run, not be blamed on the kernel.
- The fingerprint holds versions, never install paths, so two machines with the
  same toolchain share cache keys.
- No torch, no CUDA runtime: this runs on CPU-only machines.
"""

from __future__ import annotations

import functools
import os
import pathlib
import re
import shutil
import subprocess
from dataclasses import dataclass

from pipeline.errors import ToolchainError

# SGLang 0.5.23's JIT kernels need C++20 device code and sm_90a/sm_100a targets;
# its wheels are built against CUDA 12.8+. An older nvcc would fail every
# candidate with errors that look like the candidate's fault.
MIN_NVCC_RELEASE = (12, 8)
TVM_FFI_PIN = "apache-tvm-ffi==0.1.11"
_DEFAULT_CUDA_HOME = "/usr/local/cuda"
_PROBE_TIMEOUT_S = 60

_NVCC_FIX = "install the CUDA toolkit 12.8+ and put its bin/ on PATH, or set CUDA_HOME to the toolkit folder"


@dataclass(frozen=True)
class Nvcc:
    """The nvcc a build invokes and the toolkit it belongs to."""

    path: pathlib.Path  # what we execute (may be a wrapper script)
    home: pathlib.Path  # toolkit root: holds bin/, include/, lib64/
    version_text: str  # `nvcc --version`, verbatim
    release: tuple[int, int]

    @property
    def lib_dir(self) -> pathlib.Path:
        """Folder holding libcudart.so (lib64 on Linux installs, targets/... in some layouts)."""
        for candidate in (self.home / "lib64", self.home / "targets" / "x86_64-linux" / "lib", self.home / "lib"):
            if (candidate / "libcudart.so").exists():
                return candidate
        return self.home / "lib64"


@dataclass(frozen=True)
class TvmFfi:
    """tvm-ffi's locations, found through its own ``tvm_ffi.libinfo``."""

    include_dir: pathlib.Path
    dlpack_include_dir: pathlib.Path
    library: pathlib.Path  # libtvm_ffi.so
    version: str

    @property
    def lib_dir(self) -> pathlib.Path:
        return self.library.parent

    @property
    def lib_name(self) -> str:
        """``tvm_ffi`` for ``-ltvm_ffi``."""
        return self.library.name.split(".so")[0].removeprefix("lib")


def _run_text(argv: list[str]) -> str:
    completed = subprocess.run(argv, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S, check=False)
    if completed.returncode != 0:
        raise OSError(f"`{' '.join(argv)}` exited {completed.returncode}: {completed.stderr.strip()[:500]}")
    return completed.stdout


def _env_key() -> tuple[str | None, ...]:
    """The environment a lookup depends on; part of every memo key so tests and
    users who change PATH/CUDA_HOME mid-process get a fresh answer."""
    return tuple(os.environ.get(name) for name in ("CUDA_HOME", "CUDA_PATH", "PATH", "CXX"))


def find_nvcc() -> Nvcc:
    """Locate nvcc and its toolkit; raise ToolchainError with the fix when there is none."""
    return _find_nvcc(_env_key())


@functools.lru_cache(maxsize=8)
def _find_nvcc(env: tuple[str | None, ...]) -> Nvcc:
    del env  # memo key only
    configured = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if configured:
        path = pathlib.Path(configured) / "bin" / "nvcc"
        if not path.is_file():
            var = "CUDA_HOME" if os.environ.get("CUDA_HOME") else "CUDA_PATH"
            raise ToolchainError(
                f"{var}={configured} has no bin/nvcc",
                fix=f"point {var} at a CUDA 12.8+ toolkit (the folder holding bin/nvcc), or unset it",
            )
        home: pathlib.Path | None = pathlib.Path(configured)
    else:
        found = shutil.which("nvcc")
        if found is None and pathlib.Path(_DEFAULT_CUDA_HOME, "bin", "nvcc").is_file():
            found = str(pathlib.Path(_DEFAULT_CUDA_HOME, "bin", "nvcc"))
        if found is None:
            raise ToolchainError(
                f"nvcc not found (CUDA_HOME unset, no nvcc on PATH, no {_DEFAULT_CUDA_HOME}/bin/nvcc)", fix=_NVCC_FIX
            )
        path = pathlib.Path(found)
        home = None
    try:
        version_text = _run_text([str(path), "--version"])
    except (OSError, subprocess.SubprocessError) as error:
        raise ToolchainError(f"{path} does not run: {error}", fix=_NVCC_FIX) from error
    match = re.search(r"release (\d+)\.(\d+)", version_text)
    if match is None:
        raise ToolchainError(
            f"cannot read the CUDA release from `{path} --version`", fix=_NVCC_FIX, detail=version_text
        )
    release = (int(match.group(1)), int(match.group(2)))
    if release < MIN_NVCC_RELEASE:
        raise ToolchainError(
            f"{path} is CUDA {release[0]}.{release[1]}; SGLang's JIT kernels need "
            f"{MIN_NVCC_RELEASE[0]}.{MIN_NVCC_RELEASE[1]}+",
            fix=_NVCC_FIX,
        )
    if home is None:
        home = _toolkit_root(path)
    return Nvcc(path=path, home=home, version_text=version_text, release=release)


def _toolkit_root(nvcc: pathlib.Path) -> pathlib.Path:
    """The toolkit folder, as nvcc itself reports it (``#$ TOP=...`` in a dry run)."""
    try:
        completed = subprocess.run(
            [str(nvcc), "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull],
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
        match = re.search(r"^#\$ TOP=(.+)$", completed.stderr + completed.stdout, re.MULTILINE)
        if match:
            return pathlib.Path(match.group(1).strip()).resolve()
    except (OSError, subprocess.SubprocessError):
        pass
    return nvcc.resolve().parent.parent


def find_host_compiler() -> str:
    """The C++ compiler that links modules (``$CXX`` or ``c++``, as SGLang uses)."""
    name = os.environ.get("CXX") or "c++"
    found = shutil.which(name)
    if found is None:
        raise ToolchainError(
            f"host C++ compiler {name!r} not found",
            fix="install g++ (e.g. `apt-get install g++`) or set CXX to a C++20 compiler",
        )
    return found


@functools.lru_cache(maxsize=8)
def _host_version(path: str) -> str:
    try:
        return _run_text([path, "--version"])
    except (OSError, subprocess.SubprocessError) as error:
        raise ToolchainError(f"host compiler {path} does not run: {error}", fix="reinstall g++ or set CXX") from error


def host_compiler_version() -> str:
    return _host_version(find_host_compiler())


@functools.lru_cache(maxsize=1)
def find_tvm_ffi() -> TvmFfi:
    """tvm-ffi's headers, dlpack headers and libtvm_ffi, from the installed wheel."""
    fix = f"pip install {TVM_FFI_PIN} (into this venv: `.venv/bin/pip install {TVM_FFI_PIN}`)"
    try:
        from importlib.metadata import PackageNotFoundError, version

        from tvm_ffi import libinfo
    except ImportError as error:
        raise ToolchainError(f"tvm-ffi is not installed ({error})", fix=fix) from error
    try:
        ffi_version = version("apache-tvm-ffi")
    except PackageNotFoundError as error:
        raise ToolchainError("tvm_ffi imports but apache-tvm-ffi has no package metadata", fix=fix) from error
    try:
        include_dir = pathlib.Path(libinfo.find_include_path())
        dlpack_dir = pathlib.Path(libinfo.find_dlpack_include_path())
        library = pathlib.Path(libinfo.find_libtvm_ffi())
    except (RuntimeError, OSError) as error:
        raise ToolchainError(f"tvm-ffi {ffi_version} is installed but incomplete: {error}", fix=fix) from error
    if not (include_dir / "tvm" / "ffi" / "function.h").is_file():
        raise ToolchainError(f"tvm-ffi headers missing under {include_dir}", fix=fix)
    return TvmFfi(include_dir=include_dir, dlpack_include_dir=dlpack_dir, library=library, version=ffi_version)


def toolchain_fingerprint() -> dict[str, str]:
    """Versions of everything outside the task's sources that shapes a build.

    Keys: ``nvcc`` (``nvcc --version`` text), ``nvcc_release`` (``"13.0"``),
    ``host_cc`` (``c++ --version`` text), ``tvm_ffi`` (package version). Paths are
    deliberately absent so the fingerprint is the same on every machine with the
    same toolchain.
    """
    nvcc = find_nvcc()
    return {
        "nvcc": nvcc.version_text,
        "nvcc_release": f"{nvcc.release[0]}.{nvcc.release[1]}",
        "host_cc": host_compiler_version(),
        "tvm_ffi": find_tvm_ffi().version,
    }


def find_demangler() -> str | None:
    """``cu++filt`` (the toolkit's, which knows CUDA's extensions) or else ``c++filt``; None if neither."""
    candidates: list[str] = []
    try:
        candidates.append(str(find_nvcc().home / "bin" / "cu++filt"))
    except ToolchainError:
        pass
    for name in ("cu++filt", "c++filt"):
        found = shutil.which(name)
        if found:
            candidates.append(found)
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def demangle(names: list[str]) -> dict[str, str | None]:
    """Demangle many names with one demangler process. A name that does not demangle
    (an ``extern "C"`` kernel) maps to itself; every name maps to None when no
    demangler is installed."""
    if not names:
        return {}
    tool = find_demangler()
    if tool is None:
        return {name: None for name in names}
    try:
        completed = subprocess.run(
            [tool], input="\n".join(names) + "\n", capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return {name: None for name in names}
    lines = completed.stdout.splitlines()
    if completed.returncode != 0 or len(lines) != len(names):
        return {name: None for name in names}
    return dict(zip(names, lines, strict=True))
