"""``kernelsmith run``: extract -> optimize -> integrate on the default ops, end to end.

Each stage is called in-process through its own command ``main(args, config)``,
with the Namespace the real command line would give it (built by
:func:`pipeline.cli.build_parser`, so every flag a stage reads has its
default), and one run name shared by optimize and integrate.

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
import importlib
import sys
import time
from collections.abc import Callable
from typing import Any

# stage -> "module:function" receiving (args, config); tests may point these elsewhere
STAGES: dict[str, str] = {
    "extract": "extract.command:main",
    "optimize": "optimize.command:main",
    "integrate": "integrate.command:main",
}
NO_GPU_MESSAGE = (
    "no GPU: stopped after extract (and its compile check); run on a GPU machine for optimize/integrate: "
    "`kernelsmith run` there, or `kernelsmith optimize --run {run}` then `kernelsmith integrate --run {run}`"
)


def _stage(name: str) -> Callable[[argparse.Namespace, Any], int]:
    module, func = STAGES[name].split(":")
    return getattr(importlib.import_module(module), func)


def _common_argv(args: argparse.Namespace) -> list[str]:
    argv: list[str] = []
    for flag, attr in (
        ("--config", "config"),
        ("--work-dir", "work_dir"),
        ("--sglang", "sglang"),
        ("--sglang-version", "sglang_version"),
    ):
        value = getattr(args, attr, None)
        if value:
            argv += [flag, str(value)]
    return argv


def _ops_argv(args: argparse.Namespace) -> list[str]:
    if getattr(args, "all", False):
        return ["--all"]
    ops = getattr(args, "ops", None)
    return ["--ops", *ops] if ops else []


def stage_args(stage: str, args: argparse.Namespace, run: str, *, gpu: bool = False) -> argparse.Namespace:
    """The Namespace ``kernelsmith <stage> ...`` would parse for this pipeline run.

    With a GPU, extract skips its compile check: optimize builds every baseline
    module first anyway, and a baseline that does not build stops its op there with
    nvcc's output (on the H200, 2026-12-01, the check alone took 117 s for rmsnorm).
    """
    from pipeline.cli import build_parser

    argv = [stage, *_common_argv(args)]
    if stage in ("extract", "optimize"):
        argv += _ops_argv(args)
    if stage == "extract" and gpu:
        argv += ["--no-compile"]
    if stage == "optimize":
        argv += ["--run", run]
        if getattr(args, "rounds", None) is not None:
            argv += ["--rounds", str(args.rounds)]
    if stage == "integrate":
        argv += ["--run", run]
    return build_parser().parse_args(argv)


def has_gpu() -> tuple[bool, str]:
    """(True, device) when torch sees a CUDA device; torch is imported only if installed."""
    from pipeline.gpu import gpu_available

    return gpu_available()


def run_capped(config: Any) -> Any:
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


def main(args: argparse.Namespace, config: Any) -> int:
    run = getattr(args, "run", None) or datetime.datetime.now().strftime("run-%Y%m%d-%H%M%S")
    started = time.monotonic()

    def say(text: str) -> None:  # each line says when in the run it was printed (item 7's ten minutes)
        print(f"[{time.monotonic() - started:5.0f} s] {text}", file=sys.stderr)

    gpu, device = has_gpu()
    say("== extract" + (" (no compile check: optimize builds the baselines on this GPU machine)" if gpu else ""))
    code = int(_stage("extract")(stage_args("extract", args, run, gpu=gpu), config) or 0)
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
    code = int(_stage("optimize")(stage_args("optimize", args, run), capped) or 0)
    if code != 0:
        say(f"stopped: optimize failed (exit {code}); re-run `kernelsmith optimize --run {run}` to resume")
        return code

    say(f"== integrate (run {run})")
    code = int(_stage("integrate")(stage_args("integrate", args, run), config) or 0)
    if code != 0:
        say(f"integrate reported a failure (exit {code}); see work/integrate/{run}/PR.md")
    else:
        say(f"done: extract, optimize and integrate of run {run}")
    return code
