"""optimize.harness.returned_outputs and the Triton library's returned outputs, with a stand-in torch.

The stand-in has what the hook touches: the factories, ``Tensor.new_*``, devices, shapes,
strides, dtypes and storages. The GPU half (a real wrapper's results in poisoned buffers) is
``tests/test_triton_library.py -m gpu``.
"""

from __future__ import annotations

import itertools
import types

import pytest

from optimize.harness import returned_outputs, triton_library
from optimize.harness.errors import HarnessError
from pipeline.records import ArgSpec, Contract, ScalarSpec, TensorSpec

POISON = float("nan")
_PTRS = itertools.count(1000, 1000)


class Device:
    def __init__(self, spec: str | Device) -> None:
        self.text: str = spec.text if isinstance(spec, Device) else spec
        kind, _, index = self.text.partition(":")
        self.type: str = kind
        self.index = int(index) if index else None


class Storage:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def data_ptr(self) -> int:
        return self.ptr


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


class Tensor:
    def __init__(self, shape, dtype="float32", device="cuda:0", value=POISON, ptr=None) -> None:
        self.shape, self.dtype, self.device = tuple(shape), dtype, Device(device)
        self.value = value
        self._storage = Storage(ptr if ptr is not None else next(_PTRS))

    def stride(self) -> tuple[int, ...]:
        return _contiguous(self.shape)

    def untyped_storage(self) -> Storage:
        return self._storage

    def fill_(self, value) -> Tensor:
        self.value = value
        return self

    def view(self, *shape) -> Tensor:
        return Tensor(shape, self.dtype, self.device.text, self.value, ptr=self._storage.ptr)

    def new_empty(self, size, *, dtype=None, device=None) -> Tensor:
        return _make(size, dtype or self.dtype, device or self.device, POISON)

    def new_full(self, size, fill_value, *, dtype=None, device=None) -> Tensor:
        return _make(size, dtype or self.dtype, device or self.device, fill_value)


def _make(size, dtype, device, value) -> Tensor:
    """A new tensor: ``size`` an int or a sequence, ``device`` a name, a Device or None (the CPU)."""
    shape = tuple(size) if isinstance(size, tuple | list) else (size,)
    name = device.text if isinstance(device, Device) else device
    return Tensor(shape, dtype, name or "cpu", value)


def fake_torch() -> types.SimpleNamespace:
    def factory(value):
        def make(*size, dtype="float32", device=None):
            return _make(size[0] if len(size) == 1 else size, dtype, device, value)

        return make

    def full(size, fill_value, *, dtype="float32", device=None):
        return _make(size, dtype, device, fill_value)

    def empty_like(x, *, dtype=None, device=None):
        return _make(x.shape, dtype or x.dtype, device or x.device, POISON)

    def zeros_like(x, *, dtype=None, device=None):
        return _make(x.shape, dtype or x.dtype, device or x.device, 0)

    return types.SimpleNamespace(
        Tensor=type("TorchTensor", (Tensor,), {}),  # what the hook patches: a subclass, as torch.Tensor is
        device=Device,
        get_default_device=lambda: "cpu",
        empty=factory(POISON),
        zeros=factory(0),
        ones=factory(1),
        full=full,
        empty_like=empty_like,
        zeros_like=zeros_like,
    )


def buffer(shape, dtype="float32") -> Tensor:
    return Tensor(shape, dtype, "cuda:0", POISON)


