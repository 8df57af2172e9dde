"""A Triton wrapper's returned outputs, made to land in the harness's poisoned buffers.

Why: most of SGLang's Triton wrappers allocate their results (``out = torch.empty(...)``,
``x.new_empty(...)``) and return them; the harness judges only buffers it passes and
poisons first. So for an output the contract marks ``returned`` (its index among the
leaves of what the wrapper returns), the harness passes a buffer after the wrapper's own
arguments, and while the wrapper runs, every tensor allocation through ``torch`` is
looked at (:func:`claimed`): the first allocation whose shape, strides, dtype and device
are those of an unclaimed buffer gets that buffer instead of new memory. What the
allocation promised is kept: ``empty*`` hands the buffer over as it is (holding the
poison, so an element the kernel never writes is still caught), ``zeros*``/``ones*``/
``full*`` fill it first, exactly as the wrapper's own allocation would have been filled.
Nothing else changes: an allocation that matches no buffer is the wrapper's own scratch,
and the GPU work of a call is the wrapper's own (an ``empty`` costs no kernel either way),
so timing stays faithful. Inside a CUDA-graph capture the buffers are the captured
addresses, as the harness's graph replays need.

After the call, :func:`check` asks that each returned leaf *is* its buffer (a view of it:
same storage); otherwise the wrapper allocated the result some other way (an allocation
the hook cannot see, or a scratch tensor of the same shape allocated first), and
:class:`UnclaimedOutput` says which.

What must stay true: the patched names are restored after the call, whatever happens
(for a name :class:`torch.Tensor` only inherits, the override is deleted, not re-set); the
shape of an allocation is learned on the ``meta`` device, so a claimed one costs no
memory and no kernel; a buffer is given out at most once per call. Importing this module
needs no torch (the worker's), and the tests pass a stand-in module.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

from optimize.harness.errors import HarnessError

if TYPE_CHECKING:
    import torch

# torch.<name>(...): the factories whose result a wrapper returns, and what each promises to hold
_FACTORIES = {
    "empty": "empty",
    "zeros": "zeros",
    "ones": "ones",
    "full": "full",
    "empty_like": "empty",
    "zeros_like": "zeros",
    "ones_like": "ones",
    "full_like": "full",
}
# tensor.<name>(...): the same, as methods of an existing tensor
_METHODS = {"new_empty": "empty", "new_zeros": "zeros", "new_ones": "ones", "new_full": "full"}


class UnclaimedOutput(HarnessError):
    """A returned output is not the buffer the harness passed for it (see the module docstring)."""


class TorchModule(Protocol):
    """What :func:`claimed` reads of torch: the module itself in the worker, a stand-in in the tests (the
    factories of ``_FACTORIES`` and ``get_default_device`` are reached by name)."""

    Tensor: type
    device: Callable[[object], torch.device]


def _fill_value(kind: str, args: tuple[object, ...], kwargs: Mapping[str, object]) -> object:
    if kind == "zeros":
        return 0
    if kind == "ones":
        return 1
    # full(size, fill_value), full_like(x, fill_value), x.new_full(size, fill_value): always the second
    return kwargs["fill_value"] if "fill_value" in kwargs else args[1]


def _device_of(
    torch: TorchModule, args: tuple[object, ...], kwargs: Mapping[str, object], *, source: torch.Tensor | None
) -> torch.device:
    """Where the allocation would live: ``device=``, else the source tensor's, else torch's default."""
    device = kwargs.get("device")
    if device is None and source is not None:
        return source.device
    if device is None:
        default = getattr(torch, "get_default_device", None)
        return torch.device(default() if default is not None else "cpu")
    return torch.device(device)


def _same_device(want: torch.device, have: torch.device) -> bool:
    if want.type != have.type:
        return False
    return want.index is None or have.index is None or want.index == have.index


class _Claims:
    def __init__(self, torch: TorchModule, buffers: Sequence[torch.Tensor]) -> None:
        self.torch = torch
        self.buffers = list(buffers)
        self.taken = [False] * len(self.buffers)

    def match(self, meta: torch.Tensor, device: torch.device) -> int | None:
        for i, buf in enumerate(self.buffers):
            if self.taken[i]:
                continue
            if (
                tuple(meta.shape) == tuple(buf.shape)
                and meta.dtype == buf.dtype
                and tuple(meta.stride()) == tuple(buf.stride())
                and _same_device(device, buf.device)
            ):
                return i
        return None

    def hook(
        self, original: Callable[..., torch.Tensor], kind: str, *, method: bool, like: bool
    ) -> Callable[..., torch.Tensor]:
        """``original`` handing out a matching buffer instead. ``method``: a ``Tensor`` method, whose
        first argument is ``self``; ``like``: a ``*_like`` factory, whose first argument is the
        tensor copied. Either way that tensor's device is the allocation's unless ``device=`` says."""

        def allocate(*args: object, **kwargs: object) -> torch.Tensor:
            if all(self.taken):
                return original(*args, **kwargs)
            source = args[0] if (method or like) and args else None
            try:
                meta = original(*args, **{**kwargs, "device": "meta"})
                device = _device_of(self.torch, args, kwargs, source=source)
            except Exception:  # noqa: BLE001 - an allocation the meta device refuses is the wrapper's own
                return original(*args, **kwargs)
            index = self.match(meta, device)
            if index is None:
                return original(*args, **kwargs)
            self.taken[index] = True
            buf = self.buffers[index]
            if kind != "empty":
                rest = args[1:] if method else args  # then the fill value is the second, as for full(size, v)
                buf.fill_(_fill_value(kind, rest, kwargs))
            return buf

        return allocate


@contextmanager
def claimed(buffers: Sequence[torch.Tensor], torch_module: TorchModule | None = None) -> Iterator[list[bool]]:
    """While active, torch's allocations that match ``buffers`` return them (the list says which were taken)."""
    torch = torch_module if torch_module is not None else importlib.import_module("torch")  # the worker's
    claims = _Claims(torch, buffers)
    tensor_cls = torch.Tensor
    saved: list[
        tuple[object, str, Callable[..., object], bool]
    ] = []  # (owner, name, original, owned by that class itself)
    try:
        for name, kind in _FACTORIES.items():
            original = getattr(torch, name, None)
            if original is not None:
                saved.append((torch, name, original, True))
                setattr(torch, name, claims.hook(original, kind, method=False, like=name.endswith("_like")))
        for name, kind in _METHODS.items():
            original = getattr(tensor_cls, name, None)
            if original is not None:
                saved.append((tensor_cls, name, original, name in vars(tensor_cls)))
                setattr(tensor_cls, name, claims.hook(original, kind, method=True, like=False))
        yield claims.taken
    finally:
        for owner, name, original, own in reversed(saved):
            if own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)


