"""What differs between a CUDA task and a Triton task for the coders and the search: the coder's half
of the language seam, over the measurement core's half (:mod:`optimize.harness.languages`, ``build``).

Why: ``Task.language`` decides which edits the agents write and the offline search offers, what
the prompts carry, and which code only other ops run; nothing else in the loop should care. So it
asks :func:`language_of` and calls a :class:`Language`; there is no ``if task.language == "triton"``
anywhere else on those paths. How a candidate is built and pre-checked is ``Language.build``.

- :class:`Cuda`: the search's proposals are the policy's (``proposed()``); other ops' launchers in
  the same files are :mod:`optimize.reach`'s.
- :class:`Triton`: the proposals are the task's tunables
  (:func:`optimize.search.triton_space.decisions`); its regions are its own wrapper's launches and
  the kernels they start, so none is another op's.

The coders (issue 19 item 4): :attr:`Language.dialect` is how the LLM agents show regions and read
replies (:class:`optimize.agents.edits.Dialect`: CUDA's templates and C++ tokens, or Python's fences,
tokens and the ``*_triton.md`` templates), :meth:`Language.prompt_facts` what the prompts add (a
Triton task's tunables, autotune configs and token buckets), :meth:`Language.coder_decisions` the
options the planner picks from (Triton: a free rewrite, then the tunables not tried yet), and
``Language.build.compile_check`` what ``agent build`` answers (Triton: triton.compile for sm_90;
CUDA: None, nvcc's build is the check).

What must stay true: one entry per value of ``Task.language`` (:data:`LANGUAGES`), each method
pure over its arguments.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from optimize.agents.edits import CUDA, PYTHON, Dialect
from optimize.harness.languages import Build, CudaBuild, TritonBuild
from pipeline.records import Task
from pipeline.target import TARGET

if TYPE_CHECKING:
    from optimize.policy import Decision
    from optimize.reach import Foreign
    from optimize.trajectory import HistoryEntry

#: The free-rewrite option a Triton task's planner offers the LLM coder (no skill file: the plan is the model's).
TRITON_REWRITE = "triton_rewrite"


class Language(Protocol):
    """The coder's half of a language: what the agents and the search need, over its :class:`Build`."""

    name: str
    dialect: Dialect  # how the LLM agents show its regions and read the replies
    build: Build  # how its candidates are built and pre-checked (the harness's half)

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

    def search_decisions(
        self, task: Task, task_dir: str | os.PathLike[str], proposed: Callable[[], list[Decision]]
    ) -> list[Decision]:
        """The proposals a search round spans (``proposed``: the policy's, asked only where they apply)."""
        ...

    def foreign_code(self, task: Task, regions: Mapping[str, str], files: Mapping[str, bytes]) -> Foreign:
        """The code of ``task`` only other ops run (:mod:`optimize.reach`; ``files``: the task's sources): never edited unmeasured."""
        ...


class Cuda:
    name = "cuda"
    dialect = CUDA
    build: Build = CudaBuild()

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
    build: Build = TritonBuild()

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
            reasons=[f"the model's own change, checked by triton.compile for {TARGET.arch} before any GPU time"],
        )
        failed = {(h.skill, params_key(h.params)) for h in history if h.failed}
        return [d for d in [rewrite, *decisions(task, pathlib.Path(task_dir))] if d.key not in failed]

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


__all__ = ["LANGUAGES", "TRITON_REWRITE", "Cuda", "Language", "Triton", "language_of"]
