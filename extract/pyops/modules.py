"""The program model: SGLang's Python modules as the interpreter sees them.

A module is parsed once with libcst (:func:`parse_module`) into a :class:`PyModule`:
its functions, classes and their methods, module-level constants (unevaluated) and
imports (local name -> source module and name). :class:`ModuleSet` finds the modules
the interpreter may follow (op modules and ``kernels/jit/utils``) by dotted name;
:class:`Env` is one frame's name bindings.

What must stay true: parsing evaluates nothing; names resolve the way Python resolves
them (locals, then the module, then builtins); the first binding of a module-level
name wins, which is how both arms of a platform switch are read.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Iterable
from typing import Any

import libcst as cst

from extract.jit_layout import layout_of


@dataclasses.dataclass
class PyFunction:
    """A function or method of a parsed module (``cls`` names its class)."""

    module: PyModule
    name: str
    node: cst.FunctionDef
    cls: str | None = None

    @property
    def qualname(self) -> str:
        return f"{self.cls}.{self.name}" if self.cls else self.name

    def params(self) -> list[cst.Param]:
        p = self.node.params
        return [*p.posonly_params, *p.params, *p.kwonly_params]


@dataclasses.dataclass
class PyModule:
    """One parsed Python module: functions, classes, module constants and imports."""

    rel: str  # relative to the package root
    dotted: str  # sglang.kernels.ops.x.y
    tree: cst.Module
    functions: dict[str, PyFunction] = dataclasses.field(default_factory=dict)
    classes: dict[str, cst.ClassDef] = dataclasses.field(default_factory=dict)
    methods: dict[str, dict[str, PyFunction]] = dataclasses.field(default_factory=dict)
    constants: dict[str, cst.BaseExpression] = dataclasses.field(default_factory=dict)
    imports: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)  # local -> (module, name)
    module_imports: dict[str, str] = dataclasses.field(default_factory=dict)  # local alias -> dotted module

    def code(self, node: cst.CSTNode) -> str:
        return " ".join(self.tree.code_for_node(node).split())


def dotted_name(rel: str) -> str:
    """``kernels/ops/a/b.py`` -> ``sglang.kernels.ops.a.b`` (``__init__`` maps to the package)."""
    parts = list(pathlib.PurePosixPath(rel).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["sglang", *parts])


def _resolve_relative(dotted: str, is_package: bool, level: int, module: str | None) -> str:
    base = dotted.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def attr_text(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = attr_text(node.value)
        return f"{head}.{node.attr.value}" if head else None
    return None


def parse_module(rel: str, text: str) -> PyModule:
    """Parse one module and index what the evaluator needs (no evaluation here)."""
    tree = cst.parse_module(text)
    mod = PyModule(rel=rel, dotted=dotted_name(rel), tree=tree)
    is_package = rel.endswith("__init__.py")

    def visit_block(statements: Iterable[cst.CSTNode]) -> None:
        for stmt in statements:
            if isinstance(stmt, cst.FunctionDef):
                mod.functions[stmt.name.value] = PyFunction(mod, stmt.name.value, stmt)
            elif isinstance(stmt, cst.ClassDef):
                mod.classes[stmt.name.value] = stmt
                methods = {}
                body = stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else []
                for item in body:
                    if isinstance(item, cst.FunctionDef):
                        methods[item.name.value] = PyFunction(mod, item.name.value, item, cls=stmt.name.value)
                mod.methods[stmt.name.value] = methods
            elif isinstance(stmt, cst.If):
                # Module-level platform switches: index both arms; the first binding wins.
                visit_block(stmt.body.body)
                if stmt.orelse is not None:
                    orelse = stmt.orelse
                    visit_block(orelse.body.body if isinstance(orelse, cst.Else) else [orelse])
            elif isinstance(stmt, cst.Try):
                visit_block(stmt.body.body)
            elif isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    _index_small(mod, small, is_package)

    visit_block(tree.body)
    return mod


def _index_small(mod: PyModule, small: cst.BaseSmallStatement, is_package: bool) -> None:
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        target = small.targets[0].target
        if isinstance(target, cst.Name):
            mod.constants.setdefault(target.value, small.value)
    elif isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name) and small.value is not None:
        mod.constants.setdefault(small.target.value, small.value)
    elif isinstance(small, cst.ImportFrom):
        if small.module is None and not small.relative:
            return
        base = attr_text(small.module) if small.module is not None else None
        level = len(small.relative)
        source = _resolve_relative(mod.dotted, is_package, level, base) if level else (base or "")
        if isinstance(small.names, cst.ImportStar):
            return
        for alias in small.names:
            name = attr_text(alias.name) or ""
            local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else name
            mod.imports.setdefault(local, (source, name))
    elif isinstance(small, cst.Import):
        for alias in small.names:
            name = attr_text(alias.name) or ""
            if alias.asname and isinstance(alias.asname.name, cst.Name):
                mod.module_imports[alias.asname.name.value] = name
            else:
                mod.module_imports[name.split(".")[0]] = name.split(".")[0]


# --------------------------------------------------------------------------- environments


class Env:
    """Name bindings of one evaluation frame: locals, then the module, then builtins."""

    def __init__(self, module: PyModule, values: dict[str, Any] | None = None, parent: Env | None = None) -> None:
        self.module = module
        self.values: dict[str, Any] = dict(values or {})
        self.parent = parent

    def lookup(self, name: str) -> tuple[bool, Any]:
        if name in self.values:
            return True, self.values[name]
        if self.parent is not None:
            return self.parent.lookup(name)
        return False, None


class ModuleSet:
    """The parsed op modules plus, lazily, the few non-op modules the evaluator follows
    (``kernels/jit/utils/**`` for helpers such as ``get_activation_cuda_cflags``, and
    sibling helper modules such as ``dsv4/utils.py`` for ``make_name``)."""

    def __init__(self, root: pathlib.Path, modules: dict[str, PyModule]) -> None:
        self.root = root
        self.modules = modules
        self.by_dotted = {m.dotted: m for m in modules.values()}
        self._misses: set[str] = set()

    def resolve(self, dotted: str) -> PyModule | None:
        if dotted in self.by_dotted:
            return self.by_dotted[dotted]
        if dotted in self._misses or not dotted.startswith("sglang.kernels."):
            return None
        parts = dotted.split(".")[1:]
        for rel in ("/".join(parts) + ".py", "/".join(parts) + "/__init__.py"):
            path = self.root / rel
            if path.is_file():
                try:
                    module = parse_module(rel, path.read_text(encoding="utf-8", errors="replace"))
                except cst.ParserSyntaxError:
                    break
                self.by_dotted[dotted] = module
                return module
        self._misses.add(dotted)
        return None


def find_op_modules(root: pathlib.Path) -> dict[str, str]:
    """Every op module of the package's layout (``kernels/ops/**``, or the older ``jit_kernel/*``) whose
    text mentions ``load_jit`` (rel -> text)."""
    layout = layout_of(root)
    out: dict[str, str] = {}
    for path in sorted((root / layout.ops_dir).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if not layout.is_op_module(rel):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if "load_jit" in text:
            out[rel] = text
    return out
