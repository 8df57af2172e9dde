"""The KDA module of a rewrite: the public function cut out of its SGLang module, and its guard.

:func:`kda_module` reads the op's module with libcst and keeps the public function and every
top-level helper and constant it reaches, imports cut to the names they read and sorted as isort
does; ``load_jit`` builds the rewritten source (``_cuda_source``) under a ``kda_`` module name and
custom ops get ``kda_`` names (SGLang skips a name registered twice). :func:`guard_conditions`
writes ``can_use_<function>``: where the candidate was judged (see its docstring). Used by
:mod:`integrate.landing`, which places the files.

What must stay true: nothing here evaluates SGLang's code; anything it cannot carry over exactly
raises :class:`Refused` with the reason, and the rewrite stays an in-place edit.
"""

from __future__ import annotations

import ast
import re
import sys
import textwrap
from collections.abc import Sequence

import libcst as cst

from contract.dtypes import TABLE, torch_name
from contract.errors import ContractError
from contract.plan import canonical_dtype
from pipeline.records import EntryParam, Task, TensorSpec
from pipeline.run_records import Evaluation
from pipeline.target import capability_of

KDA_PREFIX = "kda_"  # JIT module and custom-op names of the KDA copy: never the pristine kernel's cache entries


class Refused(Exception):
    pass


class _Names(cst.CSTVisitor):
    """Every name a node reads (attribute names and keyword names are not names it reads)."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False


def _reads(node: cst.CSTNode) -> set[str]:
    visitor = _Names()
    node.visit(visitor)
    return visitor.names


def binds(stmt: cst.CSTNode) -> set[str]:
    """The top-level names a module statement binds."""
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        return {stmt.name.value}
    out: set[str] = set()
    for node in _walk(stmt):
        if isinstance(node, cst.ImportAlias):
            out.add(_alias_name(node))
        elif isinstance(node, (cst.AssignTarget, cst.AnnAssign)) and isinstance(node.target, cst.Name):
            out.add(node.target.value)
        elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            out.add(node.name.value)
    return out


def _walk(node: cst.CSTNode) -> list[cst.CSTNode]:
    out = [node]
    for child in node.children:
        out += _walk(child)
    return out


def _alias_name(alias: cst.ImportAlias) -> str:
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value
    name: cst.BaseExpression = alias.name
    while isinstance(name, cst.Attribute):
        name = name.value
    return name.value if isinstance(name, cst.Name) else ""


def is_import(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body
    )


def _kept(module: cst.Module, fn: str) -> tuple[list[cst.CSTNode], set[str]]:
    """The statements the public function reaches (itself, helpers, constants), in file order, and every name they read."""
    defs = [s for s in module.body if not is_import(s) and not _type_checking(s)]
    if not any(isinstance(s, cst.FunctionDef) and s.name.value == fn for s in defs):
        raise Refused(f"{fn} is not a top-level function of its module")
    wanted, reads, todo = set(), set(), [fn]
    while todo:
        name = todo.pop()
        for index, stmt in enumerate(defs):
            if index not in wanted and name in binds(stmt):
                wanted.add(index)
                found = _reads(stmt)
                reads |= found
                todo += sorted(found)
    return [s for i, s in enumerate(defs) if i in wanted], reads


def _type_checking(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.If) and isinstance(stmt.test, cst.Name) and stmt.test.value == "TYPE_CHECKING"


def _imports(module: cst.Module, reads: set[str]) -> tuple[list[str], list[cst.CSTNode]]:
    """The module's imports cut down to the names the kept code reads: the plain import lines, and
    the ``if TYPE_CHECKING:`` block (``__future__`` kept whole)."""
    lines: list[str] = []
    blocks: list[cst.CSTNode] = []
    for stmt in module.body:
        if is_import(stmt):
            line = _filtered(stmt, reads)
            if line is not None:
                lines.append(module.code_for_node(line).strip())
        elif isinstance(stmt, cst.If) and _type_checking(stmt) and isinstance(stmt.body, cst.IndentedBlock):
            inner = [x for x in (_filtered(s, reads) for s in stmt.body.body) if x is not None]
            if inner:
                blocks.append(stmt.with_changes(body=stmt.body.with_changes(body=inner)))
    return lines, blocks


def _filtered(stmt: cst.CSTNode, reads: set[str]) -> cst.SimpleStatementLine | None:
    if not isinstance(stmt, cst.SimpleStatementLine):
        return None
    kept: list[cst.BaseSmallStatement] = []
    for small in stmt.body:
        if (
            isinstance(small, cst.ImportFrom)
            and isinstance(small.module, cst.Name)
            and small.module.value == "__future__"
        ):
            kept.append(small)
        elif isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(small.names, cst.ImportStar):
            names = [a for a in small.names if _alias_name(a) in reads]
            if names:
                names[-1] = names[-1].with_changes(comma=small.names[-1].comma)
                kept.append(small.with_changes(names=names))
    return stmt.with_changes(body=kept) if kept else None


def _import_key(line: str) -> tuple[int, int, str]:
    """isort's order (profile black): future, stdlib, third party, sglang; plain imports before from-imports."""
    module = line.split()[1]
    top = module.split(".")[0]
    section = 0 if top == "__future__" else 1 if top in sys.stdlib_module_names else 3 if top == "sglang" else 2
    return section, line.startswith("from "), module


