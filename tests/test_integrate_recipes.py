"""integrate.recipe and integrate.e2e.run over several layer recipes: which recipes a change runs in,
the literal arguments and routing tensors of the MoE recipe, the SGLang lines each step names, and a
recipe that cannot run (a broken file, a moved model file, a run that breaks) costing only itself."""

from __future__ import annotations

import pathlib
import shutil

import pytest

from contract.layout import IntegrateFolder
from integrate import e2e
from integrate.errors import RecipeError, WorkerError
from integrate.recipe import (
    DEFAULT_RECIPE,
    LAYER_DIR,
    all_recipes,
    check_sources,
    load_recipe,
    plan,
    recipes_for,
)
from integrate.records import E2EResult
from pipeline.record_io import read_record

QWEN = LAYER_DIR / "qwen3-235b-a22b.toml"
DEEPSEEK = LAYER_DIR / "deepseek-v3.toml"
QWEN_NEXT = LAYER_DIR / "qwen3-next-80b-a3b.toml"


def test_the_moe_recipe_is_qwen3_moes_decoder_layer_in_sglangs_order():
    r = load_recipe(QWEN)
    assert r.model == "Qwen3-235B-A22B" and r.layers == 94 and r.points() == [("decode", t) for t in (1, 8, 32, 64)]
    assert [s.name for s in r.steps_in("decode")] == [
        "input_norm",
        "qkv_proj",
        "qk_norm",
        "rope",
        "attention",
        "o_proj",
        "post_attention_norm",
        "router",
        "topk",
        "experts_gather",
        "experts_gate_up",
        "silu_and_mul",
        "experts_down",
        "experts_sum",
    ]
    ops = {s.op for s in r.steps if s.op}
    assert ops == {
        "layernorm.fused_add_rmsnorm",
        "layernorm.fused_inplace_qknorm",
        "attention.apply_rope_with_cos_sin_cache_inplace",
        "moe.moe_fused_gate",
        "activation.silu_and_mul",
    }
    assert all(s.source for s in r.steps), "every step names the SGLang line that runs it"


def test_the_deepseek_recipe_runs_its_jit_ops_between_labelled_stand_ins():
    r = load_recipe(DEEPSEEK)
    assert r.model == "DeepSeek-V3" and r.points() == [("decode", t) for t in (1, 8, 16)]
    ops = [s.op for s in r.steps if s.op]
    assert ops.count("quantization.per_token_group_quant") == 5, "one quantization before each fp8 GEMM"
    assert set(ops) == {
        "quantization.per_token_group_quant",
        "attention.apply_rope_with_cos_sin_cache_inplace",
        "kvcache.set_mla_kv_buffer",
        "gemm.tiny_gemm_bf16",
        "activation.silu_and_mul",
    }
    assert "layernorm.fused_add_rmsnorm" not in ops, "DeepSeek's norms are sgl_kernel's AOT ones, not the JIT op"
    p = plan(r, "decode", 8)
    steps = {s["name"]: s for s in p["steps"]}
    assert steps["router"]["kwargs"] == {"out_dtype": {"dtype": "fp32"}}
    assert steps["rope"]["kwargs"] == {"is_neox": {"value": False}}
    shapes = {name: t["shape"] for name, t in p["tensors"].items()}
    assert shapes["w13"] == [257, 2 * 2048, 7168 // 2], "fp8 experts stand in as bf16 over half of K: the same bytes"
    assert shapes["moe_inverse"] == [8, 9] and shapes["routed"] == [72, 3584]


def test_the_qwen3_next_recipe_is_its_gated_attention_layer_with_a_partial_rope_on_views():
    r = load_recipe(QWEN_NEXT)
    assert r.model == "Qwen3-Next-80B-A3B" and r.layers == 12, "one in four layers is full attention"
    assert load_recipe(DEEPSEEK).layers == 58, "DeepSeek-V3's first three layers are dense, not this MoE layer"
    names = [s.name for s in r.steps_in("decode")]
    assert names.index("rope") < names.index("attention") < names.index("output_gate") < names.index("o_proj")
    assert names.index("shared_down") < names.index("router") and names[-1] == "shared_gate_add"
    assert {s.op for s in r.steps if s.op} == {
        "attention.apply_rope_with_cos_sin_cache_inplace",
        "activation.silu_and_mul",
        "moe.moe_fused_gate",
        "elementwise.fused_gate_sigmoid_mul_add",
    }
    p = plan(r, "decode", 8)
    rope = next(s for s in p["steps"] if s["name"] == "rope")
    assert rope["args"][:2] == [{"tensor": "q_rot"}, {"tensor": "k_rot"}]
    assert p["tensors"]["q_rot"] == {"view": "q", "narrow": 64}, "q[..., :64] of a 256-wide head, as SGLang passes it"
    assert p["tensors"]["q"]["shape"] == [8, 16, 256], "a view brings the tensor it views into the plan"
    assert p["tensors"]["cos_sin"]["shape"] == [8192, 64]
    assert p["tensors"]["w13"]["shape"] == [512, 1024, 2048] and p["tensors"]["moe_inverse"]["shape"] == [8, 10]


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        ('q_rot = { view = { of = "q",', 'q_rot = { view = { of = "qq",', "view.of 'qq' is not a tensor"),
        ('k_rot = { view = { of = "k",', 'k_rot = { view = { of = "q_rot",', "(or is a view itself)"),
        ('narrow = "rotary_dim" } }', 'narrow = "rotary_dims" } }', "unknown names ['rotary_dims']"),
        ("q_rot = { view =", 'q_rot = { shape = ["T"], view =', "takes its shape from the tensor it views"),
        ('q_rot = { view = { of = "q", narrow = "rotary_dim" } }', "q_rot = { }", "needs `shape` (or `view`"),
        ('layers = "num_hidden_layers / full_attention_interval"', 'layers = "num_hidden_layers / 5"', "proxy.layers"),
    ],
)
def test_a_bad_view_or_layer_count_fails_the_recipe_with_its_entry(tmp_path, old, new, says):
    text = QWEN_NEXT.read_text()
    assert old in text
    (tmp_path / "variant.toml").write_text(text.replace(old, new, 1))
    with pytest.raises(RecipeError) as err:
        load_recipe(tmp_path / "variant.toml")
    assert says in str(err.value) and "variant.toml" in str(err.value)


