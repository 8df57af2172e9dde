"""What differs between a CUDA task and a Triton task, in one place: the typed seam the harness and the loop ask.

Why: ``Task.language`` decides how a candidate becomes something the worker can call, what can
be checked of it before any GPU time, and which edits the offline search offers; nothing else
in the harness or the loop should care. So they ask :func:`language_of` and call a
:class:`Language`; there is no ``if task.language == "triton"`` anywhere else on those paths.

- :class:`Cuda`: nvcc builds through :func:`pipeline.build.build_many` (one tvm-ffi module per
  build unit); no check before the build (nvcc is the check); the search's proposals are the
  policy's (``proposed()``); other ops' launchers in the same files are :mod:`optimize.reach`'s.
- :class:`Triton`: the wrapper's file with the regions spliced in, one library for every unit
  (:mod:`optimize.harness.triton_library`); before a search point reaches the backend it is
  compiled for sm_90 on this machine (:func:`optimize.search.triton_check.check_point`), so a
  point Triton refuses is ``compile_failed`` at no GPU cost; the proposals are the task's
  tunables (:func:`optimize.search.triton_space.decisions`); the worker gets the carried sglang
  package (:meth:`Triton.sglang_package`); its regions are its own wrapper's launches and the
  kernels they start, so none is another op's.

The coders (issue 19 item 4): :attr:`Language.dialect` is how the LLM agents show regions and read
replies (:class:`optimize.agents.edits.Dialect`: CUDA's templates and C++ tokens, or Python's fences,
tokens and the ``*_triton.md`` templates), :meth:`Language.prompt_facts` what the prompts add (a
Triton task's tunables, autotune configs and token buckets), :meth:`Language.coder_decisions` the
options the planner picks from (Triton: a free rewrite, then the tunables not tried yet), and
:meth:`Language.compile_check` what ``agent build`` answers (Triton: :meth:`precheck`'s compile
check; CUDA: None, nvcc's build is the check). The loop's
precheck (:func:`optimize.measure.evaluate_once`) refuses a Triton candidate that does not parse or
compile before any GPU time, with the message in the region's own line numbers.

What must stay true: one entry per value of ``Task.language`` (:data:`LANGUAGES`), each method
pure over its arguments except for the build cache it writes; a refused check is an
:class:`~pipeline.records.Evaluation` with an outcome of the closed set, never an exception.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from extract.splice import candidate_overrides
from optimize.agents.edits import CUDA, PYTHON, Dialect
from pipeline.config import Config
from pipeline.records import BuildReport, Candidate, Evaluation, Instantiation, Outcome, Task

if TYPE_CHECKING:
    from optimize.policy import Decision
    from optimize.reach import Foreign
    from optimize.trajectory import HistoryEntry
    from pipeline.build import BuildJob

#: The free-rewrite option a Triton task's planner offers the LLM coder (no skill file: the plan is the model's).
TRITON_REWRITE = "triton_rewrite"


class Language(Protocol):
    """The seam: how one language's candidates are built, pre-checked and searched."""

    name: str
    dialect: Dialect  # how the LLM agents show its regions and read the replies

    def prompt_facts(self, task: Task, task_dir: str | os.PathLike[str]) -> str:
        """What the agents' prompts carry about the task beyond its regions ("" for none)."""
        ...

    def task_facts(self, task: Task, task_dir: str | os.PathLike[str]) -> dict[str, Any]:
        """The same facts as data, for ``agent show`` ({} for none)."""
        ...

    def coder_decisions(
        self,
        task: Task,
        task_dir: str | os.PathLike[str],
        proposed: Callable[[], list[Decision]],
        history: Sequence[HistoryEntry],
    ) -> list[Decision]:
        """The options the LLM planner (and the single agent) choose from, never one that failed before."""
        ...

    def compile_check(
        self, task_dir: str | os.PathLike[str], task: Task, regions: Mapping[str, str]
    ) -> BuildReport | None:
        """``agent build``'s answer when it is not the harness's build (None: build the units)."""
        ...

    def build_units(
        self,
        task_dir: str | os.PathLike[str],
        task: Task,
        units: Sequence[Sequence[Instantiation]],
        *,
        config: Config,
        regions: Mapping[str, str] | None = None,
        max_workers: int | None = None,
        isolate: bool = False,
    ) -> tuple[BuildReport, list[str]]:
        """(the merged report, one library path per unit); a failure is ``report.ok`` False, never raised."""
        ...

    def sglang_package(self, task: Task, config: Config) -> str | None:
        """The sglang package folder the worker imports ``sglang.<...>`` from, or None."""
        ...

    def precheck(self, task_dir: str | os.PathLike[str], task: Task, candidate: Candidate) -> Evaluation | None:
        """``candidate``'s evaluation when a check on this machine already refuses it (no GPU time), else None."""
        ...

    def search_decisions(
        self, task: Task, task_dir: str | os.PathLike[str], proposed: Callable[[], list[Decision]]
    ) -> list[Decision]:
        """The proposals a search round spans (``proposed``: the policy's, asked only where they apply)."""
        ...

    def foreign_code(self, task: Task, regions: Mapping[str, str], files: Mapping[str, bytes]) -> Foreign:
        """The code of ``task`` only other ops run (:mod:`optimize.reach`; ``files``: the task's sources): never edited unmeasured."""
        ...


