"""integrate.sglang_tests: choosing SGLang's test files, running pytest against a patched tree, real counts."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap

from test_integrate_patch import OP, act_span, make_task

from integrate.sglang_tests import find_tests, op_tests, parse_junit, parse_summary, run_tests
from pipeline.records import Task


def _task(sglang_source, tmp_path, op_id=OP) -> Task:
    from contract.layout import load_task

    return load_task(make_task(tmp_path / "work", sglang_source, op_id, [act_span(pathlib.Path(sglang_source.root))]))


def _checkout(tmp_path: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    repo = tmp_path / "checkout"
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return repo


def test_find_tests_by_name_then_by_module(sglang_source, tmp_path):
    task = _task(sglang_source, tmp_path)  # module kernels/ops/activation/activation.py
    ops = "test/registered/kernels/ops"
    repo = _checkout(
        tmp_path,
        {
            f"{ops}/activation/test_activation.py": "from sglang.kernels.ops.activation.activation import run_activation\n",
            f"{ops}/activation/test_softcap.py": "from sglang.kernels.ops.activation.softcap import x\n",
            f"{ops}/activation/sub/test_more.py": "import sglang.kernels.ops.activation.activation as a\n",
            f"{ops}/layernorm/test_rmsnorm.py": "from sglang.kernels.ops.activation.activation import silu_and_mul\n",
            f"{ops}/activation/helper.py": "import sglang.kernels.ops.activation.activation\n",
        },
    )
    # nothing names silu_and_mul in the group folder: every file importing the op's module is chosen
    assert [p.relative_to(repo / ops).as_posix() for p in find_tests(repo, task)] == [
        "activation/sub/test_more.py",
        "activation/test_activation.py",
    ]
    (repo / ops / "activation" / "test_silu_and_mul_extra.py").write_text("def test_x(): pass\n")
    (repo / ops / "activation" / "test_uses.py").write_text(
        "from sglang.kernels.ops.activation.activation import silu_and_mul\n"
    )
    assert [p.name for p in find_tests(repo, task)] == ["test_silu_and_mul_extra.py", "test_uses.py"]
    assert find_tests(tmp_path / "nothing", task) == []


def _pytest_output(tmp_path: pathlib.Path) -> tuple[str, pathlib.Path]:
    """A real pytest run with 2 passed, 1 failed, 1 skipped, 1 xfailed."""
    test = tmp_path / "suite" / "test_mix.py"
    test.parent.mkdir(parents=True)
    test.write_text(
        textwrap.dedent(
            """
            import pytest
            def test_a(): pass
            def test_b(): pass
            def test_c(): assert 1 == 2
            @pytest.mark.skip(reason="no")
            def test_d(): pass
            @pytest.mark.xfail
            def test_e(): assert False
            """
        )
    )
    junit = tmp_path / "suite" / "junit.xml"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", str(test)],
        capture_output=True,
        text=True,
        cwd=test.parent,
        timeout=120,
    )
    return done.stdout, junit


def test_counts_come_from_pytests_own_reports(tmp_path):
    output, junit = _pytest_output(tmp_path)
    summary, counts = parse_summary(output)
    assert counts == {"passed": 2, "failed": 1, "skipped": 1, "xfailed": 1}
    assert summary.startswith("1 failed, 2 passed, 1 skipped, 1 xfailed")
    j = parse_junit(junit)
    assert (j["tests"], j["failures"], j["errors"], j["skipped"]) == (5, 1, 0, 2)  # junit counts xfail as skipped
    assert parse_summary("no tests ran in 0.01s") == ("no tests ran in 0.01s", {})
    assert parse_summary("") == ("", {})


def test_run_tests_imports_the_patched_copy(tmp_path):
    """SGLang-style tests run against the patched package through the bare-sglang plugin."""
    patched = tmp_path / "integrate" / "tree" / "sglang"
    (patched / "kernels" / "jit").mkdir(parents=True)
    (patched / "kernels" / "__init__.py").write_text("")
    (patched / "kernels" / "marker.py").write_text("PATCHED = True\n")
    ops = "test/registered/kernels/ops/activation"
    repo = _checkout(
        tmp_path,
        {
            f"{ops}/test_activation.py": """
                import os, pytest
                import sglang
                from sglang.kernels.marker import PATCHED
                def test_uses_the_patched_tree():
                    assert PATCHED and sglang.__path__[0] == os.environ["KS_SGLANG_PACKAGE"]
                def test_private_jit_cache():
                    assert os.environ["SGLANG_JIT_CACHE_DIR"].endswith("/jit")
                @pytest.mark.skip(reason="needs sm100")
                def test_blackwell(): pass
                def test_broken(): assert 0, "kernel mismatch"
            """,
        },
    )
    run = run_tests(
        OP, [repo / ops / "test_activation.py"], repo, patched, tmp_path / "cache", tmp_path / "logs" / "t.log"
    )
    assert run.ran
    assert (run.passed, run.failed, run.skipped, run.errors) == (2, 1, 1, 0)
    assert run.exit_code == 1
    assert run.summary.startswith("1 failed, 2 passed, 1 skipped")
    assert run.files == [f"{ops}/test_activation.py"]
    assert "kernel mismatch" in pathlib.Path(run.log).read_text()
    assert f"KS_SGLANG_PACKAGE={patched}" in run.command


def test_a_collection_error_is_counted_not_hidden(tmp_path):
    patched = tmp_path / "tree" / "sglang"
    (patched / "kernels" / "jit").mkdir(parents=True)
    ops = "test/registered/kernels/ops/activation"
    repo = _checkout(tmp_path, {f"{ops}/test_activation.py": "import sglang.kernels.not_there\ndef test_x(): pass\n"})
    run = run_tests(OP, [repo / ops / "test_activation.py"], repo, patched, tmp_path / "cache", tmp_path / "t.log")
    assert run.ran and run.errors == 1 and run.passed == 0


def test_without_a_checkout_nothing_is_claimed(sglang_source, tmp_path):
    task = _task(sglang_source, tmp_path)
    run = op_tests(task, None, tmp_path, tmp_path, why_no_checkout="the sources are the wheel")
    assert not run.ran and run.reason == "the sources are the wheel" and run.passed == run.failed == 0
    empty = tmp_path / "empty-checkout"
    (empty / "test/registered/kernels/ops/activation").mkdir(parents=True)
    run = op_tests(task, empty, tmp_path, tmp_path)
    assert not run.ran and "no test in test/registered/kernels/ops/activation/" in run.reason