def test_literal_arguments_and_counts_reach_the_plan_as_python_values():
    p = plan(load_recipe(QWEN), "decode", 8)
    steps = {s["name"]: s for s in p["steps"]}
    topk = steps["topk"]
    assert topk["args"] == [{"tensor": "router_logits"}, {"value": None}, {"value": 8}]
    assert isinstance(topk["args"][2]["value"], int), "a catalog count is passed as an int (Triton specialises on it)"
    assert topk["kwargs"] == {"scoring_func": {"value": "softmax"}, "renormalize": {"value": True}}
    assert steps["qk_norm"]["kwargs"] == {"head_dim": {"value": 128}}
    shapes = {name: t["shape"] for name, t in p["tensors"].items()}
    assert shapes["w13"] == [128, 2 * 1536, 4096] and shapes["w2"] == [128, 4096, 1536]
    assert shapes["routed"] == [64, 4096] and shapes["moe_inverse"] == [8, 8] and shapes["moe_offsets"] == [128]
    routing = p["tensors"]["moe_offsets"]
    assert routing["params"]["tokens"] == 8 and routing["shared"] and routing["dtype"] == "int32"


def _write_variant(tmp_path: pathlib.Path, old: str, new: str, name: str = "variant.toml") -> pathlib.Path:
    text = QWEN.read_text()
    assert old in text
    path = tmp_path / name
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        ('{ text = "softmax" }', '{ text = "softmax", none = true }', "exactly one of"),
        ("{ none = true }", '{ expr = "num_expertz + 1" }', "unknown names ['num_expertz']"),
        (
            'source = "srt/models/qwen3_moe.py:898"',
            'source = "qwen3_moe line 898"',
            "is not <package-relative file>.py:<line>",
        ),
    ],
)
def test_a_bad_literal_or_source_fails_the_recipe_with_its_step(tmp_path, old, new, says):
    with pytest.raises(RecipeError) as err:
        load_recipe(_write_variant(tmp_path, old, new))
    assert says in str(err.value) and "variant.toml" in str(err.value)


def test_a_change_is_timed_in_every_recipe_that_runs_it_and_otherwise_in_the_default_one():
    recipes, broken = all_recipes()
    assert broken == {}
    models = lambda ops: [r.model for r in recipes_for(ops, recipes)]  # noqa: E731
    assert models(["activation.silu_and_mul"]) == [
        "DeepSeek-V3",
        "Llama-3.1-8B",
        "Qwen3-235B-A22B",
        "Qwen3-Next-80B-A3B",
    ]
    assert models(["elementwise.fused_gate_sigmoid_mul_add"]) == ["Qwen3-Next-80B-A3B"]
    assert models(["quantization.per_token_group_quant", "kvcache.set_mla_kv_buffer"]) == ["DeepSeek-V3"]
    assert models(["layernorm.fused_inplace_qknorm"]) == ["Qwen3-235B-A22B"]
    assert models(["moe.shuffle_weighted_sum"]) == ["Llama-3.1-8B"], "no recipe runs it: the default shows the layer"
    assert pathlib.Path(recipes_for([], recipes)[0].path) == DEFAULT_RECIPE


def test_every_step_source_is_a_line_of_the_pinned_sglang(sglang_source):
    root = pathlib.Path(sglang_source.root)
    for recipe in all_recipes()[0]:
        assert check_sources(recipe, root) == [], recipe.path