def cuda_jobs(
    task_dir: str | os.PathLike[str],
    task: Task,
    units: Sequence[Sequence[Instantiation]],
    *,
    config: Config,
    regions: Mapping[str, str] | None = None,
) -> list[BuildJob]:
    """One nvcc job per unit, with the candidate's regions spliced in and its spans moved to match."""
    from pipeline.build import BuildJob, relocate_spans

    overrides = candidate_overrides(task_dir, task, regions) if regions is not None else None
    editable = tuple(relocate_spans(task.editable, dict(regions))) if regions else tuple(task.editable)
    return [
        BuildJob(
            task_dir=pathlib.Path(task_dir),
            task=task,
            instantiations=tuple(unit),
            cache_root=config.cache / "builds",
            overrides=overrides,
            editable=editable,
        )
        for unit in units
    ]


class Cuda:
    name = "cuda"
    dialect = CUDA

    def prompt_facts(self, task: Task, task_dir: str | os.PathLike[str]) -> str:
        return ""  # the CUDA templates and the regions say it all

    def task_facts(self, task: Task, task_dir: str | os.PathLike[str]) -> dict[str, Any]:
        return {}  # `agent show` has the contract, shapes, ptxas and ncu

    def coder_decisions(
        self,
        task: Task,
        task_dir: str | os.PathLike[str],
        proposed: Callable[[], list[Decision]],
        history: Sequence[HistoryEntry],
    ) -> list[Decision]:
        return proposed()  # the policy's skills, already free of failed repeats

    def compile_check(
        self, task_dir: str | os.PathLike[str], task: Task, regions: Mapping[str, str]
    ) -> BuildReport | None:
        return None  # nvcc through the harness's own build units is the check

    def build_units(
        self,
        task_dir: str | os.PathLike[str],
        task: Task,
        units: Sequence[Sequence[Instantiation]],
        *,
        config: Config,
        regions: Mapping[str, str] | None = None,
        max_workers: int | None = None,
        isolate: bool = False,
    ) -> tuple[BuildReport, list[str]]:
        """nvcc over every unit in parallel. Raises what the splice raises for bad regions (the caller's
        ``compile_failed``) and ToolchainError for a broken machine."""
        from pipeline.build import build_many, merge_reports

        reports = build_many(
            cuda_jobs(task_dir, task, units, config=config, regions=regions), max_workers=max_workers, isolate=isolate
        )
        return merge_reports(reports), [r.library or "" for r in reports]

    def sglang_package(self, task: Task, config: Config) -> str | None:
        return None  # a tvm-ffi module needs no Python package

    def precheck(self, task_dir: str | os.PathLike[str], task: Task, candidate: Candidate) -> Evaluation | None:
        return None  # nvcc, in the backend's build, is the check

    def search_decisions(
        self, task: Task, task_dir: str | os.PathLike[str], proposed: Callable[[], list[Decision]]
    ) -> list[Decision]:
        return proposed()

    def foreign_code(self, task: Task, regions: Mapping[str, str], files: Mapping[str, bytes]) -> Foreign:
        from optimize.reach import foreign_code, outside_text, task_wrappers

        return foreign_code(regions, task_wrappers(task), outside_text(files, task.editable))


