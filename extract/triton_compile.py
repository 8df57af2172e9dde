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
(:func:`launch_values`): each launch argument is evaluated over the contract (a tensor is a
pointer of its dtype; ``x.shape[i]``, ``x.size(i)`` and ``x.stride(i)`` are the case's sizes
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
import math
import operator
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, Required, SupportsIndex, TypedDict

import libcst as cst

from contract.dtypes import lookup, torch_attribute
from contract.layout import SRC_DIR
from extract.triton_scan import dotted, literal, positional_binding
from pipeline.record_io import content_hash
from pipeline.records import BuildReport, KernelResources, ShapeCase, Task, TritonKernel, TritonLaunch
from pipeline.target import TARGET as GPU

TRITON_TARGET = ("cuda", GPU.sm, 32)  # backend, compute capability, warp size
#: contract dtype -> triton signature type
_SIG = {
    "fp32": "fp32",
    "float32": "fp32",
    "fp16": "fp16",
    "float16": "fp16",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "int32": "i32",
    "int64": "i64",
    "int8": "i8",
    "uint8": "u8",
    "bool": "i1",
    "float8_e4m3fn": "fp8e4nv",
}


_ALLOCATE = {"empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like", "empty_strided"}
_VIEWS = {"view", "reshape", "contiguous", "flatten", "transpose", "permute", "t", "unsqueeze", "squeeze", "clone"}
_VIEWS |= {"narrow", "select", "expand", "as_strided", "unflatten", "view_as", "reshape_as", "detach"}


class Unresolvable(Exception):
    """A launch value the check cannot work out from the contract and the wrapper."""


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


class _Tensor:
    def __init__(self, name: str, dtype: str, shape: list[int]) -> None:
        self.name, self.dtype, self.shape = name, dtype, shape

    def strides(self) -> list[int]:
        out, step = [], 1
        for size in reversed(self.shape):
            out.append(step)
            step *= size
        return out[::-1]


class _Evaluator:
    """Launch arguments over the contract at one case: the wrapper's locals followed, nothing run."""

    def __init__(self, fn: cst.FunctionDef, env: dict[str, object]) -> None:
        self.env = env
        # every binding of a local, in source order: (value, None) or (unpacked value, its index);
        # branches are not followed, so a name bound in both arms of an `if` has two
        self.bound: dict[str, list[tuple[cst.BaseExpression, int | None]]] = {}
        self.resolving: set[str] = set()
        for stmt in _statements(fn.body):
            if isinstance(stmt, cst.Assign) and len(stmt.targets) == 1:
                target = stmt.targets[0].target
                if isinstance(target, cst.Name) and target.value not in env:
                    self.bound.setdefault(target.value, []).append((stmt.value, None))
                elif isinstance(target, cst.Tuple):
                    for i, el in enumerate(target.elements):
                        if isinstance(el.value, cst.Name):
                            self.bound.setdefault(el.value.value, []).append((stmt.value, i))

    def _local(self, name: str, v: Callable[[cst.BaseExpression], object]) -> object:
        """A local's value: its first binding that settles without reading the local itself (the
        other arm's binding when the first one's value refers back to it)."""
        self.resolving.add(name)
        try:
            for whole, i in self.bound[name]:
                try:
                    return v(whole) if i is None else _item(v(whole), i)
                except _EVAL_ERRORS:
                    continue
            raise Unresolvable(name)
        finally:
            self.resolving.discard(name)

    def value(self, node: cst.BaseExpression, depth: int = 0) -> object:
        if depth > 24:
            raise Unresolvable("too deep")

        def v(n: cst.BaseExpression) -> object:
            return self.value(n, depth + 1)

        if isinstance(node, cst.Name):
            if node.value in self.env:
                return self.env[node.value]
            if node.value in self.resolving:
                raise Unresolvable(f"{node.value} refers to itself")
            if node.value in self.bound:
                return self._local(node.value, v)
            try:
                return literal(node)
            except ValueError as err:
                raise Unresolvable(node.value) from err
        if isinstance(node, cst.Attribute):
            if dotted(node).startswith("torch.") and (named := torch_attribute(dotted(node).split(".")[-1])):
                return named
            base = v(node.value)
            if isinstance(base, _Tensor) and node.attr.value == "dtype":
                return base.dtype
            if isinstance(base, _Tensor) and node.attr.value == "shape":
                return tuple(base.shape)
            if isinstance(base, _Tensor) and node.attr.value == "ndim":
                return len(base.shape)
            raise Unresolvable(dotted(node) or "attribute")
        if isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
            return _item(v(node.value), v(node.slice[0].slice.value))
        if isinstance(node, cst.Call):
            return self._call(node, v)
        if isinstance(node, cst.BinaryOperation):
            a, b = v(node.left), v(node.right)
            arithmetic = _ARITHMETIC.get(type(node.operator))
            if arithmetic is None:
                raise Unresolvable("operator")
            return arithmetic(a, b)
        if isinstance(node, cst.UnaryOperation):
            inner = v(node.expression)
            return (not inner) if isinstance(node.operator, cst.Not) else _negative(inner)
        if isinstance(node, cst.Comparison):  # chained as Python chains them: a < b <= c
            left = v(node.left)
            for comp in node.comparisons:
                right = v(comp.comparator)
                if not _compare(comp.operator, left, right):
                    return False
                left = right
            return True
        if isinstance(node, cst.IfExp):
            return v(node.body) if v(node.test) else v(node.orelse)
        if isinstance(node, cst.Tuple):
            return tuple(v(el.value) for el in node.elements)
        if isinstance(node, cst.Dict):  # a launch's **config: {"BLOCK_SIZE": ..., "num_warps": ...}
            out: dict[str, object] = {}
            for el in node.elements:  # the entries that settle (one that does not leaves its default)
                if isinstance(el, cst.DictElement) and isinstance(el.key, cst.SimpleString):
                    try:
                        out[str(el.key.evaluated_value)] = v(el.value)
                    except _EVAL_ERRORS:
                        continue
            return out
        return literal(node)

    @staticmethod
    def _dtype_kw(node: cst.Call, v: Callable[[cst.BaseExpression], object]) -> str | None:
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == "dtype":
                value = v(arg.value)
                return value if isinstance(value, str) else None
        return None

    def _call(self, node: cst.Call, v: Callable[[cst.BaseExpression], object]) -> object:
        name = dotted(node.func)
        args = [v(a.value) for a in node.args if a.keyword is None]
        tail = name.split(".")[-1]
        if tail == "next_power_of_2":
            n = _number(args[0])
            return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()
        if tail == "cdiv":
            return -(-_int(args[0]) // _int(args[1]))
        if name in ("max", "min", "int", "len", "abs") and args:
            builtins: dict[str, Callable[..., object]] = {"max": max, "min": min, "int": int, "len": len, "abs": abs}
            return builtins[name](*args)
        if name in ("math.log2", "math.ceil", "math.sqrt"):
            return getattr(math, tail)(*args)
        if name.startswith("torch.") and tail in _ALLOCATE:  # a tensor the wrapper makes: its dtype is what counts
            source = next((a for a in args if isinstance(a, _Tensor)), None)
            return _Tensor("new", self._dtype_kw(node, v) or (source.dtype if source else "float32"), [])
        if isinstance(node.func, cst.Attribute):
            base = v(node.func.value)
            if isinstance(base, _Tensor) and tail in _VIEWS:
                return _Tensor(base.name, base.dtype, base.shape if tail in ("contiguous", "clone") else [])
            if isinstance(base, _Tensor) and tail in ("to", "new_empty", "new_zeros", "new_full", "new_ones"):
                dtype = self._dtype_kw(node, v) or next((a for a in args if isinstance(a, str)), None)
                return _Tensor(base.name, dtype or base.dtype, [])
            if isinstance(base, _Tensor) and tail == "element_size":
                return known.nbytes if (known := lookup(base.dtype)) else 4
            if isinstance(base, _Tensor):
                if tail == "size":
                    return _item(base.shape, args[0]) if args else tuple(base.shape)
                if tail == "stride":  # x.stride(i), or x.stride(): the tuple (a launch's *x.stride())
                    return _item(base.strides(), args[0]) if args else tuple(base.strides())
                if tail == "numel":
                    return math.prod(base.shape)
                if tail == "dim":
                    return len(base.shape)
                if tail in ("contiguous", "view", "reshape", "flatten") and not args:
                    return base
        raise Unresolvable(f"{name or 'call'}(...)")


# Python's own operators on two launch values (``operator.add(a, b)`` is ``a + b``)
_ARITHMETIC: dict[type[cst.BaseBinaryOp], Callable[[object, object], object]] = {
    cst.Add: operator.add,
    cst.Subtract: operator.sub,
    cst.Multiply: operator.mul,
    cst.FloorDivide: operator.floordiv,
    cst.Modulo: operator.mod,
    cst.Divide: operator.truediv,
}


def _item(base: object, key: object) -> object:
    """``base[key]``: a dict's entry or a sequence's item; anything else fails as it does in Python."""
    if isinstance(base, dict):
        return base[key]
    if not isinstance(base, list | tuple | str):
        raise TypeError(f"'{type(base).__name__}' object is not subscriptable")
    if not isinstance(key, SupportsIndex):
        raise TypeError(f"{type(base).__name__} indices must be integers or slices, not {type(key).__name__}")
    return base[key]


def _number(value: object) -> int | float:
    """A launch value compared with or converted to a number (bools are ints)."""
    if isinstance(value, int | float):
        return value
    raise TypeError(f"'<=' not supported between instances of '{type(value).__name__}' and 'int'")


def _int(value: object) -> int:
    """``int(value)`` of a launch value (a number or a numeric string), failing as ``int`` does."""
    if isinstance(value, int | float | str | bytes):
        return int(value)
    raise TypeError(
        f"int() argument must be a string, a bytes-like object or a real number, not '{type(value).__name__}'"
    )


def _negative(value: object) -> int | float:
    if isinstance(value, int | float):
        return -value
    raise TypeError(f"bad operand type for unary -: '{type(value).__name__}'")


# Python's comparisons of any two launch values: order comparisons of arbitrary values
# are typed with Any in typeshed itself (operator.lt takes SupportsDunderLT[Any])
_COMPARE: dict[type[cst.BaseCompOp], Callable[[Any, Any], object]] = {
    cst.Is: lambda a, b: a is b,
    cst.IsNot: lambda a, b: a is not b,
    cst.Equal: lambda a, b: a == b,
    cst.NotEqual: lambda a, b: a != b,
    cst.LessThan: lambda a, b: a < b,
    cst.LessThanEqual: lambda a, b: a <= b,
    cst.GreaterThan: lambda a, b: a > b,
    cst.GreaterThanEqual: lambda a, b: a >= b,
}


def _compare(op: cst.BaseCompOp, left: object, right: object) -> bool:
    test = _COMPARE.get(type(op))
    if test is None:
        raise Unresolvable("comparison")
    return bool(test(left, right))


def _statements(block: cst.BaseSuite) -> list[cst.BaseSmallStatement]:
    out: list[cst.BaseSmallStatement] = []
    for stmt in getattr(block, "body", []):
        if isinstance(stmt, cst.SimpleStatementLine):
            out += list(stmt.body)
        elif isinstance(stmt, cst.If | cst.For | cst.While | cst.With | cst.Try):
            out += _statements(stmt.body)
            orelse = getattr(stmt, "orelse", None)
            if orelse is not None:
                out += _statements(orelse.body if isinstance(orelse, cst.If | cst.Else) else orelse)
    return out


def module_constants(module: cst.Module) -> dict[str, object]:
    """The module's literal constants (``_ALPHA = 2``): names a launch argument may use."""
    out: dict[str, object] = {}
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign):
            assign = stmt.body[0]
            if len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name):
                try:
                    out.setdefault(assign.targets[0].target.value, literal(assign.value))
                except ValueError:
                    continue
    return out


