"""PyTorch references for ops whose contract names one (``contract.reference``).

Each reference has two faces:

- ``expected(call)``: the op's result in float64 on up-cast inputs, written from
  a reading of SGLang's kernel source (not from its tests). It is the second
  opinion next to the baseline kernel: it catches a candidate that is "equal to
  the baseline" only because both share a bug, and it checks the baseline itself
  in ``kernelsmith bench --all``.
- ``eager(call) -> (function, arguments)``: what a PyTorch user would write in the op's own dtype (the
  shape of SGLang's ``forward_native`` paths), timed by ``bench`` eagerly and
  through ``torch.compile`` as the yardstick a kernel must beat.

Semantics (from ``kernels/jit/csrc/elementwise/*.cuh`` of sglang 0.5.23):

- ``silu_and_mul``: input ``[T, 2H]``; gate = first H columns, up = last H;
  ``out = silu(gate) * up`` with ``silu(x) = x / (1 + exp(-x))``, computed in
  float32 and rounded once to the output dtype.
- ``rmsnorm``: ``out = x * rsqrt(mean(x^2) + eps) * w`` per row, float32 inside.
- ``fused_add_rmsnorm`` (``kCastXBeforeOutMul = false``, SGLang's default): in
  place. ``residual <- round(x + r)``; the sum of squares uses the unrounded
  float32 sum; ``input <- round(round(x + r) * w * rsqrt(mean((x + r)^2) + eps))``.

Tensors are matched to roles by name where the contract uses SGLang's names
(``input``, ``residual``, ``weight``, ``out``/``output``) and by position
otherwise. Imports torch lazily.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from optimize.harness.errors import ContractError

if TYPE_CHECKING:
    import torch

    from contract.plan import ScalarValue

    #: (function, its arguments): the op as a PyTorch user writes it, in the op's own dtype
    EagerCall = tuple[Callable[..., torch.Tensor | tuple[torch.Tensor, ...]], tuple[torch.Tensor | float, ...]]


@dataclass
class RefCall:
    """One call's tensors (logical views), by name, with the plan's roles and scalars."""

    names: Sequence[str]
    roles: Sequence[str]
    tensors: dict[str, torch.Tensor]
    scalars: dict[str, ScalarValue]

    def by_role(self, *roles: str) -> list[str]:
        return [n for n, r in zip(self.names, self.roles) if r in roles]

    def pick(self, roles: Sequence[str], preferred: Sequence[str], position: int) -> str:
        names = self.by_role(*roles)
        for want in preferred:
            for name in names:
                if name.lower() == want:
                    return name
        if position >= len(names):
            raise ContractError(
                f"reference needs a {'/'.join(roles)} tensor #{position}, the contract has {names}",
                fix="check contract.reference names the right op",
            )
        return names[position]

    def eps(self) -> float:
        for name, value in self.scalars.items():
            if "eps" in name.lower():
                return float(value)
        floats = [v for v in self.scalars.values() if isinstance(v, float)]
        if len(floats) == 1:
            return floats[0]
        raise ContractError("reference needs an eps scalar; the contract has none", fix="fix the contract")


def _silu_and_mul_expected(call: RefCall) -> dict[str, torch.Tensor]:
    x_name = call.pick(["input"], ["input", "x"], 0)
    out_name = call.pick(["output"], ["out", "output"], 0)
    op = call.scalars.get("type", call.scalars.get("op_name", "silu"))
    if op != "silu":
        raise ContractError(f"silu_and_mul reference called with activation {op!r}", fix="fix the contract scalars")
    x = call.tensors[x_name].double()
    hidden = call.tensors[out_name].shape[-1]
    if x.shape[-1] != 2 * hidden:
        raise ContractError(f"silu_and_mul: input width {x.shape[-1]} is not 2 x {hidden}", fix="fix the contract")
    gate, up = x[..., :hidden], x[..., hidden:]
    return {out_name: gate / (1.0 + (-gate).exp()) * up}


def _silu_and_mul_eager(call: RefCall) -> EagerCall:
    x = call.tensors[call.pick(["input"], ["input", "x"], 0)]
    return _silu_and_mul_native, (x,)


def _silu_and_mul_native(x: torch.Tensor) -> torch.Tensor:
    import torch.nn.functional as F

    hidden = x.shape[-1] // 2
    return F.silu(x[..., :hidden]) * x[..., hidden:]


def _rms(x64: torch.Tensor, eps: float) -> torch.Tensor:
    return (x64.pow(2).mean(dim=-1, keepdim=True) + eps).rsqrt()


def _rmsnorm_expected(call: RefCall) -> dict[str, torch.Tensor]:
    x_name = call.pick(["input"], ["input", "x"], 0)
    w_name = call.pick(["input"], ["weight", "w"], 1)
    out_name = call.pick(["output", "inout"], ["out", "output"], 0)
    x = call.tensors[x_name].double()
    w = call.tensors[w_name].double()
    return {out_name: x * _rms(x, call.eps()) * w}


def _rmsnorm_eager(call: RefCall) -> EagerCall:
    x = call.tensors[call.pick(["input"], ["input", "x"], 0)]
    w = call.tensors[call.pick(["input"], ["weight", "w"], 1)]
    return _rmsnorm_native, (x, w, call.eps())


def _rmsnorm_native(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    import torch

    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (h * w.float()).to(x.dtype)


def _fused_add_rmsnorm_expected(call: RefCall) -> dict[str, torch.Tensor]:
    x_name = call.pick(["inout"], ["input", "x"], 0)
    r_name = call.pick(["inout"], ["residual", "res"], 1)
    w_name = call.pick(["input"], ["weight", "w"], 0)
    x, r = call.tensors[x_name], call.tensors[r_name]
    h = x.double() + r.double()
    rounded = h.to(x.dtype).double()
    w = call.tensors[w_name].double()
    return {x_name: rounded * _rms(h, call.eps()) * w, r_name: rounded}


def _fused_add_rmsnorm_eager(call: RefCall) -> EagerCall:
    x = call.tensors[call.pick(["inout"], ["input", "x"], 0)]
    r = call.tensors[call.pick(["inout"], ["residual", "res"], 1)]
    w = call.tensors[call.pick(["input"], ["weight", "w"], 0)]
    return _fused_add_rmsnorm_native, (x, r, w, call.eps())


def _fused_add_rmsnorm_native(
    x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    s = x + r
    return _rmsnorm_native(s, w, eps), s


@dataclass(frozen=True)
class Reference:
    expected: Callable[[RefCall], dict[str, torch.Tensor]]  # float64 results by output tensor name
    eager: Callable[[RefCall], EagerCall]  # (function, its arguments)


REFERENCES: dict[str, Reference] = {
    "silu_and_mul": Reference(_silu_and_mul_expected, _silu_and_mul_eager),
    "rmsnorm": Reference(_rmsnorm_expected, _rmsnorm_eager),
    "fused_add_rmsnorm": Reference(_fused_add_rmsnorm_expected, _fused_add_rmsnorm_eager),
}


def get(name: str | None) -> Reference | None:
    """The reference a contract names; None when it names none; an error for an unknown name."""
    if name is None:
        return None
    if name not in REFERENCES:
        raise ContractError(
            f"contract names reference {name!r}, known: {', '.join(sorted(REFERENCES))}",
            fix="fix contract.reference or add the reference to optimize/harness/references.py",
        )
    return REFERENCES[name]
