"""optimize.reach_ops and final validation at the ops that share a candidate's code.

The real half runs on SGLang's own rope.cuh (three ops, one file); the loop half replays
SYNTHETIC timings (tests/test_loop.py's demo task and a twin that runs the same kernel).
"""

from __future__ import annotations

import copy
import json
import pathlib

import pytest
from test_loop import KERNEL, REPLAY, SRC_REL, choose, hooks, whole, write_task

from contract.layout import baseline_regions, load_task, read_task_files
from optimize.backends.replay import ReplayBackend
from optimize.llm.fakes import ScriptedModel
from optimize.loop import Loop
from optimize.reach_ops import changes, companions, transplant
from optimize.session import LoopOptions
from optimize.trajectory import Trajectory
from pipeline.config import Config
from pipeline.record_io import read_record
from pipeline.records import Index, OpEntry
from pipeline.run_records import Outcome

ROOT = pathlib.Path(__file__).resolve().parent.parent
ROPE = (
    "attention.apply_rope_inplace",
    "attention.apply_rope_with_cos_sin_cache_inplace",
    "attention.apply_rope_inplace_with_kvcache",
)


# --------------------------------------------------------------------------- real SGLang: rope.cuh


@pytest.fixture(scope="module")
def rope_tasks(sglang_source):
    """The three rope ops' tasks, extracted (without the compile check) from the pinned wheel if missing."""
    tasks = ROOT / "work" / "tasks"
    if not all((tasks / op / "task.json").is_file() for op in ROPE):
        from cli.main import main

        assert main(["extract", "--no-compile", "--work-dir", str(ROOT / "work"), "--ops", *ROPE]) == 0
    out = {}
    for op in ROPE:
        task = load_task(tasks / op)
        files = read_task_files(tasks / op, task)
        out[op] = (task, files, baseline_regions(files, task))
    return out


def test_the_index_names_every_op_that_compiles_the_same_file(rope_tasks):
    index = read_record(Index, ROOT / "work" / "index.json")
    task = rope_tasks["attention.apply_rope_inplace"][0]
    assert companions(index.ops, task) == [
        "attention.apply_rope_inplace_with_kvcache",
        "attention.apply_rope_with_cos_sin_cache_inplace",
    ]


def _edit_method(region: str, method: str) -> str:
    """``region`` with a comment added inside the body of its method ``method`` (the first ``{`` after its name)."""
    at = region.index(method)
    brace = region.index("{", at) + 1
    return region[:brace] + " /* changed */" + region[brace:]


def test_a_change_to_run_reaches_the_cos_sin_cache_op_and_not_the_kv_cache_store(rope_tasks):
    own, _, own_base = rope_tasks["attention.apply_rope_inplace"]
    edited = dict(own_base)
    edited["FusedRopeKernel"] = _edit_method(own_base["FusedRopeKernel"], " run(")
    changed = changes(own_base, edited)
    assert list(changed) == ["FusedRopeKernel"]

    task, files, base = rope_tasks["attention.apply_rope_with_cos_sin_cache_inplace"]
    reached = transplant(own, own_base, changed, task, files, base)
    assert reached.status == "reached" and reached.touched == ["FusedRopeKernel"]
    assert reached.regions == {**base, **changed}

    task, files, base = rope_tasks["attention.apply_rope_inplace_with_kvcache"]
    other = transplant(own, own_base, changed, task, files, base)  # its entry is run_fused alone
    assert other.status == "not_reached" and "never runs" in other.detail


def test_a_change_to_the_shared_kernel_reaches_both(rope_tasks):
    own, _, own_base = rope_tasks["attention.apply_rope_inplace"]
    changed = {"rope_rotate_head": own_base["rope_rotate_head"].replace("{", "{ /* changed */", 1)}
    for op in ROPE[1:]:
        task, files, base = rope_tasks[op]
        assert transplant(own, own_base, changed, task, files, base).status == "reached", op


