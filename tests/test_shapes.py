"""extract.shapes: the model catalog (every figure sourced) and its crossing with token counts."""

from __future__ import annotations

import pathlib
import tomllib

import pytest
from golden import assert_golden

from extract import shapes
from pipeline.errors import ConfigError
from pipeline.records import ArgSpec, Contract, TensorSpec

TOKENS = (1, 8, 64, 512, 4096, 16384)
GOLDEN = pathlib.Path(__file__).resolve().parent / "golden" / "catalog.json"


def _contract(symbols_shapes: dict[str, list], **kw) -> Contract:
    args = [
        ArgSpec(kind="tensor", tensor=TensorSpec(name=name, shape=shape, dtype="T", role="input"))
        for name, shape in symbols_shapes.items()
    ]
    syms = sorted({d for s in symbols_shapes.values() for d in s if isinstance(d, str) and "*" not in d})
    return Contract(entry="e", args=args, symbols=syms, **kw)


def test_catalog_models_with_sources():
    models = {m.name: m for m in shapes.load_catalog()}
    assert list(models)[: len(shapes.MODEL_ORDER)] == list(shapes.MODEL_ORDER)
    assert len(models) >= 24 and {m.family for m in models.values()} == {"llm", "diffusion"}
    for model in models.values():
        assert model.repo and model.config_url and model.architectures, model.name
        for dim in model.dims:
            assert model.sources.get(dim), (model.name, dim)
            # every figure names where it was read: a config.json, an upstream file or the wheel's config
            assert "config.json" in model.sources[dim] or ".py" in model.sources[dim], (model.name, dim)
        for dim in ("hidden_size", "num_attention_heads", "head_dim"):
            assert dim in model.dims, (model.name, dim)
        if model.family == "diffusion":
            assert all(t >= 1024 for t in model.token_counts) and (model.tokens_why or not model.token_counts)
            continue
        for flag in ("dense_mlp", "moe", "qk_norm", "mla"):
            assert flag in model.flags and model.sources[f"flag:{flag}"], (model.name, flag)
        for dim in ("num_key_value_heads", "vocab_size"):
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
    assert m["gpt-oss-120b"].dims["num_experts_per_tok"] == 4
    assert '"experts_per_token"' in m["gpt-oss-120b"].sources["num_experts_per_tok"]
    assert m["Qwen3-Next-80B-A3B"].dims["linear_num_value_heads"] == 32
    # the models added for the model-called ops without shapes (wheel config defaults)
    assert m["Inkling"].dims["sconv_kernel_size"] == 4 and m["Inkling"].dims["d_rel"] == 16
    assert "srt/configs/inkling.py" in m["Inkling"].sources["d_rel"]
    assert m["Qwen4-exp"].dims["hc_count"] == 4
    assert m["Qwen4-exp"].dims["hidden_size"] == 2560 and "chosen" in m["Qwen4-exp"].sources["hidden_size"]
    assert m["Muse-Spark"].dims["moe_hidden_size"] == 4096 and m["Muse-Spark"].dims["head_dim"] == 64
    assert m["Beam"].dims["max_position_embeddings"] == 1048576
    assert m["GLM-5-Next"].dims["hidden_size"] == 4096 and "qk_rope_head_dim" not in m["GLM-5-Next"].dims
    assert m["Ernie-Image"].family == "diffusion" and m["Ernie-Image"].dims["intermediate_size"] == 12288
    assert "srt/configs/qwen3_next.py" in m["Qwen3-Next-80B-A3B"].sources["head_dim"]
    assert m["Wan2.1-14B"].token_counts == (32760, 75600) and m["Wan2.1-14B"].dims["hidden_size"] == 5120
    assert m["FLUX.1"].family == "diffusion" and m["FLUX.1"].architectures == ("FluxTransformer2DModel",)
    # every file's dims are written as {value, key|derived}
    for path in shapes.CATALOG_DIR.glob("*.toml"):
        data = tomllib.loads(path.read_text())
        for name, entry in data["dims"].items():
            assert ("key" in entry) != ("derived" in entry), (path.name, name)


