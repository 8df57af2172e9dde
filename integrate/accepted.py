"""An optimize run's accepted candidates, read for integrate: which candidate each op contributes
(:func:`load_run`: the run's summary and best folders, the judged figures), and which of two that
edit the same span wins (:func:`resolve_overlaps`: the one with the larger geomean; the other op is
left out with the reason). :mod:`integrate.patch` composes what is kept into one patch.

What must stay true: an op whose best is not an accepted candidate contributes nothing; two kept
candidates never edit the same bytes.
"""

from __future__ import annotations

import dataclasses
import pathlib
from dataclasses import dataclass

from contract.layout import SRC_DIR, has_task, summary_path
from integrate.errors import ConfigError, PatchError
from optimize.reach import merge_functions
from pipeline.record_io import read_record
from pipeline.records import Span, Task
from pipeline.run_records import Candidate, Evaluation, Outcome
from pipeline.stats import speedup_geomean

CANDIDATE_FILE = "best/candidate.json"
EVALUATION_FILE = "best/evaluation.json"
BEST_SRC = "best/src"  # optimize's copy of every file the best candidate changes


@dataclass(frozen=True)
class Accepted:
    """One op whose best candidate the optimize stage accepted."""

    op_id: str
    candidate: Candidate
    evaluation: Evaluation | None
    task: Task
    task_dir: pathlib.Path
    best_files: dict[str, bytes] = dataclasses.field(default_factory=dict)  # best/src/<path>: optimize's patched files


def _op_statuses(run_dir: pathlib.Path) -> dict:
    """op id -> OpSummary from the run's summary.json, or {} when there is none yet."""
    from pipeline.run_records import RunSummary

    path = summary_path(run_dir)
    if not path.is_file():
        return {}
    try:
        return {op.op_id: op for op in read_record(RunSummary, path).ops}
    except Exception:  # a summary from another schema only loses the nicer message
        return {}


