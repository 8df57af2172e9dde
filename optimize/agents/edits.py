"""Turning an LLM reply into new texts for a task's editable regions.

Replies come in every shape models produce, so parsing is tolerant in what it
reads and strict in what it returns:

1. SEARCH/REPLACE blocks (``<<<<<<< SEARCH`` / ``=======`` / ``>>>>>>> REPLACE``),
   fenced or not, optionally preceded by a line naming the region
   (``region: NAME``, ``### NAME``). The search text must occur exactly once;
   when the exact text is not found, a match that ignores indentation and
   trailing blanks line by line is tried. Without a region name, the one region
   holding the search text is used.
2. Whole-region code blocks (fenced). The region is named by the fence's info
   string (```` ```cuda region=NAME ```` or ```` ```cpp NAME ````), by a line just
   above the fence mentioning a region name, by being the only editable region,
   or by the block defining exactly one region's name (``NAME(``).

Anything else is a :class:`optimize.errors.MalformedReply` with the reason, which
the round records as its outcome; it never crashes a run. A region whose new
text has unbalanced braces (a truncated reply) is refused the same way, since
compiling it would only waste a build.

What must stay true: the result maps *every* region name to its text (unchanged
regions included), and only names of the task's regions appear in it. A reply
that changes only whitespace (indentation, blank lines, spaces between tokens) is
``no_change``, like an identical one: compiling it would cost a build and an
evaluation to learn nothing (a small model served by llama.cpp did this,
2026-12-01). Whitespace that can change what the compiler reads (inside a
literal or a ``#`` directive, between two words, splitting ``++``, ending a
``//`` comment) counts as a change.

Languages (:class:`Dialect`, chosen by :mod:`optimize.languages`, never by a test
on the task here): :data:`CUDA` fences regions as ``cuda``, refuses a region with
unbalanced brackets as a truncated reply and compares C++ tokens; :data:`PYTHON` (a Triton
task's kernels and launch sites) fences them as ``python``, compares Python tokens (where
indentation is read) and refuses nothing here: a Python region that does not parse is the
candidate's typed ``compile_failed`` with the parser's line, found by the language's check
before any GPU time (:meth:`optimize.harness.languages.Build.precheck`), and the repair
agent gets that message, as it gets nvcc's for CUDA.
"""

from __future__ import annotations

import dataclasses
import io
import re
import tokenize
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Literal

from optimize.errors import MalformedReply
from pipeline.run_records import NotEvaluated

if TYPE_CHECKING:
    from optimize.llm.client import Model, Reply

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)$", re.M)
SEARCH = re.compile(r"^[ \t]*<{5,9}[ \t]*SEARCH[^\n]*\n", re.M)
DIVIDER = re.compile(r"^[ \t]*={5,9}[ \t]*\n", re.M)
REPLACE = re.compile(r"^[ \t]*>{5,9}[ \t]*REPLACE[^\n]*$", re.M)
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# One C++ token, for "does this edit change more than whitespace": comments, literals and
# directive lines whole (their inner spacing is normalised below), then numbers, words,
# the multi-character operators longest first (so `+ +` is not `++`), then any one character.
TOKEN = re.compile(
    r"""//[^\n]*
    | /\*.*?\*/
    | "(?:\\.|[^"\\\n])*"
    | '(?:\\.|[^'\\\n])*'
    | ^[ \t]*\#(?:\\\n|[^\n])*
    | \.?[0-9](?:[eEpP][+-]|[\w.'])*
    | [A-Za-z_]\w*
    | \.\.\.|<<=|>>=|->\*|<=>|\#\#|::|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&|^]=|\.\*
    | \S""",
    re.M | re.S | re.X,
)


def parse_reply(reply: str, regions: Mapping[str, str], dialect: Dialect | None = None) -> dict[str, str]:
    """New region texts from ``reply`` (see module docstring); raises MalformedReply."""
    dialect = dialect or CUDA
    if not reply or not reply.strip():
        raise MalformedReply("the reply is empty")
    if SEARCH.search(reply):
        new = _apply_search_replace(reply, regions)
    else:
        new = _whole_regions(reply, regions)
    for name, text in new.items():
        if not dialect.brackets_mean_truncated:
            continue
        if text != regions[name] and _balanced(regions[name]) and not _balanced(text):
            raise MalformedReply(
                f"the new text of region {name} has unbalanced brackets (a truncated reply?)",
                fix="ask again; raise llm.max_tokens if replies are cut off",
                detail=text[-400:],
            )
    return new


