"""The code sites three transforms edit, read once for the features that plan them and the edits that
make them: a launcher's size switch, a strided kernel loop's divisions, SGLang's typed accesses.

Why here, below :mod:`optimize.features`: the planner counts these sites (``size_switches``,
``strided_divmod``, ``typed_accesses``) to decide whether a transform applies, and the transform
(:mod:`optimize.transforms`, above the features) edits exactly the sites counted. One reader for
both keeps "planned" and "editable" the same set.

- :func:`size_switches`: switches over a run-time size with power-of-two cases and a ``default:``
  (``optimize.transforms.size_dispatch``);
- :func:`strided_loops`, :func:`strided_divmod_sites`: grid- or block-stride loops that divide their
  variable by an invariant (``optimize.transforms.carried_divmod``; its docstring states the rules);
- :func:`typed_accesses`, :func:`typed_access_sites`: ``device::load_as`` / ``store_as`` calls in device
  code (``optimize.transforms.streaming``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from optimize.cuda_facts import calls_in, initialized_from
from optimize.cuda_functions import RegionFunction
from optimize.cuda_regions import Region
from source import treesitter as ts
from source.cuda_text import names_in, text_of
from source.treesitter import Node

# --------------------------------------------------------------------------- size switches


@dataclass(frozen=True)
class SizeSwitch:
    """A switch :func:`optimize.transforms.size_dispatch.extend_size_dispatch` can extend: where, its labels, and its largest case."""

    function: RegionFunction
    subject: str  # the name switched on
    labels: tuple[int, ...]
    largest: Node  # the case_statement of the largest label
    literals: tuple[Node, ...]  # the largest case's number literals equal to its label, label included


def is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def _number(src: bytes, node: Node) -> int | None:
    text = text_of(src, node).strip().rstrip("uUlL")
    return int(text) if text.isdigit() else None


def _descendants(node: Node) -> Iterator[Node]:
    """``node`` and every node under it (depth first)."""
    stack = [node]
    while stack:
        cursor = stack.pop()
        yield cursor
        stack.extend(cursor.children)


def _literals(node: Node, src: bytes, value: int) -> list[Node]:
    found = (n for n in _descendants(node) if n.type == "number_literal" and _number(src, n) == value)
    return sorted(found, key=lambda n: n.start_byte)


def size_switches(region: Region) -> list[SizeSwitch]:
    """Every switch of the region's host code that :func:`optimize.transforms.size_dispatch.extend_size_dispatch` can extend."""
    out: list[SizeSwitch] = []
    for f in region.hosts:
        src = f.doc.src
        for node in _descendants(f.body):
            if node.type != "switch_statement":
                continue
            condition, body = node.child_by_field_name("condition"), node.child_by_field_name("body")
            subject = text_of(src, condition).strip("() \t\n") if condition is not None else ""
            if body is None or not subject.isidentifier():
                continue
            cases = [c for c in body.named_children if c.type == "case_statement"]
            labelled: list[tuple[int, Node]] = []
            has_default = False
            for case in cases:
                value = case.child_by_field_name("value")
                if value is None:
                    has_default = True
                    continue
                number = _number(src, value) if value.type == "number_literal" else None
                if number is None:
                    break  # a label that is no integer literal: not a size dispatch
                labelled.append((number, case))
            else:
                powers = {v for v, _ in labelled if is_power_of_two(v)}
                if not has_default or len(powers) < 2:
                    continue
                top, largest = max(labelled, key=lambda item: item[0])
                literals = _literals(largest, src, top)
                # the case's last child: the label when it has no statement, never a break then
                if largest.named_children[-1].type != "break_statement" or len(literals) < 2:
                    continue
                out.append(SizeSwitch(f, subject, tuple(v for v, _ in labelled), largest, tuple(literals)))
    return out


# --------------------------------------------------------------------------- strided loops


_ASSIGN = re.compile(r"(\+\+|--|(?<![=!<>])=(?!=)|\batomic\w*)")


@dataclass(frozen=True)
class StridedLoop:
    """One loop :func:`optimize.transforms.carried_divmod.incremental_divmod` can rewrite: its parts and the divisions by each divisor."""

    node: Node  # the for_statement
    var: str
    var_type: str  # "auto" when deduced
    init: str  # E
    step: str  # S
    update: Node
    divisions: dict[str, list[tuple[Node, str]]]  # divisor text -> (binary_expression, "/" or "%")


def _target(src: bytes, node: Node) -> set[str]:
    """The names an assignment to ``node`` changes: ``x`` of ``x``, ``x[i]``, ``x.f``; none of ``*p`` (memory)."""
    if node.type == "identifier":
        return {text_of(src, node)}
    if node.type in ("subscript_expression", "field_expression"):
        base = node.child_by_field_name("argument")
        return _target(src, base) if base is not None else set()
    if node.type == "parenthesized_expression" and node.named_children:
        return _target(src, node.named_children[0])
    if node.type == "pointer_expression":
        return set()
    return {text_of(src, i) for i in ts.walk(node) if i.type == "identifier"}


def _assigned(src: bytes, body: Node) -> set[str]:
    """Names the body assigns or increments (``x = ...``, ``x[i] += ...``, ``++x``, ``x--``)."""
    out: set[str] = set()
    for n in ts.walk(body):
        if n.type in ("assignment_expression", "update_expression"):
            target = n.child_by_field_name("left") or n.child_by_field_name("argument")
            if target is not None:
                out |= _target(src, target)
    return out


