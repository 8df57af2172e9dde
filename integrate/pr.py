"""``PR.md`` for an SGLang maintainer, and ``--git-branch``: the patch as a commit on a new branch.

PR.md is written from the integrate report alone (records are the only input),
so it can be regenerated, and every figure in it carries the command that
reproduces it. Its status line is computed, never asserted:

- **ready**: every op was checked through SGLang on the GPU and passed;
- **draft**: something that proves the patch did not run (no GPU here, no
  adapter for an op), or a model-step recipe that runs the changed code was slower
  beyond its A/A-widened band at some point (:func:`integrate.pr_model.regressions`);
  the list says what and where;
- **failing**: a correctness check or an SGLang test failed.

For the reviewer, beyond the figures (facts from :mod:`integrate.evidence`): why
the change (the baseline's profile, the skill's reviewer text, what the diff does
to launches), which token counts the candidate serves and what falls back, the
diff itself folded, and reproduce commands with no path of the machine it ran on
(:func:`relative`). A run whose timings were replayed gets a SIMULATED banner and
every figure is labelled so; ``--git-branch`` refuses it.

``--git-branch NAME`` commits ``sglang.patch`` on a new branch of the SGLang
checkout, in a temporary worktree (the user's working tree, index and HEAD are
never touched) and never pushes. It refuses, changing nothing, when the run is a
replay (simulated), the tree is not a git checkout, the branch exists, or a touched file's committed version is
not the one the patch was taken against.
"""

from __future__ import annotations

import math
import pathlib
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence

from integrate import pr_model, pr_triton, pr_upstream
from integrate.evidence import OpFacts, RunFacts, gather, launch_facts
from integrate.landing import unreached
from integrate.pr_model import fmt as _fmt
from integrate.records import E2EResult, IntegrateReport, OpChange, Patch
from optimize.report import params_text
from pipeline.buckets import BUCKETS, bucket_for, floor_text
from pipeline.run_records import ShapeTiming
from pipeline.stats import geomean

#: SGLang's pull-request template (.github/pull_request_template.md), in its order
SECTIONS = ("## Motivation", "## Modifications", "## Accuracy Tests", "## Benchmark and Profiling", "## Checklist")


# --------------------------------------------------------------------------- status


def status(report: IntegrateReport) -> tuple[str, list[str]]:
    """("ready" | "draft" | "failing", reasons)."""
    failing, missing = [], []
    for check in report.checks:
        if not check.ran:
            missing.append(f"{check.op_id}: correctness through SGLang not run ({check.reason})")
        elif check.failed:
            failing.append(f"{check.op_id}: {check.failed} of {len(check.cases)} cases fail through SGLang")
        for san in check.sanitizer:
            if san.ran and san.errors:
                failing.append(f"{check.op_id}: compute-sanitizer {san.tool} reports {san.errors} errors")
    failing += unreached(report.patch, report.checks)
    for test in report.tests:
        if test.ran and (test.failed or test.errors):
            failing.append(f"{test.op_id}: SGLang's tests: {test.failed} failed, {test.errors} errors")
    checked = {c.op_id for c in report.checks}
    if "correctness" not in report.not_run:
        for op in report.patch.ops:
            if op.op_id not in checked:
                missing.append(f"{op.op_id}: correctness through SGLang not run")
    for step, why in report.failed_steps.items():
        failing.append(f"{step} broke: {why.splitlines()[0] if why else ''}")
    for step, why in report.not_run.items():
        missing.append(f"{step}: {why}")
    missing += [f"slower in the model step: {where}" for where in pr_model.regressions(report)]
    missing += pr_model.overlap_unshown(report)
    broken, absent = pr_upstream.problems(report)
    failing += broken
    missing += absent
    if failing:
        return "failing", failing + missing
    if missing:
        return "draft", missing
    return "ready", []


# --------------------------------------------------------------------------- helpers


