"""The optimize loop end to end on CPU: replayed timings, scripted LLM replies.

Measurements come from ``tests/fixtures/replay/demo.replay.json`` (SYNTHETIC
figures, labelled so in the file) for the ``demo.scale`` test task built here;
everything else — agents, parsing, trajectory, budgets, resume, final
validation, reports — is the real code.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import pathlib
import re
import threading

import pytest

from optimize.backends.replay import ReplayBackend
from optimize.hooks import Hooks, load_skills, policy_plan, region_features
from optimize.llm.client import Completion, LlmClient
from optimize.llm.fakes import ScriptedModel
from optimize.loop import Loop
from optimize.session import LoopOptions
from optimize.skills import SkillError
from optimize.trajectory import Trajectory, params_key
from pipeline.config import Config
from pipeline.record_io import read_record, write_record
from pipeline.records import (
    ArgSpec,
    BuildRecipe,
    Contract,
    FileDigest,
    Instantiation,
    ShapeCase,
    SourceInfo,
    Span,
    Task,
    TensorSpec,
)
from pipeline.run_records import Candidate, Evaluation, NotEvaluated, Outcome, RunSummary

HERE = pathlib.Path(__file__).resolve().parent
REPLAY = HERE / "fixtures" / "replay" / "demo.replay.json"
SRC_REL = "kernels/jit/csrc/demo/scale.cuh"
KERNEL = """__global__ void scale_kernel(float* out, const float* in, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    const float x = in[i];
    out[i] = x / (1.0f + expf(-x));  // scale
  }
}
"""
LAUNCHER = """void launch_scale(float* out, const float* in, int n, cudaStream_t s) {
  constexpr int kBlockSize = 256;
  scale_kernel<<<(n + kBlockSize - 1) / kBlockSize, kBlockSize, 0, s>>>(out, in, n);
}
"""
BODY = "    out[i] = x / (1.0f + expf(-x));  // scale"
SOURCE = "#pragma once\n#include <cuda_runtime.h>\n\n" + KERNEL + "\n" + LAUNCHER


def make_task(op_id: str = "demo.scale") -> Task:
    data = SOURCE.encode()
    k0 = data.index(KERNEL.encode())
    l0 = data.index(LAUNCHER.encode())
    tensor = lambda name, role: ArgSpec(kind="tensor", tensor=TensorSpec(name=name, shape=["n"], dtype="T", role=role))  # noqa: E731
    return Task(
        op_id=op_id,
        module="kernels/ops/demo/scale.py",
        public_functions=["scale"],
        entry_points=["scale"],
        source=SourceInfo(kind="package", root="/nonexistent/sglang"),
        files=[FileDigest(path=SRC_REL, sha256=hashlib.sha256(data).hexdigest(), size=len(data))],
        instantiations=[
            Instantiation(dtype="fp32", module_args=[], template_args=[], wrappers=[("scale", "launch_scale")])
        ],
        build=BuildRecipe(cuda_files=[SRC_REL], include_dirs=["kernels/jit/include"], cuda_cflags=[]),
        editable=[
            Span(file=SRC_REL, start_byte=k0, end_byte=k0 + len(KERNEL), name="scale_kernel", kind="kernel"),
            Span(file=SRC_REL, start_byte=l0, end_byte=l0 + len(LAUNCHER), name="launch_scale", kind="launcher"),
        ],
        contract=Contract(
            entry="scale",
            args=[tensor("out", "output"), tensor("in", "input")],
            symbols=["n"],
            max_values={"n": 1 << 30},
        ),
        shapes=[ShapeCase(model="demo", tokens=n, sizes={"n": n}, source="test") for n in (1024, 1 << 20, 1 << 24)],
    )


def write_task(work: pathlib.Path, op_id: str = "demo.scale") -> tuple[pathlib.Path, Task]:
    task = make_task(op_id)
    task_dir = work / "tasks" / op_id
    (task_dir / "src" / SRC_REL).parent.mkdir(parents=True, exist_ok=True)
    (task_dir / "src" / SRC_REL).write_text(SOURCE, encoding="utf-8")
    write_record(task, task_dir / "task.json")
    return task_dir, task


# --------------------------------------------------------------------------- policy spy


def recording_policy(calls: list):
    """The real policy (:func:`optimize.hooks.policy_plan`), recording the history it was given."""

    def plan(features, skills, history, *, llm_available, limit):
        calls.append([(h.skill, params_key(h.params), h.outcome.value) for h in history])
        return policy_plan(features, skills, history, llm_available=llm_available, limit=limit)

    return plan


def hooks(calls: list | None = None) -> Hooks:
    return Hooks(policy_plan=recording_policy(calls if calls is not None else []))


class CountingBackend(ReplayBackend):
    def __init__(self, path=REPLAY, *, interrupt_at: int | None = None):
        super().__init__(path)
        self.calls: list[tuple[str, str]] = []
        self.interrupt_at = interrupt_at

    def evaluate(self, task_dir, task, candidate, *, stage="round"):
        self.calls.append((candidate.id, stage))
        if self.interrupt_at is not None and len(self.calls) == self.interrupt_at:
            raise KeyboardInterrupt
        return super().evaluate(task_dir, task, candidate, stage=stage)


def config(work: pathlib.Path, *, search: str = "auto", skills: tuple[str, ...] = (), **budget) -> Config:
    return Config.model_validate(
        {"work_dir": str(work), "budget": {"rounds": 1, **budget}, "search": {"strategy": search, "skills": skills}}
    )


def edit(old: str, new: str, region: str = "scale_kernel") -> str:
    return f"region: {region}\n<<<<<<< SEARCH\n{old}\n=======\n{new}\n>>>>>>> REPLACE\n"


def whole(text: str, region: str = "scale_kernel") -> str:
    return f"```cuda region={region}\n{text}```\n"


VEC_KERNEL = KERNEL.replace("// scale", "// scale (float4 body, scalar tail)")


def run_loop(
    tmp_path,
    model,
    *,
    rounds=1,
    mode="multi",
    coder="llm",
    calls=None,
    backend=None,
    search="auto",
    skills=(),
    **budget,
):
    task_dir, task = write_task(tmp_path)
    backend = backend or CountingBackend()
    loop = Loop(
        config(tmp_path, rounds=rounds, search=search, skills=skills, **budget),
        LoopOptions(run="r1", mode=mode, coder=coder),
        backend,
        model=model,
        hooks=hooks(calls),
    )
    summary = loop.run([(task_dir, task)])
    return summary, Trajectory(tmp_path / "runs" / "r1" / "demo.scale" / "trajectory.jsonl"), backend


# --------------------------------------------------------------------------- the LLM loop


def choose(skill: str, plan: str, code: str = ""):
    """A scripted planner / single-agent reply picking ``skill`` by its number in the prompt's options."""

    def reply(messages):
        options = messages[-1]["content"].split("Options", 1)[1]
        match = re.search(rf"^(\d+)\. {skill}\b", options, re.M)
        assert match, f"{skill} is not among the options:\n{options}"
        return f"CHOICE: {match.group(1)}\nPLAN: {plan}\n{code}"

    return reply


def options_of(prompt: str) -> list[str]:
    return re.findall(r"^\d+\. (\w+)", prompt.split("Options", 1)[1], re.M)


def test_llm_loop_plan_code_compile_error_repair_accept(tmp_path):
    model = ScriptedModel(
        [
            '[{"label": "odd-tail", "sizes": {"n": 4097}, "distribution": "edge", "why": "scalar tail"}]',  # testing
            choose("vector_loads_128", "\nLoad float4 in scale_kernel, keep a scalar tail for n % 4."),  # planning
            edit(BODY, "    out[i] = __broken_intrinsic(x);  // scale"),  # coding
            whole(VEC_KERNEL),  # repair
        ]
    )
    summary, traj, backend = run_loop(tmp_path, model)
    assert model.agents() == ["testing", "planning", "coding", "repair"]
    planning_prompt = model.prompts[1][1][1]["content"]
    assert "vector_loads_128" in options_of(planning_prompt) and "method:" in planning_prompt

    # the repair prompt carried the compiler's error, mapped to the region
    repair_prompt = model.prompts[3][1][1]["content"]
    assert 'identifier "__broken_intrinsic" is undefined [region scale_kernel line 4]' in repair_prompt
    assert "__broken_intrinsic(x)" in repair_prompt  # the failed candidate's regions

    kinds = [r.kind for r in traj.records]
    assert kinds == ["baseline", "round", "stop", "final"]
    rnd = traj.rounds()[0]
    assert (rnd.skill, rnd.params, rnd.outcome, rnd.accepted) == ("vector_loads_128", {}, Outcome.ok, True)
    assert [(a.agent, a.outcome.value) for a in rnd.attempts] == [("coding", "compile_failed"), ("repair", "ok")]
    assert rnd.speedup_geomean == pytest.approx((1.02 * 1.35 * 1.21) ** (1 / 3), rel=1e-6)
    assert rnd.plan.startswith("Load float4") and rnd.tokens > 0
    assert traj.records[2].stop_reason == "rounds"
    assert traj.records[3].outcome == Outcome.ok and traj.records[3].candidate == rnd.candidate
    assert [stage for _, stage in backend.calls] == ["round", "round", "round", "final"]

    run_dir = tmp_path / "runs" / "r1"
    op_dir = run_dir / "demo.scale"
    best = read_record(Candidate, op_dir / "best" / "candidate.json")
    assert best.id == rnd.candidate and best.parent == traj.baseline().candidate and best.coder == "llm:repair"
    assert (op_dir / "best" / "regions" / "scale_kernel.txt").read_text() == VEC_KERNEL
    patched = (op_dir / "best" / "src" / SRC_REL).read_text()
    assert patched == SOURCE.replace(KERNEL, VEC_KERNEL)
    plan = json.loads((op_dir / "test_plan.json").read_text())
    assert plan["extra"][0]["label"] == "odd-tail" and plan["extra"][0]["kept"] is False  # no GPU to validate it
    completed = json.loads((op_dir / "contract_completion.json").read_text())  # nothing open: no model call for it
    assert (completed["op_id"], completed["filled"], completed["open"]) == ("demo.scale", [], [])
    assert len((op_dir / "llm.jsonl").read_text().splitlines()) == 4

    report = (op_dir / "report.md").read_text()
    assert "SIMULATED" in report and "| demo[n=1048576] | fp32 | 4.00 | 2.96 |" in report
    assert "Skills applied: vector_loads_128" in report
    run = read_record(RunSummary, run_dir / "summary.json")
    assert run.simulated and run.coder == "llm" and run.tokens == rnd.tokens + traj.baseline().tokens
    (op,) = run.ops
    assert (op.status, op.best, op.skills, op.best_dir) == (
        "improved",
        rnd.candidate,
        ["vector_loads_128"],
        "demo.scale/best",
    )


