"""The expression half of the restricted interpreter.

:class:`Expressions` evaluates one libcst expression in an :class:`~.modules.Env`:
literals, names (locals, module globals, imports the interpreter may follow, builtins,
platform probes), attributes (tensor shapes and dtypes, class attributes, string
methods), operators and comparisons (inherited from :class:`~.operators.Operators`),
subscripts, f-strings and comprehensions. Calls, parameter binding and statements are
the other half (:mod:`.interpreter`), which subclasses this one; ``eval`` dispatches on
the node's type to ``_eval_<Type>``, so a subclass adds node types by adding methods.

What must stay true: evaluation is bounded (:data:`MAX_DEPTH` nested module
constants and calls, :data:`MAX_LOOP` iterations); an unknown part makes the
expression :class:`~.values.Unknown` in static mode and raises
:class:`~.values.Unresolvable` in strict mode, never a guess.
"""

from __future__ import annotations

import math
import pathlib
from collections.abc import Callable, Iterable
from typing import SupportsIndex, cast

import libcst as cst

from extract.pyops.modules import Env, PyModule, attr_text
from extract.pyops.operators import Operators
from extract.pyops.target import ITEMSIZE, PLATFORM, TORCH_DTYPES, Facts, package_paths
from extract.pyops.values import (
    Alts,
    Bound,
    Builtin,
    ClassRef,
    CppArgs,
    DtypeValue,
    ImportRef,
    ModuleRef,
    Mutator,
    ParamRef,
    Probe,
    TensorValue,
    Unknown,
    Unresolvable,
    concrete,
)

# Bounds that keep a strange module from hanging the scan: nested calls and module
# constants, and iterations of one loop or comprehension.
MAX_DEPTH = 24
MAX_LOOP = 4096


BUILTINS: dict[str, Callable[..., object]] = {
    "len": len,
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "list": list,
    "tuple": tuple,
    "sorted": sorted,
    "min": min,
    "max": max,
    "abs": abs,
    "set": set,
    "frozenset": frozenset,
    "range": range,
    "any": any,
    "all": all,
    "dict": dict,
    "enumerate": enumerate,
    "zip": zip,
    "reversed": reversed,
}

_STR_METHODS = {"join", "format", "upper", "lower", "replace", "startswith", "endswith", "split", "strip"}


# Tensor methods that keep a tensor's elements and dtype and change only its shape
# (moe_lora_merged_align's loader reads `topk_ids.reshape(-1).dtype`).
_RESHAPES = frozenset({"reshape", "view", "flatten", "squeeze", "unsqueeze", "transpose", "permute", "expand", "t"})


def _index_error(base: list[object] | tuple[object, ...] | str, key: object) -> str:
    """Python's message for a sequence indexed by a non-integer (``xs["a"]``)."""
    if isinstance(base, str):
        return f"string indices must be integers, not '{type(key).__name__}'"
    return f"{type(base).__name__} indices must be integers or slices, not {type(key).__name__}"


