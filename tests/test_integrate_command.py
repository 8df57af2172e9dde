"""integrate.command: the whole CPU part of `kernelsmith integrate` on the real wheel, GPU steps recorded as not run."""

from __future__ import annotations

import json
import os
import pathlib
import time

import pytest
from test_integrate_patch import ACT, OP, make_best, one_op_run, wheel_source  # noqa: F401 (fixtures)

from cli.parser import build_parser
from cli.stages import integrate_stage as main
from integrate import steps
from integrate.command import latest_run
from integrate.errors import ConfigError, GitError
from pipeline.config import load_config
from pipeline.run_records import Outcome

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(steps, "gpu_available", lambda: (False, "torch sees no CUDA device"))


def _config(work: pathlib.Path):
    return load_config(
        overrides={"work_dir": str(work), "sglang": {"cache_dir": str(ROOT / "work" / "cache")}}, environ={}
    )


def test_integrate_without_gpu_makes_the_patch_and_a_draft_pr(one_op_run, no_gpu, capsys):
    work = one_op_run
    code = main(build_parser().parse_args(["integrate", "--run", "r1"]), _config(work))
    assert code == 0
    out = work / "integrate" / "r1"
    assert (out / "sglang.patch").read_bytes().startswith(b"diff --git a/sglang/" + ACT.encode())
    report = json.loads((out / "report.json").read_text())
    assert report["gpu"] is None and report["checks"] == [] and report["tests"] == [] and report["e2e"] == []
    assert set(report["not_run"]) == {"correctness", "sglang tests", "e2e"}
    assert "kernelsmith integrate --run r1" in report["not_run"]["correctness"]
    pr = (out / "PR.md").read_text()
    assert "**Status: DRAFT" in pr and "### Reproduce" in pr
    err = capsys.readouterr().err
    assert "no GPU here" in err and "PR: " in err and "(draft)" in err


def test_skip_e2e_is_recorded(one_op_run, no_gpu):
    work = one_op_run
    assert main(build_parser().parse_args(["integrate", "--run", "r1", "--skip-e2e"]), _config(work)) == 0
    report = json.loads((work / "integrate" / "r1" / "report.json").read_text())
    assert report["not_run"]["e2e"] == "skipped with --skip-e2e"


def test_git_branch_on_the_wheel_is_refused_after_the_pr_is_written(one_op_run, no_gpu):
    work = one_op_run
    with pytest.raises(GitError, match="needs an SGLang git checkout"):
        main(build_parser().parse_args(["integrate", "--run", "r1", "--git-branch", "ks/x"]), _config(work))
    assert (work / "integrate" / "r1" / "PR.md").is_file()


def test_nothing_to_integrate_is_not_an_error(tmp_path, wheel_source, no_gpu, capsys):
    from test_integrate_patch import act_span, edited_kernel, make_task

    work = tmp_path / "work"
    root = pathlib.Path(wheel_source.root)
    make_task(work, wheel_source, OP, [act_span(root)])
    make_best(work, "r9", OP, {"act_and_mul_kernel": edited_kernel(root)}, outcome=Outcome.slower)
    assert main(build_parser().parse_args(["integrate", "--run", "r9"]), _config(work)) == 0
    assert "nothing to integrate from run r9" in capsys.readouterr().err
    assert not (work / "integrate" / "r9" / "sglang.patch").exists()


def test_latest_run_is_the_newest_with_a_best_candidate(tmp_path):
    runs = tmp_path / "runs"
    with pytest.raises(ConfigError):
        latest_run(runs)
    for name, age in (("old", 100), ("new", 10), ("empty", 0)):
        (runs / name / "op").mkdir(parents=True)
        if name != "empty":
            (runs / name / "op" / "best").mkdir()
            (runs / name / "op" / "best" / "candidate.json").write_text("{}")
        stamp = time.time() - age
        os.utime(runs / name, (stamp, stamp))
    assert latest_run(runs) == "new"


