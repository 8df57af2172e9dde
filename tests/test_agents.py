"""The agents: reply parsing, coding (LLM and offline), planning, repair, profiling, testing, single."""

from __future__ import annotations

import json

import pytest

from optimize.agents import coding, planning, profiling, repair, single, testing
from optimize.agents.edits import parse_reply, result_from_reply
from optimize.agents.prompts import placeholders, render
from optimize.errors import MalformedReply
from optimize.llm.fakes import ScriptedModel
from optimize.skills import load_skills
from pipeline.errors import ModelError
from pipeline.records import BuildReport, KernelResources
from pipeline.run_records import Evaluation, Outcome, ShapeTiming

KERNEL = """__global__ void scale_kernel(float* out, const float* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = in[i] * 2.0f;  // scale
  }
}
"""
LAUNCHER = """void launch_scale(float* out, const float* in, int n, cudaStream_t s) {
  scale_kernel<<<(n + 255) / 256, 256, 0, s>>>(out, in, n);
}
"""
REGIONS = {"scale_kernel": KERNEL, "launch_scale": LAUNCHER}


# --------------------------------------------------------------------------- parsing


def test_search_replace_with_region_name():
    reply = """Here is the change.
region: scale_kernel
```cuda
<<<<<<< SEARCH
    out[i] = in[i] * 2.0f;  // scale
=======
    out[i] = __fmul_rn(in[i], 2.0f);  // scale
>>>>>>> REPLACE
```
"""
    new = parse_reply(reply, REGIONS)
    assert "__fmul_rn(in[i], 2.0f)" in new["scale_kernel"]
    assert new["launch_scale"] is LAUNCHER
    assert new["scale_kernel"].replace("__fmul_rn(in[i], 2.0f)", "in[i] * 2.0f") == KERNEL


def test_search_replace_finds_the_region_itself_and_tolerates_indentation():
    reply = """<<<<<<< SEARCH
scale_kernel<<<(n + 255) / 256, 256, 0, s>>>(out, in, n);
=======
  scale_kernel<<<(n + 511) / 512, 512, 0, s>>>(out, in, n);
>>>>>>> REPLACE"""
    new = parse_reply(reply, REGIONS)
    assert "512, 0, s" in new["launch_scale"] and new["scale_kernel"] is KERNEL


def test_a_region_named_in_prose_is_only_a_hint():
    reply = """This speeds up scale_kernel by using bigger blocks in the launcher:
<<<<<<< SEARCH
  scale_kernel<<<(n + 255) / 256, 256, 0, s>>>(out, in, n);
=======
  scale_kernel<<<(n + 511) / 512, 512, 0, s>>>(out, in, n);
>>>>>>> REPLACE"""
    new = parse_reply(reply, REGIONS)
    assert "512, 0, s" in new["launch_scale"] and new["scale_kernel"] is KERNEL


def test_several_blocks_across_regions_apply_in_order():
    reply = """region: scale_kernel
<<<<<<< SEARCH
  int i = blockIdx.x * blockDim.x + threadIdx.x;
=======
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
>>>>>>> REPLACE
region: launch_scale
<<<<<<< SEARCH
256, 0, s
=======
128, 0, s
>>>>>>> REPLACE
"""
    new = parse_reply(reply, REGIONS)
    assert "const int i" in new["scale_kernel"] and "128, 0, s" in new["launch_scale"]


@pytest.mark.parametrize(
    "reply, reason",
    [
        ("<<<<<<< SEARCH\nnot in the code\n=======\nx\n>>>>>>> REPLACE\n", "not in any region"),
        ("<<<<<<< SEARCH\nout\n=======\nx\n>>>>>>> REPLACE\n", "occurs"),
        ("<<<<<<< SEARCH\nint n\n=======\nx\n", "no >>>>>>> REPLACE"),
        ("I think you should vectorize the loads.", "no code block"),
        ("```cuda\n__global__ void f() {}\n```\n```cuda\nint g() { return 0; }\n```", "cannot tell which"),
        ("```cuda region=scale_kernel\n__global__ void scale_kernel(float* out) {\n  if (1) {\n```", "unbalanced"),
        ("```cuda region=scale_kernel\n__global__ void scale_kernel() {}\n", "never closed"),
    ],
)
def test_malformed_replies_raise_with_the_reason(reply, reason):
    with pytest.raises(MalformedReply, match=reason):
        parse_reply(reply, REGIONS)