def test_a_mechanical_option_is_applied_by_its_transform_even_with_an_llm(tmp_path):
    model = ScriptedModel(["[]", choose("tune_block_size", "smaller blocks for the small shapes")])
    summary, traj, _ = run_loop(tmp_path, model)
    assert model.agents() == ["testing", "planning"]  # no coding call: the transform wrote the edit
    (rnd,) = traj.rounds()
    assert rnd.skill == "tune_block_size" and rnd.params["value"] == 128
    assert [a.agent for a in rnd.attempts] == ["transform"] and rnd.accepted
    best = (tmp_path / "runs/r1/demo.scale/best/regions/launch_scale.txt").read_text()
    assert "constexpr int kBlockSize = 128;" in best


def test_malformed_reply_is_a_recorded_outcome_and_the_loop_goes_on(tmp_path):
    model = ScriptedModel(
        [
            "no proposals",  # testing: unreadable, recorded in the plan's notes
            choose("vector_loads_128", "vectorize"),
            "I would vectorize this kernel, but here is no code.",  # coding: malformed
            choose("items_per_thread", "two vectors per thread"),
            whole(KERNEL.replace("// scale", "// scale kSmallN")),
        ]
    )
    summary, traj, backend = run_loop(tmp_path, model, rounds=2)
    first, second = traj.rounds()
    assert first.outcome == NotEvaluated.malformed_reply and first.candidate is None
    assert "no code block" in first.detail
    assert "vector_loads_128" not in options_of(model.prompts[3][1][1]["content"])  # not offered again
    assert second.skill == "items_per_thread" and second.outcome == Outcome.ok and second.accepted
    assert len([c for c in backend.calls if c[1] == "round"]) == 2  # baseline + round 2 only
    plan = json.loads((tmp_path / "runs/r1/demo.scale/test_plan.json").read_text())
    assert plan["notes"] == ["the testing agent's reply has no JSON list"]


GUARDED_LAUNCHER = LAUNCHER.replace(
    "  scale_kernel<<<", "  constexpr int kSmallN = 4096;  // baseline path below this size\n  scale_kernel<<<"
)


def test_regressed_shape_gets_a_dispatch_guard_before_acceptance(tmp_path):
    model = ScriptedModel(
        [
            "[]",
            choose("items_per_thread", "two vectors per thread"),
            edit(BODY, BODY + " x2"),
            whole(GUARDED_LAUNCHER, "launch_scale"),  # the guard
        ]
    )
    summary, traj, _ = run_loop(tmp_path, model)
    guard_prompt = model.prompts[3][1]
    assert "host-side shape dispatch" in guard_prompt[0]["content"]
    assert "n=1024: 0.800x" in guard_prompt[1]["content"].split("Faster at:")[0]
    (rnd,) = traj.rounds()
    assert rnd.skill == "items_per_thread"
    assert [a.agent for a in rnd.attempts] == ["coding", "guard"]
    assert rnd.outcome == Outcome.ok and rnd.guarded and rnd.accepted and not rnd.regressed_shapes
    assert summary.ops[0].guarded and summary.ops[0].status == "improved"


def test_regressed_candidate_without_a_guard_is_not_accepted(tmp_path):
    model = ScriptedModel(
        ["[]", choose("items_per_thread", "two vectors"), edit(BODY, BODY + " x2"), "the guard reply has no code"]
    )
    summary, traj, _ = run_loop(tmp_path, model)
    (rnd,) = traj.rounds()
    assert rnd.outcome == Outcome.slower and not rnd.accepted
    assert rnd.regressed_shapes == ["demo[n=1024] fp32"]
    assert [a.status for a in rnd.attempts] == ["edited", "malformed_reply"]
    assert summary.ops[0].status == "no_improvement" and not (tmp_path / "runs/r1/demo.scale/best").exists()
    assert traj.history()[0].failed  # the policy will not offer this (skill, params) again


def test_final_validation_failure_disqualifies_the_best(tmp_path):
    model = ScriptedModel(
        [
            "[]",
            choose("vector_loads_128", "vectorize"),
            whole(KERNEL.replace("// scale", "// scale unsafe_tail")),
            choose("items_per_thread", "two vectors per thread with the small-size guard"),
            whole(KERNEL.replace("// scale", "// scale unsafe_tail kSmallN")),
        ]
    )
    summary, traj, _ = run_loop(tmp_path, model, rounds=2)
    r1, r2 = traj.rounds()
    assert r1.accepted and r2.skill == "items_per_thread"
    assert r2.outcome == Outcome.ok and not r2.accepted  # 1.07x does not beat 1.27x
    finals = traj.finals()
    assert [(f.candidate, f.outcome) for f in finals] == [(r1.candidate, Outcome.incorrect)]
    assert "never written" in finals[0].detail
    assert summary.ops[0].status == "no_improvement"
    report = (tmp_path / "runs/r1/demo.scale/report.md").read_text()
    assert "| 1 | final | vector_loads_128 | — | incorrect |" in report
    assert "no candidate passed final validation" in report


# --------------------------------------------------------------------------- offline, no-repeat


def test_a_run_scoped_to_some_skills_plans_with_those_only(tmp_path):
    """search.skills (--skills): the policy is given only the named skills; an unknown id is refused."""
    _, traj, _ = run_loop(tmp_path, None, rounds=3, coder="offline", search="off", skills=("tune_block_size",))
    assert {r.skill for r in traj.rounds()} == {"tune_block_size"}
    with pytest.raises(SkillError, match="did you mean tune_block_size"):
        run_loop(tmp_path / "other", None, coder="offline", search="off", skills=("tune_blocksize",))
    from cli.parser import build_parser
    from cli.parser import overrides as _overrides

    args = build_parser().parse_args(["optimize", "--skills", "pdl_enable, pdl_small_grids"])
    assert _overrides(args)["search"] == {"skills": ["pdl_enable", "pdl_small_grids"]}


def test_offline_loop_uses_real_transforms_and_never_repeats_a_tried_option(tmp_path):
    """search.strategy = "off": one transform a round, the policy's first untried option."""
    calls: list = []
    summary, traj, backend = run_loop(tmp_path, None, rounds=8, coder="offline", calls=calls, search="off")
    rounds = traj.rounds()
    pairs = [(r.skill, params_key(r.params)) for r in rounds]
    assert len(pairs) == len(set(pairs)) == 8  # nothing tried twice
    # round 1 took the real policy's first option for the baseline
    op = tmp_path / "runs/r1/demo.scale"
    base_eval = read_record(Evaluation, op / "evaluations" / f"{traj.baseline().candidate}.round.json")
    first_option = policy_plan(
        region_features({"scale_kernel": KERNEL, "launch_scale": LAUNCHER}, base_eval),
        load_skills(),
        [],
        llm_available=False,
        limit=8,
    )[0]
    assert pairs[0] == (first_option.skill, params_key(first_option.params))
    # every call to the policy saw every earlier attempt, with its outcome
    assert [len(c) for c in calls] == list(range(8))
    assert calls[-1] == [(r.skill, params_key(r.params), r.outcome.value) for r in rounds[:-1]]
    # each round starts from the best accepted candidate before it, edited by a real transform
    best = traj.baseline().candidate
    for r in rounds:
        assert r.base == best and [a.agent for a in r.attempts] == ["transform"]
        best = r.candidate if r.accepted else best
    # outcomes are the replay's: the fixture makes fast math wrong and larger blocks slower
    for r in rounds:
        if r.skill == "fast_math_intrinsics":
            assert r.outcome == Outcome.incorrect and "max abs err" in r.attempts[0].detail
        if r.skill == "tune_block_size" and r.params["value"] != 128:
            assert r.outcome == Outcome.slower
    if summary.ops[0].status == "improved":
        chosen = read_record(Candidate, op / "best" / "candidate.json")
        assert chosen.id == summary.ops[0].best and chosen.skill == summary.ops[0].skills[-1]
        assert chosen.regions != {"scale_kernel": KERNEL, "launch_scale": LAUNCHER}


