"""extract.model_ops: which SGLang model files call which op, on a small tree and on the real wheel.

Golden file: tests/golden/model_ops.json holds the map of the pinned wheel (model file ->
its EntryClass classes and the ops it reaches). Regenerate after a deliberate change with
``UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_model_ops.py -k golden`` and review
the diff.
"""

from __future__ import annotations

import pathlib

import pytest
from golden import assert_golden

from extract import model_ops, shapes
from pipeline.records import OpEntry

ROOT = pathlib.Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "model_ops.json"


def _op(op_id: str, module: str, fn: str) -> OpEntry:
    return OpEntry(id=op_id, module=module, public_functions=[fn], entry_points=[fn], files=[], kernels=[])


OPS = [
    _op("norm.rmsnorm", "kernels/ops/norm/norm.py", "rmsnorm"),
    _op("norm.fused_add", "kernels/ops/norm/norm.py", "fused_add"),
    _op("act.silu", "kernels/ops/act/act.py", "silu"),
    _op("quant.q8", "kernels/ops/quant/q.py", "q8"),
    _op("diffusion.mod", "kernels/ops/diffusion/mod.py", "mod"),
    _op("diffusion.unused", "kernels/ops/diffusion/unused.py", "unused"),
]


def _tree(tmp_path: pathlib.Path) -> pathlib.Path:
    files = {
        "kernels/ops/norm/__init__.py": "from .norm import fused_add, rmsnorm\n",
        "kernels/ops/norm/norm.py": "def rmsnorm(x):\n    pass\n\ndef fused_add(x, r):\n    pass\n",
        "kernels/ops/act/act.py": "def silu(x):\n    pass\n",
        "kernels/ops/quant/q.py": "def q8(x):\n    pass\n",
        "kernels/ops/diffusion/mod.py": "def mod(x):\n    pass\n",
        # a layer: its class reaches fused_add through the package re-export, and a
        # lazy import inside a method reaches silu
        "srt/layers/layernorm.py": (
            "from sglang.kernels.ops.norm import fused_add\n"
            "class RMSNorm:\n"
            "    def forward(self, x, r):\n"
            "        from sglang.kernels.ops.act.act import silu\n"
            "        return fused_add(x, r) if r is not None else silu(x)\n"
        ),
        # quantization methods are not followed (a checkpoint's choice)
        "srt/layers/quantization/fp8.py": "from sglang.kernels.ops.quant.q import q8\ndef apply(x):\n    return q8(x)\n",
        "srt/layers/linear.py": "from sglang.srt.layers.quantization import fp8\ndef linear(x):\n    return fp8.apply(x)\n",
        # the runtime is not followed either
        "srt/model_executor/runner.py": "from sglang.kernels.ops.norm.norm import rmsnorm\ndef run(x):\n    rmsnorm(x)\n",
        "srt/models/llama.py": (
            "from sglang.srt.layers.layernorm import RMSNorm\n"
            "from sglang.srt.layers import linear as lin\n"
            "from sglang.srt.model_executor.runner import run\n"
            "from sglang.kernels.ops.norm.norm import rmsnorm\n"
            "class LlamaForCausalLM:\n"
            "    def __init__(self, norm: rmsnorm):\n"  # an annotation is not a call
            "        self.norm = RMSNorm()\n"
            "        lin.linear(None)\n"
            "        run(None)\n"
            "EntryClass = [LlamaForCausalLM]\n"
        ),
        "srt/models/other.py": "class Other:\n    pass\nEntryClass = Other\n",
        "multimodal_gen/runtime/models/dits/flux.py": (
            "import sglang.kernels.ops.diffusion.mod as m\n"
            "class FluxDiT:\n"
            "    def forward(self, x):\n"
            "        return m.mod(x)\n"
            "EntryClass = FluxDiT\n"
        ),
    }
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_reach_through_layers_reexports_lazy_imports_and_module_aliases(tmp_path):
    data = model_ops.build_map(_tree(tmp_path), OPS)
    models = data["models"]
    assert isinstance(models, dict)
    assert models["srt/models/llama.py"] == {"classes": ["LlamaForCausalLM"], "ops": ["act.silu", "norm.fused_add"]}
    assert models["srt/models/other.py"]["ops"] == []
    assert models["multimodal_gen/runtime/models/dits/flux.py"]["ops"] == ["diffusion.mod"]
    assert model_ops.callers(data, "norm.fused_add") == ["srt/models/llama.py"]
    assert model_ops.callers(data, "norm.rmsnorm") == []  # annotation and runtime only
    assert model_ops.file_of_class(data, "FluxDiT", "diffusion") == "multimodal_gen/runtime/models/dits/flux.py"
    assert model_ops.file_of_class(data, "FluxDiT", "llm") is None  # a family's files only


def _model(name: str, arch: str, family: str = "llm") -> shapes.Model:
    return shapes.Model(
        name, "", "", {"hidden_size": 64}, {"hidden_size": "x"}, {}, family=family, architectures=(arch,)
    )


