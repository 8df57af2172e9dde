"""The C++/CUDA index of an SGLang tree: kernels, device functions, launchers, includes.

:func:`scan_tree` reads every C, C++ and CUDA file under the source's JIT and
AOT folders and returns a :class:`ScanResult`, the C++ half of
``records.Index``. Everything downstream (ops, tasks, the splice of candidate
code) trusts the byte spans recorded here, so:

What must stay true:
- **Completeness.** Every ``__global__`` definition in the text is a kernel in
  the index, including those spelled through an attribute macro
  (``#define C4_KERNEL __global__ __launch_bounds__(128, 4)``) and those the
  grammar garbles; ``tests/test_index.py`` checks this against an independent
  regex over the raw text.
- **Spans are exact bytes of the original file** (``data[start:end]``), cover the
  ``template<...>`` header and any leading attribute macro, and end at the
  closing brace. Splicing a span's own bytes back reproduces the file.
- **Nothing stops the scan.** An unreadable file, a file tree-sitter cannot fully
  parse, or a bug on one file becomes a :class:`~pipeline.records.ParseIssue`;
  the other files are still indexed.
- **Deterministic output**: files, kernels, device functions and launchers are
  sorted by (file, start byte); the same tree gives the same JSON.
- Paths are relative to the package root (``kernels/jit/csrc/...``).

How it works, per file (:func:`scan_file`):

1. *Masking.* Attribute macros that the grammar cannot know (SGLang's
   ``SGL_DEVICE`` = ``__forceinline__ __device__``, per-file kernel macros like
   ``C4_KERNEL``, CUTLASS/CuTe's ``CUTLASS_DEVICE``, ``CUTE_UNROLL``) and
   attribute calls (``__launch_bounds__(...)``, ``__cluster_dims__(...)``) are
   replaced by spaces of the same length before parsing. Offsets do not move, so
   every span still indexes the original bytes; the masked positions remember
   whether they meant "kernel" or "device". The macro table comes from a
   pre-pass over every ``#define`` in the tree (:func:`collect_macros`) plus a
   short list of well-known CUTLASS/CuTe macros.
2. *Definitions.* ``queries/cuda/definitions.scm`` finds function definitions; a
   definition is a kernel when its head holds ``__global__`` or a masked kernel
   macro, a device function when it holds ``__device__`` or a masked device
   macro (a ``__host__ __device__`` function counts as a device function).
3. *Recovery.* Every ``__global__``/``__device__`` token and kernel/device macro
   in code (comments, strings and preprocessor lines blanked) that no
   definition's head covers and that starts a definition (``{`` comes before
   ``;``) is recovered from the text: name before the parameter list, balanced
   parentheses and braces, a ``template<...>`` header just before it.
4. *Launch sites* (``queries/cuda/launches.scm``): ``k<<<...>>>(...)``,
   ``LaunchKernel(...)...(k, ...)``, ``LaunchKernel(...).launch(k, ...)``, a
   named helper (``auto launch = LaunchKernel(...); launch(k, ...)``), the
   ``cudaLaunchKernel*``/``cudaLaunchCooperativeKernel``/``hipLaunchKernelGGL``
   APIs, and launch syntax written inside a ``#define`` (the macro launches
   where it is defined, or where it is invoked when defined at namespace
   level). The launcher is the innermost struct that encloses the site (when
   that struct is not local to a function), else the outermost enclosing
   function; a struct or function that calls a launcher *function* of the
   same file is a launcher too (``launch_qknorm_rope<k1, k2>(...)``).
5. *Aliases.* From the kernel expression, names are followed through what
   binds them, innermost first: the enclosing function's locals
   (``const auto kernel = k<...>;``) and the arguments its lambdas are called
   with (``run(k<...>)`` for ``[&](auto kernel) {...}``); the launcher struct's
   members (``static constexpr kernel_fn_t f = k<...>;``) and its member
   functions' return values (``select_kernel``); namespace-level names and
   helper functions' returns; members of other structs of the file
   (``Table<...>::kFn``). A bound name shadows a kernel of the same name, as
   in C++; unbound names are the kernel candidates.

Across files (:func:`index_texts`): includes are resolved, and each launch
site's candidates are matched against the kernels defined in the launcher's
file and its include closure; a call to a same-file launcher function adds
what that function launches. When a site yields no kernel (the kernel comes
in as a template argument or parameter from elsewhere), every kernel of that
closure named anywhere in the launcher is recorded instead: ``launches``
over-approximates rather than loses a kernel.

Known limits (measured on sglang 0.5.23: 4 of 341 kernels are in no
``launches``): a kernel chosen inside a macro body that does not itself
launch (Marlin's ``kernel = Marlin<...>`` dispatch macros), and launches
through a helper function defined in another file (``ku::launch_kernel``).
"""

