"""Size dispatch: a launcher's ``switch`` over a run-time size, one specialised launch per power-of-two
case and a generic ``default:``, given more cases.

Why: SGLang's MoE gates dispatch on the expert count. ``moe_topk_sigmoid.cuh``'s launcher has
``case 1:`` .. ``case 256:``, each launching the fused warp-per-token kernel specialised for that
count, and a ``default:`` that runs two generic block-per-token kernels through a workspace. A model
with 512 experts (Qwen3-Next-80B-A3B) takes the default: its baseline is 17-20 x its floor there
(H200, 2026-12-05), while ``topk_softmax``'s launcher, the same kernel family, has a ``case 512:``.

:func:`extend_size_dispatch` adds ``case V:`` for each ``V`` asked, right after the largest case:
that case's text with its value replaced by ``V`` wherever it appears as a whole integer literal
(the label, and the template or macro argument that specialises the launch)::

    // before                                   // after
    case 256:                                   case 256:
      LAUNCH_SIGMOID(T, 256, WARPS_PER_TB);       LAUNCH_SIGMOID(T, 256, WARPS_PER_TB);
      break;                                      break;
    default: { ... }                            case 512:
                                                  LAUNCH_SIGMOID(T, 512, WARPS_PER_TB);
                                                  break;
                                                default: { ... }

What must stay true (the transform refuses a switch otherwise):
- the switch is over a name (a run-time size), in host code; its labels are integer literals, at
  least two of them distinct powers of two, and it has a ``default:``;
- the largest case ends with ``break;`` (a copy falls through to nothing) and mentions its value
  as a whole literal besides the label (the specialisation), so the copy launches something else;
- every ``V`` is a power of two above every label.
The sizes a new case serves took the ``default:`` before, and nothing else changes. Whether the
specialisation compiles for ``V`` (its static_asserts) is for the build to say, and whether it
agrees with the generic path (ties, rounding) for the checks.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from optimize.cuda_regions import Region, RegionFunction
from optimize.cuda_text import Node, text_of
from optimize.transform_edits import Edit, NotApplicable, TransformError, apply_edits, indent_of

#: the largest value a new case may have (a count of experts, heads or groups: well past any model's)
MAX_CASE = 1 << 16


@dataclass(frozen=True)
class SizeSwitch:
    """A switch :func:`extend_size_dispatch` can extend: where, its labels, and its largest case."""

    function: RegionFunction
    subject: str  # the name switched on
    labels: tuple[int, ...]
    largest: Node  # the case_statement of the largest label
    literals: tuple[Node, ...]  # the largest case's number literals equal to its label, label included


def _is_power_of_two(value: int) -> bool:
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
    """Every switch of the region's host code that :func:`extend_size_dispatch` can extend."""
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
                powers = {v for v, _ in labelled if _is_power_of_two(v)}
                if not has_default or len(powers) < 2:
                    continue
                top, largest = max(labelled, key=lambda item: item[0])
                literals = _literals(largest, src, top)
                # the case's last child: the label when it has no statement, never a break then
                if largest.named_children[-1].type != "break_statement" or len(literals) < 2:
                    continue
                out.append(SizeSwitch(f, subject, tuple(v for v, _ in labelled), largest, tuple(literals)))
    return out


def extend_size_dispatch(
    regions: Mapping[str, str], *, values: Sequence[int], function: str | None = None, subject: str | None = None
) -> dict[str, str]:
    """Add ``case V:`` for each of ``values`` to each size switch (of ``function``, over ``subject``; see
    the module doc). One launcher may switch over two sizes (set_mla_kv_concat_q_fp8): ``subject``
    keeps a value meant for one of them out of the other."""
    wanted = sorted(set(values))
    if not wanted or any(isinstance(v, bool) or not isinstance(v, int) or not _is_power_of_two(v) for v in wanted):
        raise TransformError(f"extend_size_dispatch: values must be powers of two, got {list(values)!r}")
    if wanted[-1] > MAX_CASE:
        raise TransformError(f"extend_size_dispatch: {wanted[-1]} is above {MAX_CASE}")
    edits: list[Edit] = []
    why_not: list[str] = []
    for switch in size_switches(Region(regions)):
        if (function is not None and switch.function.name != function) or (
            subject is not None and switch.subject != subject
        ):
            continue
        top = max(switch.labels)
        if wanted[0] <= top:
            why_not.append(f"{switch.function.name}: switch ({switch.subject}) already reaches {top}")
            continue
        doc, case = switch.function.doc, switch.largest
        pad = indent_of(doc.src, case).decode()
        copies = []
        for value in wanted:
            text, at = bytearray(), case.start_byte
            for literal in switch.literals:
                text += doc.src[at : literal.start_byte] + str(value).encode()
                at = literal.end_byte
            text += doc.src[at : case.end_byte]
            copies.append(f"\n{pad}" + text.decode())
        edits.append(Edit(doc.span, case.end_byte, case.end_byte, "".join(copies).encode()))
    if not edits:
        reason = "; ".join(why_not) or "no host switch over a size has power-of-two cases, a default and a break"
        raise NotApplicable("extend_size_dispatch", reason)
    return apply_edits("extend_size_dispatch", regions, edits)


__all__ = ["SizeSwitch", "extend_size_dispatch", "size_switches"]
