"""The Triton half of the index: ``@triton.jit`` kernels, their launch sites and registrations, read with libcst.

SGLang's Triton kernels are Python functions decorated ``@triton.jit`` (often under
``@triton.autotune(configs=[...], key=[...])`` and ``@triton.heuristics({...})``),
launched from ordinary Python as ``kernel[grid](args..., num_warps=4, BLOCK=128)``.
:func:`scan_file` reads one file into a :class:`pipeline.records.TritonFile`: every
kernel (span from its first decorator to its end: the region a coder edits; its
parameters, ``tl.constexpr`` ones marked; its autotune configs as literals; the
pointer parameters it stores to and loads from, through locals and same-file jit
helpers), every launch site (grid, arguments, keywords: where the launch configuration
lives), the module-level functions and what each calls, and the imports.
:func:`read_specs` reads the ``KernelSpec`` registrations with the TRITON backend,
including the ``for _mod, _fn in [...]: register_kernel(KernelSpec(target=f"...{_fn}"))``
loops SGLang writes them in. :func:`find_ops` turns files and registrations into
:class:`pipeline.records.TritonOp` s: a registered target, and every public
module-level function that launches a kernel (directly or through the module's own
helpers) that no public function it calls already launches.

What must stay true: nothing is imported or executed (SGLang's modules import torch);
a file that does not parse is a ``parse_error``, never an exception; spans are byte
offsets into the file as it is on disk; op ids are unique and deterministic for a tree.
"""

from __future__ import annotations

import builtins
import pathlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import libcst as cst

from pipeline.records import TritonConfig, TritonFile, TritonKernel, TritonLaunch, TritonParam

#: what marks a file as holding Triton kernels (the issue's count: 408 files in sglang 0.5.23)
MARKER = "@triton.jit"
OPS_PREFIX = "kernels/ops/"
_STORES = {"store", "atomic_add", "atomic_max", "atomic_min", "atomic_xchg", "atomic_cas", "atomic_and", "atomic_or"}
_STORES |= {"atomic_xor", "atomic_sub"}
_LOADS = {"load"}
_MAX_HELPER_DEPTH = 4
_BUILTINS = set(dir(builtins))


