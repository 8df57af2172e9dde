"""Where a task and a run keep their files: the one place these paths are spelled.

``work/tasks/<op>/`` is one extracted task: ``task.json`` (:class:`pipeline.records.Task`),
``src/<package-relative path>`` (the op's sources and their include closure, byte for
byte) and ``.extract-key`` (the content key of every input of the task).
``work/runs/<run>/<op>/`` is one op of an optimize run; its
``contract_completion.json`` records how the run completed the op's contract, and
every later stage (a resumed loop, integrate) calls the kernel that way
(:func:`completed_in_run`), never with today's rules.
``work/integrate/<run>/`` is what integrate made of a run (:class:`IntegrateFolder`: the patch,
the trees, the report, the PR bundle); the A/A runs and the self-check keep theirs beside it.

What must stay true:
- A task's ``src/`` holds exactly the bytes ``task.json`` records: :func:`load_task`
  refuses anything else with the fix (re-extract), since a build compiles ``src/`` alone.
- ``task.json`` is rewritten only through :func:`save_task` (staging file + rename).
"""

from __future__ import annotations

import hashlib
import os
import pathlib
from collections.abc import Mapping
from dataclasses import dataclass

from contract.completion import Completion, apply, instantiation_key
from contract.errors import TaskMissing
from pipeline.errors import ConfigError, StaleRecordError
from pipeline.record_io import read_record, write_record
from pipeline.records import Task

TASKS_DIR = "tasks"  # under the work dir: one folder per op
RUNS_DIR = "runs"  # under the work dir: one folder per optimize run
TASK_FILE = "task.json"
SRC_DIR = "src"
KEY_FILE = ".extract-key"
COMPLETION_FILE = "contract_completion.json"  # beside an op's trajectory in a run folder
TRAJECTORY_FILE = "trajectory.jsonl"  # an op's rounds in a run folder, append-only
# a run folder: runs/<run>/{run.json, summary.json, measurements.replay.json, <op>/...}
RUN_FILE = "run.json"  # the run's mode, coder and backend (a rerun must match them)
SUMMARY_FILE = "summary.json"  # the run's per-op outcome
REPLAY_FILE = "measurements.replay.json"  # every measurement of a GPU run, for replaying it
MERGED_FILE = "merged.json"  # a merged build's provenance: which run each op's candidate came from
# an op's folder in a run: <op>/{test_plan.json, candidates/, evaluations/, best/, profiles/}
TEST_PLAN_FILE = "test_plan.json"
CANDIDATES_DIR = "candidates"  # <id>.json: each candidate's regions and steps
EVALUATIONS_DIR = "evaluations"  # <id>.<stage>.json: each evaluation of a candidate
BEST_DIR = "best"  # the validated best: candidate.json, evaluation.json, regions/<name>.txt, src/
BEST_CANDIDATE_FILE = "candidate.json"  # in best/
INTEGRATE_DIR = "integrate"  # under the work dir: integrate's folders (a run's, the A/A runs', the self-check's)
SERIES_DIR = "series"  # in an integrate folder: the combined patch as a series, one file per op family
UPSTREAM_DIR = "upstream"  # in an integrate folder: the generated SGLang tests and benchmarks, at their places