def test_whole_region_blocks_named_by_fence_heading_or_definition():
    by_fence = f"```cuda region=launch_scale\n{LAUNCHER.replace('256', '128')}```"
    assert "128" in parse_reply(by_fence, REGIONS)["launch_scale"]
    by_heading = f"### Region `scale_kernel`\n```cpp\n{KERNEL.replace('2.0f', '2.0f /*x*/')}```\n"
    assert "/*x*/" in parse_reply(by_heading, REGIONS)["scale_kernel"]
    by_definition = f"Updated kernel:\n```\n{KERNEL.replace('int i', 'long i')}```"
    new = parse_reply(by_definition, REGIONS)
    assert "long i" in new["scale_kernel"] and new["scale_kernel"].endswith("}\n")
    only = {"scale_kernel": KERNEL}
    small_and_big = "Use `x`:\n```\nint x;\n```\nWhole kernel:\n```cuda\n" + KERNEL.replace("2.0f", "3.0f") + "```"
    assert "3.0f" in parse_reply(small_and_big, only)["scale_kernel"]


def test_result_statuses():
    assert result_from_reply("nonsense", REGIONS, agent="coding").status == "malformed_reply"
    same = f"```cuda region=scale_kernel\n{KERNEL}```"
    assert result_from_reply(same, REGIONS, agent="coding").status == "no_change"
    edited = result_from_reply(same.replace("2.0f", "4.0f"), REGIONS, agent="repair")
    assert edited.edited and edited.agent == "repair" and "4.0f" in edited.regions["scale_kernel"]


REFORMATTED = """__global__ void scale_kernel(float *out, const float *in, int n)
{
    int i = blockIdx.x*blockDim.x + threadIdx.x;

    if (i < n) {
        out[i] = in[i] * 2.0f;      // scale
    }
}
"""


def test_a_whitespace_only_reply_is_no_change_and_costs_no_build():
    # indentation, a brace moved to its own line, a blank line, spaces around operators:
    # what a small local model sent back on 2026-12-01, counted as `edited` (a build) before
    result = result_from_reply(f"```cuda region=scale_kernel\n{REFORMATTED}```", REGIONS, agent="coding")
    assert result.status == "no_change" and not result.edited and result.regions is None
    assert "only whitespace" in result.detail and "scale_kernel" in result.detail
    search = "<<<<<<< SEARCH\n  scale_kernel<<<(n + 255) / 256, 256, 0, s>>>(out, in, n);\n=======\n"
    spaced = search + "  scale_kernel<<<(n+255)/256, 256, 0, s>>>( out, in, n );\n>>>>>>> REPLACE\n"
    assert result_from_reply(spaced, REGIONS, agent="repair").status == "no_change"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("in[i] * 2.0f", "in[i] * 3.0f"),  # a real edit
        ("int i =", "inti ="),  # two words joined
        ("int i = blockIdx.x", "int i = + +blockIdx.x"),  # `+ +` is not `++`
        ("2.0f", "2. 0f"),  # a number split
    ],
)
def test_whitespace_the_compiler_reads_is_a_change(old, new):
    assert old in KERNEL
    result = result_from_reply(f"```cuda region=scale_kernel\n{KERNEL.replace(old, new)}```", REGIONS, agent="coding")
    assert result.status == "edited"


def test_spacing_inside_literals_and_directives_is_a_change():
    from optimize.agents.edits import whitespace_only

    assert not whitespace_only('printf("a  b");', 'printf("a b");')
    assert not whitespace_only("#define F(x) ((x) + 1)\n", "#define F (x) ((x) + 1)\n")  # object-like now
    assert not whitespace_only("x = 1;\n#pragma unroll\n", "x = 1; #pragma unroll\n")
    assert not whitespace_only("x = 1;  // one\ny = 2;\n", "x = 1;  // one y = 2;\n")  # y = 2 is a comment now
    assert whitespace_only("#define F(x)  ((x) + 1)\n", "  #define F(x) ((x) + 1)\n")
    assert whitespace_only("a<<=b; p->q;", "a <<= b;\np -> q;")


