"""The one C++ text toolkit: lexemes, brackets, top-level lists, function definitions.

Why this module exists: the index (:mod:`extract.index`, :mod:`extract.file_scan`)
and the contract reader (:mod:`extract.launcher_facts`) both read C++ as text
where the syntax tree is not enough (macro bodies, definitions the grammar
garbles, launcher bodies narrowed by ``if constexpr``). Each used to carry its
own comment and bracket scanner, and the two could read the same text
differently (one took ``'"'`` for the start of a string, one did not). Every
C++ text scan now goes through the functions below.

What must stay true:
- One lexeme reading: comments, string literals and character literals are
  recognised by the same patterns in :func:`code_only` and
  :func:`strip_comments`; a string or character literal never crosses a line;
  ``1'000`` is a digit separator, not a character literal.
- Offsets never move: blanking replaces every byte but ``\\n`` with a space, so a
  position found in blanked text indexes the original.
- :func:`balanced_end` and :func:`split_top` are total: odd text gives a best
  effort (the end of the text, a shorter list), never an exception.
- Pure text: no tree-sitter, no torch; :mod:`source.treesitter` stays the only
  py-tree-sitter API user.
"""

from __future__ import annotations

import dataclasses
import re
from typing import overload

# The lexemes whose content is not code. A character literal is not a digit
# separator (``1'000``); neither kind of literal crosses a line.
_COMMENT = r"//[^\n]*|/\*.*?\*/|/\*.*\Z"
_STRING = r'"(?:\\.|[^"\\\n])*"'
_CHAR = r"(?<![\w'])'(?:\\[^'\n]{1,8}|[^'\\\n])'"
_PREPROCESSOR = r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*"  # a directive line, with its continuations
_LEXEMES = re.compile(rf"(?P<comment>{_COMMENT})|{_STRING}|{_CHAR}", re.S)
_NOISE = re.compile(rf"{_COMMENT}|{_STRING}|{_CHAR}|{_PREPROCESSOR}".encode(), re.S | re.M)


def _blank_bytes(text: bytes) -> bytes:
    return re.sub(rb"[^\n]", b" ", text)


def _blank(text: str) -> str:
    return re.sub(r"[^\n]", " ", text)


def code_only(data: bytes) -> bytes:
    """``data`` with comments, literals and preprocessor lines blanked (newlines kept).

    Offsets are unchanged, so positions found here index ``data`` directly.
    """
    return _NOISE.sub(lambda m: _blank_bytes(m.group()), data)


@overload
def strip_comments(text: str) -> str: ...
@overload
def strip_comments(text: bytes) -> bytes: ...
def strip_comments(text: str | bytes) -> str | bytes:
    """Comments replaced by spaces (newlines kept); string and character literals kept
    (they hold symbol names), and a ``//`` inside one is no comment. Bytes are read
    as Latin-1 (one character per byte) and given back as bytes."""
    chars = text if isinstance(text, str) else text.decode("latin-1")
    out = _LEXEMES.sub(lambda m: _blank(m.group()) if m.group("comment") is not None else m.group(), chars)
    return out if isinstance(text, str) else out.encode("latin-1")


def normalise(text: str) -> str:
    """Whitespace runs as one space, ends trimmed: how records spell C++ text."""
    return " ".join(text.split())


_PAIRS = {"(": ")", "[": "]", "{": "}", "<": ">"}


