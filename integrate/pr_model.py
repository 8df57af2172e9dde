"""The PR's model-step section, and the rule by which the model step holds a PR in draft.

Why: a kernel win counts where users feel it. A reviewer reads, for each model recipe the
proxy ran (:mod:`integrate.e2e`), which of its steps run the changed code (the patch's own
ops and every op its changes reach, :mod:`integrate.reached`), the whole layer, the SGLang
ops alone, and each changed step in its neighbourhood, each beside the A/A figure (a copy of
the pristine tree against it) and judged against the band that A/A widens.

What must stay true:
- A step "runs the change" when its op is a patched op, or one the patch reaches, or one whose
  reach could not be decided: the PR never says a layer cannot show a change it may show.
- :func:`regressions` lists every point, in every recipe whose layer runs the change, where it was
  slower beyond its band; :func:`integrate.pr.status` keeps such a PR in draft and says where.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from integrate.landing import skill_transforms
from integrate.records import AATiming, E2EResult, IntegrateReport
from optimize.transforms.registry import TRANSFORMS


def fmt(value: float | None, spec: str = ".2f", none: str = "—") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return none
    return format(value, spec)


def changed_ops(report: IntegrateReport) -> set[str]:
    """The ops whose code the patch changes: its own, those it reaches, and those whose reach is unknown."""
    own = {op.op_id for op in report.patch.ops}
    reached = {other for others in report.reach.values() for other in others}
    return own | reached | set(report.reach_unknown)


def changed_steps(report: IntegrateReport, e2e: E2EResult) -> dict[str, str]:
    """The steps of one recipe's layer that run changed code: step name -> its op id."""
    if not e2e.ran:
        return {}
    changed = changed_ops(report)
    out = {}
    for name in e2e.ops:
        part = e2e.parts.get(name, "")
        if part.startswith("SGLang ") and part.removeprefix("SGLang ") in changed:
            out[name] = part.removeprefix("SGLang ")
    return out


def overlap_only(skills: Sequence[str]) -> bool:
    """Whether a candidate made by ``skills`` owes its whole gain to launch overlap (PDL,
    ``TransformSpec.overlap``): then the kernel replayed after itself cannot show it, and only its
    neighbourhood in a model can."""
    transforms = skill_transforms()
    return bool(skills) and all(
        skill in transforms and transforms[skill] in TRANSFORMS and TRANSFORMS[transforms[skill]].overlap
        for skill in skills
    )


def overlap_unshown(report: IntegrateReport) -> list[str]:
    """Why each launch-overlap-only op is not yet proven: it is accepted on its in-context figure, so
    some recipe that ran must time a step running its change in context, faster beyond the band."""
    out = []
    for op in report.patch.ops:
        if not overlap_only(op.skills):
            continue
        runs = {op.op_id, *report.reach.get(op.op_id, [])}
        seen: list[str] = []
        for e2e in report.e2e:
            steps = {name for name, op_id in changed_steps(report, e2e).items() if op_id in runs}
            seen += [ctx.verdict for row in e2e.rows for name, ctx in row.context.items() if name in steps]
        if "faster" in seen:
            continue
        why = "no layer recipe that ran times a step running it" if not seen else "no in-context point is faster"
        out.append(
            f"{op.op_id}: its gain is launch overlap ({' + '.join(op.skills)}), judged in context only, and {why}"
        )
    return out


def _aa(aa: AATiming | None) -> str:
    return "—" if aa is None else f"{aa.change_pct:+.2f}% (±{aa.band_pct:.2f}%)"


def runs_change(report: IntegrateReport) -> bool:
    """Whether some recipe that ran has a step that runs the changed code."""
    return any(changed_steps(report, e2e) for e2e in report.e2e)


def regressions(report: IntegrateReport) -> list[str]:
    """Every point where the layer, the SGLang ops alone or a changed step in its neighbourhood was
    slower beyond its band, in every recipe that runs the change; [] when none runs it or none ran."""
    out: list[str] = []
    for e2e in report.e2e:
        out += _regressions(e2e, changed_steps(report, e2e))
    return out


