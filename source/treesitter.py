"""The one place that talks to py-tree-sitter.

Why this module exists: py-tree-sitter changed its API several times (how a
``Language`` is built, how a ``Parser`` gets its language, and above all how a
query is run: ``Query.captures`` returned a list of ``(node, name)`` pairs up to
0.22, a ``dict`` in 0.23-0.24, and moved to ``QueryCursor`` in 0.25). Every other
module calls the small functions below and never imports ``tree_sitter``, so a
version bump is fixed here and nowhere else. Tree-sitter queries live in
``source/queries/<name>.scm``, never in Python strings; they are written for the
CUDA grammar, which reads every file (measurement below), so the folder is flat:
``language("cpp")`` serves the measurement and runs no query.

What must stay true:
- A query is run by its name (:func:`captures`, :func:`matches`: the file
  ``source/queries/<name>.scm``); no other module builds a query or keeps a
  query folder of its own (``tests/test_source.py``).
- :func:`captures` returns ``dict[capture name, list[Node]]`` with each list in
  document order (start byte, then the larger node first), whatever the
  installed version returns; :func:`matches` returns ``list[dict[capture name,
  list[Node]]]``, one dict per match, in document order.
- Parsers, languages and queries are cached per process (they are costly to
  build and cheap to reuse); the caches are per process, so a process pool
  builds its own.
- :func:`grammar_for` is the only place that decides which grammar reads a file
  (measurement below).

Grammar measurement (sglang 0.5.23 wheel, ``kernels/jit``: 290 files, 4.3 MB;
tree-sitter 0.26.1, tree-sitter-cuda 0.21.2, tree-sitter-cpp 0.23.4). A
``__global__`` definition counts when a ``function_definition`` node's text
before its body holds the ``__global__`` token; "error files" have at least one
ERROR or MISSING node, "error nodes" counts the outermost such nodes; "same
trees" counts files whose two syntax trees print identically. Reproduce with
``.venv/bin/python -m source.treesitter work/cache/sglang-0.5.23/sglang/kernels/jit``.

====== ===== ============== ============= =========== ========== =========== ========== ==========
suffix files __global__     __global__    error files error      error nodes error      same trees
             cuda           cpp           cuda        files cpp  cuda        nodes cpp
====== ===== ============== ============= =========== ========== =========== ========== ==========
.cu        6             21            21           2          6          27        165          0
.cuh     239            275           174         118        221        1115       2283         33
.h        39              4             4          13         20          70        168         22
.hpp       1              0             0           0          0           0          0          0
.cpp       5              0             0           2          2           9          9          3
.cc        0              0             0           0          0           0          0          0
total    290            300           199         135        249        1221       2625         58
====== ===== ============== ============= =========== ========== =========== ========== ==========

Choice: CUDA for every suffix. Where CUDA code lives (``.cu``, ``.cuh``, ``.h``)
tree-sitter-cuda finds every ``__global__`` definition tree-sitter-cpp finds and
about half again as many (C++ reads ``__global__`` as a type name and splits
``template<...> __global__ __launch_bounds__(...)`` definitions), with half the
error nodes. On plain C++ (``.cpp``, ``.hpp``) the two tie on every count; their
trees still differ in places (tree-sitter-cuda is built on an older
tree-sitter-cpp and names some nodes differently, e.g. ``lambda_declarator``
where C++ says ``abstract_function_declarator``), so CUDA there too keeps one
query set that means the same thing on every file. ``.cc`` has no file in this tree and gets
CUDA for the same reason. ``language("cpp")`` stays available to callers.

The remaining CUDA error nodes come mostly from SGLang's attribute macros
(``SGL_DEVICE float f(...)`` reads as a type followed by a stray identifier) and
statement macros (``CUTE_UNROLL``); :mod:`extract.index` masks the former before
parsing and recovers definitions the grammar still garbles.
"""

from __future__ import annotations

import collections
import functools
import pathlib
import re
import sys
from collections.abc import Iterator

import tree_sitter

QUERY_DIR = pathlib.Path(__file__).resolve().parent / "queries"

GRAMMARS = ("cuda", "cpp")
#: The grammar every query is written for and compiled with (see the module docstring).
QUERY_GRAMMAR = "cuda"

# Suffix -> grammar, from the measurement in the module docstring.
GRAMMAR_BY_SUFFIX: dict[str, str] = {
    ".cu": "cuda",
    ".cuh": "cuda",
    ".h": "cuda",
    ".hpp": "cuda",
    ".cpp": "cuda",
    ".cc": "cuda",
}

# The node class itself: captures, matches and problems return it, and a module
# that narrows what it reads (``child_by_field_name`` and ``parent`` may be None,
# ``text`` may be None) annotates with it.
SyntaxNode = tree_sitter.Node
Query = tree_sitter.Query  # what load_query returns

