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
A ``#pragma unroll`` before the loop stays attached to it. The loops are found by
:func:`optimize.cuda_sites.strided_loops`, which the features count too.
"""

from __future__ import annotations

from collections.abc import Mapping

from optimize.cuda_regions import Region
from optimize.cuda_sites import strided_loops
from optimize.features import Features
from optimize.transforms.edits import Edit, NotApplicable, apply_edits, indent_of
from optimize.transforms.spec import Params, TransformSpec
from source.cuda_text import prev_named_sibling, text_of


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


def _divmod_targets(features: Features, point: Params) -> list[Params]:
    return [{}] if features.static.strided_divmod else []


#: before the unroll pragma: a pragma must stay next to its loop, and the carries go above the loop
SPECS = (
    TransformSpec(
        "incremental_divmod",
        incremental_divmod,
        {"kernel": "one kernel (None: every kernel)"},
        (),
        _divmod_targets,
        "carry a strided loop variable's quotient and remainder instead of dividing every trip",
    ),
)

__all__ = ["SPECS", "incremental_divmod"]