def test_a_malformed_reply_is_discarded_from_the_model_and_a_good_one_kept():
    model = ScriptedModel(["no code here", f"```cuda region=scale_kernel\n{KERNEL.replace('2.0f', '4.0f')}```"])
    plan = planning.Plan(skill="s", params={}, text="t", reason="r", source="llm", option=1)
    args = dict(op_id="demo", profile_text="p", trajectory_text="t", model=model)
    assert coding.code(plan, None, REGIONS, **args).status == "malformed_reply"
    assert [r.text for r in model.discarded] == ["no code here"]
    assert coding.code(plan, None, REGIONS, **args).status == "edited"
    assert len(model.discarded) == 1


# --------------------------------------------------------------------------- prompts


@pytest.mark.parametrize(
    "name",
    [
        "planning",
        "coding",
        "repair",
        "guard",
        "single",
        "testing",
        "planning_triton",
        "coding_triton",
        "repair_triton",
        "guard_triton",
        "single_triton",
    ],
)
def test_every_template_renders_strictly(name):
    names = placeholders(name)
    assert names, name
    messages = render(name, **{n: f"<{n}>" for n in names})
    assert [m["role"] for m in messages] == ["system", "user"]
    with pytest.raises(KeyError):
        render(name)


# --------------------------------------------------------------------------- planning


def decision(skill, params, score, reason):
    """A proposal as the real policy writes it."""
    from optimize.policy import Decision

    lib = {s.id: s for s in load_skills()}
    return Decision(
        skill=skill,
        version=lib[skill].version,
        title=lib[skill].title,
        verdict="proposed",
        params=params,
        mode="llm",
        score=score,
        reasons=[reason],
    )


SKILLS = {s.id: s for s in load_skills()}
DECISIONS = [
    decision("vector_loads_128", {}, 0.9, "narrow loads"),
    decision("items_per_thread", {"variant": "2 vectors per thread"}, 0.5, "short rows"),
]


def plan_with(model):
    return planning.plan(
        DECISIONS,
        SKILLS,
        op_id="demo.scale",
        region_names=list(REGIONS),
        profile_text="P",
        trajectory_text="T",
        model=model,
    )


def test_planning_offline_takes_the_policy_first_option():
    plan = plan_with(None)
    assert (plan.skill, plan.params, plan.source) == ("vector_loads_128", {}, "policy")
    assert SKILLS["vector_loads_128"].title in plan.text and "narrow loads" in plan.text
    assert (
        planning.plan([], SKILLS, op_id="x", region_names=[], profile_text="", trajectory_text="", model=None) is None
    )


def test_planning_llm_picks_an_option_and_writes_the_plan():
    model = ScriptedModel(["CHOICE: 2\nPLAN:\nTwo float4 per thread in scale_kernel."])
    plan = plan_with(model)
    assert (plan.skill, plan.params, plan.source, plan.option) == (
        "items_per_thread",
        {"variant": "2 vectors per thread"},
        "llm",
        2,
    )
    assert plan.text == "Two float4 per thread in scale_kernel."
    prompt = model.prompts[0][1][1]["content"]
    assert f"1. vector_loads_128: {SKILLS['vector_loads_128'].title}" in prompt
    assert '2. items_per_thread {"variant": "2 vectors per thread"}' in prompt and "why: short rows" in prompt


@pytest.mark.parametrize(
    "reply", ["CHOICE: 7\nPLAN: something else", "I would rather rewrite everything.", ModelError("down")]
)
def test_planning_never_leaves_the_policy_options(reply):
    model = ScriptedModel([reply])
    plan = plan_with(model)
    assert plan.skill == "vector_loads_128" and plan.source == "llm-fallback"
    # an unusable choice is taken out of the reply cache (a raised error never got there)
    assert [r.text for r in model.discarded] == ([] if isinstance(reply, ModelError) else [reply])


