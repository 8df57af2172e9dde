"""Integrate for a Triton op (issue 19 item 5), on attention.merge_state_triton of the pinned wheel.

CPU: the SGLang check's planned calls (golden: labels, dtypes, keys, tensors, which parameter feeds
what, the KernelSpec part; no SGLang text), the workers' environment (one Triton cache per tree),
``kernelsmith integrate`` of a candidate of our own that adds ``num_warps=8`` to the launch (only
those bytes change) and its PR. The worker's import of the op's module needs torch (skipped here).
GPU (@pytest.mark.gpu): the self-check through the runner, a num_warps candidate that passes, a wrong
one that SGLang's check refuses.

Regenerate the golden file with ``UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_integrate_triton.py``
after checking the diff by eye.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import pathlib
import random
import subprocess
import sys

import pytest
from golden import assert_golden
from test_integrate_patch import make_best

from cli.parser import build_parser
from contract.completion import complete
from contract.layout import baseline_regions, load_task, read_task_files, task_dir
from extract import triton_ops, triton_tasks
from integrate import sglang_runner, tree_worker
from integrate.calls import ALLOCATED, ALLOCATED_MAX_BYTES, _bytes, plan_op, warm_cases
from integrate.patch import build_patch, package_dir
from integrate.records import CheckCase, IntegrateReport, OpCheck
from pipeline.config import load_config

ROOT = pathlib.Path(__file__).resolve().parent.parent
OP = "attention.merge_state_triton"
LAUNCH = "launch:merge_state_kernel"
GOLDEN = pathlib.Path(__file__).parent / "golden" / "integrate_calls" / f"{OP}.json"


@pytest.fixture(scope="module")
def merge_state(sglang_source, tmp_path_factory):
    """work/ with the merge_state_triton task (extracted, not compiled) and the task completed."""
    if sglang_source.kind != "wheel":
        pytest.skip("SGLANG_SRC points at a local tree; these tests read the pinned wheel")
    index, _ = triton_ops.scan_tree(sglang_source, ROOT / "work" / "cache")
    work = tmp_path_factory.mktemp("work")
    written = triton_tasks.write_task(index, next(o for o in index.ops if o.id == OP), work)
    folder = task_dir(work, written.op_id)
    task, _ = complete(load_task(folder), folder)
    return work, task, folder


def with_warps(base: str, warps: int = 8) -> str:
    """The launch region with ``num_warps=<warps>`` added as its last keyword (a candidate of our own)."""
    body = base.rstrip()
    assert body.endswith(")"), body[-40:]
    inner = body[:-1].rstrip()
    comma = "" if inner.endswith(",") else ","
    return f"{inner}{comma}\n        num_warps={warps},\n    )" + base[len(body) :]


def _summary(plan) -> dict:
    """The plan in a reviewable form: what every call passes (one line a case) and how it is called."""
    first = plan.cases[0].request
    forms = {}
    for case in plan.cases:
        fed = ", ".join(f"{p['name']}={p['feeds']}" for p in case.request["params"])
        forms.setdefault("allocated" if case.label.endswith(ALLOCATED) else "full", fed)
    return {
        "function": plan.function,
        "triton": first["triton"],
        "params": forms,
        "cases_per_dtype": dict(collections.Counter(c.dtype for c in plan.cases)),
        "keys": sorted({c.key for c in plan.cases}),
        "cases": [  # the first dtype's (the others differ only in T)
            f"{c.label}: " + " ".join(f"{t['name']}:{t['dtype']}{t['shape']}" for t in c.request["tensors"])
            for c in plan.cases
            if c.dtype == plan.cases[0].dtype
        ],
    }


# --------------------------------------------------------------------------- planning (CPU)


@pytest.mark.wheel
def test_the_planned_calls_match_the_golden(merge_state):
    _, task, _ = merge_state
    plan = plan_op(task, held_out=0, rng=random.Random(1))
    assert plan.reason == "" and plan.unplanned == {}
    assert plan.function == "sglang.kernels.ops.attention.merge_state.merge_state_triton"
    assert_golden(GOLDEN, _summary(plan))


@pytest.mark.wheel
def test_every_case_goes_through_the_kernel_spec_and_the_optional_outputs_are_also_left_out(merge_state):
    _, task, _ = merge_state
    plan = plan_op(task, rng=random.Random(2))
    full = [c for c in plan.cases if not c.label.endswith(ALLOCATED)]
    allocated = [c for c in plan.cases if c.label.endswith(ALLOCATED)]
    catalog = [c for c in full if not c.held_out]
    assert len(catalog) == len(task.shapes) * 3 and any(c.held_out for c in full)
    inputs = [{"tensors": [t for t in c.request["tensors"] if t["role"] == "input"]} for c in catalog]
    small = [(c.label, c.dtype) for c, i in zip(catalog, inputs) if _bytes(i) <= ALLOCATED_MAX_BYTES]
    assert [(c.label.removesuffix(ALLOCATED), c.dtype) for c in allocated] == small  # the large ones: full form only
    assert len(catalog) > len(small) > len(catalog) // 2
    for case in plan.cases:
        triton = case.request["triton"]
        assert triton["spec"] == OP and triton["backend"] == "triton"
        assert triton["kernels"] == [
            {"module": "sglang.kernels.ops.attention.merge_state", "name": "merge_state_kernel"}
        ]
        assert case.key == f"{OP}|triton|{case.dtype}"
    for case in full:  # every output the signature can take is passed (poisoned by the worker)
        assert {t["name"] for t in case.request["tensors"]} >= {"output", "output_lse"}
    for case in allocated:  # the wrapper allocates: only the inputs are passed, output/output_lse keep None
        assert {t["role"] for t in case.request["tensors"]} == {"input"}
        fed = {p["name"]: p["feeds"] for p in case.request["params"]}
        assert fed["output"] is None and fed["output_lse"] is None and fed["prefix_lse"] == "prefix_lse"
    assert sorted(c["dtype"] for c in warm_cases([plan])) == ["bf16", "fp16", "fp32"]  # one compile per dtype


@pytest.mark.wheel
def test_a_cuda_plan_carries_no_triton_part(merge_state):
    _, task, _ = merge_state
    cuda = task.model_copy(update={"language": "cuda", "triton": None})
    plan = plan_op(cuda, held_out=0, rng=random.Random(3))
    assert plan.cases and all("triton" not in c.request for c in plan.cases)
    assert not any(c.label.endswith(ALLOCATED) for c in plan.cases)


def test_each_tree_gets_its_own_triton_cache_and_no_kernel_override(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_KERNEL_OVERRIDE", "1")
    monkeypatch.setenv("TRITON_OVERRIDE_DIR", "/somewhere")
    monkeypatch.setenv("TRITON_PRINT_AUTOTUNING", "1")
    base = tree_worker.worker_env(tmp_path / "baseline")
    new = tree_worker.worker_env(tmp_path / "patched")
    assert base["TRITON_CACHE_DIR"] == str(tmp_path / "baseline" / "triton")
    assert new["TRITON_CACHE_DIR"] == str(tmp_path / "patched" / "triton")
    assert base["TRITON_HOME"] == str(tmp_path / "baseline")
    assert "TRITON_KERNEL_OVERRIDE" not in new and "TRITON_OVERRIDE_DIR" not in new
    assert new["TRITON_PRINT_AUTOTUNING"] == "1"  # Triton's other settings are kept


IMPORT = """
import importlib, sys
sys.path.insert(0, sys.argv[1])
from integrate.sglang_bare import install
install(sys.argv[2])
module = importlib.import_module("sglang.kernels.ops.attention.merge_state")
from sglang.kernels.selector import select_kernel
spec = select_kernel("attention.merge_state_triton")
print(module.__file__, spec.backend.value, spec.load() is module.merge_state_triton)
"""


@pytest.mark.wheel
@pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="merge_state.py and sglang/kernels/__init__.py (fused_op) import torch at the top; torch is not installed here",
)
def test_the_worker_imports_the_triton_op_module_and_its_kernel_spec_from_the_tree(sglang_source):
    done = subprocess.run(
        [sys.executable, "-c", IMPORT, str(ROOT), sglang_source.root],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    where, backend, same = done.stdout.split()
    assert where.startswith(os.path.realpath(sglang_source.root)) and backend == "triton" and same == "True"


@pytest.mark.wheel
def test_the_triton_op_module_does_nothing_at_import_but_import_and_define(merge_state, sglang_source):
    """Without torch here, the CPU half of "imports in the worker without a GPU-only failure": the module's
    top level holds imports, (decorated) definitions and plain assignments only, so importing it launches,
    compiles and queries nothing; its decorators are Triton's own."""
    import libcst as cst

    _, task, _ = merge_state
    tree = cst.parse_module((pathlib.Path(sglang_source.root) / task.module).read_bytes())
    kinds = set()
    for statement in tree.body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                kinds.add(type(small).__name__)
                if isinstance(small, (cst.Assign, cst.AnnAssign, cst.Expr)):
                    assert not any(isinstance(n, cst.Call) for n in _walk(small)), tree.code_for_node(small)
        else:
            kinds.add(type(statement).__name__)
            for decorator in getattr(statement, "decorators", ()):
                assert tree.code_for_node(decorator.decorator).startswith("triton."), decorator
    assert kinds <= {"Import", "ImportFrom", "FunctionDef", "ClassDef", "Assign", "AnnAssign", "Expr"}, kinds


