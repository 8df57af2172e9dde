"""A Triton op's contract, read from its Python wrapper with libcst (and a curated contract where that cannot).

The wrapper SGLang calls is the entry: its parameters, in order, are the contract's
arguments. What the wrapper's own code says about each one:

- **tensor or scalar**: a ``Tensor`` annotation, ``.shape``/``.size()``/``.stride()``/
  ``.dtype`` read from it, or being passed to a kernel parameter the kernel loads from or
  stores to, makes a tensor; ``int``/``float``/``bool``/``str`` (or a literal default of that
  type) is a scalar, its default its value; any other parameter without a default stops the
  task (its type would be a guess);
- **shape**: ``n = x.shape[i]`` / ``x.size(i)`` names dimension *i* after the local;
  ``a, b, c = x.shape`` names all of them and fixes the rank; ``assert x.dim() == 3``,
  ``x.ndim == 3`` and ``len(x.shape) == 3`` fix the rank; ``assert x.shape == y.shape``,
  ``y = torch.empty_like(x)`` and ``assert x.shape[0] == y.shape[0]`` tie dimensions
  together. A rank known only from the highest index read is an assumption, written into
  ``unresolved``;
- **dtype**: ``assert x.dtype == torch.float32`` or an allocation with ``dtype=`` fixes
  it; otherwise it is ``T``, the instantiation's dtype;
- **role**: the kernels the wrapper launches say which pointer parameters they store to
  and load from (:mod:`extract.triton_scan`); a launch argument that derives from a
  wrapper parameter carries that access back. A written tensor the wrapper allocates
  itself when it is ``None`` (``out=None`` then ``torch.empty_like``) and the kernel never
  reads is an ``output``; any other written tensor is ``inout`` (an in-place update or a
  scatter into a cache: what is not written must stay as it was); the rest are inputs.

An optional tensor (default ``None``) whose shape nothing names is left out of the
contract: the wrapper is called without it. Curated contracts
(``extract/curated/<op>.toml``, :func:`extract.contract.apply_curated`) replace what is
inferred, exactly as for CUDA ops.

What must stay true: nothing is guessed silently (every assumption is an ``unresolved``
entry); a tensor argument without a shape raises :class:`pipeline.errors.ConfigError`
naming it and the fix, since no harness could make it.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import libcst as cst

from contract.dtypes import torch_attribute
from extract.entry import OutermostFunction
from extract.triton_scan import dotted, literal, names_in, positional_binding, roots
from pipeline.errors import ConfigError
from pipeline.records import ArgSpec, Contract, ScalarSpec, TensorSpec, TritonFile, TritonKernel, TritonLaunch

_SCALARS = {"int": "int", "float": "float", "bool": "bool", "str": "str"}
_TENSOR_READS = ("shape", "size", "stride", "dtype", "device", "numel", "dim", "ndim", "is_contiguous")
_ALLOCATORS = ("empty_like", "zeros_like", "ones_like", "full_like")
_NEW_TENSORS = ("empty", "zeros", "ones", "full", "arange", "tensor", "new_empty", "new_zeros", "new_full")
# what makes a tensor the harness can hand its own buffer to (optimize/harness/returned_outputs.py)
_FRESH = (*_ALLOCATORS, "empty", "zeros", "ones", "full", "new_empty", "new_zeros", "new_full")


def value_names(node: cst.CSTNode) -> set[str]:
    """The names whose *value* ``node`` carries: ``x.shape[0]``, ``x.stride(1)``, ``x.numel()`` are integers, not
    x, and ``torch.empty_like(x)`` is a new tensor, not x."""
    found: set[str] = set()

    class _V(cst.CSTVisitor):
        def visit_Call(self, n: cst.Call) -> bool:
            tail = dotted(n.func).split(".")[-1]
            return not (tail in _ALLOCATORS or tail in _NEW_TENSORS)

        def visit_Attribute(self, n: cst.Attribute) -> bool:
            if n.attr.value in _TENSOR_READS or n.attr.value in ("element_size", "itemsize"):
                return False
            n.value.visit(self)
            return False

        def visit_Name(self, n: cst.Name) -> None:
            found.add(n.value)

    node.visit(_V())
    return found


def _shape_read(node: cst.BaseExpression) -> tuple[str, int | None] | None:
    """``x.shape[i]`` / ``x.size(i)`` / ``x.size()[i]`` -> (x, i); ``x.shape`` / ``x.size()`` -> (x, None)."""
    if isinstance(node, cst.Subscript) and len(node.slice) == 1:
        inner = _shape_read(node.value)
        index = node.slice[0].slice
        if inner is not None and inner[1] is None and isinstance(index, cst.Index):
            try:
                return inner[0], int(literal(index.value))
            except (ValueError, TypeError):
                return None
        return None
    if isinstance(node, cst.Attribute) and node.attr.value == "shape" and isinstance(node.value, cst.Name):
        return node.value.value, None
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "size":
        if isinstance(node.func.value, cst.Name):
            if not node.args:
                return node.func.value.value, None
            try:
                return node.func.value.value, int(literal(node.args[0].value))
            except (ValueError, TypeError):
                return None
    return None


def _rank_read(node: cst.BaseExpression) -> str | None:
    """``x.dim()`` / ``x.ndim`` / ``len(x.shape)`` -> x."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "dim":
        return node.func.value.value if isinstance(node.func.value, cst.Name) else None
    if isinstance(node, cst.Attribute) and node.attr.value == "ndim" and isinstance(node.value, cst.Name):
        return node.value.value
    if isinstance(node, cst.Call) and dotted(node.func) == "len" and node.args:
        read = _shape_read(node.args[0].value)
        return read[0] if read and read[1] is None else None
    return None