def dotted(node: cst.BaseExpression) -> str:
    """``triton.language.constexpr`` for an Attribute chain of Names; "" for anything else."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = dotted(node.value)
        return f"{head}.{node.attr.value}" if head else ""
    return ""


def module_rel(dotted_module: str) -> list[str]:
    """The package-relative files a dotted ``sglang.x.y`` module may be (``x/y.py``, ``x/y/__init__.py``)."""
    parts = dotted_module.split(".")
    if parts and parts[0] == "sglang":
        parts = parts[1:]
    base = "/".join(parts)
    return [f"{base}.py", f"{base}/__init__.py"] if base else []


def dotted_of(rel: str) -> str:
    """``kernels/ops/attention/merge_state.py`` -> ``sglang.kernels.ops.attention.merge_state``."""
    stem = rel.removesuffix(".py").removesuffix("/__init__")
    return "sglang." + stem.replace("/", ".")


# =========================================================================== literals


def literal(node: cst.BaseExpression) -> Any:
    """A Python literal (int, float, bool, str, None, negative numbers); raises ValueError otherwise."""
    if isinstance(node, cst.Integer):
        return int(node.value.replace("_", ""), 0)
    if isinstance(node, cst.Float):
        return float(node.value.replace("_", ""))
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        value = literal(node.expression)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return -value
    raise ValueError("not a literal")


def _config(node: cst.BaseExpression, code: str) -> TritonConfig:
    """One ``triton.Config({...}, num_warps=..., num_stages=...)`` as literals, else its text as unresolved."""
    if not (isinstance(node, cst.Call) and dotted(node.func).split(".")[-1] == "Config"):
        return TritonConfig(unresolved=code)
    kwargs: dict[str, Any] = {}
    warps = stages = None
    try:
        for arg in node.args:
            if arg.keyword is None and isinstance(arg.value, cst.Dict):
                for el in arg.value.elements:
                    if not isinstance(el, cst.DictElement):
                        raise ValueError("a ** element")
                    kwargs[str(literal(el.key))] = literal(el.value)
            elif arg.keyword is not None and arg.keyword.value == "num_warps":
                warps = int(literal(arg.value))
            elif arg.keyword is not None and arg.keyword.value == "num_stages":
                stages = int(literal(arg.value))
            elif arg.keyword is not None and arg.keyword.value == "kwargs" and isinstance(arg.value, cst.Dict):
                for el in arg.value.elements:
                    if isinstance(el, cst.DictElement):
                        kwargs[str(literal(el.key))] = literal(el.value)
    except ValueError:
        return TritonConfig(unresolved=code)
    return TritonConfig(kwargs=kwargs, num_warps=warps, num_stages=stages)


# =========================================================================== one file


def positional_binding(
    names: Sequence[str], args: Sequence[str], length: Callable[[str], int | None] = lambda expr: None
) -> list[tuple[str, str, int | None]]:
    """(kernel parameter, argument text, index into a ``*`` argument or None) for a launch's positional
    ``args`` (:attr:`pipeline.records.TritonLaunch.args`) over the kernel's parameter ``names``.

    A ``*expr`` argument fills as many parameters as ``length(expr)`` says (``*x.stride()``: one per
    dimension); where that is unknown (None) the parameters from there on are left unbound, never
    guessed. A ``**expr`` argument binds no positional parameter (its keywords are the caller's to read).
    """
    out: list[tuple[str, str, int | None]] = []
    cursor = 0
    for text in args:
        if text.startswith("**"):
            continue
        if text.startswith("*"):
            count = length(text[1:])
            if count is None:
                break
            out += [(names[cursor + i], text[1:], i) for i in range(count) if cursor + i < len(names)]
            cursor += count
        elif cursor < len(names):
            out.append((names[cursor], text, None))
            cursor += 1
    return out


def names_in(node: cst.CSTNode) -> set[str]:
    found: set[str] = set()

    class _V(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            found.add(n.value)

        def visit_Attribute(self, n: cst.Attribute) -> bool:
            n.value.visit(self)  # x.attr: x only
            return False

    node.visit(_V())
    return found


def pointer_names(node: cst.CSTNode) -> set[str]:
    """:func:`names_in` without what is inside a ``tl.load(...)``: a loaded value (a slot index) offsets a
    pointer but is not one, so the tensor it came from is not written by a store it addresses."""
    found: set[str] = set()

    class _V(cst.CSTVisitor):
        def visit_Call(self, n: cst.Call) -> bool:
            return dotted(n.func).split(".")[-1] not in _LOADS

        def visit_Name(self, n: cst.Name) -> None:
            found.add(n.value)

        def visit_Attribute(self, n: cst.Attribute) -> bool:
            n.value.visit(self)
            return False

    node.visit(_V())
    return found


class _KernelBody(cst.CSTVisitor):
    """Inside one jit function: what each local derives from, the pointers stored/loaded, helper calls."""

    def __init__(self) -> None:
        self.derives: dict[str, set[str]] = {}
        self.stored: list[cst.BaseExpression] = []
        self.loaded: list[cst.BaseExpression] = []
        self.calls: list[tuple[str, list[cst.BaseExpression]]] = []

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        names = pointer_names(value)
        for t in names_in(target) if isinstance(target, cst.Tuple | cst.List) else {dotted(target)} - {""}:
            self.derives.setdefault(t, set()).update(names)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind(target.target, node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._bind(node.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._bind(node.target, node.value)

    def visit_For(self, node: cst.For) -> None:
        self._bind(node.target, node.iter)

    def visit_Call(self, node: cst.Call) -> None:
        name = dotted(node.func)
        tail = name.split(".")[-1]
        pointer = _pointer_arg(node)
        if tail in _STORES and pointer is not None:
            self.stored.append(pointer)
        elif tail in _LOADS and pointer is not None:
            self.loaded.append(pointer)
        elif name and "." not in name:
            self.calls.append((name, [a.value for a in node.args if a.keyword is None]))


def _pointer_arg(node: cst.Call) -> cst.BaseExpression | None:
    for arg in node.args:
        if arg.keyword is not None and arg.keyword.value in ("pointer", "ptr", "base"):
            return arg.value
    positional = [a.value for a in node.args if a.keyword is None]
    if isinstance(node.func, cst.Attribute) and not dotted(node.func).startswith(("tl.", "triton.")):
        return node.func.value  # desc.store(...): the descriptor is the pointer
    return positional[0] if positional else None


def roots(expr: cst.CSTNode, derives: Mapping[str, set[str]], params: set[str], *, names: Any = None) -> set[str]:
    """The parameters ``expr`` derives from, through the function's assignments (``names``: which names an
    expression carries, :func:`names_in` by default)."""
    out: set[str] = set()
    seen: set[str] = set()
    stack = list((names or names_in)(expr))
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in params:
            out.add(name)
        stack.extend(derives.get(name, ()))
    return out


class _FileVisitor(cst.CSTVisitor):
    """One pass over a module. Spans are found by locating each node's own text in the file's bytes
    from a cursor that only moves forward (libcst reproduces the source exactly and visits in source
    order), which costs a fraction of libcst's position metadata over 408 files."""

    def __init__(self, rel: str, module: cst.Module, data: bytes) -> None:
        self.rel = rel
        self.mod = module
        self.data = data
        self._cursor = 0
        self.kernels: list[TritonKernel] = []
        self.bodies: dict[str, _KernelBody] = {}
        self.launches: list[TritonLaunch] = []
        self.functions: list[str] = []
        self.calls: dict[str, list[str]] = {}
        self.imports: dict[str, str] = {}
        self._stack: list[str] = []
        self._class: list[str] = []
        self._kernel_nodes: set[int] = set()

    def _locate(self, node: cst.CSTNode) -> tuple[int, int, int]:
        """(start byte, end byte, line) of ``node``'s text, searched from the cursor."""
        if isinstance(node, cst.FunctionDef):
            node = node.with_changes(leading_lines=())
        text = self.mod.code_for_node(node).strip().encode("utf-8")
        start = self.data.find(text, self._cursor)
        if start < 0:  # a nested node: libcst writes its lines without the enclosing blocks' indentation
            lines = [re.escape(line.lstrip(b" \t")) for line in text.split(b"\n")]
            found = re.compile(rb"\n[ \t]*".join(lines)).search(self.data, self._cursor)
            if found is None:  # cannot happen for a tree libcst parsed from these bytes
                raise ValueError(f"{self.rel}: a node's text is not in the file")
            start, text = found.start(), found.group(0)
        self._cursor = start + len(text)
        return start, start + len(text), self.data.count(b"\n", 0, start) + 1

    # -- imports
    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        base = dotted(node.module) if node.module is not None else ""
        if node.relative:
            here = dotted_of(self.rel).split(".")
            if not self.rel.endswith("__init__.py"):
                here = here[:-1]
            up = len(node.relative) - 1
            here = here[: len(here) - up] if up else here
            base = ".".join([*here, base] if base else here)
        if isinstance(node.names, cst.ImportStar):
            return
        for alias in node.names:
            name = dotted(alias.name)
            local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else name
            self.imports[local] = f"{base}:{name}"

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            name = dotted(alias.name)
            if alias.asname and isinstance(alias.asname.name, cst.Name):
                self.imports[alias.asname.name.value] = f"{name}:"

    # -- scopes
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._class.append(node.name.value)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._class.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        decorators = [
            dotted(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator) for d in node.decorators
        ]
        if any(d in ("triton.jit", "jit", "tl.jit") for d in decorators):
            self._kernel_nodes.add(id(node))
            self._kernel(node, decorators)
            return False  # a kernel's body holds no launch sites
        qual = ".".join([*self._class, node.name.value]) if not self._stack else ""
        if not self._stack and not self._class:
            self.functions.append(node.name.value)
        self._stack.append(qual or self._stack[-1])
        return True

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        if id(original_node) not in self._kernel_nodes:
            self._stack.pop()

    def visit_Call(self, node: cst.Call) -> None:
        if not self._stack:
            return
        where = self._stack[-1]
        name = dotted(node.func)
        if name and where and "." not in where:
            self.calls.setdefault(where, []).append(name)
        if isinstance(node.func, cst.Subscript) and dotted(node.func.value):
            start, end, line = self._locate(node)
            grid = node.func.slice
            self.launches.append(
                TritonLaunch(
                    kernel=dotted(node.func.value),
                    function=where,
                    file=self.rel,
                    start_byte=start,
                    end_byte=end,
                    line=line,
                    grid=", ".join(self.mod.code_for_node(s.slice) for s in grid),
                    # a starred argument keeps its star ("*x.stride()", "**pdl_kwargs"): positional_binding
                    args=[a.star + self.mod.code_for_node(a.value) for a in node.args if a.keyword is None],
                    kwargs={a.keyword.value: self.mod.code_for_node(a.value) for a in node.args if a.keyword},
                )
            )

    # -- kernels
    def _kernel(self, node: cst.FunctionDef, decorators: list[str]) -> None:
        start, end, line = self._locate(node)
        params = [
            TritonParam(
                name=p.name.value,
                constexpr=p.annotation is not None and dotted(p.annotation.annotation).endswith("constexpr"),
                annotation=self.mod.code_for_node(p.annotation.annotation) if p.annotation else None,
                default=self.mod.code_for_node(p.default) if p.default is not None else None,
            )
            for p in [*node.params.posonly_params, *node.params.params, *node.params.kwonly_params]
        ]
        configs: list[TritonConfig] = []
        key: list[str] = []
        heuristics: list[str] = []
        for dec in node.decorators:
            call = dec.decorator
            if not isinstance(call, cst.Call):
                continue
            tail = dotted(call.func).split(".")[-1]
            for arg in call.args:
                kw = arg.keyword.value if arg.keyword else None
                if tail == "autotune" and kw in ("configs", None) and isinstance(arg.value, cst.List):
                    configs += [
                        _config(el.value, self.mod.code_for_node(el.value))
                        for el in arg.value.elements
                        if isinstance(el, cst.Element)
                    ]
                elif tail == "autotune" and kw == "configs":
                    configs.append(TritonConfig(unresolved=self.mod.code_for_node(arg.value)))
                elif tail == "autotune" and kw == "key" and isinstance(arg.value, cst.List | cst.Tuple):
                    key += [
                        str(literal(el.value)) for el in arg.value.elements if isinstance(el.value, cst.SimpleString)
                    ]
                elif tail == "heuristics" and isinstance(arg.value, cst.Dict):
                    heuristics += [
                        str(literal(el.key))
                        for el in arg.value.elements
                        if isinstance(el, cst.DictElement) and isinstance(el.key, cst.SimpleString)
                    ]
        body = _KernelBody()
        node.body.visit(body)
        self.bodies[node.name.value] = body
        self.kernels.append(
            TritonKernel(
                name=node.name.value,
                file=self.rel,
                start_byte=start,
                end_byte=end,
                line=line,
                params=params,
                autotune=configs,
                autotune_key=key,
                heuristics=heuristics,
                decorators=decorators,
                calls=sorted({c for c, _ in body.calls} - _BUILTINS),
            )
        )


