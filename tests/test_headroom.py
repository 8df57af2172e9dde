"""integrate.headroom (`kernelsmith headroom`): the census's time over floor weighed by how often each
model's decoder layer runs the op, from the store and the layer recipes; no GPU."""

from __future__ import annotations

import json
import os

from cli.main import main as cli_main
from integrate.headroom import newest_rows, savings, shape_of, step_shares, unweighed
from integrate.recipe import LAYER_DIR, all_recipes, load_recipe
from integrate.records import E2EResult, LayerTiming
from pipeline.store import Measurement, ResultsStore, Row

LLAMA = load_recipe(LAYER_DIR / "llama-3.1-8b.toml")


def _batch(sglang: str, rows: list[Row]) -> Measurement:
    return Measurement(
        device="NVIDIA H200", taken_at="2026-12-07T00:00:00+00:00", command="c", sglang=sglang, rows=rows
    )


def _row(op: str, label: str, time_us: float, floor_us: float | None = 2.0, **kw) -> Row:
    return Row(
        op_id=op,
        dtype=kw.get("dtype", "bf16"),
        shape=label,
        time_us=time_us,
        floor_us=floor_us,
        variant=kw.get("variant", "baseline"),
    )


def test_a_label_names_its_model_and_token_count():
    assert shape_of("Llama-3.1-8B[hidden_size=4096,num_tokens=8]") == ("Llama-3.1-8B", 8)
    assert shape_of("Qwen3-235B-A22B[T=64,hidden_size=4096]") == ("Qwen3-235B-A22B", 64)
    assert shape_of("synthetic[n=128]") == ("synthetic", None)


def test_an_op_a_layer_runs_twice_weighs_twice_and_the_newest_batch_counts(tmp_path):
    store = ResultsStore(tmp_path)
    norm = "layernorm.fused_add_rmsnorm"
    store.add(_batch("0.5.22", [_row(norm, "Llama-3.1-8B[hidden_size=4096,num_tokens=8]", 9.0)]))
    store.add(
        _batch(
            "0.5.23",
            [
                _row(norm, "Llama-3.1-8B[hidden_size=4096,num_tokens=8]", 5.0),  # newer: replaces 9.0
                _row("activation.silu_and_mul", "Llama-3.1-8B[hidden_size=14336,num_tokens=8]", 4.0),
                _row(norm, "Llama-3.1-8B[hidden_size=4096,num_tokens=8]", 1.0, variant="torch_eager"),
                _row("moe.shuffle_weighted_sum", "DeepSeek-V3[hidden_size=7168,num_tokens=8]", 12.0, floor_us=3.0),
            ],
        )
    )
    rows = newest_rows(store)
    found, missing = savings([LLAMA], rows)
    by_op = {(s.op_id, s.tokens): s for s in found}
    norm8 = by_op[(norm, 8)]
    assert norm8.time_us == 5.0 and norm8.calls_per_layer == 2, "input and post-attention norms: two calls a layer"
    assert norm8.per_step_us == (5.0 - 2.0) * 2 * 32
    assert by_op[("activation.silu_and_mul", 8)].per_step_us == (4.0 - 2.0) * 1 * 32
    assert found[0].op_id == norm, "most per-step time first"
    assert (
        f"{norm} at Llama-3.1-8B T=1" in missing
        and "attention.apply_rope_with_cos_sin_cache_inplace at Llama-3.1-8B T=8" in missing
    )
    assert unweighed(rows, [LLAMA]) == [("moe.shuffle_weighted_sum", 4.0)]