@dataclass(frozen=True)
class IntegrateFolder:
    """One folder under ``work/integrate/``: a run's (``<run>/``, :func:`integrate_folder`), the A/A
    runs' (``pristine[-<recipe>]/``, :func:`pristine_folder`) or the self-check's (``self-check/``).
    Every name inside is spelt here; the modules that write a part take the folder and ask it."""

    root: pathlib.Path

    @property
    def report(self) -> pathlib.Path:
        """The integrate report (:class:`integrate.records.IntegrateReport`), rewritten after each step."""
        return self.root / "report.json"

    @property
    def pr(self) -> pathlib.Path:
        return self.root / "PR.md"

    @property
    def patch(self) -> pathlib.Path:
        """The unified diff of every accepted candidate, against SGLang's tree."""
        return self.root / "sglang.patch"

    @property
    def patch_record(self) -> pathlib.Path:
        return self.root / "patch.json"

    @property
    def tree(self) -> pathlib.Path:
        """The patched SGLang tree the checks run (removed when integrate is done with it)."""
        return self.root / "tree"

    @property
    def aa_tree(self) -> pathlib.Path:
        """The pristine tree's byte-for-byte copy of the A/A comparison (removed after)."""
        return self.root / "tree-aa"

    @property
    def series(self) -> pathlib.Path:
        return self.root / SERIES_DIR

    @property
    def upstream(self) -> pathlib.Path:
        return self.root / UPSTREAM_DIR

    @property
    def logs(self) -> pathlib.Path:
        return self.root / "logs"

    @property
    def exchange(self) -> pathlib.Path:
        """Where the SGLang workers and the runner hand each other inputs and outputs."""
        return self.root / ".exchange"

    def cache(self, who: str) -> pathlib.Path:
        """A worker's own JIT cache (each tree builds into its own)."""
        return self.root / "cache" / who

    def e2e(self, recipe: str) -> pathlib.Path:
        """The layer timing of one recipe (by its file's stem)."""
        return self.root / "e2e" / f"{recipe}.json"

    def pristine_run(self, number: int) -> pathlib.Path:
        """The A/A runs' record ``number`` (from 1)."""
        return self.root / f"pristine-{number}.json"

    def layer_records(self) -> list[pathlib.Path]:
        """Every layer record here: each recipe's (:meth:`e2e`) and each A/A run's (:meth:`pristine_run`)."""
        return [*sorted(self.root.glob("e2e/*.json")), *sorted(self.root.glob("pristine-*.json"))]

    @property
    def self_check_record(self) -> pathlib.Path:
        return self.root / "self-check.json"

    @property
    def self_check_table(self) -> pathlib.Path:
        return self.root / "self-check.md"


def integrate_folder(work_dir: str | os.PathLike[str], run: str) -> IntegrateFolder:
    return IntegrateFolder(pathlib.Path(work_dir) / INTEGRATE_DIR / run)


def pristine_folder(work_dir: str | os.PathLike[str], recipe: str | None = None) -> IntegrateFolder:
    """The A/A runs' folder: ``pristine`` for the default recipe, ``pristine-<recipe>`` for another."""
    return IntegrateFolder(
        pathlib.Path(work_dir) / INTEGRATE_DIR / ("pristine" if recipe is None else f"pristine-{recipe}")
    )


def layer_records(work_dir: str | os.PathLike[str]) -> list[pathlib.Path]:
    """The layer records of every integrate folder of the work dir (:meth:`IntegrateFolder.layer_records`)."""
    root = pathlib.Path(work_dir) / INTEGRATE_DIR
    folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    return [path for folder in folders for path in IntegrateFolder(folder).layer_records()]


def self_check_folder(work_dir: str | os.PathLike[str]) -> IntegrateFolder:
    return IntegrateFolder(pathlib.Path(work_dir) / INTEGRATE_DIR / "self-check")


def tasks_root(work_dir: str | os.PathLike[str]) -> pathlib.Path:
    """``<work>/tasks``: every extracted task, one folder per op."""
    return pathlib.Path(work_dir) / TASKS_DIR


def task_dir(work_dir: str | os.PathLike[str], op_id: str) -> pathlib.Path:
    """``<work>/tasks/<op_id>``."""
    return tasks_root(work_dir) / op_id


def run_dir(work_dir: str | os.PathLike[str], run: str) -> pathlib.Path:
    """``<work>/runs/<run>``."""
    return pathlib.Path(work_dir) / RUNS_DIR / run


def run_op_dir(work_dir: str | os.PathLike[str], run: str, op_id: str) -> pathlib.Path:
    """``<work>/runs/<run>/<op_id>``: one op's folder in a run."""
    return run_dir(work_dir, run) / op_id


def summary_path(run_folder: str | os.PathLike[str]) -> pathlib.Path:
    """``<run>/summary.json``."""
    return pathlib.Path(run_folder) / SUMMARY_FILE


def candidate_path(op_dir: str | os.PathLike[str], candidate_id: str) -> pathlib.Path:
    """``<run>/<op>/candidates/<id>.json``."""
    return pathlib.Path(op_dir) / CANDIDATES_DIR / f"{candidate_id}.json"


def evaluation_path(op_dir: str | os.PathLike[str], candidate_id: str, stage: str) -> pathlib.Path:
    """``<run>/<op>/evaluations/<id>.<stage>.json``."""
    return pathlib.Path(op_dir) / EVALUATIONS_DIR / f"{candidate_id}.{stage}.json"