def _settle_access(kernels: list[TritonKernel], bodies: Mapping[str, _KernelBody]) -> list[TritonKernel]:
    """Which pointer parameters each kernel stores to and loads from, same-file jit helpers followed."""
    by_name = {k.name: k for k in kernels}
    memo: dict[str, tuple[frozenset[str], frozenset[str]]] = {}

    def access(name: str, depth: int) -> tuple[frozenset[str], frozenset[str]]:
        if name in memo:
            return memo[name]
        memo[name] = (frozenset(), frozenset())  # a recursive helper stops here
        body, kernel = bodies[name], by_name[name]
        params = {p.name for p in kernel.params if not p.constexpr}  # a constexpr offsets a pointer, never is one
        stores = set().union(*(roots(e, body.derives, params, names=pointer_names) for e in body.stored))
        loads = set().union(*(roots(e, body.derives, params, names=pointer_names) for e in body.loaded))
        if depth < _MAX_HELPER_DEPTH:
            for callee, args in body.calls:
                if callee not in by_name or callee == name:
                    continue
                c_stores, c_loads = access(callee, depth + 1)
                c_params = [p.name for p in by_name[callee].params]
                for i, arg in enumerate(args[: len(c_params)]):
                    reach = roots(arg, body.derives, params)
                    if c_params[i] in c_stores:
                        stores |= reach
                    if c_params[i] in c_loads:
                        loads |= reach
        memo[name] = (frozenset(stores), frozenset(loads))
        return memo[name]

    out = []
    for k in kernels:
        stores, loads = access(k.name, 0)
        names = [p.name for p in k.params]
        out.append(
            k.model_copy(
                update={"stores": [n for n in names if n in stores], "loads": [n for n in names if n in loads]}
            )
        )
    return out