def test_a_broken_gpu_step_fails_the_command_and_the_pr(one_op_run, monkeypatch, capsys):
    """GPU 'present', but the worker cannot import SGLang here (this venv lacks its packages): real worker
    processes die, and integrate says so, exits 1 and marks the PR failing."""
    monkeypatch.setattr(steps, "gpu_available", lambda: (True, "NVIDIA H200 (pretend)"))
    work = one_op_run
    code = main(build_parser().parse_args(["integrate", "--run", "r1"]), _config(work))
    assert code == 1
    report = json.loads((work / "integrate" / "r1" / "report.json").read_text())
    assert set(report["failed_steps"]) == {"correctness", "e2e"}
    assert "worker failed ping" in report["failed_steps"]["correctness"]
    assert "No module named" in report["failed_steps"]["correctness"], "the worker's own error is kept"
    (check,) = report["checks"]
    assert check["ran"] is False and check["reason"].startswith("a worker failed")
    (test,) = report["tests"]
    assert test["ran"] is False and "no test/registered/ folder" in test["reason"]
    assert "**Status: FAILING" in (work / "integrate" / "r1" / "PR.md").read_text()
    assert "error: correctness through SGLang" in capsys.readouterr().err


def test_self_check_without_gpu_records_every_plan_and_exits_1(one_op_run, monkeypatch, capsys):
    """--self-check on a CPU machine checks nothing (exit 1) but writes the record and the table,
    with the op's task loaded and a task that does not exist reported with the fix."""
    from integrate import selfcheck
    from integrate.records import SelfCheck
    from pipeline.record_io import read_record

    monkeypatch.setattr(selfcheck, "gpu_available", lambda: (False, "torch sees no CUDA device"))
    work = one_op_run
    code = main(build_parser().parse_args(["integrate", "--self-check", OP, "nope.missing"]), _config(work))
    assert code == 1
    out = work / "integrate" / "self-check"
    record = read_record(SelfCheck, out / "self-check.json")
    assert record.gpu is None and [c.op_id for c in record.checks] == [OP]
    assert record.checks[0].ran is False and "no GPU here" in record.checks[0].reason
    assert record.checks[0].planned and record.checks[0].reason.endswith("cases planned"), (
        "the CPU still plans every case"
    )
    assert "kernelsmith extract --ops nope.missing" in record.not_loaded["nope.missing"]
    table = (out / "self-check.md").read_text()
    assert f"| {OP} | 0 |" in table and "| nope.missing |" in table
    assert "nothing was checked" in capsys.readouterr().err


def test_self_check_keeps_a_worker_failure_as_data(one_op_run, monkeypatch, capsys):
    """GPU 'present', but the workers cannot import SGLang here: the record says why, exit 1."""
    from integrate import selfcheck
    from integrate.records import SelfCheck
    from pipeline.record_io import read_record

    monkeypatch.setattr(selfcheck, "gpu_available", lambda: (True, "NVIDIA H200 (pretend)"))
    work = one_op_run
    code = main(build_parser().parse_args(["integrate", "--self-check", OP]), _config(work))
    assert code == 1
    out = work / "integrate" / "self-check"
    record = read_record(SelfCheck, out / "self-check.json")
    (check,) = record.checks
    assert check.ran is False and check.reason.startswith("a worker failed") and "ping" in check.reason
    copy = pathlib.Path(record.copy_tree)
    assert (copy / "kernels" / "__init__.py").is_file(), "the pristine copy is a whole package"
    assert (copy / ACT).read_bytes() == (pathlib.Path(record.baseline_tree) / ACT).read_bytes()


def _stub_checks(monkeypatch, *, equal: bool, seen: list):
    """The workers replaced by a result per task: one case, bitwise ``equal``; ``seen`` gets each call's ops."""
    from integrate import sglang_runner
    from integrate.records import CheckCase, OpCheck

    def check_ops(tasks, *args, **kwargs):
        seen.append(([t.op_id for t in tasks], kwargs))
        case = CheckCase(
            label="s0", sizes={"n": 1}, rows=1, width=1, dtype="bf16", seed=0, rtol=0, atol=0,
            status="pass" if equal else "fail", bitwise_equal=equal, max_abs_err=0.0 if equal else 1.0,
        )  # fmt: skip
        checks = [
            OpCheck(op_id=t.op_id, function="f", ran=True, cases=[case], passed=int(equal), failed=int(not equal))
            for t in tasks
        ]
        for check in checks:
            kwargs["progress"](check)
        return checks

    monkeypatch.setattr(sglang_runner, "check_ops", check_ops)


