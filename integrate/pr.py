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

For the reviewer, beyond the figures (facts from :mod:`integrate.evidence`; the sections are
:mod:`integrate.pr_sections`'): why
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

import pathlib
from collections import defaultdict

from integrate import pr_model, pr_triton, pr_upstream
from integrate.evidence import OpFacts, RunFacts, gather
from integrate.landing import unreached
from integrate.pr_model import fmt as _fmt
from integrate.pr_sections import (
    DIFF_SLOT,
    buckets,
    checklist,
    diff_block,
    geomean_or_one,
    relative,
    reproduce,
    speedup_of,
    timings_of,
    why_section,
)
from integrate.records import IntegrateReport
from pipeline.buckets import floor_text

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


def _function_name(op_id: str) -> str:
    return op_id.partition(".")[2] or op_id


def title(report: IntegrateReport, measured_on: str | None = None) -> str:
    """The PR's title: the ops and the geomean of their isolated speedups, with the card that measured
    them: ``measured_on``, the optimize run's device (:attr:`RunFacts.device`), else integrate's own GPU.
    The two differ when a run made on one card is integrated on another (2026-12-08: an H200 run's
    figures were titled "on NVIDIA H100" by the integrate machine)."""
    names = [_function_name(op.op_id) for op in report.patch.ops]
    speeds = [s for op in report.patch.ops for s in (speedup_of(t) for t in timings_of(op)) if s]
    gm = geomean_or_one(speeds)
    card = measured_on or report.gpu
    where = f" on {card}" if card else ""  # no GPU step yet: no card is claimed
    tail = f" (geomean {gm:.2f}x over {len(speeds)} shapes)" if speeds else ""
    return f"[Kernel] Faster {pr_triton.kind(report.patch)} {', '.join(names)}{where}{tail}"


# --------------------------------------------------------------------------- reviewer sections


# --------------------------------------------------------------------------- PR.md


def _head(report: IntegrateReport, facts: RunFacts) -> list[str]:
    """The title, the SIMULATED banner where it applies, and the status with its reasons."""
    state, reasons = status(report)
    out: list[str] = [f"# {'[SIMULATED] ' if facts.simulated else ''}{title(report, facts.device)}", ""]
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
    return out


def _motivation(report: IntegrateReport, facts: RunFacts, sim: str) -> list[str]:
    """What the patch changes and why, per op (SGLang's template: Motivation)."""
    patch = report.patch
    out: list[str] = ["## Motivation", ""]
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
        out += why_section(op, facts.ops.get(op.op_id, OpFacts(op_id=op.op_id)), facts.diff, report, sim)
    return out


def _modifications(report: IntegrateReport, facts: RunFacts, sim: str) -> list[str]:
    """The files and regions replaced, the landing, the diff, the buckets, what is not in the patch."""
    patch = report.patch
    out: list[str] = ["## Modifications", ""]
    out += ["| file | regions replaced | bytes before → after |", "|---|---|---|"]
    for f in patch.files:
        spans = "new file" if f.created else ", ".join(f"`{s.name}`" for s in f.spans)
        out.append(f"| `{f.diff_path}` | {spans} | {f.size_before} → {f.size_after} |")
    out.append("")
    out += pr_upstream.landings(report)
    out += diff_block(facts.diff, len(patch.files))
    for op in patch.ops:
        out += buckets(op, facts.ops.get(op.op_id, OpFacts(op_id=op.op_id)), sim)
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
    return out


def _kernel_alone(report: IntegrateReport, facts: RunFacts, sim: str) -> list[str]:
    """Each op's per-shape times from the optimize stage's final validation, labelled isolated."""
    patch = report.patch
    out: list[str] = ["### The kernel alone (isolated: each op replayed after itself)", ""]
    if facts.simulated:
        out += ["**SIMULATED: every per-shape time below was replayed from a file, not measured.**", ""]
    measured = f" on {facts.device}" if facts.device else ""
    out.append(
        f"Per-shape kernel times from the optimize stage's final validation{measured}: each figure is the median of CUDA-graph "
        "replays with CUDA events, inputs rotated over buffer sets larger than 3x L2, baseline and candidate "
        "interleaved. *% of BW* is the bytes the op must move divided by the time, as a share of a device-to-device "
        "copy's bandwidth on the same GPU; *time ÷ floor* is the time over the time that copy bandwidth (or the "
        "minimum kernel time) allows."
    )
    out.append("")
    for op in patch.ops:
        timings = timings_of(op)
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
                f"| {t.label} | {t.dtype} | {_fmt(t.baseline_us)} | {_fmt(t.time_us)} | {_fmt(speedup_of(t), '.3f')}x "
                f"| {_fmt(t.pct_of_copy_bw, '.1f')} | {floor_text(t)} |"
            )
        gm = geomean_or_one(s for s in (speedup_of(t) for t in timings) if s)
        out += ["", f"Geomean speedup{sim} {_fmt(gm, '.3f')}x over {len(timings)} shape x dtype points.", ""]
    return out


def _accuracy(report: IntegrateReport) -> list[str]:
    """The checks through SGLang's public op, its own tests and the generated SGLang-form test."""
    patch = report.patch
    out: list[str] = ["## Accuracy Tests", ""]
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
    return out


def _model_step(report: IntegrateReport) -> list[str]:
    """The layer recipes' figures with their A/A bands, and one_batch where it ran."""
    out: list[str] = ["### The model step", ""]
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
    return out


def render(report: IntegrateReport, *, run_dir: str = "", facts: RunFacts | None = None) -> str:
    """PR.md's text; ``facts`` defaults to :func:`integrate.evidence.gather` of the run."""
    facts = facts if facts is not None else gather(report, pathlib.Path(run_dir) if run_dir else None)
    sim = " (SIMULATED)" if facts.simulated else ""
    out = [
        *_head(report, facts),
        *_motivation(report, facts, sim),
        *_modifications(report, facts, sim),
        *_accuracy(report),
        "## Benchmark and Profiling",
        "",
        *_model_step(report),
        *_kernel_alone(report, facts, sim),
    ]
    out += pr_upstream.benchmark(report)
    out += reproduce(report, report.e2e[0] if report.e2e else None, facts)
    out += checklist(report)
    return relative("\n".join(out), report).replace(DIFF_SLOT, facts.diff.rstrip("\n"))


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
