"""Errors of the optimize stage (see :mod:`pipeline.errors` for the families).

Why these exist as separate types: the loop must tell apart a problem the user
fixes (no GPU, bad replay file, corrupt trajectory), an LLM that misbehaved (the
round records it and goes on) and a budget that ran out (a clean stop). Every
message names the file or endpoint involved and carries the fix.
"""

from __future__ import annotations

from contract.errors import TaskMissing
from pipeline.errors import BudgetExhausted, ConfigError, KernelsmithError, ModelError


class GpuRequired(ConfigError):
    """Evaluation needs a CUDA GPU and none is usable here.

    Never caught by the loop: a run without a GPU and without ``--replay`` must
    stop before spending anything, and say how to get real numbers.
    """


class ReplayError(ConfigError):
    """A replay file is missing, malformed, or has no entry for a candidate."""


class SearchError(ConfigError):
    """The search strategy is unknown, or Kernel Tuner (which provides the strategies) is not installed."""


class TrajectoryError(ConfigError):
    """A trajectory file on disk cannot be read as this version writes it."""


class MalformedReply(ModelError):
    """An LLM reply that cannot be turned into region texts (recorded, never fatal)."""


class MalformedBody(MalformedReply):
    """The endpoint answered 200 with a body that is not a chat completion (bad JSON, HTML, no choices).

    Retried like a 5xx (a proxy or a server mid-restart sends these), and never cached.
    """


class EndpointError(ModelError):
    """The LLM endpoint failed after every retry (429/5xx/timeout/connection)."""


class ScriptExhausted(LookupError):
    """A test fake ran out of scripted replies.

    Deliberately *not* a :class:`ModelError`: the loop records model errors as
    round outcomes and goes on, which would hide a test whose script is too short.
    """


__all__ = [
    "SearchError",
    "BudgetExhausted",
    "ConfigError",
    "EndpointError",
    "GpuRequired",
    "KernelsmithError",
    "MalformedBody",
    "MalformedReply",
    "ModelError",
    "ReplayError",
    "ScriptExhausted",
    "TaskMissing",
    "TrajectoryError",
]
