"""Compile check of a Triton task without a GPU: ``triton.compile`` for ``GPUTarget("cuda", 90, 32)``.

Triton compiles on a CPU machine: ``triton.compiler.ASTSource(fn, signature, constexprs)``
with an explicit target runs the whole pipeline (TTIR, TTGIR, LLVM IR, PTX, and the cubin
through the ptxas triton ships) with neither a GPU nor torch. SGLang's modules import torch,
so they are never imported: :func:`kernel_module` writes, from the task's ``src/`` copy, a
module holding only the file's triton imports, its literal module constants and its
``@triton.jit`` functions (autotune and heuristics decorators dropped: the check passes
their values itself), and the worker (``python -m extract.triton_compile SPEC``, one process
per task, so a compiler crash or hang costs that task alone) imports that.

What the compiler needs per launched kernel is read from the wrapper at one shape case
(:func:`extract.triton_launch_values.launch_values`): each launch argument is evaluated over
the contract (a tensor is a pointer of its dtype; ``x.shape[i]``, ``x.size(i)`` and ``x.stride(i)`` are the case's sizes
and contiguous strides; ``triton.next_power_of_2``, ``triton.cdiv``, arithmetic,
``is None`` tests and the wrapper's own locals are followed); a ``tl.constexpr`` parameter
the launch does not pass takes its default, else the first autotune config's value, and the
config's ``num_warps``/``num_stages`` when the launch gives none.

What must stay true: a task is never reported compiled unless every launched kernel produced
a cubin; a value the check cannot work out is a failed check whose message names the
parameter and the fix, never a guess; ``triton`` is imported only inside the worker and
:func:`triton_available`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Required, TypedDict

import libcst as cst

from contract.layout import SRC_DIR
from extract.triton_launch_values import Unresolvable, case_env, launch_values, module_constants
from extract.triton_scan import dotted, literal
from pipeline.record_io import content_hash
from pipeline.records import BuildReport, KernelResources, ShapeCase, Task
from pipeline.target import TARGET as GPU

TRITON_TARGET = ("cuda", GPU.sm, 32)  # backend, compute capability, warp size


class _Job(TypedDict):
    """One launched kernel to compile: its module file, name, and what ``ASTSource`` takes."""

    file: str
    kernel: str
    signature: dict[str, str]
    constexprs: dict[str, object]
    options: dict[str, int]


class _CompiledKernel(TypedDict):
    name: str
    shared: int
    registers: int
    ptx_bytes: int


class _Answer(TypedDict, total=False):
    """The worker's one line: ``ok`` with each kernel's resources, or the error."""

    ok: Required[bool]
    error: str
    kernels: list[_CompiledKernel]


def triton_available() -> str | None:
    """None when ``triton`` can be imported here, else why not (with the fix)."""
    if importlib.util.find_spec("triton") is None:
        return "triton is not installed: pip install -e '.[triton]' (make install does)"
    return None


# =========================================================================== the kernel module


# A kernel parameter annotated ``torch.Tensor`` is evaluated when the function is defined, and Triton
# reads the annotation's name only (through a module, which it allows): a module of that name with a
# class ``Tensor`` stands in for torch, which compiling does not need.
_TORCH_STUB = (
    "import types as _types\n\n"
    'torch = _types.ModuleType("torch")  # the kernels\' torch.Tensor annotations, without torch\n'
    'torch.Tensor = type("Tensor", (), {})'
)


def kernel_module(source: bytes) -> str:
    """The file's triton imports, literal constants and ``@triton.jit`` functions, nothing else."""
    module = cst.parse_module(source)
    keep: list[str] = ["import triton", "import triton.language as tl"]
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            small = stmt.body[0] if len(stmt.body) == 1 else None
            if isinstance(small, cst.Import | cst.ImportFrom):
                names = (
                    [dotted(small.module) if small.module else ""]
                    if isinstance(small, cst.ImportFrom)
                    else [dotted(a.name) for a in small.names]
                )
                if all(n == "triton" or n.startswith("triton.") for n in names):
                    keep.append(module.code_for_node(stmt).strip())
                elif names == ["torch"] and isinstance(small, cst.Import) and small.names[0].asname is None:
                    keep.append(_TORCH_STUB)
            elif isinstance(small, cst.Assign | cst.AnnAssign) and small.value is not None:
                value = small.value
                if isinstance(value, cst.Call) and dotted(value.func).endswith("constexpr") and value.args:
                    value = value.args[0].value
                try:
                    literal(value)
                except ValueError:
                    continue
                keep.append(module.code_for_node(stmt).strip())
        elif isinstance(stmt, cst.FunctionDef):
            decorators = [d for d in stmt.decorators if _jit(d)]
            if decorators:
                keep.append(module.code_for_node(stmt.with_changes(decorators=decorators, leading_lines=())).strip())
    return "\n\n\n".join(keep) + "\n"


def _jit(decorator: cst.Decorator) -> bool:
    node = decorator.decorator.func if isinstance(decorator.decorator, cst.Call) else decorator.decorator
    return dotted(node) in ("triton.jit", "jit", "tl.jit")


# =========================================================================== launch values
# =========================================================================== the check