def _walk(node):
    yield node
    for child in node.children:
        yield from _walk(child)


# --------------------------------------------------------------------------- patch and PR (CPU)


@pytest.fixture
def warps_run(merge_state, tmp_path):
    """work/ holding the task and run r1 whose best candidate adds num_warps=8 to the launch."""
    work, task, folder = merge_state
    mine = tmp_path / "work"
    (mine / "tasks").mkdir(parents=True)
    os.symlink(folder, mine / "tasks" / OP)
    base = baseline_regions(read_task_files(folder, task), task)
    make_best(mine, "r1", OP, {LAUNCH: with_warps(base[LAUNCH])}, rationale="more warps")
    return mine, task, base


def work_config(work):
    """The configuration of a run in ``work``, reading the pinned wheel from the project's cache."""
    return load_config(
        overrides={"work_dir": str(work), "sglang": {"cache_dir": str(ROOT / "work" / "cache")}}, environ={}
    )


@pytest.mark.wheel
def test_integrate_a_triton_candidate_changes_only_its_bytes_and_writes_its_pr(warps_run, sglang_source, monkeypatch):
    from cli.stages import integrate_stage as main
    from integrate import steps

    work, task, base = warps_run
    monkeypatch.setattr(steps, "gpu_available", lambda: (False, "torch sees no CUDA device"))
    config = work_config(work)
    assert main(build_parser().parse_args(["integrate", "--run", "r1", "--skip-e2e"]), config) == 0
    out = work / "integrate" / "r1"
    patch = json.loads((out / "patch.json").read_text())
    [changed] = patch["files"]
    assert changed["path"] == task.module and [s["name"] for s in changed["spans"]] == [LAUNCH]
    old = (pathlib.Path(sglang_source.root) / task.module).read_bytes()
    new = (pathlib.Path(patch["patched_tree"]) / "sglang" / task.module).read_bytes()
    span = next(s for s in task.editable if s.name == LAUNCH)
    added = with_warps(base[LAUNCH]).encode()
    assert new == old[: span.start_byte] + added + old[span.end_byte :]  # only the launch's bytes changed
    diff = (out / "sglang.patch").read_text()
    plus = [line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert any("num_warps=8" in line for line in plus) and len(plus) <= 2
    pr = (out / "PR.md").read_text()
    assert "# [Kernel] Faster Triton merge_state_triton" in pr
    assert f"`sglang/{task.module}`" in pr and "`merge_state_kernel`" in pr
    assert "registered as `KernelSpec` `attention.merge_state_triton`" in pr
    assert "- **Launch.** The launch now sets `num_warps=8,`" in pr
    assert "**PDL.**" not in pr and "No Python file changes" not in pr


@pytest.mark.wheel
def test_the_pr_says_the_check_ran_through_the_kernel_spec(warps_run, sglang_source):
    from integrate.pr import render

    work, task, _ = warps_run
    patch = build_patch("r1", work / "runs" / "r1", work / "tasks", sglang_source, work / "integrate" / "r1")
    via = f"KernelSpec {OP} (backend triton, get_kernel) -> sglang.kernels.ops.attention.merge_state:merge_state_triton"
    cases = [
        CheckCase(
            label=label,
            sizes={"num_tokens": 1},
            rows=1,
            width=128,
            dtype="bf16",
            seed=7,
            status="pass",
            bitwise_equal=True,
            max_abs_err=0.0,
            rtol=0.01,
            atol=0.01,
            via=via,
            launches={"sglang.kernels.ops.attention.merge_state:merge_state_kernel": 1},
        )
        for label in ("Llama-3.1-8B[num_tokens=1]", "Llama-3.1-8B[num_tokens=1]" + ALLOCATED)
    ]
    check = OpCheck(op_id=OP, function="f", ran=True, cases=cases, passed=2, via=via)
    report = IntegrateReport(run="r1", patch=patch, checks=[check], gpu="NVIDIA H200")
    text = render(report, run_dir=str(work / "runs" / "r1"))
    assert f"Called through {via}" in text
    assert "`sglang.kernels.ops.attention.merge_state:merge_state_kernel` 2 times" in text
    assert "left to the wrapper" in text and "`TRITON_CACHE_DIR`" in text


@pytest.mark.wheel
def test_self_check_without_a_gpu_plans_the_triton_op(merge_state, monkeypatch, capsys):
    from integrate import selfcheck

    work, _, _ = merge_state
    monkeypatch.setattr(selfcheck, "gpu_available", lambda: (False, "torch sees no CUDA device"))
    config = work_config(work)
    assert selfcheck.self_check([OP], config) == 1
    record = json.loads((work / "integrate" / "self-check" / "self-check.json").read_text())
    [check] = record["checks"]
    assert check["op_id"] == OP and check["planned"] and not check["ran"]
    assert check["modules"] == 3 and "cases planned" in check["reason"]
    assert f"kernelsmith integrate --self-check {OP}" in capsys.readouterr().err


@pytest.mark.wheel
def test_the_patched_workers_path_and_launches_are_recorded_per_case(merge_state, tmp_path):
    _, task, _ = merge_state
    case = plan_op(task, held_out=0, rng=random.Random(4)).cases[0]
    via = f"KernelSpec {OP} (backend triton, get_kernel) -> x:y"

    class Answers:  # the two workers' answers, as sglang_worker.cmd_check gives them
        def __init__(self, answer: dict) -> None:
            self.answer, self.seen = answer, []

        def request(self, req: dict, *, timeout_s: float) -> dict:
            self.seen.append(req)
            return self.answer

    base = Answers({"ok": True, "via": via, "launches": {"m:k": 1}})
    new = Answers({"ok": True, "status": "pass", "bitwise_equal": True, "via": via, "launches": {"m:k": 1}})
    checked = sglang_runner._check_case(case, base, new, tmp_path, 0, timeout_s=1)
    assert checked.status == "pass" and checked.via == via and checked.launches == {"m:k": 1}
    assert base.seen[0]["triton"]["spec"] == OP and new.seen[0]["mode"] == "compare"
    new.answer = {"ok": True, "status": "error", "reason": "no kernel of the task launched", "via": via, "launches": {}}
    checked = sglang_runner._check_case(case, base, new, tmp_path, 1, timeout_s=1)
    assert checked.status == "error" and "no kernel of the task launched" in checked.reason


def test_the_ops_path_is_the_one_every_answered_case_took():
    from integrate.sglang_runner import common_via

    def case(status: str, via: str) -> CheckCase:
        return CheckCase(
            label="x", sizes={}, rows=1, width=1, dtype="bf16", seed=1, status=status, rtol=0, atol=0, via=via
        )

    assert (
        common_via([case("pass", "KernelSpec a"), case("fail", "KernelSpec a"), case("skipped", "")]) == "KernelSpec a"
    )
    assert common_via([case("pass", "KernelSpec a"), case("pass", "b")]) == ""
    assert common_via([case("pass", "")]) == ""


# --------------------------------------------------------------------------- GPU


def few_shapes(task, tokens: tuple[int, ...] = (1, 64, 4096)):
    """The task with one catalog shape per token count in ``tokens`` (a test's minutes; the command checks all)."""
    picked = {}
    for shape in task.shapes:
        picked.setdefault(shape.tokens, shape)
    return task.model_copy(update={"shapes": [picked[t] for t in tokens if t in picked] or task.shapes[:3]})


def _gpu_check(work: pathlib.Path, task, sglang_source, regions: dict[str, str] | None):
    """Patch run r1 (``regions`` as its candidate; None: the self-check's byte copy) and check it through SGLang."""
    from integrate.selfcheck import pristine_copy

    task = few_shapes(task)

    out = work / "integrate" / "r1"
    if regions is None:
        baseline = pathlib.Path(sglang_source.root)
        patched = pristine_copy(baseline, out / "tree" / "sglang")
    else:
        make_best(work, "r1", OP, regions)
        patch = build_patch("r1", work / "runs" / "r1", work / "tasks", sglang_source, out)
        baseline, patched = package_dir(patch, patched=False), package_dir(patch, patched=True)
    (check,) = sglang_runner.check_ops([task], baseline, patched, out, sanitizer=False, held_out=1)
    return check, out


@pytest.mark.gpu
@pytest.mark.wheel
def test_self_check_of_merge_state_triton_is_bitwise_equal_through_its_kernel_spec(
    merge_state, sglang_source, tmp_path
):
    _, task, _ = merge_state
    check, out = _gpu_check(tmp_path, task, sglang_source, None)
    assert check.ran and check.failed == 0 and check.skipped == 0, [c.reason for c in check.cases if c.reason][:3]
    assert all(c.bitwise_equal for c in check.cases)
    assert check.via.startswith(f"KernelSpec {OP} (backend triton")
    assert all(sum(c.launches.values()) >= 1 for c in check.cases)
    assert any(c.label.endswith(ALLOCATED) for c in check.cases)
    for tree in ("baseline", "patched"):  # each tree compiled its own kernels into its own cache
        assert any((out / "cache" / tree / "triton").rglob("*.cubin")), tree


@pytest.mark.gpu
@pytest.mark.wheel
def test_a_num_warps_candidate_passes_through_sglang(warps_run, sglang_source):
    work, task, base = warps_run
    check, _ = _gpu_check(work, task, sglang_source, {LAUNCH: with_warps(base[LAUNCH])})
    assert check.ran and check.failed == 0 and check.passed == len(check.cases) - check.skipped > 0
    assert check.via.startswith(f"KernelSpec {OP}")


@pytest.mark.gpu
@pytest.mark.wheel
def test_a_wrong_triton_candidate_is_refused_by_sglangs_check(merge_state, sglang_source, tmp_path):
    work, task, folder = merge_state
    mine = tmp_path / "work"
    (mine / "tasks").mkdir(parents=True)
    os.symlink(folder, mine / "tasks" / OP)
    kernel = baseline_regions(read_task_files(folder, task), task)["merge_state_kernel"]
    wrong = kernel.replace("tl.exp(", "tl.exp2(")  # every natural exponential becomes base 2: wrong values
    assert wrong != kernel
    check, _ = _gpu_check(mine, task, sglang_source, {"merge_state_kernel": wrong})
    assert check.ran and check.failed > 0 and check.passed < len(check.cases)
