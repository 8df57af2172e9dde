"""optimize.policy: ranking, the no-repeat rule, offline vs LLM, reasons, determinism."""

from __future__ import annotations

import pathlib

import pytest

from optimize.cuda_spans import definition_spans, region_texts
from optimize.features import ProfileFacts, features_of_regions
from optimize.policy import GIVE_UP_AFTER, Decision, decide, plan
from optimize.skills import load_skills
from optimize.trajectory import HistoryEntry, params_key
from pipeline.run_records import NotEvaluated, Outcome

ELEMENTWISE = "kernels/jit/csrc/elementwise"
PROFILE = ProfileFacts(
    time_over_floor=1.4,
    pct_of_copy_bw=70.0,
    min_time_us=4.0,
    registers=40,
    spills=0,
    stack_bytes=0,
    memory_bound=True,
    small_batch=True,
    min_tokens=1,
    max_tokens=16384,
)


@pytest.fixture(scope="module")
def lib():
    return load_skills()


def real_features(root: str, name: str, profile=None):
    path = f"{ELEMENTWISE}/{name}"
    data = (pathlib.Path(root) / path).read_bytes()
    return features_of_regions(region_texts({path: data}, definition_spans(path, data)), profile=profile)


@pytest.fixture(scope="module")
def act(sglang_source):
    return real_features(sglang_source.root, "activation.cuh", PROFILE)


@pytest.fixture(scope="module")
def fused(sglang_source):
    return real_features(sglang_source.root, "fused_add_rmsnorm.cuh", PROFILE)


def entry(skill, params, outcome, speedup=None, round=1):
    return HistoryEntry(skill=skill, params=params, outcome=outcome, speedup_geomean=speedup, round=round)


def keys(decisions):
    return [(d.skill, params_key(d.params)) for d in decisions]


@pytest.mark.wheel
def test_offline_plan_proposes_only_mechanical_skills_with_bound_parameters(act, lib):
    proposals = plan(act, lib, [], llm_available=False, limit=20)
    assert proposals and all(d.proposed and d.mode == "transform" and d.transform for d in proposals)
    assert [d.rank for d in proposals] == list(range(1, len(proposals) + 1))
    by_skill = {}
    for d in proposals:
        by_skill.setdefault(d.skill, []).append(d.params)
    assert by_skill["tune_block_size"] == [
        {"name": "kBlockSize", "owner": "ActivationKernel", "value": v} for v in (128, 512, 1024)
    ]
    assert {"kernel": "act_and_mul_kernel", "max_threads": 256, "min_blocks": 0} in by_skill["launch_bounds"]
    assert by_skill["fast_math_intrinsics"][0] == {"ops": ["expf"]}
    assert by_skill["pdl_early_trigger"] == [{}]
    assert "pdl_enable" not in by_skill  # PDL already follows kUsePDL
    everything = decide(act, lib, [], llm_available=False, limit=20)
    llm_only = [d for d in everything if d.skill == "grid_2d_rows"]
    assert llm_only and llm_only[0].verdict == "rejected"
    assert "needs the LLM coder" in llm_only[0].reason and "int_divmod_runtime=4" in llm_only[0].reason


@pytest.mark.wheel
def test_every_skill_gets_a_decision_with_reasons(act, lib):
    decisions = decide(act, lib, [], llm_available=True, limit=6)
    assert {d.skill for d in decisions} == set(lib.ids())
    assert all(d.reasons for d in decisions)
    assert [d.proposed for d in decisions] == sorted((d.proposed for d in decisions), reverse=True)  # proposals first
    false_rule = next(d for d in decisions if d.skill == "vector_loads_128")
    assert false_rule.verdict == "rejected"
    assert false_rule.reasons == [
        "rule is false: `memory_bound and (not vector_loads or load_bytes < 16)` with load_bytes=16, memory_bound=True, vector_loads=True"
    ]
    over = [d for d in decisions if d.verdict == "rejected" and "ranked below the limit of 6 proposals" in d.reason]
    assert over, "applicable options beyond the limit are reported, not dropped"
    chosen = decisions[0]
    assert chosen.rank == 1 and chosen.reasons[0].startswith("rule holds:") and chosen.reasons[-1].startswith("score ")


@pytest.mark.wheel
def test_llm_available_adds_llm_only_skills_and_variants(act, lib):
    proposals = plan(act, lib, [], llm_available=True, limit=40)
    modes = {d.skill: d.mode for d in proposals}
    assert modes["grid_2d_rows"] == "llm" and modes["tune_block_size"] == "transform"
    variants = [d.params for d in proposals if d.skill == "items_per_thread"]
    # no items-per-thread constant in activation.cuh: the LLM coder gets one proposal per variant
    assert variants == [{"variant": "2 vectors per thread"}, {"variant": "4 vectors per thread"}]


