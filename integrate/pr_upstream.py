"""The PR's sentences about the SGLang-form test and benchmark generated for its ops.

SGLang takes a JIT kernel change with a registered test and a ``marker`` benchmark
(:mod:`integrate.upstream_tests` writes both); the PR lists them as files it adds, says what the
test showed against the patched tree, and shows the benchmark's table against the pristine and the
patched tree side by side. An op of the PR with no generated test, or one that failed, keeps the PR
a draft (:func:`problems`), and the draft says what is missing; so does a line of the patch or of a
generated file that spells the tool's name (:func:`tool_names`), and a rewrite (:func:`rewrites`) that
could not land in SGLang's ``kda_kernels/`` zone (:mod:`integrate.landing`) and stays an in-place edit.
"""

from __future__ import annotations

import pathlib
import re

from contract.layout import UPSTREAM_DIR, IntegrateFolder
from integrate.landing import is_rewrite
from integrate.records import IntegrateReport, OpChange, OpCheck, UpstreamCheck


def _own(report: IntegrateReport) -> list[UpstreamCheck]:
    ops = {op.op_id for op in report.patch.ops}
    return [u for u in report.upstream if u.op_id in ops]


def problems(report: IntegrateReport) -> tuple[list[str], list[str]]:
    """(failing, missing): what keeps the PR from "ready" on these files' account."""
    failing, missing = [], []
    seen = {u.op_id for u in report.upstream}
    for u in _own(report):
        if not u.generated:
            missing.append(f"{u.op_id}: no SGLang-form test: {u.missing}")
            continue
        if u.test is not None and u.test.ran and (u.test.failed or u.test.errors):
            failing.append(f"{u.op_id}: the generated test `{u.test_file}`: {u.test.summary or 'failed'}")
        elif u.test is not None and not u.test.ran:
            missing.append(f"{u.op_id}: the generated test did not run: {u.test.reason}")
        for bench in u.bench:
            if not bench.ran:
                missing.append(
                    f"{u.op_id}: the generated benchmark did not run against the {bench.tree} tree: {bench.reason}"
                )
    if report.upstream and any(op.op_id not in seen for op in report.patch.ops):
        missing += [f"{op.op_id}: no SGLang-form test written" for op in report.patch.ops if op.op_id not in seen]
    missing += [f"it names the tool: {where}; upstream code names no tool" for where in tool_names(report)]
    missing += [
        f"{op.op_id}: a rewrite ({op.coder or 'coder unknown'}; skills: {', '.join(op.skills) or 'none'}) belongs in SGLang's "
        f"kda_kernels/ zone with a KernelBackend.KDA registration and a fallback outside its validated shapes, "
        f"and could not land there: {op.landing_note or 'no reason recorded'}; this patch still changes the kernel in place"
        for op in rewrites(report)
        if op.landing != "kda"
    ]
    return failing, missing


def rewrites(report: IntegrateReport) -> list[OpChange]:
    """The PR's ops whose candidate is a rewrite (:func:`integrate.landing.is_rewrite`): SGLang takes
    such a kernel as a new KDA-backend implementation, not as an edit of its JIT kernel."""
    return [op for op in report.patch.ops if is_rewrite(op.coder, op.skills)]


TOOL_NAME = re.compile(r"kernelsmith", re.IGNORECASE)


