"""``kernelsmith integrate [--run RUN] [--in-place] [--git-branch NAME] [--skip-e2e]``.

Steps, each recorded in ``work/integrate/<run>/report.json`` whether it ran or not:

1. patch (CPU): splice the run's accepted candidates into a copy of the SGLang
   tree, write and verify ``sglang.patch`` (:mod:`integrate.patch`);
2. correctness through SGLang's public ops and ``load_jit``, pristine vs
   patched, plus compute-sanitizer (GPU, :mod:`integrate.sglang_runner`);
3. SGLang's own tests of each op, when the sources are a checkout (GPU,
   :mod:`integrate.sglang_tests`);
4. end-to-end layer proxy and SGLang's one-batch benchmark (GPU,
   :mod:`integrate.e2e`; ``--skip-e2e`` skips it);
5. ``PR.md`` (:mod:`integrate.pr`), and with ``--git-branch`` a commit of the
   patch on a new branch of the checkout.

Exit codes: 0 when every step that ran succeeded, including on a machine with
no GPU, where steps 2-4 are recorded as not run, PR.md is marked draft and the
message says to re-run on a GPU machine; 1 when a check failed or a GPU step
broke; the error families' codes for bad input (2).
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
from typing import Any

from integrate.errors import ConfigError, KernelsmithError
from integrate.records import E2EResult, IntegrateReport, OpCheck, Patch, TestRun
from pipeline.records import read_record, write_record

REPORT = "report.json"
PR_FILE = "PR.md"


def latest_run(runs_dir: pathlib.Path) -> str:
    """The newest run folder (by modification time) that has at least one best/ candidate."""
    if not runs_dir.is_dir():
        raise ConfigError(f"no optimize runs under {runs_dir}", fix="run `kernelsmith optimize` first")
    runs = [p for p in runs_dir.iterdir() if p.is_dir() and any(p.glob("*/best/candidate.json"))]
    if not runs:
        raise ConfigError(
            f"no run under {runs_dir} has a best/ candidate",
            fix="run `kernelsmith optimize` until an op improves, or pass --run",
        )
    return max(runs, key=lambda p: p.stat().st_mtime).name


def _say(text: str) -> None:
    print(text, file=sys.stderr)


def _packages(patch: Patch) -> tuple[pathlib.Path, pathlib.Path]:
    from integrate.patch import package_dir

    return package_dir(patch, patched=False), package_dir(patch, patched=True)


def _tasks(patch: Patch) -> list[Any]:
    from contract.layout import load_task

    return [load_task(pathlib.Path(op.task_dir)) for op in patch.ops]


def gpu_steps(
    report: IntegrateReport,
    tasks: list[Any],
    out_dir: pathlib.Path,
    *,
    checks: bool = True,
    tests: bool = True,
    e2e: bool = True,
    sanitizer: bool = True,
) -> tuple[IntegrateReport, bool]:
    """Run the GPU steps; returns the updated report and whether every step that ran succeeded."""
    from integrate import e2e as e2e_mod
    from integrate.sglang_runner import check_ops, gpu_available
    from integrate.sglang_tests import op_tests

    patch = report.patch
    run = report.run
    ok, device = gpu_available()
    update: dict[str, Any] = {"not_run": dict(report.not_run)}
    if not ok:
        why = f"no GPU here ({device}); run `kernelsmith integrate --run {run}` on a GPU machine"
        for step, wanted in (("correctness", checks), ("sglang tests", tests), ("e2e", e2e)):
            if wanted:
                update["not_run"][step] = why
        return report.model_copy(update=update), True
    update.update(gpu=device, torch=_torch_version(), failed_steps=dict(report.failed_steps))
    baseline_pkg, patched_pkg = _packages(patch)
    good = True
    if checks:
        update["not_run"].pop("correctness", None)
        update["failed_steps"].pop("correctness", None)
        try:
            update["checks"] = check_ops(
                tasks, baseline_pkg, patched_pkg, out_dir, sanitizer=sanitizer, command=f"python -m integrate.sglang_runner --run {run}"
            )
        except (KernelsmithError, OSError, subprocess.SubprocessError) as err:
            good = False
            message = _message(err)
            update["checks"] = [OpCheck(op_id=t.op_id, function="", ran=False, reason=f"a worker failed: {message}") for t in tasks]
            update["failed_steps"]["correctness"] = str(err)
            _say(f"error: correctness through SGLang: {err}")
        good = good and all(c.ran and not c.failed for c in update["checks"] if c.function)
        good = good and not any(s.ran and s.errors for c in update["checks"] for s in c.sanitizer)
    if tests:
        update["not_run"].pop("sglang tests", None)
        update["failed_steps"].pop("sglang tests", None)
        checkout = pathlib.Path(patch.tree_root) if patch.layout == "checkout" else None
        why = (
            f"the sources are the sglang {patch.source.version} {patch.layout}, which has no test/registered/ folder; "
            "set SGLANG_SRC (or --sglang) to a git checkout of sglang to run its tests"
        )
        runs: list[TestRun] = []
        for task in tasks:
            try:
                runs.append(op_tests(task, checkout, patched_pkg, out_dir, why_no_checkout=why))
            except (OSError, KernelsmithError, subprocess.SubprocessError) as err:
                good = False
                runs.append(TestRun(op_id=task.op_id, ran=False, reason=f"could not run pytest: {err}"))
                update["failed_steps"]["sglang tests"] = f"{task.op_id}: {err}"
        update["tests"] = runs
        good = good and not any(t.ran and (t.failed or t.errors) for t in runs)
    if e2e:
        update["not_run"].pop("e2e", None)
        update["failed_steps"].pop("e2e", None)
        try:
            update["e2e"] = e2e_mod.run(baseline_pkg, patched_pkg, out_dir, command=f"kernelsmith integrate --run {run}")
        except (KernelsmithError, OSError, subprocess.SubprocessError) as err:
            good = False
            message = _message(err)
            update["e2e"] = E2EResult(ran=False, reason=f"it broke: {message}")
            update["failed_steps"]["e2e"] = str(err)
            _say(f"error: end-to-end: {err}")
    return report.model_copy(update=update), good


def _message(err: BaseException) -> str:
    """What a broken GPU step records: our errors' own message, else the exception's type and text."""
    return err.message if isinstance(err, KernelsmithError) else f"{type(err).__name__}: {err}"


def _torch_version() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    return torch.__version__


def _publish(report: IntegrateReport, out_dir: pathlib.Path, run_dir: pathlib.Path) -> pathlib.Path:
    from integrate.pr import write_pr

    write_record(report, out_dir / REPORT)
    return write_pr(report, out_dir / PR_FILE, run_dir=str(run_dir))


def _print_summary(report: IntegrateReport, pr_path: pathlib.Path) -> None:
    from integrate.pr import status

    patch = report.patch
    _say(f"patch: {patch.patch_file} ({len(patch.files)} file(s), verified: {', '.join(patch.verified)})")
    if patch.patched_tree:
        _say(f"patched copy: {patch.patched_tree}")
    if patch.in_place:
        _say(f"patched in place: {patch.tree_root} (originals in {patch.backups})")
    for check in report.checks:
        state = f"{check.passed}/{len(check.cases)} cases pass" if check.ran else f"not run: {check.reason}"
        _say(f"  {check.op_id} through SGLang: {state}")
    for test in report.tests:
        state = f"{test.passed} passed, {test.failed} failed, {test.skipped} skipped, {test.errors} errors" if test.ran else f"not run: {test.reason}"
        _say(f"  {test.op_id} SGLang tests: {state}")
    if report.e2e is not None:
        if report.e2e.ran:
            for row in report.e2e.rows:
                _say(f"  e2e {row.phase} tokens={row.tokens}: {row.baseline_us:.2f} -> {row.patched_us:.2f} us/layer ({row.change_pct:+.1f}%)")
        else:
            _say(f"  e2e: not run: {report.e2e.reason}")
    state, reasons = status(report)
    _say(f"PR: {pr_path} ({state})")
    for reason in reasons:
        _say(f"  - {reason}")


def main(args: argparse.Namespace, config: Any) -> int:
    from extract.sources import acquire
    from integrate.patch import build_patch, load_run

    work = config.work
    run = args.run or latest_run(work / "runs")
    run_dir = work / "runs" / run
    out_dir = work / "integrate" / run
    source = acquire(config.sglang.version, config.cache, config.sglang.src)
    accepted, skipped = load_run(run_dir, work / "tasks")
    if not accepted:
        reasons = "; ".join(f"{op}: {why}" for op, why in sorted(skipped.items())) or "the run has no op folders"
        _say(f"nothing to integrate from run {run}: {reasons}")
        return 0
    patch = build_patch(run, run_dir, work / "tasks", source, out_dir, in_place=bool(args.in_place), accepted=accepted, skipped=skipped)
    report = IntegrateReport(run=run, patch=patch)
    report, good = gpu_steps(report, [a.task for a in accepted], out_dir, e2e=not getattr(args, "skip_e2e", False))
    if getattr(args, "skip_e2e", False):
        report = report.model_copy(update={"not_run": {**report.not_run, "e2e": "skipped with --skip-e2e"}})
    pr_path = _publish(report, out_dir, run_dir)
    if getattr(args, "git_branch", None):
        from integrate.pr import commit_branch, status, title

        state, _ = status(report)
        body = (
            f"Kernelsmith run {run}: {', '.join(op.op_id for op in patch.ops)}.\n"
            f"Status when committed: {state}. Evidence and reproduction commands: PR.md of that run."
        )
        commit = commit_branch(patch, args.git_branch, title(report), body)
        report = report.model_copy(update={"branch": args.git_branch, "commit": commit})
        pr_path = _publish(report, out_dir, run_dir)
        _say(f"committed {commit[:12]} on new branch {args.git_branch} of {patch.tree_root} (not pushed)")
    _print_summary(report, pr_path)
    if report.gpu is None:
        _say(f"no GPU here: the patch is made and verified; correctness, SGLang's tests and end-to-end need a GPU machine: `kernelsmith integrate --run {run}`")
    return 0 if good else 1


# --------------------------------------------------------------------------- partial re-runs


def _state(run: str, work_dir: str | None) -> tuple[IntegrateReport, pathlib.Path, pathlib.Path]:
    from pipeline.config import load_config

    config = load_config(overrides={"work_dir": work_dir} if work_dir else None)
    out_dir = config.work / "integrate" / run
    if (out_dir / REPORT).is_file():
        report = read_record(IntegrateReport, out_dir / REPORT)
    elif (out_dir / "patch.json").is_file():
        report = IntegrateReport(run=run, patch=read_record(Patch, out_dir / "patch.json"))
    else:
        raise ConfigError(f"run {run} has no patch yet ({out_dir}/patch.json)", fix=f"run `kernelsmith integrate --run {run}` first")
    return report, out_dir, config.work / "runs" / run


def check_only(run: str, *, work_dir: str | None = None, sanitizer: bool = True) -> int:
    """Re-run the correctness step of a run's patch and refresh report.json and PR.md."""
    report, out_dir, run_dir = _state(run, work_dir)
    report, good = gpu_steps(report, _tasks(report.patch), out_dir, tests=False, e2e=False, sanitizer=sanitizer)
    _print_summary(report, _publish(report, out_dir, run_dir))
    return 0 if good else 1


def e2e_only(run: str, *, work_dir: str | None = None) -> int:
    """Re-run the end-to-end step of a run's patch and refresh report.json and PR.md."""
    report, out_dir, run_dir = _state(run, work_dir)
    report, good = gpu_steps(report, _tasks(report.patch), out_dir, checks=False, tests=False, e2e=True)
    _print_summary(report, _publish(report, out_dir, run_dir))
    return 0 if good else 1