def scan_file(rel: str, data: bytes) -> TritonFile:
    """One file's kernels, launch sites, functions and imports; a file that does not parse is a parse_error."""
    try:
        module = cst.parse_module(data)
    except cst.ParserSyntaxError as err:
        return TritonFile(module=rel, parse_error=f"line {err.raw_line}: {err.message}")
    except (UnicodeDecodeError, RecursionError) as err:
        return TritonFile(module=rel, parse_error=f"{type(err).__name__}: {err}")
    visitor = _FileVisitor(rel, module, data)
    try:
        module.visit(visitor)
    except ValueError as err:
        return TritonFile(module=rel, parse_error=str(err))
    return TritonFile(
        module=rel,
        kernels=_settle_access(visitor.kernels, visitor.bodies),
        launches=visitor.launches,
        functions=visitor.functions,
        calls={k: sorted(set(v)) for k, v in visitor.calls.items()},
        imports=visitor.imports,
    )


def triton_files(root: pathlib.Path) -> list[str]:
    """Package-relative paths of every ``.py`` file whose text holds :data:`MARKER`, sorted."""
    out = []
    for path in root.rglob("*.py"):
        try:
            if MARKER in path.read_text(encoding="utf-8", errors="replace"):
                out.append(path.relative_to(root).as_posix())
        except OSError:
            continue
    return sorted(out)