def test_a_region_the_companion_holds_otherwise_is_not_judged_never_not_reached(rope_tasks):
    own, _, own_base = rope_tasks["attention.apply_rope_inplace"]
    changed = {"FusedRopeKernel": _edit_method(own_base["FusedRopeKernel"], " run(")}
    task, files, base = rope_tasks["attention.apply_rope_with_cos_sin_cache_inplace"]
    drifted = {**base, "FusedRopeKernel": base["FusedRopeKernel"] + "\n"}
    moved = transplant(own, own_base, changed, task, files, drifted)
    assert moved.status == "not_judged" and "re-extract both" in moved.detail
    renamed = task.model_copy(update={"editable": [s for s in task.editable if s.name != "FusedRopeKernel"]})
    moved = transplant(own, own_base, changed, renamed, files, base)
    assert moved.status == "not_judged" and "not one of its editable regions" in moved.detail


# --------------------------------------------------------------------------- the loop (SYNTHETIC replay)


def _replay_with_twin(tmp_path: pathlib.Path, twin_speedup: float) -> pathlib.Path:
    """demo.replay.json plus ``demo.twin``: the same baseline figures, vector_loads_128 at ``twin_speedup``."""
    data = json.loads(REPLAY.read_text())
    twin = copy.deepcopy(data["ops"]["demo.scale"])
    twin["rules"] = [{"skill": "vector_loads_128", "outcome": "ok", "speedup": twin_speedup}]
    data["ops"]["demo.twin"] = twin
    path = tmp_path / "twin.replay.json"
    path.write_text(json.dumps(data))
    return path


def _index(work: pathlib.Path, task) -> None:
    """An extraction index in which demo.scale and demo.twin both compile the demo source file."""
    ops = [
        OpEntry(
            id=op,
            module="kernels/ops/demo/scale.py",
            public_functions=["scale"],
            entry_points=["scale"],
            files=[SRC_REL],
        )
        for op in ("demo.scale", "demo.twin")
    ]
    idx = Index(
        source=task.source,
        files=task.files,
        grammar={},
        kernels=[],
        device_functions=[],
        launchers=[],
        includes={},
        ops=ops,
        op_modules=[],
    )
    (work / "index.json").write_text(idx.model_dump_json())


def _run_with_twin(tmp_path: pathlib.Path, twin_speedup: float, *, index: bool = True, twin: bool = True, **search):
    task_dir, task = write_task(tmp_path)
    if twin:
        write_task(tmp_path, "demo.twin")  # the same file, the same launcher: it runs the changed kernel
    if index:
        _index(tmp_path, task)
    model = ScriptedModel(
        [
            "[]",  # the op's testing agent
            choose("vector_loads_128", "vectorize"),
            whole(KERNEL.replace("// scale", "// scale (float4 body, scalar tail)")),
            "[]",  # the twin's testing agent, when final validation opens it
        ]
    )
    cfg = Config.model_validate(
        {"work_dir": str(tmp_path), "budget": {"rounds": 1}, "search": {"strategy": "auto", **search}}
    )
    loop = Loop(
        cfg,
        LoopOptions(run="r1", coder="llm"),
        ReplayBackend(_replay_with_twin(tmp_path, twin_speedup)),
        model=model,
        hooks=hooks(),
    )
    summary = loop.run([(task_dir, task)])
    return summary, Trajectory(tmp_path / "runs/r1/demo.scale/trajectory.jsonl")


def test_a_candidate_slower_where_a_twin_runs_its_code_is_not_accepted(tmp_path):
    summary, traj = _run_with_twin(tmp_path, 0.9)
    (rnd,) = traj.rounds()
    assert rnd.accepted  # at its own op it wins
    (final,) = traj.finals()
    assert final.outcome == Outcome.slower and not final.accepted
    assert "at demo.twin (it runs the changed scale_kernel)" in final.detail
    (verdict,) = final.reach
    assert (verdict.op_id, verdict.status, verdict.regions) == ("demo.twin", "failed", ["scale_kernel"])
    assert verdict.speedup_geomean == pytest.approx(0.9)
    assert summary.ops[0].status == "no_improvement"
    assert not (tmp_path / "runs/r1/demo.scale/best").exists()
    # the twin's evidence lives under the op's folder, never as an op of the run
    assert (tmp_path / "runs/r1/demo.scale/reach/demo.twin/trajectory.jsonl").is_file()
    assert not (tmp_path / "runs/r1/demo.twin").exists()


