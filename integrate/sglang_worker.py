"""A worker process bound to ONE SGLang tree: calls SGLang's public ops on the GPU.

Started by :mod:`integrate.sglang_runner` (and :mod:`integrate.e2e`) as

    python integrate/sglang_worker.py --package <tree>/sglang --kernelsmith <repo root>

with the private cache variables of :func:`integrate.sglang_bare.private_cache_env`
in its environment. It installs ``sglang`` from that tree
(:mod:`integrate.sglang_bare`), so ``sglang.kernels.ops.*`` and SGLang's own
``load_jit`` compile and load the tree's sources; one process can only ever
hold one tree (SGLang registers its ops in torch's global op registry), which
is why baseline and patched run in two workers.

Protocol: one JSON request per line on stdin, one JSON answer per line on the
original stdout. Everything else (SGLang's and nvcc's output, ``print``) goes
to stderr: fd 1 is pointed at fd 2 before anything is imported. Commands:

- ``ping``: device, torch version, the tree's kernel path.
- ``warm``: build, concurrently, every JIT module a list of planned calls needs
  (one call per module).
- ``check``: one planned call (:mod:`integrate.calls`: the public function's
  module and name, the harness's TensorPlans of the tensors it is given, the
  scalars, and which parameter feeds which contract argument). The worker fills
  seeded storages with the harness's own filling rules
  (:func:`optimize.harness.inputs.make_images`: values, value ranges, offsets and
  distinct draws, NaN-poisoned outputs), calls the function by parameter name and
  observes everything it can change: every tensor it was given, after the call,
  and what it returned. ``mode=save`` writes them to ``path``; ``mode=compare``
  loads the other tree's from ``path`` and judges them with the optimize stage's
  rules (:func:`optimize.harness.compare.compare_tensor`); ``mode=run`` only runs
  (for compute-sanitizer). A public function backed by a ``BaseFusedOp`` (found
  by its ``op`` attribute, not by name) is called through it with every call
  traced, so the check proves the JIT backend ran. A Triton op (the request's
  ``triton``) is called through its ``KernelSpec`` (``get_kernel``) with its
  kernels' launches counted (:mod:`integrate.triton_probe`): a call that launched
  none of them is an error; the answer's ``via`` and ``launches`` say what ran.
  Where the tree's registry holds a ``KernelBackend.KDA`` spec for the op (a rewrite
  landed beside its JIT kernel, :mod:`integrate.landing`), the spec's target is counted
  (``launches["kda:<target>"]``): whether the public function's dispatch reached it.
- ``layer``: CUDA-graph timing of one whole decoder layer from its recipe's plan
  (:mod:`integrate.layer_worker`, the e2e proxy).
- ``exit``.

``--oneshot FILE`` runs a JSON list of requests and prints the answers: the
form compute-sanitizer launches.

Imports: stdlib, torch, the tree, and the harness's rules:
``optimize.harness.compare`` and ``optimize.harness.timing`` (pure Python) and
``optimize.harness.inputs`` for filling tensors, which still imports
:mod:`pipeline.records` (pydantic) until its torch half has a module of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    import torch
    from sglang.kernels.fused_op import BaseFusedOp

    from contract.plan import ScalarValue
    from integrate.triton_probe import Probe
    from integrate.worker_protocol import (
        CheckAnswer,
        CheckRequest,
        CompareAnswer,
        ErrorAnswer,
        ParamRequest,
        PingAnswer,
        TensorPlanFields,
        WarmAnswer,
        WarmRequest,
    )


def _torch_dtype(name: str) -> torch.dtype:
    from optimize.harness.inputs import torch_dtype

    return torch_dtype(name)


# --------------------------------------------------------------------------- checks


def _short_dtype(dtype: torch.dtype) -> str:
    """torch dtype -> the harness's short spelling (bf16, int32, ...)."""
    from contract.dtypes import ITEMSIZE
    from optimize.harness.inputs import torch_dtype

    for short in ITEMSIZE:
        if torch_dtype(short) == dtype:
            return short
    raise KeyError(f"no harness spelling for torch dtype {dtype}")