def leaves(value: object) -> Iterator[object]:
    """Every item of a (nested) tuple, list or dict result, in order; anything else is one leaf."""
    if isinstance(value, list | tuple):
        for item in value:
            yield from leaves(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from leaves(item)
    else:
        yield value


def check(
    result: object, buffers: Sequence[torch.Tensor], returned: Sequence[int], names: Sequence[str], where: str
) -> None:
    """Each returned leaf ``returned[i]`` is (a view of) ``buffers[i]``; else :class:`UnclaimedOutput`."""
    items = list(leaves(result))
    for buf, index, name in zip(buffers, returned, names, strict=True):
        leaf = items[index] if index < len(items) else None
        storage = getattr(leaf, "untyped_storage", None)
        if storage is not None and storage().data_ptr() == buf.untyped_storage().data_ptr():
            continue
        got = (
            f"returned {len(items)} item(s)"
            if leaf is None
            else f"returned at item {index} a tensor of shape {tuple(getattr(leaf, 'shape', ()))} of its own"
        )
        raise UnclaimedOutput(
            f"{where}: output {name} (result item {index}, shape {tuple(buf.shape)}, {buf.dtype}) was not allocated "
            f"into the harness's buffer: the wrapper {got}",
            fix="the wrapper must allocate that result through torch.empty/zeros/full(_like) or tensor.new_* with "
            "the contract's shape and dtype, before any scratch tensor of the same shape; otherwise correct the "
            f"curated contract's `returned` index or shape for {name}",
        )
