"""``evaluate``: one candidate (or the baseline alone) built, checked and timed.

Flow: plan the cases (catalog shapes, plus held-out shapes drawn fresh from
``os.urandom`` for this evaluation) -> build the baseline and the candidate
(only the instantiations those cases need) -> one worker process runs the
correctness checks and then the interleaved timing -> an
:class:`~pipeline.run_records.Evaluation`.

Outcomes (the closed set in :class:`~pipeline.run_records.Outcome`):

- ``compile_failed``: the regions do not splice, or nvcc/the linker fails (a Triton task: its
  spliced file does not parse, :mod:`optimize.harness.triton_library`);
- ``incorrect``: a check failed (the detail names the tensor, element, expected
  and actual value, the shape, dtype, distribution, layout and seed), or the
  outputs of a timed CUDA graph differ from the baseline's (the detail names the
  buffer set as well), or a timed median is below the physical floor
  (:func:`optimize.harness.verdict.implausible_times`);
- ``crashed``: a CUDA fault, an abort or a non-zero exit of the worker (the
  detail carries the worker's stderr tail);
- ``timeout``: the worker outlived ``harness.worker_timeout_s`` and was killed;
- ``slower``: correct, but the geometric-mean speedup over the timed shapes is
  below 1 by more than the noise threshold (the larger of
  ``harness.noise_pct`` and the median per-shape spread);
- ``ok``: correct and not slower ("no change" is ok; the detail says which).

What must stay true:
- The baseline is never blamed on the candidate: a baseline that fails to build
  or that fails on a catalog shape raises :class:`BaselineError`.
- The harness's own failures raise :class:`HarnessError` (never ``crashed``).
- This module imports no torch: the parent process only builds and waits.
"""

from __future__ import annotations

import os
import pathlib
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO

from contract.completion import instantiation_key
from contract.dtypes import cpp_spelling
from contract.plan import layouts_for
from contract.shapes import draw_held_out
from contract.sizes import instantiations_for, refused_by_checks, resolve_sizes, select_instantiation
from optimize.harness import isolate
from optimize.harness.errors import BaselineError, GpuRequired, HarnessError
from optimize.harness.languages import build_of
from optimize.harness.protocol import DISTRIBUTIONS, CheckCase, TimingCase, WorkerRequest
from optimize.harness.verdict import to_evaluation
from pipeline.config import Config
from pipeline.records import DTYPES, BuildReport, Instantiation, ShapeCase, Task
from pipeline.run_records import Candidate, Evaluation, Outcome

TIMING_DTYPES_DEFAULT = ("bf16",)  # the dtype models are served in; others are checked, not timed


@dataclass
class CasePlan:
    """What one evaluation will run: the build units and the worker's cases."""

    units: list[list[Instantiation]]  # each built into one module (at most one instantiation per dtype)
    checks: list[CheckCase]
    timings: list[TimingCase]
    held_out: list[ShapeCase] = field(default_factory=list)


def task_dtypes(task: Task) -> list[str]:
    return sorted({i.dtype for i in instantiations_for(task.contract, task.instantiations)})