from __future__ import annotations

import bisect
import concurrent.futures
import concurrent.futures.process
import dataclasses
import hashlib
import multiprocessing
import os
import pathlib
import posixpath
import re
import time
from typing import Any, Callable, Iterable, Mapping

from pydantic import Field

from extract import treesitter as ts
from pipeline.records import FileDigest, KernelDef, LauncherDef, Param, ParseIssue, Record, SourceInfo

SUFFIXES: tuple[str, ...] = (".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc")

# Below this many bytes a process pool costs more than it saves.
_POOL_MIN_BYTES = 512 * 1024


class ScanResult(Record):
    """The C++/CUDA half of ``records.Index``; see the module docstring for its guarantees."""

    files: list[FileDigest]
    grammar: dict[str, str]  # file suffix -> grammar used ("cuda" | "cpp")
    kernels: list[KernelDef]
    device_functions: list[KernelDef]
    launchers: list[LauncherDef]
    includes: dict[str, list[str]]  # file -> resolved relative paths, or "<name>" when unresolved
    parse_issues: list[ParseIssue] = Field(default_factory=list)
    elapsed_s: float = 0.0


# --------------------------------------------------------------------------- text helpers

_CODE_NOISE = re.compile(
    rb"//[^\n]*"  # line comment
    rb"|/\*.*?\*/"  # block comment
    rb'|"(?:\\.|[^"\\\n])*"'  # string literal
    rb"|(?<![\w'])'(?:\\[^'\n]{1,8}|[^'\\\n])'"  # character literal (not a digit separator)
    rb"|^[ \t]*#(?:[^\n]*\\\n)*[^\n]*",  # preprocessor line, with continuations
    re.S | re.M,
)


def code_only(data: bytes) -> bytes:
    """``data`` with comments, literals and preprocessor lines blanked (newlines kept).

    Offsets are unchanged, so positions found here index ``data`` directly.
    """
    return _CODE_NOISE.sub(lambda m: re.sub(rb"[^\n]", b" ", m.group()), data)


def _normalise(text: str) -> str:
    return " ".join(text.split())


def _balanced_end(text: bytes, open_at: int, open_ch: int, close_ch: int) -> int:
    """Index just past the bracket closing the one at ``open_at``; -1 when unbalanced."""
    depth = 0
    for i in range(open_at, len(text)):
        ch = text[i]
        if ch == open_ch:
            depth += 1
        elif ch == close_ch:
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