@pytest.mark.wheel
def test_never_repeats_a_failed_or_slower_pair(act, lib):
    first = plan(act, lib, [], llm_available=False, limit=50)
    tried = first[:5]
    outcomes = [
        Outcome.compile_failed,
        Outcome.slower,
        Outcome.incorrect,
        NotEvaluated.not_applicable,
        Outcome.ok,
    ]
    history = [
        entry(d.skill, d.params, o, 0.97 if o in (Outcome.slower, Outcome.ok) else None, round=i + 1)
        for i, (d, o) in enumerate(zip(tried, outcomes))
    ]
    again = decide(act, lib, history, llm_available=False, limit=50)
    proposed = set(keys([d for d in again if d.proposed]))
    for d in tried:
        assert (d.skill, params_key(d.params)) not in proposed
    rejected = {(d.skill, params_key(d.params)): d.reason for d in again if not d.proposed}
    assert "round 1: compile_failed" in rejected[keys([tried[0]])[0]]
    assert "round 2: slower (0.970x)" in rejected[keys([tried[1]])[0]]
    assert "round 5: no gain (0.970x)" in rejected[keys([tried[4]])[0]]  # ok but not faster counts as slower
    # pairs not tried are still offered
    assert proposed == set(keys(first)) - set(keys(tried))


@pytest.mark.wheel
def test_success_is_not_repeated_and_raises_the_skill(act, lib):
    first = plan(act, lib, [], llm_available=False, limit=50)
    block = next(d for d in first if d.skill == "tune_block_size")
    history = [entry(block.skill, block.params, Outcome.ok, 1.08)]
    again = plan(act, lib, history, llm_available=False, limit=50)
    assert keys([block])[0] not in keys(again)
    before = next(d.score for d in first if d.skill == "tune_block_size")
    after = next(d for d in again if d.skill == "tune_block_size")
    assert after.score == pytest.approx(before + 0.1) and "1 earlier success" in after.reason


@pytest.mark.wheel
def test_inconclusive_attempts_may_be_retried_and_repeated_failures_drop_the_skill(act, lib):
    first = plan(act, lib, [], llm_available=False, limit=50)
    target = next(d for d in first if d.skill == "launch_bounds")
    budget = [
        entry(target.skill, target.params, Outcome.budget_exhausted),
        entry(target.skill, target.params, NotEvaluated.model_error),
    ]
    assert keys([target])[0] in keys(plan(act, lib, budget, llm_available=False, limit=50))
    failures = [entry("launch_bounds", {"kernel": f"k{i}"}, Outcome.crashed, round=i) for i in range(GIVE_UP_AFTER)]
    out = decide(act, lib, failures, llm_available=False, limit=50)
    assert not [d for d in out if d.skill == "launch_bounds" and d.proposed]
    dropped = [d for d in out if d.skill == "launch_bounds"]
    assert len(dropped) == 1 and f"failed {GIVE_UP_AFTER} times" in dropped[0].reason
    one_failure = plan(act, lib, failures[:1], llm_available=False, limit=50)
    lowered = next(d for d in one_failure if d.skill == "launch_bounds")
    assert lowered.score == pytest.approx(target.score - 0.15)


@pytest.mark.wheel
def test_limit_and_round_robin_diversity(act, lib):
    proposals = plan(act, lib, [], llm_available=False, limit=4)
    assert len(proposals) == 4
    assert len({d.skill for d in proposals}) == 4  # one per skill before any skill's second option
    assert plan(act, lib, [], llm_available=False, limit=0) == []
    with pytest.raises(ValueError, match="limit"):
        plan(act, lib, [], llm_available=False, limit=-1)
    scores = [d.score for d in proposals]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.wheel
def test_plan_is_deterministic_and_order_independent(fused, lib):
    a = decide(fused, lib, [], llm_available=True, limit=10)
    b = decide(fused, list(reversed(list(lib))), [], llm_available=True, limit=10)
    assert a == b
    assert all(isinstance(d, Decision) for d in a)
    offline = plan(fused, lib, [], llm_available=False, limit=10)
    assert offline[0].skill == "pdl_enable" and offline[0].params == {}  # launched with .enable_pdl(false)


@pytest.mark.wheel
def test_undecided_rules_say_which_feature_is_missing(sglang_source, lib):
    bare = real_features(sglang_source.root, "rmsnorm.cuh")  # no profile: nothing measured
    out = decide(bare, lib, [], llm_available=True, limit=10)
    coalesce = next(d for d in out if d.skill == "coalesced_access")
    assert coalesce.verdict == "rejected" and coalesce.reason.startswith("undecided: pct_of_copy_bw unknown")