def _is_int(node: cst.BaseExpression) -> bool:
    try:
        return isinstance(literal(node), int) and not isinstance(literal(node), bool)
    except ValueError:
        return False


def _arithmetic(node: cst.BaseExpression) -> bool:
    """Names and integers joined by + - * (what a contract shape entry may be)."""
    if isinstance(node, cst.Name):
        return node.value not in ("True", "False", "None")
    if isinstance(node, cst.Integer):
        return True
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add | cst.Subtract | cst.Multiply):
        return _arithmetic(node.left) and _arithmetic(node.right)
    return False


def _dtype_of(node: cst.BaseExpression) -> str | None:
    name = dotted(node)
    return torch_attribute(name.split(".")[-1]) if name.startswith("torch.") else None


@dataclasses.dataclass
class _Facts:
    """What the wrapper body says, before the dimension classes are settled."""

    parent: dict[Any, Any] = dataclasses.field(default_factory=dict)  # union-find over (tensor, i) and names
    names: dict[Any, str] = dataclasses.field(default_factory=dict)  # (tensor, i) -> a local naming it
    rank: dict[str, int] = dataclasses.field(default_factory=dict)
    max_index: dict[str, int] = dataclasses.field(default_factory=dict)
    same: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    dtype: dict[str, str] = dataclasses.field(default_factory=dict)
    tensorish: set[str] = dataclasses.field(default_factory=set)
    assigned: set[str] = dataclasses.field(default_factory=set)
    derives: dict[str, set[str]] = dataclasses.field(default_factory=dict)
    numel: dict[str, str] = dataclasses.field(default_factory=dict)  # tensor -> its element count's expression
    values: dict[str, cst.BaseExpression] = dataclasses.field(default_factory=dict)  # local -> its one assignment
    reassigned: set[str] = dataclasses.field(default_factory=set)

    def find(self, x: Any) -> Any:
        while self.parent.get(x, x) != x:
            x = self.parent[x]
        return x

    def union(self, a: Any, b: Any) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[ra] = rb

    def dim(self, tensor: str, index: int) -> tuple[str, int]:
        if index >= 0:
            self.max_index[tensor] = max(self.max_index.get(tensor, -1), index)
        return tensor, index


