#!/usr/bin/env python3
"""Fetch the header-only build dependencies SGLang's JIT ops name (`make deps`).

    python3 tools/fetch-deps.py [DEST]        # default .dev/deps

Downloads the flashinfer wheel (no dependencies) with pip, checks it against its pinned
sha256 (WHEEL_SHA256) and unpacks only its
bundled header folders (pipeline.deps.CARRIED: CUTLASS/CuTe, flashinfer's include,
spdlog) into DEST/flashinfer/, with DEST/flashinfer/VERSION naming the wheel. About
4 MB compressed: small enough to carry to the GPU machine. Then set
HEADER_DEPS_DIR=DEST (tools/device-setup.sh does on the GPU machine).
"""

from __future__ import annotations

import hashlib
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.deps import CARRIED  # noqa: E402

WHEEL = "flashinfer-python==0.7.4"  # the release whose headers the tasks were built against
#: the sha256 of that release's wheel (flashinfer_python-0.7.4-py3-none-any.whl): checked before use
WHEEL_SHA256 = "a051a62e09a2738e8b0de47a1944fd2f0f3eff01b728b662141ea660cb09dd32"


def wheel_problem(wheel: pathlib.Path) -> str | None:
    """Why the downloaded wheel must not be used (not the pinned bytes), or None."""
    digest = hashlib.sha256()
    with open(wheel, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    actual = digest.hexdigest()
    return None if actual == WHEEL_SHA256 else f"{wheel.name} has sha256 {actual}, the pin is {WHEEL_SHA256}"


def main(argv: list[str]) -> int:
    dest = pathlib.Path(argv[0] if argv else ROOT / ".dev" / "deps")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", tmp, WHEEL]
        if subprocess.run(cmd).returncode != 0:
            print(f"fetch-deps: `{' '.join(cmd)}` failed (is PyPI reachable?)", file=sys.stderr)
            return 1
        (wheel,) = pathlib.Path(tmp).glob("flashinfer_python-*.whl")
        problem = wheel_problem(wheel)
        if problem is not None:
            print(f"fetch-deps: {problem}; nothing written (re-run; a download cut short?)", file=sys.stderr)
            return 1
        staging = dest.parent / f".{dest.name}.staging"
        shutil.rmtree(staging, ignore_errors=True)
        with zipfile.ZipFile(wheel) as archive:
            prefixes = tuple(f"flashinfer/{rel}/" for rel in CARRIED)
            members = [m for m in archive.namelist() if m.startswith(prefixes)]
            archive.extractall(staging, members)
        (staging / "flashinfer" / "VERSION").write_text(wheel.name + "\n", encoding="utf-8")
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(dest)  # publish by rename: a half-written tree is never used
    print(f"fetch-deps: {len(members)} headers from {wheel.name} -> {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
