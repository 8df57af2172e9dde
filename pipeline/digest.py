"""The content of kernelsmith's own sources, as one digest: the one way a cache key
covers the code that computed what it caches.

Each content-addressed cache whose value depends on our code (a task's
``.extract-key``, the sweep's verdict key) names the sources it depends on as glob
patterns relative to the repository root, and hashes them with :func:`source_digest`.

What must stay true: a pattern that matches nothing adds nothing (a module split into
a package is named by both spellings while it moves), and each file enters the digest
with its root-relative path, so a file moved between covered folders changes the key.
"""

from __future__ import annotations

import functools
import hashlib
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]  # the repository (or site-packages) root


@functools.lru_cache(maxsize=64)
def source_digest(patterns: tuple[str, ...]) -> str:
    """SHA-256 (hex) over every file matching ``patterns`` (globs relative to
    :data:`ROOT`), in pattern order then path order. Taken once per process per tuple."""
    digest = hashlib.sha256()
    for pattern in patterns:
        for path in sorted(ROOT.glob(pattern)):
            if path.is_file():
                digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


#: Every source folder of the project: what "this kernelsmith" is when no git commit names it.
PROJECT_SOURCES = tuple(
    f"{pkg}/**/*.py"
    for pkg in ("pipeline", "contract", "source", "extract", "optimize", "bench", "integrate", "agent", "cli")
)


def kernelsmith_version() -> str:
    """The git commit of this checkout, else ``src:<digest>`` of its sources; with uncommitted
    changes ``<commit>+dirty src:<digest>``.

    Recorded with every measurement batch, so a figure says which code measured it. The device
    machine gets a copy of the working tree, often without ``.git`` or with an older HEAD under
    a newer tree (on the H200, 2026-12-02, every batch said the session's first commit
    ``+dirty``): the digest of the sources then names the code that ran, and
    ``source_digest(PROJECT_SOURCES)`` at a commit says whether it is that one.
    """
    import subprocess

    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode == 0 and head.stdout.strip():
            dirty = subprocess.run(
                ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=10,
            )
            if not dirty.stdout.strip():
                return head.stdout.strip()[:12]
            return f"{head.stdout.strip()[:12]}+dirty src:{source_digest(PROJECT_SOURCES)[:12]}"
    except (OSError, subprocess.TimeoutExpired):
        pass
    return "src:" + source_digest(PROJECT_SOURCES)[:12]
