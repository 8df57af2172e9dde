"""One op module's ``load_jit`` calls, read statically into :class:`~pipeline.records.LoadJitCall` records.

:func:`scan_module` walks every function of a parsed module: :class:`FunctionFacts`
says what each refers to (the reference graph :class:`~.program.Program` follows) and
which ``load_jit`` calls it makes; for a function that makes one, a static walk
(:class:`_StaticWalk`) snapshots the bindings in force at each call, and
:func:`read_load_jit` evaluates the call's arguments in that snapshot (static mode:
parameters stay symbolic, a condition on one is judged at its default).

What must stay true: every guess is written into the record's ``unresolved`` (a file
pattern globbed, a flag list extended under a condition, a condition judged at a
default); a line number is the call's 1-based line in the module.
"""

from __future__ import annotations

import ast
import dataclasses
import fnmatch
import pathlib
import re
from typing import Any

import libcst as cst

from extract.jit_layout import layout_of
from extract.pyops.interpreter import AUG_OPERATORS, Evaluator
from extract.pyops.modules import Env, ModuleSet, PyFunction, PyModule
from extract.pyops.values import Alts, CppArgs, ParamRef, Unknown, Unresolvable
from pipeline.records import LoadJitCall

# The keywords SGLang's load_jit takes; any other is noted as unknown.
_LOADJIT_KWARGS = (
    "cuda_files",
    "cpp_files",
    "cuda_wrappers",
    "cpp_wrappers",
    "extra_cflags",
    "extra_cuda_cflags",
    "extra_ldflags",
    "extra_include_paths",
    "extra_dependencies",
    "header_only",
)


class FunctionFacts(cst.CSTVisitor):
    """What one function refers to: names, attribute names, getattr strings, load_jit calls."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.attrs: set[str] = set()
        self.attr_of: list[tuple[str, str]] = []  # (receiver name, attribute)
        self.load_jit_calls: list[cst.Call] = []

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.attrs.add(node.attr.value)
        if isinstance(node.value, cst.Name):
            self.attr_of.append((node.value.value, node.attr.value))

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if (isinstance(func, cst.Name) and func.value == "load_jit") or (
            isinstance(func, cst.Attribute) and func.attr.value == "load_jit"
        ):
            self.load_jit_calls.append(node)
        if isinstance(func, cst.Name) and func.value == "getattr" and len(node.args) >= 2:
            name = node.args[1].value
            if isinstance(name, cst.SimpleString):
                self.attrs.add(str(name.evaluated_value))


def _load_jit_lines(text: str) -> list[int]:
    """1-based lines of the ``load_jit(`` calls, in source order (stdlib ast: cheap positions)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name == "load_jit":
                lines.append((node.lineno, node.col_offset))
    return [line for line, _ in sorted(lines)]


class _StaticWalk:
    """Walks a loader function in source order, snapshotting the bindings in force
    at each ``load_jit`` call. Both arms of an ``if`` are walked (a later arm's
    assignment wins; appends from either arm are kept and noted), so every
    wrapper the function *can* register is recorded."""

    def __init__(self, ev: Evaluator, fn: PyFunction) -> None:
        self.ev = ev
        self.fn = fn
        self.snapshots: list[tuple[cst.Call, Env]] = []
        self.conditional: set[str] = set()

    def run(self) -> list[tuple[cst.Call, Env]]:
        env = Env(self.fn.module)
        for param in self.fn.params():
            default = None
            has_default = param.default is not None
            if param.default is not None:
                try:
                    default = self.ev.eval(param.default, Env(self.fn.module))
                except Unresolvable:
                    has_default = False
            env.values[param.name.value] = ParamRef(param.name.value, default, has_default)
        self.block(self.fn.node.body, env, depth=0)
        return self.snapshots

    def block(self, block: cst.BaseSuite, env: Env, depth: int) -> None:
        body = block.body
        for stmt in body:
            self.statement(stmt, env, depth)

    def statement(self, stmt: cst.CSTNode, env: Env, depth: int) -> None:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                self.small(small, env, depth)
        elif isinstance(stmt, cst.SimpleStatementSuite):
            for small in stmt.body:
                self.small(small, env, depth)
        elif isinstance(stmt, cst.If):
            self.block(stmt.body, env, depth + 1)
            orelse = stmt.orelse
            if isinstance(orelse, cst.Else):
                self.block(orelse.body, env, depth + 1)
            elif orelse is not None:
                self.statement(orelse, env, depth + 1)
        elif isinstance(stmt, (cst.For, cst.While)):
            if isinstance(stmt, cst.For):
                try:
                    iterable = self.ev.eval(stmt.iter, env)
                except Unresolvable:
                    iterable = None
                if isinstance(iterable, (list, tuple)) and iterable:
                    self.ev.bind_target(stmt.target, iterable[0], env)
                else:
                    self.ev.bind_target(stmt.target, Unknown(self.fn.module.code(stmt.target)), env)
            self.block(stmt.body, env, depth + 1)
        elif isinstance(stmt, (cst.With, cst.Try)):
            self.block(stmt.body, env, depth)
        # nested defs / classes: their own scope, not walked

    def small(self, small: cst.BaseSmallStatement, env: Env, depth: int) -> None:
        finder = FunctionFacts()
        small.visit(finder)
        for call in finder.load_jit_calls:
            snapshot = Env(env.module, {k: (list(v) if type(v) is list else v) for k, v in env.values.items()})
            self.snapshots.append((call, snapshot))
        try:
            if isinstance(small, cst.Assign):
                value = self.ev.eval(small.value, env)
                for target in small.targets:
                    self.ev.bind_target(target.target, value, env)
            elif isinstance(small, cst.AnnAssign) and small.value is not None:
                self.ev.bind_target(small.target, self.ev.eval(small.value, env), env)
            elif isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
                fake = cst.BinaryOperation(
                    left=small.target, operator=AUG_OPERATORS[type(small.operator).__name__](), right=small.value
                )
                env.values[small.target.value] = self.ev.eval(fake, env)
                if depth and isinstance(env.values[small.target.value], list):
                    self.conditional.add(small.target.value)
            elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                func = small.value.func
                if isinstance(func, cst.Attribute) and func.attr.value in ("append", "extend"):
                    self.ev.eval(small.value, env)
                    if depth and isinstance(func.value, cst.Name):
                        self.conditional.add(func.value.value)
        except Unresolvable:
            for name in _assigned_names(small):
                env.values[name] = Unknown(name)


def _assigned_names(small: cst.BaseSmallStatement) -> list[str]:
    if isinstance(small, cst.Assign):
        return [t.target.value for t in small.targets if isinstance(t.target, cst.Name)]
    if isinstance(small, (cst.AnnAssign, cst.AugAssign)) and isinstance(small.target, cst.Name):
        return [small.target.value]
    return []


def _strings(value: Any, ev: Evaluator, what: str, unresolved: list[str]) -> list[str]:
    """Flatten an evaluated list of strings; unknown pieces are kept as ``{text}`` and noted."""
    if value is None:
        return []
    if isinstance(value, (Unknown, ParamRef)):
        text = value.text if isinstance(value, Unknown) else value.name
        unresolved.append(f"{what}: `{text}` is not known statically")
        return []
    items = value if isinstance(value, (list, tuple)) else [value]
    out: list[str] = []
    for item in items:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, Alts):
            out.extend(str(o) for o in item.options)
            unresolved.append(f"{what}: one of {', '.join(map(str, item.options))}")
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            out.append(str(item))
        else:
            text = item.text if isinstance(item, Unknown) else getattr(item, "name", repr(item))
            unresolved.append(f"{what}: `{text}` is not known statically")
    return out