def _invariant_text(src: bytes, node: Node) -> bool:
    """An expression of names, fields, literals and arithmetic: no memory read (``a[i]``, ``*p``, ``->``) or call
    but a cast, so that only an assignment to one of its names can change it."""
    for n in ts.walk(node):
        if n.type in ("subscript_expression", "pointer_expression", "assignment_expression", "update_expression"):
            return False
        if n.type == "field_expression" and b"->" in src[n.start_byte : n.end_byte]:
            return False
        if n.type == "call_expression":
            callee = n.child_by_field_name("function")
            if callee is None or not text_of(src, callee).startswith(("static_cast", "int64_t", "uint32_t")):
                return False
    return True


_THREAD_INDEX = re.compile(r"\b(threadIdx|blockIdx)\b")


def _from_thread_index(src: bytes, body: Node, value: Node) -> bool:
    """Whether ``value`` reads threadIdx / blockIdx, itself or through a name the function initializes from them."""
    if _THREAD_INDEX.search(text_of(src, value)):
        return True
    return bool(names_in(src, value, fields=True) & initialized_from(src, body, _THREAD_INDEX, value.start_byte))


def _declared(src: bytes, body: Node) -> set[str]:
    """Names the body declares (an inner loop's own ``v`` would shadow the outer one)."""
    out: set[str] = set()
    for n in ts.walk(body):
        if n.type in ("init_declarator", "declaration"):
            name = n.child_by_field_name("declarator")
            if name is not None and name.type == "identifier":
                out.add(text_of(src, name))
    return out


def strided_loops(f: RegionFunction) -> list[StridedLoop]:
    """The loops of kernel ``f`` that :func:`optimize.transforms.carried_divmod.incremental_divmod` rewrites (see the module doc)."""
    src = f.doc.src
    out: list[StridedLoop] = []
    for m in ts.matches("loops", f.body):
        if "for" not in m or "init" not in m or "update" not in m:
            continue
        node, init, update, body = m["for"][0], m["init"][0], m["update"][0], m["body"][0]
        if init.type != "declaration" or len([c for c in init.named_children if c.type == "init_declarator"]) != 1:
            continue
        decl = next(c for c in init.named_children if c.type == "init_declarator")
        name, value = decl.child_by_field_name("declarator"), decl.child_by_field_name("value")
        kind = init.child_by_field_name("type")
        if name is None or value is None or kind is None or name.type != "identifier":
            continue
        var, start = text_of(src, name), text_of(src, value)
        if not _from_thread_index(src, f.body, value) or _ASSIGN.search(start) or not _invariant_text(src, value):
            continue
        if update.type != "assignment_expression" or text_of(src, ts.field(update, "operator")) != "+=":
            continue
        left, step = update.child_by_field_name("left"), update.child_by_field_name("right")
        if left is None or step is None or text_of(src, left) != var:
            continue
        step_names = names_in(src, step, fields=True)
        if var in step_names or not _invariant_text(src, step):
            continue
        assigned = _assigned(src, body)
        if var in assigned or step_names & assigned or var in _declared(src, body):
            continue
        holder = node.parent
        if holder is None or holder.type != "compound_statement":
            continue  # `if (c) for (...)`: declarations put before the loop would become the if's body
        divisions: dict[str, list[tuple[Node, str]]] = {}
        for n in ts.walk(body):
            if n.type != "binary_expression":
                continue
            op = text_of(src, ts.field(n, "operator"))
            lhs, rhs = n.child_by_field_name("left"), n.child_by_field_name("right")
            if op not in ("/", "%") or lhs is None or rhs is None or lhs.type != "identifier":
                continue
            if text_of(src, lhs) != var:
                continue
            divisor_names = names_in(src, rhs, fields=True)
            if var in divisor_names or divisor_names & assigned or not _invariant_text(src, rhs):
                continue
            divisions.setdefault(" ".join(text_of(src, rhs).split()), []).append((n, op))
        if divisions:
            out.append(StridedLoop(node, var, text_of(src, kind), start, text_of(src, step), update, divisions))
    return out


def strided_divmod_sites(region: Region) -> int:
    """How many ``v / m`` and ``v % m`` of strided kernel loops :func:`optimize.transforms.carried_divmod.incremental_divmod` could replace."""
    return sum(len(sites) for k in region.kernels for loop in strided_loops(k) for sites in loop.divisions.values())


# --------------------------------------------------------------------------- typed accesses


def typed_access_sites(region: Region, which: tuple[str, ...] = ("load_as", "store_as")) -> int:
    """How many ``device::load_as`` / ``store_as`` calls the streaming hints could rename."""
    return sum(len(typed_accesses(f, which)) for f in region.device_code if f.owner is None)


def typed_accesses(f: RegionFunction, which: tuple[str, ...]) -> list[tuple[int, int, str]]:
    """(start, end, access) of the callee's name part (``device::load_as``) of each typed access in ``f``
    whose access (``load_as``, ``store_as``) is in ``which``."""
    out = []
    for name, text, call in calls_in(f.doc.src, f.body):
        plain = text.strip()
        if name not in which or not (plain.startswith(f"device::{name}<") or plain.startswith(f"{name}<")):
            continue
        callee = call.child_by_field_name("function")
        assert callee is not None  # a call_expression always names its function
        head = len(plain.split("<", 1)[0])  # "device::load_as" or "load_as"
        out.append((callee.start_byte, callee.start_byte + head, name))
    return out


__all__ = [
    "SizeSwitch",
    "StridedLoop",
    "size_switches",
    "strided_divmod_sites",
    "strided_loops",
    "typed_access_sites",
    "is_power_of_two",
    "typed_accesses",
]
