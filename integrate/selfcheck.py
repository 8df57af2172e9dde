"""``kernelsmith integrate --self-check [OP ...]``: integrate's SGLang check with the baseline as the candidate.

Why: before integrate's verdict on a patch can be trusted for an op, the check
itself must be shown to call that op correctly: the unmodified sources checked
against themselves, through SGLang's own public function and ``load_jit``, must
be **bitwise equal** in every case. The "patched" tree here is a byte-for-byte
copy of the pristine package (``work/integrate/self-check/tree/sglang``), so
the two workers really build and load two trees, exactly as for a patch.

For the tasks named (every task under ``<work-dir>/tasks`` when none is), each
completed by today's rules (:func:`contract.completion.complete`: there
is no run), :func:`integrate.sglang_runner.check_ops` plans and runs every case;
one worker per tree serves all ops and builds every module at once first. An op
that cannot be called from its contract, or fails, is recorded with the reason
and the others go on.

Writes ``work/integrate/self-check/self-check.json``
(:class:`integrate.records.SelfCheck`, after every op, so an interrupted sweep
keeps what it proved) and ``self-check.md``. A rerun resumes: the record is the union of
every run over the same SGLang source, an op named again that was already proved
bitwise equal is kept (not checked again) and any other named op is checked again and
replaces its old row; delete ``self-check.json`` to check everything again. The limits
are ``[integrate]`` config (``warm_timeout_s``, ``case_timeout_s``,
``warm_batch_modules``; e.g. ``KERNELSMITH_INTEGRATE__WARM_BATCH_MODULES=1`` builds one
op at a time, so an op whose build hangs costs only itself). The table: op, cases, passed,
skipped, bitwise equal, max abs err, first-call build s, reason. Exit 0 when every op that ran is bitwise equal in every case; 1 when
one is not, or when there is no GPU here (nothing was checked).
"""

from __future__ import annotations

import datetime
import pathlib
import shutil
import subprocess
import sys
import uuid

from contract import layout
from integrate.errors import KernelsmithError
from integrate.records import OpCheck, SelfCheck
from pipeline.config import Config
from pipeline.errors import StaleRecordError
from pipeline.gpu import gpu_available
from pipeline.record_io import read_record, write_record
from pipeline.records import SourceInfo, Task

COPY_MARK = ".kernelsmith-copy-of"


def bitwise(check: OpCheck) -> bool | None:
    """Whether every case that ran was bitwise equal (None: none ran)."""
    ran = [c for c in check.cases if c.status != "skipped"]
    if not ran:
        return None
    return all(c.bitwise_equal is True for c in ran)


def table(record: SelfCheck) -> str:
    """The markdown table of a self-check record."""
    lines = [
        f"Self-check of integrate's SGLang check, {record.date}, GPU: {record.gpu or 'none'}; `{record.command}`",
        "",
        "| op | cases | passed | skipped | bitwise equal | max abs err | first-call build s | reason |",
        "|---|---:|---:|---:|---|---:|---:|---|",
    ]
    for check in record.checks:
        equal = bitwise(check)
        errs = [c.max_abs_err for c in check.cases if c.max_abs_err is not None]
        reason = check.reason or "; ".join(sorted({c.reason for c in check.cases if c.status != "pass" and c.reason}))
        if check.fixes:
            reason = f"contract fixed by the pristine op's check: {'; '.join(check.fixes)}" + (
                f"; {reason}" if reason else ""
            )
        lines.append(
            f"| {check.op_id} | {len(check.cases)} | {check.passed} | {check.skipped} | "
            f"{'-' if equal is None else ('yes' if equal else 'NO')} | {max(errs) if errs else '-'} | "
            f"{'-' if check.first_call_s is None else f'{check.first_call_s:.1f}'} | {_cell(reason)} |"
        )
    for op, why in sorted(record.not_loaded.items()):
        lines.append(f"| {op} | 0 | 0 | 0 | - | - | - | {_cell(why)} |")
    return "\n".join(lines) + "\n"


def _cell(text: str, limit: int = 300) -> str:
    """``text`` as one table cell: one line (an nvcc log's newlines would end the row), no ``|``, at most ``limit``."""
    flat = " ".join(text.split()).replace("|", "/")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def pristine_copy(package: pathlib.Path, dest: pathlib.Path) -> pathlib.Path:
    """A byte-for-byte copy of the package folder at ``dest`` (reused when it is a copy of the same folder)."""
    mark = dest / COPY_MARK
    if mark.is_file() and mark.read_text(encoding="utf-8").strip() == str(package.resolve()):
        return dest
    staging = dest.parent / f".staging-{uuid.uuid4().hex[:8]}"
    try:
        shutil.copytree(package, staging, ignore=shutil.ignore_patterns("__pycache__"))
        (staging / COPY_MARK).write_text(str(package.resolve()) + "\n", encoding="utf-8")
        if dest.exists():
            shutil.rmtree(dest)
        staging.rename(dest)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return dest