def test_the_command_ranks_from_the_work_folders_store(tmp_path, capsys):
    store = ResultsStore(tmp_path / "work")
    store.add(
        _batch("0.5.23", [_row("activation.silu_and_mul", "Qwen3-235B-A22B[hidden_size=1536,num_tokens=64]", 6.0)])
    )
    assert cli_main(["headroom", "--json", "--work-dir", str(tmp_path / "work")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(s["op_id"], s["model"], s["tokens"]) for s in doc["result"]["savings"]] == [
        ("activation.silu_and_mul", "Qwen3-235B-A22B", 64)
    ]
    assert doc["result"]["savings"][0]["per_step_us"] == (6.0 - 2.0) * 1 * 94
    assert len(all_recipes()[0]) == len(list(LAYER_DIR.glob("*.toml"))), "every recipe loads"


def test_each_ranked_ops_task_says_whether_it_uses_pdl_and_which_skills_apply():
    from conftest import ensure_default_tasks

    from integrate.headroom import task_facts

    work = ensure_default_tasks().parent
    facts = task_facts(work, ["activation.silu_and_mul", "layernorm.fused_add_rmsnorm", "no.such_op"])
    assert set(facts) == {"activation.silu_and_mul", "layernorm.fused_add_rmsnorm"}
    assert (
        facts["layernorm.fused_add_rmsnorm"].pdl == "off"
        and "pdl_enable" in facts["layernorm.fused_add_rmsnorm"].mechanical
    )
    assert (
        facts["activation.silu_and_mul"].pdl == "on" and "pdl_enable" not in facts["activation.silu_and_mul"].mechanical
    )
    assert all(
        skill not in facts["activation.silu_and_mul"].mechanical for skill in facts["activation.silu_and_mul"].other
    )


def _layer_record(path, model: str, rows: list[tuple[int, float, dict[str, float]]], mtime: float) -> None:
    """A layer record as integrate writes it: steps named by the recipe, SGLang's ops and torch's parts."""
    from pipeline.record_io import write_record

    parts = {"norm": "SGLang layernorm.fused_add_rmsnorm", "gemm": "torch linear", "gate": "SGLang moe.moe_fused_gate"}
    layer_rows = [
        LayerTiming(
            phase="decode",
            tokens=tokens,
            baseline_us=layer_us,
            patched_us=layer_us,
            baseline_spread_pct=0.1,
            patched_spread_pct=0.1,
            change_pct=0.0,
            baseline_tokens_per_s=1.0,
            patched_tokens_per_s=1.0,
            ops_us={step: {"baseline": us, "patched": us} for step, us in steps.items()},
        )
        for tokens, layer_us, steps in rows
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_record(E2EResult(ran=True, model=model, layers=2, parts=parts, rows=layer_rows), path)
    os.utime(path, (mtime, mtime))


def test_a_step_goal_says_how_much_faster_sglangs_ops_must_get_or_that_they_cannot(tmp_path, capsys):
    """The model-step issue's goal (a decode step >= 2 % faster on a MoE model) weighed against what SGLang's
    ops take of the layer, from the newest layer record of each model: the speedup they would need
    together, or "not reachable" where their whole part is less than the goal."""
    work = tmp_path / "work"
    old = work / "integrate" / "old" / "e2e" / "moe.json"
    new = work / "integrate" / "pristine-moe" / "pristine-1.json"
    _layer_record(old, "MoE", [(1, 100.0, {"norm": 50.0, "gemm": 40.0, "gate": 10.0})], mtime=1_000)
    steps = {"norm": 3.0, "gemm": 90.0, "gate": 1.0}
    _layer_record(new, "MoE", [(1, 100.0, steps), (8, 400.0, steps), (128, 900.0, steps)], mtime=2_000)

    (one, eight) = step_shares(work)  # the newer record only, and no point past T=64
    assert (one.tokens, one.record) == (1, "integrate/pristine-moe/pristine-1.json")
    assert one.ops_us == {"layernorm.fused_add_rmsnorm": 3.0, "moe.moe_fused_gate": 1.0}, "torch's parts left out"
    assert one.share_pct == 4.0 and one.needed_speedup(2.0) == 2.0, "2 of 4 us saved: twice as fast"
    assert eight.share_pct == 1.0 and eight.needed_speedup(2.0) is None, "4 us of 400: 2 % is out of their reach"

    assert cli_main(["headroom", "--json", "--goal-pct", "3", "--work-dir", str(work)]) == 0
    out = json.loads(capsys.readouterr().out)["result"]
    assert out["goal_pct"] == 3.0
    assert [(s["tokens"], s["needed_speedup"]) for s in out["step_shares"]] == [(1, 4.0), (8, None)]