def _wrappers(value: Any, what: str, unresolved: list[str]) -> list[tuple[str, str]]:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        unresolved.append(f"{what}: `{getattr(value, 'text', value)}` is not known statically")
        return []
    out: list[tuple[str, str]] = []
    for item in value:
        if not (isinstance(item, (list, tuple)) and len(item) == 2):
            unresolved.append(f"{what}: entry `{getattr(item, 'text', item)}` is not an (export, entry) pair")
            continue
        export, entry = item
        exports = [export] if isinstance(export, str) else list(export.options) if isinstance(export, Alts) else []
        if not exports:
            unresolved.append(f"{what}: export name `{getattr(export, 'text', export)}` is not known statically")
            continue
        if isinstance(entry, Alts):
            entries = [str(e) for e in entry.options]
        elif isinstance(entry, str):
            entries = [entry]
        else:
            text = entry.text if isinstance(entry, Unknown) else getattr(entry, "name", repr(entry))
            entries = ["{" + text + "}"]
            unresolved.append(f"{what}: entry of `{exports[0]}` is `{text}`, not known statically")
        for e in exports:
            for t in entries:
                if t.count("{") > t.count("{args}"):  # a placeholder other than the template args
                    unresolved.append(f"{what}: entry `{t}` of `{e}` has parts not known statically")
                out.append((str(e), t))
    return list(dict.fromkeys(out))


def _resolve_files(names: list[str], root: pathlib.Path, unresolved: list[str], what: str) -> list[str]:
    """csrc-relative names (as in the call) -> names that exist; a ``{...}`` part globs."""
    out: list[str] = []
    csrc_dir = layout_of(root).csrc_dir
    csrc = root / csrc_dir
    for name in names:
        if "{" in name:
            pattern = re.sub(r"\{[^}]*\}", "*", name)
            matches = sorted(
                p.relative_to(csrc).as_posix()
                for p in csrc.rglob("*")
                if p.is_file() and fnmatch.fnmatch(p.relative_to(csrc).as_posix(), pattern)
            )
            unresolved.append(f"{what}: `{name}` matched {matches or 'nothing'}")
            out.extend(matches)
        elif name.startswith("/"):
            unresolved.append(f"{what}: absolute path `{name}` is outside the package")
        else:
            if not (csrc / name).is_file():
                unresolved.append(f"{what}: `{name}` does not exist under {csrc_dir}")
            out.append(name)
    return list(dict.fromkeys(out))


