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
- ``warm``: build, concurrently, every JIT module a list of cases needs.
- ``check``: build seeded inputs for one op at (rows, width, dtype), poison the
  outputs, call the public op; ``mode=save`` writes the outputs to ``path``,
  ``mode=compare`` loads the other tree's outputs from ``path`` and judges
  them with the optimize stage's comparison rules
  (:func:`optimize.harness.compare.compare_tensor`); ``mode=run`` only runs
  (for compute-sanitizer).
- ``layer``: CUDA-graph timing of one whole decoder layer from its recipe's plan
  (:mod:`integrate.layer_worker`, the e2e proxy).
- ``exit``.

``--oneshot FILE`` runs a JSON list of requests and prints the answers: the
form compute-sanitizer launches.

Imports: stdlib, torch, the tree, and (for the comparison and timing rules)
``optimize.harness.compare`` / ``optimize.harness.timing``, which are pure
Python. No pydantic here.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from typing import Any, Callable

# op id -> (module, function) of SGLang's public op. silu_and_mul is a BaseFusedOp
# (one entry point, several backends): the parent sets SGLANG_FORCE_FUSED_OP_BACKEND=jit
# and every call is traced to prove the JIT backend (the patched source) ran.
PUBLIC_OPS: dict[str, tuple[str, str]] = {
    "activation.silu_and_mul": ("sglang.kernels.ops.activation", "silu_and_mul"),
    "layernorm.rmsnorm": ("sglang.kernels.ops.layernorm.norm", "rmsnorm"),
    "layernorm.fused_add_rmsnorm": ("sglang.kernels.ops.layernorm.norm", "fused_add_rmsnorm"),
}
FUSED_OPS = {"activation.silu_and_mul"}

# Poison bit patterns: NaNs with a payload no arithmetic produces (canonical NaNs are 0x7FC0 / 0x7FC00000).
POISON_BITS = {"bf16": 0x7FA5, "fp16": 0x7DA5, "fp32": 0x7FA5A5A5}


