"""bench.release_ab (`kernelsmith track ab`): two releases' kernels of an op in one worker.
CPU: when two releases can be compared, the verdict of a worker record, a batch that resumes and keeps
one op's trouble to itself. GPU: the same release against itself is no change (the false-alarm check)."""

from __future__ import annotations

import shutil

import pytest
from conftest import ensure_default_tasks
from test_search import timing

from bench import release_ab
from bench.release_ab import ReleaseAB, judge, not_comparable, old_units
from cli.main import main as cli_main
from cli.parser import build_parser
from contract.layout import load_task
from pipeline.config import load_config
from pipeline.errors import ConfigError
from pipeline.record_io import read_record, write_record
from pipeline.run_records import Evaluation, Outcome

OP = "activation.silu_and_mul"
HEAD = {"op_id": OP, "old": "0.5.22", "new": "0.5.23"}


def _timed(speedups: list[float]) -> Evaluation:
    return Evaluation(
        op_id=OP, candidate="release 0.5.22", outcome=Outcome.ok, timings=[timing(s, 0.5) for s in speedups]
    )


@pytest.mark.parametrize(
    ("speedups", "verdict"),
    [([1.20, 1.18, 1.25], "regression"), ([0.80, 0.85, 0.82], "improvement"), ([1.001, 0.999, 1.0], "no change")],
)
def test_the_new_release_is_the_baseline_so_an_old_kernel_faster_than_it_is_a_regression(speedups, verdict):
    result = judge(HEAD, _timed(speedups), noise_pct=2.0)
    assert result.verdict == verdict
    if verdict == "regression":
        assert result.change_pct is not None and result.change_pct > 15 and "new vs old +" in result.detail


def test_a_worker_that_found_the_releases_disagree_gives_no_verdict():
    bad = Evaluation(op_id=OP, candidate="x", outcome=Outcome.incorrect, detail="max_abs_err 3.0 at T=8")
    result = judge(HEAD, bad, noise_pct=2.0)
    assert result.verdict == "failed" and "incorrect: max_abs_err 3.0" in result.detail


def test_two_releases_compare_only_when_the_worker_can_call_both_the_same_way():
    task = load_task(ensure_default_tasks() / OP)
    assert not_comparable(task, task) == ""
    moved = task.model_copy(update={"contract": task.contract.model_copy(update={"entry": "run_other"})})
    assert not_comparable(moved, task) == f"the entry changed: run_other -> {task.contract.entry}"
    fewer = task.model_copy(update={"contract": task.contract.model_copy(update={"args": task.contract.args[:1]})})
    said = not_comparable(fewer, task)
    assert said == f"the arguments changed (1 -> {len(task.contract.args)} arguments)"
    units = [[task.instantiations[0]]]
    assert old_units(task, units) == units
    other = [i.model_copy(update={"template_args": [*i.template_args, "7"]}) for i in task.instantiations]
    missing = old_units(task.model_copy(update={"instantiations": other}), units)
    assert isinstance(missing, str) and missing.startswith("the old release has no bf16 instantiation")


def test_a_batch_writes_each_record_as_it_ends_and_a_rerun_skips_them(tmp_path, monkeypatch):
    tasks = ensure_default_tasks()
    old, new = tmp_path / "old" / "tasks", tmp_path / "new" / "tasks"
    for root in (old, new):
        root.mkdir(parents=True)
    shutil.copytree(tasks / OP, new / OP)
    shutil.copytree(tasks / "layernorm.fused_add_rmsnorm", new / "layernorm.fused_add_rmsnorm")
    shutil.copytree(tasks / OP, old / OP)  # the old release lacks fused_add_rmsnorm
    calls: list[str] = []

    def compare(old_dir, old_task, new_dir, new_task, *, config, plant):
        calls.append(new_task.op_id)
        return ReleaseAB(op_id=new_task.op_id, old="a", new="b", verdict="no change", detail="ok")

    monkeypatch.setattr(release_ab, "compare", compare)
    argv = ["track", "ab", "--old", str(old.parent), "--new", str(new.parent), "--work-dir", str(tmp_path / "work")]
    assert cli_main(argv) == 0
    assert calls == [OP]
    records = sorted((tmp_path / "work" / "track" / "ab").glob("*/*.json"))
    by_op = {p.stem: read_record(ReleaseAB, p) for p in records}
    assert by_op[OP].verdict == "no change"
    assert by_op["layernorm.fused_add_rmsnorm"].verdict == "not comparable"
    assert "the old release has no task for it" in by_op["layernorm.fused_add_rmsnorm"].detail
    calls.clear()
    assert cli_main(argv) == 0 and calls == [], "a rerun keeps the records it finds"