def test_matching_allocations_take_the_harness_buffers_and_keep_what_they_promise():
    torch = fake_torch()
    empty = torch.empty
    out, counts = buffer((4, 8), "bfloat16"), buffer((4,), "int32")
    x = torch.Tensor((4, 8), "bfloat16", "cuda:0", 1.0)
    with returned_outputs.claimed([out, counts], torch) as taken:
        scratch = torch.empty((4, 8), dtype="float32", device=x.device)  # another dtype: the wrapper's own
        host = torch.zeros(4, dtype="int32")  # on the CPU: the wrapper's own
        got_counts = torch.zeros((4,), dtype="int32", device="cuda")
        got_out = torch.empty_like(x)
        again = torch.empty_like(x)  # both buffers are given out: new memory
    assert got_out is out and got_counts is counts and taken == [True, True]
    assert out.value != out.value  # empty: still the poison, so an element never written is caught
    assert counts.value == 0  # zeros: filled as the wrapper's own allocation would have been
    assert scratch is not out and host is not counts and again is not out
    assert torch.empty is empty and "new_empty" not in vars(torch.Tensor)  # every hook undone


def test_a_tensor_method_allocation_takes_its_devices_buffer_and_its_fill():
    torch = fake_torch()
    gate = buffer((2, 3))
    x = torch.Tensor((2, 3), "float32", "cuda:0", 1.0)
    assert "new_full" not in vars(torch.Tensor)
    with returned_outputs.claimed([gate], torch):
        got = x.new_full((2, 3), 0.5)
    assert got is gate and gate.value == 0.5
    assert "new_full" not in vars(torch.Tensor)  # the inherited method is back, not shadowed


def test_the_hooks_are_undone_when_the_wrapper_raises():
    torch = fake_torch()
    original = torch.empty
    with pytest.raises(RuntimeError, match="boom"), returned_outputs.claimed([buffer((1,))], torch):
        raise RuntimeError("boom")
    assert torch.empty is original and "new_empty" not in vars(torch.Tensor)


#: the contract's arguments as the wrapper takes them: x, group_size, then the two returned outputs
QUANTIZE = ["x", "group_size", "", ""]