def balanced_end(text: str | bytes, start: int, *, strings: bool = True, unbalanced: int | None = None) -> int:
    """Index just past the bracket that closes ``text[start]`` (``(``, ``[``, ``{`` or ``<``).

    ``strings``: skip double-quoted literals (text that still holds them); off for
    text :func:`code_only` already blanked. ``unbalanced``: what to return when no
    bracket closes it (default: ``len(text)``). Bytes are read as Latin-1, one
    character per byte, so offsets are the same in both spellings.
    """
    chars = text if isinstance(text, str) else text.decode("latin-1")
    open_ch = chars[start]
    close_ch = _PAIRS[open_ch]
    depth = 0
    i, n = start, len(chars)
    while i < n:
        ch = chars[i]
        if ch == '"' and strings:
            i += 1
            while i < n and chars[i] != '"':
                i += 2 if chars[i] == "\\" else 1
        elif ch == open_ch:
            depth += 1
        elif ch == close_ch:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(chars) if unbalanced is None else unbalanced


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside (), [], {} and template <> brackets; empty parts dropped.

    A ``<`` is a template bracket only when it hugs a name (``foo<T>``): ``a < b``,
    ``a <= b`` and ``a << b`` are operators.
    """
    parts: list[str] = []
    depth, angle = 0, 0
    buf: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "<" and depth == 0 and re.search(r"[\w:]$", "".join(buf)) and text[i + 1 : i + 2] not in ("<", "="):
            angle += 1
        elif ch == ">" and angle > 0 and depth == 0:
            angle -= 1
        if depth == 0 and angle == 0 and text.startswith(sep, i):
            parts.append("".join(buf).strip())
            buf = []
            i += len(sep)
            continue
        buf.append(ch)
        i += 1
    tail = "".join(buf).strip()
    if tail or parts:
        parts.append(tail)
    return [p for p in parts if p != ""]


def strip_template_args(text: str) -> str:
    """``ns::f<T, 4>`` -> ``ns::f``: every ``<...>`` group dropped, nested ones too."""
    out, depth = [], 0
    for ch in text:
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


# --------------------------------------------------------------------------- definitions


@dataclasses.dataclass
class CppFunction:
    """A function definition read from text: its parameters as (type, name), its body
    between the braces, the ``template <...>`` header before it, and the template
    parameters a call with explicit arguments fixed (:func:`extract.launcher_facts.bound`)."""

    name: str
    params: list[tuple[str, str]]  # (type, name)
    body: str
    template: str = ""
    bound: dict[str, int] = dataclasses.field(default_factory=dict)


def template_params(struct_text: str) -> list[tuple[str, str]]:
    """``template <typename T, bool kUsePDL>`` at the head of a struct -> [(kind, name)]."""
    match = re.match(r"\s*template\s*<", struct_text)
    if not match:
        return []
    end = balanced_end(struct_text, match.end() - 1, strings=False)
    out = []
    for part in split_top(struct_text[match.end() : end - 1]):
        part = part.split("=")[0].strip()
        words = part.replace("...", " ").split()
        if len(words) >= 2:
            out.append((" ".join(words[:-1]), words[-1]))
    return out


def function_params(text: str) -> list[tuple[str, str]]:
    """A parameter list's text (between the parentheses) -> [(type, name)]; an unnamed
    parameter has name ``""``, ``void`` alone is no parameter."""
    params = []
    for part in split_top(text):
        decl = part.split("=")[0].strip()
        words = re.match(r"(.*?)([A-Za-z_]\w*)\s*$", decl)
        if words and words.group(1).strip():
            params.append((" ".join(words.group(1).split()), words.group(2)))
        elif decl and decl != "void":
            params.append((decl, ""))
    return params


def template_header_before(text: str, at: int) -> str:
    """The ``template <...>`` header (with what follows it up to ``at``) that a definition
    starting its name at ``at`` carries, looked for in the 300 characters before; ``""``."""
    tmatch = re.search(r"template\s*<[^;{}]*>\s*(static\s+)?(inline\s+)?[\w:<>,\s&*]*$", text[max(0, at - 300) : at])
    return tmatch.group(0) if tmatch else ""


def find_function(text: str, name: str) -> CppFunction | None:
    """The first *definition* of member/free function ``name`` in ``text`` (not a call, not a declaration)."""
    for match in re.finditer(rf"\b{re.escape(name)}\s*\(", text):
        before = text[: match.start()].rstrip()
        # a definition's name follows a return type (an identifier, '>', '&' or '*'),
        # a call follows an operator, '(', ',' or 'return'
        if not before or before[-1] in "=(,.;{}!+-/%|?:" or re.search(r"\b(return|else|case)\s*$", before):
            continue
        if before.endswith("->") or before.endswith("::") and not re.search(r"\w::$", before):
            continue
        open_at = match.end() - 1
        close = balanced_end(text, open_at)
        rest = text[close:]
        head = re.match(r"\s*(const\s*)?(noexcept(\([^)]*\))?\s*)?(override\s*)?(->\s*[\w:<>, ]+)?\s*", rest)
        after = close + (head.end() if head else 0)
        if after >= len(text) or text[after] != "{":
            continue
        body_end = balanced_end(text, after)
        return CppFunction(
            name=name,
            params=function_params(text[open_at + 1 : close - 1]),
            body=text[after + 1 : body_end - 1],
            template=template_header_before(text, match.start()),
        )
    return None
