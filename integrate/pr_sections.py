"""The reviewer's sections of PR.md, each from the integrate report's records: why the change is
faster (the bottleneck it moves, its diff), the token buckets and size switches it touches, how to
reproduce every figure, and the checklist. :mod:`integrate.pr` puts them in SGLang's template order.

What must stay true: every sentence comes from a record (nothing is asserted that the report does not
hold), and no absolute path of this machine reaches the text (:func:`relative`).
"""

from __future__ import annotations

import math
import pathlib
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence

from contract.layout import INTEGRATE_DIR
from integrate import pr_model, pr_triton, pr_upstream
from integrate.evidence import OpFacts, RunFacts, launch_facts
from integrate.pr_model import fmt as _fmt
from integrate.records import E2EResult, IntegrateReport, OpChange, Patch
from optimize.report import params_text
from pipeline.buckets import BUCKETS, bucket_for
from pipeline.run_records import ShapeTiming
from pipeline.stats import geomean


def geomean_or_one(values: Iterable[float]) -> float:
    found = geomean(v for v in values if v and math.isfinite(v))
    return math.nan if found is None else found


def speedup_of(t: ShapeTiming) -> float | None:
    if t.speedup is not None:
        return t.speedup
    if t.baseline_us and t.time_us:
        return t.baseline_us / t.time_us
    return None


def timings_of(op: OpChange) -> list[ShapeTiming]:
    return list(op.evaluation.timings) if op.evaluation is not None else []


def layout_apply(patch: Patch, parts: Sequence[str] = ()) -> str:
    """Apply commands, run from the kernelsmith repository root (where ``work/`` is); ``parts``: a
    series' patch files to apply in order instead of ``sglang.patch``."""
    folder = f"$PWD/work/integrate/{patch.run}"
    if parts:
        files = " ".join(f"{folder}/{p}" for p in parts)
        apply = 'for p in $P; do git apply "$p"; done'
    else:
        files = f"{folder}/{pathlib.Path(patch.patch_file).name}"
        apply = 'git apply "$P"'
    if patch.layout == "checkout":
        return f'P="{files}" && cd <sglang checkout at {patch.source.commit or "the same commit"}> && {apply}'
    version = patch.source.version or "?"
    return (
        f"P=\"{files}\" && pip download --no-deps sglang=={version} && unzip -q sglang-{version}-*.whl 'sglang/*' -d sglang-{version} "
        f"&& cd sglang-{version} && {apply}" + ("" if parts else '   # or: patch -p1 < "$P"')
    )


DIFF_SLOT = "\0the diff\0"  # the diff goes in after relative(): its own lines are never rewritten


_ABSOLUTE = re.compile(r"(?<![^\s\"'=(`:])/(?:[\w.+-]+/)+[\w.+-]*")  # /a/b... after a blank, quote, =, (, `, :


def relative(text: str, report: IntegrateReport) -> str:
    """``text`` with the paths of the machine it ran on replaced by the run's relative folders.

    The integrate folder becomes ``work/integrate/<run>``, its trees ``.../tree`` and
    ``.../baseline``, the pristine tree ``<sglang tree>``, and any other absolute
    path its last component, so a reviewer can paste the command from the repository root.
    """
    patch = report.patch
    out_dir = pathlib.Path(patch.patch_file).parent
    rel = f"work/integrate/{report.run}"
    pairs = [(str(out_dir), rel), (str(pathlib.Path(patch.tree_root)), "<sglang tree>")]
    if patch.patched_tree:
        pairs.insert(0, (str(pathlib.Path(patch.patched_tree)), f"{rel}/tree"))
    if patch.baseline_tree:
        pairs.insert(0, (str(pathlib.Path(patch.baseline_tree)), f"{rel}/baseline"))
    if out_dir.name == report.run and out_dir.parent.name == INTEGRATE_DIR:  # work/integrate/<run>/sglang.patch
        pairs.append((str(out_dir.parent.parent), "work"))
    for old, new in sorted(pairs, key=lambda kv: -len(kv[0])):
        text = text.replace(old, new)
    return _ABSOLUTE.sub(lambda m: pathlib.PurePosixPath(m.group(0)).name, text)