def load_tasks(tasks_dir: pathlib.Path, ops: list[str]) -> tuple[list[Task], dict[str, str]]:
    """The named tasks (all under ``tasks_dir`` when none is named), completed by today's rules."""
    from contract.completion import complete
    from contract.layout import load_task

    if ops:
        names = list(ops)
    else:
        names = sorted(p.name for p in tasks_dir.iterdir() if layout.has_task(p)) if tasks_dir.is_dir() else []
    tasks: list[Task] = []
    failed: dict[str, str] = {}
    for op in names:
        folder = tasks_dir / op
        if not layout.has_task(folder):
            failed[op] = f"no task at {folder}: run `kernelsmith extract --ops {op}` first"
            continue
        try:
            task, _ = complete(load_task(folder), folder)
        except Exception as err:  # noqa: BLE001 - one unreadable task is recorded, the others go on
            failed[op] = f"{type(err).__name__}: {err}"
            continue
        tasks.append(task)
    return tasks, failed


def proved(check: OpCheck) -> bool:
    """Whether ``check`` ran and every case that ran was bitwise equal: a rerun keeps it."""
    return check.ran and not check.failed and bitwise(check) is True


def earlier(out_dir: pathlib.Path, source: SourceInfo) -> list[OpCheck]:
    """The checks of the record already in ``out_dir`` when it is of the same SGLang source (else none).

    An unreadable record is set aside as ``self-check.json.unreadable`` (said on stderr),
    never silently overwritten.
    """
    path = layout.IntegrateFolder(out_dir).self_check_record
    if not path.is_file():
        return []
    try:
        old = read_record(SelfCheck, path)
    except StaleRecordError as err:
        aside = path.with_name(path.name + ".unreadable")
        path.replace(aside)
        print(f"warning: {err.message}; set aside as {aside}, checking afresh", file=sys.stderr)
        return []
    same = (old.source.version, old.source.commit, old.source.wheel) == (source.version, source.commit, source.wheel)
    return list(old.checks) if same and old.gpu else []


def self_check(ops: list[str], config: Config) -> int:
    """Run the self-check over ``ops`` (all tasks when empty); see the module docstring."""
    from extract.sources import acquire
    from integrate.sglang_runner import check_ops

    out_dir = layout.self_check_folder(config.work).root
    out_dir.mkdir(parents=True, exist_ok=True)
    command = "kernelsmith integrate --self-check " + " ".join(ops)
    source = acquire(config.sglang.version, config.cache, config.sglang.src)
    baseline = pathlib.Path(source.root)
    tasks, not_loaded = load_tasks(layout.tasks_root(config.work), ops)
    ok, device = gpu_available()
    record = SelfCheck(
        date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        command=command.strip(),
        gpu=device if ok else None,
        source=source,
        baseline_tree=str(baseline),
        copy_tree="",
        not_loaded=not_loaded,
    )
    before = earlier(out_dir, source)
    if not ok:  # plan anyway: the table says which ops a GPU run would call, and why the others cannot be
        if not before:  # a GPU's record is never replaced by a plan
            _write(record.model_copy(update={"checks": [_planned_only(t, device) for t in tasks]}), out_dir)
        print(f"no GPU here ({device}): nothing was checked; run `{record.command}` on a GPU machine", file=sys.stderr)
        return 1
    copy = pristine_copy(baseline, layout.IntegrateFolder(out_dir).tree / "sglang")
    record = record.model_copy(update={"copy_tree": str(copy)})
    named = {t.op_id for t in tasks}
    # What an earlier, interrupted run learnt is applied first: its recheck came at the end and
    # may never have run (the H200, 2026-12-02: a time limit ended it after the first pass).
    upfront = refixed_by_the_baseline(tasks, [c for c in before if c.op_id in named], layout.tasks_root(config.work))
    kept = [c for c in before if c.op_id in named and proved(c) and c.op_id not in upfront]
    for check in kept:
        print(
            f"  {check.op_id}: kept, proved earlier ({check.passed}/{len(check.cases)} bitwise equal)", file=sys.stderr
        )
    tasks = [t for t in tasks if t.op_id not in {c.op_id for c in kept}]
    others = [c for c in before if c.op_id not in named] + kept
    done: list[OpCheck] = []

    def said(check: OpCheck, more: list[str] | None = None) -> OpCheck:
        """``check`` with the fixes applied before its pass (``upfront``) and after it (``more``)."""
        fixes = [*upfront.get(check.op_id, []), *(more or [])]
        return check.model_copy(update={"fixes": fixes}) if fixes else check

    def progress(check: OpCheck) -> None:
        check = said(check)
        done.append(check)
        _write(record.model_copy(update={"checks": _union(others, done)}), out_dir)
        equal = bitwise(check)
        state = (
            f"{check.passed}/{len(check.cases)} pass, bitwise equal: {equal}"
            if check.ran
            else f"not run: {check.reason}"
        )
        print(f"  {check.op_id}: {state}", file=sys.stderr)

    limits = config.integrate

    def run_checks(these: list[Task]) -> list[OpCheck]:
        return check_ops(
            these,
            baseline,
            copy,
            out_dir,
            timeout_s=limits.case_timeout_s,
            warm_timeout_s=limits.warm_timeout_s,
            warm_batch_modules=limits.warm_batch_modules,
            sanitizer=False,
            command=record.command,
            progress=progress,
        )

    try:
        checks = [said(c) for c in run_checks(tasks)]
        fixed = refixed_by_the_baseline(tasks, checks, layout.tasks_root(config.work))
        if fixed:  # once: the fixed ops' rows replace their first ones
            print(f"  checking again with the pristine op's own demands: {', '.join(fixed)}", file=sys.stderr)
            again = {c.op_id: c for c in run_checks([t for t in tasks if t.op_id in fixed])}
            checks = [said(again[c.op_id], fixed[c.op_id]) if c.op_id in again else c for c in checks]
    except (KernelsmithError, OSError, subprocess.SubprocessError) as err:  # a worker that cannot start or run at all
        message = err.message if isinstance(err, KernelsmithError) else f"{type(err).__name__}: {err}"
        seen = {c.op_id for c in done}
        checks = [
            *done,
            *(
                OpCheck(op_id=t.op_id, function="", ran=False, reason=f"a worker failed: {message}")
                for t in tasks
                if t.op_id not in seen
            ),
        ]
        _write(record.model_copy(update={"checks": _union(others, checks)}), out_dir)
        print(f"error: self-check through SGLang: {err}", file=sys.stderr)
        return 1
    record = record.model_copy(update={"checks": _union(others, checks)})
    _write(record, out_dir)
    print(f"self-check: {layout.IntegrateFolder(out_dir).self_check_table}", file=sys.stderr)
    return 0 if all(bitwise(c) is not False and not c.failed for c in record.checks if c.ran) else 1