def plan_cases(
    task: Task,
    *,
    shapes: Sequence[ShapeCase] | None = None,
    held_out: int = 0,
    rng: random.Random | None = None,
    timing_dtypes: Sequence[str] | None = None,
    profile: bool = True,
) -> CasePlan:
    """Cases for one evaluation (pure; the RNG decides held-out shapes and seeds).

    Checks: every catalog shape in every dtype (normal inputs, contiguous), and
    ``held_out`` fresh shapes in every dtype, cycling through the normal, uniform
    and edge distributions and, where the contract allows a padded row stride,
    alternating contiguous and strided layouts. Held-out cases come first: they
    are small and catch most cheats fastest. Timings: the catalog shapes in
    ``timing_dtypes`` (default bf16, else the first dtype the task has).
    """
    from pipeline.build_plan import export_name

    rng = rng or random.Random(int.from_bytes(os.urandom(8), "little"))
    contract = task.contract
    catalog = list(shapes if shapes is not None else task.shapes)
    # A model shape the kernel's own checks refuse is one SGLang never calls it with
    # ("prefill rows must be in [4096, 65536]" at T=1): it is not a test case. When the
    # checks refuse every shape given, they are kept: a check extract translated wrongly
    # must not hide the op, and the baseline itself then says what it refuses.
    refused = {s.label for s in catalog if refused_by_checks(contract, s, task.shapes or catalog)}
    if len(refused) < len(catalog):
        catalog = [s for s in catalog if s.label not in refused]
    dtypes = task_dtypes(task)
    if not dtypes:
        raise HarnessError(
            f"{task.op_id}: no instantiation exports the contract's entry {contract.entry!r}",
            fix="re-run `kernelsmith extract` for this op",
        )
    drawn = (
        draw_held_out(
            contract, task.shapes or catalog, held_out, rng, instantiations=task.instantiations, dtypes=dtypes
        )
        if held_out
        else []
    )
    layouts = layouts_for(contract)
    units = _UsedUnits(canonical_units(task))

    def sizes_of(shape: ShapeCase) -> dict[str, int]:
        return resolve_sizes(contract, shape, task.shapes or catalog)

    checks: list[CheckCase] = []
    for index, shape in enumerate(drawn):
        sizes = sizes_of(shape)
        for j, dtype in enumerate(dtypes):
            inst = select_instantiation(contract, task.instantiations, dtype, sizes)
            checks.append(
                CheckCase(
                    label=shape.label,
                    sizes=sizes,
                    dtype=dtype,
                    export=export_name(contract.entry, inst),
                    unit=units.index(inst),
                    distribution=DISTRIBUTIONS[(index + j) % len(DISTRIBUTIONS)],
                    layout=layouts[(index + j) % len(layouts)],
                    held_out=True,
                    seed=rng.getrandbits(62),
                )
            )
    for shape in catalog:
        sizes = sizes_of(shape)
        for dtype in dtypes:
            inst = select_instantiation(contract, task.instantiations, dtype, sizes)
            checks.append(
                CheckCase(
                    label=shape.label,
                    sizes=sizes,
                    dtype=dtype,
                    export=export_name(contract.entry, inst),
                    unit=units.index(inst),
                    distribution="normal",
                    layout="contiguous",
                    held_out=False,
                    seed=rng.getrandbits(62),
                )
            )
    timings: list[TimingCase] = []
    if profile:
        wanted = (
            list(timing_dtypes) if timing_dtypes else [d for d in TIMING_DTYPES_DEFAULT if d in dtypes] or dtypes[:1]
        )
        for shape in catalog:
            sizes = sizes_of(shape)
            for dtype in wanted:
                if dtype not in dtypes:
                    continue
                inst = select_instantiation(contract, task.instantiations, dtype, sizes)
                timings.append(
                    TimingCase(
                        label=shape.label,
                        sizes=sizes,
                        dtype=dtype,
                        export=export_name(contract.entry, inst),
                        unit=units.index(inst),
                        tokens=shape.tokens,
                    )
                )
    return CasePlan(units=units.built(), checks=checks, timings=timings, held_out=drawn)


def canonical_units(task: Task) -> list[list[Instantiation]]:
    """The task's instantiations of the entry, grouped into build units, the same way every time.

    A unit holds the instantiations that differ only in dtype (the builder takes
    at most one per dtype): rmsnorm's unit for width 4096 is {bf16@4096,
    fp16@4096}. Because the grouping depends on the task alone, never on which
    shapes an evaluation happens to draw, a unit's build key is stable and its
    module is built once and then served from the build cache.
    """
    dtype_spellings = {cpp_spelling(d) for d in DTYPES} | set(DTYPES)
    groups: dict[tuple[str, ...], list[Instantiation]] = {}
    for inst in instantiations_for(task.contract, task.instantiations):
        key = tuple(arg for arg in inst.template_args if arg.strip() not in dtype_spellings)
        groups.setdefault(key, [])
        if all(other.dtype != inst.dtype for other in groups[key]):
            groups[key].append(inst)
        else:  # same non-dtype arguments twice for one dtype: give it a unit of its own
            groups[key + (f"#{len(groups)}",)] = [inst]
    return [sorted(groups[key], key=lambda i: i.dtype) for key in sorted(groups)]


@dataclass
class _UsedUnits:
    """The canonical units one plan needs, numbered in the order the plan first asks for them.

    Only these are built, so a case's ``unit`` is its index into :meth:`built`.
    """

    canonical: list[list[Instantiation]]
    used: dict[int, int] = field(default_factory=dict)  # canonical index -> index among the built units

    def index(self, inst: Instantiation) -> int:
        canonical_index = next(i for i, unit in enumerate(self.canonical) if inst in unit)
        return self.used.setdefault(canonical_index, len(self.used))

    def built(self) -> list[list[Instantiation]]:
        return [self.canonical[i] for i, _ in sorted(self.used.items(), key=lambda item: item[1])]