# --------------------------------------------------------------------------- budgets


def two_op_replay(tmp_path) -> pathlib.Path:
    data = json.loads(REPLAY.read_text())
    data["ops"]["demo.copy"] = copy.deepcopy(data["ops"]["demo.scale"])
    path = tmp_path / "two.replay.json"
    path.write_text(json.dumps(data))
    return path


def run_two_ops(tmp_path, model, *, coder="llm", clock=None, search="off", **budget):
    """Two ops, one transform a round by default (these tests count rounds against budgets)."""
    ops = [write_task(tmp_path, "demo.scale"), write_task(tmp_path, "demo.copy")]
    backend = CountingBackend(two_op_replay(tmp_path))
    kwargs = {"clock": clock} if clock else {}
    loop = Loop(
        config(tmp_path, search=search, **budget),
        LoopOptions(run="r1", coder=coder),
        backend,
        model=model,
        hooks=hooks(),
        **kwargs,
    )
    return loop.run(ops), backend


def vector_script(n=1):
    return ["[]", choose("vector_loads_128", "vectorize"), whole(VEC_KERNEL)] * n


@pytest.mark.parametrize(
    "budget, model, reason",
    [
        ({"tokens": 60}, ScriptedModel(["x" * 400] + vector_script(2)), "tokens"),
        (
            {"dollars_usd": 0.001},
            ScriptedModel(["y" * 4000] + vector_script(2), price_usd_per_mtok={"input": 1.0, "output": 1000.0}),
            "dollars",
        ),
    ],
)
def test_model_budgets_stop_the_run_with_the_reason(tmp_path, budget, model, reason):
    summary, _ = run_two_ops(tmp_path, model, rounds=3, **budget)
    first, second = summary.ops
    assert first.stop_reason == reason and second.status == "skipped" and second.stop_reason == reason
    traj = Trajectory(tmp_path / "runs/r1/demo.scale/trajectory.jsonl")
    stop = traj.records[-1]
    assert stop.kind == "stop" and stop.stop_reason == reason
    assert traj.rounds() == []  # the first planning call was refused
    assert not (tmp_path / "runs/r1/demo.copy").exists()


def test_gpu_budget_stops_between_rounds_but_final_validation_still_runs(tmp_path):
    summary, backend = run_two_ops(tmp_path, None, coder="offline", rounds=5, gpu_s=7.0)
    first, second = summary.ops
    traj = Trajectory(tmp_path / "runs/r1/demo.scale/trajectory.jsonl")
    assert len(traj.rounds()) == 2  # baseline 3 s + round 3 s = 6 s < 7 s; after round 2, 9 s
    assert first.stop_reason == "gpu_time" and first.status == "improved"
    assert traj.finals()[0].outcome == Outcome.ok
    assert second.status == "skipped" and summary.gpu_s >= 7.0


def test_wall_budget(tmp_path):
    ticks = iter(range(0, 100_000, 40))
    summary, _ = run_two_ops(tmp_path, None, coder="offline", rounds=5, wall_s=200.0, clock=lambda: next(ticks))
    assert summary.ops[0].stop_reason == "wall_time" and summary.ops[1].status == "skipped"


# --------------------------------------------------------------------------- resume


