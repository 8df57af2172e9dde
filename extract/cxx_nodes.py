"""Syntax-tree helpers: scopes, declarators, parameters; definitions and calls by name.

Small functions over tree-sitter nodes (their ``type``, fields and byte spans;
the nodes come from :mod:`source.treesitter`, which alone calls the
py-tree-sitter API) that :mod:`extract.file_scan` reads definitions with, plus
:func:`text_params` for definitions recovered from text without a tree. The
contract reader (:mod:`extract.launcher_facts`) finds a launcher's member and
helper definitions (:func:`find_definition`) and the calls an entry forwards
through (:func:`calls_in`) from the same trees, instead of scanning text for
``name(``: a call inside a string literal is no call, and a parameter list ends
where the grammar says. Measured on sglang 0.5.23: the tree and text readings
give the same definition for all 456 launcher methods and the same forwarding
chain for all of them (81 forward to a helper).

What must stay true: names and types are spelled as records spell C++ text
(:func:`extract.cxx.normalise`); comments inside a parameter never reach its type.
"""

from __future__ import annotations

import dataclasses
import functools
import re

from extract.cxx import (
    CppFunction,
    find_function,
    function_params,
    normalise,
    split_top,
    strip_template_args,
    template_header_before,
)
from pipeline.records import Param
from source import treesitter as ts
from source.cuda_text import text_of

SCOPE_TYPES = {"namespace_definition", "struct_specifier", "class_specifier", "union_specifier"}
CLASS_TYPES = {"struct_specifier", "class_specifier", "union_specifier"}
IDENT_TYPES = {"identifier", "field_identifier", "type_identifier"}


def scope_names(node: ts.Node, data: bytes) -> list[str]:
    """Enclosing namespace and class names, outermost first."""
    names: list[str] = []
    current = node.parent
    while current is not None:
        if current.type in SCOPE_TYPES:
            name = current.child_by_field_name("name")
            if name is not None:
                names.append(normalise(text_of(data, name)))
        current = current.parent
    return list(reversed(names))


def with_template_header(node: ts.Node) -> ts.Node:
    """The outermost ``template_declaration`` wrapping ``node`` directly, else ``node``."""
    current = node
    while current.parent is not None and current.parent.type == "template_declaration":
        current = current.parent
    return current


def inner_declarator(node: ts.Node) -> ts.Node | None:
    """The declarator nested in ``node``; ``reference_declarator`` and
    ``parenthesized_declarator`` hold it as a plain child rather than a field."""
    inner = node.child_by_field_name("declarator")
    if inner is None and node.type in ("reference_declarator", "parenthesized_declarator"):
        inner = next((c for c in node.named_children if c.type not in ("comment", "type_qualifier")), None)
    return inner


def function_declarator(node: ts.Node) -> ts.Node | None:
    declarator = node.child_by_field_name("declarator")
    while declarator is not None and declarator.type != "function_declarator":
        declarator = inner_declarator(declarator)
    return declarator


def declarator_name(func_decl: ts.Node, data: bytes) -> tuple[str, str]:
    """(simple name, name as written, maybe qualified) of a function declarator."""
    target = func_decl.child_by_field_name("declarator")
    if target is None:
        return "", ""
    written = normalise(text_of(data, target))
    if target.type in ("operator_name", "destructor_name"):
        return written, written
    cleaned = written if re.search(r"\boperator\b", written) else strip_template_args(written)
    return cleaned.split("::")[-1].strip(), cleaned


def innermost_name(declarator: ts.Node | None) -> ts.Node | None:
    """The identifier a (possibly nested) parameter declarator names, or None."""
    current = declarator
    while current is not None:
        if current.type in ("identifier", "field_identifier", "type_identifier"):
            return current
        current = inner_declarator(current)
    return None


def text_without(data: bytes, node: ts.Node, holes: list[tuple[int, int]]) -> str:
    pieces, cursor = [], node.start_byte
    for start, end in sorted(holes):
        if start < cursor:
            continue
        pieces.append(data[cursor:start])
        cursor = end
    pieces.append(data[cursor : node.end_byte])
    return normalise(b" ".join(pieces).decode("utf-8", "replace"))


def comment_holes(node: ts.Node) -> list[tuple[int, int]]:
    return [(n.start_byte, n.end_byte) for n in ts.walk(node) if n.type == "comment"]


def param_of(node: ts.Node, data: bytes) -> Param | None:
    """A function or template parameter: name, type text without the name, default text."""
    if node.type == "comment":
        return None
    if node.type in ("variadic_parameter", "..."):
        return Param(name="", type="...")
    holes = comment_holes(node)
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
        name_node = innermost_name(node.child_by_field_name("declarator"))
    default_node = node.child_by_field_name("default_value") or node.child_by_field_name("default_type")
    default = None
    if default_node is not None:
        default = normalise(text_of(data, default_node))
        # cut from the '=' to the end of the default
        eq = data.rfind(b"=", node.start_byte, default_node.start_byte)
        holes.append((eq if eq >= 0 else default_node.start_byte, default_node.end_byte))
    name = ""
    if name_node is not None:
        name = text_of(data, name_node)
        holes.append((name_node.start_byte, name_node.end_byte))
    return Param(name=name, type=text_without(data, node, holes), default=default)