# --------------------------------------------------------------------------- search/replace


def _apply_search_replace(reply: str, regions: Mapping[str, str]) -> dict[str, str]:
    out = dict(regions)
    pos = 0
    blocks = 0
    while True:
        start = SEARCH.search(reply, pos)
        if start is None:
            break
        divider = DIVIDER.search(reply, start.end())
        if divider is None:
            raise MalformedReply(
                "a SEARCH block has no ======= divider", detail=reply[start.start() : start.start() + 400]
            )
        end = REPLACE.search(reply, divider.end())
        if end is None:
            raise MalformedReply(
                "a SEARCH block has no >>>>>>> REPLACE end", detail=reply[start.start() : start.start() + 400]
            )
        search = reply[start.end() : divider.start()]
        replace = reply[divider.end() : end.start()]
        named = _region_named_before(reply[pos : start.start()], regions)
        out = _apply_one(out, named, search, replace)
        blocks += 1
        pos = end.end()
    if blocks == 0:
        raise MalformedReply("no complete SEARCH/REPLACE block")
    return out


def _apply_one(regions: dict[str, str], named: str | None, search: str, replace: str) -> dict[str, str]:
    search_body = search.rstrip("\n")
    replace_body = replace.rstrip("\n")
    if not search_body.strip():
        raise MalformedReply("a SEARCH block is empty", fix="SEARCH must quote existing lines of the region")

    def hits_in(names: list[str]) -> list[tuple[str, int, int]]:
        return [(name, a, b) for name in names for a, b in _find(regions[name], search_body)]

    # A region named in the prose above the block is a hint, not a constraint: when
    # the text is not there, every region is searched (prose often names the kernel
    # while the edit is in its launcher).
    hits = hits_in([named]) if named else []
    if not hits:
        hits = hits_in(list(regions))
    if not hits:
        where = f"region {named}" if named else "any region"
        raise MalformedReply(
            f"the SEARCH text is not in {where}",
            fix="SEARCH must copy lines of the current region exactly",
            detail=search_body[:400],
        )
    if len(hits) > 1:
        raise MalformedReply(
            f"the SEARCH text occurs {len(hits)} times ({', '.join(sorted({h[0] for h in hits}))})",
            fix="quote more lines so the SEARCH text is unique",
            detail=search_body[:400],
        )
    name, a, b = hits[0]
    text = regions[name]
    out = dict(regions)
    out[name] = text[:a] + replace_body + text[b:]
    return out


def _find(text: str, search: str) -> list[tuple[int, int]]:
    """Byte spans of ``search`` in ``text``: exact occurrences, else line-wise whitespace-tolerant ones."""
    spans = []
    start = text.find(search)
    while start != -1:
        spans.append((start, start + len(search)))
        start = text.find(search, start + 1)
    if spans:
        return spans
    want = [line.strip() for line in search.splitlines()]
    while want and not want[0]:
        want.pop(0)
    while want and not want[-1]:
        want.pop()
    if not want:
        return []
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    for i in range(len(lines) - len(want) + 1):
        if all(lines[i + k].strip() == want[k] for k in range(len(want))):
            end = offsets[i + len(want)]
            if text[:end].endswith("\n"):
                end -= 1
            spans.append((offsets[i], end))
    return spans


# --------------------------------------------------------------------------- whole regions


def _blocks(reply: str) -> list[tuple[str, str, str]]:
    """(info string, body, text before the fence) for each fenced block."""
    out = []
    pos = 0
    while True:
        open_ = FENCE.search(reply, pos)
        if open_ is None:
            break
        fence = open_.group("fence")
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.M).search(reply, open_.end())
        if close is None:
            raise MalformedReply(
                "a code block is never closed (a truncated reply?)", detail=reply[open_.start() : open_.start() + 300]
            )
        body = reply[open_.end() + 1 : close.start()]
        out.append((open_.group("info").strip(), body, reply[pos : open_.start()]))
        pos = close.end()
    return out


