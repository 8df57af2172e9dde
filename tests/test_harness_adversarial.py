"""The adversarial suite (tests/adversarial/*.cuh) and its judge.

CPU: every case parses, states a valid expectation and targets a real span.
nvcc: every case compiles into a module through the real builder.
GPU: every cheat is rejected with the expected outcome and reason, every honest
rewrite and the unmodified baseline are accepted.
"""

from __future__ import annotations

import pathlib
import re

import pytest

from optimize.harness import adversarial
from pipeline.run_records import Evaluation, Outcome

ROOT = pathlib.Path(__file__).resolve().parent.parent
CASES = adversarial.load_cases()
OPS = sorted({c.op for c in CASES})


def _task(op):
    from contract.layout import load_task
    from tests.conftest import ensure_default_tasks

    task_dir = ensure_default_tasks() / op
    return task_dir, load_task(task_dir)


def _config():
    from pipeline.config import load_config

    return load_config(overrides={"work_dir": str(ROOT / "work")})


def test_every_case_parses_with_a_valid_expectation():
    assert len(CASES) >= 10
    outcomes = {o.value for o in Outcome}
    for case in CASES:
        assert case.expect in outcomes, case.name
        re.compile(case.reason)
        assert case.cheat, case.name
        assert "template <" in case.text and "__global__ void" in case.text, case.name


def test_the_suite_covers_every_cheat_the_harness_must_catch():
    cheats = " ".join(c.cheat for c in CASES if c.expect == "incorrect")
    for phrase in (
        "skips part of the work",
        "cached result",
        "only right at the catalog shapes",
        "another stream",
        "mutates its input",
        "uninitialized memory",
        "emits NaN",
        "writes only part of the output",
    ):
        assert phrase in cheats, phrase
    assert any(c.expect == "ok" for c in CASES), "an honest rewrite keeps the harness from rejecting mere difference"


def test_the_suite_covers_cheats_of_the_timed_graphs():
    """Launchers that behave differently inside a many-call capture than in an eager call or a
    one-call graph: only validating the timed graphs' outputs (and the floor) can catch them."""
    timed = [c for c in CASES if c.timed]
    cheats = " ".join(c.cheat for c in timed if c.expect == "incorrect")
    for phrase in (
        "skips the work from the 2nd captured call on",
        "writes only the first buffer set's outputs",
        "skips the work when the output already holds a number",
    ):
        assert phrase in cheats, phrase
    assert all("buffer set" in c.reason for c in timed if c.expect == "incorrect")
    assert not any(c.timed for c in CASES if c.name in ("act_partial_write", "act_cached_result", "act_honest"))


def test_a_race_is_in_the_suite_and_judged_by_final_validation():
    """The race needs what only final validation has (racecheck), or the repeat of run 1's inputs."""
    races = [c for c in CASES if "missing barrier" in c.cheat]
    assert races and all(c.final and c.expect == "incorrect" for c in races)
    assert all("racecheck" in c.reason and "run 3" in c.reason for c in races)


def test_parse_case_reads_the_timed_flag(tmp_path):
    head = "// kernelsmith-adversarial\n// op: a\n// span: k\n// expect: incorrect\n"
    path = tmp_path / "x.cuh"
    path.write_text(head + "// timed: yes\ntemplate <int N> __global__ void k() {}\n")
    assert adversarial.parse_case(path).timed is True
    path.write_text(head + "template <int N> __global__ void k() {}\n")
    assert adversarial.parse_case(path).timed is False
    path.write_text(head + "// timed: maybe\n")
    with pytest.raises(ValueError, match="must be yes or no"):
        adversarial.parse_case(path)