def case_env(task: Task, case: ShapeCase, dtype: str) -> dict[str, object]:
    """The wrapper's parameters at ``case``: tensors with their shape and dtype, scalars with their value."""
    from contract import expr

    env: dict[str, object] = {"None": None}
    for arg in task.contract.args:
        if arg.tensor is not None:
            t = arg.tensor
            shape = [
                d if isinstance(d, int) else int(expr.evaluate(expr.parse(str(d), expr.ARITHMETIC), case.sizes))
                for d in t.shape
            ]
            env[t.name] = _Tensor(t.name, dtype if t.dtype == "T" else t.dtype, shape)
        elif arg.scalar is not None and arg.scalar.value is not None:
            env[arg.scalar.name] = arg.scalar.value
        elif arg.scalar is not None and arg.scalar.type == "int" and arg.scalar.name in case.sizes:
            env[arg.scalar.name] = case.sizes[arg.scalar.name]  # an int named after a size takes it, as in a call
        # any other open scalar stays unknown
    for param in task.entry_signature.params if task.entry_signature else []:
        if param.name not in env and param.default is not None:
            try:
                env[param.name] = literal(cst.parse_expression(param.default))
            except ValueError:
                pass
    return env


# what evaluating a launch argument over the contract may raise: each means "not settled here"
_EVAL_ERRORS = (Unresolvable, KeyError, IndexError, TypeError, ValueError, AttributeError, ZeroDivisionError)


