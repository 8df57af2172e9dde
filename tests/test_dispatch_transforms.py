"""optimize.transforms.size_dispatch: a launcher's size switch given larger power-of-two cases.

On real SGLang source: moe_topk_sigmoid.cuh's launcher switches the expert count over 1..256 and
sends 512 experts to its generic two-kernel path; topk_softmax's, the same family, reaches 512.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest

from optimize.cuda_regions import Region
from optimize.cuda_sites import size_switches
from optimize.cuda_spans import definition_spans, region_texts
from optimize.transforms import registry as T
from optimize.transforms.edits import NotApplicable, TransformError
from optimize.transforms.size_dispatch import extend_size_dispatch

SIGMOID = "kernels/jit/csrc/moe/moe_topk_sigmoid.cuh"
SOFTMAX = "kernels/jit/csrc/moe/moe_topk_softmax.cuh"
LAUNCHER = "topkGatingSigmoidKernelLauncher"


def wheel_regions(sglang_source, path: str) -> dict[str, str]:
    data = (pathlib.Path(sglang_source.root) / path).read_bytes()
    return region_texts({path: data}, definition_spans(path, data))


@pytest.mark.wheel
def test_the_sigmoid_gate_s_launcher_gets_case_512_copied_from_case_256(sglang_source):
    regions = wheel_regions(sglang_source, SIGMOID)
    (switch,) = size_switches(Region(regions))
    assert (switch.function.name, switch.subject) == (LAUNCHER, "num_experts")
    assert switch.labels == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    new = T.apply("extend_size_dispatch", regions, {"values": [512], "function": LAUNCHER})
    assert {k for k in new if new[k] != regions[k]} == {LAUNCHER}
    old, edited = regions[LAUNCHER], new[LAUNCHER]
    case_256 = "    case 256:\n      LAUNCH_SIGMOID(T, 256, WARPS_PER_TB);\n      break;\n"
    assert case_256 in old, "moe_topk_sigmoid.cuh changed in SGLang: update the test"
    assert edited == old.replace(case_256, case_256 + case_256.replace("256", "512"))
    two = extend_size_dispatch(regions, values=[1024, 512])
    assert two[LAUNCHER].index("case 512:") < two[LAUNCHER].index("case 1024:") < two[LAUNCHER].index("default:")


@pytest.mark.wheel
def test_a_switch_that_already_reaches_the_size_is_not_extended(sglang_source):
    regions = wheel_regions(sglang_source, SOFTMAX)
    (switch,) = size_switches(Region(regions))
    assert max(switch.labels) == 512
    with pytest.raises(NotApplicable, match="already reaches 512"):
        extend_size_dispatch(regions, values=[512])
    assert "case 1024:" in extend_size_dispatch(regions, values=[1024])[switch.function.name]


@pytest.mark.wheel
def test_the_policy_proposes_only_cases_the_measured_shapes_take(sglang_source):
    """Without a profile: the next one and two powers of two. With the baseline's shapes (topk_sigmoid's
    catalog: 8, 128, 256, 288 and 512 experts): case 512 only; with none past 256: nothing to build."""
    from optimize.features import features_of_regions
    from optimize.policy import decide
    from optimize.skills import load_skills

    features = features_of_regions(wheel_regions(sglang_source, SIGMOID))
    assert features.static.size_dispatch == 1 and features.size_switches == [(LAUNCHER, "num_experts", 256)]

    def proposed(sizes: dict[str, list[int]]) -> list[dict]:
        measured = features.model_copy(update={"measured_sizes": sizes})
        decisions = decide(measured, load_skills(), [], llm_available=False, limit=50)
        return [d.params for d in decisions if d.skill == "specialize_size_dispatch" and d.proposed]

    assert proposed({}) == [
        {"function": LAUNCHER, "subject": "num_experts", "values": [512]},
        {"function": LAUNCHER, "subject": "num_experts", "values": [512, 1024]},
    ]
    catalog = {"num_experts": [8, 128, 256, 288, 512], "num_tokens": [1, 16384]}
    assert proposed(catalog) == [{"function": LAUNCHER, "subject": "num_experts", "values": [512]}]
    assert proposed({"num_experts": [8, 128, 256, 288]}) == []
    assert proposed({"num_tokens": [1, 512]}) == [], "a switch over no measured size: nothing to go on"


SWITCH = """void launch(int n) {{
  switch (n) {{
{cases}
  }}
}}
"""


def _regions(cases: str) -> dict[str, str]:
    return {"launch": SWITCH.format(cases=cases)}


@pytest.mark.parametrize(
    "cases,why",
    [
        ("    case 1: go<1>(); break;\n    case 2: go<2>(); break;", "no default"),
        ("    case 2: go<2>(); break;\n    case 3: go<3>(); break;\n    default: slow(n);", "one power of two"),
        ("    case K1: go<1>(); break;\n    case 2: go<2>(); break;\n    default: slow(n);", "a named label"),
        ("    case 1: go<1>(); break;\n    case 2: go<2>();\n    default: slow(n);", "falls through"),
        ("    case 1: go<1>(); break;\n    case 2: go_two(); break;\n    default: slow(n);", "no specialisation"),
        ("    case 1: go<1>(); break;\n    case 2:\n    default: slow(n);", "the largest case is empty"),
    ],
)
def test_a_switch_the_copy_would_get_wrong_is_left_alone(cases, why):
    regions = _regions(cases)
    assert size_switches(Region(regions)) == [], why
    with pytest.raises(NotApplicable):
        extend_size_dispatch(regions, values=[4])


def test_values_must_be_powers_of_two_above_the_cases():
    regions = _regions("    case 1: go<1>(); break;\n    case 2: go<2>(); break;\n    default: slow(n);")
    assert len(size_switches(Region(regions))) == 1
    assert "    case 4: go<4>(); break;" in extend_size_dispatch(regions, values=[4])["launch"]
    for bad in ([3], [], [True], [1 << 20]):
        with pytest.raises(TransformError):
            extend_size_dispatch(regions, values=bad)
    with pytest.raises(NotApplicable, match="already reaches 2"):
        extend_size_dispatch(regions, values=[2, 4])


@pytest.mark.nvcc
@pytest.mark.wheel
def test_the_extended_launcher_builds_for_sm_90a(tmp_path, capsys):
    """The 512 and 1024 cases instantiate the fused gate's template (its static_asserts hold): the
    candidate builds as the harness would (`kernelsmith agent build`, nvcc for sm_90a, no GPU)."""
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    pytest.importorskip("tvm_ffi.libinfo")
    from cli.main import main
    from contract.layout import load_task

    op = "moe.topk_sigmoid"
    assert main(["extract", "--no-compile", "--work-dir", str(tmp_path), "--ops", op]) == 0
    task_dir = tmp_path / "tasks" / op
    task = load_task(task_dir)
    regions = region_texts(task_dir / "src", task.editable)
    region = tmp_path / "launcher.cuh"
    region.write_text(extend_size_dispatch(regions, values=[512, 1024])[LAUNCHER])
    capsys.readouterr()
    code = main(["agent", "build", op, "--region", f"{LAUNCHER}={region}", "--work-dir", str(tmp_path)])
    answer = json.loads(capsys.readouterr().out)
    assert code == 0 and answer["ok"], answer["errors"]
    built = [r["kernel"] for r in answer["ptxas"] if "topkGatingSigmoid" in r["kernel"]]
    assert any("Li512E" in k for k in built) and any("Li1024E" in k for k in built), built


def test_the_measured_sizes_come_from_the_baseline_s_evaluation():
    """The loop plans from region_features(regions, the baseline's evaluation): its timed shapes' sizes
    reach the features, with or without ncu figures, and decide which cases are worth a build."""
    from optimize.hooks import region_features
    from pipeline.run_records import Evaluation, Outcome, ShapeTiming

    def timing(experts: int, tokens: int) -> ShapeTiming:
        sizes = {"n": experts, "num_tokens": tokens}
        return ShapeTiming(
            label=f"m[n={experts}]",
            sizes=sizes,
            dtype="bf16",
            time_us=2.0,
            spread_pct=1.0,
            gbps=1.0,
            pct_of_copy_bw=1.0,
            time_over_floor=2.0,
        )

    evaluation = Evaluation(
        op_id="demo", candidate="c", outcome=Outcome.ok, timings=[timing(4, 1), timing(2, 512), timing(4, 512)]
    )
    regions = _regions("    case 1: go<1>(); break;\n    case 2: go<2>(); break;\n    default: slow(n);")
    for ncu in (None, {"dram_throughput_pct": 40.0}):
        features = region_features(regions, evaluation, ncu=ncu)
        assert features.measured_sizes == {"n": [2, 4], "num_tokens": [1, 512]}
        assert T.expand_targets("extend_size_dispatch", features, {"above": [1, 2]}) == [
            {"function": "launch", "subject": "n", "values": [4]}
        ]
    assert region_features(regions, None).measured_sizes == {}


def test_two_switches_in_one_launcher_are_two_facts_and_a_subject_picks_one():
    """set_mla_kv_concat_q_fp8's launcher switches over two sizes: each is its own fact and target,
    and a value meant for one switch never lands in the other."""
    from optimize.features import features_of_regions

    regions = {
        "launch": """void launch(int n, int w) {
  switch (n) {
    case 1: go<1>(); break;
    case 2: go<2>(); break;
    default: slow(n);
  }
  switch (w) {
    case 4: run<4>(); break;
    case 8: run<8>(); break;
    default: crawl(w);
  }
}
"""
    }
    features = features_of_regions(regions)
    assert features.size_switches == [("launch", "n", 2), ("launch", "w", 8)]
    only_w = extend_size_dispatch(regions, values=[16], function="launch", subject="w")["launch"]
    assert "case 16: run<16>(); break;" in only_w and "go<16>" not in only_w
    both = extend_size_dispatch(regions, values=[16], function="launch")["launch"]
    assert "go<16>" in both and "run<16>" in both
    targets = T.TRANSFORMS["extend_size_dispatch"].targets(features, {"above": 1})
    assert targets == [
        {"function": "launch", "subject": "n", "values": [4]},
        {"function": "launch", "subject": "w", "values": [16]},
    ]
