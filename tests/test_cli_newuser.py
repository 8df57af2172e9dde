"""Issue 47, a new user's first hour: the command line answers bad input in one line with the fix,
before any work, and never blames Kernelsmith for the user's input."""

from __future__ import annotations

import pathlib

import pytest
from test_loop import REPLAY, write_task

from extract.command import closest
from pipeline.cli import main


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_a_typo_is_answered_with_the_nearest_ids_of_both_languages():
    cuda = ["activation.silu_and_mul", "activation.gelu_and_mul", "layernorm.rmsnorm"]
    triton = ["activation.silu_and_mul_clamp_triton", "activation.gelu_and_mul_triton", "activation.swiglu_oai_split"]
    assert closest("activation.silu_and_mull", [*triton, *cuda])[0] == "activation.silu_and_mul"
    assert closest("rmsnorm", [*triton, *cuda]) == ["layernorm.rmsnorm"]  # a bare function name
    assert closest("nothing.like.it", cuda) == []


@pytest.mark.wheel
def test_extract_answers_a_cuda_typo_with_the_cuda_op(capsys, sglang_source):
    work = pathlib.Path(__file__).resolve().parent.parent / "work"  # the tests' work folder: its index is cached
    code, text = run_cli(capsys, "extract", "--ops", "activation.silu_and_mull", "--work-dir", str(work))
    assert code == 2 and "Traceback" not in text
    assert "(closest: activation.silu_and_mul," in text


def test_an_unknown_search_strategy_is_refused_before_any_work(tmp_path, capsys):
    write_task(tmp_path)
    code, text = run_cli(
        capsys,
        "optimize",
        "--ops",
        "demo.scale",
        "--work-dir",
        str(tmp_path),
        "--search",
        "bogus",
        "--replay",
        str(REPLAY),
    )
    assert code == 2 and "unknown search strategy 'bogus'" in text and "genetic_algorithm" in text
    assert not (tmp_path / "runs").exists(), "nothing was started: no run folder"