def fused_op_of(op_id: str, module_name: str) -> BaseFusedOp | None:
    """The BaseFusedOp instance SGLang registered for ``op_id`` (its ``op`` attribute), looked
    for in the public function's module and its parent packages; None when there is none.

    Such an op has several backends behind one entry point: the parent forces the JIT one
    (``SGLANG_FORCE_FUSED_OP_BACKEND=jit``) and every call through it is traced, so a check
    proves the JIT backend (the patched source) ran.
    """
    import importlib

    try:
        from sglang.kernels.fused_op import BaseFusedOp
    except ImportError:
        return None
    parts = module_name.split(".")
    for depth in range(len(parts), 3, -1):  # down to the op's group package, sglang.kernels.ops.<group>
        try:
            module = importlib.import_module(".".join(parts[:depth]))
        except Exception:  # noqa: BLE001 - a package that does not import here holds no op we can call
            continue
        for value in vars(module).values():
            if isinstance(value, BaseFusedOp) and getattr(value, "op", None) == op_id:
                return value
    return None


def bind(
    params: Sequence[ParamRequest],
    tensors: Mapping[str, torch.Tensor],
    scalars: Mapping[str, ScalarValue],
    sizes: Mapping[str, int],
) -> tuple[list[object], dict[str, object]]:
    """(positional, keyword) arguments of the public function: each parameter that feeds a
    contract argument gets that tensor or scalar (a ``via="size"`` one the size), by name;
    positional-only ones by position; a ``via="build"`` one the run-time value the module was
    built for (``"value"``). A parameter that feeds nothing keeps its default."""
    args: list[object] = []
    kwargs: dict[str, object] = {}
    skipped = None
    for param in params:
        feeds = param.get("feeds")
        value: object
        if param["via"] == "build":
            value = param["value"]
        elif feeds is None:
            if param["kind"] == "positional_only":
                skipped = param["name"]
            continue
        elif param["via"] == "size":
            value = int(sizes[feeds])
        elif feeds in tensors:
            value = tensors[feeds]
        elif feeds in scalars:
            value = scalars[feeds]
        else:
            raise KeyError(f"parameter {param['name']} feeds {feeds}, which the plan does not hold")
        if param["kind"] == "positional_only":
            if skipped is not None:
                raise ValueError(
                    f"positional-only parameter {param['name']} follows {skipped}, which the plan leaves out"
                )
            args.append(value)
        elif param["kind"] in ("var_positional", "var_keyword"):
            raise ValueError(f"parameter *{param['name']} cannot be bound to one contract argument")
        else:
            kwargs[param["name"]] = value
    return args, kwargs


def _accepts(method: Callable[..., object] | None, args: Sequence[object], kwargs: Mapping[str, object]) -> bool:
    import inspect

    if method is None:
        return False
    try:
        inspect.signature(method).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return False
    return True


class Call:
    """One planned call of a public op: seeded storages from the plan, the bound arguments,
    and everything the call can change (the tensors it is given, what it returns)."""

    def __init__(self, req: CheckRequest) -> None:
        import importlib

        import torch

        from contract import plan as planning
        from optimize.harness import inputs

        self.req = req
        module = importlib.import_module(req["module"])
        self.probe: Probe | None = None
        self.fused = fused_op_of(req["op"], req["module"]) if req.get("triton") is None else None
        self.fn: Callable[..., object] = self.fused if self.fused is not None else getattr(module, req["function"])
        self.kda = _kda_counted(req["op"])
        if req.get("triton") is not None:
            from integrate.triton_probe import Probe

            self.probe = Probe(req["triton"], req["module"], req["function"], _PACKAGE[0])
            self.fn = self.probe.fn
        plans = []
        for t in req["tensors"]:
            vr = t.get("value_range")
            fields: TensorPlanFields = {
                **t,
                "shape": tuple(t["shape"]),
                "strides": tuple(t["strides"]),
                "value_range": cast("tuple[float, float]", tuple(vr)) if vr is not None else None,
            }
            plans.append(planning.TensorPlan(**fields))
        self.plan = planning.CallPlan(args=tuple(plans), sizes=dict(req["sizes"]))
        gen = torch.Generator(device="cuda")
        gen.manual_seed(int(req["seed"]))
        images = inputs.make_images(self.plan, "normal", gen, "cuda")
        self.buffers = inputs.Buffers(self.plan, "cuda")
        self.buffers.load(images)
        self.checksum = {
            t.name: int(images[t.name].view(inputs.bits_dtype(t.dtype)).to(torch.int64).sum().item())
            for t in plans
            if t.filled
        }
        self.poisoned = {t.name for t in plans if t.role == "output"}
        self.args, self.kwargs = bind(req["params"], self.buffers.views, req["scalars"], req["sizes"])
        if self.fused is not None and not _accepts(getattr(self.fused, "forward_jit", None), self.args, self.kwargs):
            self.fused = None  # its JIT backend takes other parameters: call the JIT function itself
            self.fn = getattr(module, req["function"])
        self.returned: object = None

    def __call__(self) -> None:
        self.returned = self.fn(*self.args, **self.kwargs)

    def observed(self) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
        """(tensors, other values): every tensor argument but scratch after the call ("arg:<name>") and
        what the call returned ("return", "return[i]"); values that are no tensor by repr. A
        returned tensor that is an argument's very view (same storage, shape, strides, dtype:
        ``merge_state_triton`` returns its ``output``) is recorded as that argument, compared as
        such, and not saved twice."""
        import torch

        scratch = {t.name for t in self.plan.tensors if t.role == "scratch"}  # SGLang's own scratch: never compared
        tensors = {f"arg:{name}": view for name, view in self.buffers.views.items() if name not in scratch}
        views = {
            (v.data_ptr(), tuple(v.shape), v.stride(), v.dtype): name
            for name, v in self.buffers.views.items()
            if v.numel() > 0
        }
        other: dict[str, str] = {}
        returned = self.returned
        items = list(enumerate(returned)) if isinstance(returned, (tuple, list)) else [(None, returned)]
        for index, value in items:
            key = "return" if index is None else f"return[{index}]"
            alias = None
            if isinstance(value, torch.Tensor) and value.numel() > 0:
                alias = views.get((value.data_ptr(), tuple(value.shape), value.stride(), value.dtype))
            if alias is not None:
                other[key] = f"the argument {alias}"
            elif isinstance(value, torch.Tensor):
                tensors[key] = value
            else:
                other[key] = repr(value)
        return tensors, other