# ---------------------------------------------------------------------------- building


def build_units(
    task_dir: str | os.PathLike[str],
    task: Task,
    units: Sequence[Sequence[Instantiation]],
    *,
    config: Config,
    regions: dict[str, str] | None = None,
    max_workers: int | None = None,
    isolate: bool = False,
) -> tuple[BuildReport, list[str]]:
    """Build every unit in the task's language (:func:`optimize.harness.languages.build_of`: nvcc modules
    in parallel, or a Triton task's spliced file); returns the merged report and one library path per unit.

    Raises whatever the splice raises for bad regions (the caller turns it into
    ``compile_failed``) and ToolchainError for a broken machine. ``max_workers`` and
    ``isolate`` are :func:`pipeline.build.build_many`'s.
    """
    return build_of(task).build_units(
        task_dir, task, units, config=config, regions=regions, max_workers=max_workers, isolate=isolate
    )


def without_refused(
    task: Task, units: Sequence[Sequence[Instantiation]], build: Callable[[list[list[Instantiation]]], BuildReport]
) -> tuple[Task, list[Instantiation]] | None:
    """(``task`` without the instantiations nvcc refuses, those refused), each of ``units``'
    instantiations built alone by ``build``; None when none or every one is refused.

    Why: a task extracted with ``--no-compile`` keeps instantiations extract's compile check
    would have dropped (a template that static_asserts "only fp16/bf16 supported" at fp32);
    that is an op without the variant, not an op that does not build. The sweep
    (:func:`bench.health.build_one`) and ``bench``/``track run``
    (:func:`bench.bench`) both narrow this way.
    """
    singles = [inst for unit in units for inst in unit]
    if len(singles) < 2:
        return None
    refused = [inst for inst in singles if not build([[inst]]).ok]
    if not refused or len(refused) == len(singles):
        return None
    return task.model_copy(update={"instantiations": [i for i in task.instantiations if i not in refused]}), refused


def buildable(
    task_dir: str | os.PathLike[str], task: Task, *, config: Config
) -> tuple[Task, list[Instantiation], str] | None:
    """(``task`` without the instantiations nvcc refuses, those, the reason) for a task extracted
    without its compile check (``--no-compile``) whose baseline does not build as it is; None when it
    builds, was compile-checked at extraction, or nothing narrower builds either (the baseline's own
    error then says why). The optimize loop calls it once per op and run, before the baseline."""
    if task.baseline_build is not None:
        return None
    plan = plan_cases(task, held_out=0, profile=False)
    report, _ = build_units(task_dir, task, plan.units, config=config)
    if report.ok:
        return None
    found = without_refused(task, plan.units, lambda units: build_units(task_dir, task, units, config=config)[0])
    if found is None:
        return None
    narrowed, refused = found
    return narrowed, refused, refusal(refused, report.stderr)


def prebuild(
    folders: Sequence[tuple[pathlib.Path, Task]],
    config: Config,
    *,
    dtypes: Sequence[str] | None,
    stream: TextIO | None = None,
    ops_at_once: int | None = None,
    unit_jobs: int | None = 1,
) -> list[bool]:
    """Every task's baseline built into the build cache, ``ops_at_once`` ops at once (default ``search.build_jobs``),
    ``unit_jobs`` units each (None: every core); whether each built, in ``folders``' order. Why: the census spent
    15 s an op, one nvcc at a time (H200, 2026-12-02). A failure here is left to the op's own build, which
    reports it in its row."""
    from concurrent.futures import ThreadPoolExecutor

    def one(item: tuple[pathlib.Path, Task]) -> bool:
        path, task = item
        try:
            plan = plan_cases(task, held_out=0, timing_dtypes=dtypes, profile=True)
            report, _ = build_units(path, task, plan.units, config=config, max_workers=unit_jobs)
        except Exception:  # noqa: BLE001 - the op's own build, in the loop, says what went wrong
            return False
        return report.ok

    start = time.monotonic()
    jobs = max(1, min(ops_at_once or config.search.build_jobs, len(folders)))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        built = list(pool.map(one, folders))
    print(
        f"built {sum(built)} of {len(folders)} baselines at once ({jobs} jobs) in {time.monotonic() - start:.0f} s",
        file=stream or sys.stdout,
        flush=True,
    )
    return built