def _split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` outside (), <>, [] and {} (good enough for parameter lists)."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth = max(0, depth - 1)
        if ch == sep and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


# --------------------------------------------------------------------------- macros

# Tokens that may appear in a specifier macro's expansion.
_SPECIFIER_WORDS = {
    b"__global__": "kernel",
    b"__device__": "device",
    b"__host__": "attr",
    b"__forceinline__": "attr",
    b"__noinline__": "attr",
    b"__inline__": "attr",
    b"inline": "attr",
    b"static": "attr",
    b"constexpr": "attr",
    b"extern": "attr",
}
# Attribute calls the grammar does not know (or knows only in some positions);
# masked with their parenthesised arguments.
_ATTRIBUTE_CALLS = (b"__launch_bounds__", b"__cluster_dims__", b"__maxnreg__", b"__align__")
_ATTRIBUTE_CALL = re.compile(rb"\b(?:" + b"|".join(_ATTRIBUTE_CALLS) + rb")\s*\(")

# Well-known macros of headers outside the tree (CUTLASS, CuTe) that SGLang's
# vendored kernels use as specifiers or statements. What they expand to is
# what matters here: a kernel marker, a device marker, or nothing syntactic.
EXTERNAL_MACROS: dict[str, str] = {
    "CUTLASS_GLOBAL": "kernel",
    "CUTLASS_DEVICE": "device",
    "CUTLASS_HOST_DEVICE": "device",
    "CUTE_DEVICE": "device",
    "CUTE_HOST_DEVICE": "device",
    "CUTE_UNROLL": "attr",
    "CUTE_NO_UNROLL": "attr",
    "CUTLASS_PRAGMA_UNROLL": "attr",
    "CUTLASS_PRAGMA_NO_UNROLL": "attr",
}

_DEFINE = re.compile(rb"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(?![\w(])((?:[^\n]*\\\n)*[^\n]*)", re.M)
_BLOCK_OR_LINE_COMMENT = re.compile(rb"//[^\n]*|/\*.*?\*/", re.S)
_TOKEN = re.compile(rb"\[\[.*?\]\]|__attribute__\s*\(\(.*?\)\)|_Pragma\s*\(\s*\"[^\"]*\"\s*\)|[A-Za-z_]\w*|\S")


def _classify_expansion(body: bytes, known: dict[str, str]) -> str | None:
    """'kernel' / 'device' / 'attr' when ``body`` is only specifiers, else None.

    An empty body is not a specifier macro: include guards and feature flags
    are empty too, and blanking them in code would gain nothing.
    """
    body = _BLOCK_OR_LINE_COMMENT.sub(b" ", body.replace(b"\\\n", b" ")).strip()
    if not body:
        return None
    # drop attribute calls with their arguments
    while True:
        match = _ATTRIBUTE_CALL.search(body)
        if not match:
            break
        end = _balanced_end(body, match.end() - 1, ord("("), ord(")"))
        if end < 0:
            return None
        body = body[: match.start()] + b" " + body[end:]
    strongest = "attr"
    rank = {"attr": 0, "device": 1, "kernel": 2}
    for token in _TOKEN.findall(body):
        if token.startswith((b"[[", b"__attribute__", b"_Pragma")):
            kind = "attr"
        else:
            kind = _SPECIFIER_WORDS.get(token) or known.get(token.decode())
        if kind is None:
            return None
        if rank[kind] > rank[strongest]:
            strongest = kind
    return strongest


def _file_defines(data: bytes) -> list[tuple[str, bytes]]:
    return [(m.group(1).decode(), m.group(2)) for m in _DEFINE.finditer(data)]


def collect_macros(texts: Iterable[bytes]) -> dict[str, str]:
    """Tree-wide specifier macros: name -> 'kernel' | 'device' | 'attr'.

    A name counts only when every definition of it in the tree is made of
    specifiers; definitions may build on each other
    (``#define CLUSTER_TOPK_KERNEL TOPK_KERNEL __cluster_dims__(...)``), so the
    classification is iterated to a fixed point.
    """
    bodies: dict[str, list[bytes]] = {}
    for data in texts:
        for name, body in _file_defines(data):
            bodies.setdefault(name, []).append(body)
    table: dict[str, str] = dict(EXTERNAL_MACROS)
    rank = {"attr": 0, "device": 1, "kernel": 2}
    changed = True
    while changed:
        changed = False
        for name, defs in bodies.items():
            kinds = [_classify_expansion(b, table) for b in defs]
            if any(k is None for k in kinds):
                continue
            kind = max(kinds, key=rank.__getitem__)  # type: ignore[arg-type]
            if table.get(name) != kind:
                table[name] = kind
                changed = True
    return table


def _local_macros(data: bytes, tree_wide: dict[str, str]) -> dict[str, str]:
    """The macro table for one file: its own definitions win over the tree-wide ones."""
    table = dict(tree_wide)
    for name, body in _file_defines(data):
        kind = _classify_expansion(body, table)
        if kind is None:
            table.pop(name, None)
        else:
            table[name] = kind
    return table


@dataclasses.dataclass
class _Mask:
    start: int
    end: int
    kind: str  # kernel | device | attr


def _mask(data: bytes, code: bytes, macros: dict[str, str]) -> tuple[bytes, list[_Mask]]:
    """Blank specifier macros and attribute calls (same length), remembering what they meant."""
    masks: list[_Mask] = []
    if macros:
        names = sorted(macros, key=len, reverse=True)
        pattern = re.compile(rb"\b(?:" + b"|".join(re.escape(n.encode()) for n in names) + rb")\b")
        for match in pattern.finditer(code):
            masks.append(_Mask(match.start(), match.end(), macros[match.group().decode()]))
    for match in _ATTRIBUTE_CALL.finditer(code):
        end = _balanced_end(code, match.end() - 1, ord("("), ord(")"))
        if end > 0:
            masks.append(_Mask(match.start(), end, "attr"))
    if not masks:
        return data, []
    masks.sort(key=lambda m: m.start)
    buffer = bytearray(data)
    for m in masks:
        buffer[m.start : m.end] = re.sub(rb"[^\n]", b" ", data[m.start : m.end])
    return bytes(buffer), masks


# --------------------------------------------------------------------------- per-file scan


@dataclasses.dataclass
class _LaunchSite:
    reached: set[str]  # names the kernel expression ends at, through aliases
    start_byte: int
    via: list[int] = dataclasses.field(default_factory=list)  # start bytes of same-file helper launchers called


@dataclasses.dataclass
class _RawLauncher:
    name: str
    qualified_name: str
    kind: str
    start_byte: int
    end_byte: int
    line: int
    methods: list[str]
    sites: list[_LaunchSite]
    mentioned: set[str]  # every identifier in the launcher (fallback when a site cannot be followed)


@dataclasses.dataclass
class FileScan:
    """What one file contributes; launchers are resolved against kernels in :func:`index_texts`."""

    path: str
    digest: FileDigest | None = None
    kernels: list[KernelDef] = dataclasses.field(default_factory=list)
    device_functions: list[KernelDef] = dataclasses.field(default_factory=list)
    launchers: list[_RawLauncher] = dataclasses.field(default_factory=list)
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


_SCOPE_TYPES = {"namespace_definition", "struct_specifier", "class_specifier", "union_specifier"}
_CLASS_TYPES = {"struct_specifier", "class_specifier", "union_specifier"}
_IDENT_TYPES = {"identifier", "field_identifier", "type_identifier"}


def _text(data: bytes, node: Any) -> str:
    return data[node.start_byte : node.end_byte].decode("utf-8", "replace")


def _scope_names(node: Any, data: bytes) -> list[str]:
    """Enclosing namespace and class names, outermost first."""
    names: list[str] = []
    current = node.parent
    while current is not None:
        if current.type in _SCOPE_TYPES:
            name = current.child_by_field_name("name")
            if name is not None:
                names.append(_normalise(_text(data, name)))
        current = current.parent
    return list(reversed(names))


def _with_template_header(node: Any) -> Any:
    """The outermost ``template_declaration`` wrapping ``node`` directly, else ``node``."""
    current = node
    while current.parent is not None and current.parent.type == "template_declaration":
        current = current.parent
    return current


def _inner_declarator(node: Any) -> Any:
    """The declarator nested in ``node``; ``reference_declarator`` and
    ``parenthesized_declarator`` hold it as a plain child rather than a field."""
    inner = node.child_by_field_name("declarator")
    if inner is None and node.type in ("reference_declarator", "parenthesized_declarator"):
        inner = next((c for c in node.named_children if c.type not in ("comment", "type_qualifier")), None)
    return inner


def _function_declarator(node: Any) -> Any:
    declarator = node.child_by_field_name("declarator")
    while declarator is not None and declarator.type != "function_declarator":
        declarator = _inner_declarator(declarator)
    return declarator


def _strip_template_args(text: str) -> str:
    out, depth = [], 0
    for ch in text:
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def _declarator_name(func_decl: Any, data: bytes) -> tuple[str, str]:
    """(simple name, name as written, maybe qualified) of a function declarator."""
    target = func_decl.child_by_field_name("declarator")
    if target is None:
        return "", ""
    written = _normalise(_text(data, target))
    if target.type in ("operator_name", "destructor_name"):
        return written, written
    cleaned = written if re.search(r"\boperator\b", written) else _strip_template_args(written)
    return cleaned.split("::")[-1].strip(), cleaned


def _innermost_name(declarator: Any) -> Any:
    """The identifier a (possibly nested) parameter declarator names, or None."""
    current = declarator
    while current is not None:
        if current.type in ("identifier", "field_identifier", "type_identifier"):
            return current
        current = _inner_declarator(current)
    return None


def _text_without(data: bytes, node: Any, holes: list[tuple[int, int]]) -> str:
    pieces, cursor = [], node.start_byte
    for start, end in sorted(holes):
        if start < cursor:
            continue
        pieces.append(data[cursor:start])
        cursor = end
    pieces.append(data[cursor : node.end_byte])
    return _normalise(b" ".join(pieces).decode("utf-8", "replace"))


def _comment_holes(node: Any) -> list[tuple[int, int]]:
    return [(n.start_byte, n.end_byte) for n in ts.walk(node) if n.type == "comment"]


def _param(node: Any, data: bytes) -> Param | None:
    """A function or template parameter: name, type text without the name, default text."""
    if node.type == "comment":
        return None
    if node.type in ("variadic_parameter", "..."):
        return Param(name="", type="...")
    holes = _comment_holes(node)
    name_node = None
    if node.type in ("type_parameter_declaration", "variadic_type_parameter_declaration"):
        name_node = next((c for c in node.named_children if c.type == "type_identifier"), None)
    elif node.type == "optional_type_parameter_declaration":
        name_node = node.child_by_field_name("name")
    elif node.type == "template_template_parameter_declaration":
        inner = next((c for c in node.named_children if c.type.endswith("parameter_declaration")), None)
        if inner is not None:
            name_node = next((c for c in inner.named_children if c.type == "type_identifier"), None)
    else:
        name_node = _innermost_name(node.child_by_field_name("declarator"))
    default_node = node.child_by_field_name("default_value") or node.child_by_field_name("default_type")
    default = None
    if default_node is not None:
        default = _normalise(_text(data, default_node))
        # cut from the '=' to the end of the default
        eq = data.rfind(b"=", node.start_byte, default_node.start_byte)
        holes.append((eq if eq >= 0 else default_node.start_byte, default_node.end_byte))
    name = ""
    if name_node is not None:
        name = _text(data, name_node)
        holes.append((name_node.start_byte, name_node.end_byte))
    return Param(name=name, type=_text_without(data, node, holes), default=default)


def _params(parameter_list: Any, data: bytes) -> list[Param]:
    if parameter_list is None:
        return []
    out = []
    for child in parameter_list.named_children:
        param = _param(child, data)
        if param is not None:
            out.append(param)
    if any(c.type == "..." for c in parameter_list.children):
        out.append(Param(name="", type="..."))
    return out


def _text_params(text: str) -> list[Param]:
    """Parameters from raw text, for definitions recovered without a syntax tree."""
    out = []
    for part in _split_top_level(text):
        default = None
        pieces = _split_top_level(part, "=")
        if len(pieces) == 2:
            part, default = pieces[0], _normalise(pieces[1])
        match = re.search(r"([A-Za-z_]\w*)\s*(\[[^\]]*\]\s*)*$", part)
        if match and part[: match.start()].strip() and match.group(1) not in ("const", "volatile"):
            name = match.group(1)
            type_text = part[: match.start(1)] + part[match.end(1) :]
        else:
            name, type_text = "", part
        out.append(Param(name=name, type=_normalise(type_text), default=default))
    return out


@dataclasses.dataclass
class _Binding:
    """``name`` bound to ``value``; where it is visible from depends on where it is bound."""

    name: str
    value: Any
    start_byte: int
    function: tuple[int, int] | None  # byte range of the function it is local to, if any
    in_class: bool  # bound inside a struct/class body (a member)
    is_return: bool = False  # a function's return value, bound to the function's name


def _enclosing_function(node: Any, outermost: bool = False) -> Any:
    """The innermost (or outermost) ``function_definition`` around ``node``, or None."""
    found = None
    current = node.parent
    while current is not None:
        if current.type == "function_definition":
            found = current
            if not outermost:
                return found
        current = current.parent
    return found


def _enclosing_class(node: Any) -> bool:
    current = node.parent
    while current is not None:
        if current.type in _CLASS_TYPES:
            return True
        current = current.parent
    return False


# Launch syntax inside a macro body (kept as text by the grammar).
_MACRO_LAUNCH = re.compile(r"<<<|\bLaunchKernel\s*\(|\bcudaLaunch\w*\s*\(|\bhipLaunchKernelGGL\s*\(")


class _FileScanner:
    """One file's extraction; see the module docstring for the steps."""

    def __init__(self, path: str, data: bytes, macros: dict[str, str]) -> None:
        self.path = path
        self.data = data
        self.grammar = ts.grammar_for(path)
        self.code = code_only(data)
        self.macros = _local_macros(data, macros)
        self.masked, self.masks = _mask(data, self.code, self.macros)
        self.mask_starts = [m.start for m in self.masks]
        self.lines = _Lines(data)
        self.tree = ts.parse(self.masked, self.grammar)
        self.root = self.tree.root_node
        self.result = FileScan(path=path)
        self._call_cache: list[tuple[str, Any]] | None = None

    # -- definitions

    def _masks_in(self, start: int, end: int) -> list[_Mask]:
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
            func_decl = _function_declarator(node)
            if body is None or func_decl is None:
                continue
            kind, start = self._classify(node, node.child_by_field_name("declarator") or func_decl)
            if kind is None:
                continue
            outer = _with_template_header(node)
            if outer is not node:
                start = outer.start_byte
            name, written = _declarator_name(func_decl, self.data)
            if not name:
                continue
            template_params: list[Param] = []
            current = node.parent
            while current is not None and current.type == "template_declaration":
                template_params = _params(current.child_by_field_name("parameters"), self.data) + template_params
                current = current.parent
            self._add_definition(
                kind,
                name=name,
                qualified="::".join([*_scope_names(node, self.data), written]),
                start=start,
                end=node.end_byte,
                template_params=template_params,
                params=_params(func_decl.child_by_field_name("parameters"), self.data),
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
        for match in _ATTRIBUTE_CALL.finditer(bytes(head)):
            close = _balanced_end(bytes(head), match.end() - 1, ord("("), ord(")"))
            if close > 0:
                head[match.start() : close] = b" " * (close - match.start())
        for m in self._masks_in(end, brace):
            head[m.start - end : m.end - end] = b" " * (m.end - m.start)
        head_bytes = bytes(head)
        call = _RECOVERED_NAME.search(head_bytes)
        if call is None:
            return None  # e.g. a __device__ lambda
        name_written = _normalise(call.group(1).decode())
        open_paren = end + call.end() - 1
        close_paren = _balanced_end(code, open_paren, ord("("), ord(")"))
        if close_paren < 0 or close_paren > brace:
            return None
        body_end = _balanced_end(code, brace, ord("{"), ord("}"))
        if body_end < 0:
            return None
        span_start = self._specifiers_start(start)
        template_params: list[Param] = []
        base = max(0, span_start - 4000)
        header = None
        for header in re.finditer(rb"\btemplate\s*<", code[base:span_start]):
            pass  # keep the last one before the definition
        if header is not None:
            open_angle = base + header.end() - 1
            close_angle = _balanced_end(code, open_angle, ord("<"), ord(">"))
            if close_angle > 0 and not code[close_angle:span_start].strip():
                span_start = base + header.start()
                inner = self.data[open_angle + 1 : close_angle - 1].decode("utf-8", "replace")
                template_params = _text_params(inner)
        params = _text_params(self.data[open_paren + 1 : close_paren - 1].decode("utf-8", "replace"))
        name = name_written.split("::")[-1]
        enclosing = self.root.descendant_for_byte_range(start, start)
        scopes = _scope_names(enclosing, self.data) if enclosing is not None else []
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
            text = _text(self.data, node).strip()
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
            elif current.type in _CLASS_TYPES and current.child_by_field_name("body") is not None:
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
                api = _text(self.data, match["api"][0]).split("::")[-1].strip()
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
            body = _text(self.data, match["body"][0])
            if not _MACRO_LAUNCH.search(body):
                continue
            seeds = set(re.findall(r"[A-Za-z_]\w*", body))
            macro = match["macro"][0]
            if self._launcher_unit(macro) is not None:
                sites.append((macro, seeds))
                continue
            name = _text(self.data, match["name"][0])
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
                    return _text(self.data, function).split("::")[-1].strip() == "LaunchKernel"
                current = function
            elif current.type == "field_expression":
                current = current.child_by_field_name("argument")
            else:
                return False
        return False

    def _identifiers(self, node: Any) -> set[str]:
        return {_text(self.data, n) for n in ts.walk(node) if n.type in _IDENT_TYPES}

    def _calls(self) -> list[tuple[str, Any]]:
        """(callee's simple name, call node) for every call by name; computed once."""
        if self._call_cache is None:
            query = ts.load_query(self.grammar, "calls")
            self._call_cache = []
            for match in ts.matches(query, self.root):
                callee = _strip_template_args(_text(self.data, match["callee"][0])).split("::")[-1].strip()
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
                func_decl = _function_declarator(function)
                if func_decl is None:
                    continue
                if self._classify(function, function.child_by_field_name("declarator") or func_decl)[0]:
                    continue  # a kernel's or device function's return value is not a kernel alias
                name = _declarator_name(func_decl, self.data)[0]
                out.append(_Binding(name, value, function.start_byte, None, _enclosing_class(function), True))
            else:
                name_node = match["name"][0]
                inner = name_node if name_node.type in _IDENT_TYPES else _innermost_name(name_node)
                if inner is None:
                    continue
                function = _enclosing_function(name_node)
                owner = (function.start_byte, function.end_byte) if function is not None else None
                out.append(
                    _Binding(_text(self.data, inner), value, name_node.start_byte, owner, _enclosing_class(name_node))
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
                    variable = _innermost_name(holder.child_by_field_name("declarator"))
                    declarator = current.child_by_field_name("declarator")
                    plist = declarator.child_by_field_name("parameters") if declarator is not None else None
                    names = [p.name for p in _params(plist, self.data)] if plist is not None else []
                    if variable is not None and names:
                        var = _text(self.data, variable)
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
                if kind is not None and _text(self.data, kind).split("::")[-1].strip() == "LaunchKernel":
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
        units: dict[tuple[int, int], _RawLauncher] = {}

        def lookup(site: Any, unit: Any) -> list[dict[str, list[Any]]]:
            function = _enclosing_function(site, outermost=False)
            levels: list[dict[str, list[Any]]] = []
            if function is not None:
                key = (function.start_byte, function.end_byte)
                local: dict[str, list[Any]] = self._lambda_arguments(site, function)
                for b in bindings:
                    if b.function == key and not b.is_return:
                        local.setdefault(b.name, []).append(b.value)
                levels.append(local)
            if unit.type in _CLASS_TYPES:
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
            units[key].sites.append(_LaunchSite(reached, site.start_byte, via))

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

    def _new_launcher(self, unit: Any) -> _RawLauncher:
        outer = _with_template_header(unit)
        methods: list[str] = []
        if unit.type in _CLASS_TYPES:
            kind = "struct"
            name_node = unit.child_by_field_name("name")
            name = _normalise(_text(self.data, name_node)) if name_node is not None else ""
            qualified = "::".join([*_scope_names(unit, self.data), name])
            for member in self._members(unit.child_by_field_name("body")):
                func_decl = _function_declarator(member)
                is_static = any(
                    c.type == "storage_class_specifier" and _text(self.data, c) == "static" for c in member.children
                )
                if func_decl is not None and is_static:
                    member_name = _declarator_name(func_decl, self.data)[0]
                    if member_name and member_name not in methods:
                        methods.append(member_name)
        else:
            kind = "function"
            func_decl = _function_declarator(unit)
            name, written = _declarator_name(func_decl, self.data) if func_decl is not None else ("", "")
            qualified = "::".join([*_scope_names(unit, self.data), written])
        return _RawLauncher(
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
        out = []
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
        snippet = _normalise(self.data[first.start_byte : first.start_byte + 60].decode("utf-8", "replace"))
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


def _scan_one(job: tuple[str, bytes, dict[str, str]]) -> FileScan:
    path, data, macros = job
    return scan_file(path, data, macros)


# --------------------------------------------------------------------------- whole tree


def source_files(source: SourceInfo) -> list[str]:
    """Package-relative paths of every C/C++/CUDA file under the JIT and AOT folders, sorted."""
    root = pathlib.Path(source.root)
    found: set[str] = set()
    for folder in [*source.jit_dirs, *source.aot_dirs]:
        base = root / folder
        if not base.is_dir():
            continue
        for dirpath, _dirs, names in os.walk(base):
            for name in names:
                if os.path.splitext(name)[1].lower() in SUFFIXES:
                    found.add((pathlib.Path(dirpath) / name).relative_to(root).as_posix())
    return sorted(found)


def include_dirs(source: SourceInfo) -> list[str]:
    """Package-relative folders searched for ``#include`` (SGLang's ``-I`` for JIT kernels)."""
    root = pathlib.Path(source.root)
    dirs = []
    for folder in source.jit_dirs:
        dirs.append(posixpath.join(folder, "include"))
    for folder in source.aot_dirs:
        dirs.append(posixpath.normpath(posixpath.join(folder, "..", "include")))
    return [d for d in dirs if (root / d).is_dir()]


def _resolve_includes(
    path: str, specs: list[tuple[bool, str]], search: list[str], exists: Callable[[str], bool]
) -> list[str]:
    """Package-relative paths of what ``path`` includes, in order; ``<name>`` when unresolved.

    Quoted includes are looked up beside the including file first, then in the
    include folders; angle-bracket includes only in the include folders.
    """
    out: list[str] = []
    here = posixpath.dirname(path)
    for angle, name in specs:
        candidates = [] if angle else [posixpath.normpath(posixpath.join(here, name))]
        candidates += [posixpath.normpath(posixpath.join(d, name)) for d in search]
        resolved = next((c for c in candidates if not c.startswith("../") and exists(c)), None)
        entry = resolved if resolved is not None else f"<{name}>"
        if entry not in out:
            out.append(entry)
    return out


def _closure(start: str, includes: dict[str, list[str]]) -> set[str]:
    seen, stack = {start}, [start]
    while stack:
        for child in includes.get(stack.pop(), []):
            if not child.startswith("<") and child not in seen:
                seen.add(child)
                stack.append(child)
    return seen


def _resolve_launchers(raws: list[_RawLauncher], path: str, visible: set[str]) -> list[LauncherDef]:
    """Match one file's launch sites against the kernels visible from it.

    A site launches the visible kernels its expression ends at, plus whatever
    the same-file helper launchers it calls launch (to a fixed point). A site
    that yields nothing either way falls back to every visible kernel named in
    the launcher: the kernel came in through something we cannot follow (a
    parameter, a lambda argument), and losing it would be worse than listing a
    sibling.
    """
    own: dict[int, set[str]] = {raw.start_byte: set() for raw in raws}
    for raw in raws:
        for site in raw.sites:
            own[raw.start_byte] |= site.reached & visible
    total = {key: set(names) for key, names in own.items()}
    changed = True
    while changed:
        changed = False
        for raw in raws:
            for site in raw.sites:
                for helper in site.via:
                    extra = total.get(helper, set()) - total[raw.start_byte]
                    if extra:
                        total[raw.start_byte] |= extra
                        changed = True
    out = []
    for raw in raws:
        launches = set(total[raw.start_byte])
        for site in raw.sites:
            from_helpers = set().union(*(total.get(h, set()) for h in site.via)) if site.via else set()
            if not (site.reached & visible) and not from_helpers:
                launches |= raw.mentioned & visible
        out.append(
            LauncherDef(
                name=raw.name,
                qualified_name=raw.qualified_name,
                kind=raw.kind,  # type: ignore[arg-type]
                file=path,
                start_byte=raw.start_byte,
                end_byte=raw.end_byte,
                line=raw.line,
                launches=sorted(launches),
                methods=raw.methods,
            )
        )
    return out


def index_texts(
    texts: Mapping[str, bytes],
    *,
    search: Iterable[str] = (),
    root: pathlib.Path | None = None,
    workers: int | None = None,
    issues: Iterable[ParseIssue] = (),
) -> ScanResult:
    """Index files given as bytes (package-relative path -> contents).

    ``search``: package-relative include folders. ``root``: the package root, so
    an include of a file that was not scanned still resolves when it exists on
    disk. ``workers``: processes for parsing (default: the CPU count, and none
    for small inputs); 1 scans in this process. ``issues``: problems found
    before indexing (unreadable files), kept in the result.
    """
    started = time.perf_counter()
    paths = sorted(texts)
    macros = collect_macros(texts[p] for p in paths)
    jobs = [(path, texts[path], macros) for path in paths]
    total = sum(len(t) for t in texts.values())
    workers = workers if workers is not None else (os.cpu_count() or 1)
    scans: list[FileScan] | None = None
    if workers > 1 and total >= _POOL_MIN_BYTES and len(jobs) > 1:
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods else None)
        try:
            with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
                scans = list(pool.map(_scan_one, jobs, chunksize=max(1, len(jobs) // (workers * 8))))
        except (OSError, concurrent.futures.process.BrokenProcessPool):
            scans = None  # no processes here (sandbox, resource limits): scan in this process
    if scans is None:
        scans = [_scan_one(job) for job in jobs]

    known = set(paths)

    def exists(candidate: str) -> bool:
        return candidate in known or (root is not None and (root / candidate).is_file())

    search = list(search)
    includes = {scan.path: _resolve_includes(scan.path, scan.includes, search, exists) for scan in scans}
    kernels_by_file = {scan.path: {k.name for k in scan.kernels} for scan in scans}
    launchers: list[LauncherDef] = []
    for scan in scans:
        if scan.launchers:
            visible = set().union(*(kernels_by_file.get(f, set()) for f in _closure(scan.path, includes)))
            launchers.extend(_resolve_launchers(scan.launchers, scan.path, visible))

    def ordered(items: list[Any]) -> list[Any]:
        return sorted(items, key=lambda d: (d.file, d.start_byte, d.end_byte))

    all_issues = [*issues, *(issue for scan in scans for issue in scan.issues)]
    return ScanResult(
        files=[scan.digest for scan in scans if scan.digest is not None],
        grammar={suffix: ts.grammar_for("x" + suffix) for suffix in SUFFIXES},
        kernels=ordered([k for scan in scans for k in scan.kernels]),
        device_functions=ordered([d for scan in scans for d in scan.device_functions]),
        launchers=ordered(launchers),
        includes=includes,
        parse_issues=sorted(all_issues, key=lambda i: (i.file, i.line or 0)),
        elapsed_s=round(time.perf_counter() - started, 3),
    )


def scan_tree(source: SourceInfo, *, workers: int | None = None) -> ScanResult:
    """Index every C/C++/CUDA file of ``source`` (its JIT and AOT folders).

    ``elapsed_s`` covers reading and indexing. See :func:`index_texts` for
    ``workers``.
    """
    started = time.perf_counter()
    root = pathlib.Path(source.root)
    texts: dict[str, bytes] = {}
    unreadable: list[ParseIssue] = []
    for path in source_files(source):
        try:
            texts[path] = (root / path).read_bytes()
        except OSError as err:
            unreadable.append(ParseIssue(file=path, message=f"could not read: {err}"))
    result = index_texts(texts, search=include_dirs(source), root=root, workers=workers, issues=unreadable)
    return result.model_copy(update={"elapsed_s": round(time.perf_counter() - started, 3)})