def test_a_usable_plan_is_kept():
    model = ScriptedModel(["CHOICE: 1\nPLAN: vectorize"])
    assert plan_with(model).source == "llm" and model.discarded == []


# --------------------------------------------------------------------------- coding


def coding_call(model, transform=None):
    plan = plan_with(None)
    return coding.code(
        plan,
        SKILLS["vector_loads_128"],
        REGIONS,
        op_id="demo.scale",
        profile_text="P",
        trajectory_text="T",
        model=model,
        transform=transform,
    )


def test_coding_llm_edits_and_records_malformed_and_endpoint_failures():
    ok = coding_call(ScriptedModel([f"```cuda region=scale_kernel\n{KERNEL.replace('2.0f', '2.0f + 0.0f')}```"]))
    assert ok.edited and "+ 0.0f" in ok.regions["scale_kernel"]
    bad = coding_call(ScriptedModel(["sorry, I cannot"]))
    assert bad.status == "malformed_reply" and bad.reply == "sorry, I cannot"
    down = coding_call(ScriptedModel([ModelError("endpoint down")]))
    assert down.status == "model_error" and "endpoint down" in down.detail


def test_coding_prompt_carries_plan_skill_and_regions():
    model = ScriptedModel(["x"])
    coding_call(model)
    system, user = (m["content"] for m in model.prompts[0][1])
    assert "SEARCH" in system
    skill = SKILLS["vector_loads_128"]
    assert "Apply skill vector_loads_128" in user and skill.method.strip()[:60] in user
    assert f"- {skill.risks[0]}" in user
    assert "```cuda region=scale_kernel" in user and "```cuda region=launch_scale" in user


def test_coding_offline_uses_the_real_transforms():
    from optimize.transforms import registry as transforms

    def pragma(regions, params):
        return transforms.apply("add_pragma_unroll", regions, {"factor": 4, "runtime_loops": True})

    def nothing(regions, params):
        return transforms.apply("fast_math", regions, {"ops": ["expf"]})

    loop_kernel = {
        "k": "__global__ void k(float* o, int n) {\n  for (int i = 0; i < n; ++i) {\n    o[i] = 0.f;\n  }\n}\n"
    }
    plan = plan_with(None)
    edited = coding.code_offline(plan, loop_kernel, pragma)
    assert edited.edited and "#pragma unroll 4" in edited.regions["k"]
    skipped = coding.code_offline(plan, loop_kernel, nothing)
    assert skipped.status == "not_applicable"
    assert coding.code_offline(plan, loop_kernel, None).status == "not_applicable"


# --------------------------------------------------------------------------- repair


def failed_eval(
    outcome=Outcome.compile_failed,
    stderr='scale.cuh(4): error: identifier "__bad" is undefined [region scale_kernel line 4]',
):
    return Evaluation(
        op_id="demo.scale",
        candidate="c1",
        outcome=outcome,
        build=BuildReport(ok=False, key="k", seconds=1.0, stderr=stderr),
        detail="",
    )


def test_repair_prompt_has_the_compiler_error_and_attempt_count():
    model = ScriptedModel([f"```cuda region=scale_kernel\n{KERNEL.replace('2.0f', '2.5f')}```"])
    result = repair.repair(
        plan_with(None),
        REGIONS,
        failed_eval(),
        op_id="demo.scale",
        attempt=1,
        max_attempts=2,
        trajectory_text="T",
        model=model,
    )
    assert result.edited and result.agent == "repair"
    user = model.prompts[0][1][1]["content"]
    assert 'identifier "__bad" is undefined [region scale_kernel line 4]' in user
    assert "repair attempt 1 of 2" in user


def shape(label, speedup):
    return ShapeTiming(
        label=label,
        sizes={"n": 4},
        dtype="fp32",
        time_us=10 / speedup,
        spread_pct=1.0,
        gbps=1.0,
        pct_of_copy_bw=10.0,
        time_over_floor=3.0,
        baseline_us=10.0,
        speedup=speedup,
    )