def test_a_candidate_that_holds_at_the_twin_is_accepted_with_the_twin_figures(tmp_path):
    summary, traj = _run_with_twin(tmp_path, 1.1)
    (final,) = traj.finals()
    assert final.accepted and final.outcome == Outcome.ok
    (verdict,) = final.reach
    assert verdict.status == "held" and verdict.speedup_geomean == pytest.approx(1.1)
    assert summary.ops[0].status == "improved"


def test_without_an_index_the_tasks_on_disk_name_the_twin(tmp_path):
    _, traj = _run_with_twin(tmp_path, 0.9, index=False)
    (final,) = traj.finals()
    assert [v.op_id for v in final.reach] == ["demo.twin"] and not final.accepted


def test_a_twin_in_the_index_with_no_task_blocks_as_not_judged(tmp_path, monkeypatch):
    import extract.command

    asked: list[list[str]] = []

    def ensure_tasks(config, ids):
        asked.append(list(ids))
        return dict.fromkeys(ids, "no wheel here")

    monkeypatch.setattr(extract.command, "ensure_tasks", ensure_tasks)
    summary, traj = _run_with_twin(tmp_path, 1.1, twin=False)
    assert asked == [["demo.twin"]]  # final validation asked extract for the missing task
    (final,) = traj.finals()
    (verdict,) = final.reach
    assert verdict.status == "not_judged" and "no wheel here" in verdict.detail
    assert final.outcome == Outcome.incorrect and "not judged at demo.twin" in final.detail
    assert summary.ops[0].status == "no_improvement"


def test_judge_companions_off_keeps_the_old_rule(tmp_path):
    summary, traj = _run_with_twin(tmp_path, 0.9, judge_companions=False)
    (final,) = traj.finals()
    assert final.accepted and final.reach == [] and summary.ops[0].status == "improved"


# --------------------------------------------------------------------------- integrate: the patch's reach


def test_integrate_checks_every_op_the_patch_reaches(rope_tasks, tmp_path):
    from integrate.accepted import Accepted
    from integrate.reached import checked_tasks, patch_reach
    from pipeline.run_records import Candidate

    own, _, base = rope_tasks["attention.apply_rope_inplace"]
    regions = {**base, "FusedRopeKernel": _edit_method(base["FusedRopeKernel"], " run(")}
    candidate = Candidate(op_id=own.op_id, id="c1", parent="b0", regions=regions, coder="offline")
    acc = Accepted(own.op_id, candidate, None, own, ROOT / "work" / "tasks" / own.op_id)
    reach = patch_reach(ROOT / "work", [acc])
    assert reach.ops == {own.op_id: ["attention.apply_rope_with_cos_sin_cache_inplace"]}
    assert list(reach.tasks) == ["attention.apply_rope_with_cos_sin_cache_inplace"] and reach.unknown == {}
    tasks = checked_tasks(reach, [acc], tmp_path / "runs" / "r1")
    assert [t.op_id for t in tasks] == [own.op_id, "attention.apply_rope_with_cos_sin_cache_inplace"]


def test_a_companion_with_no_timed_shape_says_so_rather_than_a_zero_speedup():
    from optimize.session import _held
    from pipeline.run_records import Evaluation, Outcome

    ev = Evaluation(op_id="x", candidate="c", outcome=Outcome.ok, checks_passed=18)
    assert _held(None, ev) == "correct (18 checks); not timed: no catalog shape"
    assert _held(1.0641, ev) == "correct, geomean 1.064x"
