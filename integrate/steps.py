"""The steps of ``kernelsmith integrate`` after the patch, shared by its entry points.

:mod:`integrate.command` (``kernelsmith integrate``) and the ``python -m`` partial
re-runs (:func:`integrate.sglang_runner.main`, :func:`integrate.e2e.main`) all run
these; they live below all of them so that nothing imports :mod:`integrate.command`,
which is the top of the stage (no import circle).

- :func:`gpu_steps`: correctness through SGLang, SGLang's tests (and the SGLang-form test and
  benchmark generated for each op, written without a GPU too), end-to-end; each recorded as run,
  failed or not run (and why) in the report;
- :func:`check_only` / :func:`e2e_only`: re-run one step of a run's patch and
  refresh ``report.json`` and ``PR.md``;
- :class:`Runners`: the steps' implementations, handed in by the caller, so this
  module imports none of the modules whose mains import it.

What must stay true: a task is checked with the contract its run called it with
(:func:`contract.layout.completed_in_run`), never today's rules.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from contract.layout import IntegrateFolder, integrate_folder, run_dir
from integrate.errors import ConfigError, KernelsmithError, broke_with
from integrate.landing import unreached
from integrate.pr_model import changed_ops
from integrate.records import E2EResult, IntegrateReport, OpCheck, Patch, TestRun, UpstreamCheck
from pipeline.gpu import gpu_available
from pipeline.record_io import read_record, write_record
from pipeline.records import Task


class CheckOps(Protocol):
    """:func:`integrate.sglang_runner.check_ops`."""

    def __call__(
        self,
        tasks: Sequence[Task],
        baseline_pkg: pathlib.Path,
        patched_pkg: pathlib.Path,
        out_dir: pathlib.Path,
        *,
        sanitizer: bool,
        command: str,
    ) -> list[OpCheck]: ...


class OpTests(Protocol):
    """:func:`integrate.sglang_tests.op_tests`."""

    def __call__(
        self,
        task: Task,
        checkout: pathlib.Path | None,
        patched_pkg: pathlib.Path,
        out_dir: pathlib.Path,
        *,
        why_no_checkout: str,
    ) -> TestRun: ...


class UpstreamRun(Protocol):
    """:func:`integrate.upstream_tests.check`."""

    def __call__(
        self, task: Task, out_dir: pathlib.Path, baseline_pkg: pathlib.Path, patched_pkg: pathlib.Path, *, run: bool
    ) -> UpstreamCheck: ...


class E2ERun(Protocol):
    """:func:`integrate.e2e.run`: one result per layer recipe it ran (those that run ``ops``)."""

    def __call__(
        self,
        baseline_pkg: pathlib.Path,
        patched_pkg: pathlib.Path,
        out_dir: pathlib.Path,
        *,
        command: str,
        ops: Sequence[str],
    ) -> list[E2EResult]: ...


@dataclass(frozen=True)
class Runners:
    """The GPU steps' implementations, handed in by the entry point that runs them.

    Why: the steps' modules (:mod:`integrate.sglang_runner`, :mod:`integrate.sglang_tests`,
    :mod:`integrate.e2e`) have ``python -m`` mains that call :func:`check_only` /
    :func:`e2e_only`, so they import this module; this module therefore imports none of
    them (no circle). :mod:`integrate.command`, the top, gives all three; a main gives
    its own. A step asked for without its runner is a programming error.
    """

    check: CheckOps | None = None
    tests: OpTests | None = None
    e2e: E2ERun | None = None
    upstream: UpstreamRun | None = None  # with tests: the SGLang-form test and benchmark, generated and run


def say(text: str) -> None:
    print(text, file=sys.stderr)


def _packages(patch: Patch) -> tuple[pathlib.Path, pathlib.Path]:
    from integrate.patch import package_dir

    return package_dir(patch, patched=False), package_dir(patch, patched=True)


def _tasks(patch: Patch, run_dir: pathlib.Path | None = None) -> list[Task]:
    """The patch's tasks, each with its run's contract completion applied when the run has one."""
    from contract.layout import completed_in_run, load_task

    tasks = []
    for op in patch.ops:
        task = load_task(pathlib.Path(op.task_dir))
        if run_dir is not None:
            task = completed_in_run(task, run_dir / op.op_id) or task
        tasks.append(task)
    return tasks


def gpu_steps(
    report: IntegrateReport,
    tasks: list[Task],
    out_dir: pathlib.Path,
    *,
    checks: bool = True,
    tests: bool = True,
    e2e: bool = True,
    sanitizer: bool = True,
    runners: Runners,
) -> tuple[IntegrateReport, bool]:
    """Run the GPU steps; returns the updated report and whether every step that ran succeeded."""
    for wanted, given, name in (
        (checks, runners.check, "check"),
        (tests, runners.tests, "tests"),
        (e2e, runners.e2e, "e2e"),
    ):
        if wanted and given is None:
            raise ValueError(f"gpu_steps: the {name} step is asked for but Runners.{name} is not given")
    patch = report.patch
    run = report.run
    ok, device = gpu_available()
    update: dict[str, Any] = {"not_run": dict(report.not_run)}
    if not ok:
        why = f"no GPU here ({device}); run `kernelsmith integrate --run {run}` on a GPU machine"
        for step, wanted in (("correctness", checks), ("sglang tests", tests), ("e2e", e2e)):
            if wanted:
                update["not_run"][step] = why
        if tests and runners.upstream is not None:  # the files are part of the PR: written here too
            update["upstream"] = _upstream(runners.upstream, tasks, out_dir, patch, _packages(patch), run=False)
        return report.model_copy(update=update), True
    update.update(gpu=device, torch=_torch_version(), failed_steps=dict(report.failed_steps))
    baseline_pkg, patched_pkg = _packages(patch)
    good = True
    if checks:
        update["not_run"].pop("correctness", None)
        update["failed_steps"].pop("correctness", None)
        say(f"checking {len(tasks)} op(s) through SGLang's public ops, pristine against patched ...")
        try:
            assert runners.check is not None
            update["checks"] = runners.check(
                tasks,
                baseline_pkg,
                patched_pkg,
                out_dir,
                sanitizer=sanitizer,
                command=f"python -m integrate.sglang_runner --run {run}",
            )
        except (KernelsmithError, OSError, subprocess.SubprocessError) as err:
            good = False
            message = broke_with(err)
            update["checks"] = [
                OpCheck(op_id=t.op_id, function="", ran=False, reason=f"a worker failed: {message}") for t in tasks
            ]
            update["failed_steps"]["correctness"] = str(err)
            say(f"error: correctness through SGLang: {err}")
        good = good and all(c.ran and not c.failed for c in update["checks"] if c.planned)
        good = good and not unreached(patch, update["checks"])
        good = good and not any(s.ran and s.errors for c in update["checks"] for s in c.sanitizer)
    if tests:
        update["not_run"].pop("sglang tests", None)
        update["failed_steps"].pop("sglang tests", None)
        say("running SGLang's tests and the generated SGLang-form tests and benchmarks ...")
        checkout = pathlib.Path(patch.tree_root) if patch.layout == "checkout" else None
        why = (
            f"the sources are the sglang {patch.source.version} {patch.layout}, which has no test/registered/ folder; "
            "set SGLANG_SRC (or --sglang) to a git checkout of sglang to run its tests"
        )
        runs: list[TestRun] = []
        for task in tasks:
            try:
                assert runners.tests is not None
                runs.append(runners.tests(task, checkout, patched_pkg, out_dir, why_no_checkout=why))
            except (OSError, KernelsmithError, subprocess.SubprocessError) as err:
                good = False
                runs.append(TestRun(op_id=task.op_id, ran=False, reason=f"could not run pytest: {err}"))
                update["failed_steps"]["sglang tests"] = f"{task.op_id}: {err}"
        update["tests"] = runs
        good = good and not any(t.ran and (t.failed or t.errors) for t in runs)
        if runners.upstream is not None:
            packages = (baseline_pkg, patched_pkg)
            update["upstream"] = _upstream(runners.upstream, tasks, out_dir, patch, packages, run=True)
            generated = [u.test for u in update["upstream"] if u.test is not None]
            good = good and not any(t.ran and (t.failed or t.errors) for t in generated)
    if e2e:
        update["not_run"].pop("e2e", None)
        update["failed_steps"].pop("e2e", None)
        say("timing the layer recipes that run a changed step: pristine, patched and the A/A copy ...")
        try:
            assert runners.e2e is not None
            results = runners.e2e(
                baseline_pkg,
                patched_pkg,
                out_dir,
                command=f"kernelsmith integrate --run {run}",
                ops=sorted(changed_ops(report)),
            )
        except (KernelsmithError, OSError, subprocess.SubprocessError) as err:
            results = [E2EResult(ran=False, reason=f"it broke: {broke_with(err)}")]
            say(f"error: end-to-end: {err}")
        update["e2e"] = results
        broke = [f"{r.model or r.recipe or 'layer proxy'}: {r.reason}" for r in results if not r.ran]
        if broke:  # each recipe that did not run says why; the others' figures are kept
            good = False
            update["failed_steps"]["e2e"] = "; ".join(broke)
    return report.model_copy(update=update), good


def _upstream(
    runner: UpstreamRun,
    tasks: list[Task],
    out_dir: pathlib.Path,
    patch: Patch,
    packages: tuple[pathlib.Path, pathlib.Path],
    *,
    run: bool,
) -> list[UpstreamCheck]:
    """Each op of the PR's SGLang-form test and benchmark (the ops its change also reaches are checked
    through SGLang, not given tests of their own); one op's failure to run is its record, not the step's."""
    baseline_pkg, patched_pkg = packages
    own = {op.op_id for op in patch.ops}
    out: list[UpstreamCheck] = []
    for task in (t for t in tasks if t.op_id in own):
        try:
            out.append(runner(task, out_dir, baseline_pkg, patched_pkg, run=run))
        except (OSError, KernelsmithError, subprocess.SubprocessError) as err:
            out.append(UpstreamCheck(op_id=task.op_id, generated=False, missing=f"could not write or run: {err}"))
    return out


def _torch_version() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    return torch.__version__


def publish(report: IntegrateReport, out_dir: pathlib.Path, run_dir: pathlib.Path) -> pathlib.Path:
    """report.json and PR.md; for a patch written as a series, each family's PR beside its part."""
    from integrate.pr import write_pr
    from integrate.series import family_report

    folder = IntegrateFolder(out_dir)
    write_record(report, folder.report)
    for part in report.series:
        diff = (out_dir / part.file).read_text(encoding="utf-8", errors="replace")
        write_pr(family_report(report, part), (out_dir / part.file).with_suffix(".md"), run_dir=str(run_dir), diff=diff)
    return write_pr(report, folder.pr, run_dir=str(run_dir))