def test_a_figure_without_source_is_refused(tmp_path):
    (tmp_path / "X.toml").write_text('model = "X"\n[dims]\nhidden_size = { value = 1024 }\n')
    with pytest.raises(ConfigError, match="no source"):
        shapes.load_catalog(tmp_path)


def _first_six() -> list[shapes.Model]:
    return [m for m in shapes.load_catalog() if m.name in shapes.MODEL_ORDER]


def test_default_mapping_crosses_models_and_tokens():
    contract = _contract({"x": ["num_tokens", "hidden_size"]})
    cases, notes = shapes.shape_cases(contract, None, TOKENS, _first_six())
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
    cases, notes = shapes.shape_cases(contract, families, TOKENS, _first_six())
    dense = {c.sizes["hidden_size"] for c in cases if c.tokens in TOKENS and "rows" not in c.source}
    assert {14336, 28672, 25600, 18432} <= dense
    moe = [c for c in cases if c.model == "DeepSeek-V3" and c.sizes["hidden_size"] == 2048]
    assert sorted(c.tokens for c in moe) == [t * 8 for t in TOKENS]  # rows = tokens x top-8
    assert not any(c.model == "Mixtral-8x7B" and c.sizes["hidden_size"] == 14336 and c.tokens == 1 for c in cases)
    # a width the contract rejects is skipped and reported, never rounded
    picky = _contract({"x": ["num_tokens", "hidden_size"]}, divisibility={"hidden_size": 3})
    cases, notes = shapes.shape_cases(picky, None, TOKENS, _first_six())
    assert cases == [] or all(c.sizes["hidden_size"] % 3 == 0 for c in cases)
    assert any("rejects" in n and "hidden_size" in n for n in notes)
    limited = _contract({"x": ["num_tokens", "hidden_size"]}, max_values={"hidden_size": 5120})
    assert {c.sizes["hidden_size"] for c in shapes.shape_cases(limited, None, TOKENS, _first_six())[0]} == {4096, 5120}


def test_requires_a_flag_and_unmapped_symbols():
    qk = [{"num_tokens": "tokens*num_attention_heads", "hidden_size": "head_dim", "requires": "qk_norm"}]
    cases, _ = shapes.shape_cases(_contract({"x": ["num_tokens", "hidden_size"]}), qk, (1,), _first_six())
    assert {c.model for c in cases} == {"Qwen3-32B"}  # Qwen3-235B has the same (64 heads x 128) and is folded in
    assert {c.tokens for c in cases} == {64}
    cases, notes = shapes.shape_cases(_contract({"x": ["num_tokens", "mystery_dim"]}), None, TOKENS)
    assert cases == [] and "mystery_dim" in notes[0]
    not_mla = [{"num_tokens": "tokens", "hidden_size": "head_dim", "requires": "!mla"}]
    cases, _ = shapes.shape_cases(_contract({"x": ["num_tokens", "hidden_size"]}), not_mla, (1,), _first_six())
    assert "DeepSeek-V3" not in {c.model for c in cases} and {c.sizes["hidden_size"] for c in cases} == {128}
    # a list: every flag must hold (MoE models without MLA)
    moe_gqa = [{"num_tokens": "tokens", "hidden_size": "num_experts", "requires": ["moe", "!mla"]}]
    cases, _ = shapes.shape_cases(_contract({"x": ["num_tokens", "hidden_size"]}), moe_gqa, (1,), _first_six())
    assert {c.model for c in cases} == {"Qwen3-235B-A22B", "Mixtral-8x7B"}
    assert all("requires moe" in c.source and "requires !mla" not in c.source for c in cases)


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


def test_a_model_with_its_own_token_axis():
    """A DiT's [tokens] (image tokens at SGLang's default resolutions) replace the caller's
    token counts for that model only, and the reason is on every case."""
    models = {m.name: m for m in shapes.load_catalog()}
    contract = _contract({"x": ["num_tokens", "hidden_size"]})
    cases, _ = shapes.shape_cases(contract, None, TOKENS, [models["Llama-3.1-8B"], models["FLUX.1"]])
    flux = [c for c in cases if c.model == "FLUX.1"]
    assert sorted(c.tokens for c in flux) == [1024, 4096] and all("image tokens" in c.source for c in flux)
    assert sorted(c.tokens for c in cases if c.model == "Llama-3.1-8B") == sorted(TOKENS)