class ScriptedTransport:
    """A transport for the real LlmClient: answers from a script, counts calls."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.calls = 0

    def __call__(self, *, model, messages, temperature, max_tokens, timeout_s):
        self.calls += 1
        reply = self.replies.pop(0)
        return Completion(reply(messages) if callable(reply) else reply, 100, 50)


def llm_client(tmp_path, transport):
    cfg = Config.model_validate({"work_dir": str(tmp_path)}).llm
    return LlmClient(cfg, cache_dir=tmp_path / "cache" / "llm", transport=transport)


def test_interrupted_run_resumes_without_redoing_finished_work(tmp_path):
    replies = [
        "[]",
        choose("vector_loads_128", "vectorize"),
        whole(VEC_KERNEL),
        choose("items_per_thread", "two vectors per thread with a small-size guard"),
        whole(VEC_KERNEL.replace("// scale", "// scale kSmallN")),
    ]
    first = ScriptedTransport(replies)
    task_dir, task = write_task(tmp_path)
    interrupted = CountingBackend(interrupt_at=3)  # baseline, round 1, then killed evaluating round 2
    loop = Loop(
        config(tmp_path, rounds=2),
        LoopOptions(run="r1", coder="llm"),
        interrupted,
        model=llm_client(tmp_path, first),
        hooks=hooks(),
    )
    with pytest.raises(KeyboardInterrupt):
        loop.run([(task_dir, task)])
    traj_path = tmp_path / "runs/r1/demo.scale/trajectory.jsonl"
    assert [r.kind for r in Trajectory(traj_path).records] == ["baseline", "round"]
    assert first.calls == 5
    before = traj_path.read_bytes()

    again = ScriptedTransport([])  # any call to the endpoint would fail: everything is cached
    backend = CountingBackend()
    loop = Loop(
        config(tmp_path, rounds=2),
        LoopOptions(run="r1", coder="llm"),
        backend,
        model=llm_client(tmp_path, again),
        hooks=hooks(),
    )
    summary = loop.run([(task_dir, task)])
    assert again.calls == 0
    # only the unfinished round-2 candidate and the final validation were evaluated
    assert [stage for _, stage in backend.calls] == ["round", "final"]
    after = traj_path.read_bytes()
    assert after.startswith(before)
    records = Trajectory(traj_path).records
    assert [r.kind for r in records] == ["baseline", "round", "round", "stop", "final"]
    assert summary.ops[0].status == "improved" and summary.tokens > 0

    # a third run with the same budget redoes nothing at all
    idle = CountingBackend()
    Loop(
        config(tmp_path, rounds=2),
        LoopOptions(run="r1", coder="llm"),
        idle,
        model=llm_client(tmp_path, ScriptedTransport([])),
        hooks=hooks(),
    ).run([(task_dir, task)])
    assert idle.calls == [] and traj_path.read_bytes() == after


def test_a_run_refuses_to_resume_on_a_re_extracted_task(tmp_path):
    from optimize.errors import TrajectoryError

    run_loop(tmp_path, None, coder="offline")
    task_dir = tmp_path / "tasks" / "demo.scale"
    changed = SOURCE.replace("expf(-x)", "__expf(-x)")
    (task_dir / "src" / SRC_REL).write_text(changed)
    data = changed.encode()
    kernel, launcher = make_task().editable
    task = make_task().model_copy(
        update={
            "files": [FileDigest(path=SRC_REL, sha256=hashlib.sha256(data).hexdigest(), size=len(data))],
            "editable": [  # the edit grew the kernel by two bytes
                kernel.model_copy(update={"end_byte": kernel.end_byte + 2}),
                launcher.model_copy(update={"start_byte": launcher.start_byte + 2, "end_byte": launcher.end_byte + 2}),
            ],
        }
    )
    loop = Loop(config(tmp_path, rounds=2), LoopOptions(run="r1", coder="offline"), CountingBackend(), hooks=hooks())
    with pytest.raises(TrajectoryError, match="changed since run r1 started"):
        loop.run([(task_dir, task)])


# --------------------------------------------------------------------------- single mode


def test_single_mode_plans_codes_and_fixes_itself(tmp_path):
    model = ScriptedModel(
        [
            "[]",
            choose(
                "vector_loads_128",
                "float4 loads with a scalar tail",
                edit(BODY, "    out[i] = __broken_intrinsic(x);  // scale"),
            ),
            "CHOICE: 1\nPLAN: fixed\n" + whole(VEC_KERNEL),
        ]
    )
    summary, traj, _ = run_loop(tmp_path, model, mode="single")
    assert model.agents() == ["testing", "single", "single"]
    assert "Your last candidate failed" in model.prompts[2][1][1]["content"]
    assert "__broken_intrinsic" in model.prompts[2][1][1]["content"]
    (rnd,) = traj.rounds()
    assert rnd.mode == "single" and rnd.skill == "vector_loads_128" and rnd.accepted
    assert [(a.agent, a.outcome.value) for a in rnd.attempts] == [("single", "compile_failed"), ("single", "ok")]
    assert summary.mode == "single" and summary.ops[0].status == "improved"


def test_single_mode_and_llm_coder_need_a_model(tmp_path):
    from pipeline.errors import ConfigError

    with pytest.raises(ConfigError, match="single"):
        Loop(config(tmp_path), LoopOptions(run="r", mode="single", coder="llm"), CountingBackend(), model=None)
    with pytest.raises(ConfigError, match="--coder llm"):
        Loop(config(tmp_path), LoopOptions(run="r", mode="multi", coder="llm"), CountingBackend(), model=None)


# --------------------------------------------------------------------------- the command


def cli(*argv: str) -> int:
    from cli.main import main

    return main(["optimize", *argv])


def test_without_a_gpu_and_without_replay_the_command_refuses_and_says_how(tmp_path, monkeypatch, capsys):
    import optimize.backends.gpu as gpu

    write_task(tmp_path)
    monkeypatch.setattr(gpu, "probe_device", lambda: (False, "torch is not installed in this environment"))
    assert cli("--ops", "demo.scale", "--work-dir", str(tmp_path), "--coder", "offline") == 2
    err = capsys.readouterr().err
    assert "evaluation needs a CUDA GPU" in err and "torch is not installed" in err
    assert "--replay FILE" in err and "GPU machine" in err
    assert not (tmp_path / "runs").exists()  # nothing started, nothing spent


@pytest.mark.skipif(__import__("importlib").util.find_spec("torch") is not None, reason="torch is installed here")
def test_probe_reports_missing_torch_on_this_machine():
    from optimize.backends.gpu import probe_device

    assert probe_device() == (False, "torch is not installed in this environment")


def test_command_replay_run_resumes_with_more_rounds(tmp_path, capsys):
    write_task(tmp_path)
    common = (
        "--ops",
        "demo.scale",
        "--work-dir",
        str(tmp_path),
        "--coder",
        "offline",
        "--run",
        "cli",
        "--replay",
        str(REPLAY),
        "--search",
        "off",
    )
    assert cli(*common, "--rounds", "2") == 0
    run_dir = tmp_path / "runs" / "cli"
    summary = read_record(RunSummary, run_dir / "summary.json")
    assert summary.simulated and summary.ops[0].rounds == 2 and summary.ops[0].status == "improved"
    assert "SIMULATED" in capsys.readouterr().err
    traj_path = run_dir / "demo.scale" / "trajectory.jsonl"
    before = traj_path.read_bytes()

    assert cli(*common, "--rounds", "3") == 0
    after = Trajectory(traj_path)
    assert after.path.read_bytes().startswith(before)
    assert [r.round for r in after.rounds()] == [1, 2, 3]
    assert read_record(RunSummary, run_dir / "summary.json").ops[0].rounds == 3


def test_command_refuses_mixing_options_in_one_run_and_single_mode_offline(tmp_path, monkeypatch, capsys):
    write_task(tmp_path)
    common = ("--ops", "demo.scale", "--work-dir", str(tmp_path), "--run", "mix", "--replay", str(REPLAY))
    assert cli(*common, "--coder", "offline", "--rounds", "1") == 0
    monkeypatch.setenv("KERNELSMITH_LLM__BASE_URL", "http://llm.invalid/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    assert cli(*common) == 2  # the endpoint makes llm the default coder; the run was offline
    assert "started with coder='offline'" in capsys.readouterr().err
    monkeypatch.delenv("KERNELSMITH_LLM__BASE_URL")
    assert cli(*common, "--mode", "single") == 2
    assert "--mode single" in capsys.readouterr().err


def test_llm_is_the_default_coder_when_an_endpoint_is_configured(tmp_path, monkeypatch, capsys):
    write_task(tmp_path)
    monkeypatch.setenv("KERNELSMITH_LLM__BASE_URL", "http://llm.invalid/v1")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert cli("--ops", "demo.scale", "--work-dir", str(tmp_path), "--replay", str(REPLAY)) == 2
    assert "OPENAI_API_KEY is not set" in capsys.readouterr().err


# --------------------------------------------------------------------------- replay backend


def test_replay_file_errors_name_the_problem(tmp_path):
    from optimize.errors import ReplayError
    from optimize.trajectory import candidate_id

    with pytest.raises(ReplayError, match="not found"):
        ReplayBackend(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"format": "something-else/9"}')
    with pytest.raises(ReplayError, match="expected 'kernelsmith-replay/1'"):
        ReplayBackend(tmp_path / "bad.json")
    data = json.loads(REPLAY.read_text())
    data["ops"]["demo.scale"]["unmatched"] = None
    strict = tmp_path / "strict.json"
    strict.write_text(json.dumps(data))
    backend = ReplayBackend(strict)
    task = make_task()
    unknown = Candidate(op_id=task.op_id, id="f" * 16, parent="p", regions={"scale_kernel": "x"}, skill="no_such_skill")
    with pytest.raises(ReplayError, match="no entry for candidate"):
        backend.evaluate(None, task, unknown)
    with pytest.raises(ReplayError, match="has no op 'demo.other'"):
        backend.evaluate(None, make_task("demo.other"), unknown)
    regions = {"scale_kernel": KERNEL, "launch_scale": LAUNCHER}
    base = Candidate(op_id=task.op_id, id=candidate_id(regions), parent=None, regions=regions)
    evaluation = backend.evaluate(None, task, base)
    assert evaluation.outcome.value == "ok" and "replayed baseline (synthetic" in evaluation.detail
    assert backend.gpu_s == 3.0


def test_a_gpu_runs_recording_replays_its_measurements(tmp_path):
    """What GpuBackend writes (replay.record) reproduces the same evaluations in a replay."""
    from optimize.backends import replay
    from pipeline.records import BuildReport
    from pipeline.run_records import Evaluation, Outcome, ShapeTiming

    task = make_task()
    regions = {"scale_kernel": KERNEL, "launch_scale": LAUNCHER}
    base = Candidate(op_id=task.op_id, id="b" * 16, parent=None, regions=regions)
    cand = Candidate(
        op_id=task.op_id, id="c" * 16, parent=base.id, regions={**regions, "scale_kernel": VEC_KERNEL}, skill="x"
    )
    broken = Candidate(
        op_id=task.op_id, id="d" * 16, parent=base.id, regions={**regions, "scale_kernel": "}"}, skill="x"
    )
    row = dict(label="demo[n=1024]", sizes={"n": 1024}, dtype="fp32", spread_pct=1.0, gbps=4.0, pct_of_copy_bw=0.1)
    measured_base = Evaluation(
        op_id=task.op_id,
        candidate=base.id,
        outcome=Outcome.ok,
        timings=[ShapeTiming(**row, time_us=2.0, time_over_floor=1.5)],
        seconds={"build": 9.0, "test": 1.5, "profile": 2.5},
    )
    measured = Evaluation(
        op_id=task.op_id,
        candidate=cand.id,
        outcome=Outcome.ok,
        timings=[ShapeTiming(**row, time_us=1.6, time_over_floor=1.2, baseline_us=2.0, speedup=1.25)],
        seconds={"build": 9.0, "test": 1.0, "profile": 2.0},
    )
    failed = Evaluation(
        op_id=task.op_id,
        candidate=broken.id,
        outcome=Outcome.compile_failed,
        build=BuildReport(ok=False, key="k", seconds=3.0, stderr="scale.cuh(1): error: expected a declaration"),
    )
    final = measured.model_copy(
        update={"outcome": Outcome.crashed, "detail": "compute-sanitizer memcheck failed", "timings": []}
    )
    path = tmp_path / "measurements.replay.json"
    for evaluation, is_base, stage in (
        (measured_base, True, "round"),
        (measured, False, "round"),
        (failed, False, "round"),
        (final, False, "final"),
    ):
        replay.record(path, evaluation, baseline=is_base, stage=stage, device="NVIDIA H200")
    backend = ReplayBackend(path)
    assert backend.source == "recorded" and backend.device == "NVIDIA H200"
    got_base = backend.evaluate(None, task, base)
    assert got_base.timings[0].time_us == 2.0 and got_base.seconds["test"] == 1.5
    got = backend.evaluate(None, task, cand)
    assert got.outcome == Outcome.ok and got.timings[0].time_us == pytest.approx(1.6)
    assert got.timings[0].speedup == pytest.approx(1.25) and got.timings[0].time_over_floor == pytest.approx(1.2)
    got_failed = backend.evaluate(None, task, broken)
    assert got_failed.outcome == Outcome.compile_failed and "expected a declaration" in got_failed.build.stderr
    got_final = backend.evaluate(None, task, cand, stage="final")
    assert got_final.outcome == Outcome.crashed and "memcheck" in got_final.detail


# --------------------------------------------------------------------------- on the GPU


@pytest.mark.gpu
@pytest.mark.wheel
def test_offline_round_on_the_gpu_records_a_replayable_run(tmp_path, sglang_source):
    """One offline round on a real op, measured; its recording replays the same baseline figures."""
    from cli.main import main

    op = "activation.silu_and_mul"
    common = ["--work-dir", str(tmp_path), "--sglang", sglang_source.root]
    assert main(["extract", "--ops", op, *common]) == 0
    assert main(["optimize", "--ops", op, "--coder", "offline", "--rounds", "1", "--run", "gpu", *common]) == 0
    run_dir = tmp_path / "runs" / "gpu"
    summary = read_record(RunSummary, run_dir / "summary.json")
    assert not summary.simulated and summary.gpu_s > 0
    traj = Trajectory(run_dir / op / "trajectory.jsonl")
    baseline = traj.baseline()
    assert baseline.timings and all(t.time_us > 0 and t.time_over_floor > 0 for t in baseline.timings)
    replayed = ReplayBackend(run_dir / "measurements.replay.json")
    from contract.layout import load_task

    task = load_task(tmp_path / "tasks" / op)
    base = read_record(Candidate, run_dir / op / "candidates" / f"{baseline.candidate}.json")
    again = replayed.evaluate(None, task, base)
    assert [t.time_us for t in again.timings] == [t.time_us for t in baseline.timings]
    # the baseline was profiled once with Nsight Compute, and the profile was recorded for replay
    from optimize.harness.tools import NcuResult, find_tool

    if find_tool("ncu") is not None:
        profile = read_record(NcuResult, run_dir / op / "profiles" / f"{baseline.candidate}.ncu.json")
        assert profile.status == "ok", profile.detail
        assert replayed.profile(None, task, None).metrics() == profile.metrics()


def test_an_edit_that_reproduces_measured_code_is_not_evaluated_again(tmp_path):
    """Found on the H200 (2026-11-29): a round whose edit gave back the baseline's code
    reused the baseline's stored evaluation, which has no speedups, and crashed the
    loop. Now it is a recorded no_change and nothing is evaluated."""
    model = ScriptedModel(
        [
            "[]",  # testing
            choose("vector_loads_128", "vectorize"),
            whole(VEC_KERNEL),  # round 1: accepted
            lambda messages: choose(options_of(messages[-1]["content"])[0], "go back")(messages),
            whole(KERNEL),  # round 2: the baseline's own text again
        ]
    )
    summary, traj, backend = run_loop(tmp_path, model, rounds=2, coder="llm")
    first, second = traj.rounds()
    assert first.accepted
    assert second.outcome == NotEvaluated.no_change and not second.accepted
    assert "already evaluated" in second.attempts[-1].detail
    assert [stage for _, stage in backend.calls].count("round") == 2  # baseline + round 1 only


# --------------------------------------------------------------------------- Nsight Compute in the loop


def test_ncu_profile_of_the_best_reaches_the_planner_once_per_candidate(tmp_path):
    """A replayed ncu profile (SYNTHETIC rows) feeds the profile text, the features and is stored."""
    data = json.loads(REPLAY.read_text())
    data["ops"]["demo.scale"]["ncu"] = {
        "baseline": [
            {
                "kernel": "scale_kernel",
                "duration_us": 40.0,
                "dram_throughput_pct": 42.0,
                "achieved_occupancy_pct": 31.0,
                "top_stalls": [["lg_throttle", 1.5], ["long_scoreboard", 6.25]],
            }
        ]
    }
    replay = tmp_path / "ncu.replay.json"
    replay.write_text(json.dumps(data))
    prompts: list[str] = []
    seen: list = []

    class Profiled(CountingBackend):
        profiled: list = []

        def profile(self, task_dir, task, candidate):
            self.profiled.append(None if candidate is None else candidate.id)
            return super().profile(task_dir, task, candidate)

    def features(regions, evaluation, build_flags=None, *, ncu=None):
        found = region_features(regions, evaluation, build_flags, ncu=ncu)
        seen.append(found.profile)
        return found

    def reply(messages):  # planner: the first option; every other agent: nothing usable
        prompts.append(messages[-1]["content"])
        return "CHOICE: 1\nPLAN: whatever the first option is\n" if "Options" in messages[-1]["content"] else "no edit"

    backend = Profiled(replay)
    task_dir, task = write_task(tmp_path)
    model = ScriptedModel([reply] * 40)
    loop = Loop(
        config(tmp_path, rounds=2),
        LoopOptions(run="r1", coder="llm"),
        backend,
        model=model,
        hooks=Hooks(features=features),
    )
    loop.run([(task_dir, task)])
    planned = [p for p in prompts if "Options" in p]
    assert "ncu: top warp stall long_scoreboard (6.25 warps per issue)" in planned[0]
    assert "ncu: DRAM throughput 42% of peak" in planned[0] and "achieved occupancy 31%" in planned[0]
    assert (
        seen[0].occupancy == pytest.approx(0.31) and seen[0].dram_pct == 42.0 and seen[0].top_stall == "long_scoreboard"
    )
    assert backend.profiled == [None]  # the baseline, once: round 2 read the stored profile
    stored = list((tmp_path / "runs/r1/demo.scale/profiles").glob("*.ncu.json"))
    assert len(stored) == 1 and '"status": "ok"' in stored[0].read_text()


def test_ncu_profile_can_be_switched_off(tmp_path):
    class Profiled(CountingBackend):
        def profile(self, *args):
            raise AssertionError("harness.ncu_profile = false must not profile")

    task_dir, task = write_task(tmp_path)
    cfg = Config.model_validate({"work_dir": str(tmp_path), "budget": {"rounds": 1}, "harness": {"ncu_profile": False}})
    Loop(cfg, LoopOptions(run="r1", coder="offline"), Profiled(), hooks=hooks()).run([(task_dir, task)])


class ContractLearningBackend(CountingBackend):
    """A baseline that contradicts its contract twice: it writes `in` (an "input"),
    then never writes `out` (an "output"); it passes once both are inout."""

    def evaluate(self, task_dir, task, candidate, *, stage="round"):
        from optimize.harness.errors import BaselineError

        roles = {a.tensor.name: a.tensor.role for a in task.contract.args if a.tensor is not None}
        if candidate.is_baseline and roles["in"] == "input":
            self.calls.append((candidate.id, "refused"))
            raise BaselineError(
                "the baseline of demo.scale failed its checks",
                detail="input in was modified",
                evidence={"in": "written"},
            )
        if candidate.is_baseline and roles["out"] == "output":
            self.calls.append((candidate.id, "never_written"))
            return Evaluation(
                op_id=task.op_id,
                candidate=candidate.id,
                outcome=Outcome.incorrect,
                detail="the baseline leaves out[0] unwritten",
                role_evidence={"out": "never_written"},
            )
        return super().evaluate(task_dir, task, candidate, stage=stage)


def test_the_loop_learns_roles_the_baseline_contradicts_and_keeps_them_for_the_run(tmp_path):
    backend = ContractLearningBackend()
    summary, traj, _ = run_loop(tmp_path, None, rounds=1, coder="offline", backend=backend)
    base = traj.baseline().candidate
    assert [stage for cid, stage in backend.calls if cid == base][:3] == ["refused", "never_written", "round"]
    op = tmp_path / "runs/r1/demo.scale"
    completed = json.loads((op / "contract_completion.json").read_text())
    assert [(f["name"], f["kind"], f["value"], f["rule"]) for f in completed["filled"]] == [
        ("in", "role", "inout", "baseline: written"),
        ("out", "role", "inout", "baseline: never written"),
    ]
    assert (op / "evaluations" / f"{base}.round.superseded-1.json").exists()  # the stale verdict is kept, renamed
    assert read_record(Evaluation, op / "evaluations" / f"{base}.round.json").outcome == Outcome.ok
    assert summary.ops[0].status in ("improved", "no_improvement")


# --------------------------------------------------------------------------- a dead endpoint (issue 16 rows 3, 13)


def test_every_llm_call_failing_is_model_failed_not_no_improvement(tmp_path):
    from optimize.errors import EndpointError

    dead = EndpointError("the LLM endpoint failed 5 times (model o4-mini)", fix="check the endpoint")
    model = ScriptedModel([dead] * 5)
    summary, traj, _ = run_loop(tmp_path, model, rounds=2)
    assert model.agents() == ["testing", "planning", "coding", "planning", "coding"] and model.remaining == 0
    (op,) = summary.ops
    assert op.status == "model_failed" and op.best is None and op.rounds == 2
    assert "all 5 LLM call(s) failed" in op.detail and "fix: check the endpoint" in op.detail
    assert [a.status for r in traj.rounds() for a in r.attempts] == ["model_error", "model_error"]
    on_disk = read_record(RunSummary, tmp_path / "runs" / "r1" / "summary.json")
    assert on_disk.ops[0].status == "model_failed"

    # a rerun of the finished run makes no call (ScriptedModel([]) would raise) and says the same
    again = Loop(
        config(tmp_path, rounds=2), LoopOptions(run="r1", coder="llm"), CountingBackend(), model=ScriptedModel([])
    )
    rerun = again.run([write_task(tmp_path)])
    assert rerun.ops[0].status == "model_failed" and "every LLM attempt" in rerun.ops[0].detail


def test_one_answered_call_is_not_a_model_failure(tmp_path):
    from optimize.errors import EndpointError

    dead = EndpointError("the LLM endpoint failed 5 times", fix="check the endpoint")
    model = ScriptedModel(["[]", dead, "I cannot help with that."])  # testing answered; coding's reply is unusable
    summary, traj, _ = run_loop(tmp_path, model)
    assert summary.ops[0].status == "no_improvement"
    assert traj.rounds()[0].outcome == NotEvaluated.malformed_reply


class BrokenEndpoint:
    """An OpenAI-compatible server on 127.0.0.1 (started by the test) answering every
    request 200 with a body that is not JSON, as a proxy or a restarting server does."""

    def __init__(self):
        import http.server
        import threading

        hits = self.hits = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's spelling
                self.rfile.read(int(self.headers.get("content-length", 0)))
                hits.append(self.path)
                body = b'{"id": "chatcmpl-1", "object": "chat.completion", "choices": ['
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def test_command_with_an_endpoint_sending_malformed_json_records_it_and_exits_non_zero(tmp_path, monkeypatch, capsys):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    endpoint = BrokenEndpoint()
    try:
        write_task(tmp_path)
        monkeypatch.setenv("KERNELSMITH_LLM__BASE_URL", endpoint.url)
        monkeypatch.setenv("KERNELSMITH_LLM__MAX_RETRIES", "1")
        monkeypatch.setenv("OPENAI_API_KEY", "local")
        monkeypatch.setattr("optimize.llm.client.BACKOFF_BASE_S", 0.0)  # no wait between the two tries
        argv = ("--ops", "demo.scale", "--work-dir", str(tmp_path), "--run", "dead", "--replay", str(REPLAY))
        code = cli(*argv, "--rounds", "1")
    finally:
        endpoint.close()
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" not in err and "JSONDecodeError" not in err
    assert "error (demo.scale)" in err and "malformed body 2 times" in err and "fix:" in err
    assert len(endpoint.hits) == 6 and set(endpoint.hits) == {"/v1/chat/completions"}  # 3 calls, each tried twice
    run_dir = tmp_path / "runs" / "dead"
    assert read_record(RunSummary, run_dir / "summary.json").ops[0].status == "model_failed"
    (rnd,) = Trajectory(run_dir / "demo.scale" / "trajectory.jsonl").rounds()
    assert rnd.outcome == NotEvaluated.model_error and "malformed body" in rnd.attempts[0].detail
    assert not list((tmp_path / "cache" / "llm").glob("*.json"))  # nothing of it was cached


@pytest.mark.parametrize(("flag", "fresh"), [((), False), (("--fresh-samples",), True)])
def test_a_run_asks_for_fresh_samples_from_the_command_line(tmp_path, monkeypatch, capsys, flag, fresh):
    """Issue 16 row 15: a run can ask for fresh samples; --fresh-samples reaches the client the run uses."""
    from pipeline.errors import ConfigError

    seen: list[bool] = []

    def capture(self, llm_config, **kwargs):
        seen.append(llm_config.fresh_samples)
        raise ConfigError("stopped after the client was made", fix="none: a test")

    monkeypatch.setattr(LlmClient, "__init__", capture)
    monkeypatch.setenv("KERNELSMITH_LLM__BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "local")
    write_task(tmp_path)
    argv = ("--ops", "demo.scale", "--work-dir", str(tmp_path), "--run", "f", "--replay", str(REPLAY), *flag)
    assert cli(*argv) == 2
    assert seen == [fresh] and "stopped after the client was made" in capsys.readouterr().err


# --------------------------------------------------------------------------- search rounds (the default offline coder)


def test_offline_search_composes_transforms_records_every_member_and_converges(tmp_path):
    """SIMULATED (the demo replay): a round searches the composed transforms the policy proposes; the
    winner combines several; every member is in the trajectory; nothing is measured twice; a round
    that finds nothing faster ends the op ("converged"); a rerun of the run measures nothing."""
    summary, traj, backend = run_loop(tmp_path, None, rounds=8, coder="offline")
    rounds = traj.rounds()
    first = rounds[0]
    members = [a for a in first.attempts if a.candidate]
    assert all(a.agent == "search" for a in first.attempts) and len(members) > 8
    assert first.accepted and "+" in (first.skill or "")
    op = tmp_path / "runs/r1/demo.scale"
    best = read_record(Candidate, op / "candidates" / f"{first.candidate}.json")
    assert len(best.steps) >= 2 and best.skill == "+".join(s.skill for s in best.steps)
    # the replay's rules: fast math is wrong, so the winner never has it; tune_block_size 128 helps
    assert "fast_math_intrinsics" not in best.skill_ids
    measured = [cid for cid, stage in backend.calls if stage == "round"]
    assert len(measured) == len(set(measured)), "no point measured twice"
    assert {a.candidate for r in rounds for a in r.attempts if a.candidate} <= set(measured) | {
        traj.baseline().candidate
    }
    stop = [r for r in traj.records if r.kind == "stop"]
    assert stop and stop[-1].stop_reason == "converged" and not rounds[-1].accepted
    assert summary.ops[0].status == "improved" and summary.ops[0].stop_reason == "converged"
    calls = len(backend.calls)
    summary2, _, _ = run_loop(tmp_path, None, rounds=8, coder="offline", backend=backend)
    assert len(backend.calls) == calls and summary2.ops[0].best == summary.ops[0].best


def test_an_op_whose_every_bucket_is_at_its_floor_gets_no_round_and_the_report_says_why(tmp_path):
    """SIMULATED: the demo baseline made to run within 1.1x of its floor at every shape."""
    data = json.loads(REPLAY.read_text())
    for row in data["ops"]["demo.scale"]["baseline"]:
        row["time_over_floor"] = 1.05
    path = tmp_path / "floor.replay.json"
    path.write_text(json.dumps(data))
    summary, traj, backend = run_loop(tmp_path, None, rounds=8, coder="offline", backend=CountingBackend(path))
    assert traj.rounds() == [] and summary.ops[0].stop_reason == "at_floor"
    assert [stage for _, stage in backend.calls] == ["round"], "only the baseline was measured"
    text = (tmp_path / "runs/r1/demo.scale/report.md").read_text()
    assert "No-go (within 1.1× of the floor, not worth a round): T<=64" in text


# --------------------------------------------------------------------------- a Triton task (issue 19)


def synthetic_replay(path: pathlib.Path, task, what: str) -> pathlib.Path:
    """A SYNTHETIC replay of ``task``: its first two shapes' baseline times, every candidate 1.25x."""
    row = {"dtype": "bf16", "spread_pct": 1.0, "gbps": 100.0, "pct_of_copy_bw": 2.0, "time_over_floor": 3.0}
    data = {
        "format": "kernelsmith-replay/1",
        "source": "synthetic",
        "device": "none (hand-written for tests)",
        "note": f"SYNTHETIC: written by tests/test_loop.py for {what}; nothing was measured",
        "ops": {
            task.op_id: {
                "baseline": [
                    {**row, "label": s.label, "sizes": s.sizes, "time_us": 5.0 + i}
                    for i, s in enumerate(task.shapes[:2])
                ],
                "unmatched": {"outcome": "ok", "speedup": 1.25, "detail": "synthetic"},
            }
        },
    }
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def triton_demo_task(tmp_path):
    """demo.scaled_add (tests/triton_demo.py, our own code) as a task, and a SYNTHETIC replay for it."""
    from triton_demo import demo_tree

    from extract import triton_ops, triton_tasks

    index, _ = triton_ops.scan_tree(demo_tree(tmp_path / "tree"), None)
    task = triton_tasks.write_task(index, next(o for o in index.ops if o.id == "demo.scaled_add"), tmp_path)
    path = synthetic_replay(tmp_path / "triton.replay.json", task, "the Triton demo task")
    return tmp_path / "tasks" / task.op_id, task, path


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_a_triton_task_is_searched_over_its_tunables_each_point_compiled_before_the_backend(tmp_path, monkeypatch):
    """SIMULATED (a synthetic replay): the loop's seam picks the Triton path for a Triton task: the space
    is the task's tunables (the autotune pin), every new point goes through Triton's compile check for
    sm_90 on this CPU first (the real one), and a point the check refuses is recorded compile_failed
    without reaching the backend; trajectory, best/ and report are written as for CUDA."""
    from optimize.harness.languages import TritonBuild as Triton

    folder, task, replay_path = triton_demo_task(tmp_path)
    checked: list[str] = []
    real = Triton.precheck

    running, overlapped = [0], threading.Event()
    lock = threading.Lock()

    def precheck(self, task_dir, task, candidate):
        with lock:
            checked.append(candidate.id)
            running[0] += 1
            if running[0] > 1:
                overlapped.set()
        try:
            verdict = real(self, task_dir, task, candidate)  # Triton's compiler, for every point
        finally:
            with lock:
                running[0] -= 1
        assert verdict is None, verdict.detail  # both pins compile; pin 0 is refused below all the same
        if '"index": 0' in json.dumps(candidate.params, sort_keys=True):  # checks run at once: decide by content
            return Evaluation(
                op_id=task.op_id, candidate=candidate.id, outcome=Outcome.compile_failed, detail="pin 0 refused"
            )
        return None

    monkeypatch.setattr(Triton, "precheck", precheck)
    backend = CountingBackend(replay_path)
    # the autotune pin only (the demo's launch may also be coarsened: tests/test_triton_coarsen.py)
    from optimize.search import triton_space

    monkeypatch.setattr(triton_space, "_coarsening", lambda *args: ([], []))
    cfg = config(tmp_path, rounds=2)
    cfg = cfg.model_copy(update={"search": cfg.search.model_copy(update={"build_jobs": 2})})
    loop = Loop(cfg, LoopOptions(run="r1", coder="offline"), backend, hooks=hooks())
    summary = loop.run([(folder, task)])
    assert overlapped.is_set(), "the population's compile checks run at once (search.build_jobs)"
    traj = Trajectory(tmp_path / "runs/r1/demo.scaled_add/trajectory.jsonl")
    first = traj.rounds()[0]
    members = {a.candidate: a for a in first.attempts if a.candidate}
    assert len(checked) == 2 and set(checked) == set(members)
    refused = next(c for c in checked if members[c].outcome == Outcome.compile_failed)
    other = next(c for c in checked if c != refused)
    assert members[refused].outcome == Outcome.compile_failed and "pin 0 refused" in members[refused].detail
    assert refused not in {cid for cid, _ in backend.calls}, "a refused point never reaches the backend"
    assert (other, "round") in backend.calls and first.accepted and first.candidate == other
    best = read_record(Candidate, tmp_path / "runs/r1/demo.scaled_add/candidates" / f"{other}.json")
    assert best.skill == "triton_autotune_pin" and best.coder == "offline:search"
    assert summary.simulated and summary.ops[0].status == "improved"
    op = tmp_path / "runs/r1/demo.scaled_add"
    assert (op / "best" / "candidate.json").is_file() and "SIMULATED" in (op / "report.md").read_text()