class Expressions(Operators):
    """Evaluates libcst expressions (the state both halves of the interpreter share).

    ``resolve_module(dotted)`` returns a parsed :class:`PyModule` for imports the
    evaluator may follow (op modules and ``kernels/jit/utils``), or None. ``strict``:
    an unknown value raises :class:`Unresolvable` instead of becoming
    :class:`Unknown`. Instantiate :class:`~.interpreter.Evaluator`, which adds calls
    and statements.
    """

    def __init__(self, resolve_module: Callable[[str], PyModule | None], *, strict: bool) -> None:
        self.resolve_module = resolve_module
        self.strict = strict
        self.notes: list[str] = []
        self.depth = 0
        self.assume_defaults = False
        # contract symbol -> value, for each tensor dimension a value was read from
        # (``w.shape[0]``); see TensorValue
        self.pins: dict[str, int] = {}

    # ------------------------------------------------------------------ helpers

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def unknown(self, env: Env, node: cst.CSTNode, why: str = "") -> Unknown:
        text = env.module.code(node)
        if self.strict:
            raise Unresolvable(why or f"`{text}` is not known statically")
        return Unknown(text)

    def module_env(self, module: PyModule) -> Env:
        return Env(module)

    def lookup_global(self, module: PyModule, name: str) -> tuple[bool, object]:
        """A module-level name: constant, function, class, import, platform probe."""
        paths = package_paths(module.rel)
        if name in paths and name not in module.functions and name not in module.classes:
            return True, paths[name]
        if name in module.functions:
            return True, module.functions[name]
        if name in module.classes:
            return True, ClassRef(module, name)
        if name in module.constants:
            self.depth += 1
            try:
                if self.depth > MAX_DEPTH:
                    raise Unresolvable(f"module constant {name}: recursion too deep")
                return True, self.eval(module.constants[name], Env(module))
            finally:
                self.depth -= 1
        if name in module.imports:
            source, original = module.imports[name]
            target = self.resolve_module(source)
            if target is not None and target is not module:
                found, value = self.lookup_global(target, original)
                if found:
                    return True, value
            return True, ImportRef(source, original)
        if name in module.module_imports:
            return True, ModuleRef(module.module_imports[name])
        return False, None

    # ------------------------------------------------------------------ expressions

    def eval(self, node: cst.BaseExpression, env: Env) -> object:
        method = getattr(self, f"_eval_{type(node).__name__}", None)
        if method is None:
            return self.unknown(env, node, f"unsupported expression `{env.module.code(node)}`")
        return method(node, env)

    def _eval_SimpleString(self, node: cst.SimpleString, env: Env) -> str | bytes:
        return node.evaluated_value

    def _eval_ConcatenatedString(self, node: cst.ConcatenatedString, env: Env) -> str | Alts | Unknown:
        left = self.eval(node.left, env)
        right = self.eval(node.right, env)
        return self._concat_str(left, right, env, node)

    def _concat_str(self, left: object, right: object, env: Env, node: cst.CSTNode) -> str | Alts | Unknown:
        if isinstance(left, Alts) or isinstance(right, Alts):
            ls = left.options if isinstance(left, Alts) else (left,)
            rs = right.options if isinstance(right, Alts) else (right,)
            return Alts(tuple(self._concat_str(a, b, env, node) for a in ls for b in rs))
        if isinstance(left, str) and isinstance(right, str):
            return left + right
        return self.unknown(env, node)

    def _eval_Integer(self, node: cst.Integer, env: Env) -> int:
        return node.evaluated_value

    def _eval_Float(self, node: cst.Float, env: Env) -> float:
        return node.evaluated_value

    def _eval_Name(self, node: cst.Name, env: Env) -> object:
        name = node.value
        if name in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[name]
        found, value = env.lookup(name)
        if found:
            if isinstance(value, ParamRef) and self.assume_defaults and value.has_default:
                return value.default
            return value
        found, value = self.lookup_global(env.module, name)
        if found:
            return value
        if name in BUILTINS:
            return Builtin(name)
        if name in PLATFORM:
            return Probe(name)
        return self.unknown(env, node, f"name `{name}` is not defined statically")

    def _eval_Attribute(self, node: cst.Attribute, env: Env) -> object:
        attr = node.attr.value
        head = attr_text(node.value)
        if head == "torch" and attr in TORCH_DTYPES:
            return DtypeValue(TORCH_DTYPES[attr])
        base = self.eval(node.value, env)
        if isinstance(base, TensorValue):
            if attr == "dtype":
                if base.dtype is None:
                    return self.unknown(env, node, f"dtype of `{base.name}` is not bound")
                return base.dtype
            # What every call the harness makes has: tensors on the GPU, dense (a padded row
            # stride is a layout the contract declares, not one the loader branches on here).
            if attr == "is_cuda":
                return True
            if attr == "is_contiguous":  # asked with a memory_format, it stays unanswered
                return Bound(lambda: True)
            if attr == "contiguous":  # the harness's tensors are dense already: the same tensor
                return Bound(lambda: base)
            if attr in _RESHAPES:  # the same elements, so the same dtype (`view(torch.uint8)`
                # reinterprets: that dtype); the new shape is not read

                def reshaped(*args: object, **kwargs: object) -> TensorValue:
                    dtype = (
                        args[0] if attr == "view" and len(args) == 1 and isinstance(args[0], DtypeValue) else base.dtype
                    )
                    return TensorValue(f"{base.name}.{attr}(...)", dtype, None)

                return Bound(reshaped)
            shaped = self._shape_attribute(base, attr)
            if shaped is not None:
                return shaped
            return self.unknown(env, node, f"tensor attribute `{env.module.code(node)}` is runtime data")
        if isinstance(base, Facts) and attr in base:
            return base[attr]
        if isinstance(base, DtypeValue):
            if attr == "itemsize":
                return ITEMSIZE[base.name]
            if attr == "is_floating_point":
                return Bound(lambda: base.name.startswith(("fp", "bf")))
        if isinstance(base, ModuleRef):
            target = self.resolve_module(base.dotted)
            if target is not None:
                found, value = self.lookup_global(target, attr)
                if found:
                    return value
            if attr in PLATFORM:
                return Probe(attr)
            return self.unknown(env, node)
        if isinstance(base, ImportRef):
            if attr in PLATFORM:
                return Probe(attr)
            return self.unknown(env, node)
        if isinstance(base, ClassRef):
            module, cls = base.module, base.name
            cls_node = module.classes[cls]
            body = cls_node.body.body if isinstance(cls_node.body, cst.IndentedBlock) else []
            for item in body:
                if isinstance(item, cst.SimpleStatementLine):
                    for small in item.body:
                        if (
                            isinstance(small, cst.Assign)
                            and len(small.targets) == 1
                            and isinstance(small.targets[0].target, cst.Name)
                            and small.targets[0].target.value == attr
                        ):
                            return self.eval(small.value, Env(module))
            return self.unknown(env, node)
        if isinstance(base, str) and attr in _STR_METHODS:
            return Bound(getattr(base, attr))
        if isinstance(base, pathlib.PurePosixPath) and attr in ("resolve", "absolute"):
            return Bound(lambda: base)  # a package-relative path stays what it is
        if isinstance(base, pathlib.PurePosixPath) and attr in ("parent", "name"):
            return getattr(base, attr)
        if isinstance(base, list) and attr in ("append", "extend"):
            return Mutator(base, attr)
        if isinstance(base, CppArgs) and attr in ("append", "extend"):
            # SGLang's code may add any value to make_cpp_args' list, as Python lets it
            return Mutator(cast("list[object]", base), attr)
        return self.unknown(env, node)

    def _dim(self, tensor: TensorValue, index: int) -> int:
        """One dimension's planned value, pinning its symbol (IndexError out of rank)."""
        assert tensor.dims is not None
        symbol, value = tensor.dims[index]
        if value < 0:
            raise Unresolvable(f"dimension {index} of `{tensor.name}` is open in the contract")
        if symbol is not None:
            self.pins[symbol] = value
        return value

    def _shape_attribute(self, tensor: TensorValue, attr: str) -> int | tuple[int, ...] | Bound | None:
        """``x.shape``, ``x.size(i)``, ``x.numel()``, ``x.dim()``, ``x.element_size()`` of a
        tensor the contract sizes; None when it does not (the caller says runtime data)."""
        if attr == "element_size" and tensor.dtype is not None:
            dtype = tensor.dtype
            return Bound(lambda: ITEMSIZE[dtype.name])
        if tensor.dims is None:
            return None
        rank = len(tensor.dims)
        if attr == "ndim":
            return rank
        if attr == "dim":
            return Bound(lambda: rank)
        if attr == "shape":
            return tuple(self._dim(tensor, i) for i in range(rank))
        if attr == "size":
            return Bound(
                lambda *index: (
                    self._dim(tensor, index[0]) if index else tuple(self._dim(tensor, i) for i in range(rank))
                )
            )
        if attr == "numel":
            return Bound(lambda: math.prod(self._dim(tensor, i) for i in range(rank)))
        return None

    def _eval_List(self, node: cst.List, env: Env) -> list[object]:
        return self._elements(node.elements, env)

    def _eval_Tuple(self, node: cst.Tuple, env: Env) -> tuple[object, ...]:
        return tuple(self._elements(node.elements, env))

    def _eval_Set(self, node: cst.Set, env: Env) -> set[object] | list[object]:
        items = self._elements(node.elements, env)
        return set(items) if concrete(items) else items

    def _elements(self, elements: Iterable[cst.BaseElement], env: Env) -> list[object]:
        out: list[object] = []
        for el in elements:
            value = self.eval(el.value, env)
            if isinstance(el, cst.StarredElement):
                if isinstance(value, (list, tuple)):
                    out.extend(value)
                else:
                    out.append(self.unknown(env, el.value) if self.strict else value)
            else:
                out.append(value)
        return out

    def _eval_Dict(self, node: cst.Dict, env: Env) -> dict[object, object] | Unknown:
        out: dict[object, object] = {}
        for el in node.elements:
            if not isinstance(el, cst.DictElement):
                return self.unknown(env, node)
            key = self.eval(el.key, env)
            if not concrete(key):
                return self.unknown(env, node)
            out[key] = self.eval(el.value, env)
        return out

    def _eval_FormattedString(self, node: cst.FormattedString, env: Env) -> str | Alts | Unknown:
        pieces: list[tuple[str, ...]] = [("",)]
        for part in node.parts:
            if isinstance(part, cst.FormattedStringText):
                options: tuple[str, ...] = (part.value.replace("{{", "{").replace("}}", "}"),)
            else:
                assert isinstance(part, cst.FormattedStringExpression)  # libcst's only other part
                value = self.eval(part.expression, env)
                if part.format_spec is not None or part.conversion is not None:
                    if not concrete(value):
                        options = ("{" + env.module.code(part.expression) + "}",)
                    else:
                        spec = "".join(
                            p.value if isinstance(p, cst.FormattedStringText) else "" for p in (part.format_spec or [])
                        )
                        conversions: dict[str, Callable[[object], str]] = {"r": repr, "s": str, "a": ascii}
                        conv = conversions.get(part.conversion or "s", str)
                        options = (format(conv(value) if part.conversion else value, spec),)
                else:
                    options = self._render(value, env, part.expression)
            pieces.append(options)
        results = [""]
        for options in pieces:
            results = [r + o for r in results for o in options]
            if len(results) > 64:
                return self.unknown(env, node, "too many alternatives")
        return results[0] if len(results) == 1 else Alts(tuple(dict.fromkeys(results)))

    def _render(self, value: object, env: Env, expr: cst.BaseExpression) -> tuple[str, ...]:
        if isinstance(value, CppArgs):
            return (value.render(),)
        if isinstance(value, Alts):
            out: list[str] = []
            for option in value.options:
                out.extend(self._render(option, env, expr))
            return tuple(dict.fromkeys(out))
        if isinstance(value, DtypeValue):
            return (f"torch.{value.name}",)
        if isinstance(value, ParamRef):
            return ("{" + value.name + "}",)
        if isinstance(value, bool):
            return (str(value),)
        if isinstance(value, (str, int, float)):
            return (str(value),)
        if self.strict:
            raise Unresolvable(f"f-string part `{env.module.code(expr)}` is not known statically")
        return ("{" + env.module.code(expr) + "}",)

    def _eval_IfExp(self, node: cst.IfExp, env: Env) -> object:
        test = self.condition(node.test, env)
        if test is None:
            if self.strict:
                raise Unresolvable(f"condition `{env.module.code(node.test)}` is not known statically")
            self.note(f"`{env.module.code(node)}`: condition unknown, took the first branch")
            return self.eval(node.body, env)
        return self.eval(node.body if test else node.orelse, env)

    def condition(self, node: cst.BaseExpression, env: Env) -> bool | None:
        """Truth of a condition, or None when unknown (static mode only)."""
        try:
            value = self.eval(node, env)
        except Unresolvable:
            if self.strict:
                raise
            return None
        if not concrete(value):
            if self.strict:
                raise Unresolvable(f"condition `{env.module.code(node)}` is not known statically")
            if self.assume_defaults:
                return None
            # Static mode: judge the condition at the parameters' defaults (what a
            # caller that passes nothing gets), and say so.
            self.assume_defaults = True
            try:
                value = self.eval(node, env)
            except Unresolvable:
                return None
            finally:
                self.assume_defaults = False
            if not concrete(value):
                return None
            self.note(f"`{env.module.code(node)}` judged at parameter defaults: {bool(value)}")
        return bool(value)

    def _eval_Subscript(self, node: cst.Subscript, env: Env) -> object:
        if len(node.slice) != 1:
            return self.unknown(env, node)
        item = node.slice[0].slice
        if isinstance(node.value, cst.Attribute) and node.value.attr.value == "shape" and isinstance(item, cst.Index):
            # x.shape[i] pins dimension i alone (x.shape as a whole pins them all)
            tensor = self.eval(node.value.value, env)
            if isinstance(tensor, TensorValue) and tensor.dims is not None:
                key = self.eval(item.value, env)
                if isinstance(key, int) and -len(tensor.dims) <= key < len(tensor.dims):
                    return self._dim(tensor, key)
        base = self.eval(node.value, env)
        if isinstance(item, cst.Index):
            key = self.eval(item.value, env)
            if isinstance(base, (list, tuple, dict, str)) and concrete(key):
                try:
                    if isinstance(base, dict):
                        return base[key]
                    if not isinstance(key, SupportsIndex):
                        raise TypeError(_index_error(base, key))
                    return base[key]
                except Exception as err:  # noqa: BLE001
                    if self.strict:
                        raise Unresolvable(f"`{env.module.code(node)}` failed: {err}") from err
        return self.unknown(env, node)

    def _eval_ListComp(self, node: cst.ListComp, env: Env) -> list[object] | set[object] | Unknown:
        return self._comprehension(node, env, list)

    def _eval_GeneratorExp(self, node: cst.GeneratorExp, env: Env) -> list[object] | set[object] | Unknown:
        return self._comprehension(node, env, list)

    def _eval_SetComp(self, node: cst.SetComp, env: Env) -> list[object] | set[object] | Unknown:
        return self._comprehension(node, env, set)

    def _comprehension(
        self,
        node: cst.ListComp | cst.GeneratorExp | cst.SetComp,
        env: Env,
        kind: type[list[object]] | type[set[object]],
    ) -> list[object] | set[object] | Unknown:
        results: list[object] = []

        def run(clause: cst.CompFor | None, scope: Env) -> None:
            if clause is None:
                results.append(self.eval(node.elt, scope))
                return
            iterable = self.eval(clause.iter, scope)
            if not isinstance(iterable, (list, tuple, set, frozenset, range, dict, str)):
                raise Unresolvable(f"comprehension over `{env.module.code(clause.iter)}`")
            for i, item in enumerate(
                iterable if not isinstance(iterable, (set, frozenset)) else sorted(iterable, key=repr)
            ):
                if i > MAX_LOOP:
                    raise Unresolvable("comprehension too long")
                inner = Env(env.module, parent=scope)
                self.bind_target(clause.target, item, inner)
                if all(self.condition(c.test, inner) for c in clause.ifs):
                    run(clause.inner_for_in, inner)

        try:
            run(node.for_in, env)
        except Unresolvable:
            if self.strict:
                raise
            return self.unknown(env, node)
        return kind(results) if kind is list or concrete(results) else results

    def bind_target(self, target: cst.BaseExpression, value: object, env: Env) -> None:
        if isinstance(target, cst.Name):
            env.values[target.value] = value
        elif isinstance(target, (cst.Tuple, cst.List)):
            elements = [el.value for el in target.elements]
            if isinstance(value, (list, tuple)) and len(value) == len(elements):
                for sub, item in zip(elements, value):
                    self.bind_target(sub, item, env)
            else:
                for sub in elements:
                    if isinstance(sub, cst.Name):
                        env.values[sub.value] = self.unknown(env, sub) if not self.strict else Unknown(sub.value)
        # attribute / subscript targets: no binding
