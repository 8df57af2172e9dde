"""cli.run: the stage order, the shared run name, the clean stop without a GPU.

The stages are replaced by recorders through ``cli.run.stages`` (each receives the
typed options the pipeline chose for it); what is tested is the orchestration: what
runs, in which order, with which options, and what the exit code and message are.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from cli import run as run_mod
from cli.main import main as cli_main
from cli.parser import build_parser
from extract.command import ExtractOptions
from integrate.command import IntegrateOptions

CALLS: list[tuple[str, object]] = []
CODES: dict[str, int] = {}
CONFIGS: dict[str, object] = {}


def _stage(name):
    def stage(args, config):
        CALLS.append((name, args))
        CONFIGS[name] = config
        return CODES.get(name, 0)

    return stage


extract_stage, optimize_stage, integrate_stage = _stage("extract"), _stage("optimize"), _stage("integrate")


@pytest.fixture(autouse=True)
def recorders(monkeypatch, tmp_path):
    CALLS.clear()
    CODES.clear()
    CONFIGS.clear()
    monkeypatch.setattr(run_mod, "stages", lambda: run_mod.Stages(extract_stage, optimize_stage, integrate_stage))
    monkeypatch.chdir(tmp_path)


def _run(argv, gpu: bool, monkeypatch, capsys):
    monkeypatch.setattr(run_mod, "has_gpu", lambda: (gpu, "NVIDIA H200" if gpu else "torch sees no CUDA device"))
    code = cli_main(["run", *argv])
    return code, capsys.readouterr().err


def test_without_gpu_it_stops_cleanly_after_extract(monkeypatch, capsys):
    code, err = _run(["--ops", "activation.silu_and_mul"], False, monkeypatch, capsys)
    assert code == 0
    assert [name for name, _ in CALLS] == ["extract"]
    args = CALLS[0][1]
    assert args == ExtractOptions(ops=("activation.silu_and_mul",), no_compile=False)
    assert "no GPU: stopped after extract (and its compile check); run on a GPU machine for optimize/integrate" in err
    assert "torch sees no CUDA device" in err


def test_a_failing_extract_stops_with_its_code(monkeypatch, capsys):
    CODES["extract"] = 2
    code, err = _run([], True, monkeypatch, capsys)
    assert code == 2 and [name for name, _ in CALLS] == ["extract"]
    assert "stopped: extract failed (exit 2)" in err


def test_with_gpu_all_stages_share_one_run(monkeypatch, capsys):
    code, err = _run(["--ops", "layernorm.rmsnorm", "--rounds", "3", "--work-dir", "w"], True, monkeypatch, capsys)
    assert code == 0
    names = [name for name, _ in CALLS]
    assert names == ["extract", "optimize", "integrate"]
    _, opt = CALLS[1]
    _, integ = CALLS[2]
    assert opt.run and opt.run == integ.run and opt.run.startswith("run-")
    assert opt.ops == ("layernorm.rmsnorm",) and opt.mode == "multi" and opt.replay is None
    assert CONFIGS["optimize"].budget.rounds == 3, "--rounds reaches optimize through the config the flags make"
    assert integ == IntegrateOptions(run=opt.run)
    assert all(config.work.name == "w" for config in CONFIGS.values())
    assert (
        f"] == integrate (run {opt.run})" in err and f"s] done: extract, optimize and integrate of run {opt.run}" in err
    )
    assert all(line.startswith("[") for line in err.splitlines() if "== " in line), "each stage says when it began"
    assert CALLS[0][1].no_compile is True, "with a GPU, optimize's own build is the compile check"


def test_a_named_run_is_passed_on_so_a_rerun_resumes(monkeypatch, capsys):
    code, _ = _run(["--run", "nightly"], True, monkeypatch, capsys)
    assert code == 0
    assert [args.run for name, args in CALLS if name != "extract"] == ["nightly", "nightly"]


def test_a_failing_stage_after_extract_is_reported(monkeypatch, capsys):
    CODES["optimize"] = 1
    code, err = _run([], True, monkeypatch, capsys)
    assert code == 1 and [name for name, _ in CALLS] == ["extract", "optimize"]
    assert "re-run `kernelsmith optimize --run run-" in err
    CALLS.clear()
    CODES.clear()
    CODES["integrate"] = 1
    code, err = _run([], True, monkeypatch, capsys)
    assert code == 1 and "integrate reported a failure" in err


def test_stage_options_are_what_the_stage_flags_give():
    """``kernelsmith run --all`` hands each stage the options its own command line would give it."""
    from cli.stages import extract_options, integrate_options

    args = build_parser().parse_args(["run", "--all", "--sglang", "/src", "--sglang-version", "0.5.23"])
    assert run_mod.stage_options("extract", args, "run-x") == extract_options(
        build_parser().parse_args(["extract", "--all"])
    )
    assert run_mod.stage_options("integrate", args, "run-x") == integrate_options(
        build_parser().parse_args(["integrate", "--run", "run-x"])
    )


def test_pipeline_run_imports_without_torch():
    code = "import sys, cli.run, cli.main, integrate.command, integrate.sglang_runner; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_optimize_inside_run_gets_the_run_wall_budget_unless_the_budget_is_lower(monkeypatch, capsys):
    """Issue 14 item 7: the default job fits ten minutes, so optimize inside ``run`` is capped."""
    code, err = _run([], True, monkeypatch, capsys)
    assert code == 0 and CONFIGS["optimize"].budget.wall_s == 300.0
    assert CONFIGS["integrate"].budget.wall_s == 3600.0, "only optimize's budget is capped"
    assert "wall budget 300 s: run.optimize_wall_s; 16 points a round in populations of 8" in err
    assert (CONFIGS["optimize"].search.evals_per_round, CONFIGS["optimize"].search.population) == (16, 8)
    assert (CONFIGS["optimize"].search.promote, CONFIGS["integrate"].search.promote) == (1, 2)
    assert CONFIGS["integrate"].search.evals_per_round == 32, "only optimize's search is capped"
    monkeypatch.setenv("KERNELSMITH_BUDGET__WALL_S", "120")
    code, _ = _run([], True, monkeypatch, capsys)
    assert code == 0 and CONFIGS["optimize"].budget.wall_s == 120.0, "a lower budget.wall_s stays"
    monkeypatch.setenv("KERNELSMITH_RUN__OPTIMIZE_WALL_S", "60")
    code, _ = _run([], True, monkeypatch, capsys)
    assert code == 0 and CONFIGS["optimize"].budget.wall_s == 60.0
    monkeypatch.setenv("KERNELSMITH_SEARCH__POPULATION", "4")
    code, _ = _run([], True, monkeypatch, capsys)
    assert code == 0 and CONFIGS["optimize"].search.population == 4, "a smaller population stays"