def print_summary(report: IntegrateReport, pr_path: pathlib.Path) -> None:
    from integrate.pr import status

    patch = report.patch
    say(f"patch: {patch.patch_file} ({len(patch.files)} file(s), verified: {', '.join(patch.verified)})")
    if patch.patched_tree:
        say(f"patched copy: {patch.patched_tree}")
    if patch.in_place:
        say(f"patched in place: {patch.tree_root} (originals in {patch.backups})")
    for check in report.checks:
        state = f"{check.passed}/{len(check.cases)} cases pass" if check.ran else f"not run: {check.reason}"
        say(f"  {check.op_id} through SGLang: {state}")
    for test in report.tests:
        state = (
            f"{test.passed} passed, {test.failed} failed, {test.skipped} skipped, {test.errors} errors"
            if test.ran
            else f"not run: {test.reason}"
        )
        say(f"  {test.op_id} SGLang tests: {state}")
    for u in report.upstream:
        if not u.generated:
            say(f"  {u.op_id} SGLang-form test: not written: {u.missing}")
            continue
        shown = (u.test.summary or u.test.reason) if u.test is not None else "written, not run"
        benches = "; ".join(f"{b.tree} {'ran' if b.ran else b.reason}" for b in u.bench)
        say(f"  {u.op_id} SGLang-form test {u.test_file}: {shown}" + (f"; benchmark: {benches}" if benches else ""))
    for result in report.e2e:
        name = result.model or result.recipe or "layer proxy"
        if not result.ran:
            say(f"  e2e {name}: not run: {result.reason}")
        for row in result.rows:
            say(
                f"  e2e {name} {row.phase} tokens={row.tokens}: {row.baseline_us:.2f} -> {row.patched_us:.2f} us/layer ({row.change_pct:+.1f}%)"
            )
    state, reasons = status(report)
    say(f"PR: {pr_path} ({state})")
    for reason in reasons:
        say(f"  - {reason}")


