"""One file's launchers: its launch sites, the struct or function around each, the kernels each reaches.

:func:`scan_launchers` runs steps 4 and 5 of :mod:`extract.index` (launch sites,
aliases; see that module's docstring) on the syntax tree :mod:`extract.file_scan`
parsed from the masked bytes, and returns one :class:`RawLauncher` per launcher
unit. Launchers stay raw: a site's ``reached`` names are candidates until
:func:`extract.index.index_texts` matches them against the kernels visible
through the file's includes.

Why a module of its own: finding launchers reads calls, bindings and scopes
(what a name is bound to, where it is visible from), a different question from
the definitions, recovery and includes :mod:`extract.file_scan` reads; the two
share only the parsed tree, the line table and the kernel/device test.

What must stay true: spans index the original bytes (the tree is parsed from
the masked copy, whose offsets are the original's); a name bound at an inner
level shadows a kernel of the same name, as C++ name lookup does; launchers
come out sorted by start byte.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from extract.cxx import normalise, strip_template_args
from extract.cxx_nodes import (
    CLASS_TYPES,
    IDENT_TYPES,
    declarator_name,
    enclosing_class,
    enclosing_function,
    function_declarator,
    innermost_name,
    params_of,
    scope_names,
    with_template_header,
)
from source import treesitter as ts
from source.cuda_text import text_of
from source.launches import runtime_kernel
from source.treesitter import SyntaxNode


@dataclasses.dataclass
class LaunchSite:
    reached: set[str]  # names the kernel expression ends at, through aliases
    start_byte: int
    via: list[int] = dataclasses.field(default_factory=list)  # start bytes of same-file helper launchers called


@dataclasses.dataclass
class RawLauncher:
    name: str
    qualified_name: str
    kind: str
    start_byte: int
    end_byte: int
    line: int
    methods: list[str]
    sites: list[LaunchSite]
    mentioned: set[str]  # every identifier in the launcher (fallback when a site cannot be followed)


@dataclasses.dataclass
class _Binding:
    """``name`` bound to ``value``; where it is visible from depends on where it is bound."""

    name: str
    value: SyntaxNode
    start_byte: int
    function: tuple[int, int] | None  # byte range of the function it is local to, if any
    in_class: bool  # bound inside a struct/class body (a member)
    is_return: bool = False  # a function's return value, bound to the function's name


# The callees of a call by name: `helper(args)`, `helper<Args>(args)`, `ns::helper(args)`.
_BY_NAME = ("identifier", "template_function", "qualified_identifier")

# Launch syntax inside a macro body (kept as text by the grammar).
_MACRO_LAUNCH = re.compile(r"<<<|\bLaunchKernel\s*\(|\bcudaLaunch\w*\s*\(|\bhipLaunchKernelGGL\s*\(")


class _LaunchScanner:
    """One file's launchers, read from its syntax tree; see the module docstring for the steps."""

    def __init__(
        self,
        data: bytes,
        code: bytes,
        root: SyntaxNode,
        line: Callable[[int], int],
        classify: Callable[[SyntaxNode, SyntaxNode], tuple[str | None, int]],
    ) -> None:
        self.data = data
        self.code = code
        self.root = root
        self.line = line  # 1-based line of a byte offset
        self.classify = classify  # ('kernel' | 'device' | None, start) of a definition and its declarator
        self._call_cache: list[tuple[str, SyntaxNode]] | None = None

    def _launcher_unit(self, node: SyntaxNode) -> SyntaxNode | None:
        outer_function: SyntaxNode | None = None
        inner_class: SyntaxNode | None = None
        current = node.parent
        while current is not None:
            if current.type == "function_definition":
                outer_function = current
                inner_class = None  # a class inside a function is local to it
            elif current.type in CLASS_TYPES and current.child_by_field_name("body") is not None:
                if inner_class is None:
                    inner_class = current
            current = current.parent
        return inner_class if inner_class is not None else outer_function

    def _launch_expressions(self) -> list[tuple[SyntaxNode, set[str]]]:
        """(site node, names in the kernel expression) for every launch site in code."""
        sites = []
        for match in ts.matches("launches", self.root):
            if "chevron" in match:
                sites.append((match["chevron"][0], self._identifiers(match["kernel"][0])))
            elif "helper_call" in match:
                if self._is_launch_helper(match["helper"][0]):
                    sites.append((match["helper_call"][0], self._identifiers(match["kernel"][0])))
            elif "runtime" in match:
                kernel = runtime_kernel(self.data, match)
                if kernel is not None:
                    sites.append((match["runtime"][0], self._identifiers(kernel)))
        return sites

    def _macro_launch_sites(self) -> list[tuple[SyntaxNode, set[str]]]:
        """Launches written inside a ``#define`` (the grammar keeps macro bodies as text).

        A macro defined inside a function or struct launches from there; one
        defined at namespace level launches from wherever it is invoked.
        """
        sites = []
        for match in ts.matches("macros", self.root):
            body = text_of(self.data, match["body"][0])
            if not _MACRO_LAUNCH.search(body):
                continue
            seeds = set(re.findall(r"[A-Za-z_]\w*", body))
            macro = match["macro"][0]
            if self._launcher_unit(macro) is not None:
                sites.append((macro, seeds))
                continue
            name = text_of(self.data, match["name"][0])
            for callee, call in self._calls():
                if callee == name:
                    sites.append((call, seeds | self._identifiers(call)))
        return sites

    def _is_launch_helper(self, call: SyntaxNode) -> bool:
        """Whether a chain of calls/fields starts at ``LaunchKernel(...)``."""
        current: SyntaxNode | None = call
        while current is not None:
            if current.type == "call_expression":
                function = current.child_by_field_name("function")
                if function is not None and function.type in ("identifier", "qualified_identifier"):
                    return text_of(self.data, function).split("::")[-1].strip() == "LaunchKernel"
                current = function
            elif current.type == "field_expression":
                current = current.child_by_field_name("argument")
            else:
                return False
        return False

    def _identifiers(self, node: SyntaxNode) -> set[str]:
        return {text_of(self.data, n) for n in ts.walk(node) if n.type in IDENT_TYPES}

    def _calls(self) -> list[tuple[str, SyntaxNode]]:
        """(callee's simple name, call node) for every call by name; computed once."""
        if self._call_cache is None:
            self._call_cache = []
            for match in ts.matches("calls", self.root):
                if match["callee"][0].type not in _BY_NAME:
                    continue
                callee = strip_template_args(text_of(self.data, match["callee"][0])).split("::")[-1].strip()
                self._call_cache.append((callee, match["call"][0]))
        return self._call_cache

    def _bindings(self) -> list[_Binding]:
        """Every name bound to a value in the file, with where it is visible from."""
        out = []
        for match in ts.matches("aliases", self.root):
            value = match["value"][0]
            if "return" in match:
                function = match["return"][0].parent
                while function is not None and function.type not in ("function_definition", "lambda_expression"):
                    function = function.parent
                if function is None or function.type != "function_definition":
                    continue
                func_decl = function_declarator(function)
                if func_decl is None:
                    continue
                if self.classify(function, function.child_by_field_name("declarator") or func_decl)[0]:
                    continue  # a kernel's or device function's return value is not a kernel alias
                name = declarator_name(func_decl, self.data)[0]
                out.append(_Binding(name, value, function.start_byte, None, enclosing_class(function), True))
            else:
                name_node = match["name"][0]
                inner = name_node if name_node.type in IDENT_TYPES else innermost_name(name_node)
                if inner is None:
                    continue
                function = enclosing_function(name_node)
                owner = (function.start_byte, function.end_byte) if function is not None else None
                out.append(
                    _Binding(text_of(self.data, inner), value, name_node.start_byte, owner, enclosing_class(name_node))
                )
        return out

    def _lambda_arguments(self, site: SyntaxNode, function: SyntaxNode) -> dict[str, list[SyntaxNode]]:
        """Parameters of lambdas around ``site`` -> the arguments the lambda is called with.

        Follows ``const auto run = [&](auto kernel) { LaunchKernel(...)(kernel, ...); };
        run(my_kernel<...>);`` within the enclosing function.
        """
        out: dict[str, list[SyntaxNode]] = {}
        current = site.parent
        while current is not None and current is not function:
            if current.type == "lambda_expression" and current.parent is not None:
                holder = current.parent
                if holder.type == "init_declarator":
                    variable = innermost_name(holder.child_by_field_name("declarator"))
                    declarator = current.child_by_field_name("declarator")
                    plist = declarator.child_by_field_name("parameters") if declarator is not None else None
                    names = [p.name for p in params_of(plist, self.data)] if plist is not None else []
                    if variable is not None and names:
                        var = text_of(self.data, variable)
                        for callee, call in self._calls():
                            if callee != var or not (function.start_byte <= call.start_byte < function.end_byte):
                                continue
                            args = call.child_by_field_name("arguments")
                            values = [c for c in args.named_children if c.type != "comment"] if args else []
                            for name, value in zip(names, values):
                                if name:
                                    out.setdefault(name, []).append(value)
            current = current.parent
        return out

    def _named_launch_sites(self, bindings: list[_Binding]) -> list[tuple[SyntaxNode, set[str]]]:
        """``auto launch = LaunchKernel(...); launch(kernel, args...)`` (a named launch helper)."""
        named: list[tuple[str, tuple[int, int] | None]] = []
        for b in bindings:
            if b.is_return:
                continue
            value = b.value
            if value.type == "call_expression" and self._is_launch_helper(value):
                named.append((b.name, b.function))
            elif value.type in ("argument_list", "initializer_list"):  # LaunchKernel launch(grid, block, ...);
                declaration = value.parent.parent if value.parent is not None else None
                kind = declaration.child_by_field_name("type") if declaration is not None else None
                if kind is not None and text_of(self.data, kind).split("::")[-1].strip() == "LaunchKernel":
                    named.append((b.name, b.function))
        sites = []
        for name, function in named:
            for callee, call in self._calls():
                if callee != name:
                    continue
                called = call.child_by_field_name("function")
                assert called is not None  # the calls query captures call_expressions, which have one
                if called.type != "identifier":
                    continue
                if function is not None and not (function[0] <= call.start_byte < function[1]):
                    continue
                args = call.child_by_field_name("arguments")
                values = [c for c in args.named_children if c.type != "comment"] if args else []
                if values:
                    sites.append((call, self._identifiers(values[0])))
        return sites

    def launchers(self) -> list[RawLauncher]:
        sites = self._launch_expressions() + self._macro_launch_sites()
        bindings = self._bindings() if sites or b"LaunchKernel" in self.code else []
        sites += self._named_launch_sites(bindings)
        if not sites:
            return []
        units: dict[tuple[int, int], RawLauncher] = {}

        def lookup(site: SyntaxNode, unit: SyntaxNode) -> list[dict[str, list[SyntaxNode]]]:
            function = enclosing_function(site, outermost=False)
            levels: list[dict[str, list[SyntaxNode]]] = []
            if function is not None:
                key = (function.start_byte, function.end_byte)
                local: dict[str, list[SyntaxNode]] = self._lambda_arguments(site, function)
                for b in bindings:
                    if b.function == key and not b.is_return:
                        local.setdefault(b.name, []).append(b.value)
                levels.append(local)
            if unit.type in CLASS_TYPES:
                members: dict[str, list[SyntaxNode]] = {}
                for b in bindings:
                    inside = unit.start_byte <= b.start_byte < unit.end_byte
                    if inside and (b.function is None or b.is_return):
                        members.setdefault(b.name, []).append(b.value)
                levels.append(members)
            file_wide: dict[str, list[SyntaxNode]] = {}
            for b in bindings:
                if b.is_return or (b.function is None and not b.in_class):
                    file_wide.setdefault(b.name, []).append(b.value)
            levels.append(file_wide)
            other_members: dict[str, list[SyntaxNode]] = {}  # e.g. `OtherTrait<...>::kFn` of another struct
            for b in bindings:
                if b.in_class and b.function is None:
                    other_members.setdefault(b.name, []).append(b.value)
            levels.append(other_members)
            return levels

        def add_site(site: SyntaxNode, seeds: set[str], via: list[int]) -> None:
            unit = self._launcher_unit(site)
            if unit is None:
                return
            key = (unit.start_byte, unit.end_byte)
            if key not in units:
                units[key] = self._new_launcher(unit)
            reached = self._follow(seeds, lookup(site, unit))
            units[key].sites.append(LaunchSite(reached, site.start_byte, via))

        for site, seeds in sites:
            add_site(site, seeds, [])
        # Calls to a launcher function of this file launch what it launches: one
        # round per level of helpers, until nothing new appears.
        done: set[tuple[int, int]] = set()
        for _round in range(4):
            helpers = {raw.name: raw for key, raw in units.items() if raw.kind == "function" and key not in done}
            if not helpers:
                break
            done.update(key for key, raw in units.items() if raw.kind == "function")
            for callee, call in self._calls():
                helper = helpers.get(callee)
                if helper is None or helper.start_byte <= call.start_byte < helper.end_byte:
                    continue
                add_site(call, self._identifiers(call), [helper.start_byte])
        return sorted(units.values(), key=lambda u: u.start_byte)

    def _follow(self, seeds: set[str], levels: list[dict[str, list[SyntaxNode]]]) -> set[str]:
        """Names a kernel expression ends at, through aliases.

        A name bound at the innermost level that binds it (the enclosing
        function and its lambdas' arguments, then the launcher struct's members
        and member functions' returns, then namespace-level names and helper
        functions' returns, then members of other structs of the file) is
        replaced by the names in its value, as C++ name lookup would shadow a
        kernel of the same name; names with no binding are returned (the
        kernel candidates).
        """
        seen: set[str] = set()
        terminals: set[str] = set()
        frontier = list(seeds)
        while frontier:
            name = frontier.pop()
            if name in seen:
                continue
            seen.add(name)
            values = next((level[name] for level in levels if name in level), None)
            if not values:
                terminals.add(name)
                continue
            for value in values:
                frontier.extend(self._identifiers(value) - seen)
        return terminals

    def _new_launcher(self, unit: SyntaxNode) -> RawLauncher:
        outer = with_template_header(unit)
        methods: list[str] = []
        if unit.type in CLASS_TYPES:
            kind = "struct"
            name_node = unit.child_by_field_name("name")
            name = normalise(text_of(self.data, name_node)) if name_node is not None else ""
            qualified = "::".join([*scope_names(unit, self.data), name])
            for member in self._members(unit.child_by_field_name("body")):
                func_decl = function_declarator(member)
                is_static = any(
                    c.type == "storage_class_specifier" and text_of(self.data, c) == "static" for c in member.children
                )
                if func_decl is not None and is_static:
                    member_name = declarator_name(func_decl, self.data)[0]
                    if member_name and member_name not in methods:
                        methods.append(member_name)
        else:
            kind = "function"
            func_decl = function_declarator(unit)
            name, written = declarator_name(func_decl, self.data) if func_decl is not None else ("", "")
            qualified = "::".join([*scope_names(unit, self.data), written])
        return RawLauncher(
            name=name,
            qualified_name=qualified,
            kind=kind,
            start_byte=outer.start_byte,
            end_byte=unit.end_byte,
            line=self.line(outer.start_byte),
            methods=methods,
            sites=[],
            mentioned=self._identifiers(unit),
        )

    @staticmethod
    def _members(body: SyntaxNode | None) -> list[SyntaxNode]:
        """Member declarations/definitions of a class body, looking through templates and #if."""
        out: list[SyntaxNode] = []
        if body is None:
            return out
        stack = list(reversed(body.named_children))
        while stack:
            node = stack.pop()
            if node.type in ("template_declaration", "preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif"):
                stack.extend(reversed(node.named_children))
            elif node.type in ("function_definition", "declaration", "field_declaration"):
                out.append(node)
        return out


def scan_launchers(
    data: bytes,
    code: bytes,
    root: SyntaxNode,
    line: Callable[[int], int],
    classify: Callable[[SyntaxNode, SyntaxNode], tuple[str | None, int]],
) -> list[RawLauncher]:
    """The launchers of one file, sorted by start byte: ``root`` is the tree parsed from the
    masked ``data``, ``code`` the bytes with comments, strings and preprocessor lines blanked,
    ``line`` a byte offset's line, ``classify`` the definitions' kernel/device test."""
    return _LaunchScanner(data, code, root, line, classify).launchers()
