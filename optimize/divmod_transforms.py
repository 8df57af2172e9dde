"""Strength reduction: a strided loop's ``v / m`` and ``v % m`` kept up to date instead of divided each trip.

Why: SGLang's grid-stride kernels index a second operand by the loop variable's quotient or
remainder (``bias_gelu.cuh``: ``b.load(bias, vec_id % row_vecs)``; ``rope.cuh``'s
``fused_rope_kernel``: ``idx / num_q_and_k_heads`` and ``idx % num_q_and_k_heads``). With a
run-time 64-bit divisor each trip pays an emulated division, tens of instructions, next to a
few for the work itself; 26 of the extracted ops have such a loop. Since ``v`` grows by the
same step every trip, ``v / m`` and ``v % m`` grow by ``step / m`` and ``step % m``, plus a
carry of one when the remainder passes ``m``.

:func:`incremental_divmod` rewrites each such loop of a kernel::

    // before                                   // after
    for (T v = E; v < n; v += S) {             auto carry_r0 = static_cast<T>(E) % (M);
      ... v % M ... v / M ...                   auto carry_q0 = static_cast<T>(E) / (M);
    }                                           const auto carry_sr0 = (S) % (M);
                                                const auto carry_sq0 = (S) / (M);
                                                for (T v = E; v < n; v += S, carry_r0 += carry_sr0,
                                                     carry_q0 += carry_sq0 + (carry_r0 >= (M)),
                                                     carry_r0 -= carry_r0 >= (M) ? (M) : 0) {
                                                  ... carry_r0 ... carry_q0 ...
                                                }

What must stay true (the transform refuses a loop otherwise):
- ``v`` is the loop's one declared variable, changed only by the update ``v += S`` and not
  declared again inside (a shadowing inner loop), and the loop sits in a block (the new
  declarations go right before it);
- ``E`` reads ``threadIdx`` / ``blockIdx``, or a name initialized from them (a grid- or block-stride loop: ``v``, ``S`` and
  ``M`` are non-negative there, where C++'s ``/`` and ``%`` agree with the carried values), and like
  ``S`` and ``M`` it reads no memory and has no side effect, since it is evaluated again;
- ``S`` and ``M`` are names, fields, literals and arithmetic (no memory read, no call but a cast), do
  not mention ``v``, and nothing in the body assigns a name they use;
- the new values have the types ``v / M`` and ``v % M`` had (``static_cast<T>(E)`` is ``v``'s
  first value), and the update runs on ``continue`` as the old one did.
A ``#pragma unroll`` before the loop stays attached to it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from extract import treesitter as ts
from optimize.cuda_facts import initialized_from
from optimize.cuda_regions import Region, RegionFunction
from optimize.cuda_text import Node, matches, names_in, prev_named_sibling, text_of
from optimize.transform_edits import Edit, NotApplicable, apply_edits, indent_of

_ASSIGN = re.compile(r"(\+\+|--|(?<![=!<>])=(?!=)|\batomic\w*)")


@dataclass(frozen=True)
class StridedLoop:
    """One loop :func:`incremental_divmod` can rewrite: its parts and the divisions by each divisor."""

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
    """The loops of kernel ``f`` that :func:`incremental_divmod` rewrites (see the module doc)."""
    src = f.doc.src
    out: list[StridedLoop] = []
    for m in matches("loops", f.body):
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
        if update.type != "assignment_expression" or text_of(src, update.child_by_field_name("operator")) != "+=":
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
            op = text_of(src, n.child_by_field_name("operator"))
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
    """How many ``v / m`` and ``v % m`` of strided kernel loops :func:`incremental_divmod` could replace."""
    return sum(len(sites) for k in region.kernels for loop in strided_loops(k) for sites in loop.divisions.values())


def incremental_divmod(regions: Mapping[str, str], *, kernel: str | None = None) -> dict[str, str]:
    """Carry the quotient and remainder of each strided loop's divisions (see the module doc)."""
    region = Region(regions)
    edits: list[Edit] = []
    for f in region.kernels:
        if kernel is not None and f.name != kernel:
            continue
        src, span = f.doc.src, f.doc.span
        for number, loop in enumerate(strided_loops(f)):
            first = loop.init if loop.var_type == "auto" else f"static_cast<{loop.var_type}>({loop.init})"
            pad = indent_of(src, loop.node).decode()
            lines, carries = (
                [f"// {loop.var}'s quotients and remainders, carried from step to step instead of divided again"],
                [],
            )
            for index, (divisor, sites) in enumerate(sorted(loop.divisions.items())):
                tag, ops = f"{number}_{index}", {op for _, op in sites}
                r, q = f"carry_r{tag}", f"carry_q{tag}"
                lines.append(f"auto {r} = ({first}) % ({divisor});")
                lines.append(f"const auto carry_sr{tag} = ({loop.step}) % ({divisor});")
                carries.append(f"{r} += carry_sr{tag}")
                if "/" in ops:
                    lines.append(f"auto {q} = ({first}) / ({divisor});")
                    lines.append(f"const auto carry_sq{tag} = ({loop.step}) / ({divisor});")
                    carries.append(f"{q} += carry_sq{tag} + ({r} >= ({divisor}))")
                carries.append(f"{r} -= {r} >= ({divisor}) ? ({divisor}) : 0")
                edits += [Edit(span, n.start_byte, n.end_byte, (r if op == "%" else q).encode()) for n, op in sites]
            at = loop.node
            before = prev_named_sibling(loop.node)
            if (
                before is not None
                and before.type == "preproc_call"
                and b"unroll" in src[before.start_byte : before.end_byte]
            ):
                at = before  # the pragma stays right before its loop
            text = "".join(f"{line}\n{pad}" for line in lines)
            edits.append(Edit(span, at.start_byte, at.start_byte, text.encode()))
            update = text_of(src, loop.update)
            edits.append(
                Edit(span, loop.update.start_byte, loop.update.end_byte, ", ".join([update, *carries]).encode())
            )
    if not edits:
        raise NotApplicable("incremental_divmod", "no kernel loop steps its variable and divides it by an invariant")
    return apply_edits("incremental_divmod", regions, edits)


__all__ = ["StridedLoop", "incremental_divmod", "strided_divmod_sites", "strided_loops"]