def test_a_token_axis_without_reason_is_refused(tmp_path):
    (tmp_path / "X.toml").write_text(
        'model = "X"\n[tokens]\nvalues = [4096]\n[dims]\nhidden_size = { value = 1024, key = "h" }\n'
    )
    with pytest.raises(ConfigError, match="tokens"):
        shapes.load_catalog(tmp_path)


def test_golden_catalog():
    """Every model's figures with their sources, as load_catalog reads them (tests/golden/catalog.json;
    regenerate with UPDATE_GOLDEN=1 after a deliberate change and review the diff)."""
    out = {
        m.name: {
            "family": m.family,
            "architectures": list(m.architectures),
            "dims": {d: [v, m.sources[d]] for d, v in sorted(m.dims.items())},
            "flags": {f: [v, m.sources["flag:" + f]] for f, v in sorted(m.flags.items())},
            "tokens": [list(m.token_counts), m.tokens_why],
        }
        for m in shapes.load_catalog()
    }
    assert_golden(GOLDEN, out, sort_keys=True)


def test_family_expressions_add_and_divide_exactly():
    """A family entry may add and divide (``2*moe_intermediate_size``, ``hidden_size/128``):
    a division that is not exact (the width does not split into those groups) gives no value."""
    dims = {"hidden_size": 7168, "tokens": 8, "heads": 64, "head_dim": 512, "groups": 8}
    assert shapes.evaluate_dim("hidden_size/128", dims) == 56
    assert shapes.evaluate_dim("hidden_size/3", dims) is None
    assert shapes.evaluate_dim("heads*head_dim/(groups*128)", dims) == 32
    assert shapes.evaluate_dim("2*hidden_size+tokens", dims) == 14344
    assert shapes.evaluate_dim("max(heads, 128)", dims) == 128
    assert shapes.evaluate_dim("tokens*missing", dims) is None
    assert shapes.evaluate_dim("hidden_size-hidden_size", dims) is None  # not positive


def test_a_function_in_a_shape_entry_is_no_symbol():
    """``min(1, batch_size // 2049)`` sizes a tensor by batch_size; ``min`` needs no mapping."""
    contract = _contract({"x": ["batch_size"], "w": ["min(1, batch_size // 2049) * batch_size"]})
    assert shapes.tensor_symbols(contract) == ["batch_size"]
    cases, notes = shapes.shape_cases(contract, None, (1, 8), _first_six())
    assert notes == [] and {c.tokens for c in cases} == {1, 8}


def test_an_op_on_its_own_axis():
    """A family's ``axis`` names the symbol that is the op's count (pages, experts): it is the
    case's ``tokens``, which the buckets read; sizes that do not follow the token count give one
    case per width, not one per token count."""
    from pipeline.buckets import bucket_for, tokens_of

    contract = _contract({"cache": ["num_pages", "page_bytes"], "x": ["num_tokens", "page_bytes"]})
    family = [{"num_tokens": "tokens", "num_pages": "tokens*64", "page_bytes": "hidden_size", "axis": "num_pages"}]
    cases, _ = shapes.shape_cases(contract, family, (1, 64), _first_six()[:1])
    assert [(c.tokens, c.sizes["num_pages"]) for c in cases] == [(64, 64), (4096, 4096)]
    assert [bucket_for(tokens_of(c)) for c in cases] == ["T<=64", "T>=512"]  # by the axis, not by num_tokens
    experts = _contract({"w": ["num_experts", "hidden_size"]})
    cases, _ = shapes.shape_cases(
        experts, [{"num_experts": "num_experts", "hidden_size": "hidden_size", "axis": "num_experts"}], TOKENS
    )
    deepseek = [c for c in cases if c.model == "DeepSeek-V3"]
    assert len(deepseek) == 1 and deepseek[0].tokens == 256  # one case, bucketed by its 256 experts
    assert bucket_for(tokens_of(deepseek[0])) == "64<T<512"
    assert "tokens" not in deepseek[0].source.split(";")[0]
