"""``kernelsmith integrate [--run RUN] [--in-place] [--git-branch NAME] [--skip-e2e] [--self-check [OP ...]]``.

The top of the stage: nothing imports this module. The steps it shares with the
``python -m`` partial re-runs are in :mod:`integrate.steps`; ``--self-check``
(the baseline checked against a pristine copy of itself) is
:mod:`integrate.selfcheck`.

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

``--in-place`` writes the user's tree only after steps 2-4 ran on the patched copy
and passed (:func:`integrate.patch.swap_in_place`, restoring every file if the swap
fails); a CPU-only run or a failed check leaves the tree untouched and records why
under ``not_run["in-place"]``.

Exit codes: 0 when every step that ran succeeded, including on a machine with
no GPU, where steps 2-4 are recorded as not run, PR.md is marked draft and the
message says to re-run on a GPU machine; 1 when a check failed or a GPU step
broke, or when ``--in-place`` was asked for and not applied; the error
families' codes for bad input (2).
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass
from typing import Any

from contract import layout
from integrate import e2e as e2e_mod
from integrate.errors import ConfigError, KernelsmithError
from integrate.reached import checked_tasks, patch_reach
from integrate.records import IntegrateReport
from integrate.sglang_runner import check_ops
from integrate.sglang_tests import op_tests
from integrate.steps import Runners, gpu_steps, print_summary, publish, say
from integrate.upstream_tests import check as upstream_check
from pipeline.config import Config
from pipeline.output import emit


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


@dataclass(frozen=True)
class IntegrateOptions:
    """What one ``kernelsmith integrate`` is asked: the command line's flags, ``kernelsmith run``'s choice, or
    the agent's ``integrate`` verb.

    ``run`` None means the latest run; ``merge_from`` names the runs whose accepted candidates are
    first assembled into ``run`` (one build of everything); ``self_check`` (a tuple, possibly empty:
    every task) checks the unmodified baselines instead; ``emitted`` collects the result for ``--json``."""

    run: str | None = None
    in_place: bool = False
    git_branch: str | None = None
    skip_e2e: bool = False
    merge_from: tuple[str, ...] = ()
    self_check: tuple[str, ...] | None = None
    emitted: list[Any] | None = None


def run(options: IntegrateOptions, config: Config) -> int:
    from extract.command import ensure_tasks
    from extract.sources import acquire
    from integrate.accepted import load_run, resolve_overlaps
    from integrate.patch import build_patch, layout_of
    from integrate.series import write_series

    if options.self_check is not None:
        from integrate.selfcheck import self_check

        return self_check(list(options.self_check), config)
    work = config.work
    if options.merge_from:
        from integrate.merge import merge_runs

        if not options.run:
            raise ConfigError("--from needs --run NAME, the merged build's name", fix="add --run all (or another name)")
        built = merge_runs(work, options.run, options.merge_from)
        for op_id, found_in in built.ops.items():
            say(f"{options.run}: {op_id} from run {found_in}")
    run = options.run or latest_run(work / layout.RUNS_DIR)
    run_dir = layout.run_dir(work, run)
    out_dir = layout.integrate_folder(work, run).root
    source = acquire(config.sglang.version, config.cache, config.sglang.src)
    accepted, skipped = load_run(run_dir, layout.tasks_root(work))
    accepted, clashing = resolve_overlaps(accepted)
    skipped = {**skipped, **clashing}
    for op_id, why in sorted(clashing.items()):
        say(f"not integrated: {op_id}: {why}")
    if not accepted:
        reasons = "; ".join(f"{op}: {why}" for op, why in sorted(skipped.items())) or "the run has no op folders"
        say(f"nothing to integrate from run {run}: {reasons}")
        return 0
    patch = build_patch(
        run,
        run_dir,
        layout.tasks_root(work),
        source,
        out_dir,
        in_place=bool(options.in_place),
        accepted=accepted,
        skipped=skipped,
    )
    series = write_series(accepted, layout_of(source), out_dir)
    reach = patch_reach(work, accepted, lambda ids: ensure_tasks(config, ids))
    for op_id, others in sorted(reach.ops.items()):
        if others:
            say(f"{op_id}: its change also runs in {', '.join(others)}: checked there too")
    from integrate.merge import read_merged

    merged = read_merged(run_dir)
    report = IntegrateReport(
        run=run,
        patch=patch,
        reach=reach.ops,
        reach_unknown=reach.unknown,
        merged_from=merged.ops if merged else {},
        series=series,
    )
    report, good = gpu_steps(
        report,
        checked_tasks(reach, accepted, run_dir),
        out_dir,
        e2e=not options.skip_e2e,
        runners=RUNNERS,
    )
    if options.skip_e2e:
        report = report.model_copy(update={"not_run": {**report.not_run, "e2e": "skipped with --skip-e2e"}})
    if options.in_place and patch.files:
        report, good = _swap(report, good, out_dir)
    pr_path = publish(report, out_dir, run_dir)
    if options.git_branch:
        from integrate.branch import commit_branch
        from integrate.evidence import run_summary
        from integrate.pr import status, title

        state, _ = status(report)
        body = (
            f"Ops: {', '.join(op.op_id for op in patch.ops)}.\n"
            f"Status when committed: {state}. Evidence and reproduction commands: the PR description."
        )
        summary = run_summary(run_dir)  # the card that measured the isolated figures the title quotes
        commit = commit_branch(patch, options.git_branch, title(report, summary.device if summary else None), body)
        report = report.model_copy(update={"branch": options.git_branch, "commit": commit})
        say(f"committed {commit[:12]} on new branch {options.git_branch} of {patch.tree_root} (not pushed)")
        if report.series:
            from integrate.branch import commit_series

            parts = commit_series(report, options.git_branch, f"Status when committed: {state}.")
            report = report.model_copy(update={"series": parts})
            for part in parts:
                say(f"  part {part.index} ({part.family}): {part.commit[:12]} on new branch {part.branch}")
        pr_path = publish(report, out_dir, run_dir)
    print_summary(report, pr_path)
    emit(options, report)
    if report.gpu is None:
        say(
            f"no GPU here: the patch is made and verified; correctness, SGLang's tests and end-to-end need a GPU machine: `kernelsmith integrate --run {run}`"
        )
    return 0 if good else 1


def _swap(report: IntegrateReport, good: bool, out_dir: pathlib.Path) -> tuple[IntegrateReport, bool]:
    """``--in-place``: write the user's tree only when the GPU checks ran on the patched copy and passed."""
    from integrate.in_place import swap_in_place

    patch = report.patch
    tree = patch.tree_root
    again = f"`kernelsmith integrate --run {report.run} --in-place`"
    checked = report.gpu is not None and bool(report.checks) and all(c.ran for c in report.checks if c.planned)
    why = ""
    if report.gpu is None:
        why = f"no GPU here to check the patch; run {again} on a GPU machine, or apply {patch.patch_file} yourself"
    elif not good or not checked:
        why = f"the checks did not pass (see above); fix them and run {again} again"
    if why:
        say(f"--in-place not applied: {tree} is untouched ({why}); the patched copy is {patch.patched_tree}")
        return report.model_copy(update={"not_run": {**report.not_run, "in-place": f"not applied: {why}"}}), False
    try:
        swapped = swap_in_place(patch, out_dir)
    except (KernelsmithError, OSError) as err:
        say(f"error: --in-place: {err}")
        return report.model_copy(update={"failed_steps": {**report.failed_steps, "in-place": str(err)}}), False
    return report.model_copy(update={"patch": swapped}), good


RUNNERS = Runners(check=check_ops, tests=op_tests, e2e=e2e_mod.run, upstream=upstream_check)