def _geomean(values: Iterable[float]) -> float:
    found = geomean(v for v in values if v and math.isfinite(v))
    return math.nan if found is None else found


def _speedup(t: ShapeTiming) -> float | None:
    if t.speedup is not None:
        return t.speedup
    if t.baseline_us and t.time_us:
        return t.baseline_us / t.time_us
    return None


def _function_name(op_id: str) -> str:
    return op_id.partition(".")[2] or op_id


def title(report: IntegrateReport) -> str:
    names = [_function_name(op.op_id) for op in report.patch.ops]
    speeds = [s for op in report.patch.ops for s in (_speedup(t) for t in _timings(op)) if s]
    gm = _geomean(speeds)
    where = f" on {report.gpu}" if report.gpu else ""  # no GPU step yet: no card is claimed
    tail = f" (geomean {gm:.2f}x over {len(speeds)} shapes)" if speeds else ""
    return f"[Kernel] Faster {pr_triton.kind(report.patch)} {', '.join(names)}{where}{tail}"


def _timings(op: OpChange) -> list[ShapeTiming]:
    return list(op.evaluation.timings) if op.evaluation is not None else []


def _layout_apply(patch: Patch, parts: Sequence[str] = ()) -> str:
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


# --------------------------------------------------------------------------- reviewer sections

_DIFF_SLOT = "\0the diff\0"  # the diff goes in after relative(): its own lines are never rewritten
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
    if out_dir.name == report.run and out_dir.parent.name == "integrate":  # work/integrate/<run>/sglang.patch
        pairs.append((str(out_dir.parent.parent), "work"))
    for old, new in sorted(pairs, key=lambda kv: -len(kv[0])):
        text = text.replace(old, new)
    return _ABSOLUTE.sub(lambda m: pathlib.PurePosixPath(m.group(0)).name, text)


