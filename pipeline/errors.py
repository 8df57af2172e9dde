"""Errors of the pipeline package.

Three separate families, because a user fixes each in a different place:
- :class:`ConfigError`: misconfiguration (bad config key, missing tool, no network,
  unknown op). Fixed by the user's setup.
- :class:`ModelError`: an LLM misbehaved (malformed reply, timeout, refusal).
  Recorded as an outcome; never crashes a run.
- :class:`BudgetExhausted`: a budget ran out. A clean stop, not a failure.

Every error carries ``fix``: one line saying how to make the problem go away, and
``detail``: the tool output that explains it (nvcc's stderr, the reply text).
"""

from __future__ import annotations

import errno
import os
import pathlib


class KernelsmithError(Exception):
    """Base class; ``str(err)`` is the one-line cause, then the fix, then detail."""

    exit_code = 1

    def __init__(self, message: str, *, fix: str = "", detail: str = "", where: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.detail = detail
        self.where = where

    def __str__(self) -> str:
        parts = [f"{self.where}: {self.message}" if self.where else self.message]
        if self.fix:
            parts.append(f"fix: {self.fix}")
        if self.detail:
            parts.append(self.detail.rstrip())
        return "\n".join(parts)


class ConfigError(KernelsmithError):
    """The user's setup is wrong: fix the config, the environment or the command line."""

    exit_code = 2


class SourceError(ConfigError):
    """The SGLang sources cannot be had (no such version, no network, bad path)."""


class ToolchainError(ConfigError):
    """A required tool (nvcc, ninja, tvm-ffi) is missing or unusable."""


class UnknownOpError(ConfigError):
    """An op id that the index does not know; the message lists the closest ones."""


class StaleRecordError(ConfigError):
    """A record on disk was written by another schema version, or is damaged (empty, truncated)."""


class NotWritable(ConfigError):
    """A folder kernelsmith must write (the work dir, a cache) is read-only or not ours."""


#: errno values meaning "this folder cannot be written" (permissions, read-only mount, immutable)
UNWRITABLE_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def not_writable(err: OSError, folder: str | os.PathLike[str]) -> NotWritable | None:
    """The typed error for an ``OSError`` met while writing under ``folder``: :class:`NotWritable`
    naming the folder when the folder refuses writes (the nearest one that exists: a folder it
    would have made is not the one to fix), else None (a full disk, a bad path: not this family;
    the caller re-raises ``err``)."""
    if err.errno not in UNWRITABLE_ERRNOS:
        return None
    named = pathlib.Path(folder)
    while named.is_absolute() and not named.exists() and named.parent != named:  # the one that refused
        named = named.parent
    return NotWritable(
        f"cannot write in {named}: {err.strerror or err}",
        fix="make the folder writable, or point --work-dir (KERNELSMITH_WORK_DIR) at a writable folder",
    )


class StageNotBuilt(KernelsmithError):
    """A stage that this version of kernelsmith does not implement yet."""

    exit_code = 3


class ModelError(KernelsmithError):
    """An LLM endpoint or its reply misbehaved."""


class BudgetExhausted(KernelsmithError):
    """A budget (rounds, tokens, dollars, wall or GPU time) ran out."""

    exit_code = 0