# The name most readers use (the same class: an optional child is ``Node | None`` everywhere).
Node = SyntaxNode


def grammar_for(path: str | pathlib.PurePath) -> str:
    """Which grammar reads ``path``: ``"cuda"`` or ``"cpp"`` (see the measurement above).

    Unknown suffixes get ``"cuda"``: it is a superset of C++ and never worse on
    this tree.
    """
    return GRAMMAR_BY_SUFFIX.get(pathlib.PurePath(path).suffix.lower(), "cuda")


@functools.cache
def language(name: str) -> tree_sitter.Language:
    """The tree-sitter ``Language`` for ``"cuda"`` or ``"cpp"``."""
    pointer: object
    if name == "cuda":
        import tree_sitter_cuda

        pointer = tree_sitter_cuda.language()
    elif name == "cpp":
        import tree_sitter_cpp

        pointer = tree_sitter_cpp.language()
    else:
        raise ValueError(f"unknown grammar {name!r}; expected one of {GRAMMARS}")
    if isinstance(pointer, tree_sitter.Language):  # some bindings return a Language already
        return pointer
    try:
        return tree_sitter.Language(pointer)  # py-tree-sitter >= 0.22
    except TypeError:
        # 0.21 wanted a name as well; the installed (newer) stubs only know the one-argument form
        return tree_sitter.Language(pointer, name)  # type: ignore[call-overload]


@functools.cache
def parser(name: str) -> tree_sitter.Parser:
    """A cached ``Parser`` for grammar ``name`` (one per process)."""
    lang = language(name)
    try:
        return tree_sitter.Parser(lang)  # >= 0.22
    except TypeError:
        made = tree_sitter.Parser()
        if hasattr(made, "set_language"):
            made.set_language(lang)
        else:
            made.language = lang
        return made


def parse(data: str | bytes, name: str = QUERY_GRAMMAR) -> tree_sitter.Tree:
    """Parse ``data`` (text is read as UTF-8) with grammar ``name``, CUDA unless told, and return
    the tree (``tree.root_node`` is the root). The one parse entry: every reader of C++/CUDA
    parses here."""
    return parser(name).parse(data.encode("utf-8") if isinstance(data, str) else data)


@functools.cache
def load_query(name: str) -> Query:
    """Compile ``source/queries/<name>.scm`` for the CUDA grammar (cached).

    ``name`` may be given with or without the ``.scm`` suffix. A missing file or a
    query the grammar rejects raises ``ValueError`` naming the file.
    """
    stem = name[:-4] if name.endswith(".scm") else name
    path = QUERY_DIR / f"{stem}.scm"
    if not path.is_file():
        raise ValueError(f"no query file {path} (queries live in source/queries/<name>.scm)")
    source = path.read_text(encoding="utf-8")
    lang = language(QUERY_GRAMMAR)
    try:
        if hasattr(tree_sitter, "Query"):
            try:
                return tree_sitter.Query(lang, source)  # >= 0.23
            except TypeError:
                pass
        return lang.query(source)  # type: ignore[attr-defined]  # <= 0.22; the installed stubs lack it
    except Exception as err:  # QueryError / NameError / SyntaxError by version
        raise ValueError(f"{path}: grammar {QUERY_GRAMMAR!r} rejects the query: {err}") from err


def _order(nodes: list[SyntaxNode]) -> list[SyntaxNode]:
    unique = {(n.start_byte, n.end_byte, n.type): n for n in nodes}
    return [unique[k] for k in sorted(unique, key=lambda k: (k[0], -k[1], k[2]))]


def captures(name: str, node: SyntaxNode) -> dict[str, list[SyntaxNode]]:
    """Run query ``name`` (``source/queries/<name>.scm``) on ``node``: capture name -> nodes,
    each list in document order."""
    query = load_query(name)
    cursor_cls = getattr(tree_sitter, "QueryCursor", None)
    # <= 0.24: Query.captures (absent from the installed stubs)
    raw = cursor_cls(query).captures(node) if cursor_cls is not None else query.captures(node)  # type: ignore[attr-defined]
    grouped: dict[str, list[SyntaxNode]] = collections.defaultdict(list)
    if isinstance(raw, dict):  # >= 0.23
        for capture_name, nodes in raw.items():
            grouped[capture_name].extend(nodes)
    else:  # <= 0.22: list of (node, name)
        for found, capture_name in raw:
            grouped[capture_name].append(found)
    return {capture_name: _order(nodes) for capture_name, nodes in grouped.items()}


