"""One loop for "the baseline contradicts its contract -> fix the contract -> run it again".

Why: the baseline is the oracle, also about its own contract. Where a baseline
run shows that extract guessed wrong (it writes an "input", never writes an
"output", its own check demands another dtype), the contract is fixed from that
evidence and the baseline runs again. The ``bench --all`` sweep
(:func:`bench.health.check`), the optimize loop
(``optimize.loop.Loop``'s baseline evaluation) and ``bench --ops`` when an op's
baseline fails in the worker (:func:`bench.one_op.learn_contract`) all
learn this way; they differ only in how they run the baseline and where they
write what was learned, so the loop itself is this one function, and what is
fixed, how it is named and how often a baseline runs again cannot drift apart
between them.

What must stay true:
- A baseline runs at most ``repairs + 1`` times (``completion.BASELINE_REPAIRS``
  re-runs after the first), so evidence that keeps repeating never loops.
- The fixes are :func:`~contract.completion.baseline_fixes` of the current
  contract, applied through :func:`~contract.completion.refixed` (the
  completion rules run again); each fix reaches ``on_fixed`` (which names and
  records it) before the next run.
- The loop ends at a run that passed, a run marked ``final`` (nothing can be
  learned from it: a crash, a harness error), the last allowed run, a run that
  proves no fix and that ``otherwise`` cannot repair either, or when ``on_fixed``
  gives a reason to stop. It never raises on its own; a failed baseline is the
  caller's to report.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from contract.completion import BASELINE_REPAIRS, Completion, baseline_fixes, refixed
from pipeline.records import Task

R = TypeVar("R")


@dataclass(frozen=True)
class BaselineRun(Generic[R]):
    """What one run of the baseline showed, as the repair loop reads it.

    ``result`` is the caller's own record of the run (an ``Evaluation``, a worker's
    result), handed back untouched. ``evidence`` is ``WorkerResult.role_evidence``
    (tensor -> "written" / "never_written"); ``detail`` the baseline's own words
    where its check refused the call ("" when they are not the baseline's), read for
    a dtype it demands."""

    result: R
    passed: bool
    evidence: Mapping[str, str] = field(default_factory=dict)
    detail: str = ""
    final: bool = False  # nothing to learn from this run (a crash, a harness error): stop here


@dataclass(frozen=True)
class Repaired(Generic[R]):
    """How the repair loop ended: the task as last run (every fix applied) and that run."""

    task: Task
    last: BaselineRun[R]
    stopped: str = ""  # on_fixed's reason to stop early ("" when the loop ended by itself)


#: Runs the baseline of ``task`` (attempt 0 is the first run).
RunBaseline = Callable[[Task, int], BaselineRun[R]]
#: Records the fixes of one attempt (``record.filled``: the fixes, then what the rules
#: added); returns a reason to stop before running again, or "" to go on.
OnFixed = Callable[[Task, Completion, int], str]
#: Another repair where the run proved no contract fix (the sweep: drop a dtype the
#: baseline refuses, resize a synthetic shape); the task to run next, or None.
Otherwise = Callable[[Task, BaselineRun[R]], Task | None]


def repair_baseline(
    task: Task,
    task_dir: pathlib.Path | None,
    run: RunBaseline[R],
    *,
    on_fixed: OnFixed,
    otherwise: Otherwise[R] | None = None,
    repairs: int = BASELINE_REPAIRS,
) -> Repaired[R]:
    """Run the baseline, fix its contract from what it showed and run it again (see
    the module docstring); ``task_dir`` is where the completion rules read sources."""
    attempt = 0
    while True:
        last = run(task, attempt)
        if last.passed or last.final or attempt >= repairs:
            return Repaired(task, last)
        fixes = baseline_fixes(task.contract, dict(last.evidence), last.detail)
        if fixes:
            task, record = refixed(task, fixes, task_dir)
            stop = on_fixed(task, record, attempt)
            if stop:
                return Repaired(task, last, stopped=stop)
        else:
            other = otherwise(task, last) if otherwise is not None else None
            if other is None:
                return Repaired(task, last)
            task = other
        attempt += 1