class Triton:
    name = "triton"
    dialect = PYTHON

    def prompt_facts(self, task: Task, task_dir: str | os.PathLike[str]) -> str:
        """The tunables, autotune configs, launch keywords and token buckets (:func:`optimize.search.triton_space.facts`)."""
        from optimize.search.triton_space import facts_text

        return facts_text(self.task_facts(task, task_dir))

    def task_facts(self, task: Task, task_dir: str | os.PathLike[str]) -> dict[str, Any]:
        from optimize.search.triton_space import facts

        return facts(task, pathlib.Path(task_dir))

    def coder_decisions(
        self,
        task: Task,
        task_dir: str | os.PathLike[str],
        proposed: Callable[[], list[Decision]],
        history: Sequence[HistoryEntry],
    ) -> list[Decision]:
        """A free rewrite (:data:`TRITON_REWRITE`, the LLM codes it), then the task's tunables (each applied by
        its transform, exactly): those a round already tried and that failed or came out slower are left out,
        the CUDA policy's rule."""
        from optimize.policy import Decision
        from optimize.search.triton_space import decisions
        from optimize.trajectory import params_key

        rewrite = Decision(
            skill=TRITON_REWRITE,
            version=1,
            title="rewrite the @triton.jit kernel or its launch (the plan says how)",
            verdict="proposed",
            mode="llm",
            reasons=["the model's own change, checked by triton.compile for sm_90 before any GPU time"],
        )
        failed = {(h.skill, params_key(h.params)) for h in history if h.failed}
        return [d for d in [rewrite, *decisions(task, pathlib.Path(task_dir))] if d.key not in failed]

    def compile_check(
        self, task_dir: str | os.PathLike[str], task: Task, regions: Mapping[str, str]
    ) -> BuildReport | None:
        """Triton's compile for sm_90 on this machine (:func:`optimize.search.triton_check.check_point`):
        ok, or the parser's or Triton's message in the regions' own line numbers."""
        from optimize.search.triton_check import check_point

        check = check_point(pathlib.Path(task_dir), task, regions)
        return BuildReport(ok=check.outcome == Outcome.ok, key="", seconds=check.seconds, stderr=check.stderr)

    def build_units(
        self,
        task_dir: str | os.PathLike[str],
        task: Task,
        units: Sequence[Sequence[Instantiation]],
        *,
        config: Config,
        regions: Mapping[str, str] | None = None,
        max_workers: int | None = None,
        isolate: bool = False,
    ) -> tuple[BuildReport, list[str]]:
        """The spliced file in the build cache (:func:`optimize.harness.triton_library.build_units`)."""
        from optimize.harness import triton_library

        return triton_library.build_units(task_dir, task, units, cache_root=config.cache / "triton", regions=regions)

    def sglang_package(self, task: Task, config: Config) -> str | None:
        """The task's own source tree when it is on this machine, else the configured one
        (:func:`extract.sources.acquire`: the pinned wheel, unpacked); None where neither is."""
        from extract.sources import acquire
        from pipeline.errors import KernelsmithError

        recorded = pathlib.Path(task.source.root)
        if (recorded / task.module).is_file():
            return str(recorded)
        try:
            return acquire(config.sglang.version, config.cache, config.sglang.src).root
        except KernelsmithError:  # a file importing sglang then fails in the worker, saying what is missing
            return None

    def precheck(self, task_dir: str | os.PathLike[str], task: Task, candidate: Candidate) -> Evaluation | None:
        """Triton's compiler for sm_90 on this machine (:func:`optimize.search.triton_check.check_point`)."""
        from optimize.search.triton_check import check_point

        check = check_point(pathlib.Path(task_dir), task, candidate.regions, point=candidate.id)
        if check.outcome == Outcome.ok:
            return None
        return Evaluation(
            op_id=task.op_id,
            candidate=candidate.id,
            outcome=check.outcome,
            detail=f"refused by Triton's compile check for sm_90 on the CPU (no GPU time spent): {check.stderr}",
            seconds={"build": check.seconds},
        )

    def search_decisions(
        self, task: Task, task_dir: str | os.PathLike[str], proposed: Callable[[], list[Decision]]
    ) -> list[Decision]:
        """The task's tunables (launch options, block sizes, autotune pins), per token bucket."""
        from optimize.search.triton_space import decisions

        return decisions(task, pathlib.Path(task_dir))

    def foreign_code(self, task: Task, regions: Mapping[str, str], files: Mapping[str, bytes]) -> Foreign:
        """None: a Triton task's regions are the kernels its wrapper launches and that wrapper's own launch sites."""
        from optimize.reach import Foreign

        return Foreign()


LANGUAGES: dict[str, Language] = {"cuda": Cuda(), "triton": Triton()}


def language_of(task: Task) -> Language:
    """The :class:`Language` of ``task`` (``Task.language``)."""
    return LANGUAGES[task.language]


__all__ = ["LANGUAGES", "Cuda", "Language", "Triton", "cuda_jobs", "language_of"]
