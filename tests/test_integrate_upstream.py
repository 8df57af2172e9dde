"""The SGLang-form test and benchmark integrate writes for a PR's op (integrate.upstream_tests).

CPU: generated from real tasks of the pinned wheel, the files parse, name no tool, import only
SGLang's public modules, carry literal ``register_cuda_ci`` arguments, are laid out as SGLang's
pre-commit lays Python out, and call a function SGLang's module defines; an op of no known family
says what is missing; a benchmark that breaks or hangs is a record with the reason. The GPU runs
(BENCHMARKS.md) showed the tests passing against SGLang's own tree.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess

import pytest

from contract.layout import IntegrateFolder
from integrate import upstream_tests as U

ROOT = pathlib.Path(__file__).resolve().parent.parent
ROPE = "attention.apply_rope_inplace"


def _task(op: str):
    from contract.layout import load_task
    from tests.conftest import ensure_default_tasks

    tasks = ensure_default_tasks()
    if not (tasks / op / "task.json").is_file():
        from cli.main import main

        assert main(["extract", "--no-compile", "--work-dir", str(ROOT / "work"), "--ops", op]) == 0
    return load_task(tasks / op)


OPS = [
    "activation.silu_and_mul",
    "activation.bias_gelu_tanh",
    "embeddings.compute_n_gram_ids",
    "layernorm.rmsnorm",
    "layernorm.fused_add_rmsnorm",
    "lora.kimi_k2_moe_fused_gate",
    ROPE,
]


@pytest.mark.wheel
@pytest.mark.parametrize("op", OPS)
def test_the_generated_files_are_sglangs_form_and_name_no_tool(op, sglang_source):
    task = _task(op)
    outcome = U.generate(task)
    assert isinstance(outcome, U.Generated), outcome
    group, _, name = op.partition(".")
    assert outcome.test_path == f"test/registered/kernels/ops/{group}/test_{name}.py"
    assert outcome.bench_path == f"test/registered/kernels/benchmark/{group}/bench_{name}.py"
    for text in (outcome.test_text, outcome.bench_text):
        assert "kernelsmith" not in text.lower()
        tree = ast.parse(text)
        roots = {
            (n.module if isinstance(n, ast.ImportFrom) else a.name).split(".")[0]
            for n in ast.walk(tree)
            if isinstance(n, (ast.Import, ast.ImportFrom))
            for a in (n.names if isinstance(n, ast.Import) else [n])
        }
        assert roots <= {"sglang", "torch", "pytest", "sys"}, roots
        calls = [
            n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "register_cuda_ci"
        ]
        assert len(calls) == 1 and all(isinstance(k.value, ast.Constant) for k in calls[0].keywords)
    assert "@marker.benchmark(" in outcome.bench_text and "marker.do_bench(" in outcome.bench_text
    # the function it calls is defined in the module it imports it from, in SGLang's source
    module = pathlib.Path(sglang_source.root) / task.module
    defined = {n.name for n in ast.walk(ast.parse(module.read_text())) if isinstance(n, ast.FunctionDef)}
    assert task.public_functions[0] in defined
    imported = {
        (n.module, a.name)
        for n in ast.walk(ast.parse(outcome.test_text))
        if isinstance(n, ast.ImportFrom)
        for a in n.names
    }
    assert (U._python_module(task), task.public_functions[0]) in imported


@pytest.mark.wheel
def test_the_generated_files_are_formatted_as_sglangs_pre_commit_formats(tmp_path):
    ruff = U._ruff()
    if ruff is None:
        pytest.skip("ruff is not installed")
    for op in OPS:
        U.write(U.generate(_task(op)), tmp_path)
    fmt = subprocess.run([*ruff, "format", "--isolated", "--line-length", "88", "--check", "."], cwd=tmp_path)
    lint = subprocess.run(
        [*ruff, "check", "--isolated", "--select", "E,F,W,I", "--line-length", "88", "--config", U._FIRST_PARTY, "."],
        cwd=tmp_path,
    )
    assert fmt.returncode == 0 and lint.returncode == 0


@pytest.mark.wheel
def test_the_cases_are_the_catalogs_plus_unaligned_token_counts_and_ci_is_a_subset():
    task = _task("activation.silu_and_mul")
    family = U.FAMILIES[task.op_id]
    cases = U.case_sizes(task, family)
    full, ci = U.ranges(cases, family)
    assert set(ci) <= set(full) and 2 <= len(ci) <= 3
    assert {c[0] for c in full} >= set(family.odd_tokens)
    assert set(cases) <= set(full)
    test = ast.parse(U.generate(task).test_text)
    literal = next(
        k.value for n in ast.walk(test) if isinstance(n, ast.Call) for k in n.keywords if k.arg == "full_range"
    )
    assert max(ast.literal_eval(literal), key=lambda c: c[0])[0] <= U.TEST_MAX_TOKENS, "a unit test stays small"


@pytest.mark.wheel
def test_an_op_with_no_reference_says_what_is_missing_and_writes_nothing(tmp_path):
    task = _task(ROPE).model_copy(update={"op_id": "attention.apply_rope_inplace_with_kvcache"})
    outcome = U.generate(task)
    assert isinstance(outcome, U.NotGenerated) and "no torch reference" in outcome.missing
    record = U.check(task, tmp_path, tmp_path / "a", tmp_path / "b", run=False)
    assert not record.generated and record.missing == outcome.missing
    assert not (IntegrateFolder(tmp_path).upstream).exists()


@pytest.mark.wheel
def test_without_a_gpu_the_files_are_written_and_nothing_is_claimed(tmp_path):
    record = U.check(_task(ROPE), tmp_path, tmp_path / "a", tmp_path / "b", run=False)
    assert record.generated and record.test is None and record.bench == []
    assert (IntegrateFolder(tmp_path).upstream / record.test_file).is_file()
    assert (IntegrateFolder(tmp_path).upstream / record.bench_file).is_file()


@pytest.mark.wheel
def test_a_benchmark_that_breaks_or_hangs_is_a_record_with_the_reason(tmp_path, monkeypatch):
    generated = U.generate(_task("activation.silu_and_mul"))
    U.write(generated, tmp_path)

    def broken(argv, **kwargs):
        return subprocess.CompletedProcess(
            argv, 1, "", "Traceback ...\nModuleNotFoundError: No module named 'IPython'\n"
        )

    monkeypatch.setattr(U.subprocess, "run", broken)
    run = U.run_bench(generated, tmp_path, tmp_path / "pkg", "pristine", tmp_path / "cache", tmp_path / "b.log")
    assert not run.ran and run.reason == "exit 1: ModuleNotFoundError: No module named 'IPython'"
    assert "IPython" in (tmp_path / "b.log").read_text()

    def hangs(argv, **kwargs):
        raise subprocess.TimeoutExpired(argv, kwargs.get("timeout"))

    monkeypatch.setattr(U.subprocess, "run", hangs)
    run = U.run_bench(generated, tmp_path, tmp_path / "pkg", "patched", tmp_path / "cache", tmp_path / "b.log")
    assert not run.ran and run.reason.startswith("timed out after")


def test_formatting_leaves_the_text_as_written_where_ruff_is_absent(monkeypatch):
    monkeypatch.setattr(U.shutil, "which", lambda *a, **k: None)
    assert U.formatted("x  =  1\n") == "x  =  1\n"