def test_guard_prompt_lists_slow_shapes_and_the_baseline_regions():
    model = ScriptedModel(
        ["```cuda region=launch_scale\n" + LAUNCHER.replace("256, 0", "n < 2048 ? 256 : 512, 0") + "```"]
    )
    evaluation = Evaluation(
        op_id="demo.scale", candidate="c1", outcome=Outcome.ok, timings=[shape("small", 0.8), shape("big", 1.3)]
    )
    result = repair.repair(
        plan_with(None),
        REGIONS,
        evaluation,
        op_id="demo.scale",
        attempt=1,
        max_attempts=1,
        trajectory_text="T",
        model=model,
        slower=[evaluation.timings[0]],
        baseline_regions=REGIONS,
    )
    assert result.edited and result.agent == "guard"
    system, user = (m["content"] for m in model.prompts[0][1])
    assert "host-side shape dispatch" in system
    slower_part = user.split("Faster at:")[0]
    assert "0.800x" in slower_part and "1.300x" not in slower_part


# --------------------------------------------------------------------------- profiling


def test_profile_summary_facts_and_notes():
    timings = [
        ShapeTiming(
            label="tiny",
            sizes={"n": 8},
            dtype="bf16",
            time_us=2.0,
            spread_pct=1,
            gbps=5,
            pct_of_copy_bw=0.1,
            time_over_floor=40.0,
        ),
        ShapeTiming(
            label="big",
            sizes={"n": 1 << 24},
            dtype="bf16",
            time_us=50.0,
            spread_pct=1,
            gbps=2000,
            pct_of_copy_bw=45.0,
            time_over_floor=2.2,
            baseline_us=40.0,
            speedup=0.8,
        ),
    ]
    build = BuildReport(
        ok=True,
        key="k",
        seconds=1,
        resources=[KernelResources(kernel="_Z5k", registers=168, spill_stores=8, spill_loads=8, demangled="k(float*)")],
    )
    summary = profiling.summarize(
        Evaluation(op_id="x", candidate="c", outcome=Outcome.ok, timings=timings, build=build),
        ncu={"sm__throughput.avg.pct_of_peak_sustained_elapsed": "12.5", "bad": "n/a"},
    )
    assert summary.worst_shape == "tiny bf16"
    assert summary.kernels[0].kernel == "k(float*)" and summary.ncu == {
        "sm__throughput.avg.pct_of_peak_sustained_elapsed": 12.5
    }
    notes = " | ".join(summary.notes)
    assert "launch/latency bound" in notes and "under 60% of copy bandwidth" in notes
    assert "spills registers" in notes and "168 registers" in notes and "slower than the baseline" in notes
    text = summary.text()
    assert text.splitlines()[2].startswith("- tiny bf16: 2.00 us, 40.00x floor")


def test_an_op_that_is_not_byte_bound_has_no_floor_figure_anywhere():
    """Contract.byte_bound = false (a sort, a selection): time ÷ floor is "n/a" in the profile, the
    tables and the buckets, and no bucket of it is no-go however small its ratio."""
    from optimize.report import shape_table
    from pipeline.buckets import by_bucket, floor_text, no_go

    def timing(tokens, floor_applies):
        return ShapeTiming(
            label=f"T={tokens}", sizes={"num_tokens": tokens}, dtype="bf16", time_us=5.0, spread_pct=1, gbps=1,
            pct_of_copy_bw=1.0, time_over_floor=1.05, floor_applies=floor_applies,
        )  # fmt: skip

    sorted_ = [timing(8, False), timing(4096, False)]
    assert no_go(sorted_) == [] and no_go([timing(8, True)]) == ["T<=64"], (
        "a ratio under 1.1 is no-go only with a floor"
    )
    assert "time_over_floor_min" not in by_bucket(sorted_)["T<=64"]
    assert floor_text(sorted_[0]) == "n/a" and floor_text(timing(8, True)) == "1.05"
    assert "| n/a → n/a |" in "\n".join(shape_table(sorted_, sorted_))
    summary = profiling.summarize(
        Evaluation(op_id="moe.moe_align_block_size", candidate="c", outcome=Outcome.ok, timings=sorted_)
    )
    assert summary.geomean_time_over_floor is None and summary.worst_shape is None
    assert "time/floor: n/a" in summary.text() and "x floor" not in summary.text()


