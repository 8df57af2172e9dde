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
   ``LaunchKernel(...)...(k, ...)``, ``LaunchKernel(...).launch(k, ...)`` and the
   ``cudaLaunchKernel*``/``cudaLaunchCooperativeKernel``/``hipLaunchKernelGGL``
   APIs. The launcher is the innermost struct that encloses the site (when that
   struct is not local to a function), else the outermost enclosing function.
   From the kernel expression, names are followed through aliases bound in the
   launcher (``const auto kernel = k<...>;``, ``static constexpr kernel_fn_t
   f = k<...>;``, ``return k<...>;`` in a helper such as ``select_kernel``), then
   through namespace-level aliases and helper functions of the same file.

Across files (:func:`scan_tree`): includes are resolved, and each launcher's
reached names are matched against the kernels defined in the launcher's file
and its include closure. When a site's kernel expression cannot be followed
(a parameter, a lambda argument), every kernel of that closure named anywhere
in the launcher is recorded instead: ``launches`` over-approximates rather than
loses a kernel.
"""

from __future__ import annotations

import bisect
import concurrent.futures
import dataclasses
import hashlib
import multiprocessing
import os
import pathlib
import posixpath
import re
import time
from typing import Any, Iterable

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
    """'kernel' / 'device' / 'attr' when ``body`` is only specifiers, else None."""
    body = _BLOCK_OR_LINE_COMMENT.sub(b" ", body.replace(b"\\\n", b" ")).strip()
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
    """What one file contributes; launchers are resolved against kernels in :func:`scan_tree`."""

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
    cleaned = _strip_template_args(written) if "operator" not in written else written
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
        recovered = []
        for start, end, kind in markers:
            i = bisect.bisect_right(covered, (start, float("inf"))) - 1
            if i >= 0 and covered[i][0] <= start < covered[i][1]:
                continue  # inside a definition we already have (its head, or a lambda in its body)
            if any(r[0] <= start < r[1] for r in recovered):
                continue
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
        span_start = start
        template_params: list[Param] = []
        base = max(0, start - 4000)
        header = None
        for header in re.finditer(rb"\btemplate\s*<", code[base:start]):
            pass  # keep the last one before the marker
        if header is not None:
            open_angle = base + header.end() - 1
            close_angle = _balanced_end(code, open_angle, ord("<"), ord(">"))
            if close_angle > 0 and not code[close_angle:start].strip():
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

    def _launch_expressions(self) -> list[tuple[Any, Any]]:
        """(site node, kernel expression node) for every launch site."""
        query = ts.load_query(self.grammar, "launches")
        sites = []
        for match in ts.matches(query, self.root):
            if "chevron" in match:
                sites.append((match["chevron"][0], match["kernel"][0]))
            elif "helper_call" in match:
                if self._is_launch_helper(match["helper"][0]):
                    sites.append((match["helper_call"][0], match["kernel"][0]))
            elif "api_call" in match:
                api = _text(self.data, match["api"][0]).split("::")[-1].strip()
                args = [c for c in match["args"][0].named_children if c.type != "comment"]
                index = 1 if api in ("cudaLaunchKernelEx", "cudaLaunchKernelExC", "hipLaunchKernelEx") else 0
                if len(args) > index:
                    sites.append((match["api_call"][0], args[index]))
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

    def _aliases(self) -> list[tuple[str, Any, Any]]:
        """(bound name, value node, binding node) for the whole file."""
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
                out.append((_declarator_name(func_decl, self.data)[0], value, function))
            else:
                name_node = match["name"][0]
                inner = _innermost_name(name_node) if name_node.type not in _IDENT_TYPES else name_node
                if inner is None:
                    continue
                out.append((_text(self.data, inner), value, name_node))
        return out

    @staticmethod
    def _inside_function(node: Any) -> bool:
        current = node.parent
        while current is not None:
            if current.type == "function_definition":
                return True
            current = current.parent
        return False

    def launchers(self) -> None:
        sites = self._launch_expressions()
        if not sites:
            return
        aliases = self._aliases()
        file_level: dict[str, list[Any]] = {}
        for name, value, binding in aliases:
            # namespace-level bindings and helper functions' returns are visible file-wide
            if binding.type == "function_definition" or not self._inside_function(binding):
                file_level.setdefault(name, []).append(value)
        units: dict[tuple[int, int], _RawLauncher] = {}
        unit_nodes: dict[tuple[int, int], Any] = {}

        def add_site(site: Any, expression: Any, via: list[int]) -> None:
            unit = self._launcher_unit(site)
            if unit is None:
                return
            key = (unit.start_byte, unit.end_byte)
            if key not in units:
                units[key] = self._new_launcher(unit)
                unit_nodes[key] = unit
            scoped: dict[str, list[Any]] = {}
            for name, value, binding in aliases:
                if unit.start_byte <= binding.start_byte < unit.end_byte:
                    scoped.setdefault(name, []).append(value)
            units[key].sites.append(_LaunchSite(self._follow(expression, scoped, file_level), site.start_byte, via))

        for site, expression in sites:
            add_site(site, expression, [])
        # Calls to a launcher function of this file launch what it launches: one
        # round per level of helpers, until nothing new appears.
        done: set[tuple[int, int]] = set()
        for _round in range(4):
            helpers = {
                raw.name: raw
                for key, raw in units.items()
                if raw.kind == "function" and raw.name and key not in done
            }
            if not helpers:
                break
            done.update(key for key, raw in units.items() if raw.kind == "function")
            query = ts.load_query(self.grammar, "calls")
            for match in ts.matches(query, self.root):
                callee = _strip_template_args(_text(self.data, match["callee"][0])).split("::")[-1].strip()
                helper = helpers.get(callee)
                call = match["call"][0]
                if helper is None or helper.start_byte <= call.start_byte < helper.end_byte:
                    continue
                add_site(call, call, [helper.start_byte])
        self.result.launchers.extend(sorted(units.values(), key=lambda u: u.start_byte))

    def _follow(self, expression: Any, scoped: dict[str, list[Any]], file_level: dict[str, list[Any]]) -> set[str]:
        """Names the kernel expression ends at, through aliases.

        A name bound in the launcher (or, failing that, at namespace level or
        as a helper's return) is replaced by the names in its value, like C++
        name lookup would shadow a kernel of the same name; names with no
        binding are returned (the kernel candidates).
        """
        seen: set[str] = set()
        terminals: set[str] = set()
        frontier = list(self._identifiers(expression))
        while frontier:
            name = frontier.pop()
            if name in seen:
                continue
            seen.add(name)
            values = scoped.get(name) or file_level.get(name)
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
        what = "missing token" if first.is_missing else "unparsed text"
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


def _scan_one(job: tuple[str, str, dict[str, str]]) -> FileScan:
    path, absolute, macros = job
    try:
        data = pathlib.Path(absolute).read_bytes()
    except OSError as err:
        return FileScan(path=path, issues=[ParseIssue(file=path, message=f"could not read: {err}")])
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
    path: str, specs: list[tuple[bool, str]], root: pathlib.Path, search: list[str], known: set[str]
) -> list[str]:
    out: list[str] = []
    here = posixpath.dirname(path)

    def exists(candidate: str) -> bool:
        return candidate in known or (not candidate.startswith("..") and (root / candidate).is_file())

    for angle, name in specs:
        candidates = [] if angle else [posixpath.normpath(posixpath.join(here, name))]
        candidates += [posixpath.normpath(posixpath.join(d, name)) for d in search]
        resolved = next((c for c in candidates if exists(c)), None)
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


def scan_tree(source: SourceInfo, *, workers: int | None = None) -> ScanResult:
    """Index every C/C++/CUDA file of ``source`` (JIT and AOT folders).

    ``workers``: processes for parsing (default: the CPU count, and none for
    small trees); 1 scans in this process.
    """
    started = time.perf_counter()
    root = pathlib.Path(source.root)
    paths = source_files(source)
    texts: dict[str, bytes] = {}
    for path in paths:
        try:
            texts[path] = (root / path).read_bytes()
        except OSError:
            pass  # reported by the per-file scan
    macros = collect_macros(texts.values())
    jobs = [(path, str(root / path), macros) for path in paths]
    total = sum(len(t) for t in texts.values())
    workers = workers if workers is not None else (os.cpu_count() or 1)
    if workers > 1 and total >= _POOL_MIN_BYTES and len(jobs) > 1:
        context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
        with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            scans = list(pool.map(_scan_one, jobs, chunksize=max(1, len(jobs) // (workers * 8))))
    else:
        scans = [_scan_one(job) for job in jobs]

    known = set(paths)
    search = include_dirs(source)
    includes = {scan.path: _resolve_includes(scan.path, scan.includes, root, search, known) for scan in scans}
    kernels_by_file: dict[str, set[str]] = {}
    for scan in scans:
        kernels_by_file.setdefault(scan.path, set()).update(k.name for k in scan.kernels)
    launchers: list[LauncherDef] = []
    for scan in scans:
        if not scan.launchers:
            continue
        visible = set().union(*(kernels_by_file.get(f, set()) for f in _closure(scan.path, includes)))
        launchers.extend(_resolve_launchers(scan.launchers, scan.path, visible))

    def ordered(items: list[Any]) -> list[Any]:
        return sorted(items, key=lambda d: (d.file, d.start_byte, d.end_byte))

    return ScanResult(
        files=[scan.digest for scan in scans if scan.digest is not None],
        grammar={suffix: ts.grammar_for("x" + suffix) for suffix in SUFFIXES},
        kernels=ordered([k for scan in scans for k in scan.kernels]),
        device_functions=ordered([d for scan in scans for d in scan.device_functions]),
        launchers=ordered(launchers),
        includes=includes,
        parse_issues=[issue for scan in scans for issue in scan.issues],
        elapsed_s=round(time.perf_counter() - started, 3),
    )