def test_ab_without_the_old_release_says_what_to_add(tmp_path):
    from cli.track import main as track_main

    args = build_parser().parse_args(["track", "ab"])
    with pytest.raises(ConfigError, match="track ab needs --old"):
        track_main(args, load_config(overrides={"work_dir": str(tmp_path)}, environ={}))


@pytest.mark.gpu
def test_a_release_against_itself_is_no_change(tmp_path):
    """The A/A of the release A/B: the same task as old and new, in one worker, is not a regression."""
    tasks = ensure_default_tasks()
    task = load_task(tasks / OP)
    config = load_config(overrides={"work_dir": str(tmp_path)}, environ={})
    result = release_ab.compare(tasks / OP, task, tasks / OP, task, config=config)
    assert result.verdict == "no change", result.detail
    write_record(result, tmp_path / "aa.json")


def test_a_planted_regression_asks_the_worker_for_the_extra_pass_and_refuses_an_in_place_op(monkeypatch):
    tasks = ensure_default_tasks()
    task = load_task(tasks / OP)
    config = load_config(environ={})
    seen = []
    monkeypatch.setattr(release_ab, "build_baseline", lambda *a, **k: (None, ["lib.so"]))
    monkeypatch.setattr(release_ab, "run_request", lambda request, *a: seen.append(request) or "run")
    monkeypatch.setattr(release_ab, "to_evaluation", lambda *a, **k: _timed([2.0, 1.9, 2.1]))
    result = release_ab.compare(tasks / OP, task, tasks / OP, task, config=config, plant=2)
    assert seen[0].planted_passes == 2 and seen[0].candidate_libraries == ["lib.so"]
    assert result.verdict == "regression" and result.planted_passes == 2
    from optimize.harness.errors import BaselineError

    def baseline_failed(*a, **k):
        raise BaselineError("the baseline of activation.silu_and_mul failed its checks", fix="check the task")

    monkeypatch.setattr(release_ab, "to_evaluation", baseline_failed)
    failed = release_ab.compare(tasks / OP, task, tasks / OP, task, config=config)
    assert failed.verdict == "failed" and "the new release: the baseline" in failed.detail, "one op's record"
    norm = load_task(tasks / "layernorm.fused_add_rmsnorm")
    refused = release_ab.compare(tasks, norm, tasks, norm, config=config, plant=2)
    assert refused.verdict == "not comparable" and "in place" in refused.detail


@pytest.mark.gpu
def test_a_planted_extra_pass_is_flagged_at_about_its_size(tmp_path):
    """The planted regression: the new build runs silu_and_mul twice per call; the verdict flags it, and
    its size is about +100 % (one kernel run twice back to back in a CUDA graph)."""
    tasks = ensure_default_tasks()
    task = load_task(tasks / OP)
    config = load_config(overrides={"work_dir": str(tmp_path)}, environ={})
    result = release_ab.compare(tasks / OP, task, tasks / OP, task, config=config, plant=2)
    assert result.verdict == "regression", result.detail
    assert result.change_pct is not None and 60 <= result.change_pct <= 140, result.detail