def test_a_self_check_rerun_keeps_what_was_proved_and_a_cpu_run_never_replaces_it(one_op_run, monkeypatch, capsys):
    """Resume: an op proved bitwise equal is kept and not checked again; a failed op is checked again;
    the config's limits reach the runner; a later run on a CPU machine leaves the GPU's record alone."""
    from integrate import selfcheck
    from integrate.records import SelfCheck
    from pipeline.record_io import read_record

    work = one_op_run
    out = work / "integrate" / "self-check"
    args = build_parser().parse_args(["integrate", "--self-check", OP])
    config = _config(work).model_copy(
        update={"integrate": _config(work).integrate.model_copy(update={"warm_batch_modules": 1})}
    )
    seen: list = []
    monkeypatch.setattr(selfcheck, "gpu_available", lambda: (True, "NVIDIA H200 (pretend)"))
    _stub_checks(monkeypatch, equal=False, seen=seen)
    assert main(args, config) == 1, "a case that is not bitwise equal fails the self-check"
    _stub_checks(monkeypatch, equal=True, seen=seen)
    assert main(args, config) == 0
    assert [ops for ops, _ in seen] == [[OP], [OP]], "the failed op was checked again"
    assert seen[-1][1]["warm_batch_modules"] == 1 and seen[-1][1]["timeout_s"] == config.integrate.case_timeout_s
    assert main(args, config) == 0
    assert [ops for ops, _ in seen][-1] == [], "the proved op is kept, not checked again"
    assert "kept, proved earlier" in capsys.readouterr().err
    (check,) = read_record(SelfCheck, out / "self-check.json").checks
    assert check.ran and check.passed == 1

    monkeypatch.setattr(selfcheck, "gpu_available", lambda: (False, "torch sees no CUDA device"))
    assert main(args, config) == 1
    record = read_record(SelfCheck, out / "self-check.json")
    assert record.gpu == "NVIDIA H200 (pretend)" and record.checks[0].ran, "the GPU's proof stays"

    (out / "self-check.json").write_text("{ truncated", encoding="utf-8")
    monkeypatch.setattr(selfcheck, "gpu_available", lambda: (True, "NVIDIA H200 (pretend)"))
    assert main(args, config) == 0
    assert (out / "self-check.json.unreadable").read_text() == "{ truncated", "a corrupt record is set aside, not lost"
    assert "set aside" in capsys.readouterr().err


# --------------------------------------------------------------------------- --in-place (issue 16 row 11)


def _in_place_run(tmp_path, wheel_source):
    """A writable sglang package (the user's tree) holding two real kernel files, run r1 editing both."""
    from test_integrate_patch import small_package, two_op_run

    source = small_package(tmp_path, wheel_source)
    work = two_op_run(tmp_path, source)
    root = pathlib.Path(source.root)
    before = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    config = load_config(
        overrides={"work_dir": str(work), "sglang": {"cache_dir": str(tmp_path / "cache"), "src": str(root)}},
        environ={},
    )
    return work, root, before, config