def test_a_shape_whose_sizes_name_no_token_count_is_bucketed_by_its_catalog_tokens():
    """bias_gelu_tanh's rows are `num_rows`, dispatch_probability's `num_topk_entries`: the catalog's token
    count travels with the timing (ShapeTiming.tokens), so prefill shapes are not all counted as decode."""
    from pipeline.buckets import bucket_of, by_bucket, tokens_of

    row = shape("Llama-3.1-8B[hidden_dim=4096,num_rows=4096]", 1.2).model_copy(
        update={"sizes": {"num_rows": 4096, "hidden_dim": 4096}}
    )
    assert bucket_of(row) == "T<=64", "without the catalog's count, nothing in the sizes says 4096 tokens"
    carried = row.model_copy(update={"tokens": 4096})
    assert tokens_of(carried) == 4096 and bucket_of(carried) == "T>=512"
    assert list(by_bucket([carried, row])) == ["T<=64", "T>=512"]
    named = row.model_copy(update={"sizes": {"num_tokens": 8}})
    assert tokens_of(named) == 8, "sizes still decide where nothing was carried"


# --------------------------------------------------------------------------- testing


def demo_task():
    from test_loop import make_task  # the loop tests own the demo task (tests/ is on sys.path)

    return make_task()


def test_testing_agent_keeps_only_contract_valid_baseline_clean_proposals():
    task = demo_task()
    proposals = [
        {"label": "odd", "sizes": {"n": 4097}, "distribution": "edge", "why": "tail"},
        {"label": "too-big", "sizes": {"n": 1 << 40}, "why": "limit"},
        {"label": "typo", "sizes": {"m": 3}},
        {"label": "baseline-breaks", "sizes": {"n": 3}},
    ]
    model = ScriptedModel(["Proposals:\n```json\n" + json.dumps(proposals) + "\n```"])
    seen = []

    def validate(cases):
        seen.extend(c.label for c in cases)
        return [
            (c.label != "baseline-breaks", "" if c.label != "baseline-breaks" else "baseline wrote NaN") for c in cases
        ]

    plan = testing.plan_tests(task, held_out=3, model=model, validate=validate)
    assert seen == ["odd", "baseline-breaks"]  # contract-invalid ones never reach the GPU
    assert [c.label for c in plan.kept()] == ["odd"]
    reasons = {c.label: c.reason for c in plan.extra}
    assert "max" in reasons["too-big"] or "limits" in reasons["too-big"]
    assert "unknown size symbols" in reasons["typo"]
    assert reasons["baseline-breaks"] == "baseline wrote NaN"
    assert len(plan.held_out_preview) == 3 and plan.held_out_preview[0].tokens == 1
    assert "Contract" in model.prompts[0][1][1]["content"]


def test_testing_agent_without_gpu_keeps_nothing_and_says_so():
    model = ScriptedModel(['[{"label": "odd", "sizes": {"n": 4097}}]'])
    plan = testing.plan_tests(demo_task(), held_out=2, model=model, validate=None)
    assert plan.kept() == [] and plan.extra[0].reason == "not run on the baseline (no GPU)"
    assert any("no GPU" in n for n in plan.notes)
    offline = testing.plan_tests(demo_task(), held_out=2)
    assert offline.reviewed_by == "deterministic" and offline.extra == []


# --------------------------------------------------------------------------- single


