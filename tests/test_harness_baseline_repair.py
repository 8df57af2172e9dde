"""optimize.harness.baseline_repair: the one "baseline contradicts its contract -> fix -> run again" loop.

The sweep (tests/test_harness_bench.py) and the optimize loop (tests/test_loop.py)
are tested through it end to end; these tests pin the loop's own rules: what ends
it, how often a baseline runs, and what reaches ``on_fixed``.
"""

from __future__ import annotations

from contract.completion import BASELINE_REPAIRS, Completion
from optimize.harness.baseline_repair import BaselineRun, repair_baseline
from pipeline.records import (
    ArgSpec,
    BuildRecipe,
    Contract,
    Instantiation,
    SourceInfo,
    Task,
    TensorSpec,
)


def make_task() -> Task:
    def tensor(name: str, role: str) -> ArgSpec:
        return ArgSpec(kind="tensor", tensor=TensorSpec(name=name, shape=["n"], dtype="T", role=role))

    return Task(
        op_id="demo.scale",
        module="kernels/ops/demo/scale.py",
        public_functions=["scale"],
        entry_points=["scale"],
        source=SourceInfo(kind="package", root="/nonexistent/sglang"),
        files=[],
        instantiations=[Instantiation(dtype="fp32", module_args=[], template_args=[], wrappers=[("scale", "launch")])],
        build=BuildRecipe(cuda_files=[], include_dirs=[], cuda_cflags=[]),
        editable=[],
        contract=Contract(entry="scale", args=[tensor("out", "output"), tensor("in", "input")], symbols=["n"]),
        shapes=[],
    )


def roles(task: Task) -> dict[str, str]:
    return {a.tensor.name: a.tensor.role for a in task.contract.args if a.tensor is not None}


def test_each_fix_is_recorded_before_the_next_run_and_the_fixed_task_comes_back():
    runs: list[dict[str, str]] = []
    fixed: list[tuple[list[str], int]] = []

    def run(task: Task, attempt: int) -> BaselineRun[int]:
        runs.append(roles(task))
        if roles(task)["in"] == "input":
            return BaselineRun(attempt, passed=False, evidence={"in": "written"})
        if roles(task)["out"] == "output":
            return BaselineRun(attempt, passed=False, evidence={"out": "never_written"})
        return BaselineRun(attempt, passed=True)

    def on_fixed(task: Task, record: Completion, attempt: int) -> str:
        fixed.append(([f.describe() for f in record.filled], attempt))
        return ""

    repaired = repair_baseline(make_task(), None, run, on_fixed=on_fixed)
    assert [r["in"] + "/" + r["out"] for r in runs] == ["input/output", "inout/output", "inout/inout"]
    assert fixed == [(["in: role inout (baseline: written)"], 0), (["out: role inout (baseline: never written)"], 1)]
    assert repaired.last.passed and repaired.last.result == 2 and repaired.stopped == ""
    assert roles(repaired.task) == {"out": "inout", "in": "inout"}


def test_at_most_baseline_repairs_re_runs_and_a_final_run_ends_it_at_once():
    names = iter(f"t{i}" for i in range(100))
    count = 0

    def always_new_evidence(task: Task, attempt: int) -> BaselineRun[None]:
        nonlocal count
        count += 1
        return BaselineRun(None, passed=False, evidence={"in": "written"})

    def otherwise(task: Task, run: BaselineRun[None]) -> Task:
        return task.model_copy(update={"op_id": next(names)})  # always "repairable": only the limit stops it

    repaired = repair_baseline(make_task(), None, always_new_evidence, on_fixed=lambda *a: "", otherwise=otherwise)
    assert count == BASELINE_REPAIRS + 1 and not repaired.last.passed

    calls: list[int] = []
    final = repair_baseline(
        make_task(),
        None,
        lambda task, attempt: calls.append(attempt) or BaselineRun("crashed", passed=False, final=True),
        on_fixed=lambda *a: "",
        otherwise=otherwise,
    )
    assert calls == [0] and final.last.result == "crashed"


def test_on_fixed_can_stop_and_no_fix_without_otherwise_ends_the_loop():
    stopped = repair_baseline(
        make_task(),
        None,
        lambda task, attempt: BaselineRun(attempt, passed=False, evidence={"in": "written"}),
        on_fixed=lambda task, record, attempt: "contract: uncallable after the fix",
    )
    assert stopped.stopped == "contract: uncallable after the fix" and stopped.last.result == 0
    assert roles(stopped.task)["in"] == "inout"  # the fix is applied to the task handed back

    runs: list[int] = []
    plain = repair_baseline(
        make_task(),
        None,
        lambda task, attempt: runs.append(attempt) or BaselineRun(attempt, passed=False, detail="boom"),
        on_fixed=lambda *a: "",
    )
    assert runs == [0] and plain.stopped == "" and plain.task == make_task()