def _region_named_before(before: str, regions: Mapping[str, str]) -> str | None:
    """A region named on one of the last three non-empty lines before a block."""
    lines = [line for line in before.splitlines() if line.strip()][-3:]
    for line in reversed(lines):
        found = _names_in(line, regions)
        if len(found) == 1:
            return found[0]
    return None


def _names_in(text: str, regions: Mapping[str, str]) -> list[str]:
    """Region names ``text`` mentions: ``region=NAME`` first, else each name as a whole word (a name
    inside another, ``merge_state_kernel`` in a Triton launch's ``launch:merge_state_kernel``, is not one)."""
    named = sorted({name for name in re.findall(r"region=([^\s`]+)", text) if name in regions})
    if named:
        return named
    return sorted(name for name in regions if re.search(rf"(?<![\w:]){re.escape(name)}(?!\w)", text))


def _whole_regions(reply: str, regions: Mapping[str, str]) -> dict[str, str]:
    blocks = _blocks(reply)
    if not blocks:
        raise MalformedReply(
            "the reply has no code block and no SEARCH/REPLACE block",
            fix="reply with the whole region in a fenced block, or SEARCH/REPLACE blocks",
            detail=reply[:400],
        )
    out = dict(regions)
    assigned: dict[str, str] = {}
    unnamed: list[str] = []
    for info, body, before in blocks:
        name = None
        info_names = _names_in(info, regions)
        if len(info_names) == 1:
            name = info_names[0]
        if name is None:
            name = _region_named_before(before, regions)
        if name is None and len(regions) > 1:
            defined = [n for n in regions if re.search(rf"\b{re.escape(n)}\s*\(", body)]
            if len(defined) == 1:
                name = defined[0]
        if name is None:
            unnamed.append(body)
            continue
        assigned[name] = body
    if not assigned:
        if len(regions) == 1:
            # One region: the largest block is the region (smaller ones are usually snippets).
            only = next(iter(regions))
            assigned[only] = max(unnamed, key=len)
        else:
            raise MalformedReply(
                f"cannot tell which of the regions {', '.join(regions)} a code block replaces",
                fix="name the region in the fence (```cuda region=NAME, ```python region=NAME) or the line above it",
            )
    for name, body in assigned.items():
        out[name] = _match_trailing_newline(regions[name], body)
    return out


def _match_trailing_newline(old: str, new: str) -> str:
    new = new.rstrip("\n")
    tail = old[len(old.rstrip("\n")) :]
    return new + tail


def _balanced(text: str) -> bool:
    """Brackets balance outside comments, strings and character literals."""
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j == -1 else j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j == -1 else j + 2
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if c in "([{":
            stack.append(c)
        elif c in ")]}":
            if not stack or stack.pop() != pairs[c]:
                return False
        i += 1
    return not stack


# --------------------------------------------------------------------------- results

#: "edited", or why the coder gave nothing to evaluate (recorded as the attempt's status).
CodeStatus = Literal["edited"] | NotEvaluated


@dataclasses.dataclass(frozen=True)
class CodeResult:
    """What a coding, repair or single agent produced: new regions, or why not.

    ``status`` other than ``edited`` is recorded as the attempt's outcome; the
    reply text is kept so the trajectory shows what the model said.
    """

    status: CodeStatus
    regions: dict[str, str] | None = None
    detail: str = ""
    reply: str = ""
    agent: str = "coding"

    @property
    def edited(self) -> bool:
        return self.status == "edited" and self.regions is not None


def tokens(text: str) -> list[str]:
    """``text`` as C++ tokens (see ``TOKEN``); equal lists mean only insignificant whitespace differs."""
    out = []
    for match in TOKEN.finditer(text):
        token = match.group(0)
        if token.lstrip().startswith("#"):
            token = re.sub(r"(?:\\\n|\s)+", " ", token).strip()  # a directive: its spacing, not its line breaks
        elif token.startswith("//"):
            token = token.rstrip()
        out.append(token)
    return out