def refusal(refused: Sequence[Instantiation], stderr: str) -> str:
    """ "nvcc refuses fp32 <fp32_t> (its first error)": what a row says of :func:`without_refused`'s drops."""
    from pipeline.compiler_output import first_error

    which = ", ".join(instantiation_key(i) for i in refused)
    return f"nvcc refuses {which} ({first_error(stderr)[:160]})"


@dataclass
class CandidateBuild:
    """A candidate's modules, or the ``compile_failed`` evaluation saying why there are none."""

    report: BuildReport | None
    libraries: list[str]
    seconds: float  # since ``started``
    failed: Evaluation | None = None


def build_candidate(
    task_dir: str | os.PathLike[str],
    task: Task,
    units: Sequence[Sequence[Instantiation]],
    candidate: Candidate,
    *,
    config: Config,
    started: float,
    max_workers: int | None = None,
) -> CandidateBuild:
    """:func:`build_units` for a candidate: regions that do not splice, or nvcc failing, is ``compile_failed``."""
    report: BuildReport | None = None
    libs: list[str] = []
    try:
        report, libs = build_units(
            task_dir, task, units, config=config, regions=candidate.regions, max_workers=max_workers
        )
    except (KeyError, ValueError) as err:
        detail = f"the regions cannot be spliced into the sources: {err}"
    else:
        if report.ok:
            return CandidateBuild(report, libs, time.monotonic() - started)
        detail = isolate.tail(report.stderr)
    seconds = time.monotonic() - started
    failed = Evaluation(
        op_id=task.op_id,
        candidate=candidate.id,
        outcome=Outcome.compile_failed,
        detail=detail,
        build=report,
        seconds={"build": round(seconds, 3)},
    )
    return CandidateBuild(report, libs, seconds, failed)


def build_baseline(
    task_dir: str | os.PathLike[str], task: Task, units: Sequence[Sequence[Instantiation]], *, config: Config
) -> tuple[BuildReport, list[str]]:
    """:func:`build_units` for the baseline: a baseline that does not build raises, never blames a candidate."""
    report, libs = build_units(task_dir, task, units, config=config)
    if not report.ok:
        if task.baseline_build is None:  # extracted with --no-compile: nothing dropped what cannot build
            fix = (
                f"this task was extracted without its compile check (`extract --no-compile`), which keeps only the "
                f"instantiations that build: re-run `kernelsmith extract --ops {task.op_id}` (nvcc output below)"
            )
        else:
            fix = f"check the toolchain (nvcc output below), then re-run `kernelsmith extract --ops {task.op_id}`"
        raise BaselineError(f"the baseline of {task.op_id} does not build", fix=fix, detail=report.stderr)
    return report, libs


# ---------------------------------------------------------------------------- evaluate


def worker_dir(config: Config, op_id: str, tag: str) -> pathlib.Path:
    """A fresh folder for one worker run under work/harness (its request, result and logs)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
    safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in f"{op_id}-{tag}")[:80]
    return config.work / "harness" / f"{stamp}-{safe}"


def run_request(request: WorkerRequest, config: Config, workdir: pathlib.Path) -> isolate.WorkerRun:
    """Run the worker; raise for the harness's own failures and for a missing GPU."""
    from optimize.harness.worker import EXIT_HARNESS, EXIT_NO_GPU

    run = isolate.run_worker(
        request,
        workdir,
        timeout_s=config.harness.worker_timeout_s,
        use_sandbox=config.harness.sandbox,
        stall_s=config.harness.stall_s,
    )
    if run.status == "crashed" and run.returncode == EXIT_NO_GPU:
        raise GpuRequired(
            "the evaluation worker found no CUDA device", fix="run on the GPU machine", detail=run.stderr_tail
        )
    if run.status == "crashed" and run.returncode == EXIT_HARNESS:
        raise HarnessError(
            "the evaluation worker failed in harness code (not in a kernel)",
            fix="report this with the worker's request file",
            detail=f"request: {workdir / 'request.json'}\n{run.stderr_tail}",
        )
    return run