class _Wrapper(OutermostFunction):
    def __init__(self, facts: _Facts) -> None:
        super().__init__()
        self.f = facts

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value in _TENSOR_READS and isinstance(node.value, cst.Name):
            self.f.tensorish.add(node.value.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            t = target.target
            for name in names_in(t) if isinstance(t, cst.Tuple | cst.List) else {dotted(t)} - {""}:
                if name in self.f.assigned:
                    self.f.reassigned.add(name)
                self.f.assigned.add(name)
                self.f.derives.setdefault(name, set()).update(value_names(node.value))
            read = _shape_read(node.value)
            if isinstance(t, cst.Name) and read is not None and read[1] is not None:
                key = self.f.dim(read[0], read[1] or 0)
                self.f.union(key, ("name", t.value))
                self.f.names.setdefault(key, t.value)
            elif isinstance(t, cst.Tuple) and read is not None and read[1] is None:
                elements = t.elements
                if all(isinstance(e.value, cst.Name) for e in elements):
                    self.f.rank[read[0]] = len(elements)
                    for i, el in enumerate(elements):
                        name = el.value.value  # type: ignore[attr-defined]
                        if name != "_":
                            key = self.f.dim(read[0], i)
                            self.f.union(key, ("name", name))
                            self.f.names.setdefault(key, name)
            if isinstance(t, cst.Name):
                self.f.values[t.value] = node.value
            if isinstance(t, cst.Name) and isinstance(node.value, cst.Call):
                self._allocation(t.value, node.value)

    def _allocation(self, target: str, call: cst.Call) -> None:
        func = dotted(call.func)
        tail = func.split(".")[-1]
        if tail in _ALLOCATORS and call.args and isinstance(call.args[0].value, cst.Name):
            self.f.same.append((target, call.args[0].value.value))
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == "dtype":
                dtype = _dtype_of(arg.value)
                if dtype:
                    self.f.dtype.setdefault(target, dtype)
                elif isinstance(arg.value, cst.Attribute) and arg.value.attr.value == "dtype":
                    source = arg.value.value
                    if isinstance(source, cst.Name):
                        self.f.dtype.setdefault(target, f"@{source.value}")

    def visit_Comparison(self, node: cst.Comparison) -> None:
        left = node.left
        chain = [left]  # a == b == 3: every operand of an all-equal chain is 3
        for target in node.comparisons:
            if not isinstance(target.operator, cst.Equal):
                left = target.comparator
                chain = []
                continue
            right = target.comparator
            self._equal(left, right)
            left = right
            chain.append(right)
        literal_of = next((c for c in chain if _is_int(c)), None)
        if literal_of is not None and len(chain) > 2:
            for operand in chain:
                self._equal(operand, literal_of)

    def _equal(self, left: cst.BaseExpression, right: cst.BaseExpression) -> None:
        for a, b in ((left, right), (right, left)):
            who = _rank_read(a)
            if who is not None:
                try:
                    self.f.rank[who] = int(literal(b))
                except (ValueError, TypeError):
                    pass
                return
            if isinstance(a, cst.Attribute) and a.attr.value == "dtype" and isinstance(a.value, cst.Name):
                dtype = _dtype_of(b)
                if dtype:
                    self.f.dtype[a.value.value] = dtype
                return
        for a, b in ((left, right), (right, left)):  # x.numel() == rows + 1: a 1-D x of that many elements
            if isinstance(a, cst.Call) and isinstance(a.func, cst.Attribute) and a.func.attr.value == "numel":
                if isinstance(a.func.value, cst.Name) and _arithmetic(b):
                    self.f.numel[a.func.value.value] = cst.Module([]).code_for_node(b)
                return
        ra, rb = _shape_read(left), _shape_read(right)
        if ra and rb and ra[1] is None and rb[1] is None:
            self.f.same.append((ra[0], rb[0]))
        elif ra and ra[1] is not None and rb and rb[1] is not None:
            self.f.union(self.f.dim(ra[0], ra[1] or 0), self.f.dim(rb[0], rb[1] or 0))
        elif ra and ra[1] is not None and isinstance(right, cst.Name):
            self.f.union(self.f.dim(ra[0], ra[1] or 0), ("name", right.value))
        elif rb and rb[1] is not None and isinstance(left, cst.Name):
            self.f.union(self.f.dim(rb[0], rb[1] or 0), ("name", left.value))


def _expr_names(text: str) -> set[str]:
    return names_in(cst.parse_expression(text))


@dataclasses.dataclass
class WrapperParam:
    name: str
    annotation: str
    default: str | None
    kind: str  # "tensor" | a scalar type | "?"


def wrapper_params(module: cst.Module, fn: cst.FunctionDef, facts: _Facts) -> list[WrapperParam]:
    out = []
    params = fn.params
    for p in [*params.posonly_params, *params.params, *params.kwonly_params]:
        ann = module.code_for_node(p.annotation.annotation) if p.annotation else ""
        default = module.code_for_node(p.default) if p.default is not None else None
        kind = "?"
        if "Tensor" in ann:
            kind = "tensor"
        else:
            base = ann.removeprefix("Optional[").removesuffix("]").strip()
            if base in _SCALARS:
                kind = _SCALARS[base]
            elif p.name.value in facts.tensorish:
                kind = "tensor"
            elif p.default is not None:
                try:
                    value = literal(p.default)
                    kind = {bool: "bool", int: "int", float: "float", str: "str"}.get(type(value), "?")
                except ValueError:
                    pass
        out.append(WrapperParam(p.name.value, ann, default, kind))
    return out


def _symbol(facts: _Facts, tensor: str, index: int, symbols: list[str]) -> str:
    """The size symbol of dimension ``index`` of ``tensor`` (the local its class is named after, else
    ``<tensor>_dim<i>``), added to ``symbols``."""
    cls = facts.find((tensor, index))
    name = next((facts.names[k] for k in facts.names if facts.find(k) == cls), None)
    if name is None:
        name = next((n for kind, n in [cls] if kind == "name"), None) if isinstance(cls, tuple) else None
    symbol = name if isinstance(name, str) and name != tensor else f"{tensor}_dim{index}"
    if symbol not in symbols:
        symbols.append(symbol)
    return symbol


def _chosen(node: cst.BaseExpression | None, defaults: dict[str, Any]) -> cst.BaseExpression | None:
    """``node`` with each ``a if flag else b`` settled by the default of a bool parameter ``flag``
    (or ``not flag``), the way the contract calls the wrapper; None when a test is anything else."""
    while isinstance(node, cst.IfExp):
        test, negated = node.test, False
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, negated = test.expression, True
        if not (isinstance(test, cst.Name) and isinstance(defaults.get(test.value), bool)):
            return None
        node = node.body if defaults[test.value] != negated else node.orelse
    return node


def _returned_allocations(
    fn: cst.FunctionDef, facts: _Facts, params: list[WrapperParam]
) -> list[tuple[str, int, cst.Call]]:
    """The tensors the wrapper allocates and returns: (local, its index in the result, the allocating
    call), read from the function's last statement, ``return y`` or ``return a, b`` (the path a call
    with the contract's scalars takes). A local assigned more than once, or a returned parameter (an
    in-place update the contract already names), is not one."""
    last = fn.body.body[-1] if isinstance(fn.body, cst.IndentedBlock) and fn.body.body else None
    if not (isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[0], cst.Return)):
        return []
    defaults: dict[str, Any] = {}
    for p in params:
        try:
            defaults[p.name] = literal(cst.parse_expression(p.default)) if p.default is not None else None
        except ValueError:
            pass
    value = _chosen(last.body[0].value, defaults)
    items = [e.value for e in value.elements] if isinstance(value, cst.Tuple) else [value]
    names = {p.name for p in params}
    out = []
    for index, item in enumerate(items):
        if not isinstance(item, cst.Name) or item.value in names or item.value in facts.reassigned:
            continue
        call = _chosen(facts.values.get(item.value), defaults)
        if isinstance(call, cst.Call):
            tail = dotted(call.func).split(".")[-1]
            if tail in _FRESH:
                out.append((item.value, index, call))
    return out