def _import_block(lines: Sequence[str]) -> str:
    """The lines sorted and grouped by section, a blank line between sections."""
    out, last = [], None
    for line in sorted(dict.fromkeys(lines), key=_import_key):
        section = _import_key(line)[0]
        if last is not None and section != last:
            out.append("")
        out.append(line)
        last = section
    return "\n".join(out) + "\n"


class _Retarget(cst.CSTTransformer):
    """``load_jit`` builds the new source under a ``kda_`` module name; custom ops get ``kda_`` names."""

    def __init__(self, relative: str) -> None:
        self.relative = relative
        self.retargeted = 0

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if _callee(updated.func) == "load_jit":
            return self._load_jit(updated)
        if _callee(updated.func) == "register_custom_op":
            return updated.with_changes(
                args=[
                    a.with_changes(value=_prefixed(a.value))
                    if a.keyword is not None and a.keyword.value == "op_name"
                    else a
                    for a in updated.args
                ]
            )
        return updated

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        """A custom op named after its function (no ``op_name``) gets the ``kda_`` name too: SGLang skips
        registering a name twice, so the copy would otherwise run the original."""
        decorators = []
        for d in updated.decorators:
            call = d.decorator if isinstance(d.decorator, cst.Call) else cst.Call(func=d.decorator, args=[])
            if _callee(call.func) == "register_custom_op" and not any(
                a.keyword is not None and a.keyword.value == "op_name" for a in call.args
            ):
                named = cst.Arg(
                    keyword=cst.Name("op_name"), value=_prefixed(cst.SimpleString(f'"{updated.name.value}"'))
                )
                d = d.with_changes(decorator=call.with_changes(args=[named, *call.args]))
            decorators.append(d)
        return updated.with_changes(decorators=decorators)

    def _load_jit(self, call: cst.Call) -> cst.Call:
        args = list(call.args)
        if args and args[0].keyword is None and args[0].star == "":
            args[0] = args[0].with_changes(value=_prefixed(args[0].value))
        for i, arg in enumerate(args):
            if arg.keyword is not None and arg.keyword.value == "cuda_files" and isinstance(arg.value, cst.List):
                elements = []
                for el in arg.value.elements:
                    if isinstance(el.value, cst.SimpleString) and el.value.evaluated_value == self.relative:
                        self.retargeted += 1
                        el = el.with_changes(value=cst.parse_expression(f'_cuda_source("{self.relative}")'))
                    elements.append(el)
                args[i] = arg.with_changes(value=arg.value.with_changes(elements=elements))
        return call.with_changes(args=args)


def _callee(func: cst.BaseExpression) -> str:
    return func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""


def _prefixed(value: cst.BaseExpression) -> cst.BaseExpression:
    """The name expression with ``kda_`` in front of every name it can take."""
    if isinstance(value, cst.SimpleString) and isinstance(value.evaluated_value, str):
        return cst.SimpleString(f'"{KDA_PREFIX}{value.evaluated_value}"')
    if isinstance(value, cst.IfExp):
        return value.with_changes(body=_prefixed(value.body), orelse=_prefixed(value.orelse))
    if isinstance(value, cst.FormattedString):
        return value.with_changes(parts=[cst.FormattedStringText(KDA_PREFIX), *value.parts])
    raise Refused(
        f"a JIT module or custom op named by an expression ({cst.Module([]).code_for_node(value)}), not a literal"
    )