def diff_block(diff: str, files: int) -> list[str]:
    if not diff:
        return ["The diff (`sglang.patch`) was not found beside the report.", ""]
    plus = sum(1 for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++"))
    minus = sum(1 for line in diff.splitlines() if line.startswith("-") and not line.startswith("---"))
    return [
        "<details><summary>The diff: <code>sglang.patch</code>, "
        + f"{files} file(s), +{plus} −{minus} lines</summary>",
        "",
        "```diff",
        DIFF_SLOT,
        "```",
        "",
        "</details>",
        "",
    ]


def _bottleneck(op: OpChange, facts: OpFacts, sim: str) -> str:
    """The baseline's profile facts, in words."""
    parts: list[str] = []
    floors = [
        t.time_over_floor * t.time_us / t.baseline_us
        for t in timings_of(op)
        if t.baseline_us and t.time_us and t.floor_applies
    ]
    if floors:
        parts.append(
            f"the baseline ran at {min(floors):.2f}–{max(floors):.2f}x its floor{sim} (time ÷ floor over the catalog shapes)"
        )
    prof = facts.baseline_profile
    if prof:
        from optimize.features import top_stall

        if "dram_throughput_pct" in prof:
            parts.append(f"DRAM throughput {prof['dram_throughput_pct']:.0f} % of peak")
        if "achieved_occupancy_pct" in prof:
            parts.append(f"achieved occupancy {prof['achieved_occupancy_pct']:.0f} %")
        stall = top_stall(prof)
        if stall is not None:
            parts.append(f"top warp stall `{stall[0]}` ({stall[1]:.1f} warps per issue)")
    elif facts.profile_note:
        parts.append(facts.profile_note)
    return "; ".join(parts)


def why_section(op: OpChange, facts: OpFacts, diff: str, report: IntegrateReport, sim: str) -> list[str]:
    """What the bottleneck was, what changed, and why it is correct: for a reviewer, not a log line."""
    out = [f"### Why this change: `{op.op_id}`", ""]
    bottleneck = _bottleneck(op, facts, sim)
    if bottleneck:
        out.append(f"- **Bottleneck.** {bottleneck[0].upper() + bottleneck[1:]}.")
    triton = pr_triton.is_triton(facts)
    launch = [] if triton else launch_facts(diff)  # a Triton launch has no PDL: its bullet says what the diff sets
    if triton:
        out.append(pr_triton.launch_bullet(diff))
    else:
        out.append(
            f"- **PDL.** {launch[0]}" if launch else "- **PDL.** The patch does not change how the kernel is launched."
        )
    if facts.skills:
        for skill in facts.skills:
            what = (skill.rationale or skill.effect.summary).strip().replace("\n", " ")
            out.append(f"- **What changed** ({skill.title}, skill `{skill.id}`). {what}")
    else:
        out.append(
            f"- **What changed.** {', '.join(op.spans)} rewritten"
            + (f" (skills not in the library: {', '.join(facts.unknown_skills)})" if facts.unknown_skills else "")
            + "."
        )
    out += [f"  - {line}" for line in launch[1:]]
    safety = [s.safety.strip().replace("\n", " ") for s in facts.skills if s.safety]
    assumes = [s.assumes.strip() for s in facts.skills if s.assumes]
    checked: list[str] = []
    ev = op.evaluation
    if ev is not None:
        checked.append(
            f"{ev.checks_passed} checks passed and {ev.checks_failed} failed in the optimize stage (catalog and held-out shapes, "
            f"outputs poisoned first, each check also run as a CUDA-graph replay on fresh inputs), bitwise equal to the baseline: "
            f"{'yes' if ev.bitwise_equal else 'no'}"
        )
    for check in report.checks:
        if check.op_id == op.op_id and check.ran:
            checked.append(
                f"{check.passed} of {len(check.cases)} cases pass through SGLang's own op, {sum(bool(c.bitwise_equal) for c in check.cases)} bitwise equal"
            )
            for san in check.sanitizer:
                checked.append(
                    f"compute-sanitizer {san.tool}: {san.errors} errors"
                    if san.ran
                    else f"compute-sanitizer {san.tool} not run ({san.reason})"
                )
    text = " ".join(safety) or "The skill file gives no safety argument; the checks below are the evidence."
    out.append(f"- **Why it is correct.** {text}" + (f" It assumes: {' '.join(assumes)}" if assumes else ""))
    if checked:
        out.append("- **Checked.** " + "; ".join(checked) + ".")
    out.append("")
    return out


#: The transforms whose ``blocks_per_sm`` makes a run-time switch on the launch's grid, and what it switches.
_SWITCHED = {
    "enable_pdl": "PDL",
    "pdl_early_trigger": "the early PDL trigger (the trigger at the kernel's end stays)",
}


def _size_switches(facts: OpFacts) -> list[str]:
    """The run-time size buckets of a candidate's steps: what each serves, and what falls back to the baseline."""
    steps = facts.params.get("steps")
    transform_of = {skill.id: skill.transform for skill in facts.skills}
    out = []
    for step in steps if isinstance(steps, list) else []:
        transform = transform_of.get(str(step.get("skill"))) if isinstance(step, dict) else None
        if transform not in _SWITCHED:
            continue
        chosen = step.get("params") or {}
        if not isinstance(chosen, dict):
            continue
        per_sm = int(chosen.get("blocks_per_sm", 0) or 0)
        blocks = int(chosen.get("max_blocks", 0) or 0)  # records written before 2026-12-07: a literal count
        if per_sm > 0:
            size = f"{per_sm} block(s) per SM of the device"
        elif blocks > 0:
            size = f"{blocks} blocks"
        else:
            continue
        inside = " (the kernel's wait and trigger run only in those grids too)" if chosen.get("in_kernel") else ""
        out.append(
            f"launches of at most {size} (a test of each launch's own grid) get {_SWITCHED[str(transform)]}"
            f"{inside}; larger launches run as the baseline does there (`{step.get('skill')}`)"
        )
    return out


def _bucketed_steps(facts: OpFacts, tokens: list[int]) -> list[str]:
    """A bucketed candidate's (a launch option chosen per token bucket, ``params.bucket``) lines:
    each bucket's settings and the token counts measured in it, then the buckets left to the baseline."""
    steps = facts.params.get("steps")
    chosen: dict[str, list[str]] = defaultdict(list)
    test = ""
    for step in steps if isinstance(steps, list) else []:
        params = step.get("params") if isinstance(step, dict) else None
        if isinstance(params, dict) and params.get("bucket"):
            chosen[str(params["bucket"])].append(f"{params.get('option')}={params.get('value')}")
            test = test or str(params.get("tokens") or "")
    if not chosen:
        return []
    out = [f"- token count read at run time as `{test}`; per bucket ({', '.join(b for b, _, _ in BUCKETS)}):"]
    for name, _, _ in BUCKETS:
        measured = [t for t in tokens if bucket_for(t) == name]
        seen = f" (token counts {', '.join(map(str, measured))} measured)" if measured else " (no shape measured)"
        settings = ", ".join(chosen[name]) if name in chosen else "the baseline's launch options (fallback)"
        out.append(f"  - `{name}`: {settings}{seen}")
    return out


def buckets(op: OpChange, facts: OpFacts, sim: str) -> list[str]:
    """Which token counts the candidate serves with which configuration, and what falls back."""
    out = [f"Buckets and fallbacks (`{op.op_id}`):", ""]
    timings = timings_of(op)
    tokens = sorted({t.sizes.get("num_tokens", 0) for t in timings if "num_tokens" in t.sizes})
    config = params_text(dict(facts.params)) or "no parameters"
    served = f"token counts {', '.join(map(str, tokens))} measured" if tokens else "every shape"
    bucketed = _bucketed_steps(facts, tokens)
    if bucketed:
        out += bucketed
    elif facts.guarded:
        out.append(
            f"- a shape dispatch in the diff keeps the baseline code at the shapes where the candidate was slower; every other "
            f"shape runs the candidate ({config}); {served}."
        )
    else:
        switches = _size_switches(facts)
        if switches:
            out.append(f"- one configuration ({config}) is built; it measured {served}. At run time:")
            out += [f"  - {line}" for line in switches]
        else:
            out.append(
                f"- one configuration ({config}) serves every token count ({served}); nothing falls back to the baseline."
            )
    slower = [t for t in timings if (speedup_of(t) or 1.0) < 1.0]
    for t in slower:
        out.append(f"- slower at {t.label} {t.dtype}: {_fmt(speedup_of(t), '.3f')}x{sim}")
    out.append("")
    return out


def reproduce(report: IntegrateReport, e2e: E2EResult | None, facts: RunFacts) -> list[str]:
    """Commands a reviewer can paste from the kernelsmith repository root: no path of the machine it ran on."""
    patch = report.patch
    run = report.run
    ops = " ".join(op.op_id for op in patch.ops)
    out = ["### Reproduce", ""]
    out.append(f"Environment: {report.gpu or 'no GPU (the GPU steps did not run)'}, torch {report.torch or '—'}.")
    out.append("")
    parts = [p.file for p in report.series if p.index <= report.series_part]
    out += [
        "```sh",
        f"# apply parts 1-{report.series_part} of the series, in order, to a fresh copy of the sources"
        if parts
        else "# apply the patch (sglang.patch, beside this file) to a fresh copy of the sources",
        layout_apply(patch, parts),
        "",
    ]
    sglang_own = pr_upstream.commands(report)
    if sglang_own:
        out += [
            "# SGLang's own tools, in a checkout with the patch and the files of upstream/ applied",
            *sglang_own,
            "",
        ]
    out += [
        "# how the candidate was found: the tasks, extracted from the same SGLang sources",
        f"kernelsmith extract --ops {ops}",
        "",
    ]
    for op in patch.ops:
        found_in = report.merged_from.get(op.op_id, run)
        out.append(
            f"# per-shape table of {op.op_id}: the optimize run's final validation (work/runs/{found_in}/{op.op_id}/best/evaluation.json)"
        )
        coder = f" --coder {facts.coder}" if facts.coder else ""
        out.append(f"kernelsmith optimize --ops {op.op_id}{coder} --run {found_in}")
    merged = " --from " + " ".join(dict.fromkeys(report.merged_from.values())) if report.merged_from else ""
    out += [
        "",
        "# patch (every op's candidate at once), correctness through SGLang, SGLang's tests, end-to-end, this file"
        if merged
        else "# patch, correctness through SGLang, SGLang's tests, end-to-end, this file",
        f"kernelsmith integrate --run {run}{merged}",
    ]
    commands = [c.command for c in report.checks if c.command]
    if commands:
        out += ["", "# correctness through SGLang's public ops only", relative(commands[0], report)]
    if e2e is not None and e2e.command and e2e.command != f"kernelsmith integrate --run {run}":
        out += ["", "# the whole-layer end-to-end proxy only", relative(e2e.command, report)]
    tested = False
    for test in report.tests:
        if test.command:
            tested = True
            out += ["", f"# SGLang's tests of {test.op_id} against the patched tree", relative(test.command, report)]
    if not tested:
        groups = sorted({op.op_id.partition(".")[0] for op in patch.ops})
        out += ["", "# SGLang's own tests, in a checkout with the patch applied"]
        out += [f"python -m pytest -q test/registered/kernels/ops/{group}/" for group in groups]
    if e2e is not None and e2e.one_batch is not None and e2e.one_batch.command:
        out += [
            "",
            "# SGLang's one-batch benchmark (patched tree; the baseline run uses the pristine tree's path)",
            relative(e2e.one_batch.command, report),
        ]
    out += ["```", ""]
    return out


def checklist(report: IntegrateReport) -> list[str]:
    """SGLang's checklist, each box ticked only where the records show it done."""
    checks = [c for c in report.checks if c.planned]
    cases = sum(len(c.cases) for c in checks)
    checked = bool(checks) and all(c.ran and not c.failed for c in checks)
    model_ok = pr_model.runs_change(report) and not pr_model.regressions(report)
    groups = sorted({op.op_id.partition(".")[0] for op in report.patch.ops})
    box = lambda done: "[x]" if done else "[ ]"  # noqa: E731
    return [
        "## Checklist",
        "",
        f"- {box(checked)} Accuracy: every case through SGLang's public op matches the pristine op ({cases} cases).",
        f"- {box(model_ok)} Model step: a layer recipe runs the change and is slower at no point beyond its A/A band.",
        *pr_upstream.checklist(report, groups),
        "- [ ] Formatted with SGLang's pre-commit hooks.",
        "",
    ]