def _returned_specs(
    fresh: list[tuple[str, int, cst.Call]],
    launches: list[tuple[TritonLaunch, TritonKernel]],
    facts: _Facts,
    params: list[WrapperParam],
    symbols: list[str],
    unresolved: list[str],
) -> list[ArgSpec]:
    """The contract's returned outputs (role output, ``returned`` = the result index), for each fresh
    allocation a launch stores to and whose shape the wrapper names; the others become notes."""
    stored, _, _ = _access(launches, facts, {name for name, _, _ in fresh})
    sized = {p.name for p in params if p.kind == "int"}
    out = []
    for name, index, call in fresh:
        if name not in stored:
            unresolved.append(f"returned {name}: no launch of the wrapper stores to it; not checked")
            continue
        func = dotted(call.func)
        tail = func.split(".")[-1]
        like = call.args[0].value if tail in _ALLOCATORS and call.args else None
        source = func.rsplit(".", 1)[0] if tail.startswith("new_") else like.value if isinstance(like, cst.Name) else ""
        dtype = facts.dtype.get(name) or (f"@{source}" if source else "float32")
        if tail in _ALLOCATORS:
            rank = facts.rank.get(name)
            shape: list[str | int] | None = [_symbol(facts, name, i, symbols) for i in range(rank)] if rank else None
        else:
            shape = _allocated_shape(call, facts, sized, symbols)
        if not shape:
            unresolved.append(
                f"returned {name}: its shape ({cst.Module([]).code_for_node(call)}) names no size "
                "the contract knows; not checked"
            )
            continue
        tensor = TensorSpec(name=name, shape=shape, dtype=dtype, role="output", returned=index)
        out.append(ArgSpec(kind="tensor", tensor=tensor))
    return out