def tool_names(report: IntegrateReport) -> list[str]:
    """Where what goes upstream (the patch's added lines, the files of ``upstream/``) spells the tool's
    name: ``<file>:<line>`` each. A maintainer takes SGLang's own idioms, never a tool's brand."""
    out_dir = pathlib.Path(report.patch.patch_file).parent
    found: list[str] = []
    patch = pathlib.Path(report.patch.patch_file)
    if patch.is_file():
        current = ""
        for number, line in enumerate(patch.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
            if line.startswith("+++ "):
                current = line[4:].removeprefix("b/")
            elif line.startswith("+") and TOOL_NAME.search(line):
                found.append(f"`{current}` (sglang.patch line {number})")
    folder = IntegrateFolder(out_dir).upstream
    for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
        if path.is_file():
            for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
                if TOOL_NAME.search(line):
                    found.append(f"`{path.relative_to(folder).as_posix()}` line {number}")
    return found


def accuracy(report: IntegrateReport) -> list[str]:
    """The "Accuracy Tests" subsection: the tests this PR adds, and what they showed."""
    own = _own(report)
    if not own:
        return []
    out = ["### Tests this PR adds", ""]
    for u in own:
        if not u.generated:
            out.append(f"- `{u.op_id}`: none yet: {u.missing}")
            continue
        if u.test is None:
            state = "not run yet (no GPU where the PR was written)"
        elif u.test.ran:
            state = f"against the patched tree: `{u.test.summary}`"
        else:
            state = f"not run: {u.test.reason}"
        out.append(f"- `{u.test_file}` ({u.op_id}): {state}")
    out += ["", f"The files are in this bundle's `{UPSTREAM_DIR}/` folder, at their places in SGLang's repository.", ""]
    return out


def benchmark(report: IntegrateReport) -> list[str]:
    """The ``marker`` benchmark's tables, pristine then patched, verbatim, after the kernel figures."""
    runs = [(u, b) for u in _own(report) for b in u.bench]
    if not runs:
        return []
    out = ["### SGLang's `marker` benchmark (added by this PR)", ""]
    for u, bench in runs:
        out.append(f"`{bench.command or u.bench_file}`:" if bench.ran else f"`{u.bench_file}`, {bench.tree} tree:")
        out += ["", "```", bench.table, "```", ""] if bench.ran else [f"not run: {bench.reason}", ""]
    return out


def checklist(report: IntegrateReport, groups: list[str]) -> list[str]:
    """The checklist's two boxes for the registered test and the benchmark, ticked from the records."""
    own = _own(report)
    tested = bool(own) and all(u.test is not None and u.test.ran and not (u.test.failed or u.test.errors) for u in own)
    benched = bool(own) and all(len(u.bench) == 2 and all(b.ran for b in u.bench) for u in own)
    files = [u for u in own if u.generated]
    box = lambda done: "[x]" if done else "[ ]"  # noqa: E731
    tests = ", ".join(f"`{u.test_file}`" for u in files) or ", ".join(
        f"`test/registered/kernels/ops/{g}/`" for g in groups
    )
    benches = ", ".join(f"`{u.bench_file}`" for u in files) or ", ".join(
        f"`test/registered/kernels/benchmark/{g}/`" for g in groups
    )
    return [
        f"- {box(tested)} A registered test: {tests}" + ("" if tested else " (to add or to run)") + ".",
        f"- {box(benched)} A `marker` benchmark: {benches}" + ("" if benched else " (to add or to run)") + ".",
    ]


def commands(report: IntegrateReport) -> list[str]:
    """The reproduce lines that use SGLang's own tools: the registered test and the benchmark."""
    files = [u for u in _own(report) if u.generated]
    return [f"python -m pytest -q {u.test_file}" for u in files] + [f"python {u.bench_file}" for u in files]


def landings(report: IntegrateReport) -> list[str]:
    """The "Modifications" lines on each rewrite that lands as a KDA implementation: where it lives,
    how it is registered and when the public function calls it."""
    out = []
    for op in (op for op in report.patch.ops if op.landing == "kda"):
        module, _, fn = op.kda_target.partition(":")
        guard = op.kda_guard.partition(":")[2]
        out.append(
            f"- `{op.op_id}` is a rewritten kernel, so it lands beside the JIT kernel it replaces, in "
            f"`kda_kernels/` (`{module}`, with its CUDA source under `kda_kernels/csrc/`), registered as "
            f"`KernelBackend.KDA` for the SM arch it was validated on, with a provenance row in the zone's README. "
            f"The public function calls it through `get_kernel` where `{guard}` holds (the dtypes, ranks, "
            f"contiguity, size ranges and modes it was checked on) and keeps the JIT kernel everywhere else; "
            f"the JIT kernel's source is unchanged."
        )
    return [*out, ""] if out else []


def kda_sentence(check: OpCheck) -> str:
    """How the SGLang check proved the registry dispatched to a KDA landing."""
    reached = check.kda_cases or 0
    ran = sum(c.status != "skipped" for c in check.cases)
    return (
        f"Called `{check.function}` in the pristine tree and in the patched copy on identical seeded inputs; in "
        f"the patched copy the public function dispatches through SGLang's registry, and the KDA KernelSpec's "
        f"target was counted: {reached} of {ran} cases reached it (the others lie outside its guard and took the "
        "JIT kernel). The patched outputs were judged against the pristine op's."
    )