MERGE = "attention.merge_state_triton"
LAUNCH = "launch:merge_state_kernel"


def merge_state_task(index, tmp_path):
    """merge_state_triton from the pinned wheel as a task, and a SYNTHETIC replay for it (nothing measured)."""
    from contract.layout import baseline_regions, read_task_files
    from extract import triton_tasks

    task = triton_tasks.write_task(index, next(o for o in index.ops if o.id == MERGE), tmp_path)
    folder = tmp_path / "tasks" / MERGE
    path = synthetic_replay(tmp_path / "merge.replay.json", task, "merge_state_triton")
    return folder, task, baseline_regions(read_task_files(folder, task), task), path


def with_num_warps(launch: str, value: int) -> str:
    """The launch region with ``num_warps=value`` as its last keyword (built from the task's own text)."""
    body = launch.rstrip()
    assert body.endswith(")") and body[:-1].rstrip().endswith(","), "the launch's last argument changed"
    return body[:-1].rstrip() + f"\n        num_warps={value},\n    )"


def python(text: str, region: str) -> str:
    return f"```python region={region}\n{text}\n```\n"


@pytest.mark.wheel
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_the_llm_coders_write_triton_and_only_what_compiles_reaches_the_backend(tmp_path, triton_wheel_index):
    """SIMULATED (a synthetic replay): a scripted LLM on merge_state_triton, two rounds. Round 1: the coder's
    launch edit has a Python syntax error (compile_failed with the parser's line, in the region's own
    numbers, no GPU time), the repair agent gets that message and answers a valid ``num_warps=8`` launch,
    which is measured (replayed) and accepted. Round 2: the coder's kernel calls a ``tl`` function that
    does not exist (Triton's compile for sm_90 on this CPU refuses it: compile_failed with Triton's message,
    no GPU time), the repair agent's reply is malformed (recorded as today). The prompts are the Triton
    templates with Python fences and the task's tunables and buckets."""
    folder, task, regions, replay = merge_state_task(triton_wheel_index, tmp_path)
    good = with_num_warps(regions[LAUNCH], 8)
    syntax_error = good.replace("num_warps=8,", "num_warps=8 8,")
    undefined = regions["merge_state_kernel"].replace(
        "tl.exp(p_lse) + tl.exp(s_lse)", "tl.no_such_fn(p_lse) + tl.exp(s_lse)"
    )
    assert undefined != regions["merge_state_kernel"], "merge_state_kernel changed: update the test's edit"

    def testing(messages):
        return "[]"

    model = ScriptedModel(
        [
            testing,
            choose("triton_rewrite", "\nLaunch with 8 warps: more loads in flight per head."),
            python(syntax_error, LAUNCH),  # (b)
            python(good, LAUNCH),  # (a), the repair
            choose("triton_rewrite", "\nUse a cheaper exponential."),
            python(undefined, "merge_state_kernel"),  # (c)
            "I would rewrite the exponentials, but I am not sure how.",  # (d)
        ]
    )
    backend = CountingBackend(replay)
    cfg = config(tmp_path, rounds=2, repair_attempts=1)
    loop = Loop(cfg, LoopOptions(run="r1", coder="llm"), backend, model=model, hooks=hooks())
    summary = loop.run([(folder, task)])
    assert model.agents() == ["testing", "planning", "coding", "repair", "planning", "coding", "repair"]

    planning_prompt = model.prompts[1][1]
    assert "Triton kernels" in planning_prompt[0]["content"] and "CUDA" not in planning_prompt[0]["content"]
    assert options_of(planning_prompt[1]["content"])[0] == "triton_rewrite"
    coding_prompt = model.prompts[2][1]
    assert "@triton.jit" in coding_prompt[0]["content"] and "```python region=" in coding_prompt[0]["content"]
    user = coding_prompt[1]["content"]
    assert f"```python region={LAUNCH}" in user and "```cuda" not in user
    assert "tunable launch:merge_state_kernel/num_warps: baseline 4" in user and "T<=64" in user

    traj = Trajectory(tmp_path / "runs/r1" / MERGE / "trajectory.jsonl")
    first, second = traj.rounds()
    (b, a), (c, d) = first.attempts, second.attempts
    assert (b.agent, b.outcome) == ("coding", Outcome.compile_failed)
    assert (a.agent, a.outcome) == ("repair", Outcome.ok) and first.accepted and first.candidate == a.candidate
    repair_round1 = model.prompts[3][1][1]["content"]
    wrong = 1 + next(i for i, text in enumerate(syntax_error.splitlines()) if "8 8," in text)
    assert f"does not parse after the edit: region {LAUNCH} line {wrong}: " in repair_round1, repair_round1
    assert "num_warps=8 8," in repair_round1  # the failed candidate's regions
    assert (c.agent, c.outcome) == ("coding", Outcome.compile_failed)
    repair_round2 = model.prompts[6][1][1]["content"]
    assert "no_such_fn" in repair_round2 and "[region merge_state_kernel line" in repair_round2
    assert "refused by Triton's compile check for sm_90" in repair_round2
    assert (d.agent, d.status) == ("repair", "malformed_reply") and not second.accepted

    measured = {cid for cid, _ in backend.calls}
    assert b.candidate not in measured and c.candidate not in measured, "a refused candidate used GPU time"
    assert [stage for cid, stage in backend.calls if cid == a.candidate] == ["round", "final"]
    best = read_record(Candidate, tmp_path / "runs/r1" / MERGE / "best" / "candidate.json")
    assert best.regions[LAUNCH] == good and best.coder == "llm:repair"
    assert summary.simulated and summary.ops[0].status == "improved"
    assert "SIMULATED" in (tmp_path / "runs/r1" / MERGE / "report.md").read_text()