def whitespace_only(old: str, new: str) -> bool:
    """``new`` differs from ``old`` in whitespace the compiler does not read, if at all."""
    return old == new or tokens(old) == tokens(new)


def python_whitespace_only(old: str, new: str) -> bool:
    """``new`` differs from ``old`` only in whitespace Python does not read (indentation counts,
    and so does a line break outside brackets); text that does not tokenize counts as a change."""
    if old == new:
        return True
    a, b = _python_tokens(old), _python_tokens(new)
    return a is not None and a == b


def _python_tokens(text: str) -> list[tuple[int, str]] | None:
    """Python's tokens of ``text``; line structure (NEWLINE, INDENT, DEDENT) by type, not spelling."""
    skip = {tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER}
    structure = {tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    out = []
    try:
        for t in tokenize.generate_tokens(io.StringIO(text.strip("\n") + "\n").readline):
            if t.type in skip:
                continue
            out.append((t.type, "" if t.type in structure else t.string.rstrip()))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return out


@dataclasses.dataclass(frozen=True)
class Dialect:
    """How one language's regions are shown to a model and read back from its reply.

    ``fence``: the info string of a region's code block; ``same(old, new)``: the texts differ only
    in whitespace the compiler does not read; ``brackets_mean_truncated``: a region whose brackets
    stop balancing is a truncated reply (``MalformedReply``) rather than code to compile;
    ``suffix``: the prompt templates' (``coding<suffix>.md``, a file beside each agent, where the
    CUDA text would mislead); ``facts``: the task's language facts the prompts carry ("" for CUDA).
    """

    name: str
    fence: str
    same: Callable[[str, str], bool]
    brackets_mean_truncated: bool
    suffix: str = ""
    facts: str = ""

    def template(self, agent: str) -> str:
        return f"{agent}{self.suffix}"


CUDA = Dialect("cuda", "cuda", whitespace_only, True)
PYTHON = Dialect("triton", "python", python_whitespace_only, False, suffix="_triton")


def result_from_reply(
    reply: str, regions: Mapping[str, str], *, agent: str, dialect: Dialect | None = None
) -> CodeResult:
    """Parse a reply into a CodeResult; a malformed reply becomes a recorded status."""
    dialect = dialect or CUDA
    try:
        new = parse_reply(reply, regions, dialect)
    except MalformedReply as err:
        return CodeResult(NotEvaluated.malformed_reply, None, str(err), reply=reply, agent=agent)
    if new == dict(regions):
        return CodeResult(
            NotEvaluated.no_change, None, "the reply leaves every region as it was", reply=reply, agent=agent
        )
    if all(dialect.same(regions[name], text) for name, text in new.items()):
        changed = ", ".join(name for name, text in new.items() if text != regions[name])
        return CodeResult(
            NotEvaluated.no_change,
            None,
            f"the reply changes only whitespace (region {changed}): nothing to build",
            reply=reply,
            agent=agent,
        )
    return CodeResult("edited", new, "", reply=reply, agent=agent)


def result_from_model(
    model: Model, reply: Reply, regions: Mapping[str, str], *, agent: str, dialect: Dialect | None = None
) -> CodeResult:
    """:func:`result_from_reply` of a model's reply; a malformed one is discarded from the
    model's reply cache (:meth:`optimize.llm.client.Model.discard`), so asking again gets a new one."""
    result = result_from_reply(reply.text, regions, agent=agent, dialect=dialect)
    if result.status == NotEvaluated.malformed_reply:
        model.discard(reply)
    return result


def regions_text(
    regions: Mapping[str, str], kinds: Mapping[str, str] | None = None, dialect: Dialect | None = None
) -> str:
    """Regions laid out for a prompt: a header line and a fenced block each (fenced in the dialect's language)."""
    fence = (dialect or CUDA).fence
    parts = []
    for name, text in regions.items():
        kind = f" ({kinds[name]})" if kinds and name in kinds else ""
        parts.append(f"region: {name}{kind}\n```{fence} region={name}\n{text.rstrip()}\n```")
    return "\n\n".join(parts)