def test_a_moved_model_file_or_a_short_one_is_named_with_its_step_and_fix(tmp_path):
    recipe = load_recipe(QWEN)
    (tmp_path / "srt" / "models").mkdir(parents=True)
    (tmp_path / "srt" / "models" / "qwen3_moe.py").write_text("x = 1\n")
    problems = check_sources(recipe, tmp_path)
    assert any("step input_norm: srt/models/qwen3_moe.py:898 is past the end of the file" in p for p in problems)
    assert any(
        "step topk: srt/layers/moe/topk.py is not in this tree (the model file moved?)" in p and "fix:" in p
        for p in problems
    )


def test_one_recipe_that_cannot_run_costs_only_itself(tmp_path, monkeypatch, sglang_source):
    """A broken recipe file, a recipe whose model file moved and one whose run breaks each give a result
    that did not run and says why; the recipe that can run is timed and keeps its figures."""
    root = pathlib.Path(sglang_source.root)
    layers = tmp_path / "layers"
    layers.mkdir()
    shutil.copy(DEFAULT_RECIPE, layers / DEFAULT_RECIPE.name)
    shutil.copy(QWEN, layers / "a-qwen3.toml")  # sorts first: the recipe after it needs fresh workers
    (layers / "broken.toml").write_text('model = "Llama-3.1-8B"\n[[steps]]\nname = 1\n')
    moved = _write_variant(layers, "srt/models/qwen3_moe.py:898", "srt/models/qwen3_moe_v2.py:898", "moved.toml")
    loaded, broken = all_recipes(layers)
    assert list(broken) == ["broken.toml"] and "layer recipe" in broken["broken.toml"]
    timed: list[str] = []
    started: list[str] = []

    class FakeWorker:  # one per tree; the recipes share them until one breaks
        def __init__(self, name, package, cache_dir, log, **kwargs):
            self.name = name

        def __enter__(self):
            started.append(self.name)
            return self

        def __exit__(self, *exc):
            return None

    def time_recipe(trees, recipe, *, command):
        if pathlib.Path(recipe.path).name == "a-qwen3.toml":
            raise WorkerError("the worker died: CUDA error: an illegal memory access", fix="see the worker log")
        timed.append(recipe.model)
        return E2EResult(ran=True, model=recipe.model, recipe=recipe.path)

    import integrate.tree_worker as tree_worker

    monkeypatch.setattr(tree_worker, "TreeWorker", FakeWorker)
    monkeypatch.setattr(e2e, "time_recipe", time_recipe)
    monkeypatch.setattr(e2e, "all_recipes", lambda: (loaded, broken))
    monkeypatch.setattr(e2e, "one_batch", lambda *a: None)
    results = e2e.run(root, root, tmp_path / "out", ops=["layernorm.fused_add_rmsnorm", "activation.silu_and_mul"])
    assert timed == ["Llama-3.1-8B"]
    assert started == ["baseline", "patched", "pristine-copy"] * 2, (
        "the trees started once, then afresh after the break"
    )
    by = {pathlib.Path(r.recipe).name: r for r in results}
    assert by[DEFAULT_RECIPE.name].ran
    assert not by["broken.toml"].ran and "layer recipe" in by["broken.toml"].reason
    assert not by["moved.toml"].ran and "srt/models/qwen3_moe_v2.py is not in this tree" in by["moved.toml"].reason
    assert not by["a-qwen3.toml"].ran and by["a-qwen3.toml"].reason.startswith("it broke: the worker died")
    assert not (IntegrateFolder(tmp_path / "out").aa_tree).exists(), "the A/A copy is removed after"
    kept = read_record(E2EResult, tmp_path / "out" / "e2e" / "llama-3.1-8b.json")
    assert kept.model == "Llama-3.1-8B", "each recipe's result is written as it ends"
    assert moved.exists()


@pytest.mark.gpu
@pytest.mark.parametrize("path", [QWEN, DEEPSEEK, QWEN_NEXT], ids=["qwen3-moe", "deepseek-v3", "qwen3-next"])
def test_the_moe_layers_on_the_gpu(sglang_source, tmp_path, path):
    """Each MoE layer, pristine against itself: every step runs (the routing tensors agree, the grouped
    GEMMs take them, the stand-ins run), the SGLang ops alone are a part of the layer, A/A stays near zero."""
    package = pathlib.Path(sglang_source.root)
    recipe = load_recipe(path)
    points = (1, recipe.proxy.decode[-1])
    result = e2e.run_layers(package, package, tmp_path, recipe=recipe, decode=points, rounds=1, repeats=5)
    assert result.ran and [r.tokens for r in result.rows] == list(points) and result.skipped_ops == {}
    assert result.ops[-1] == recipe.steps[-1].name and set(result.sources) == set(result.ops)
    for row in result.rows:
        assert row.non_gemm is not None and 0 < row.non_gemm.baseline_us < row.baseline_us
        assert set(row.ops_us) == set(result.ops) and abs(row.change_pct) < 5