def params_of(parameter_list: ts.Node | None, data: bytes) -> list[Param]:
    if parameter_list is None:
        return []
    out = []
    for child in parameter_list.named_children:
        param = param_of(child, data)
        if param is not None:
            out.append(param)
    if any(c.type == "..." for c in parameter_list.children):
        out.append(Param(name="", type="..."))
    return out


def text_params(text: str) -> list[Param]:
    """Parameters from raw text, for definitions recovered without a syntax tree."""
    out = []
    for part in split_top(text):
        default = None
        pieces = split_top(part, "=")
        if len(pieces) == 2:
            part, default = pieces[0], normalise(pieces[1])
        match = re.search(r"([A-Za-z_]\w*)\s*(\[[^\]]*\]\s*)*$", part)
        if match and part[: match.start()].strip() and match.group(1) not in ("const", "volatile"):
            name = match.group(1)
            type_text = part[: match.start(1)] + part[match.end(1) :]
        else:
            name, type_text = "", part
        out.append(Param(name=name, type=normalise(type_text), default=default))
    return out


def enclosing_function(node: ts.Node, outermost: bool = False) -> ts.Node | None:
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


def enclosing_class(node: ts.Node) -> bool:
    current = node.parent
    while current is not None:
        if current.type in CLASS_TYPES:
            return True
        current = current.parent
    return False


# --------------------------------------------------------------------------- definitions by name


@functools.lru_cache(maxsize=32)
def _definitions(text: str) -> dict[str, CppFunction]:
    """Every function definition tree-sitter reads in ``text``, first of each simple name,
    with its parameter list and body cut from ``text`` at the nodes' spans."""
    data = text.encode("utf-8")
    root = ts.parse(data).root_node
    found: dict[str, CppFunction] = {}
    for node in ts.captures("definitions", root).get("function", []):
        body = node.child_by_field_name("body")
        func_decl = function_declarator(node)
        if body is None or body.type != "compound_statement" or func_decl is None:
            continue
        params = func_decl.child_by_field_name("parameters")
        name_node = func_decl.child_by_field_name("declarator")
        name, _written = declarator_name(func_decl, data)
        if not name or name in found or params is None or name_node is None:
            continue

        def at(offset: int) -> int:  # a byte offset of ``data`` as an index of ``text``
            return len(data[:offset].decode("utf-8", "replace"))

        found[name] = CppFunction(
            name=name,
            params=function_params(text[at(params.start_byte) + 1 : at(params.end_byte) - 1]),
            body=text[at(body.start_byte) + 1 : at(body.end_byte) - 1],
            template=template_header_before(text, at(name_node.start_byte) + text_of(data, name_node).rfind(name)),
        )
    return found


def find_definition(text: str, name: str) -> CppFunction | None:
    """The first definition of member/free function ``name`` in ``text`` as tree-sitter
    reads it (the node spans give parameters and body); the text reading
    (:func:`extract.cxx.find_function`) where the grammar finds none (a definition it
    garbles: an unmasked attribute macro, a macro statement)."""
    return _definitions(text).get(name) or find_function(text, name)


# --------------------------------------------------------------------------- calls in a body


@dataclasses.dataclass(frozen=True)
class Call:
    """A call in a function body: the callee's simple name, the text between its
    template brackets (None without), and where its argument list's ``(`` is in the body."""

    name: str
    template_args: str | None
    open_paren: int


_BODY_PREFIX = "void kernelsmith_body() {\n"  # a body alone is no translation unit: parse it inside one


def _callee(node: ts.Node, data: bytes) -> tuple[ts.Node, str | None] | None:
    """The identifier a callee expression ends in, and its template arguments' text."""
    current: ts.Node | None = node
    while current is not None:
        if current.type in ("identifier", "field_identifier"):
            return current, None
        if current.type == "template_function":
            name = current.child_by_field_name("name")
            args = current.child_by_field_name("arguments")
            if name is None or args is None:
                return None
            inner = data[args.start_byte + 1 : args.end_byte - 1].decode("utf-8", "replace")
            return name, inner
        if current.type == "qualified_identifier":
            current = current.child_by_field_name("name")
        elif current.type == "field_expression":
            current = current.child_by_field_name("field")
        else:
            return None
    return None


@functools.lru_cache(maxsize=256)
def calls_in(body: str) -> tuple[Call, ...]:
    """The calls tree-sitter reads in a function body, in the order their names appear."""
    text = _BODY_PREFIX + body + "\n}\n"
    data = text.encode("utf-8")
    root = ts.parse(data).root_node
    found: list[tuple[int, Call]] = []
    for match in ts.matches("calls", root):
        callee, arguments = match.get("callee", []), match.get("args", [])
        if len(callee) != 1 or len(arguments) != 1:
            continue
        named = _callee(callee[0], data)
        if named is None:
            continue
        name_node, targs = named

        def at(offset: int) -> int:  # a byte offset of ``data`` as an index of ``body``
            return len(data[:offset].decode("utf-8", "replace")) - len(_BODY_PREFIX)

        name = text_of(data, name_node)
        found.append((at(name_node.start_byte), Call(name, targs, at(arguments[0].start_byte))))
    return tuple(call for _at, call in sorted(found, key=lambda item: item[0]))