def _torch_dtype(name: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def _bits(tensor):
    import torch

    return tensor.view(torch.int32 if tensor.dtype == torch.float32 else torch.int16)


def _poisoned(shape, dtype: str):
    import torch

    out = torch.empty(shape, dtype=_torch_dtype(dtype), device="cuda")
    pattern = POISON_BITS[dtype]
    if dtype != "fp32" and pattern >= 0x8000:
        pattern -= 0x10000
    _bits(out).fill_(pattern)
    return out


def _public(op_id: str) -> Callable:
    import importlib

    if op_id not in PUBLIC_OPS:
        raise KeyError(f"no public-op adapter for {op_id}; known: {', '.join(sorted(PUBLIC_OPS))}")
    module, name = PUBLIC_OPS[op_id]
    return getattr(importlib.import_module(module), name)


class Case:
    """Seeded inputs of one op call and the tensors it writes."""

    def __init__(self, op_id: str, rows: int, width: int, dtype: str, seed: int, eps: float) -> None:
        import torch

        self.op_id, self.dtype = op_id, dtype
        gen = torch.Generator(device="cuda")
        gen.manual_seed(seed)
        tdt = _torch_dtype(dtype)

        def randn(*shape, scale: float = 1.0, shift: float = 0.0):
            return (torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32) * scale + shift).to(tdt)

        fn = _public(op_id)
        if op_id == "activation.silu_and_mul":
            if width % 2:
                raise ValueError(f"silu_and_mul needs an even input width, got {width}")
            x = randn(rows, width)
            out = _poisoned((rows, width // 2), dtype)
            self.inputs = {"input": x}
            self.outputs = {"out": out}
            self.poisoned = True
            self.call = lambda: fn(x, out)
        elif op_id == "layernorm.rmsnorm":
            x, w = randn(rows, width), randn(width, scale=0.1, shift=1.0)
            out = _poisoned((rows, width), dtype)
            self.inputs = {"input": x, "weight": w}
            self.outputs = {"out": out}
            self.poisoned = True
            self.call = lambda: fn(x, w, out, eps)
        elif op_id == "layernorm.fused_add_rmsnorm":
            x, res, w = randn(rows, width), randn(rows, width), randn(width, scale=0.1, shift=1.0)
            self.inputs = {"input": x, "residual": res, "weight": w}
            self.outputs = {"input": x, "residual": res}  # written in place
            self.poisoned = False
            self.call = lambda: fn(x, res, w, eps)
        else:  # pragma: no cover - guarded by _public
            raise KeyError(op_id)
        self.checksum = {k: float(v.double().abs().sum().item()) for k, v in self.inputs.items()}


_first_calls: dict[tuple[str, str, int], float] = {}


class _dispatch_trace:
    """Collect the backends SGLang's fused-op dispatch used during the block (fused ops only)."""

    def __init__(self, op_id: str) -> None:
        self.active = op_id in FUSED_OPS
        self.backends: list[str] = []

    def __enter__(self) -> list[str]:
        if self.active:
            from sglang.kernels import fused_op

            fused_op.clear_fused_op_trace()
            fused_op.enable_fused_op_trace()
        return self.backends

    def __exit__(self, *exc) -> None:
        if self.active:
            from sglang.kernels import fused_op

            fused_op.disable_fused_op_trace()
            self.backends.extend(sorted({r.backend for r in fused_op.get_fused_op_trace()}))
            fused_op.clear_fused_op_trace()


def cmd_check(req: dict[str, Any]) -> dict[str, Any]:
    import torch

    case = Case(req["op"], int(req["rows"]), int(req["width"]), req["dtype"], int(req["seed"]), float(req["eps"]))
    # the JIT module depends on (op, dtype) and, for rmsnorm, the width
    key = (req["op"], req["dtype"], int(req["width"]) if req["op"] == "layernorm.rmsnorm" else 0)
    torch.cuda.synchronize()
    start = time.perf_counter()
    with _dispatch_trace(req["op"]) as backends:
        case.call()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    first_call_s = None
    if key not in _first_calls:
        _first_calls[key] = first_call_s = elapsed
    answer: dict[str, Any] = {
        "ok": True,
        "first_call_s": first_call_s,
        "outputs": sorted(case.outputs),
        "poisoned": case.poisoned,
        "backends": backends,
    }
    if req["op"] in FUSED_OPS and backends != ["jit"]:
        answer.update(status="error", reason=f"SGLang dispatched {req['op']} to {backends}, not the JIT backend")
        return answer
    mode = req.get("mode", "run")
    if mode == "save":
        torch.save(
            {"outputs": {k: v.cpu() for k, v in case.outputs.items()}, "checksum": case.checksum},
            req["path"],
        )
    elif mode == "compare":
        answer.update(_compare(case, req))
    return answer


def _compare(case: Case, req: dict[str, Any]) -> dict[str, Any]:
    import torch

    from optimize.harness.compare import Tolerance, compare_tensor

    other = torch.load(req["path"], map_location="cuda", weights_only=True)
    for name, value in case.checksum.items():
        theirs = other["checksum"].get(name)
        if theirs is None or not math.isclose(value, theirs, rel_tol=0.0, abs_tol=0.0):
            return {"status": "error", "reason": f"input {name} differs between the two workers ({value} vs {theirs}): seeded generation is not reproducible here"}
    tol = Tolerance(rtol=float(req["rtol"]), atol=float(req["atol"]), ref_rel=0.0)
    pattern = POISON_BITS[case.dtype]
    if case.dtype != "fp32" and pattern >= 0x8000:
        pattern -= 0x10000
    bitwise, max_abs, reasons = True, None, []
    for name, got in case.outputs.items():
        expected = other["outputs"][name]
        if tuple(expected.shape) != tuple(got.shape) or expected.dtype != got.dtype:
            return {"status": "fail", "reason": f"{name}: shape/dtype {tuple(got.shape)}/{got.dtype} vs baseline {tuple(expected.shape)}/{expected.dtype}"}
        gb, eb = _bits(got), _bits(expected)
        verdict = compare_tensor(
            name,
            expected,
            got,
            case.dtype,
            shape=tuple(got.shape),
            not_written=(gb == pattern) if case.poisoned else None,
            expected_not_written=(eb == pattern) if case.poisoned else None,
            expected_bits=eb,
            got_bits=gb,
            tol=tol,
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


def cmd_warm(req: dict[str, Any]) -> dict[str, Any]:
    """Build every JIT module the coming checks need, concurrently, with SGLang's own parallel_compile.

    One 1-row call of the public op per distinct module (op, dtype, and the
    width for rmsnorm, whose kernel is specialised on it). A build that fails is
    reported, not raised: the check of that case will say what happened.
    """
    import torch

    from sglang.kernels.jit.utils import parallel_compile

    keys: dict[tuple[str, str, int], dict[str, Any]] = {}
    for case in req["cases"]:
        key = (case["op"], case["dtype"], int(case["width"]) if case["op"] == "layernorm.rmsnorm" else 0)
        keys.setdefault(key, case)
    errors: dict[str, str] = {}

    def builder(key: tuple[str, str, int], case: dict[str, Any]) -> Callable[[], None]:
        def build() -> None:
            try:
                Case(case["op"], 1, int(case["width"]), case["dtype"], 0, float(req.get("eps", 1e-6))).call()
                _first_calls.setdefault(key, 0.0)
            except Exception as err:  # noqa: BLE001 - reported per module
                errors[f"{key[0]} {key[1]} width={case['width']}"] = f"{type(err).__name__}: {err}"

        return build

    start = time.perf_counter()
    parallel_compile([builder(k, c) for k, c in keys.items()])
    torch.cuda.synchronize()
    return {"ok": True, "seconds": time.perf_counter() - start, "modules": len(keys), "errors": errors}


# --------------------------------------------------------------------------- main


def _ping(package: str) -> dict[str, Any]:
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


def handle(req: dict[str, Any], package: str) -> dict[str, Any]:
    try:
        cmd = req.get("cmd")
        if cmd == "ping":
            return _ping(package)
        if cmd == "check":
            return cmd_check(req)
        if cmd == "warm":
            return cmd_warm(req)
        if cmd == "layer":
            from integrate.layer_worker import cmd_layer  # the script's path is set in main()

            return cmd_layer(req)
        return {"ok": False, "error": f"unknown command {cmd!r}"}
    except Exception as err:  # noqa: BLE001 - every failure goes back to the parent as data
        return {"ok": False, "error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-6000:]}


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