def _diff_block(diff: str, files: int) -> list[str]:
    if not diff:
        return ["The diff (`sglang.patch`) was not found beside the report.", ""]
    plus = sum(1 for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++"))
    minus = sum(1 for line in diff.splitlines() if line.startswith("-") and not line.startswith("---"))
    return [
        "<details><summary>The diff: <code>sglang.patch</code>, "
        + f"{files} file(s), +{plus} −{minus} lines</summary>",
        "",
        "```diff",
        _DIFF_SLOT,
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
        for t in _timings(op)
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


def _why(op: OpChange, facts: OpFacts, diff: str, report: IntegrateReport, sim: str) -> list[str]:
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


def _buckets(op: OpChange, facts: OpFacts, sim: str) -> list[str]:
    """Which token counts the candidate serves with which configuration, and what falls back."""
    out = [f"Buckets and fallbacks (`{op.op_id}`):", ""]
    timings = _timings(op)
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
    slower = [t for t in timings if (_speedup(t) or 1.0) < 1.0]
    for t in slower:
        out.append(f"- slower at {t.label} {t.dtype}: {_fmt(_speedup(t), '.3f')}x{sim}")
    out.append("")
    return out


def _reproduce(report: IntegrateReport, e2e: E2EResult | None, facts: RunFacts) -> list[str]:
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
        _layout_apply(patch, parts),
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


# --------------------------------------------------------------------------- PR.md


def render(report: IntegrateReport, *, run_dir: str = "", facts: RunFacts | None = None) -> str:
    """PR.md's text; ``facts`` defaults to :func:`integrate.evidence.gather` of the run."""
    patch = report.patch
    facts = facts if facts is not None else gather(report, pathlib.Path(run_dir) if run_dir else None)
    state, reasons = status(report)
    sim = " (SIMULATED)" if facts.simulated else ""
    out: list[str] = [f"# {'[SIMULATED] ' if facts.simulated else ''}{title(report)}", ""]
    if facts.simulated:
        out += [
            (
                f"> **SIMULATED.** The optimize run `{report.run}` replayed recorded timings ({facts.backend}); nothing in its "
                "per-shape figures was measured in that run, and every such figure below is labelled SIMULATED. Do not submit "
                "this as a measurement; `--git-branch` refuses to commit it."
            ),
            "",
        ]
    banner = {
        "ready": "Ready for review",
        "draft": "DRAFT: not everything that proves this patch has run",
        "failing": "FAILING: do not submit",
    }
    out.append(f"**Status: {banner[state]}.**")
    out += [f"- {r}" for r in reasons]
    out.append("")

    head, out = out, ["## Motivation", ""]
    src = patch.source
    where = f"sglang {src.version} wheel" if src.kind == "wheel" else f"sglang {src.kind} {src.commit or src.root}"
    op_facts = [facts.ops.get(op.op_id, OpFacts(op_id=op.op_id)) for op in patch.ops]
    if op_facts and all(pr_triton.is_triton(f) for f in op_facts):
        out.append(pr_triton.summary(op_facts, patch, where))
    else:
        out.append(
            f"This patch rewrites the CUDA kernels behind {', '.join(f'`{op.op_id}`' for op in patch.ops)} in SGLang's "
            f"JIT kernel tree. It changes only the kernels' editable regions (checked byte by byte), in "
            f"{len(patch.files)} file(s), against {where}. "
            + (
                "Triton ops' Python files change only in their kernels and launch sites, so the public Python API is the same"
                if any(pr_triton.is_triton(f) for f in op_facts)
                else "No Python file changes, so the public Python API is the same"
            )
            + "; the kernels' own signatures may change with them, and SGLang's `load_jit` builds the patched "
            "sources for the checks below."
        )
    out.append("")
    if report.series_part:
        part = report.series[report.series_part - 1]
        earlier = ", ".join(f"{p.index} ({p.family})" for p in report.series[: part.index - 1]) or "none"
        out += [
            f"Part {part.index} of {len(report.series)} of a series, one pull request per op family ({part.family} "
            f"here); parts before it, to apply first: {earlier}. The model-step figures below were measured with "
            f"all {len(report.series)} parts applied.",
            "",
        ]
    elif report.series:
        listed = "; ".join(f"{p.index}. {p.family}: {', '.join(f'`{o}`' for o in p.ops)}" for p in report.series)
        out += [f"Also written as a series of {len(report.series)} pull requests, one per op family: {listed}.", ""]
    if report.merged_from and len(patch.ops) > 1:
        out += [
            f"All {len(patch.ops)} changes are applied together: the checks and the model step below run with every "
            "one of them at once, as a user of SGLang would get them.",
            "",
        ]
    for op in patch.ops:
        out += _why(op, facts.ops.get(op.op_id, OpFacts(op_id=op.op_id)), facts.diff, report, sim)
    motivation, out = out, ["## Modifications", ""]
    out += ["| file | regions replaced | bytes before → after |", "|---|---|---|"]
    for f in patch.files:
        spans = "new file" if f.created else ", ".join(f"`{s.name}`" for s in f.spans)
        out.append(f"| `{f.diff_path}` | {spans} | {f.size_before} → {f.size_after} |")
    out.append("")
    out += pr_upstream.landings(report)
    out += _diff_block(facts.diff, len(patch.files))
    for op in patch.ops:
        out += _buckets(op, facts.ops.get(op.op_id, OpFacts(op_id=op.op_id)), sim)
    if patch.skipped:
        out.append("")
        out.append("Not in this patch:")
        out += [f"- `{op}`: {why}" for op, why in sorted(patch.skipped.items())]
    out += [
        "",
        f"Patch: `{pathlib.Path(patch.patch_file).name}` (sha256 `{patch.patch_sha256[:16]}…`), verified: {', '.join(patch.verified) or 'nothing'}.",
    ]
    if patch.not_verified:
        out.append("Not verified: " + "; ".join(f"{k} ({v})" for k, v in patch.not_verified.items()) + ".")
    out.append("")

    modifications, out = out, ["### The kernel alone (isolated: each op replayed after itself)", ""]
    if facts.simulated:
        out += ["**SIMULATED: every per-shape time below was replayed from a file, not measured.**", ""]
    out.append(
        "Per-shape kernel times from the optimize stage's final validation: each figure is the median of CUDA-graph "
        "replays with CUDA events, inputs rotated over buffer sets larger than 3x L2, baseline and candidate "
        "interleaved. *% of BW* is the bytes the op must move divided by the time, as a share of a device-to-device "
        "copy's bandwidth on the same GPU; *time ÷ floor* is the time over the time that copy bandwidth (or the "
        "minimum kernel time) allows."
    )
    out.append("")
    for op in patch.ops:
        timings = _timings(op)
        out.append(f"#### `{op.op_id}`")
        out.append("")
        if pr_model.overlap_only(op.skills):
            out += [
                f"Its gain is launch overlap ({' + '.join(op.skills)}): replayed after itself it overlaps its own "
                "next call, which no model runs. Its figure is the in-context one (The model step, above).",
                "",
            ]
        if not timings:
            out += ["No per-shape timings were recorded for this candidate.", ""]
            continue
        out += [
            f"| shape | dtype | baseline µs{sim} | new µs{sim} | speedup{sim} | % of BW | time ÷ floor |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for t in timings:
            out.append(
                f"| {t.label} | {t.dtype} | {_fmt(t.baseline_us)} | {_fmt(t.time_us)} | {_fmt(_speedup(t), '.3f')}x "
                f"| {_fmt(t.pct_of_copy_bw, '.1f')} | {floor_text(t)} |"
            )
        gm = _geomean(s for s in (_speedup(t) for t in timings) if s)
        out += ["", f"Geomean speedup{sim} {_fmt(gm, '.3f')}x over {len(timings)} shape x dtype points.", ""]

    kernel, out = out, ["## Accuracy Tests", ""]
    if not report.checks:
        out += ["Not checked through SGLang: " + report.not_run.get("correctness", "no GPU step ran") + ".", ""]
    for check in report.checks:
        out.append(f"### `{check.op_id}`")
        out.append("")
        if not check.ran:
            out += [f"Not run: {check.reason}.", ""]
        else:
            by_dtype: dict[str, list] = defaultdict(list)
            for case in check.cases:
                by_dtype[case.dtype].append(case)
            if check.kda_cases is not None:
                out.append(pr_upstream.kda_sentence(check))
            elif check.via or any(c.launches for c in check.cases):
                out.append(pr_triton.check_sentence(check))
            else:
                out.append(
                    f"Called `{check.function}` in the pristine tree and in the patched copy (SGLang's own `load_jit` "
                    f"compiled each tree's sources into its own cache), on identical seeded inputs at every catalog shape "
                    f"of the task; the patched outputs were judged against the pristine op's."
                )
            out.append("")
            out += [
                "| dtype | cases | pass | skipped | bitwise equal | max abs err | rtol | atol (or 2^-20 x max\\|expected\\|, if larger) | outputs poisoned |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---|",
            ]
            for dtype, cases in by_dtype.items():
                errs = [c.max_abs_err for c in cases if c.max_abs_err is not None]
                out.append(
                    f"| {dtype} | {len(cases)} | {sum(c.status == 'pass' for c in cases)} | {sum(c.status == 'skipped' for c in cases)} | "
                    f"{sum(bool(c.bitwise_equal) for c in cases)} | {_fmt(max(errs) if errs else None, '.3g')} | "
                    f"{cases[0].rtol:.3g} | {cases[0].atol:.3g} | {'yes' if all(c.poisoned for c in cases) else 'in-place op' if not any(c.poisoned for c in cases) else 'some'} |"
                )
            shapes = sorted({c.label for c in check.cases})
            out += ["", f"Shapes ({len(shapes)}): " + ", ".join(f"`{s}`" for s in shapes) + "."]
            if check.jit_build_s:
                out.append(
                    "SGLang's `load_jit` built the modules of both trees from source for this check ("
                    + ", ".join(f"{who} {sec:.0f} s" for who, sec in sorted(check.jit_build_s.items()))
                    + ", all ops, in parallel)."
                )
            if check.skipped:
                out.append(
                    f"Skipped cases are ones the pristine op itself rejects; they test nothing of the patch ({check.skipped})."
                )
            bad = [c for c in check.cases if c.status != "pass"]
            for c in bad[:10]:
                out.append(f"- **{c.status}** {c.label} {c.dtype} (seed {c.seed}): {c.reason}")
            out.append("")
        for san in check.sanitizer:
            if san.ran:
                out.append(f"compute-sanitizer `{san.tool}` on {', '.join(san.cases)}: {san.errors} errors.")
            else:
                out.append(f"compute-sanitizer `{san.tool}`: not run ({san.reason}).")
        if not check.sanitizer:
            out.append("compute-sanitizer: not run.")
        ev = next((op.evaluation for op in patch.ops if op.op_id == check.op_id and op.evaluation), None)
        if ev is not None:
            out.append(
                f"Optimize-stage validation: {ev.checks_passed} checks passed, {ev.checks_failed} failed "
                f"(held-out shapes included), bitwise equal: {ev.bitwise_equal}, max abs err: {_fmt(ev.max_abs_err, '.3g')}."
            )
        out.append("")
    out += ["### SGLang's tests", ""]
    if not report.tests:
        out.append("Not run: " + report.not_run.get("sglang tests", "no GPU step ran") + ".")
    for test in report.tests:
        if test.ran:
            out.append(
                f"- `{test.op_id}`: {test.passed} passed, {test.failed} failed, {test.skipped} skipped, {test.errors} errors "
                f"({', '.join(f'`{f}`' for f in test.files)}); pytest said: `{test.summary}`"
            )
        else:
            out.append(f"- `{test.op_id}`: not run: {test.reason}")
    out.append("")

    out += pr_upstream.accuracy(report)

    accuracy, out = out, ["### The model step", ""]
    if not report.e2e:
        out += ["Not run: " + report.not_run.get("e2e", "no GPU step ran") + ".", ""]
    out += pr_model.section(report)
    e2e = next((r for r in report.e2e if r.one_batch is not None), None)
    if e2e is not None:
        ob = e2e.one_batch
        if ob is not None and ob.ran:
            out += [
                "`sglang.benchmark.one_batch --load-format dummy`:",
                "",
                "| throughput token/s | baseline | patched |",
                "|---|---:|---:|",
            ]
            for key in sorted(set(ob.baseline) | set(ob.patched)):
                out.append(f"| {key} | {_fmt(ob.baseline.get(key), ',.1f')} | {_fmt(ob.patched.get(key), ',.1f')} |")
            out.append("")
        elif ob is not None:
            out += [f"`sglang.benchmark.one_batch`: not run: {ob.reason}.", ""]

    model = out
    out = [*head, *motivation, *modifications, *accuracy, "## Benchmark and Profiling", "", *model, *kernel]
    out += pr_upstream.benchmark(report)
    out += _reproduce(report, report.e2e[0] if report.e2e else None, facts)
    out += _checklist(report)
    return relative("\n".join(out), report).replace(_DIFF_SLOT, facts.diff.rstrip("\n"))


def _checklist(report: IntegrateReport) -> list[str]:
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


def write_pr(
    report: IntegrateReport, path: pathlib.Path, *, run_dir: str = "", diff: str | None = None
) -> pathlib.Path:
    """Write ``render(report)`` to ``path``; ``diff``: the diff to show instead of ``sglang.patch``'s
    (a series part's)."""
    from dataclasses import replace

    from integrate.patch import write_atomic

    facts = gather(report, pathlib.Path(run_dir) if run_dir else None)
    if diff is not None:
        facts = replace(facts, diff=diff)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, render(report, run_dir=run_dir, facts=facts).encode())
    return path