def load_run(run_dir: pathlib.Path, tasks_dir: pathlib.Path) -> tuple[list[Accepted], dict[str, str]]:
    """Accepted candidates of a run, and why every other op of the run is left out.

    A candidate is accepted when it is not the baseline (it has a parent and
    replaces at least one span) and its evaluation says ``ok``.
    """
    from contract.layout import completed_in_run, load_task

    if not run_dir.is_dir():
        raise ConfigError(
            f"no optimize run at {run_dir}", fix="run `kernelsmith optimize` first, or pass an existing --run"
        )
    accepted: list[Accepted] = []
    skipped: dict[str, str] = {}
    statuses = _op_statuses(run_dir)
    for op_dir in sorted(p for p in run_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        op_id = op_dir.name
        cand_path = op_dir / CANDIDATE_FILE
        if not cand_path.is_file():
            status = statuses.get(op_id)
            if status is not None and status.status == "no_improvement":
                why = f"optimize found nothing faster than the baseline ({status.rounds} round(s), stopped: {status.stop_reason})"
            elif status is not None and status.status == "model_failed":
                why = f"every LLM call of this op failed, and nothing faster was found: {status.detail or 'see its trajectory'}"
            else:
                why = f"no {CANDIDATE_FILE} (optimize did not finish this op)"
            skipped[op_id] = why
            continue
        candidate = read_record(Candidate, cand_path)
        if candidate.op_id != op_id:
            raise PatchError(f"{cand_path} is for op {candidate.op_id}, but lies in the folder of {op_id}")
        if candidate.parent is None or not candidate.regions:
            skipped[op_id] = "the best candidate is the baseline: optimize found nothing faster"
            continue
        eval_path = op_dir / EVALUATION_FILE
        if not eval_path.is_file():
            skipped[op_id] = f"no {EVALUATION_FILE}: the candidate's evaluation is missing (re-run optimize)"
            continue
        evaluation = read_record(Evaluation, eval_path)
        if evaluation.candidate != candidate.id:
            skipped[op_id] = f"{EVALUATION_FILE} judges candidate {evaluation.candidate}, not {candidate.id}"
            continue
        if evaluation.outcome != Outcome.ok:
            skipped[op_id] = f"the candidate's evaluation outcome is {evaluation.outcome.value}"
            continue
        task_dir = tasks_dir / op_id
        if not has_task(task_dir):
            raise ConfigError(
                f"the task of {op_id} is missing ({task_dir}/task.json)",
                fix=f"re-run `kernelsmith extract --ops {op_id}` with the same SGLang sources",
            )
        task = load_task(task_dir)
        task = completed_in_run(task, op_dir) or task  # the values the run's evaluations called it with
        src = op_dir / BEST_SRC
        best_files = (
            {p.relative_to(src).as_posix(): p.read_bytes() for p in src.rglob("*") if p.is_file()}
            if src.is_dir()
            else {}
        )
        accepted.append(Accepted(op_id, candidate, evaluation, task, task_dir, best_files))
    return accepted, skipped


def geomean_of(acc: Accepted) -> float:
    return (speedup_geomean(acc.evaluation.timings) if acc.evaluation else None) or 1.0


def _overlap(a: Accepted, b: Accepted) -> str:
    """The first span of ``a`` that a span of ``b`` in the same file overlaps with text that does not combine ("" if none).

    The same span with different texts combines when the two change different functions of it
    (:func:`optimize.reach.merge_functions`: twin ops' methods of one launcher struct).
    """
    spans_a, spans_b = spans_by_name(a.task), spans_by_name(b.task)
    for name_a, text_a in a.candidate.regions.items():
        sa = spans_a.get(name_a)
        for name_b, text_b in b.candidate.regions.items():
            sb = spans_b.get(name_b)
            if sa is None or sb is None or sa.file != sb.file:
                continue
            if (sa.start_byte, sa.end_byte) == (sb.start_byte, sb.end_byte) and (
                text_a == text_b or merge_functions(name_a, _baseline_text(a, sa), [text_a, text_b]) is not None
            ):
                continue
            if sa.start_byte < sb.end_byte and sb.start_byte < sa.end_byte:
                return f"{sa.file}: {name_a}"
    return ""


def _baseline_text(acc: Accepted, span: Span) -> str:
    """The text the task was extracted with at ``span`` ("" without its source copy: then nothing merges)."""
    source = acc.task_dir / SRC_DIR / span.file
    return source.read_bytes()[span.start_byte : span.end_byte].decode("utf-8", "replace") if source.is_file() else ""


def resolve_overlaps(accepted: list[Accepted]) -> tuple[list[Accepted], dict[str, str]]:
    """The accepted candidates that can be applied together, and why each other one is left out.

    Two ops can share a kernel (a decode and a prefill entry of one file): when their candidates
    rewrite overlapping spans differently, only one of them can be in the patch, since each was
    validated with the other's span as the baseline has it. The faster one (geomean speedup over
    its catalog shapes) is kept; the other is skipped with the reason and the command that
    integrates it alone, instead of failing the whole run.
    """
    kept: list[Accepted] = []
    skipped: dict[str, str] = {}
    for acc in sorted(accepted, key=lambda a: (-geomean_of(a), a.op_id)):
        clash = next(((k, where) for k in kept if (where := _overlap(k, acc))), None)
        if clash is None:
            kept.append(acc)
            continue
        other, where = clash
        skipped[acc.op_id] = (
            f"its candidate ({geomean_of(acc):.3f}x) rewrites {where}, which the candidate of {other.op_id} "
            f"({geomean_of(other):.3f}x, kept) rewrites differently; the two cannot both be applied. To integrate "
            f"it instead: `kernelsmith optimize --ops {acc.op_id} --run <new run>`, then integrate that run"
        )
    return sorted(kept, key=lambda a: a.op_id), skipped


def spans_by_name(task: Task) -> dict[str, Span]:
    names: dict[str, Span] = {}
    for span in task.editable:
        if span.name in names:
            raise PatchError(f"task {task.op_id} has two editable spans named {span.name}")
        names[span.name] = span
    return names