def kda_module(facade: str, fn: str, relative: str, task: Task, evaluation: Evaluation | None) -> tuple[str, str]:
    """The KDA module's text and its guard's name."""
    module = cst.parse_module(facade)
    kept, reads = _kept(module, fn)
    retarget = _Retarget(relative)
    kept = [stmt.visit(retarget) for stmt in kept]  # type: ignore[misc]  # a transformer returns statements here
    if not retarget.retargeted:
        raise Refused(f"no load_jit call {fn} reaches names `{relative}` in cuda_files by a literal")
    taken = set().union(*(binds(s) for s in kept))
    guard = f"can_use_{fn}" if f"can_use_{fn}" not in taken else f"can_use_{KDA_PREFIX}{fn}"
    lines, blocks = _imports(module, reads | {"TYPE_CHECKING"})
    lines += ["import functools", "import torch", "from sglang.kernels.kda_kernels import _cuda_source"]
    entry = next(s for s in kept if isinstance(s, cst.FunctionDef) and s.name.value == fn)
    conditions = "\n        and ".join(guard_conditions(task, evaluation))
    checker = cst.parse_module(
        f"@functools.lru_cache(maxsize=None)\ndef _on_validated_arch(device: torch.device) -> bool:\n"
        f"    return torch.cuda.get_device_capability(device) == {arch_of(task)}\n"
    ).body[0]
    body = cst.parse_module(
        "def f():\n"
        '    """Whether this call lies where the kernel was validated against the JIT kernel."""\n'
        f"    return (\n        {conditions}\n    )\n"
    ).body[0]
    guard_def = entry.with_changes(
        name=cst.Name(guard), decorators=[], returns=cst.Annotation(cst.Name("bool")), body=body.body
    )
    code = "\n\n\n".join(_code(node) for node in [*kept, checker, guard_def])
    head = "".join(f"\n{_code(b)}\n" for b in blocks)
    return f"{_docstring(task, relative, guard)}\n\n{_import_block(lines)}{head}\n\n{code}\n", guard


def _code(node: cst.CSTNode) -> str:
    """One top-level statement's source, without the blank lines around it."""
    return cst.Module(body=[]).code_for_node(node).strip()


def _docstring(task: Task, relative: str, guard: str) -> str:
    sig = task.entry_signature
    assert sig is not None
    major, minor = arch_of(task)
    text = (
        f"The source is ``csrc/{relative}``. ``{sig.module}.{sig.function}`` calls this implementation "
        f"through its KDA KernelSpec where ``{guard}`` holds (the dtypes, shapes and modes it was "
        "checked on against the JIT kernel it replaces) and keeps the JIT kernel everywhere else."
    )
    return f'"""{sig.function}: a rewritten kernel, validated on SM{major}{minor}.\n\n{textwrap.fill(text, 88)}\n"""'


def arch_of(task: Task) -> tuple[int, int]:
    """The compute capability the task was built and judged for (its build recipe's arch)."""
    try:
        return capability_of(task.build.arch)
    except ValueError as err:
        raise Refused(f"the task's build arch: {err}") from err


# --------------------------------------------------------------------------- the guard