def test_timed_set_comparison_reports_poison_and_normwise_inout():
    """The worker's per-tensor rule for a timed buffer set (torch on any device; skipped without it)."""
    torch = pytest.importorskip("torch")
    from contract.plan import TensorPlan
    from optimize.harness import inputs
    from optimize.harness.compare import timed_reason as _timed_reason

    out = TensorPlan(name="out", role="output", dtype="bf16", shape=(2, 4), strides=(4, 1), offset=0, storage_numel=8)
    base = torch.arange(8, dtype=torch.float32).add(1).to(torch.bfloat16)
    assert _timed_reason(out, base, base.clone(), normwise=False) == ""
    got = base.clone()
    got.view(torch.int16)[5] = inputs.poison_value("bf16")
    reason = _timed_reason(out, base, got, normwise=False)
    assert "out[1, 1] was never written" in reason and "expected 6" in reason
    res = TensorPlan(name="res", role="inout", dtype="bf16", shape=(2, 4), strides=(4, 1), offset=0, storage_numel=8)
    near = base.clone()
    near[0] = near[0] * 1.01  # one element off by a rounding step: fine normwise, not elementwise
    assert _timed_reason(res, base, near, normwise=True) == ""
    far = base * 2
    assert "||candidate - baseline|| / ||baseline||" in _timed_reason(res, base, far, normwise=True)


def test_parse_case_rejects_files_without_marker(tmp_path):
    bad = tmp_path / "x.cuh"
    bad.write_text("// op: a\n")
    with pytest.raises(ValueError, match="does not start"):
        adversarial.parse_case(bad)
    bad.write_text("// kernelsmith-adversarial\n// op: a\n")
    with pytest.raises(ValueError, match="lacks metadata"):
        adversarial.parse_case(bad)


def _evaluation(outcome, detail):
    return Evaluation(op_id="o", candidate="c", outcome=outcome, detail=detail)


def test_judge_needs_outcome_and_reason():
    case = next(c for c in CASES if c.name == "act_partial_write")
    assert adversarial.judge(case, _evaluation(Outcome.incorrect, "out[0, 7] was never written"))[0]
    ok, why = adversarial.judge(case, _evaluation(Outcome.ok, "42 checks passed"))
    assert not ok and "expected incorrect, got ok" in why
    ok, why = adversarial.judge(case, _evaluation(Outcome.incorrect, "out[0, 7] = 1, expected 2"))
    assert not ok and "does not match" in why


@pytest.mark.parametrize("op", OPS)
def test_cases_target_spans_the_task_has(op):
    task_dir, task = _task(op)
    for case in [c for c in CASES if c.op == op]:
        cand = adversarial.candidate_for(case, task)
        assert list(cand.regions) == [adversarial.span_name(task, case.span)]
        assert cand.id.startswith(f"adv-{case.name}-")
    base = adversarial.baseline_candidate(task_dir, task)
    assert set(base.regions) == {s.name for s in task.editable}


@pytest.mark.nvcc
@pytest.mark.parametrize("op", OPS)
def test_every_case_builds(op):
    from extract.splice import candidate_overrides
    from optimize.harness.evaluate import plan_cases
    from pipeline.build import BuildJob, build_many

    task_dir, task = _task(op)
    config = _config()
    plan = plan_cases(task, held_out=0, profile=False)
    cases = [c for c in CASES if c.op == op]
    jobs = [
        BuildJob(
            task_dir=task_dir,
            task=task,
            instantiations=tuple(plan.units[0]),
            cache_root=config.cache / "builds",
            overrides=candidate_overrides(task_dir, task, adversarial.candidate_for(c, task).regions),
        )
        for c in cases
    ]
    for case, report in zip(cases, build_many(jobs)):
        assert report.ok, f"{case.name}: {report.stderr[-2000:]}"


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_adversarial_case_is_judged_as_expected(case):
    from optimize.backends.gpu import GpuBackend
    from optimize.harness.evaluate import evaluate

    task_dir, task = _task(case.op)
    candidate = adversarial.candidate_for(case, task)
    if case.final:  # final validation: the harness, then compute-sanitizer's tools
        evaluation = GpuBackend(_config()).evaluate(task_dir, task, candidate, stage="final")
    else:
        evaluation = evaluate(task_dir, task, candidate, config=_config(), profile=case.timed)
    ok, why = adversarial.judge(case, evaluation)
    assert ok, why