_first_calls: dict[str, float] = {}
_kda_calls: dict[str, int] = {}  # a KDA KernelSpec's target -> calls that reached it


def _kda_counted(op: str) -> str | None:
    """The target of ``op``'s KDA KernelSpec in this tree, every call of it counted from now on;
    None where the registry has none. The count wraps the target where the registry loads it from,
    and the selector's cache is cleared, so ``get_kernel(op, KernelBackend.KDA)`` hands out the
    counted function: a call counts only if the public function's own dispatch reached it."""
    import importlib

    try:
        from sglang.kernels import selector
        from sglang.kernels.registry import registry
        from sglang.kernels.spec import KernelBackend
    except ImportError:  # a tree from before SGLang's kernel registry
        return None
    spec = next((s for s in registry.get(op) if s.backend == KernelBackend.KDA), None)
    if spec is None:
        return None
    target = spec.target
    if target not in _kda_calls:
        module_name, _, attr = target.partition(":")
        module = importlib.import_module(module_name)
        inner = getattr(module, attr)

        def counted(*args: object, **kwargs: object) -> object:
            _kda_calls[target] += 1
            return inner(*args, **kwargs)

        _kda_calls[target] = 0
        setattr(module, attr, counted)
        selector._resolve.cache_clear()
    return target


_PACKAGE: list[str] = [""]  # the tree's sglang package folder (main sets it)


class _dispatch_trace:
    """Collect the backends SGLang's fused-op dispatch used during the block (BaseFusedOp ops only)."""

    def __init__(self, active: bool) -> None:
        self.active = active
        self.backends: list[str] = []

    def __enter__(self) -> list[str]:
        if self.active:
            from sglang.kernels import fused_op

            fused_op.clear_fused_op_trace()
            fused_op.enable_fused_op_trace()
        return self.backends

    def __exit__(self, *exc: object) -> None:
        if self.active:
            from sglang.kernels import fused_op

            fused_op.disable_fused_op_trace()
            self.backends.extend(sorted({r.backend for r in fused_op.get_fused_op_trace()}))
            fused_op.clear_fused_op_trace()


def _launches(probe: Probe | None) -> AbstractContextManager[dict[str, int]]:
    """The probe's launch counter over the call (a Triton op), else an empty one."""
    import contextlib

    return probe.counting() if probe is not None else contextlib.nullcontext({})


