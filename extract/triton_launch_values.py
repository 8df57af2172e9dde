"""The launch values of a Triton task: a launch's arguments evaluated over the contract at one shape case.

:func:`launch_values` gives what ``triton.compiler.ASTSource`` takes for one launched kernel
(its signature, constexprs and ``num_warps``/``num_stages``), read from the wrapper at the case
:func:`case_env` builds (plus the file's :func:`module_constants`): each launch argument is
evaluated by a small restricted evaluator (:class:`_Evaluator`): a tensor is a pointer of its
dtype; ``x.shape[i]``, ``x.size(i)`` and ``x.stride(i)`` are the case's sizes and contiguous
strides; ``triton.next_power_of_2``, ``triton.cdiv``, arithmetic, ``is None`` tests and the
wrapper's own locals are followed. A ``tl.constexpr`` parameter the launch does not pass takes its
default, else the first autotune config's value. It lives apart from :mod:`extract.triton_compile`
(which writes the kernel module and runs the compiler in a worker) because it is pure reading:
libcst and the contract, nothing compiled.

What must stay true: nothing is run or imported from the wrapper (no torch, no triton); a value
it cannot work out raises :class:`Unresolvable` naming the kernel parameter, never a guess;
evaluation is bounded (depth 24), so a strange wrapper fails the check but never hangs.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any, SupportsIndex

import libcst as cst

from contract.dtypes import lookup, torch_attribute
from extract.triton_scan import dotted, literal, positional_binding
from pipeline.records import ShapeCase, Task, TritonKernel, TritonLaunch

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
