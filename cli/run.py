"""``kernelsmith run``: extract -> optimize -> integrate on the default ops, end to end.

Each stage is called in-process through its typed entry point, ``run(options, config)``
(:mod:`extract.command`, :mod:`optimize.command`, :mod:`integrate.command`), with the options
this pipeline run chose, and one run name shared by optimize and integrate.

On a machine without a GPU only extraction (with its nvcc compile check)
can run. ``run`` then stops with a message saying so and what to run on a GPU
machine, and exits 0 if nothing that ran failed: "no GPU" is where this
machine ends, not an error. Any stage that fails stops the pipeline with that
stage's exit code; results written so far are kept. Each run gets a new
time-stamped name unless ``--run NAME`` is given: re-running with the same
``--run`` resumes (extract keeps current tasks, optimize resumes its trajectory).
Optimize's wall budget and its search rounds are capped by ``run.*`` (:class:`pipeline.config.RunConfig`),
so the whole job on the default ops fits ten minutes on the H200.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cli.parser import ops_of
from pipeline.config import Config

if TYPE_CHECKING:
    from extract.command import ExtractOptions
    from integrate.command import IntegrateOptions
    from optimize.command import OptimizeOptions

NO_GPU_MESSAGE = (
    "no GPU: stopped after extract (and its compile check); run on a GPU machine for optimize/integrate: "
    "`kernelsmith run` there, or `kernelsmith optimize --run {run}` then `kernelsmith integrate --run {run}`"
)


@dataclass(frozen=True)
class Stages:
    """The three stage entry points; tests put recorders here."""

    extract: Callable[[ExtractOptions, Config], int]
    optimize: Callable[[OptimizeOptions, Config], int]
    integrate: Callable[[IntegrateOptions, Config], int]


def stages() -> Stages:
    """The stages' ``run`` functions, imported when the pipeline runs (extract needs no torch)."""
    from extract import command as extract_command
    from integrate import command as integrate_command
    from optimize import command as optimize_command

    return Stages(extract_command.run, optimize_command.run, integrate_command.run)


def stage_options(stage: str, args: argparse.Namespace, run: str, *, gpu: bool = False) -> Any:
    """The options ``kernelsmith <stage>`` would be given for this pipeline run.

    With a GPU, extract skips its compile check: optimize builds every baseline
    module first anyway, and a baseline that does not build stops its op there with
    nvcc's output (on the H200, 2026-12-01, the check alone took 117 s for rmsnorm).
    """
    ops = ops_of(args)
    all_ops = bool(getattr(args, "all", False))
    if stage == "extract":
        from extract.command import ExtractOptions

        return ExtractOptions(ops=ops, all_ops=all_ops, no_compile=gpu)
    if stage == "optimize":
        from optimize.command import OptimizeOptions

        return OptimizeOptions(ops=ops, all_ops=all_ops, run=run)
    if stage == "integrate":
        from integrate.command import IntegrateOptions

        return IntegrateOptions(run=run)
    raise ValueError(f"no stage {stage!r}")


def has_gpu() -> tuple[bool, str]:
    """(True, device) when torch sees a CUDA device; torch is imported only if installed."""
    from pipeline.gpu import gpu_available

    return gpu_available()


def run_capped(config: Config) -> Config:
    """``config`` with optimize's wall budget and search rounds capped by ``run.*`` (the lower wins)."""
    budget = config.budget.model_copy(update={"wall_s": min(config.budget.wall_s, config.run.optimize_wall_s)})
    search = config.search.model_copy(
        update={
            "evals_per_round": min(config.search.evals_per_round, config.run.search_evals_per_round),
            "population": min(config.search.population, config.run.search_population),
            "promote": min(config.search.promote, config.run.search_promote),
        }
    )
    return config.model_copy(update={"budget": budget, "search": search})


def main(args: argparse.Namespace, config: Config, *, using: Stages | None = None) -> int:
    """``kernelsmith run`` (see the module doc); ``using`` replaces the stages (tests)."""
    called = using or stages()
    run = getattr(args, "run", None) or datetime.datetime.now().strftime("run-%Y%m%d-%H%M%S")
    started = time.monotonic()

    def say(text: str) -> None:  # each line says when in the run it was printed (item 7's ten minutes)
        print(f"[{time.monotonic() - started:5.0f} s] {text}", file=sys.stderr)

    gpu, device = has_gpu()
    say("== extract" + (" (no compile check: optimize builds the baselines on this GPU machine)" if gpu else ""))
    code = int(called.extract(stage_options("extract", args, run, gpu=gpu), config) or 0)
    if code != 0:
        say(f"stopped: extract failed (exit {code}); fix the error above and re-run `kernelsmith run`")
        return code

    if not gpu:
        say(NO_GPU_MESSAGE.format(run=run) + f" ({device})")
        return 0

    capped = run_capped(config)
    say(
        f"== optimize (run {run}, {device}, wall budget {capped.budget.wall_s:g} s: run.optimize_wall_s; "
        f"{capped.search.evals_per_round} points a round in populations of {capped.search.population})"
    )
    code = int(called.optimize(stage_options("optimize", args, run), capped) or 0)
    if code != 0:
        say(f"stopped: optimize failed (exit {code}); re-run `kernelsmith optimize --run {run}` to resume")
        return code

    say(f"== integrate (run {run})")
    code = int(called.integrate(stage_options("integrate", args, run), config) or 0)
    if code != 0:
        say(f"integrate reported a failure (exit {code}); see work/integrate/{run}/PR.md")
    else:
        say(f"done: extract, optimize and integrate of run {run}")
    return code
