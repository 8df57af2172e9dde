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
agrees with the generic path (ties, rounding) for the checks. The switches are found by
:func:`optimize.cuda_sites.size_switches`, which the features list too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from optimize.cuda_regions import Region
from optimize.cuda_sites import is_power_of_two, size_switches
from optimize.features import Features
from optimize.transforms.edits import Edit, NotApplicable, TransformError, apply_edits, indent_of
from optimize.transforms.spec import Params, TransformSpec

#: the largest value a new case may have (a count of experts, heads or groups: well past any model's)
MAX_CASE = 1 << 16


def extend_size_dispatch(
    regions: Mapping[str, str], *, values: Sequence[int], function: str | None = None, subject: str | None = None
) -> dict[str, str]:
    """Add ``case V:`` for each of ``values`` to each size switch (of ``function``, over ``subject``; see
    the module doc). One launcher may switch over two sizes (set_mla_kv_concat_q_fp8): ``subject``
    keeps a value meant for one of them out of the other."""
    wanted = sorted(set(values))
    if not wanted or any(isinstance(v, bool) or not isinstance(v, int) or not is_power_of_two(v) for v in wanted):
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


def _dispatch_targets(features: Features, point: Params) -> list[Params]:
    """Per size switch, the next ``above`` powers of two past its largest case (as one choice). With
    the measured shapes known, only when the switched name is one of their sizes and each value is
    one it takes there (a case serves its value alone: no build goes to a size no shape has)."""
    above = int(point.get("above", 1))
    out: list[Params] = []
    for function, subject, top in features.size_switches:
        measured = set(features.measured_sizes.get(subject, ())) if features.measured_sizes else None
        values = [top << i for i in range(1, above + 1) if top << i <= MAX_CASE]
        if len(values) == above and (measured is None or set(values) <= measured):
            out.append({"function": function, "subject": subject, "values": values})
    return out


SPECS = (
    TransformSpec(
        "extend_size_dispatch",
        extend_size_dispatch,
        {
            "values": "the powers of two to add as cases",
            "function": "the launcher whose switch is extended",
            "subject": "the size the switch is over",
        },
        ("above",),
        _dispatch_targets,
        "add larger power-of-two cases to a launcher's switch over a size, copying its largest case",
        choice=("values",),
    ),
)

__all__ = ["MAX_CASE", "SPECS", "extend_size_dispatch"]