@pytest.mark.wheel
def test_a_triton_tunable_the_llm_planner_picks_is_applied_by_its_transform(tmp_path, triton_wheel_index):
    """SIMULATED: with an LLM, a Triton task's tunables are options too, and a chosen one is written by its
    transform (exact, no coding call), as a CUDA skill's mechanical transform is; the compile check still
    runs before the backend."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    folder, task, regions, replay = merge_state_task(triton_wheel_index, tmp_path)
    model = ScriptedModel(["[]", choose("triton_num_warps", "8 warps for decode")])
    backend = CountingBackend(replay)
    loop = Loop(config(tmp_path, rounds=1), LoopOptions(run="r1", coder="llm"), backend, model=model, hooks=hooks())
    summary = loop.run([(folder, task)])
    assert model.agents() == ["testing", "planning"]
    (rnd,) = Trajectory(tmp_path / "runs/r1" / MERGE / "trajectory.jsonl").rounds()
    assert rnd.skill == "triton_num_warps" and rnd.accepted and rnd.attempts[0].agent == "transform"
    best = read_record(Candidate, tmp_path / "runs/r1" / MERGE / "best" / "candidate.json")
    assert "num_warps=" in best.regions[LAUNCH] and best.coder == "llm:transform"
    assert summary.simulated and summary.ops[0].status == "improved"


@pytest.mark.wheel
def test_single_mode_writes_triton_through_its_triton_template(tmp_path, triton_wheel_index):
    """SIMULATED: --mode single on a Triton task: the single agent's Triton template, Python fences, the facts."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    folder, task, regions, replay = merge_state_task(triton_wheel_index, tmp_path)
    good = with_num_warps(regions[LAUNCH], 8)
    model = ScriptedModel(["[]", f"CHOICE: 1\nPLAN: 8 warps\n{python(good, LAUNCH)}"])
    loop = Loop(
        config(tmp_path, rounds=1),
        LoopOptions(run="r1", mode="single", coder="llm"),
        CountingBackend(replay),
        model=model,
        hooks=hooks(),
    )
    summary = loop.run([(folder, task)])
    system, user = (m["content"] for m in model.prompts[1][1])
    assert "SGLang Triton kernels" in system and f"```python region={LAUNCH}" in user and "tunable " in user
    (rnd,) = Trajectory(tmp_path / "runs/r1" / MERGE / "trajectory.jsonl").rounds()
    assert rnd.skill == "triton_rewrite" and rnd.accepted and summary.ops[0].status == "improved"