def _regressions(e2e: E2EResult, steps: dict[str, str]) -> list[str]:
    if not steps:
        return []
    out: list[str] = []
    for row in e2e.rows:
        point = f"{e2e.model} {row.phase} T={row.tokens}"
        if row.verdict == "slower":
            out.append(
                f"{point}: the whole layer {row.change_pct:+.2f}% (band ±{fmt(row.noise_band_pct)}%, A/A {_aa(row.aa)})"
            )
        ng = row.non_gemm
        if ng is not None and ng.verdict == "slower":
            out.append(
                f"{point}: the SGLang ops {ng.change_pct:+.2f}% of their own time, {ng.share_of_layer_pct:+.2f}% of the layer "
                f"(band ±{fmt(ng.noise_band_pct)}%, A/A {_aa(ng.aa)})"
            )
        for name, ctx in row.context.items():
            if name in steps and ctx.verdict == "slower":
                out.append(
                    f"{point}: `{steps[name]}` in context ({' → '.join(ctx.neighbours)}) {ctx.change_pct:+.2f}% "
                    f"(band ±{ctx.noise_band_pct:.2f}%, A/A {_aa(ctx.aa)})"
                )
    return out


def _legacy_table(e2e: E2EResult) -> list[str]:
    """A record from before the whole-layer proxy: its rows are the non-GEMM ops alone, and are labelled so."""
    out = [
        (
            f"Recorded by the older layer proxy: one {e2e.model} decoder layer's **non-GEMM ops only** ({' → '.join(e2e.ops)}), "
            "no GEMM and no attention, so the change below is NOT a share of a whole layer. Re-run integrate for the whole-layer figure."
        ),
        "",
        "| phase | tokens | baseline µs (non-GEMM) | patched µs (non-GEMM) | change of the non-GEMM ops |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in e2e.rows:
        out.append(
            f"| {row.phase} | {row.tokens} | {row.baseline_us:.2f} (±{row.baseline_spread_pct:.1f}%) | "
            f"{row.patched_us:.2f} (±{row.patched_spread_pct:.1f}%) | {row.change_pct:+.1f}% |"
        )
    return [*out, "", f"Assumption: {e2e.assumption}", ""]


def _method(e2e: E2EResult, aa: bool) -> str:
    steps = " → ".join(
        f"{name} ({e2e.parts.get(name, '?')}" + (f", `{e2e.sources[name]}`" if name in e2e.sources else "") + ")"
        for name in e2e.ops
    )
    kv = (
        f" Decode: each of the B sequences attends with 1 new token over a KV cache of {e2e.kv_len} tokens; prefill is causal over its T tokens."
        if e2e.kv_len
        else ""
    )
    trees = (
        "the pristine tree, the patched tree and a byte-for-byte copy of the pristine tree (A/A), each built on its own, "
        "turning order each round"
        if aa
        else "pristine and patched trees alternating over rounds"
    )
    band = (
        "The noise band is half the wider of the two trees' p10–p90 spreads, widened to the A/A's difference and its own band; "
        if aa
        else "The noise band is half the wider of the two trees' p10–p90 spreads; "
    )
    return (
        f"One whole {e2e.model} decoder layer ({e2e.dtype}) from the recipe `{e2e.recipe or '?'}`: {steps}. "
        f"Attention: {e2e.attention or 'torch SDPA'}.{kv} Many layers back to back in one CUDA graph, buffer sets rotated "
        f"over at least 3x L2, {trees}; medians of the pooled replays, spread = (p90 − p10) / median. {band}"
        "a change inside it is reported as **no change**."
    )


def tables(e2e: E2EResult, steps: dict[str, str] | None = None) -> list[str]:
    """The whole-layer table, the non-GEMM one and, for the changed ``steps``, the in-context one."""
    if not e2e.recipe:
        return _legacy_table(e2e)
    aa = any(row.aa is not None for row in e2e.rows)
    out = [_method(e2e, aa)]
    for op, why in e2e.skipped_ops.items():
        out.append(f"- `{op}` is not in the layer: {why}")
    aa_head, aa_rule = (" A/A (copy − pristine) |", "---:|") if aa else ("", "")
    out += [
        "",
        "**Whole layer** (change as a share of the whole layer's time):",
        "",
        f"| phase | tokens | KV len | baseline µs/layer | patched µs/layer | change |{aa_head} noise band | verdict | implied tok/s |",
        f"|---|---:|---:|---:|---:|---:|{aa_rule}---:|---|---|",
    ]
    for row in e2e.rows:
        aa_cell = f" {_aa(row.aa)} |" if aa else ""
        out.append(
            f"| {row.phase} | {row.tokens} | {row.kv_len if row.kv_len else '—'} | {row.baseline_us:.2f} (±{row.baseline_spread_pct:.1f}%) | "
            f"{row.patched_us:.2f} (±{row.patched_spread_pct:.1f}%) | {row.change_pct:+.2f}% |{aa_cell} ±{fmt(row.noise_band_pct)}% | "
            f"{row.verdict or '—'} | {row.baseline_tokens_per_s:,.0f} → {row.patched_tokens_per_s:,.0f} |"
        )
    rows = [r for r in e2e.rows if r.non_gemm is not None]
    if rows:
        out += [
            "",
            (
                "**Non-GEMM part only** (SGLang's ops alone, back to back, NOT the whole layer; the change is given on its own "
                "and as a share of the whole layer's time):"
            ),
            "",
            f"| phase | tokens | baseline µs | patched µs | change of the part | share of the layer |{aa_head} verdict |",
            f"|---|---:|---:|---:|---:|---:|{aa_rule}---|",
        ]
        for row in rows:
            ng = row.non_gemm
            assert ng is not None
            aa_cell = f" {_aa(ng.aa)} |" if aa else ""
            out.append(
                f"| {row.phase} | {row.tokens} | {ng.baseline_us:.2f} (±{ng.baseline_spread_pct:.1f}%) | "
                f"{ng.patched_us:.2f} (±{ng.patched_spread_pct:.1f}%) | {ng.change_pct:+.1f}% | {ng.share_of_layer_pct:+.2f}% |{aa_cell} {ng.verdict} |"
            )
    context = [(row, name, row.context[name]) for row in e2e.rows for name in (steps or {}) if name in row.context]
    if context:
        out += [
            "",
            (
                "**In context** (each changed step between the layer's steps before and after it, one CUDA graph: what a "
                "launch-overlap change such as PDL's early trigger does where the model runs it; change of that graph):"
            ),
            "",
            "| phase | tokens | step | graph | baseline µs | patched µs | change | A/A (copy − pristine) | noise band | verdict |",
            "|---|---:|---|---|---:|---:|---:|---:|---:|---|",
        ]
        for row, name, ctx in context:
            out.append(
                f"| {row.phase} | {row.tokens} | {name} | {' → '.join(ctx.neighbours)} | {ctx.baseline_us:.2f} | "
                f"{ctx.patched_us:.2f} | {ctx.change_pct:+.2f}% | {_aa(ctx.aa)} | ±{ctx.noise_band_pct:.2f}% | {ctx.verdict} |"
            )
    out += ["", f"Assumption: {e2e.assumption}", ""]
    return out


def section(report: IntegrateReport) -> list[str]:
    """The model step's body: per recipe, which steps run the change, then the tables; a recipe that
    did not run says why."""
    out: list[str] = []
    several = len(report.e2e) > 1
    for e2e in report.e2e:
        if several:
            out += [f"#### {e2e.model or e2e.recipe}", ""]
        if not e2e.ran:
            out += [f"Not run: {e2e.reason}.", ""]
            continue
        out += _one(report, e2e)
    return out


def _one(report: IntegrateReport, e2e: E2EResult) -> list[str]:
    steps = changed_steps(report, e2e)
    out: list[str] = []
    if e2e.recipe:
        if steps:
            runs = ", ".join(f"`{name}` ({op})" for name, op in steps.items())
            out += [f"This layer runs the changed code at: {runs} (read from the source: `integrate.reached`).", ""]
        else:
            changed = ", ".join(f"`{op}`" for op in sorted(changed_ops(report)))
            out += [
                f"No step of this layer's recipe runs the changed code ({changed}, found from the source); "
                "these figures show the layer around it, not the change.",
                "",
            ]
        for op_id, why in sorted(report.reach_unknown.items()):
            out += [f"Whether `{op_id}` runs the changed code is unknown ({why}); it is counted as running it.", ""]
    out += tables(e2e, steps)
    slower = _regressions(e2e, steps)
    if slower:
        out += ["**Slower in the model step** (this keeps the PR in draft):", ""]
        out += [f"- {line}" for line in slower]
        out.append("")
    return out
