"""Errors of the integrate stage (families in :mod:`pipeline.errors`).

- :class:`PatchError`: the patch could not be made or failed a verification
  (a changed byte outside the editable regions, a diff that does not apply, a
  source file that differs from the one the task was extracted from). Nothing
  is published when it is raised: the SGLang tree and earlier outputs are as
  they were.
- :class:`WorkerError`: a GPU worker subprocess died, hung or answered nonsense;
  the message carries the tail of its stderr; :class:`WorkerTimeout` when it hung
  and was killed at its time limit.
- :class:`GitError`: ``--git-branch`` could not commit (not a checkout, branch
  exists, dirty files); the checkout is left untouched.
  :class:`SimulatedRunError` is the one raised for a run whose timings were
  replayed (nothing measured): such a patch is never committed.
- :class:`RecipeError`: a layer recipe (``integrate/layers/*.toml``) is invalid;
  the message names the file, the entry and the fix.
"""

from __future__ import annotations

from pipeline.errors import ConfigError, KernelsmithError, SourceError, StaleRecordError


class PatchError(KernelsmithError):
    """A patch could not be produced or did not verify; nothing was changed."""


class WorkerError(KernelsmithError):
    """A worker subprocess (one SGLang tree on the GPU) failed."""


class CallRaised(WorkerError):
    """The op raised in a worker that stays usable (its CUDA context answered a synchronize afterwards).

    Why a type of its own: restarting a worker costs about 12 s (torch and SGLang imported
    again; measured on the H200, 2026-12-02), so after a plain Python error (an assert in
    SGLang's wrapper, a rejected argument) the same worker goes on. Every other
    :class:`WorkerError` (a dead worker, a sticky CUDA error, a hang) means a fresh one.
    """


class WorkerTimeout(WorkerError):
    """A worker did not answer within its time limit and was killed (a call that never returns)."""


class GitError(ConfigError):
    """A git operation for --git-branch was refused or failed."""


class SimulatedRunError(GitError):
    """--git-branch on a run whose figures were replayed, not measured: refused, nothing committed."""


class RecipeError(ConfigError):
    """A layer recipe file is invalid (fixed by editing the file)."""


def broke_with(err: BaseException) -> str:
    """What a broken step records: our errors' own message, else the exception's type and text."""
    return err.message if isinstance(err, KernelsmithError) else f"{type(err).__name__}: {err}"


__all__ = [
    "broke_with",
    "ConfigError",
    "GitError",
    "KernelsmithError",
    "PatchError",
    "RecipeError",
    "SimulatedRunError",
    "SourceError",
    "StaleRecordError",
    "WorkerError",
    "WorkerTimeout",
]