def _allocated_shape(call: cst.Call, facts: _Facts, sized: set[str], symbols: list[str]) -> list[str | int] | None:
    """The shape of ``torch.empty(a, b)`` / ``torch.empty((a, b), ...)`` / ``x.new_empty(...)`` as
    contract entries: each size an integer or + - * over locals named after a tensor dimension (or int
    parameters, which become symbols the call passes); None for anything else."""
    positional = [a.value for a in call.args if a.keyword is None and a.star == ""]
    if dotted(call.func).split(".")[-1] in ("full", "new_full"):
        positional = positional[:1]
    if len(positional) == 1 and isinstance(positional[0], cst.Tuple | cst.List):
        positional = [e.value for e in positional[0].elements]
    named: dict[str, str] = {}
    for dim in positional:
        if not _arithmetic(dim):
            return None
        for n in names_in(dim):
            cls = facts.find(("name", n))
            tied = [k for k in facts.parent if isinstance(k, tuple) and k[0] != "name" and facts.find(k) == cls]
            if tied:
                named[n] = _symbol(facts, tied[0][0], tied[0][1], symbols)
            elif n in sized:
                named[n] = n
                if n not in symbols:
                    symbols.append(n)
            else:
                return None
    shape: list[str | int] = []
    for dim in positional:
        if isinstance(dim, cst.Integer):
            shape.append(int(dim.value))
        else:
            renamed = dim.visit(_Rename(named))
            assert isinstance(renamed, cst.BaseExpression)  # renaming names removes no node
            shape.append(cst.Module([]).code_for_node(renamed))
    return shape or None


class _Rename(cst.CSTTransformer):
    def __init__(self, names: dict[str, str]) -> None:
        super().__init__()
        self.names = names

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        return updated.with_changes(value=self.names.get(updated.value, updated.value))


def _access(
    launches: list[tuple[TritonLaunch, TritonKernel]], facts: _Facts, params: set[str]
) -> tuple[set[str], set[str], list[str]]:
    """(written, read) wrapper parameters through the launches made in the wrapper itself; notes."""
    written: set[str] = set()
    read: set[str] = set()
    notes: list[str] = []
    for launch, kernel in launches:
        names = [p.name for p in kernel.params]
        bound = [(kparam, text) for kparam, text, _ in positional_binding(names, launch.args)]
        bound += [(k, v) for k, v in launch.kwargs.items() if k in names]
        for kparam, text in bound:
            try:
                expr = cst.parse_expression(text)
            except cst.ParserSyntaxError:
                continue
            reach = roots(expr, facts.derives, params, names=value_names) | (value_names(expr) & params)
            if kparam in kernel.stores:
                written |= reach
            if kparam in kernel.loads:
                read |= reach
    return written, read, notes