def _progress(text: str) -> None:
    """One line in the worker's log (its stderr) before a step that may not return: a hang names its case."""
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def cmd_check(req: CheckRequest) -> CheckAnswer:
    """Build the planned call, run it once; ``mode`` save / compare / run (see the module docstring)."""
    import torch

    _progress(f"check {req.get('op')} {req.get('key')} {req.get('mode', 'run')}")
    call = Call(req)
    torch.cuda.synchronize()
    start = time.perf_counter()
    kda_before = _kda_calls.get(call.kda or "", 0)
    with _dispatch_trace(call.fused is not None) as backends, _launches(call.probe) as launches:
        call()
    torch.cuda.synchronize()
    via = call.probe.via if call.probe is not None else ""
    if call.kda is not None:
        reached = _kda_calls[call.kda] - kda_before
        launches = {**launches, f"kda:{call.kda}": reached}
        via = (
            f"KernelSpec {req['op']} (backend KDA, get_kernel) -> {call.kda}"
            if reached
            else "its JIT kernel (outside the KDA guard)"
        )
    elapsed = time.perf_counter() - start
    first_call_s = None
    if req["key"] not in _first_calls:
        _first_calls[req["key"]] = first_call_s = elapsed
    tensors, other = call.observed()
    answer: CheckAnswer = {
        "ok": True,
        "first_call_s": first_call_s,
        "outputs": sorted(tensors),
        "poisoned": bool(call.poisoned),
        "backends": backends,
        "fused_op": call.fused is not None,
        "via": via,
        "launches": dict(launches),
    }
    if call.fused is not None and backends != ["jit"]:
        answer.update(
            {"status": "error", "reason": f"SGLang dispatched {req['op']} to {backends}, not the JIT backend"}
        )
        return answer
    if call.probe is not None and call.probe.verdict():
        answer.update({"status": "error", "reason": call.probe.verdict()})
        return answer
    mode = req.get("mode", "run")
    if mode == "save":
        torch.save(
            {"tensors": {k: v.detach().cpu() for k, v in tensors.items()}, "other": other, "checksum": call.checksum},
            req["path"],
        )
    elif mode == "compare":
        answer.update(_compare(call, tensors, other, req))
    return answer


def _compare(
    call: Call, tensors: Mapping[str, torch.Tensor], other: Mapping[str, str], req: CheckRequest
) -> CompareAnswer:
    """Judge everything observable against the other tree's (the pristine one's) with the harness's rules."""
    import torch

    from optimize.harness.compare import compare_tensor, in_order, tolerance
    from optimize.harness.inputs import bits_dtype, poison_value

    theirs = torch.load(req["path"], map_location="cuda", weights_only=True)
    for name, value in call.checksum.items():
        if theirs["checksum"].get(name) != value:
            return {
                "status": "error",
                "reason": f"input {name} differs between the two workers ({value} vs {theirs['checksum'].get(name)}): seeded generation is not reproducible here",
            }
    if set(theirs["tensors"]) != set(tensors):
        return {
            "status": "fail",
            "reason": f"observed tensors {sorted(tensors)} vs baseline {sorted(theirs['tensors'])}",
        }
    reasons: list[str] = []
    for key, shown in sorted(other.items()):
        if theirs["other"].get(key) != shown:
            reasons.append(f"{key} = {shown} vs baseline {theirs['other'].get(key)}")
    bitwise, max_abs = not reasons, None
    orders = {f"arg:{t.name}": t.order for t in call.plan.tensors}
    for name, got in sorted(tensors.items()):
        expected = theirs["tensors"][name]
        if tuple(expected.shape) != tuple(got.shape) or expected.dtype != got.dtype:
            return {
                "status": "fail",
                "reason": f"{name}: shape/dtype {tuple(got.shape)}/{got.dtype} vs baseline {tuple(expected.shape)}/{expected.dtype}",
            }
        short = _short_dtype(got.dtype)
        got, expected = in_order(got, orders.get(name)), in_order(expected, orders.get(name))
        gb, eb = got.contiguous().view(bits_dtype(short)), expected.contiguous().view(bits_dtype(short))
        poisoned = name.startswith("arg:") and name[4:] in call.poisoned
        pattern = poison_value(short)
        verdict = compare_tensor(
            name,
            expected,
            got,
            short,
            shape=tuple(got.shape),
            not_written=(gb == pattern) if poisoned else None,
            expected_not_written=(eb == pattern) if poisoned else None,
            expected_bits=eb,
            got_bits=gb,
            tol=tolerance(short),
        )
        bitwise = bitwise and bool(verdict.bitwise_equal)
        if verdict.max_abs_err is not None:
            max_abs = verdict.max_abs_err if max_abs is None else max(max_abs, verdict.max_abs_err)
        if not verdict.ok:
            reasons.append(verdict.reason)
    return {
        "status": "fail" if reasons else "pass",
        "reason": "; ".join(reasons),
        "bitwise_equal": bitwise,
        "max_abs_err": max_abs,
    }