def _wrapper_with(torch, alloc):
    def quantize(x, group_size):
        scratch = torch.empty((x.shape[0],), dtype="float32", device=x.device)  # neither output's shape
        q = alloc(x)
        scale = torch.empty((x.shape[0], x.shape[1] // group_size), dtype="float32", device=x.device)
        del scratch
        return q, scale.view(x.shape[0], x.shape[1] // group_size)

    return quantize


def test_the_library_callable_passes_the_wrapper_its_own_arguments_and_checks_what_it_returns(monkeypatch):
    torch = fake_torch()
    monkeypatch.setattr(returned_outputs.importlib, "import_module", lambda name: torch)
    wrapper = _wrapper_with(torch, lambda x: torch.empty_like(x, dtype="fp8"))
    call = triton_library.returning_arguments(wrapper, "q.py::quantize", QUANTIZE, {"x_q": 0, "x_s": 1})
    x = torch.Tensor((4, 256), "bfloat16", "cuda:0", 1.0)
    x_q, x_s = buffer((4, 256), "fp8"), buffer((4, 2))
    q, scale = call(x, 128, x_q, x_s)  # the buffers come last and never reach the wrapper
    assert q is x_q and scale.untyped_storage().data_ptr() == x_s.untyped_storage().data_ptr()


def test_a_result_allocated_where_the_hook_cannot_see_it_is_unclaimed_with_the_fix(monkeypatch):
    torch = fake_torch()
    monkeypatch.setattr(returned_outputs.importlib, "import_module", lambda name: torch)
    private = Tensor((4, 256), "fp8", "cuda:0")  # e.g. a buffer the module kept from an earlier call
    wrapper = _wrapper_with(torch, lambda x: private)
    call = triton_library.returning_arguments(wrapper, "q.py::quantize", QUANTIZE, {"x_q": 0, "x_s": 1})
    x = torch.Tensor((4, 256), "bfloat16", "cuda:0", 1.0)
    with pytest.raises(returned_outputs.UnclaimedOutput, match=r"output x_q \(result item 0") as err:
        call(x, 128, buffer((4, 256), "fp8"), buffer((4, 2)))
    assert "torch.empty/zeros/full" in err.value.fix


def test_arguments_are_passed_by_keyword_so_a_keyword_only_output_parameter_is_reached():
    torch = fake_torch()
    seen = {}

    def quant(x, group_size=128, *, output_q=None):
        seen.update(group_size=group_size, output_q=output_q)
        return output_q

    call = triton_library.returning_arguments(quant, "q.py::quant", ["x", "output_q", "group_size"], {})
    x, out = torch.Tensor((4,), "float32", "cuda:0", 1.0), buffer((4,))
    assert call(x, out, 64) is out and seen == {"group_size": 64, "output_q": out}


def test_without_returned_outputs_a_tensor_of_its_own_is_still_stray():
    torch = fake_torch()
    call = triton_library.returning_arguments(lambda x: torch.empty((3,), device="cuda"), "f.py::g", ["x"], {})
    with pytest.raises(triton_library.StrayOutput, match="`returned`|returned a tensor of shape"):
        call(torch.Tensor((3,), "float32", "cuda:0", 1.0))


def _task_with(args: list[ArgSpec]):
    contract = Contract(entry="quantize", args=args, symbols=["m", "k"])
    return types.SimpleNamespace(op_id="q.quantize", contract=contract)


def _tensor(name, role, returned=None) -> ArgSpec:
    return ArgSpec(
        kind="tensor", tensor=TensorSpec(name=name, shape=["m", "k"], dtype="T", role=role, returned=returned)
    )


def test_returned_outputs_must_be_outputs_after_the_wrappers_arguments():
    scalar = ArgSpec(kind="scalar", scalar=ScalarSpec(name="group_size", type="int", value=128))
    good = _task_with([_tensor("x", "input"), scalar, _tensor("x_q", "output", 0), _tensor("x_s", "output", 1)])
    assert triton_library.returned_of(good) == {"x_q": 0, "x_s": 1}
    early = _task_with([_tensor("x_q", "output", 0), _tensor("x", "input"), scalar])
    with pytest.raises(HarnessError, match="must be outputs and the contract's last arguments") as err:
        triton_library.returned_of(early)
    assert "the wrapper's parameters first" in err.value.fix
    not_output = _task_with([_tensor("x", "input"), _tensor("x_q", "inout", 0)])
    with pytest.raises(HarnessError, match="x_q is not role output"):
        triton_library.returned_of(not_output)
    twice = _task_with([_tensor("x", "input"), _tensor("a", "output", 0), _tensor("b", "output", 0)])
    with pytest.raises(HarnessError, match="the same result item"):
        triton_library.returned_of(twice)


def test_each_argument_is_passed_as_the_wrapper_parameter_that_feeds_it():
    from pipeline.records import EntryParam, EntrySignature

    def param(name, kind="positional_or_keyword", feeds=None, via=""):
        return EntryParam(name=name, kind=kind, has_default=feeds is None, feeds=feeds, via=via)

    scalar = ArgSpec(kind="scalar", scalar=ScalarSpec(name="group_size", type="int", value=128))
    task = _task_with([_tensor("x", "input"), scalar, _tensor("x_q", "output"), _tensor("x_s", "output", 1)])
    task.entry_signature = EntrySignature(
        module="q",
        function="quantize",
        params=[
            param("x", feeds="x", via="name"),
            param("group_size", feeds="group_size", via="name"),
            param("eps"),  # feeds nothing: left at its default
            param("k", feeds="k", via="size"),  # a size the shapes state: never an argument of the call
            param("output_q", kind="keyword_only", feeds="x_q", via="call"),
        ],
    )
    assert triton_library.params_of(task) == ["x", "group_size", "output_q", ""]
    task.contract.args.insert(3, _tensor("y", "output"))  # not returned, and no parameter takes it
    with pytest.raises(HarnessError, match="contract argument y is no parameter of q.quantize") as err:
        triton_library.params_of(task)
    assert "`returned`" in err.value.fix
    task.entry_signature = None
    with pytest.raises(HarnessError, match="no entry signature"):
        triton_library.params_of(task)
