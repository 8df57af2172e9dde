"""One file's part of the index: definitions, recovered definitions, includes, launchers.

:func:`scan_file` runs the per-file steps of :mod:`extract.index` (masking,
definitions, recovery, launch sites, aliases; see that module's docstring) on one
file's bytes and returns a :class:`FileScan`; launchers stay raw
(:class:`RawLauncher`) until :func:`extract.index.index_texts` resolves them
against the kernels visible through the file's includes.

What must stay true: :func:`scan_file` never raises (a failure on one file is a
``ParseIssue``), and every span indexes the original bytes.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import re
from typing import Any

from extract import treesitter as ts
from extract.cxx import balanced_end, code_only, normalise, strip_template_args
from extract.cxx_nodes import (
    CLASS_TYPES,
    IDENT_TYPES,
    declarator_name,
    enclosing_class,
    enclosing_function,
    function_declarator,
    innermost_name,
    node_text,
    params_of,
    scope_names,
    text_params,
    with_template_header,
)
from extract.macros import ATTRIBUTE_CALL, Mask, collect_macros, local_macros, mask_macros
from pipeline.records import FileDigest, KernelDef, Param, ParseIssue


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
class FileScan:
    """What one file contributes; launchers are resolved against kernels in :func:`index_texts`."""

    path: str
    digest: FileDigest | None = None
    kernels: list[KernelDef] = dataclasses.field(default_factory=list)
    device_functions: list[KernelDef] = dataclasses.field(default_factory=list)
    launchers: list[RawLauncher] = dataclasses.field(default_factory=list)
    includes: list[tuple[bool, str]] = dataclasses.field(default_factory=list)  # (angle brackets?, name)
    issues: list[ParseIssue] = dataclasses.field(default_factory=list)


# The name a recovered definition declares: the (qualified) identifier or
# operator right before its parameter list, with optional template arguments.
_RECOVERED_NAME = re.compile(
    rb"((?:[A-Za-z_]\w*\s*::\s*)*(?:operator\s*(?:\(\s*\)|\[\s*\]|[^\s\w(]+)|~?[A-Za-z_]\w*))"
    rb"\s*(?:<[^(){};]*>\s*)?\("
)


# A specifier word (or the end of a C++ attribute) right before a position.
_SPECIFIER_BEFORE = re.compile(
    rb"(?:\b(?:static|inline|__forceinline__|__inline__|__noinline__|__host__|__device__|__global__"
    rb"|constexpr|extern)|\[\[[^\[\]]*\]\])$"
)


class _Lines:
    def __init__(self, data: bytes) -> None:
        self.starts = [0] + [m.end() for m in re.finditer(rb"\n", data)]

    def line(self, offset: int) -> int:
        return bisect.bisect_right(self.starts, offset)


@dataclasses.dataclass
class _Binding:
    """``name`` bound to ``value``; where it is visible from depends on where it is bound."""

    name: str
    value: Any
    start_byte: int
    function: tuple[int, int] | None  # byte range of the function it is local to, if any
    in_class: bool  # bound inside a struct/class body (a member)
    is_return: bool = False  # a function's return value, bound to the function's name


# Launch syntax inside a macro body (kept as text by the grammar).
_MACRO_LAUNCH = re.compile(r"<<<|\bLaunchKernel\s*\(|\bcudaLaunch\w*\s*\(|\bhipLaunchKernelGGL\s*\(")


class _FileScanner:
    """One file's extraction; see the module docstring for the steps."""

    def __init__(self, path: str, data: bytes, macros: dict[str, str]) -> None:
        self.path = path
        self.data = data
        self.grammar = ts.grammar_for(path)
        self.code = code_only(data)
        self.macros = local_macros(data, macros)
        self.masked, self.masks = mask_macros(data, self.code, self.macros)
        self.mask_starts = [m.start for m in self.masks]
        self.lines = _Lines(data)
        self.tree = ts.parse(self.masked, self.grammar)
        self.root = self.tree.root_node
        self.result = FileScan(path=path)
        self._call_cache: list[tuple[str, Any]] | None = None

    # -- definitions

    def _masks_in(self, start: int, end: int) -> list[Mask]:
        i = bisect.bisect_left(self.mask_starts, start)
        out = []
        while i < len(self.masks) and self.masks[i].start < end:
            out.append(self.masks[i])
            i += 1
        return out

    def _head_start(self, offset: int) -> int:
        """Walk back over whitespace (which includes masked macros) from ``offset``."""
        i = offset
        while i > 0 and self.masked[i - 1 : i].isspace():
            i -= 1
        return i

    def _classify(self, node: Any, declarator: Any) -> tuple[str | None, int]:
        """('kernel' | 'device' | None, start byte including leading masked macros)."""
        lead = self._head_start(node.start_byte)
        lead_masks = [m for m in self._masks_in(lead, node.start_byte) if m.kind != "attr"]
        inner_masks = self._masks_in(node.start_byte, declarator.start_byte)
        head = self.code[node.start_byte : declarator.start_byte]
        tokens = {c.type for c in node.children if not c.is_named}
        kinds = {m.kind for m in lead_masks + inner_masks}
        start = lead_masks[0].start if lead_masks else node.start_byte
        if "__global__" in tokens or "kernel" in kinds or re.search(rb"\b__global__\b", head):
            return "kernel", start
        if "__device__" in tokens or "device" in kinds or re.search(rb"\b__device__\b", head):
            return "device", start
        return None, start

    def definitions(self) -> None:
        query = ts.load_query(self.grammar, "definitions")
        for node in ts.captures(query, self.root).get("function", []):
            body = node.child_by_field_name("body")
            func_decl = function_declarator(node)
            if body is None or func_decl is None:
                continue
            kind, start = self._classify(node, node.child_by_field_name("declarator") or func_decl)
            if kind is None:
                continue
            outer = with_template_header(node)
            if outer is not node:
                start = outer.start_byte
            name, written = declarator_name(func_decl, self.data)
            if not name:
                continue
            template_params: list[Param] = []
            current = node.parent
            while current is not None and current.type == "template_declaration":
                template_params = params_of(current.child_by_field_name("parameters"), self.data) + template_params
                current = current.parent
            self._add_definition(
                kind,
                name=name,
                qualified="::".join([*scope_names(node, self.data), written]),
                start=start,
                end=node.end_byte,
                template_params=template_params,
                params=params_of(func_decl.child_by_field_name("parameters"), self.data),
            )

    def _add_definition(self, kind: str, *, name, qualified, start, end, template_params, params) -> None:
        record = KernelDef(
            name=name,
            qualified_name=qualified,
            kind="kernel" if kind == "kernel" else "device_function",
            file=self.path,
            start_byte=start,
            end_byte=end,
            line=self.lines.line(start),
            template_params=template_params,
            params=params,
        )
        (self.result.kernels if kind == "kernel" else self.result.device_functions).append(record)

    # -- recovery of definitions the grammar garbled

    def recover(self) -> None:
        found = self.result.kernels + self.result.device_functions
        covered = sorted((d.start_byte, d.end_byte) for d in found)
        markers: list[tuple[int, int, str]] = [
            (m.start, m.end, m.kind) for m in self.masks if m.kind in ("kernel", "device")
        ]
        for match in re.finditer(rb"\b__(global|device)__\b", self.code):
            markers.append((match.start(), match.end(), "kernel" if match.group(1) == b"global" else "device"))
        markers.sort()
        recovered: list[tuple[int, int, str]] = []
        for start, end, kind in markers:
            if any(s <= start < e for s, e in covered) or any(s <= start < e for s, e, _n in recovered):
                continue  # inside a definition we already have (its head, or a lambda in its body)
            got = self._recover_at(start, end, kind)
            if got is not None:
                recovered.append(got)
        if recovered:
            lines = ", ".join(f"{name} (line {self.lines.line(s)})" for s, _e, name in recovered)
            self.result.issues.append(
                ParseIssue(
                    file=self.path,
                    line=self.lines.line(recovered[0][0]),
                    message=f"recovered from the text, not the syntax tree: {lines}",
                )
            )

    def _recover_at(self, start: int, end: int, kind: str) -> tuple[int, int, str] | None:
        code = self.code
        brace, semi = code.find(b"{", end), code.find(b";", end)
        if brace < 0 or (0 <= semi < brace):
            return None  # a declaration, a variable, or nothing
        head = bytearray(code[end:brace])
        for match in ATTRIBUTE_CALL.finditer(bytes(head)):
            close = balanced_end(bytes(head), match.end() - 1, strings=False, unbalanced=-1)
            if close > 0:
                head[match.start() : close] = b" " * (close - match.start())
        for m in self._masks_in(end, brace):
            head[m.start - end : m.end - end] = b" " * (m.end - m.start)
        head_bytes = bytes(head)
        call = _RECOVERED_NAME.search(head_bytes)
        if call is None:
            return None  # e.g. a __device__ lambda
        name_written = normalise(call.group(1).decode())
        open_paren = end + call.end() - 1
        close_paren = balanced_end(code, open_paren, strings=False, unbalanced=-1)
        if close_paren < 0 or close_paren > brace:
            return None
        body_end = balanced_end(code, brace, strings=False, unbalanced=-1)
        if body_end < 0:
            return None
        span_start = self._specifiers_start(start)
        template_params: list[Param] = []
        base = max(0, span_start - 4000)
        headers = list(re.finditer(rb"\btemplate\s*<", code[base:span_start]))
        header = headers[-1] if headers else None  # the last one before the definition
        if header is not None:
            open_angle = base + header.end() - 1
            close_angle = balanced_end(code, open_angle, strings=False, unbalanced=-1)
            if close_angle > 0 and not code[close_angle:span_start].strip():
                span_start = base + header.start()
                inner = self.data[open_angle + 1 : close_angle - 1].decode("utf-8", "replace")
                template_params = text_params(inner)
        params = text_params(self.data[open_paren + 1 : close_paren - 1].decode("utf-8", "replace"))
        name = name_written.split("::")[-1]
        enclosing = self.root.descendant_for_byte_range(start, start)
        scopes = scope_names(enclosing, self.data) if enclosing is not None else []
        self._add_definition(
            kind,
            name=name,
            qualified="::".join([*scopes, name_written.replace(" ", "")]),
            start=span_start,
            end=body_end,
            template_params=template_params,
            params=params,
        )
        return span_start, body_end, name

    def _specifiers_start(self, offset: int) -> int:
        """Where the specifiers before ``offset`` begin (``static``, ``inline``, masked macros...)."""
        start = offset
        while True:
            i = self._head_start(start)  # masked macros read as whitespace here
            masked = [m.start for m in self._masks_in(i, start)]
            if masked:
                start = min(masked)
                continue
            word = _SPECIFIER_BEFORE.search(self.code, 0, i) if i else None
            if word is None:
                return start
            start = word.start()

    # -- includes

    def includes(self) -> None:
        query = ts.load_query(self.grammar, "includes")
        for node in ts.captures(query, self.root).get("path", []):
            text = node_text(self.data, node).strip()
            if node.type == "system_lib_string" or text.startswith("<"):
                self.result.includes.append((True, text.strip("<>").strip()))
            elif node.type == "string_literal" or text.startswith('"'):
                self.result.includes.append((False, text.strip('"').strip()))
            else:  # #include MACRO
                self.result.includes.append((True, text))

    # -- launchers

    def _launcher_unit(self, node: Any) -> Any:
        outer_function, inner_class = None, None
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

    def _launch_expressions(self) -> list[tuple[Any, set[str]]]:
        """(site node, names in the kernel expression) for every launch site in code."""
        query = ts.load_query(self.grammar, "launches")
        sites = []
        for match in ts.matches(query, self.root):
            if "chevron" in match:
                sites.append((match["chevron"][0], self._identifiers(match["kernel"][0])))
            elif "helper_call" in match:
                if self._is_launch_helper(match["helper"][0]):
                    sites.append((match["helper_call"][0], self._identifiers(match["kernel"][0])))
            elif "api_call" in match:
                api = node_text(self.data, match["api"][0]).split("::")[-1].strip()
                args = [c for c in match["args"][0].named_children if c.type != "comment"]
                index = 1 if api in ("cudaLaunchKernelEx", "cudaLaunchKernelExC", "hipLaunchKernelEx") else 0
                if len(args) > index:
                    sites.append((match["api_call"][0], self._identifiers(args[index])))
        return sites

    def _macro_launch_sites(self) -> list[tuple[Any, set[str]]]:
        """Launches written inside a ``#define`` (the grammar keeps macro bodies as text).

        A macro defined inside a function or struct launches from there; one
        defined at namespace level launches from wherever it is invoked.
        """
        query = ts.load_query(self.grammar, "macros")
        sites = []
        for match in ts.matches(query, self.root):
            body = node_text(self.data, match["body"][0])
            if not _MACRO_LAUNCH.search(body):
                continue
            seeds = set(re.findall(r"[A-Za-z_]\w*", body))
            macro = match["macro"][0]
            if self._launcher_unit(macro) is not None:
                sites.append((macro, seeds))
                continue
            name = node_text(self.data, match["name"][0])
            for callee, call in self._calls():
                if callee == name:
                    sites.append((call, seeds | self._identifiers(call)))
        return sites

    def _is_launch_helper(self, call: Any) -> bool:
        """Whether a chain of calls/fields starts at ``LaunchKernel(...)``."""
        current = call
        while current is not None:
            if current.type == "call_expression":
                function = current.child_by_field_name("function")
                if function is not None and function.type in ("identifier", "qualified_identifier"):
                    return node_text(self.data, function).split("::")[-1].strip() == "LaunchKernel"
                current = function
            elif current.type == "field_expression":
                current = current.child_by_field_name("argument")
            else:
                return False
        return False

    def _identifiers(self, node: Any) -> set[str]:
        return {node_text(self.data, n) for n in ts.walk(node) if n.type in IDENT_TYPES}

    def _calls(self) -> list[tuple[str, Any]]:
        """(callee's simple name, call node) for every call by name; computed once."""
        if self._call_cache is None:
            query = ts.load_query(self.grammar, "calls")
            self._call_cache = []
            for match in ts.matches(query, self.root):
                callee = strip_template_args(node_text(self.data, match["callee"][0])).split("::")[-1].strip()
                self._call_cache.append((callee, match["call"][0]))
        return self._call_cache

    def _bindings(self) -> list[_Binding]:
        """Every name bound to a value in the file, with where it is visible from."""
        query = ts.load_query(self.grammar, "aliases")
        out = []
        for match in ts.matches(query, self.root):
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
                if self._classify(function, function.child_by_field_name("declarator") or func_decl)[0]:
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
                    _Binding(
                        node_text(self.data, inner), value, name_node.start_byte, owner, enclosing_class(name_node)
                    )
                )
        return out

    def _lambda_arguments(self, site: Any, function: Any) -> dict[str, list[Any]]:
        """Parameters of lambdas around ``site`` -> the arguments the lambda is called with.

        Follows ``const auto run = [&](auto kernel) { LaunchKernel(...)(kernel, ...); };
        run(my_kernel<...>);`` within the enclosing function.
        """
        out: dict[str, list[Any]] = {}
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
                        var = node_text(self.data, variable)
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

    def _named_launch_sites(self, bindings: list[_Binding]) -> list[tuple[Any, set[str]]]:
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
                if kind is not None and node_text(self.data, kind).split("::")[-1].strip() == "LaunchKernel":
                    named.append((b.name, b.function))
        sites = []
        for name, function in named:
            for callee, call in self._calls():
                if callee != name or call.child_by_field_name("function").type != "identifier":
                    continue
                if function is not None and not (function[0] <= call.start_byte < function[1]):
                    continue
                args = call.child_by_field_name("arguments")
                values = [c for c in args.named_children if c.type != "comment"] if args else []
                if values:
                    sites.append((call, self._identifiers(values[0])))
        return sites

    def launchers(self) -> None:
        sites = self._launch_expressions() + self._macro_launch_sites()
        bindings = self._bindings() if sites or b"LaunchKernel" in self.code else []
        sites += self._named_launch_sites(bindings)
        if not sites:
            return
        units: dict[tuple[int, int], RawLauncher] = {}

        def lookup(site: Any, unit: Any) -> list[dict[str, list[Any]]]:
            function = enclosing_function(site, outermost=False)
            levels: list[dict[str, list[Any]]] = []
            if function is not None:
                key = (function.start_byte, function.end_byte)
                local: dict[str, list[Any]] = self._lambda_arguments(site, function)
                for b in bindings:
                    if b.function == key and not b.is_return:
                        local.setdefault(b.name, []).append(b.value)
                levels.append(local)
            if unit.type in CLASS_TYPES:
                members: dict[str, list[Any]] = {}
                for b in bindings:
                    inside = unit.start_byte <= b.start_byte < unit.end_byte
                    if inside and (b.function is None or b.is_return):
                        members.setdefault(b.name, []).append(b.value)
                levels.append(members)
            file_wide: dict[str, list[Any]] = {}
            for b in bindings:
                if b.is_return or (b.function is None and not b.in_class):
                    file_wide.setdefault(b.name, []).append(b.value)
            levels.append(file_wide)
            other_members: dict[str, list[Any]] = {}  # e.g. `OtherTrait<...>::kFn` of another struct
            for b in bindings:
                if b.in_class and b.function is None:
                    other_members.setdefault(b.name, []).append(b.value)
            levels.append(other_members)
            return levels

        def add_site(site: Any, seeds: set[str], via: list[int]) -> None:
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
        self.result.launchers.extend(sorted(units.values(), key=lambda u: u.start_byte))

    def _follow(self, seeds: set[str], levels: list[dict[str, list[Any]]]) -> set[str]:
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

    def _new_launcher(self, unit: Any) -> RawLauncher:
        outer = with_template_header(unit)
        methods: list[str] = []
        if unit.type in CLASS_TYPES:
            kind = "struct"
            name_node = unit.child_by_field_name("name")
            name = normalise(node_text(self.data, name_node)) if name_node is not None else ""
            qualified = "::".join([*scope_names(unit, self.data), name])
            for member in self._members(unit.child_by_field_name("body")):
                func_decl = function_declarator(member)
                is_static = any(
                    c.type == "storage_class_specifier" and node_text(self.data, c) == "static" for c in member.children
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
            line=self.lines.line(outer.start_byte),
            methods=methods,
            sites=[],
            mentioned=self._identifiers(unit),
        )

    @staticmethod
    def _members(body: Any) -> list[Any]:
        """Member declarations/definitions of a class body, looking through templates and #if."""
        out: list[Any] = []
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

    # -- issues

    def issues(self) -> None:
        bad = ts.problems(self.root)
        if not bad:
            return
        first = bad[0]
        snippet = normalise(self.data[first.start_byte : first.start_byte + 60].decode("utf-8", "replace"))
        what = f"missing {first.type!r} before" if first.is_missing else "could not parse"
        self.result.issues.insert(
            0,
            ParseIssue(
                file=self.path,
                line=self.lines.line(first.start_byte),
                message=(
                    f"tree-sitter-{self.grammar} left {len(bad)} ERROR/MISSING node(s) "
                    f"(attribute macros already masked); first: {what} {snippet!r}"
                ),
            ),
        )

    def run(self) -> FileScan:
        self.definitions()
        self.recover()
        self.includes()
        self.launchers()
        self.issues()
        self.result.kernels.sort(key=lambda k: k.start_byte)
        self.result.device_functions.sort(key=lambda k: k.start_byte)
        return self.result


def _digest(path: str, data: bytes) -> FileDigest:
    return FileDigest(path=path, sha256=hashlib.sha256(data).hexdigest(), size=len(data))


def scan_file(path: str, data: bytes, macros: dict[str, str] | None = None) -> FileScan:
    """Index one file's bytes (``path`` is only its name in the records). Never raises."""
    try:
        result = _FileScanner(path, data, macros if macros is not None else collect_macros([data])).run()
    except Exception as err:  # a bug or an unexpected tree on one file must not stop the scan
        result = FileScan(path=path)
        result.issues.append(ParseIssue(file=path, message=f"indexing failed: {type(err).__name__}: {err}"))
    result.digest = _digest(path, data)
    return result


def scan_job(job: tuple[str, bytes, dict[str, str]]) -> FileScan:
    path, data, macros = job
    return scan_file(path, data, macros)
