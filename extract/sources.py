"""Getting SGLang's kernel sources: the pinned wheel by default, or a local tree.

The wheel is downloaded with pip (no dependencies) into ``<cache>/wheels``, checked
against its pinned sha256 (:data:`WHEEL_SHA256`, the one place the pins live; a wheel
with no pin, another version or platform, must at least be an intact zip), and unpacked once into ``<cache>/sglang-<version>/`` (staging folder + rename, then
made read-only), so every later run reads the same bytes without the network.

``SGLANG_SRC`` / ``--sglang PATH`` accepts either an installed ``sglang`` package
directory (the one holding ``kernels/``) or a git checkout (``python/sglang``
inside it). A checkout may also carry the AOT tree ``kernels/aot/csrc``.

A release up to 0.5.16 keeps its JIT kernels in the older ``jit_kernel/`` layout; it is read the
same way (:mod:`extract.jit_layout`).

What must stay true: nothing here imports torch or sglang; the package root we
return always holds the ``csrc/`` of a layout extract reads; a cached wheel that fails its check
(a download cut short) is never unpacked: it is downloaded again.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import uuid
import zipfile

from extract.errors import SourceError
from extract.jit_layout import LAYOUTS, OLDER, layout_of
from pipeline.records import SourceInfo

AOT_DIR = "kernels/aot/csrc"

#: sha256 of each sglang wheel file this project reads, by file name (pip picks the one
#: matching the running CPython: 3.11 on the CPU machine, 3.12 on the GPU machine).
WHEEL_SHA256 = {
    "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl": "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937",
    "sglang-0.5.23-cp312-cp312-manylinux_2_34_x86_64.whl": "8d257a319395b322bb1be327d05e5528859358153c8563b04c0a4a3c8af164b6",
}


def acquire(version: str, cache_dir: pathlib.Path, src: str | None = None) -> SourceInfo:
    """Return where the sources are, downloading and unpacking the wheel if needed."""
    if src:
        return _local(pathlib.Path(src).expanduser())
    return _wheel(version, cache_dir)


def unread_layout(source: SourceInfo) -> str | None:
    """Why a source has no CUDA JIT kernels extract can read, in one line, or None when it has some."""
    if source.jit_dirs:
        return None
    where = f"sglang {source.version}" if source.version else str(source.root)
    folders = " or ".join(f"{layout.csrc_dir}/" for layout in LAYOUTS)
    return f"{where} has no {folders}: no CUDA task comes from it; its Triton ops are read as usual"


def layout_note(source: SourceInfo) -> str | None:
    """One line when a source is read in the older layout (its op ids renamed to the newer ones), else None."""
    if source.jit_dirs != [OLDER.jit_dir]:
        return None
    where = f"sglang {source.version}" if source.version else str(source.root)
    return (
        f"{where} keeps its JIT kernels in the older `{OLDER.jit_dir}/` layout; its ops take the ids the "
        f"newer layout gives the same functions ({len(OLDER.renamed)} renamed, extract/jit_layout_ids.json)"
    )


def _has_jit(root: pathlib.Path) -> bool:
    return any((root / layout.csrc_dir).is_dir() for layout in LAYOUTS)


def _layout(root: pathlib.Path) -> tuple[list[str], list[str]]:
    jit = [layout_of(root).jit_dir] if _has_jit(root) else []
    aot = [AOT_DIR] if (root / AOT_DIR).is_dir() else []
    return jit, aot


def _local(path: pathlib.Path) -> SourceInfo:
    if not path.exists():
        raise SourceError(
            f"SGLANG_SRC={path} does not exist",
            fix="point SGLANG_SRC (or --sglang) at an sglang checkout or an installed sglang package folder",
        )
    candidates = [path, path / "python" / "sglang", path / "sglang"]
    root = next((c for c in candidates if _has_jit(c)), None)
    if root is None:
        raise SourceError(
            f"{path} holds no SGLang JIT kernel tree ({' or '.join(f'{layout.csrc_dir}' for layout in LAYOUTS)})",
            fix="use a checkout of sglang with python/sglang/kernels/jit, or an sglang>=0.5.23 package folder",
        )
    commit = None
    # A checkout is a git work tree whose top holds python/sglang (this root). A
    # package folder that merely sits inside some other repository (an unpacked
    # wheel under a project's work/ folder) is not one: its commit would be that
    # project's, not SGLang's.
    top = root.parent.parent
    if root == top / "python" / "sglang" and (top / ".git").exists():
        try:
            commit = subprocess.run(
                ["git", "-C", str(top), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            commit = None
    version = None
    version_file = root / "version.py"
    if version_file.is_file():
        for line in version_file.read_text(errors="replace").splitlines():
            if line.startswith("__version__"):
                version = line.split("=", 1)[1].strip().strip("\"'")
    jit, aot = _layout(root)
    return SourceInfo(
        kind="checkout" if commit else "package",
        root=str(root.resolve()),
        version=version,
        commit=commit,
        jit_dirs=jit,
        aot_dirs=aot,
    )


def _wheel(version: str, cache_dir: pathlib.Path) -> SourceInfo:
    unpacked = cache_dir / f"sglang-{version}"
    root = unpacked / "sglang"
    if not _has_jit(root):
        wheel = _download(version, cache_dir / "wheels")
        _unpack(wheel, unpacked)
    wheel_name = next((p.name for p in (cache_dir / "wheels").glob(f"sglang-{version}-*.whl")), None)
    jit, aot = _layout(root)
    return SourceInfo(
        kind="wheel", root=str(root.resolve()), version=version, wheel=wheel_name, jit_dirs=jit, aot_dirs=aot
    )


def sha256_of(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def wheel_problem(wheel: pathlib.Path) -> str | None:
    """Why ``wheel`` must not be used (its sha256 is not its pin; no pin and not an intact
    zip), or None when it is good."""
    pin = WHEEL_SHA256.get(wheel.name)
    if pin is not None:
        actual = sha256_of(wheel)
        return None if actual == pin else f"sha256 {actual[:16]}... is not the pinned {pin[:16]}..."
    try:
        with zipfile.ZipFile(wheel) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError) as err:
        return f"not a readable wheel ({err})"
    return f"member {bad} is damaged" if bad else None


def _download(version: str, dest: pathlib.Path) -> pathlib.Path:
    for wheel in sorted(dest.glob(f"sglang-{version}-*.whl")):
        problem = wheel_problem(wheel)
        if problem is None:
            return wheel
        print(f"cached {wheel} is unusable ({problem}): downloading it again", file=sys.stderr)
        wheel.unlink()
    dest.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(dest),
        f"sglang=={version}",
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as err:
        raise SourceError(
            f"downloading sglang=={version} timed out",
            fix="check the network to PyPI, or set SGLANG_SRC to a local sglang tree",
        ) from err
    if done.returncode != 0:
        err_text = _pip_errors(done.stderr)
        if "No matching distribution" in err_text or "Could not find a version" in err_text:
            raise SourceError(
                f"sglang=={version} is not on the package index",
                fix="set KERNELSMITH_SGLANG__VERSION to a published version (`pip index versions sglang`)",
                detail=err_text,
            )
        raise SourceError(
            f"could not download sglang=={version} (no network?)",
            fix="connect to PyPI once (the wheel is cached after), or set SGLANG_SRC to a local sglang tree",
            detail=err_text,
        )
    found = sorted(dest.glob(f"sglang-{version}-*.whl"))
    if not found:
        raise SourceError(f"pip reported success but no sglang-{version} wheel is in {dest}", fix="re-run")
    problem = wheel_problem(found[0])
    if problem is not None:
        found[0].unlink()
        raise SourceError(
            f"the downloaded {found[0].name} fails its check: {problem}",
            fix="re-run (a download cut short); if it fails again, the index serves other bytes than the pin "
            "in extract/sources.py WHEEL_SHA256: set SGLANG_SRC to a tree you trust",
        )
    return found[0]


def _pip_errors(stderr: str) -> str:
    """What pip said went wrong: its ERROR lines (its warnings about index locations are noise here),
    each cut to its last 300 characters (the newest versions of a "from versions: ..." list)."""
    lines = [line for line in stderr.strip().splitlines() if line.startswith("ERROR:")] or stderr.strip().splitlines()[
        -3:
    ]
    return "\n".join(line if len(line) <= 300 else "..." + line[-300:] for line in lines)


def _unpack(wheel: pathlib.Path, target: pathlib.Path) -> None:
    """Unpack only the sglang/ tree, in a staging folder, publish by rename, then make read-only."""
    staging = target.parent / f".staging-{uuid.uuid4().hex}"
    try:
        try:
            with zipfile.ZipFile(wheel) as archive:
                members = [m for m in archive.namelist() if m.startswith("sglang/")]
                archive.extractall(staging, members)
        except (zipfile.BadZipFile, EOFError) as err:
            raise SourceError(
                f"{wheel} cannot be unpacked: {err}", fix=f"delete {wheel} and re-run (it is downloaded again)"
            ) from err
        if target.exists():
            _make_writable(target)
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    _make_read_only(target)


def _make_read_only(root: pathlib.Path) -> None:
    for path in sorted(root.rglob("*"), reverse=True):
        mode = path.stat().st_mode
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _make_writable(root: pathlib.Path) -> None:
    for path in [root, *root.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
