"""An op's baseline, the oracle every round is judged against: its contract completed, its test plan
written and its own evaluation passed, once per run.

Why a module of its own: before the first round of any coder (the loop's, or an outside agent's
through :mod:`agent`), and at every companion op a candidate is judged at (:mod:`optimize.reach_ops`),
the baseline must be settled the same way: what the contract left open filled, the cases to check
planned, and the baseline's own code shown to pass them. :class:`optimize.session.Session` opens an
op with these steps and records round 0 with what they give it.

- :func:`completed_task`: the task with its contract completed (``contract_completion.json``), and
  what a ``--no-compile`` task's nvcc refuses left out of the run;
- :func:`write_test_plan`: the op's test plan (``test_plan.json``);
- :func:`baseline_evaluation`: the baseline's evaluation, the contract fixed where the baseline
  contradicts it; :func:`with_dropped`: its detail, with what the run left out.

What must stay true: each is decided once per run and kept in the op's folder, so a resumed run
reads it back and calls the kernel exactly as before; a baseline that does not pass its own
evaluation after the bounded repairs raises :class:`BaselineError`, never becomes a round.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable

from contract import layout
from contract.completion import Completion
from contract.layout import COMPLETION_FILE as RECORD_FILE
from contract.layout import completed_in_run
from optimize.agents import testing
from optimize.backends import Backend
from optimize.harness.baseline_repair import BaselineRun, repair_baseline
from optimize.harness.errors import BaselineError
from optimize.hooks import CaseValidator
from optimize.llm.client import Model
from optimize.run_folder import OpState
from pipeline.record_io import read_record, write_record
from pipeline.records import Task
from pipeline.run_records import Candidate, Evaluation, Outcome

#: A backend's ``buildable(task_dir, task)``: a ``--no-compile`` task without the instantiations nvcc
#: refuses, their keys and nvcc's reason; None when nothing is to drop (the GPU backend's).
Buildable = Callable[[pathlib.Path, Task], "tuple[Task, list[str], str] | None"]

#: What one baseline run gave the repair loop: its evaluation, or the error the backend raised.
BaselineOutcome = Evaluation | BaselineError


def completed_task(op: OpState, backend: Backend, model: Model | None) -> Task:
    """The task with what its contract left open filled (rules, then the testing
    agent's model), decided once per run and kept in ``contract_completion.json``
    so a resumed run calls the kernel exactly as before."""
    recorded = completed_in_run(op.task, op.dir)
    if recorded is not None:
        return recorded
    task, record = testing.complete_contract(op.task, op.task_dir, model=model)
    narrow: Buildable | None = getattr(backend, "buildable", None)
    found = narrow(op.task_dir, task) if narrow is not None else None
    if found is not None:  # extracted with --no-compile: what nvcc refuses is left out of the whole run
        task, dropped, why = found
        record = record.model_copy(update={"dropped": dropped, "dropped_reason": why})
    write_record(record, op.dir / RECORD_FILE)
    return task


def write_test_plan(op: OpState, backend: Backend, model: Model | None, *, held_out: int) -> None:
    """The op's test plan (its cases; ``held_out`` fresh shapes drawn per evaluation), planned once per run."""
    plan_path = op.dir / layout.TEST_PLAN_FILE
    if not plan_path.exists():
        validate: CaseValidator | None = getattr(backend, "validate_cases", None)
        plan = testing.plan_tests(
            op.task,
            held_out=held_out,
            model=model,
            validate=(lambda cases: validate(op.task_dir, op.task, cases)) if validate else None,
        )
        write_record(plan, plan_path)


def baseline_evaluation(op: OpState, candidate: Candidate, evaluate: Callable[[Candidate], Evaluation]) -> Evaluation:
    """The baseline's own evaluation (``evaluate``: the session's round evaluation of the op as it
    is then). The baseline is the oracle: where it contradicts its contract (writes an input, never
    writes an output, its check demands another dtype), the contract is fixed
    (``completion.baseline_fixes``), the fix appended to the run's ``contract_completion.json`` and
    the baseline evaluated again, at most ``completion.BASELINE_REPAIRS`` times
    (:func:`optimize.harness.baseline_repair.repair_baseline`, the loop the sweep uses too); the
    stale evaluation is kept as ``*.superseded-<attempt>.json``."""

    def run_once(task: Task, attempt: int) -> BaselineRun[BaselineOutcome]:
        op.task = task
        try:
            evaluation = evaluate(candidate)
        except BaselineError as err:
            return BaselineRun(err, passed=False, evidence=err.evidence, detail=err.detail)
        passed = evaluation.outcome == Outcome.ok
        return BaselineRun(evaluation, passed=passed, evidence=evaluation.role_evidence, detail=evaluation.detail)

    def on_fixed(task: Task, more: Completion, attempt: int) -> str:
        path = op.dir / RECORD_FILE
        record = read_record(Completion, path)
        write_record(record.model_copy(update={"filled": [*record.filled, *more.filled], "open": more.open}), path)
        stale = op.eval_path(candidate.id, "round")
        if stale.exists():
            stale.rename(stale.with_name(f"{stale.stem}.superseded-{attempt}.json"))
        return ""

    repaired = repair_baseline(op.task, op.task_dir, run_once, on_fixed=on_fixed)
    op.task = repaired.task
    outcome = repaired.last.result
    if isinstance(outcome, BaselineError):
        raise outcome
    if outcome.outcome != Outcome.ok:
        raise BaselineError(
            f"the baseline of {op.task.op_id} did not pass its own evaluation ({outcome.outcome.value})",
            fix="check the task (`kernelsmith extract`) and the harness on this machine",
            detail=outcome.detail,
        )
    return outcome


def with_dropped(detail: str, op: OpState) -> str:
    """The baseline's detail, with what the run left out of a ``--no-compile`` task and why."""
    completion = op.dir / RECORD_FILE
    why = read_record(Completion, completion).dropped_reason if completion.is_file() else ""
    return (
        f"{detail}; left out of this run (the task was extracted without its compile check): {why}" if why else detail
    )