def test_select_models_callers_then_family_fallback(tmp_path):
    data = model_ops.build_map(_tree(tmp_path), OPS)
    catalog = [_model("L", "LlamaForCausalLM"), _model("O", "Nope"), _model("F", "FluxDiT", "diffusion")]
    ops = {op.id: op for op in OPS}
    chosen, why = model_ops.select_models(data, ops["norm.fused_add"], catalog)
    assert [m.name for m in chosen] == ["L"] and "srt/models/llama.py" in why
    chosen, why = model_ops.select_models(data, ops["diffusion.mod"], catalog)
    assert [m.name for m in chosen] == ["F"]
    # nobody calls rmsnorm by name: every LLM of the catalog, said so
    chosen, why = model_ops.select_models(data, ops["norm.rmsnorm"], catalog)
    assert [m.name for m in chosen] == ["L", "O"] and "fallback" in why and "no SGLang model file" in why
    # a diffusion op nobody calls: every diffusion model of the catalog
    chosen, why = model_ops.select_models(data, ops["diffusion.unused"], catalog)
    assert [m.name for m in chosen] == ["F"] and "diffusion" in why


def test_select_models_reads_every_architecture_file(tmp_path):
    """A checkpoint whose draft (MTP / next-n) class lives in another model file than its main
    class takes the shapes of an op only the draft file calls (GLM-5-Next's fused_eh_norm)."""
    data = model_ops.build_map(_tree(tmp_path), OPS)
    two = shapes.Model(
        "T", "", "", {"hidden_size": 64}, {"hidden_size": "x"}, {}, architectures=("Other", "LlamaForCausalLM")
    )
    assert model_ops.model_files(data, two) == ["srt/models/other.py", "srt/models/llama.py"]
    assert model_ops.model_file(data, two) == "srt/models/other.py"
    ops = {op.id: op for op in OPS}
    chosen, why = model_ops.select_models(data, ops["norm.fused_add"], [two, _model("O", "Nope")])
    assert [m.name for m in chosen] == ["T"] and "fallback" not in why
    assert "T (srt/models/llama.py)" in why


def test_map_is_cached_per_process_and_on_disk(tmp_path):
    root = _tree(tmp_path / "tree")
    first = model_ops.load_map(root, OPS, tmp_path / "cache")
    assert list((tmp_path / "cache" / "model_ops").glob("*.json"))
    assert model_ops.load_map(root, OPS, tmp_path / "cache") is first


# --------------------------------------------------------------------------- the real wheel


@pytest.fixture(scope="module")
def wheel_map(sglang_source):
    from extract.command import build_index

    index, _ = build_index(sglang_source, ROOT / "work" / "cache")
    return model_ops.build_map(pathlib.Path(sglang_source.root), index.ops)


@pytest.mark.wheel
def test_golden_model_map(wheel_map):
    assert_golden(GOLDEN, wheel_map, sort_keys=True)


@pytest.mark.wheel
def test_wheel_map_facts(wheel_map):
    # read from the code (2026-12-02): Llama's RMSNorm calls the JIT fused_add_rmsnorm (its
    # plain rmsnorm is sgl_kernel's), DeepSeek-V3.2's indexer ops are called from deepseek_v2.py
    llama = wheel_map["models"]["srt/models/llama.py"]["ops"]
    assert "layernorm.fused_add_rmsnorm" in llama and "activation.silu_and_mul" in llama
    assert "layernorm.rmsnorm" not in llama
    assert not any(op.startswith("diffusion.") for op in llama)
    assert "attention.fused_k_indexer_norm_rope" in wheel_map["models"]["srt/models/deepseek_v2.py"]["ops"]
    # every catalog model names a class some model file registers
    for model in shapes.load_catalog():
        assert model.architectures, model.name
        assert model_ops.model_file(wheel_map, model), model.name
    qwen3 = next(m for m in shapes.load_catalog() if m.name == "Qwen3-32B")
    assert model_ops.model_file(wheel_map, qwen3) == "srt/models/qwen3.py"  # not the diffusion text encoder


CATALOG_GOLDEN = ROOT / "tests" / "golden" / "catalog_ops.json"


@pytest.mark.wheel
def test_golden_catalog_models_and_their_ops(wheel_map):
    """Each catalog model: its family, the model file its architectures name, and the ops
    that file calls (the ops whose tasks take this model's shapes)."""
    out = {}
    for model in shapes.load_catalog():
        files = sorted({f for a in model.architectures if (f := model_ops.file_of_class(wheel_map, a, model.family))})
        ops = sorted({op for f in files for op in wheel_map["models"][f]["ops"]})
        out[model.name] = {"family": model.family, "files": files, "ops": ops}
    assert_golden(CATALOG_GOLDEN, out, sort_keys=True)


@pytest.mark.wheel
def test_an_op_only_a_run_time_runner_reaches_takes_the_models_its_override_names(wheel_map, sglang_source):
    """moe_align_block_size is reached through the Triton MoE runner, chosen at run time, so no
    bf16 MoE model file calls it in the map; with the catalog's new Beam (which calls it
    directly) it had lost every other MoE model's shapes (2026-12-04). The override names
    them back; each file it names must exist and must not already call the op."""
    op_id = "moe.moe_align_block_size"
    files, why = model_ops.OVERRIDES[op_id]
    root = pathlib.Path(sglang_source.root)
    for rel in files:
        assert (root / rel).is_file(), rel
        assert op_id not in wheel_map["models"][rel]["ops"], f"{rel} calls it now: drop it from OVERRIDES"
    assert "moe_runner" in why
    assert set(files) <= set(model_ops.callers(wheel_map, op_id))
    from extract.command import build_index

    index, _ = build_index(sglang_source, ROOT / "work" / "cache")
    op = next(o for o in index.ops if o.id == op_id)
    chosen, reason = model_ops.select_models(wheel_map, op, shapes.load_catalog())
    assert {"Mixtral-8x7B", "Qwen3-235B-A22B", "Qwen3-Next-80B-A3B", "Beam"} <= {m.name for m in chosen}
    assert "fallback" not in reason