def _tree(root: pathlib.Path) -> dict:
    return {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _fake_gpu(monkeypatch, *, failed: int, seen: list | None = None):
    """A GPU 'present' and correctness runners that report ``failed`` failing cases per op."""
    from integrate import command
    from integrate.records import OpCheck, TestRun

    def check(tasks, baseline_pkg, patched_pkg, out_dir, *, sanitizer, command):
        if seen is not None:
            seen.append((baseline_pkg, patched_pkg))
        return [OpCheck(op_id=t.op_id, function="f", ran=True, passed=4 - failed, failed=failed) for t in tasks]

    def tests(task, checkout, patched_pkg, out_dir, *, why_no_checkout):
        return TestRun(op_id=task.op_id, ran=False, reason=why_no_checkout)

    monkeypatch.setattr(steps, "gpu_available", lambda: (True, "NVIDIA H200 (pretend)"))
    monkeypatch.setattr(command, "RUNNERS", steps.Runners(check=check, tests=tests, e2e=None))


IN_PLACE = ["integrate", "--run", "r1", "--in-place", "--skip-e2e"]


def test_in_place_without_gpu_never_writes_the_users_tree(tmp_path, wheel_source, no_gpu, capsys):
    work, root, before, config = _in_place_run(tmp_path, wheel_source)
    code = main(build_parser().parse_args(IN_PLACE), config)
    assert _tree(root) == before, "a CPU-only run must leave the user's tree byte-identical"
    assert code == 1, "--in-place was asked for and not applied"
    report = json.loads((work / "integrate" / "r1" / "report.json").read_text())
    assert report["patch"]["in_place"] is False
    assert "no GPU here" in report["not_run"]["in-place"]
    assert (work / "integrate" / "r1" / "tree" / "sglang" / ACT).read_bytes() != before[pathlib.Path(ACT)]
    err = capsys.readouterr().err
    assert "--in-place not applied" in err and "untouched" in err and "Traceback" not in err


def test_in_place_with_failing_checks_leaves_the_tree_untouched(tmp_path, wheel_source, monkeypatch, capsys):
    work, root, before, config = _in_place_run(tmp_path, wheel_source)
    _fake_gpu(monkeypatch, failed=1)
    assert main(build_parser().parse_args(IN_PLACE), config) == 1
    assert _tree(root) == before
    report = json.loads((work / "integrate" / "r1" / "report.json").read_text())
    assert report["patch"]["in_place"] is False and "checks did not pass" in report["not_run"]["in-place"]
    assert "--in-place not applied" in capsys.readouterr().err


def test_in_place_swaps_only_after_the_checks_passed_on_the_copy(tmp_path, wheel_source, monkeypatch):
    work, root, before, config = _in_place_run(tmp_path, wheel_source)
    seen: list = []
    _fake_gpu(monkeypatch, failed=0, seen=seen)
    assert main(build_parser().parse_args(IN_PLACE), config) == 0
    ((baseline_pkg, patched_pkg),) = seen
    assert patched_pkg == work / "integrate" / "r1" / "tree" / "sglang", "the checks run on the copy"
    assert baseline_pkg == root, "before the swap, the user's tree is still the pristine baseline"
    after = _tree(root)
    assert after != before
    assert after[pathlib.Path(ACT)] == (patched_pkg / ACT).read_bytes()
    report = json.loads((work / "integrate" / "r1" / "report.json").read_text())
    assert report["patch"]["in_place"] is True and "in-place" not in report["not_run"]
    assert (pathlib.Path(report["patch"]["backups"]) / ACT).read_bytes() == before[pathlib.Path(ACT)]


def test_in_place_swap_that_breaks_restores_and_fails(tmp_path, wheel_source, monkeypatch, capsys):
    from integrate import patch as patch_mod

    work, root, before, config = _in_place_run(tmp_path, wheel_source)
    _fake_gpu(monkeypatch, failed=0)
    real = os.replace
    calls = []

    def failing_replace(src, dst):
        if pathlib.Path(dst).is_relative_to(root):
            calls.append(dst)
            if len(calls) == 2:
                raise OSError(28, "No space left on device (simulated)")
        return real(src, dst)

    monkeypatch.setattr(patch_mod, "_replace", failing_replace)
    assert main(build_parser().parse_args(IN_PLACE), config) == 1
    assert _tree(root) == before
    report = json.loads((work / "integrate" / "r1" / "report.json").read_text())
    assert "every file was restored" in report["failed_steps"]["in-place"]
    assert "**Status: FAILING" in (work / "integrate" / "r1" / "PR.md").read_text()
    assert "error: --in-place" in capsys.readouterr().err


def test_the_self_check_table_keeps_one_row_per_op_whatever_the_reason_holds():
    """An nvcc log in a reason (H200, 2026-12-02: a HIP-only module's build failure) broke the table's rows."""
    from integrate.records import OpCheck, SelfCheck
    from integrate.selfcheck import table
    from pipeline.records import SourceInfo

    why = "Failed to build JIT module\nstdout:\n[1/2] nvcc -c cuda.cu | x\nerror: #error targets CDNA\n" + "y" * 400
    record = SelfCheck(
        date="d", command="c", source=SourceInfo(kind="wheel", root="/r"), baseline_tree="/r", copy_tree="/c",
        checks=[OpCheck(op_id="moe.route_radix4", function="f", ran=False, reason=why)],
    )  # fmt: skip
    (row,) = [line for line in table(record).splitlines() if line.startswith("| moe.route_radix4")]
    assert "Failed to build JIT module stdout: [1/2] nvcc -c cuda.cu / x error" in row
    assert row.endswith("… |") and row.count("|") == 9


def test_a_dtype_the_pristine_op_demands_fixes_the_contract_and_the_op_is_checked_again(one_op_run, monkeypatch):
    """On the H200 (2026-12-02) 40 of topk_softmax's cases and all of mask_topk_ids' were skipped:
    the pristine op said "correction_bias must be float32". The baseline is the oracle, so the
    self-check applies that demand, as the sweep does, and checks the op once more."""
    from integrate import selfcheck, sglang_runner
    from integrate.records import SelfCheck
    from pipeline.record_io import read_record

    calls: list[str] = []
    check_ops = _demanding_check_ops(calls)
    monkeypatch.setattr(selfcheck, "gpu_available", lambda: (True, "NVIDIA H200 (pretend)"))
    monkeypatch.setattr(sglang_runner, "check_ops", check_ops)
    work = one_op_run
    assert main(build_parser().parse_args(["integrate", "--self-check", OP]), _config(work)) == 0
    assert calls[0] == "T" and calls[1] in ("fp32", "float32") and len(calls) == 2, (
        "checked with the contract's dtype, then once with the demanded one"
    )
    out = work / "integrate" / "self-check"
    (check,) = read_record(SelfCheck, out / "self-check.json").checks
    assert (
        check.ran and check.passed == 1 and check.fixes == ["out: dtype float32 (baseline: check: out must be float32)"]
    )
    assert "contract fixed by the pristine op's check: out: dtype float32" in (out / "self-check.md").read_text()


def _demanding_check_ops(calls: list[str], interrupt_at: int | None = None):
    """A fake check_ops whose pristine op demands ``out`` be float32: skipped until the contract says so.
    ``interrupt_at``: the call (0-based) that a time limit ends before it checks anything."""
    from integrate.records import CheckCase, OpCheck

    def check_ops(tasks, *args, **kwargs):
        checks = []
        for task in tasks:
            if interrupt_at is not None and len(calls) == interrupt_at:
                raise KeyboardInterrupt
            (out,) = [a.tensor for a in task.contract.args if a.tensor is not None and a.tensor.name == "out"]
            calls.append(out.dtype)
            demand = out.dtype not in ("fp32", "float32")
            case = CheckCase(
                label="s0", sizes={"n": 1}, rows=1, width=1, dtype="bf16", seed=0, rtol=0, atol=0,
                status="skipped" if demand else "pass", bitwise_equal=None if demand else True,
                reason="the pristine op fails here too: RuntimeError: Failed at x.cuh:9: out must be float32"
                if demand else "",
            )  # fmt: skip
            check = OpCheck(op_id=task.op_id, function="f", ran=not demand, cases=[case], passed=int(not demand))
            kwargs["progress"](check)
            checks.append(check)
        return checks

    return check_ops


def test_a_rerun_after_an_interrupted_self_check_applies_the_demanded_dtype_first(one_op_run, monkeypatch):
    """On the H200 (2026-12-02) a time limit ended the self-check before its second pass, so the
    demands it had seen were never applied, and a rerun kept the op as it was. A rerun now applies
    what the earlier record shows first: one call, with the demanded dtype, and the fix said."""
    from integrate import selfcheck, sglang_runner
    from integrate.records import SelfCheck
    from pipeline.record_io import read_record

    calls: list[str] = []
    monkeypatch.setattr(selfcheck, "gpu_available", lambda: (True, "NVIDIA H200 (pretend)"))
    monkeypatch.setattr(sglang_runner, "check_ops", _demanding_check_ops(calls, interrupt_at=1))
    work = one_op_run
    argv = build_parser().parse_args(["integrate", "--self-check", OP])
    with pytest.raises(KeyboardInterrupt):
        main(argv, _config(work))
    out = work / "integrate" / "self-check"
    (first,) = read_record(SelfCheck, out / "self-check.json").checks
    assert calls == ["T"] and not first.ran and first.cases[0].status == "skipped", "the first pass is kept"
    calls.clear()
    monkeypatch.setattr(sglang_runner, "check_ops", _demanding_check_ops(calls))
    assert main(argv, _config(work)) == 0
    assert calls in (["fp32"], ["float32"]), "the rerun checks once, with the demanded dtype"
    (check,) = read_record(SelfCheck, out / "self-check.json").checks
    assert (
        check.ran and check.passed == 1 and check.fixes == ["out: dtype float32 (baseline: check: out must be float32)"]
    )


def test_a_patch_or_upstream_file_that_names_the_tool_keeps_the_pr_a_draft(one_op_run, no_gpu):
    """The fixture's candidate writes `// kernelsmith: ...` comments into SGLang's kernel: the PR says where."""
    from integrate.pr import status
    from integrate.records import IntegrateReport
    from pipeline.record_io import read_record

    work = one_op_run
    assert main(build_parser().parse_args(["integrate", "--run", "r1"]), _config(work)) == 0
    out = work / "integrate" / "r1"
    report = read_record(IntegrateReport, out / "report.json")
    _, reasons = status(report)
    named = [r for r in reasons if r.startswith("it names the tool:")]
    assert named and f"`sglang/{ACT}` (sglang.patch line" in named[0]
    (out / "upstream" / "note.py").write_text("# made by Kernelsmith\n")
    assert any("`note.py` line 1" in r for r in status(report)[1])