def cmd_warm(req: WarmRequest) -> WarmAnswer:
    """Build every JIT module the coming checks need, concurrently, with SGLang's own parallel_compile.

    ``cases``: one planned call per module (the parent's :func:`integrate.calls.warm_cases`),
    each run once. A build or call that fails is reported per module, not raised: the
    check of that case will say what happened.
    """
    import torch
    from sglang.kernels.jit.utils import parallel_compile

    errors: dict[str, str] = {}

    def builder(case: CheckRequest) -> Callable[[], None]:
        def build() -> None:
            try:
                _progress(f"warm {case.get('op')} {case['key']}")
                start = time.perf_counter()
                Call(case)()
                _first_calls.setdefault(case["key"], time.perf_counter() - start)
            except Exception as err:  # noqa: BLE001 - reported per module
                errors[case["key"]] = f"{type(err).__name__}: {err}"

        return build

    start = time.perf_counter()
    serial = [builder(c) for c in req["cases"] if c.get("triton") is not None]
    parallel_compile([builder(c) for c in req["cases"] if c.get("triton") is None])
    for build in serial:  # Triton's JIT: one compile at a time (its in-process caches are not made for threads)
        build()
    torch.cuda.synchronize()
    return {
        "ok": True,
        "seconds": time.perf_counter() - start,
        "modules": len(req["cases"]),
        "errors": errors,
        "first_call_s": {c["key"]: _first_calls.get(c["key"]) for c in req["cases"]},
    }


def _ping(package: str) -> PingAnswer:
    import torch
    from sglang.kernels.jit.utils.compile.paths import KERNEL_PATH

    return {
        "ok": True,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "kernel_path": str(KERNEL_PATH),
        "package": package,
    }


def handle(
    req: dict[str, object], package: str
) -> CheckAnswer | WarmAnswer | PingAnswer | ErrorAnswer | dict[str, object]:
    """The answer to one request (``req``: a JSON object whose ``cmd`` says which protocol it follows)."""
    try:
        cmd = req.get("cmd")
        if cmd == "ping":
            return _ping(package)
        if cmd == "check":
            return cmd_check(cast("CheckRequest", req))
        if cmd == "warm":
            return cmd_warm(cast("WarmRequest", req))
        if cmd == "layer":
            from integrate.layer_worker import cmd_layer  # the script's path is set in main()

            return cmd_layer(req)
        return {"ok": False, "error": f"unknown command {cmd!r}"}
    except Exception as err:  # noqa: BLE001 - every failure goes back to the parent as data
        return {
            "ok": False,
            "error": f"{type(err).__name__}: {err}",
            "traceback": traceback.format_exc()[-6000:],
            "usable": _cuda_usable(),
        }


def _cuda_usable() -> bool:
    """Whether this process can go on after a failed request: CUDA errors are sticky, so a context
    that no longer synchronizes means the parent must start a fresh worker."""
    try:
        import torch

        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
        return True
    except Exception:  # noqa: BLE001 - any failure here means: not usable
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", required=True, help="the sglang package folder of the tree to load")
    parser.add_argument("--kernelsmith", required=True, help="kernelsmith's repository root (for optimize.harness)")
    parser.add_argument("--oneshot", help="JSON file with a list of requests; print the answers and exit")
    args = parser.parse_args(argv)

    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything written to stdout (C or Python) now lands on stderr
    sys.stdout = sys.stderr

    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0]) == here:
        sys.path.pop(0)  # the script's folder would shadow nothing useful and expose integrate/*
    from importlib import import_module

    sys.path.append(os.path.abspath(args.kernelsmith))
    import_module("integrate.sglang_bare").install(args.package)
    _PACKAGE[0] = args.package

    if args.oneshot:
        with open(args.oneshot, encoding="utf-8") as handle_:
            requests = json.load(handle_)
        answers = [handle(req, args.package) for req in requests]
        proto.write(json.dumps(answers) + "\n")
        return 0 if all(a.get("ok") for a in answers) else 1

    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        if req.get("cmd") == "exit":
            proto.write(json.dumps({"ok": True}) + "\n")
            break
        proto.write(json.dumps(handle(req, args.package)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
