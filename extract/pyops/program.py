"""The program: SGLang's op tree, parsed and scanned on demand, with the reference graph between functions.

:class:`Program` is what every later reader of an op shares (the op scan, contract
inference, task instantiation): a module under ``kernels/ops`` is parsed and scanned
(:func:`~.calls.scan_module`) when first needed, and ``reach`` follows the names a
function refers to, through imports and ``self.`` methods, to every function it can
call.

What must stay true: a module is parsed at most once per program; a module that does
not parse is missing, never an error; the graph names functions as
``(package-relative file, qualname)``.
"""

from __future__ import annotations

import pathlib

import libcst as cst

from extract.jit_layout import layout_of
from extract.pyops.calls import ModuleScan, scan_module
from extract.pyops.modules import ModuleSet, PyFunction, parse_module


class Program:
    """Op modules parsed and scanned on demand, with the reference graph between functions.

    Used whole by :func:`scan_ops` and per op by contract inference and task
    instantiation (which need the functions an op reaches, its call sites and its
    loader). Modules under ``kernels/ops`` are parsed when first needed, so
    following an import into a helper module costs one parse.
    """

    def __init__(self, root: pathlib.Path, texts: dict[str, str] | None = None) -> None:
        self.root = pathlib.Path(root)
        self.ops_package = layout_of(self.root).ops_package  # the dotted prefix of the layout's op modules
        self.texts = dict(texts or {})
        self.sets = ModuleSet(self.root, {})
        self.scans: dict[str, ModuleScan] = {}
        self._reach: dict[tuple[str, str], frozenset[tuple[str, str]]] = {}
        self._missing: set[str] = set()

    def rel_for(self, dotted: str) -> str | None:
        """``sglang.kernels.ops.a.b`` -> its package-relative file, when it is an op-tree module."""
        if not dotted.startswith(self.ops_package):
            return None
        parts = dotted.split(".")[1:]
        for rel in ("/".join(parts) + ".py", "/".join(parts) + "/__init__.py"):
            if rel in self.texts or (self.root / rel).is_file():
                return rel
        return None

    def scan(self, rel: str) -> ModuleScan | None:
        if rel in self.scans:
            return self.scans[rel]
        if rel in self._missing:
            return None
        text = self.texts.get(rel)
        if text is None:
            path = self.root / rel
            if not path.is_file():
                self._missing.add(rel)
                return None
            text = path.read_text(encoding="utf-8", errors="replace")
            self.texts[rel] = text
        try:
            module = parse_module(rel, text)
        except cst.ParserSyntaxError:
            self._missing.add(rel)
            return None
        self.sets.modules[rel] = module
        self.sets.by_dotted[module.dotted] = module
        result = scan_module(module, text, self.sets)
        self.scans[rel] = result
        return result

    def function(self, rel: str, qualname: str) -> PyFunction | None:
        scan = self.scan(rel)
        if scan is None:
            return None
        if "." in qualname:
            cls, name = qualname.split(".", 1)
            return scan.module.methods.get(cls, {}).get(name)
        return scan.module.functions.get(qualname)

    def edges(self, node: tuple[str, str]) -> set[tuple[str, str]]:
        rel, qual = node
        scan = self.scan(rel)
        if scan is None:
            return set()
        module = scan.module
        facts = scan.facts.get(qual)
        if facts is None:
            return set()
        out: set[tuple[str, str]] = set()
        for name in facts.names:
            out |= self.resolve(rel, name)
        cls = qual.split(".")[0] if "." in qual else None
        for receiver, attr in facts.attr_of:
            if cls and receiver in ("self", "cls") and attr in module.methods.get(cls, {}):
                out.add((rel, f"{cls}.{attr}"))
                continue
            dotted = None
            if receiver in module.module_imports:
                dotted = module.module_imports[receiver]
            elif receiver in module.imports:
                source, original = module.imports[receiver]
                dotted = f"{source}.{original}"
            if dotted:
                out |= self._callables(self.rel_for(dotted), attr)
        out.discard(node)
        return out

    def resolve(self, rel: str, name: str) -> set[tuple[str, str]]:
        """What a bare ``name`` used in module ``rel`` calls: a function of that module
        or one it imports (``{(rel, name)}``), a class's methods, or nothing known."""
        scan = self.scan(rel)
        if scan is None:
            return set()
        module = scan.module
        if name in module.functions or name in module.classes:
            return self._callables(rel, name)
        if name in module.imports:
            source, original = module.imports[name]
            return self._callables(self.rel_for(source), original)
        return set()

    def _callables(self, target_rel: str | None, name: str) -> set[tuple[str, str]]:
        target = self.scan(target_rel) if target_rel else None
        if target is None or target_rel is None:
            return set()
        if name in target.module.functions:
            return {(target_rel, name)}
        if name in target.module.classes:
            return {(target_rel, f"{name}.{m}") for m in target.module.methods.get(name, {})}
        return set()

    def reach(self, start: tuple[str, str]) -> frozenset[tuple[str, str]]:
        """Every function ``start`` refers to, transitively (itself included)."""
        if start in self._reach:
            return self._reach[start]
        seen = {start}
        stack = [start]
        while stack:
            node = stack.pop()
            for nxt in self.edges(node):
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        self._reach[start] = frozenset(seen)
        return self._reach[start]

    def public_target(self, rel: str, public: str) -> str | None:
        """The function a public name stands for (itself, or the function a module alias names)."""
        scan = self.scan(rel)
        if scan is None:
            return None
        if public in scan.module.functions:
            return public
        expr = scan.module.constants.get(public)
        if isinstance(expr, cst.Name) and expr.value in scan.module.functions:
            return expr.value
        return None