def matches(name: str, node: SyntaxNode) -> list[dict[str, list[SyntaxNode]]]:
    """Run query ``name`` (``source/queries/<name>.scm``) on ``node``: one ``{capture name:
    [nodes]}`` per match, in document order."""
    query = load_query(name)
    cursor_cls = getattr(tree_sitter, "QueryCursor", None)
    # <= 0.24: Query.matches (absent from the installed stubs)
    raw = cursor_cls(query).matches(node) if cursor_cls is not None else query.matches(node)  # type: ignore[attr-defined]
    out: list[tuple[int, int, dict[str, list[SyntaxNode]]]] = []
    for _pattern, found in raw:
        groups: dict[str, list[SyntaxNode]] = {}
        for capture_name, value in found.items():
            nodes = list(value) if isinstance(value, (list, tuple)) else [value]  # 0.22: one node
            groups[capture_name] = _order(nodes)
        first = min((n.start_byte for ns in groups.values() for n in ns), default=0)
        last = max((n.end_byte for ns in groups.values() for n in ns), default=0)
        out.append((first, -last, groups))
    out.sort(key=lambda item: (item[0], item[1]))
    return [groups for _first, _last, groups in out]


# --------------------------------------------------------------------------- node helpers
# Node attributes (type, children, start_byte, ...) have been stable across
# versions; these helpers exist so callers read trees the same way everywhere.


def walk(node: Node) -> Iterator[Node]:
    """Every node under ``node`` (itself included), in document order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def field(node: SyntaxNode, name: str) -> SyntaxNode:
    """``node``'s child in field ``name``, for a field the grammar always fills (a binary expression's
    operands, a call's function and arguments, a declaration's declarator). A tree without it (error
    recovery) raises ``ValueError`` naming the node and the field, not an ``AttributeError`` on None
    further on."""
    child = node.child_by_field_name(name)
    if child is None:
        raise ValueError(f"a {node.type} at byte {node.start_byte} has no {name}")
    return child


def is_problem(node: SyntaxNode) -> bool:
    """An ERROR node or a MISSING (inserted) node."""
    return node.type == "ERROR" or bool(node.is_missing)


def problems(root: SyntaxNode) -> list[SyntaxNode]:
    """ERROR and MISSING nodes under ``root`` (outermost only), in document order."""
    if not root.has_error:
        return []
    found: list[SyntaxNode] = []
    stack = [root]
    while stack:
        current = stack.pop()
        if is_problem(current):
            found.append(current)
            continue
        if current.has_error:
            stack.extend(reversed(current.children))
    return found


# --------------------------------------------------------------------------- measurement

_MEASURED_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc")
_GLOBAL = re.compile(rb"\b__global__\b")


def _count_global_definitions(root: SyntaxNode) -> int:
    count = 0
    for node in walk(root):
        if node.type == "function_definition":
            body = node.child_by_field_name("body")
            head_end = body.start_byte if body is not None else node.end_byte
            text = node.text  # None only for a tree whose source is gone; parse keeps it
            if text is not None and _GLOBAL.search(text[: head_end - node.start_byte]):
                count += 1
    return count


def measure_grammars(directory: str | pathlib.Path) -> dict[str, dict[str, int]]:
    """Per suffix: files, ``__global__`` definitions and error files under each grammar.

    This is the evidence behind :data:`GRAMMAR_BY_SUFFIX`; rerun it when a
    grammar or the SGLang version changes and update the table above.
    """
    table: dict[str, dict[str, int]] = {s: collections.Counter() for s in (*_MEASURED_SUFFIXES, "total")}
    for path in sorted(pathlib.Path(directory).rglob("*")):
        if path.suffix not in _MEASURED_SUFFIXES or not path.is_file():
            continue
        data = path.read_bytes()
        trees = {name: parse(data, name).root_node for name in GRAMMARS}
        row = {"files": 1, "same_trees": int(str(trees["cuda"]) == str(trees["cpp"]))}
        for name, root in trees.items():
            row[f"global_{name}"] = _count_global_definitions(root)
            row[f"error_files_{name}"] = int(root.has_error)
            row[f"error_nodes_{name}"] = len(problems(root))
        for key, value in row.items():
            table[path.suffix][key] += value
            table["total"][key] += value
    return {suffix: dict(counts) for suffix, counts in table.items()}


def _main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m source.treesitter <directory>", file=sys.stderr)
        return 2
    columns = (
        "files",
        "global_cuda",
        "global_cpp",
        "error_files_cuda",
        "error_files_cpp",
        "error_nodes_cuda",
        "error_nodes_cpp",
        "same_trees",
    )
    print("suffix " + " ".join(f"{c:>16}" for c in columns))
    for suffix, row in measure_grammars(argv[0]).items():
        print(f"{suffix:<6} " + " ".join(f"{row.get(c, 0):>16}" for c in columns))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
