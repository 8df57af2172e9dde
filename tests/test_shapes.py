"""extract.shapes: the model catalog (every figure sourced) and its crossing with token counts."""

from __future__ import annotations

import tomllib

import pytest

from extract import shapes
from pipeline.errors import ConfigError
from pipeline.records import ArgSpec, Contract, TensorSpec

TOKENS = (1, 8, 64, 512, 4096, 16384)


def _contract(symbols_shapes: dict[str, list], **kw) -> Contract:
    args = [
        ArgSpec(kind="tensor", tensor=TensorSpec(name=name, shape=shape, dtype="T", role="input"))
        for name, shape in symbols_shapes.items()
    ]
    syms = sorted({d for s in symbols_shapes.values() for d in s if isinstance(d, str) and "*" not in d})
    return Contract(entry="e", args=args, symbols=syms, **kw)


def test_catalog_has_the_six_models_with_sources():
    models = {m.name: m for m in shapes.load_catalog()}
    assert list(models) == list(shapes.MODEL_ORDER)
    for model in models.values():
        assert model.repo and model.config_url.startswith("https://huggingface.co/")
        for dim in model.dims:
            assert model.sources.get(dim), (model.name, dim)
            assert "config.json" in model.sources[dim]
        for flag in ("dense_mlp", "moe", "qk_norm", "mla"):
            assert flag in model.flags and model.sources[f"flag:{flag}"], (model.name, flag)
        for dim in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size"):
            assert dim in model.dims, (model.name, dim)
        if model.flags["moe"]:
            assert {"moe_intermediate_size", "num_experts", "num_experts_per_tok"} <= set(model.dims)
        if model.flags["dense_mlp"]:
            assert "intermediate_size" in model.dims


def test_catalog_figures():
    m = {model.name: model for model in shapes.load_catalog()}
    assert m["Llama-3.1-8B"].dims["intermediate_size"] == 14336
    assert m["Llama-3.1-70B"].dims["hidden_size"] == 8192
    assert m["Qwen3-32B"].dims["intermediate_size"] == 25600
    assert m["Qwen3-235B-A22B"].dims["moe_intermediate_size"] == 1536
    assert m["Qwen3-235B-A22B"].dims["num_key_value_heads"] == 4
    assert m["DeepSeek-V3"].dims["num_experts"] == 256
    assert '"n_routed_experts"' in m["DeepSeek-V3"].sources["num_experts"]
    assert m["DeepSeek-V3"].dims["kv_lora_rank"] == 512
    assert m["Mixtral-8x7B"].dims["num_experts_per_tok"] == 2
    # every file's dims are written as {value, key|derived}
    for path in shapes.CATALOG_DIR.glob("*.toml"):
        data = tomllib.loads(path.read_text())
        for name, entry in data["dims"].items():
            assert ("key" in entry) != ("derived" in entry), (path.name, name)


def test_a_figure_without_source_is_refused(tmp_path):
    (tmp_path / "X.toml").write_text('model = "X"\n[dims]\nhidden_size = { value = 1024 }\n')
    with pytest.raises(ConfigError, match="no source"):
        shapes.load_catalog(tmp_path)


def test_default_mapping_crosses_models_and_tokens():
    contract = _contract({"x": ["num_tokens", "hidden_size"]})
    cases, notes = shapes.shape_cases(contract, None, TOKENS)
    assert notes == []
    widths = {c.sizes["hidden_size"] for c in cases}
    assert widths == {4096, 8192, 5120, 7168}  # Llama-8B, Qwen3-235B and Mixtral share 4096
    assert len(cases) == len(widths) * len(TOKENS)  # deduplicated across models
    assert all(c.sizes["num_tokens"] == c.tokens for c in cases)
    shared = next(c for c in cases if c.sizes["hidden_size"] == 4096 and c.tokens == 8)
    assert shared.model == "Llama-3.1-8B" and "Mixtral-8x7B" in shared.source and "Qwen3-235B-A22B" in shared.source
    assert '"hidden_size"' in shared.source


def test_curated_families_moe_rows_and_rejected_widths():
    families = [
        {"num_tokens": "tokens", "hidden_size": "intermediate_size", "requires": "dense_mlp"},
        {"num_tokens": "tokens*num_experts_per_tok", "hidden_size": "moe_intermediate_size", "requires": "moe"},
    ]
    contract = _contract(
        {"x": ["num_tokens", "2*hidden_size"], "y": ["num_tokens", "hidden_size"]}, divisibility={"hidden_size": 8}
    )
    cases, notes = shapes.shape_cases(contract, families, TOKENS)
    dense = {c.sizes["hidden_size"] for c in cases if c.tokens in TOKENS and "rows" not in c.source}
    assert {14336, 28672, 25600, 18432} <= dense
    moe = [c for c in cases if c.model == "DeepSeek-V3" and c.sizes["hidden_size"] == 2048]
    assert sorted(c.tokens for c in moe) == [t * 8 for t in TOKENS]  # rows = tokens x top-8
    assert not any(c.model == "Mixtral-8x7B" and c.sizes["hidden_size"] == 14336 and c.tokens == 1 for c in cases)
    # a width the contract rejects is skipped and reported, never rounded
    picky = _contract({"x": ["num_tokens", "hidden_size"]}, divisibility={"hidden_size": 3})
    cases, notes = shapes.shape_cases(picky, None, TOKENS)
    assert cases == [] or all(c.sizes["hidden_size"] % 3 == 0 for c in cases)
    assert any("rejects" in n and "hidden_size" in n for n in notes)
    limited = _contract({"x": ["num_tokens", "hidden_size"]}, max_values={"hidden_size": 5120})
    assert {c.sizes["hidden_size"] for c in shapes.shape_cases(limited, None, TOKENS)[0]} == {4096, 5120}


def test_requires_a_flag_and_unmapped_symbols():
    qk = [{"num_tokens": "tokens*num_attention_heads", "hidden_size": "head_dim", "requires": "qk_norm"}]
    cases, _ = shapes.shape_cases(_contract({"x": ["num_tokens", "hidden_size"]}), qk, (1,))
    assert {c.model for c in cases} == {"Qwen3-32B"}  # Qwen3-235B has the same (64 heads x 128) and is folded in
    assert {c.tokens for c in cases} == {64}
    cases, notes = shapes.shape_cases(_contract({"x": ["num_tokens", "mystery_dim"]}), None, TOKENS)
    assert cases == [] and "mystery_dim" in notes[0]
    not_mla = [{"num_tokens": "tokens", "hidden_size": "head_dim", "requires": "!mla"}]
    cases, _ = shapes.shape_cases(_contract({"x": ["num_tokens", "hidden_size"]}), not_mla, (1,))
    assert "DeepSeek-V3" not in {c.model for c in cases} and {c.sizes["hidden_size"] for c in cases} == {128}


def test_stride_symbols_need_no_mapping():
    contract = Contract(
        entry="e",
        args=[
            ArgSpec(
                kind="tensor",
                tensor=TensorSpec(
                    name="x", shape=["num_tokens", "hidden_size"], strides=["row_stride", 1], dtype="T", role="input"
                ),
            )
        ],
        symbols=["num_tokens", "hidden_size", "row_stride"],
    )
    cases, notes = shapes.shape_cases(contract, None, (1,))
    assert cases and notes == []
    assert all("row_stride" not in c.sizes for c in cases)