# --------------------------------------------------------------------------- partial re-runs


def _state(run: str, work_dir: str | None) -> tuple[IntegrateReport, pathlib.Path, pathlib.Path]:
    from pipeline.config import load_config

    config = load_config(overrides={"work_dir": work_dir} if work_dir else None)
    folder = integrate_folder(config.work, run)
    if folder.report.is_file():
        report = read_record(IntegrateReport, folder.report)
    elif folder.patch_record.is_file():
        report = IntegrateReport(run=run, patch=read_record(Patch, folder.patch_record))
    else:
        raise ConfigError(
            f"run {run} has no patch yet ({folder.patch_record})", fix=f"run `kernelsmith integrate --run {run}` first"
        )
    return report, folder.root, run_dir(config.work, run)


def check_only(run: str, check: CheckOps, *, work_dir: str | None = None, sanitizer: bool = True) -> int:
    """Re-run the correctness step of a run's patch and refresh report.json and PR.md."""
    report, out_dir, run_dir = _state(run, work_dir)
    report, good = gpu_steps(
        report,
        _tasks(report.patch, run_dir),
        out_dir,
        tests=False,
        e2e=False,
        sanitizer=sanitizer,
        runners=Runners(check=check),
    )
    print_summary(report, publish(report, out_dir, run_dir))
    return 0 if good else 1


def e2e_only(run: str, e2e: E2ERun, *, work_dir: str | None = None) -> int:
    """Re-run the end-to-end step of a run's patch and refresh report.json and PR.md."""
    report, out_dir, run_dir = _state(run, work_dir)
    report, good = gpu_steps(
        report, _tasks(report.patch, run_dir), out_dir, checks=False, tests=False, e2e=True, runners=Runners(e2e=e2e)
    )
    print_summary(report, publish(report, out_dir, run_dir))
    return 0 if good else 1
