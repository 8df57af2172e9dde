"""A Triton op called the way SGLang's callers call it, with proof that the tree's kernels ran.

Runs inside :mod:`integrate.sglang_worker` (stdlib here; ``sglang`` and ``triton`` are imported
lazily, from the worker's one tree). The analogue, for a Triton op, of the worker's traced
``BaseFusedOp`` dispatch: where the wrapper is registered as a ``KernelSpec`` with the TRITON
backend, the callable is ``sglang.kernels.selector.get_kernel(op, KernelBackend.TRITON)``, the
path SGLang's ``ops.*`` wrappers take (the spec's ``target`` resolved by ``KernelSpec.load``); an
op with no registration is called as its public function.

The proof (:class:`Probe`), per call:

- the resolved callable *is* the public function of the module the plan names (the spec resolves
  to the wrapper the task was extracted from, not to another backend or a stale object);
- every launched kernel (the plan's ``triton.kernels``: module and name) is a Triton
  ``JITFunction``, possibly behind ``@triton.autotune`` / ``@triton.heuristics`` wrappers (followed
  through their ``fn``), whose Python function's file lies inside the worker's tree (the patched
  copy in the patched worker): the code Triton compiles is the tree's;
- the launches are counted: the innermost ``JITFunction``'s ``run`` is wrapped on the instance
  for the duration of the call (``kernel[grid](...)`` and the autotuner both end in it; a
  ``warmup=True`` call compiles without launching and is not counted). A call in which no kernel of
  the task launched is an error: the check would compare something other than the patched kernel.

What must stay true: the instance attribute is removed after the call, whatever happens (the
class's ``run`` is never touched); Triton compiles into the worker's private ``TRITON_CACHE_DIR``
(:func:`integrate.sglang_bare.private_cache_env`), so the two trees never share a compiled kernel.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class ProbeError(RuntimeError):
    """The call would not prove the tree's Triton kernel: said with what and where."""


def innermost(kernel: Any) -> Any:
    """The ``JITFunction`` under ``kernel`` (autotune and heuristics wrappers keep it in ``fn``)."""
    from triton.runtime.jit import JITFunction

    seen = 0
    while not isinstance(kernel, JITFunction):
        inner = getattr(kernel, "fn", None)
        if inner is None or seen > 8:
            raise ProbeError(f"{kernel!r} is not a Triton kernel (no JITFunction under it)")
        kernel, seen = inner, seen + 1
    return kernel


def kernel_file(jit: Any) -> str:
    """The file the kernel's Python function was defined in."""
    code = getattr(getattr(jit, "fn", None), "__code__", None)
    return os.path.realpath(code.co_filename) if code is not None else ""


class Probe:
    """One planned call's callable (through the KernelSpec where there is one) and its launch counter."""

    def __init__(self, triton: dict[str, Any], module: str, function: str, package: str) -> None:
        public = getattr(importlib.import_module(module), function)
        self.spec: str | None = triton.get("spec")
        if self.spec:
            from sglang.kernels.selector import get_kernel, select_kernel
            from sglang.kernels.spec import KernelBackend

            backend = KernelBackend(triton.get("backend", "triton"))
            spec = select_kernel(self.spec, backend=backend)
            self.fn: Callable[..., Any] = get_kernel(self.spec, backend)
            if self.fn is not public:
                raise ProbeError(
                    f"KernelSpec {self.spec} ({backend.value}) resolves to {spec.target}, not {module}:{function}; "
                    "the check would not call the function the task was extracted from"
                )
            self.via = f"KernelSpec {self.spec} (backend {backend.value}, get_kernel) -> {spec.target}"
        else:
            self.fn = public
            self.via = f"{module}:{function} (no KernelSpec registration)"
        root = os.path.realpath(package)
        self.kernels: dict[str, Any] = {}
        for entry in triton.get("kernels", []):
            name = f"{entry['module']}:{entry['name']}"
            jit = innermost(getattr(importlib.import_module(entry["module"]), entry["name"]))
            where = kernel_file(jit)
            if not where.startswith(root + os.sep):
                raise ProbeError(f"kernel {name} is defined in {where or 'an unknown file'}, outside the tree {root}")
            self.kernels[name] = jit
        if not self.kernels:
            raise ProbeError(f"the plan names no launched kernel of {module}:{function}")
        self.launches: dict[str, int] = dict.fromkeys(self.kernels, 0)

    @contextmanager
    def counting(self) -> Iterator[dict[str, int]]:
        """Count the kernels' launches during the block (instance-level wrappers, always removed)."""
        wrapped: list[Any] = []
        try:
            for name, jit in self.kernels.items():
                jit.run = self._counter(name, jit.run)
                wrapped.append(jit)
            yield self.launches
        finally:
            for jit in wrapped:
                vars(jit).pop("run", None)

    def _counter(self, name: str, run: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            if not kwargs.get("warmup", False):
                self.launches[name] += 1
            return run(*args, **kwargs)

        return counted

    def verdict(self) -> str:
        """ "" when a kernel of the task launched during the counted calls, else why the call proves nothing."""
        if any(self.launches.values()):
            return ""
        return f"no kernel of the task launched during the call ({', '.join(self.kernels)}): {self.via}"


__all__ = ["Probe", "ProbeError", "innermost", "kernel_file"]