def launch_values(
    fn: cst.FunctionDef, launch: TritonLaunch, kernel: TritonKernel, env: dict[str, object]
) -> tuple[dict[str, str], dict[str, object], dict[str, int]]:
    """(signature, constexprs, options) of one launch; Unresolvable names the parameter it cannot settle."""
    ev = _Evaluator(fn, env)
    names = [p.name for p in kernel.params]

    starred: dict[str, tuple[object, ...] | None] = {}  # a *expr argument's items, evaluated once

    def count(text: str) -> int | None:
        if text not in starred:
            try:
                value = ev.value(cst.parse_expression(text))
            except _EVAL_ERRORS:
                value = None
            starred[text] = tuple(value) if isinstance(value, tuple | list) else None
        items = starred[text]
        return None if items is None else len(items)

    given: dict[str, cst.BaseExpression] = {}
    spread_values: dict[str, object] = {}  # parameters a *expr or **expr argument fills
    for name, text, index in positional_binding(names, launch.args, count):
        if index is None:
            given[name] = cst.parse_expression(text)
        else:
            spread_values[name] = (starred[text] or ())[index]
    for text in (a[2:] for a in launch.args if a.startswith("**")):
        try:  # **kw of settled keywords; one the evaluator cannot settle (a run-time choice) leaves the defaults
            keywords = ev.value(cst.parse_expression(text))
        except _EVAL_ERRORS:
            keywords = {}
        for key, value in keywords.items() if isinstance(keywords, dict) else ():
            spread_values[str(key)] = value
    for name, text in launch.kwargs.items():
        given[name] = cst.parse_expression(text)
    config = kernel.autotune[0] if kernel.autotune else None
    options: dict[str, int] = {}
    for option in ("num_warps", "num_stages"):
        if option in given:
            options[option] = _int(ev.value(given[option]))
        elif option in spread_values:
            options[option] = _int(spread_values[option])
        elif config is not None and getattr(config, option) is not None:
            options[option] = int(getattr(config, option))
    signature: dict[str, str] = {}
    constexprs: dict[str, object] = {}
    for p in kernel.params:
        if p.name in spread_values and p.name not in given:
            value = spread_values[p.name]
        elif p.name in given:
            try:
                value = ev.value(given[p.name])
            except _EVAL_ERRORS as err:
                raise Unresolvable(
                    f"{kernel.name}.{p.name} = {cst.Module([]).code_for_node(given[p.name])}: {err}"
                ) from err
        elif config is not None and p.name in config.kwargs:
            value = config.kwargs[p.name]
        elif p.default is not None:
            value = literal(cst.parse_expression(p.default))
        elif p.name in kernel.heuristics:
            raise Unresolvable(f"{kernel.name}.{p.name} is computed by @triton.heuristics")
        else:
            raise Unresolvable(f"{kernel.name}.{p.name}: the launch passes no value")
        if p.constexpr or value is None:
            constexprs[p.name] = value
            signature[p.name] = "constexpr"
        elif isinstance(value, _Tensor):
            signature[p.name] = "*" + _SIG.get(value.dtype, value.dtype)
        elif isinstance(value, bool):
            signature[p.name] = "i1"
        elif isinstance(value, int):
            signature[p.name] = "i32" if -(2**31) <= value < 2**31 else "i64"
        elif isinstance(value, float):
            signature[p.name] = "fp32"
        else:
            raise Unresolvable(f"{kernel.name}.{p.name}: a {type(value).__name__} is not a kernel argument")
    return signature, constexprs, options


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