def best_candidate_path(op_dir: str | os.PathLike[str]) -> pathlib.Path:
    """``<run>/<op>/best/candidate.json``: the validated best's candidate record."""
    return pathlib.Path(op_dir) / BEST_DIR / BEST_CANDIDATE_FILE


def profile_path(op_dir: str | os.PathLike[str], candidate_id: str) -> pathlib.Path:
    """Where a run stores one candidate's Nsight Compute profile (``<run>/<op>/profiles/<id>.ncu.json``)."""
    return pathlib.Path(op_dir) / "profiles" / f"{candidate_id}.ncu.json"


def has_task(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` holds a task (its ``task.json``)."""
    return (pathlib.Path(folder) / TASK_FILE).is_file()


def save_task(task: Task, work_dir: str | os.PathLike[str]) -> pathlib.Path:
    """Rewrite ``task.json`` of an existing task folder (e.g. with its baseline build)."""
    return write_record(task, task_dir(work_dir, task.op_id) / TASK_FILE)


def load_task(folder: str | os.PathLike[str]) -> Task:
    """Read ``<folder>/task.json`` and check ``src/`` still holds exactly the recorded files.

    Raises StaleRecordError (an empty, truncated or invalid ``task.json``, another schema
    version, or ``src/`` out of step with the record), naming the file, with the fix:
    re-run ``kernelsmith extract --ops <op>``, which rewrites such a task.
    """
    folder = pathlib.Path(folder)
    path = folder / TASK_FILE
    if not path.is_file():
        raise ConfigError(f"no task at {folder} (task.json missing)", fix="run `kernelsmith extract --ops <op>` first")
    try:
        task = read_record(Task, path)
    except StaleRecordError as err:  # empty, truncated, another schema version: the fix is the same
        raise StaleRecordError(
            err.message, fix=f"re-run `kernelsmith extract --ops {folder.name}` (it rewrites a task it cannot load)"
        ) from err
    for digest in task.files:
        file = folder / SRC_DIR / digest.path
        if not file.is_file():
            raise StaleRecordError(
                f"{folder}: {SRC_DIR}/{digest.path} is missing",
                fix=f"re-run `kernelsmith extract --ops {task.op_id}`",
            )
        data = file.read_bytes()
        if len(data) != digest.size or hashlib.sha256(data).hexdigest() != digest.sha256:
            raise StaleRecordError(
                f"{folder}: {SRC_DIR}/{digest.path} differs from the bytes task.json records",
                fix=f"re-run `kernelsmith extract --ops {task.op_id}` (the task's sources are never edited in place)",
            )
    return task


def read_task_files(folder: pathlib.Path, task: Task) -> dict[str, bytes]:
    """Every recorded source file of a task, by package-relative path."""
    files = {}
    for digest in task.files:
        path = folder / SRC_DIR / digest.path
        try:
            files[digest.path] = path.read_bytes()
        except FileNotFoundError as err:
            raise TaskMissing(
                f"task file {path} is missing",
                fix=f"re-run `kernelsmith extract --ops {task.op_id}`",
            ) from err
    return files


def baseline_regions(files: Mapping[str, bytes], task: Task) -> dict[str, str]:
    """The text of every editable region of the task, as extracted (the baseline)."""
    regions = {}
    for span in task.editable:
        data = files.get(span.file)
        if data is None:
            raise TaskMissing(
                f"editable span {span.name} points at {span.file}, not in the task", fix="re-run `kernelsmith extract`"
            )
        regions[span.name] = data[span.start_byte : span.end_byte].decode("utf-8")
    return regions


def completed_in_run(task: Task, op_dir: pathlib.Path) -> Task | None:
    """The task as a run called it (its ``contract_completion.json`` applied); None when
    the run has no such record yet. Integrate and a resumed loop both read it, so
    every later call of the kernel uses the values its evaluations used."""
    path = pathlib.Path(op_dir) / COMPLETION_FILE
    if not path.exists():
        return None
    record = read_record(Completion, path)
    kept = [i for i in task.instantiations if instantiation_key(i) not in set(record.dropped)]
    return task.model_copy(update={"contract": apply(task.contract, record.filled), "instantiations": kept})