def compile_task(task_dir: pathlib.Path, task: Task, *, timeout_s: float = 300.0) -> BuildReport:
    """Compile every launched kernel of ``task`` at its first dtype and shape case, in a worker process."""
    started = time.perf_counter()
    missing = triton_available()
    if missing is not None:
        return BuildReport(ok=False, key="", seconds=0.0, stderr=missing)
    assert task.triton is not None
    src = pathlib.Path(task_dir) / SRC_DIR
    case = task.shapes[0] if task.shapes else _synthetic(task)
    dtype = task.instantiations[0].dtype if task.instantiations else "fp32"
    jobs: list[_Job] = []
    modules: dict[str, str] = {}
    try:
        if case is None:
            raise Unresolvable("the task has no shape to compile at (no catalog or synthetic shape)")
        wrapper_file = task.module
        module = cst.parse_module((src / wrapper_file).read_bytes())
        fns = {s.name.value: s for s in module.body if isinstance(s, cst.FunctionDef)}
        env = {**module_constants(module), **case_env(task, case, dtype)}
        kernels = {(k.file, k.name): k for k in task.triton.kernels}
        for launch in task.triton.launches:
            fn = fns.get(launch.function)
            kernel = next((k for (f, n), k in kernels.items() if n == launch.kernel.split(".")[-1]), None)
            if fn is None or kernel is None:
                raise Unresolvable(f"launch of {launch.kernel} in {launch.function}: not a module-level wrapper launch")
            signature, constexprs, options = launch_values(fn, launch, kernel, env)
            if kernel.file not in modules:
                modules[kernel.file] = kernel_module((src / kernel.file).read_bytes())
            jobs.append(
                {
                    "file": kernel.file,
                    "kernel": kernel.name,
                    "signature": signature,
                    "constexprs": constexprs,
                    "options": options,
                }
            )
    except (Unresolvable, OSError, cst.ParserSyntaxError) as err:
        return _unresolved(started, str(err))
    except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError, AttributeError) as err:
        return _unresolved(started, f"a launch value could not be worked out ({type(err).__name__}: {err})")
    key = content_hash(json.dumps(jobs, sort_keys=True, default=str), *modules.values())
    with tempfile.TemporaryDirectory(prefix="ks-triton-") as tmp:
        names = {}
        for i, (rel, text) in enumerate(sorted(modules.items())):
            names[rel] = f"ks_kernels_{i}"
            pathlib.Path(tmp, f"{names[rel]}.py").write_text(text, encoding="utf-8")
        spec = {"dir": tmp, "target": list(TRITON_TARGET), "jobs": [{**j, "module": names[j["file"]]} for j in jobs]}
        pathlib.Path(tmp, "spec.json").write_text(json.dumps(spec, default=str), encoding="utf-8")
        env_vars = {**os.environ, "TRITON_CACHE_DIR": str(pathlib.Path(tmp, "cache")), "TRITON_DEFAULT_FP_FUSION": "1"}
        try:
            done = subprocess.run(
                [sys.executable, "-m", "extract.triton_compile", str(pathlib.Path(tmp, "spec.json"))],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=env_vars,
                cwd=str(pathlib.Path(__file__).resolve().parent.parent),
            )
        except subprocess.TimeoutExpired:
            return BuildReport(
                ok=False,
                key=key,
                seconds=time.perf_counter() - started,
                stderr=f"triton compile check: timed out after {timeout_s:.0f} s",
            )
    seconds = time.perf_counter() - started
    try:
        answer: _Answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return BuildReport(ok=False, key=key, seconds=seconds, stderr=(done.stderr or done.stdout)[-4000:])
    if not answer.get("ok"):
        return BuildReport(ok=False, key=key, seconds=seconds, stderr=str(answer.get("error", ""))[-4000:])
    resources = [
        KernelResources(kernel=r["name"], registers=int(r.get("registers", 0)), smem_bytes=int(r.get("shared", 0)))
        for r in answer["kernels"]
    ]
    return BuildReport(ok=True, key=key, seconds=seconds, resources=resources)


def _unresolved(started: float, why: str) -> BuildReport:
    return BuildReport(
        ok=False,
        key="",
        seconds=time.perf_counter() - started,
        stderr=f"triton compile check: {why}; fix: give the value in a curated contract (extract/curated/<op>.toml)",
    )


def _synthetic(task: Task) -> ShapeCase | None:
    from contract.shapes import synthetic_shape

    return synthetic_shape(task.contract, task.instantiations)


def _worker(spec_path: str) -> _Answer:
    """In the worker process: import the kernel modules and compile each job to a cubin."""
    spec = json.loads(pathlib.Path(spec_path).read_text(encoding="utf-8"))
    sys.path.insert(0, spec["dir"])
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget(*spec["target"])
    out: list[_CompiledKernel] = []
    for job in spec["jobs"]:
        module = importlib.import_module(job["module"])
        fn = getattr(module, job["kernel"])
        source = ASTSource(fn=fn, signature=job["signature"], constexprs=job["constexprs"])
        try:
            compiled = triton.compile(source, target=target, options=job["options"] or None)
        except Exception as err:  # noqa: BLE001 - the compiler's own error is the answer
            return {"ok": False, "error": f"{job['kernel']}: {type(err).__name__}: {err}"}
        if not compiled.asm.get("cubin"):
            return {"ok": False, "error": f"{job['kernel']}: no cubin produced"}
        out.append(
            {
                "name": compiled.metadata.name,
                "shared": compiled.metadata.shared,
                "registers": 0,
                "ptx_bytes": len(compiled.asm.get("ptx", "")),
            }
        )
    return {"ok": True, "kernels": out}


if __name__ == "__main__":
    try:
        print(json.dumps(_worker(sys.argv[1])))
    except Exception as err:  # noqa: BLE001 - one line the parent reads
        print(json.dumps({"ok": False, "error": f"{type(err).__name__}: {err}"}))
