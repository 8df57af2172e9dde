"""The JSON the SGLang tree worker (:mod:`integrate.sglang_worker`) reads and answers, one line each way.

Why a module of its own: the worker runs as a script inside an SGLang tree's environment and needs none
of this at run time (it reads and writes plain dicts); the types are what the runner
(:mod:`integrate.sglang_runner`) and the worker agree on, for mypy and for the reader. The worker imports
this module for type checking only.

What must stay true: a key added to a request or an answer is added here, with its meaning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NotRequired, TypedDict

if TYPE_CHECKING:
    from contract.plan import ScalarValue


class ParamRequest(TypedDict):
    """One parameter of the public function, as :func:`integrate.calls.plan_case` sends it."""

    name: str
    kind: str  # inspect's parameter kind: positional_only, keyword_only, var_positional, ...
    feeds: str | None  # the contract argument (or size) it takes; None: it keeps its default
    via: str  # "size", "build" or ""
    value: NotRequired[ScalarValue]  # via "build": the run-time value the module was built for


class TensorRequest(TypedDict):
    """A :class:`contract.plan.TensorPlan`'s fields in JSON (tuples as lists)."""

    name: str
    role: str
    dtype: str
    shape: list[int]
    strides: list[int]
    offset: int
    storage_numel: int
    value_range: list[float] | None
    structure: str | None
    order: str | None


class TensorPlanFields(TypedDict):
    """A :class:`TensorRequest` as :class:`contract.plan.TensorPlan` takes it (the lists as tuples)."""

    name: str
    role: str
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    storage_numel: int
    value_range: tuple[float, float] | None
    structure: str | None
    order: str | None


class CheckRequest(TypedDict):
    """``check``: one planned call (:func:`integrate.calls.plan_case`, labelled by ``plan_op``, the mode by the runner)."""

    cmd: str
    op: str
    module: str
    function: str
    tensors: list[TensorRequest]
    scalars: dict[str, ScalarValue]
    sizes: dict[str, int]
    params: list[ParamRequest]
    dtype: str
    label: str
    seed: int
    key: str
    triton: NotRequired[dict[str, object]]  # integrate.calls.triton_request, passed to the Probe as it is
    mode: NotRequired[str]  # save | compare | run (the default)
    path: NotRequired[str]  # save / compare: the file of the pristine tree's observations


class WarmRequest(TypedDict):
    """``warm``: one check request per JIT module (:func:`integrate.calls.warm_cases`)."""

    cmd: str
    cases: list[CheckRequest]


class CompareAnswer(TypedDict):
    """The verdict :func:`_compare` adds to a ``check`` answer (only ``status`` and ``reason`` when it stops early)."""

    status: str  # pass | fail | error
    reason: str
    bitwise_equal: NotRequired[bool]
    max_abs_err: NotRequired[float | None]


class CheckAnswer(TypedDict):
    """The answer to ``check``; ``status`` and ``reason`` where the call was refused or compared."""

    ok: bool
    first_call_s: float | None
    outputs: list[str]
    poisoned: bool
    backends: list[str]
    fused_op: bool
    via: str
    launches: dict[str, int]
    status: NotRequired[str]
    reason: NotRequired[str]
    bitwise_equal: NotRequired[bool]
    max_abs_err: NotRequired[float | None]


class WarmAnswer(TypedDict):
    ok: bool
    seconds: float
    modules: int
    errors: dict[str, str]  # module key -> what its build or call raised
    first_call_s: dict[str, float | None]


class PingAnswer(TypedDict):
    ok: bool
    torch: str
    cuda: str | None
    device: str | None
    kernel_path: str
    package: str


class ErrorAnswer(TypedDict):
    """A request that failed (an unknown command has no traceback)."""

    ok: bool
    error: str
    traceback: NotRequired[str]
    usable: NotRequired[bool]


__all__ = [
    "CheckAnswer",
    "CheckRequest",
    "CompareAnswer",
    "ErrorAnswer",
    "ParamRequest",
    "PingAnswer",
    "TensorPlanFields",
    "TensorRequest",
    "WarmAnswer",
    "WarmRequest",
]