def test_single_agent_plans_and_codes_in_one_reply():
    reply = (
        "CHOICE: 1\nPLAN: widen the loads to float4 in scale_kernel.\n"
        f"region: scale_kernel\n```cuda region=scale_kernel\n{KERNEL.replace('2.0f', '2.0f /*v4*/')}```"
    )
    model = ScriptedModel([reply])
    step = single.step(
        DECISIONS, SKILLS, REGIONS, op_id="demo.scale", profile_text="P", trajectory_text="T", model=model
    )
    assert step.plan.skill == "vector_loads_128" and step.plan.params == {}
    assert step.plan.text == "widen the loads to float4 in scale_kernel."
    assert step.result.edited and "/*v4*/" in step.result.regions["scale_kernel"]
    own = single.step(
        DECISIONS,
        SKILLS,
        REGIONS,
        op_id="d",
        profile_text="",
        trajectory_text="",
        model=ScriptedModel(
            ["CHOICE: 0\nPLAN: my idea\n```cuda region=scale_kernel\n" + KERNEL.replace("2.0f", "2.0F") + "```"]
        ),
    )
    assert own.plan.skill == single.OWN_IDEA and own.result.edited
    fix = single.step(
        DECISIONS,
        SKILLS,
        REGIONS,
        op_id="d",
        profile_text="",
        trajectory_text="",
        previous=step.plan,
        feedback="error: boom",
        model=ScriptedModel(["CHOICE: 2\nno code"]),
    )
    assert fix.plan is step.plan and fix.result.status == "malformed_reply"


# --------------------------------------------------------------------------- Triton (Python regions)

PY_REGIONS = {
    "k": "@triton.jit\ndef k(x_ptr, N: tl.constexpr):\n    i = tl.program_id(0)\n    tl.store(x_ptr + i, i)\n",
    "launch:k": "k[(n,)](\n        x,\n        n,\n    )",
}


def test_python_regions_are_named_by_their_fence_and_a_broken_one_is_left_to_the_compile_check():
    from optimize.agents.edits import PYTHON, regions_text

    launch = "k[(n,)](\n        x,\n        n,\n        num_warps=8,\n    )"
    new = parse_reply(f"```python region=launch:k\n{launch}\n```", PY_REGIONS, PYTHON)
    assert new == {**PY_REGIONS, "launch:k": launch}  # launch:k, not k (whose name is inside it)
    header = parse_reply(f"region: launch:k\n```python\n{launch}\n```", PY_REGIONS, PYTHON)
    assert header["launch:k"] == launch and header["k"] == PY_REGIONS["k"]
    # unbalanced brackets: Python's compile check answers it (compile_failed with the line), not the parser
    broken = "k[(n,)](\n        x,\n"
    result = result_from_reply(f"```python region=launch:k\n{broken}```", PY_REGIONS, agent="coding", dialect=PYTHON)
    assert result.status == "edited" and result.regions["launch:k"] == broken.rstrip("\n")
    assert result_from_reply(f"```cuda region=launch:k\n{broken}```", PY_REGIONS, agent="coding").status == (
        "malformed_reply"
    )
    shown = regions_text(PY_REGIONS, {"k": "kernel"}, PYTHON)
    assert "```python region=launch:k" in shown and "```cuda" not in shown


def test_python_indentation_is_a_change_and_spacing_inside_brackets_is_not():
    from optimize.agents.edits import PYTHON

    same = PY_REGIONS["launch:k"].replace("        x,\n        n,\n", "x, n,\n")
    assert PYTHON.same(PY_REGIONS["launch:k"], same)
    body = "@triton.jit\ndef k(x_ptr, N: tl.constexpr):\n    i = tl.program_id(0)\ntl.store(x_ptr + i, i)\n"
    assert not PYTHON.same(PY_REGIONS["k"], body)  # the store left the function
    spaced = f"```python region=k\n{PY_REGIONS['k'].replace('x_ptr + i', 'x_ptr  +  i')}```"
    assert result_from_reply(spaced, PY_REGIONS, agent="coding", dialect=PYTHON).status == "no_change"
    renamed = f"```python region=k\n{PY_REGIONS['k'].replace('x_ptr + i, i', 'x_ptr + i, i + 1')}```"
    assert result_from_reply(renamed, PY_REGIONS, agent="coding", dialect=PYTHON).status == "edited"
