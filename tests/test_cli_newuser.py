"""Issue 47, a new user's first hour: the command line answers bad input in one line with the fix,
before any work, and never blames Kernelsmith for the user's input."""

from __future__ import annotations

import pathlib

import pytest
from test_loop import REPLAY, write_task

from cli.main import main
from extract.command import closest


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


def test_version_says_the_installed_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"kernelsmith {version('kernelsmith')}"


def test_a_region_file_that_is_not_text_is_the_users_input_not_a_bug(tmp_path, capsys):
    write_task(tmp_path)
    binary = tmp_path / "region.bin"
    binary.write_bytes(b"\xff\xfe\x00\x81 not text")
    code, text = run_cli(
        capsys, "agent", "build", "demo.scale", "--region", f"scale_kernel={binary}", "--work-dir", str(tmp_path)
    )
    assert code == 2 and "Traceback" not in text and "Kernelsmith bug" not in text
    assert f"{binary} is not UTF-8 text" in text and "fix:" in text


def test_optimize_json_prints_one_document_on_stdout_and_progress_elsewhere(tmp_path, capsys):
    import json

    write_task(tmp_path)
    argv = ["optimize", "--ops", "demo.scale", "--work-dir", str(tmp_path), "--coder", "offline"]
    code = main([*argv, "--replay", str(REPLAY), "--run", "j1", "--json"])
    captured = capsys.readouterr()
    doc = json.loads(captured.out)  # stdout is the document and nothing else
    assert doc["command"] == "optimize" and doc["exit_code"] == code == 0
    assert doc["result"]["run"] == "j1" and doc["result"]["simulated"] is True
    assert [op["op_id"] for op in doc["result"]["ops"]] == ["demo.scale"]
    assert "run folder:" in captured.err


def test_quiet_drops_the_progress_and_keeps_the_errors(tmp_path, capsys):
    write_task(tmp_path)
    argv = ["optimize", "--ops", "demo.scale", "--work-dir", str(tmp_path), "--coder", "offline", "--replay"]
    assert main([*argv, str(REPLAY), "--run", "q1", "--quiet"]) == 0
    assert capsys.readouterr().out == ""
    assert main([*argv, str(tmp_path / "missing.json"), "--run", "q2", "--quiet"]) != 0
    assert "missing.json" in capsys.readouterr().err


def test_track_json_on_an_empty_store(tmp_path, capsys):
    import json

    assert main(["track", "--work-dir", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["result"] == {"batches": 0, "regressions": [], "ops": []}