class ClockedBackend(CountingBackend):
    """A replay whose every evaluation and profile takes ``step_s`` of the loop's clock (a GPU's wall time)."""

    def __init__(self, path, *, step_s: float):
        super().__init__(path)
        self.now_s = 0.0
        self.step_s = step_s

    def clock(self) -> float:
        return self.now_s

    def evaluate(self, task_dir, task, candidate, *, stage="round"):
        self.now_s += self.step_s
        return super().evaluate(task_dir, task, candidate, stage=stage)

    def profile(self, task_dir, task, candidate):
        self.now_s += self.step_s
        return super().profile(task_dir, task, candidate)


class OpClockedBackend(ClockedBackend):
    """A ClockedBackend whose evaluations of each op take that op's own ``steps_s[op_id]``."""

    def __init__(self, path, *, steps_s: dict[str, float]):
        super().__init__(path, step_s=0.0)
        self.steps_s = steps_s

    def evaluate(self, task_dir, task, candidate, *, stage="round"):
        self.now_s += self.steps_s[task.op_id]
        return CountingBackend.evaluate(self, task_dir, task, candidate, stage=stage)


def run_clocked(tmp_path, *, wall_s: float, step_s: float, ops: int = 2, backend=None):
    names = ["demo.scale", "demo.copy"][:ops]
    tasks = [write_task(tmp_path, name) for name in names]
    backend = backend or ClockedBackend(two_op_replay(tmp_path), step_s=step_s)
    cfg = Config.model_validate(
        {
            "work_dir": str(tmp_path),
            "budget": {"rounds": 3, "wall_s": wall_s},
            "search": {"strategy": "auto", "population": 2, "evals_per_round": 6},
        }
    )
    loop = Loop(cfg, LoopOptions(run="r1", coder="offline"), backend, hooks=hooks(), clock=backend.clock)
    summary = loop.run(tasks)
    return summary, [Trajectory(tmp_path / f"runs/r1/{name}/trajectory.jsonl") for name in names]