def guard_conditions(task: Task, evaluation: Evaluation | None) -> list[str]:
    """The Python conditions of ``can_use_<function>``: every one must hold for the KDA kernel to run.

    Tensors: their dtype (the first tensor of a dtype parameter takes one of the judged dtypes, the
    others the same), rank, contiguity (where the contract gives no strides), and each dimension
    that is a size (within the smallest and largest value judged) or an expression of bound sizes.
    Integer scalars with a fixed contract value, parameters no contract argument feeds (their
    default, the only value judged) and loader switches (the values built) select code paths and
    are pinned; float scalars are data and are not.
    """
    sig, contract = task.entry_signature, task.contract
    assert sig is not None
    judged = sorted(
        {t.dtype for t in (evaluation.timings if evaluation else [])} | {i.dtype for i in task.instantiations}
    )
    cases = [s.sizes for s in task.shapes] + [t.sizes for t in (evaluation.timings if evaluation else [])]
    ranges = {
        k: (min(c[k] for c in cases if k in c), max(c[k] for c in cases if k in c))
        for k in {k for c in cases for k in c}
    }
    args = {spec.name: a for a in contract.args if (spec := a.tensor or a.scalar) is not None}
    bound: dict[str, str] = {}
    conds: list[str] = []
    tensor = next((p.name for p in sig.params if _feeds_tensor(p, args)), None)
    if tensor is None:
        raise Refused(f"{sig.function} takes no tensor the contract describes: the guard has no device to check")
    conds.append(f"{tensor}.is_cuda and _on_validated_arch({tensor}.device)")
    for p in sig.params:  # sizes given as integers first: the simplest expression of each
        if p.feeds in ranges and p.via in ("size", "call", "name") and not _feeds_tensor(p, args):
            bound[p.feeds] = p.name
            conds.append(_within(p.name, ranges[p.feeds]))
    dtype_of: dict[str, str] = {}
    for p in sig.params:
        if p.kind in ("var_positional", "var_keyword"):
            raise Refused(f"{sig.function} takes *{p.name}; what its calls carry is not in the contract")
        if _feeds_tensor(p, args) and p.feeds is not None and (spec := args[p.feeds].tensor) is not None:
            conds += _tensor_conditions(p, spec, judged, dtype_of, bound, ranges)
        elif p.feeds in args and (scalar := args[p.feeds].scalar) is not None:
            if scalar.type == "int" and scalar.value is not None and p.feeds not in bound:
                conds.append(f"{p.name} == {int(scalar.value)}")
        elif p.via == "build" and p.loader_param:
            values = sorted(
                {repr(i.run_time[p.loader_param]) for i in task.instantiations if p.loader_param in i.run_time}
            )
            if not values:
                raise Refused(f"parameter {p.name}: the values its loader switch was built for are not recorded")
            conds.append(f"{p.name} in ({', '.join(values)},)")
        elif p.feeds is None and p.has_default and p.default is not None:
            conds.append(_pinned(p.name, p.default))
        elif p.feeds is None:
            raise Refused(
                f"parameter {p.name} feeds no contract argument and has no default: what it was judged at is unknown"
            )
    return conds


def _within(expr: str, bounds: tuple[int, int]) -> str:
    lo, hi = bounds
    return f"{expr} == {lo}" if lo == hi else f"{lo} <= {expr} <= {hi}"


def _feeds_tensor(p: EntryParam, args: dict) -> bool:
    return p.feeds in args and args[p.feeds].tensor is not None


def _pinned(name: str, default: str) -> str:
    if default in ("None", "True", "False"):
        return f"{name} is {default}"
    return f"{name} == {default}"


_ARITH = (
    ast.Expression,
    ast.BinOp,
    ast.UnaryOp,
    ast.Name,
    ast.Constant,
    ast.Load,
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.FloorDiv,
    ast.USub,
)


def _tensor_conditions(
    p: EntryParam,
    spec: TensorSpec,
    judged: Sequence[str],
    dtype_of: dict[str, str],
    bound: dict[str, str],
    ranges: dict[str, tuple[int, int]],
) -> list[str]:
    name = p.name
    out: list[str] = []
    try:
        shorts = sorted({canonical_dtype(spec.dtype, d) for d in judged}, key=list(TABLE).index)
    except ContractError as err:
        raise Refused(f"tensor {name}: which dtypes it was judged in is not known ({err})") from err
    if spec.dtype == "T" and "T" in dtype_of:
        out.append(f"{name}.dtype == {dtype_of['T']}.dtype")
    else:
        dtype_of.setdefault(spec.dtype, name)
        names = [f"torch.{torch_name(d)}" for d in shorts]
        out.append(f"{name}.dtype == {names[0]}" if len(names) == 1 else f"{name}.dtype in ({', '.join(names)})")
    out.append(f"{name}.dim() == {len(spec.shape)}")
    if spec.strides is None:
        out.append(f"{name}.is_contiguous()")
    for i, dim in enumerate(spec.shape):
        here = f"{name}.shape[{i}]"
        if dim in ranges and dim not in bound:
            bound[dim] = here
            out.append(_within(here, ranges[dim]))
            continue
        tree = ast.parse(str(dim), mode="eval")
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        wildcard = not used and isinstance(tree.body, ast.UnaryOp)  # "-1": any size
        if all(isinstance(n, _ARITH) for n in ast.walk(tree)) and used <= bound.keys() and not wildcard:
            expr = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: bound.get(m.group(0), m.group(0)), str(dim))
            out.append(f"{here} == {expr}")
    if p.has_default and p.default == "None":
        out = [f"{name} is not None", *out]
    return out