@pytest.mark.gpu
def test_skipping_calls_where_one_buffer_set_fills_the_graph_is_rejected_by_the_floor():
    """At the largest catalog shape one buffer set already spans the L2 rotation, so every call of
    the timed graph uses set 0: its outputs are right (the first call wrote them) and only the
    time tells. A per-call time of ~1/20 of the real one is below the physical floor."""
    from optimize.harness.evaluate import evaluate

    case = next(c for c in CASES if c.name == "act_graph_skip_after_first")
    task_dir, task = _task(case.op)
    largest = max(task.shapes, key=lambda s: s.sizes.get("num_tokens", 0) * s.sizes.get("hidden_size", 0))
    evaluation = evaluate(
        task_dir,
        task,
        adversarial.candidate_for(case, task),
        config=_config(),
        shapes=[largest],
        held_out=False,
    )
    assert evaluation.outcome == Outcome.incorrect, evaluation.detail
    assert re.search("implausible time: the candidate|buffer set", evaluation.detail), evaluation.detail


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["act_honest", "fused_honest"])
def test_honest_rewrites_pass_the_timed_graph_validation(name):
    """The positive controls, timed: every timed shape's sampled buffer sets match the baseline's."""
    from optimize.harness.evaluate import evaluate

    case = next(c for c in CASES if c.name == name)
    task_dir, task = _task(case.op)
    evaluation = evaluate(task_dir, task, adversarial.candidate_for(case, task), config=_config(), profile=True)
    assert evaluation.outcome in (Outcome.ok, Outcome.slower), evaluation.detail
    assert evaluation.timings and evaluation.timed_sets_validated >= len(evaluation.timings)


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["activation.silu_and_mul", "layernorm.fused_add_rmsnorm", "layernorm.rmsnorm"])
def test_unmodified_baseline_passes(op):
    from optimize.harness.evaluate import evaluate

    task_dir, task = _task(op)
    config = _config()
    alone = evaluate(task_dir, task, None, config=config, profile=False)
    assert alone.outcome == Outcome.ok, alone.detail
    assert alone.checks_failed == 0 and alone.checks_passed > 0
    as_candidate = evaluate(
        task_dir, task, adversarial.baseline_candidate(task_dir, task), config=config, profile=False
    )
    assert as_candidate.outcome == Outcome.ok, as_candidate.detail
    assert as_candidate.bitwise_equal is True  # the same module: bit-identical on every input


@pytest.mark.gpu
def test_the_sweep_learns_a_wrong_role_from_the_baseline_itself():
    """A baseline that writes a tensor its contract calls an input (here the adversarial
    kernel that mutates `input`, standing in as the oracle), or never writes one its
    contract calls an output: the worker reports it as role evidence, the sweep re-checks
    with the tensor inout and says so in the row."""
    from bench import health
    from optimize.harness.evaluate import build_units

    task_dir, task = _task("activation.silu_and_mul")
    config = _config()

    def prepared(contract):
        prep = health.prepare(task_dir)
        prep.task = prep.task.model_copy(update={"contract": contract})
        return prep

    def with_role(name, role):
        args = [
            a.model_copy(update={"tensor": a.tensor.model_copy(update={"role": role})})
            if a.tensor is not None and a.tensor.name == name
            else a
            for a in task.contract.args
        ]
        return task.contract.model_copy(update={"args": args})

    prep = prepared(task.contract)
    mutating = next(c for c in CASES if c.name == "act_mutate_input")
    report, libs = build_units(
        task_dir, task, prep.plan.units, config=config, regions=adversarial.candidate_for(mutating, task).regions
    )
    assert report.ok, report.stderr[-2000:]
    row = health.check(prep, libs, config)
    assert row.passed, row.reason
    assert "input: role inout (baseline: written)" in row.filled

    prep = prepared(with_role("input", "output"))  # what extract would write for a tensor named `*_output`
    _, libs = build_units(task_dir, task, prep.plan.units, config=config)
    row = health.check(prep, libs, config)
    assert row.passed, row.reason
    assert "input: role inout (baseline: never written)" in row.filled