def measured(record) -> int:
    return len([a for a in record.attempts if a.candidate])


def test_a_wall_budget_spent_inside_a_search_round_is_reported_as_wall_time(tmp_path):
    # one op (no share), 10 s an evaluation or profile, 15 s in all: the baseline ends at 10 s,
    # the round's profile at 20 s, so its first population is refused by the run's wall budget
    # (this stop was labelled "GPU-time budget spent" on the H200, 2026-12-05)
    summary, (traj,) = run_clocked(tmp_path, wall_s=15.0, step_s=10.0, ops=1)
    stop = [r for r in traj.records if r.kind == "stop"]
    assert summary.ops[0].stop_reason == "wall_time" and stop[-1].stop_reason == "wall_time"
    assert stop[-1].detail.startswith("wall-time budget spent"), stop[-1].detail


def test_the_wall_budget_is_shared_so_every_op_gets_its_round(tmp_path):
    # 100 s for two ops at 15 s an evaluation or profile: the first op may spend 50 s (baseline,
    # profile, one population of 2 = 60 s), so its round stops after that population and the
    # second op still has its baseline and a round instead of being skipped
    summary, (first, second) = run_clocked(tmp_path, wall_s=100.0, step_s=15.0)
    assert summary.ops[0].stop_reason == "wall_share", summary.ops[0]
    assert [measured(r) for r in first.rounds()] == [2]
    assert summary.ops[1].status != "skipped" and len(second.rounds()) == 1
    # one op alone has the whole budget: its round measures more than one population
    alone, (only,) = run_clocked(tmp_path / "alone", wall_s=100.0, step_s=15.0, ops=1)
    assert [measured(r) > 2 for r in only.rounds()] == [True]


def test_each_op_s_stop_is_told_in_the_words_of_the_moment_it_stopped(tmp_path):
    # demo.scale's evaluations take 15 s and demo.copy's 5 s: the first stops on its share after a
    # population of 2 (30 s), and its summary must say 30 s, not the 10 s of the last op's population
    # (the command printed every op's stop from the budget's state at the end of the run)
    backend = OpClockedBackend(two_op_replay(tmp_path), steps_s={"demo.scale": 15.0, "demo.copy": 5.0})
    summary, (first, _) = run_clocked(tmp_path, wall_s=100.0, step_s=0.0, backend=backend)
    assert summary.ops[0].stop_reason == "wall_share"
    assert "about 30 s" in summary.ops[0].stop_detail, summary.ops[0].stop_detail
    stops = [r for r in first.records if r.kind == "stop"]
    assert [r.stop_reason for r in stops] == ["wall_share"] and stops[0].detail == summary.ops[0].stop_detail


def test_an_op_s_progress_ends_when_its_rounds_do_not_when_the_run_does(tmp_path):
    """The command's bar for an op stops its clock at OP_DONE: on the H200 (2026-12-05) silu_and_mul's
    bar read 4:38 for a 138 s round, because every bar was completed only when the whole run ended."""
    from optimize.session import OP_DONE

    calls: list[tuple[str, int]] = []
    ops = [write_task(tmp_path, "demo.scale"), write_task(tmp_path, "demo.copy")]
    loop = Loop(
        config(tmp_path, search="off", rounds=2),
        LoopOptions(run="r1", coder="offline"),
        CountingBackend(two_op_replay(tmp_path)),
        hooks=hooks(),
        progress=lambda op_id, number, total: calls.append((op_id, number)),
    )
    loop.run(ops)
    assert [op for op, _ in calls] == sorted((op for op, _ in calls), key=["demo.scale", "demo.copy"].index)
    for op_id in ("demo.scale", "demo.copy"):
        numbers = [n for op, n in calls if op == op_id]
        assert numbers[0] == 1 and numbers[-1] == OP_DONE and OP_DONE not in numbers[:-1], (op_id, numbers)


def test_later_ops_baselines_are_built_while_the_first_is_measured(monkeypatch, tmp_path):
    """`building_ahead`: the ops after the first have their baselines built (every core, one op at a
    time) in the background; a failure there is left to the op's own build, and a replay builds nothing."""
    import threading

    from contract import completion
    from optimize import command
    from optimize.harness import evaluate

    started = threading.Event()
    release = threading.Event()
    seen: list[tuple[list[str], dict]] = []

    def prebuild(items, config, **kwargs):
        seen.append(([task.op_id for _, task in items], kwargs))
        started.set()
        release.wait(5)
        raise RuntimeError("nvcc crashed")  # left to the op's own build

    monkeypatch.setattr(evaluate, "prebuild", prebuild)
    monkeypatch.setattr(completion, "complete", lambda task, path: (task, None))
    tasks = [write_task(tmp_path, name) for name in ("demo.scale", "demo.copy", "demo.third")]
    cfg = config(tmp_path)
    with command.building_ahead(tasks, cfg, enabled=True):
        assert started.wait(5), "the build starts before the loop's first op ends"
        release.set()
    assert seen[0][0] == ["demo.copy", "demo.third"]
    assert seen[0][1]["ops_at_once"] == 1 and seen[0][1]["unit_jobs"] is None
    with command.building_ahead(tasks, cfg, enabled=False), command.building_ahead(tasks[:1], cfg, enabled=True):
        pass
    assert len(seen) == 1, "a replay, or one op, builds nothing ahead"


def test_a_no_compile_task_runs_without_what_nvcc_refuses_and_says_so(tmp_path):
    """The backend's buildable (the GPU backend's: optimize.harness.evaluate.buildable) narrows a task
    extracted with --no-compile once per run: the completion record keeps what was left out and why,
    the baseline round says it, and a resumed run or integrate (completed_in_run) calls the same task."""
    from contract.completion import instantiation_key
    from contract.layout import completed_in_run

    task_dir, task = write_task(tmp_path)
    extra = task.instantiations[0].model_copy(update={"dtype": "fp16", "template_args": ["fp16_t"]})
    task = task.model_copy(update={"instantiations": [*task.instantiations, extra]})
    write_record(task, task_dir / "task.json")
    asked = []

    class Narrowing(CountingBackend):
        def buildable(self, task_dir, task):
            asked.append(task.op_id)
            kept = [i for i in task.instantiations if i.dtype != "fp16"]
            return (
                task.model_copy(update={"instantiations": kept}),
                [instantiation_key(extra)],
                "nvcc refuses fp16 <fp16_t> (x)",
            )

    loop = Loop(config(tmp_path, rounds=1), LoopOptions(run="r1", coder="offline"), Narrowing(), hooks=hooks())
    loop.run([(task_dir, task)])
    op_dir = tmp_path / "runs" / "r1" / "demo.scale"
    assert asked == ["demo.scale"]
    assert [i.dtype for i in completed_in_run(task, op_dir).instantiations] == ["fp32"]
    baseline = Trajectory(op_dir / "trajectory.jsonl").baseline()
    assert (
        "left out of this run (the task was extracted without its compile check): nvcc refuses fp16" in baseline.detail
    )
    Loop(config(tmp_path, rounds=1), LoopOptions(run="r1", coder="offline"), Narrowing(), hooks=hooks()).run(
        [(task_dir, task)]
    )
    assert asked == ["demo.scale"], "decided once per run: a resumed run reads the record"