def read_load_jit(fn: PyFunction, call: cst.Call, env: Env, line: int, modules: ModuleSet) -> LoadJitCall:
    """Evaluate one ``load_jit`` call's arguments statically into a :class:`LoadJitCall`."""
    ev = Evaluator(modules.resolve, strict=False)
    unresolved: list[str] = []
    marker_args: list[str] = []
    template_args: list[str] = []
    kwargs: dict[str, Any] = {}
    for arg in call.args:
        text = fn.module.code(arg.value)
        if arg.keyword is not None:
            try:
                kwargs[arg.keyword.value] = ev.eval(arg.value, env)
            except Unresolvable as err:
                kwargs[arg.keyword.value] = Unknown(text)
                unresolved.append(f"{arg.keyword.value}: {err}")
            continue
        marker_args.append(("*" + text) if arg.star == "*" else text)
        if arg.star == "*":
            try:
                value = ev.eval(arg.value, env)
            except Unresolvable:
                value = None
            if isinstance(value, CppArgs):
                template_args.extend(value.texts)
            else:
                unresolved.append(f"positional `*{text}` is not a make_cpp_args(...) result")
    for key in kwargs:
        if key not in _LOADJIT_KWARGS:
            unresolved.append(f"unknown load_jit keyword `{key}`")
    header_only = kwargs.get("header_only", True)
    if not isinstance(header_only, bool):
        unresolved.append(f"header_only: `{getattr(header_only, 'text', header_only)}` is not known statically")
        header_only = True
    cuda_files = _resolve_files(
        _strings(kwargs.get("cuda_files"), ev, "cuda_files", unresolved), modules.root, unresolved, "cuda_files"
    )
    cpp_files = _resolve_files(
        _strings(kwargs.get("cpp_files"), ev, "cpp_files", unresolved), modules.root, unresolved, "cpp_files"
    )
    record = LoadJitCall(
        module=fn.module.rel,
        function=fn.qualname,
        line=line,
        marker_args=marker_args,
        cuda_files=cuda_files,
        cpp_files=cpp_files,
        cuda_wrappers=_wrappers(kwargs.get("cuda_wrappers"), "cuda_wrappers", unresolved),
        cpp_wrappers=_wrappers(kwargs.get("cpp_wrappers"), "cpp_wrappers", unresolved),
        template_args=template_args,
        extra_cuda_cflags=_strings(kwargs.get("extra_cuda_cflags"), ev, "extra_cuda_cflags", unresolved),
        extra_cflags=_strings(kwargs.get("extra_cflags"), ev, "extra_cflags", unresolved),
        extra_include_paths=_strings(kwargs.get("extra_include_paths"), ev, "extra_include_paths", unresolved),
        extra_dependencies=_strings(kwargs.get("extra_dependencies"), ev, "extra_dependencies", unresolved),
        header_only=header_only,
        unresolved=list(dict.fromkeys([*unresolved, *ev.notes])),
    )
    return record


@dataclasses.dataclass
class ModuleScan:
    """One scanned module: its ``load_jit`` calls and what each function refers to."""

    module: PyModule
    calls: dict[str, list[LoadJitCall]]  # function qualname -> its load_jit calls
    facts: dict[str, FunctionFacts]  # qualname -> references


def scan_module(module: PyModule, text: str, modules: ModuleSet) -> ModuleScan:
    # k-th load_jit call in document order <-> k-th line from the stdlib parser
    everything = FunctionFacts()
    module.tree.visit(everything)
    line_of = {id(call): line for call, line in zip(everything.load_jit_calls, _load_jit_lines(text))}
    calls: dict[str, list[LoadJitCall]] = {}
    facts: dict[str, FunctionFacts] = {}
    functions = [*module.functions.values(), *(f for m in module.methods.values() for f in m.values())]
    for fn in functions:
        finder = FunctionFacts()
        fn.node.visit(finder)
        facts[fn.qualname] = finder
        if not finder.load_jit_calls:
            continue
        walk = _StaticWalk(Evaluator(modules.resolve, strict=False), fn)
        snapshots = {id(c): e for c, e in walk.run()}
        out = []
        for call in finder.load_jit_calls:
            env = snapshots.get(id(call)) or Env(module)
            record = read_load_jit(fn, call, env, line_of.get(id(call), 0), modules)
            extra = [*walk.ev.notes]  # guesses made while evaluating the function's locals
            extra += [f"`{n}` is extended under a condition; every option is listed" for n in sorted(walk.conditional)]
            if extra:
                record = record.model_copy(update={"unresolved": list(dict.fromkeys([*record.unresolved, *extra]))})
            out.append(record)
        calls[fn.qualname] = out
    return ModuleScan(module, calls, facts)


# =========================================================================== ops