def _union(earlier_checks: list[OpCheck], new: list[OpCheck]) -> list[OpCheck]:
    """The earlier rows, each replaced by this run's latest row of the same op, then this run's new ops."""
    latest = {c.op_id: c for c in new}
    merged = [latest.pop(c.op_id, c) for c in earlier_checks]
    return merged + [latest.pop(c.op_id) for c in new if c.op_id in latest]


def refixed_by_the_baseline(tasks: list[Task], checks: list[OpCheck], tasks_dir: pathlib.Path) -> dict[str, list[str]]:
    """Ops whose skipped cases show the pristine op demanding a dtype the contract lacks
    ("correction_bias must be float32"), fixed in ``tasks`` in place, with the fixes said.

    The baseline is the oracle: as in the sweep and the loop, its own check corrects the
    contract (:func:`contract.completion.dtype_from_rejection`, then
    :func:`contract.completion.refixed`). The fixed task is only used for this check; the
    task on disk is not rewritten.
    """
    from contract.completion import dtype_from_rejection, refixed

    said: dict[str, list[str]] = {}
    by_op = {c.op_id: c for c in checks}
    for index, task in enumerate(tasks):
        check = by_op.get(task.op_id)
        if check is None:
            continue
        fix = next(
            (
                f
                for c in check.cases
                if c.status == "skipped"
                if (f := dtype_from_rejection(task.contract, c.reason)) is not None
            ),
            None,
        )
        if fix is None:
            continue
        tasks[index], _ = refixed(task, [fix], tasks_dir / task.op_id)
        said[task.op_id] = [f"{fix.name}: {fix.kind} {fix.value} ({fix.rule}: {fix.why})"]
    return said


def _planned_only(task: Task, device: str) -> OpCheck:
    """What a GPU run would do for ``task``: its planned cases' count and modules, or why it cannot call it."""
    from integrate.calls import plan_op

    plan = plan_op(task)
    if not plan.cases:
        return OpCheck(op_id=task.op_id, function=plan.function, ran=False, planned=False, reason=plan.reason)
    return OpCheck(
        op_id=task.op_id,
        function=plan.function,
        ran=False,
        reason=f"not run: no GPU here ({device}); {len(plan.cases)} cases planned",
        modules=len({c.key for c in plan.cases}),
        unplanned=dict(plan.unplanned),
    )


def _write(record: SelfCheck, out_dir: pathlib.Path) -> None:
    folder = layout.IntegrateFolder(out_dir)
    write_record(record, folder.self_check_record)
    folder.self_check_table.write_text(table(record), encoding="utf-8")
