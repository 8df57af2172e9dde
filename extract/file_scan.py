"""One file's part of the index: definitions, recovered definitions, includes, launchers.

:func:`scan_file` runs the per-file steps of :mod:`extract.index` (masking,
definitions, recovery, launch sites, aliases; see that module's docstring) on one
file's bytes and returns a :class:`FileScan`; the launch sites and aliases are read by
:func:`extract.launch_sites.scan_launchers` on the tree parsed here. Launchers stay raw
(:class:`~extract.launch_sites.RawLauncher`) until :func:`extract.index.index_texts`
resolves them against the kernels visible through the file's includes.

What must stay true: :func:`scan_file` never raises (a failure on one file is a
``ParseIssue``), and every span indexes the original bytes.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import re
from typing import Any

from extract.cxx import balanced_end, code_only, normalise
from extract.cxx_nodes import (
    declarator_name,
    function_declarator,
    params_of,
    scope_names,
    text_params,
    with_template_header,
)
from extract.launch_sites import RawLauncher, scan_launchers
from extract.macros import ATTRIBUTE_CALL, Mask, collect_macros, local_macros, mask_macros
from pipeline.records import FileDigest, KernelDef, Param, ParseIssue
from source import treesitter as ts
from source.cuda_text import text_of


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
        for node in ts.captures("definitions", self.root).get("function", []):
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
        for node in ts.captures("includes", self.root).get("path", []):
            text = text_of(self.data, node).strip()
            if node.type == "system_lib_string" or text.startswith("<"):
                self.result.includes.append((True, text.strip("<>").strip()))
            elif node.type == "string_literal" or text.startswith('"'):
                self.result.includes.append((False, text.strip('"').strip()))
            else:  # #include MACRO
                self.result.includes.append((True, text))

    # -- launchers

    def launchers(self) -> None:
        self.result.launchers.extend(scan_launchers(self.data, self.code, self.root, self.lines.line, self._classify))

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