def infer_contract(
    root: pathlib.Path, file: TritonFile, function: str, launches: list[tuple[TritonLaunch, TritonKernel]]
) -> Contract:
    """The contract of ``function`` in ``file`` (see the module docstring); raises ConfigError without a shape."""
    where = f"{file.module}::{function}"
    try:
        module = cst.parse_module((root / file.module).read_bytes())
    except cst.ParserSyntaxError as err:
        raise ConfigError(
            f"{where}: the wrapper's file does not parse (line {err.raw_line}: {err.message})",
            fix="fix the file, or point SGLANG_SRC at an sglang tree whose sources parse",
        ) from err
    fn = next((s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == function), None)
    if fn is None:
        raise ConfigError(
            f"{where}: no module-level function {function} (the op has no Python wrapper)",
            fix=f"write a curated wrapper, or name an existing function of {file.module}",
        )
    facts = _Facts()
    fn.visit(_Wrapper(facts))
    params = wrapper_params(module, fn, facts)
    own = [(launch, kernel) for launch, kernel in launches if launch.function == function]
    fresh = _returned_allocations(fn, facts, params)
    for name, _, call in fresh:  # a new tensor carries no parameter's storage, whatever its call reads
        facts.derives[name] = set()
        if facts.values[name] is not call:  # chosen out of an if-else: visit_Assign saw no call
            _Wrapper(facts)._allocation(name, call)
    untyped = {p.name for p in params if p.kind == "?"}
    pointed, loaded, _ = _access(own, facts, untyped)
    for p in params:  # passed to a pointer the kernel stores to or loads from: a tensor
        if p.name in pointed | loaded:
            p.kind = "tensor"
    tensors = {p.name for p in params if p.kind == "tensor"}
    written, read, notes = _access(own, facts, tensors)
    unresolved: list[str] = list(notes)
    if launches and not own:
        unresolved.append("the launches are in helper functions: tensor roles not traced (all taken as inputs)")
    for a, b in facts.same:
        rank = facts.rank.get(b, facts.rank.get(a))
        if rank is None:
            rank = max(facts.max_index.get(a, -1), facts.max_index.get(b, -1)) + 1 or None
        if rank:
            facts.rank.setdefault(a, rank)
            facts.rank.setdefault(b, rank)
            for i in range(rank):
                facts.union(facts.dim(a, i), facts.dim(b, i))
    args: list[ArgSpec] = []
    symbols: list[str] = []
    for p in params:
        if p.kind == "tensor":
            rank = facts.rank.get(p.name)
            if rank is None and p.name in facts.max_index:
                rank = facts.max_index[p.name] + 1
                unresolved.append(f"rank of {p.name} taken as {rank} from the highest .shape index the wrapper reads")
            if rank is None:
                if p.default == "None":
                    unresolved.append(f"optional tensor {p.name}: no shape in the wrapper, left out (passed as None)")
                    continue
                raise ConfigError(
                    f"{where}: tensor {p.name}: no .shape read, assert or empty_like in the wrapper names its dimensions",
                    fix=f"add a curated contract extract/curated/<op>.toml giving {p.name}'s shape",
                )
            shape: list[str | int] = []
            if rank == 1 and p.name in facts.numel and not any(k[0] == p.name for k in facts.names):
                shape = [facts.numel[p.name]]
                symbols += [n for n in sorted(_expr_names(str(shape[0]))) if n not in symbols]
            shape = shape or [_symbol(facts, p.name, i, symbols) for i in range(rank)]
            dtype = facts.dtype.get(p.name, "T")
            role = "input"
            if p.name in written:
                allocated = p.default == "None" and p.name in facts.assigned
                role = "output" if allocated and p.name not in read else "inout"
            args.append(ArgSpec(kind="tensor", tensor=TensorSpec(name=p.name, shape=shape, dtype=dtype, role=role)))
        else:
            value: Any = None
            if p.default is not None:
                try:
                    value = literal(cst.parse_expression(p.default))
                except ValueError:
                    value = None
            if p.kind == "?":
                if p.default is not None and value is None and p.default != "None":
                    unresolved.append(f"parameter {p.name}: default {p.default} is not a literal; left out")
                    continue
                if p.default == "None":
                    continue  # an optional extra the wrapper is called without
                raise ConfigError(
                    f"{where}: parameter {p.name}: type unknown (no annotation, no literal default, not passed to "
                    "a kernel pointer)",
                    fix=f"add a curated contract extract/curated/<op>.toml giving {p.name}",
                )
            args.append(ArgSpec(kind="scalar", scalar=ScalarSpec(name=p.name, type=p.kind, value=value)))
    if fresh:
        args += _returned_specs(fresh, own, facts, params, symbols, unresolved)
    dtypes = {a.tensor.name: a.tensor.dtype for a in args if a.tensor is not None}
    for i, arg in enumerate(args):  # a dtype copied from another tensor (dtype=x.dtype)
        if arg.tensor is not None and arg.tensor.dtype.startswith("@"):
            copied = dtypes.get(arg.tensor.dtype[1:], "T")
            tensor = arg.tensor.model_copy(update={"dtype": "T" if copied.startswith("@") else copied})
            args[i] = arg.model_copy(update={"tensor": tensor})
    return Contract(entry=function, args=args, symbols=symbols, unresolved=unresolved)