def evaluate(
    task_dir: str | os.PathLike[str],
    task: Task,
    candidate: Candidate | None,
    *,
    config: Config,
    shapes: Sequence[ShapeCase] | None = None,
    held_out: bool = True,
    profile: bool = True,
    timing_dtypes: Sequence[str] | None = None,
) -> Evaluation:
    """Build, check and time ``candidate`` against the baseline; see the module doc.

    ``candidate=None`` evaluates the baseline on its own: its outputs are checked
    for completeness and against the reference, and it is timed alone.
    """
    started = time.monotonic()
    cid = candidate.id if candidate is not None else "baseline"
    plan = plan_cases(
        task,
        shapes=shapes,
        held_out=config.harness.held_out_shapes if held_out else 0,
        timing_dtypes=timing_dtypes,
        profile=profile,
    )
    base_report, base_libs = build_baseline(task_dir, task, plan.units, config=config)
    cand_report: BuildReport | None = None
    cand_libs: list[str] | None = None
    if candidate is not None:
        built = build_candidate(task_dir, task, plan.units, candidate, config=config, started=started)
        if built.failed is not None:
            return built.failed
        cand_report, cand_libs = built.report, built.libraries
    build_s = time.monotonic() - started
    request = worker_request(
        task, base_libs, config=config, candidate_libraries=cand_libs, checks=plan.checks, timings=plan.timings
    )
    workdir = worker_dir(config, task.op_id, cid[:16])
    run = run_request(request, config, workdir)
    return to_evaluation(
        task.op_id,
        cid,
        run,
        build=cand_report or base_report,
        build_s=build_s,
        config=config,
        candidate_given=candidate is not None,
    )


def worker_request(
    task: Task,
    baseline_libraries: list[str],
    *,
    config: Config,
    candidate_libraries: list[str] | None = None,
    checks: Sequence[CheckCase] = (),
    timings: Sequence[TimingCase] = (),
    **options: Any,
) -> WorkerRequest:
    """A worker request for ``task`` (mode "evaluate" unless ``options`` says otherwise): its contract,
    the modules, the cases, the harness settings and where the device's figures and a Triton task's
    package live. ``candidate_libraries``: the candidate's modules (another release's, for the release
    A/B); ``options``: the request's other fields (``mode``, ``stop_at_first_failure``, ...)."""
    return WorkerRequest(
        mode=options.pop("mode", "evaluate"),
        op_id=task.op_id,
        contract=task.contract,
        baseline_libraries=baseline_libraries,
        candidate_libraries=candidate_libraries,
        checks=list(checks),
        timings=list(timings),
        harness=config.harness,
        device_cache_dir=str(config.cache / "device"),
        sglang_package=build_of(task).sglang_package(task, config),
        **options,
    )


def validate_cases(
    task_dir: str | os.PathLike[str], task: Task, cases: Sequence[Any], *, config: Config
) -> list[tuple[bool, str]]:
    """Run proposed cases (objects with ``label``, ``sizes``, ``distribution``) on the baseline alone.

    For the testing agent: a proposal is kept only if the baseline runs it
    cleanly (writes every output, matches the reference). One verdict per case,
    in order.
    """
    from pipeline.build_plan import export_name

    rng = random.Random(int.from_bytes(os.urandom(8), "little"))
    dtypes = task_dtypes(task)
    checks: list[CheckCase] = []
    owners: list[int] = []
    units = _UsedUnits(canonical_units(task))
    verdicts: list[tuple[bool, str]] = [(True, "")] * len(cases)
    for index, case in enumerate(cases):
        sizes = {k: int(v) for k, v in case.sizes.items()}
        for dtype in dtypes:
            try:
                inst = select_instantiation(task.contract, task.instantiations, dtype, sizes)
            except Exception as err:  # noqa: BLE001 - reported per case
                verdicts[index] = (False, str(err))
                continue
            unit = units.index(inst)
            checks.append(
                CheckCase(
                    label=str(case.label),
                    sizes=sizes,
                    dtype=dtype,
                    export=export_name(task.contract.entry, inst),
                    unit=unit,
                    distribution=getattr(case, "distribution", "edge"),
                    held_out=True,
                    seed=rng.getrandbits(62),
                )
            )
            owners.append(index)
    if not checks:
        return verdicts
    _, libs = build_baseline(task_dir, task, units.built(), config=config)
    request = worker_request(task, libs, config=config, checks=checks, stop_at_first_failure=False)
    run = run_request(request, config, worker_dir(config, task.op_id, "validate"))
    if run.result is None:
        return [(False, f"{run.summary}: {run.stderr_tail[-300:]}")] * len(cases)
    if run.result.status == "baseline_failed":
        return [(False, run.result.detail)] * len(cases)
    for owner, check in zip(owners, run.result.checks):
        if check.status != "pass" and verdicts[owner][0]:
            verdicts[owner] = (False, check.reason)
    if len(run.result.checks) < len(owners):
        for owner in owners[len(run.result.checks) :]:
            if verdicts[owner][0]:
                verdicts[owner] = (False, run.result.detail or "not run")
    return verdicts
