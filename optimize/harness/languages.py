"""What differs between building a CUDA task and a Triton task, in one place: the measurement core's half of the language seam.

Why: ``Task.language`` decides how a candidate becomes something the worker can call and what can be
checked of it before any GPU time; nothing else in the harness should care. So it asks
:func:`build_of` and calls a :class:`Build`; what the coders and the search need of a language (its
dialect, its options, its facts) is the other half, :mod:`optimize.languages`, above the harness.

- :class:`CudaBuild`: nvcc builds through :func:`pipeline.build.build_many` (one tvm-ffi module per
  build unit); no check before the build (nvcc is the check).
- :class:`TritonBuild`: the wrapper's file with the regions spliced in, one library for every unit
  (:mod:`optimize.harness.triton_library`); before a point reaches the backend it is compiled for
  sm_90 on this machine (:func:`optimize.harness.triton_check.check_point`), so a point Triton
  refuses is ``compile_failed`` at no GPU cost; the worker gets the carried sglang package.

What must stay true: one entry per value of ``Task.language`` (:data:`BUILDS`), each method pure over
its arguments except for the build cache it writes; a refused check is an
:class:`~pipeline.run_records.Evaluation` with an outcome of the closed set, never an exception.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from extract.splice import candidate_overrides
from pipeline.config import Config
from pipeline.records import BuildReport, Instantiation, Task
from pipeline.run_records import Candidate, Evaluation, Outcome
from pipeline.target import TARGET

if TYPE_CHECKING:
    from pipeline.build import BuildJob


class Build(Protocol):
    """The measurement core's half of a language: how its candidates are built and pre-checked."""

    name: str

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


class CudaBuild:
    name = "cuda"

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


class TritonBuild:
    name = "triton"

    def compile_check(
        self, task_dir: str | os.PathLike[str], task: Task, regions: Mapping[str, str]
    ) -> BuildReport | None:
        """Triton's compile for sm_90 on this machine (:func:`optimize.harness.triton_check.check_point`):
        ok, or the parser's or Triton's message in the regions' own line numbers."""
        from optimize.harness.triton_check import check_point

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
        """Triton's compiler for sm_90 on this machine (:func:`optimize.harness.triton_check.check_point`)."""
        from optimize.harness.triton_check import check_point

        check = check_point(pathlib.Path(task_dir), task, candidate.regions, point=candidate.id)
        if check.outcome == Outcome.ok:
            return None
        return Evaluation(
            op_id=task.op_id,
            candidate=candidate.id,
            outcome=check.outcome,
            detail=f"refused by Triton's compile check for {TARGET.arch} on the CPU (no GPU time spent): {check.stderr}",
            seconds={"build": check.seconds},
        )


BUILDS: dict[str, Build] = {"cuda": CudaBuild(), "triton": TritonBuild()}


def build_of(task: Task) -> Build:
    """The :class:`Build` of ``task`` (``Task.language``)."""
    return BUILDS[task.language]


__all__ = ["BUILDS", "Build", "CudaBuild", "TritonBuild", "build_of", "cuda_jobs"]
