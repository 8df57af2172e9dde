"""Filling open contract items: the rules (contract/completion.toml), the
source-literal rule, range expressions in plan_call, and the testing agent's model
path (scripted replies only)."""

from __future__ import annotations

import json

import pytest

from contract import completion, layout
from contract.errors import ContractError
from contract.plan import offsets, plan_call, require_fillable
from contract.sizes import expr_symbols
from optimize.agents import testing
from optimize.llm.fakes import ScriptedModel
from pipeline.errors import ModelError
from pipeline.records import (
    ArgSpec,
    BuildRecipe,
    Contract,
    Instantiation,
    ScalarSpec,
    ShapeCase,
    SourceInfo,
    Task,
    TensorSpec,
)


def tensor(name, shape, dtype="T", role="input", value_range=None):
    return ArgSpec(
        kind="tensor", tensor=TensorSpec(name=name, shape=shape, dtype=dtype, role=role, value_range=value_range)
    )


def scalar(name, type_, value=None):
    return ArgSpec(kind="scalar", scalar=ScalarSpec(name=name, type=type_, value=value))


def task_of(*args, symbols=("tokens", "hidden", "slots")) -> Task:
    return Task(
        op_id="t.op",
        module="m.py",
        public_functions=["f"],
        entry_points=["e"],
        source=SourceInfo(kind="wheel", root="/x"),
        files=[],
        instantiations=[Instantiation(dtype="bf16", module_args=[], template_args=[], wrappers=[("e", "E")])],
        build=BuildRecipe(cuda_files=["a.cuh"], include_dirs=[], cuda_cflags=[]),
        editable=[],
        contract=Contract(entry="e", args=list(args), symbols=list(symbols)),
        shapes=[ShapeCase(model="M", tokens=4, sizes={"tokens": 4, "hidden": 64, "slots": 32})],
    )


SIZES = {"tokens": 4, "hidden": 64, "slots": 32}


def ranges(task: Task) -> dict[str, tuple]:
    plan = plan_call(task.contract, SIZES, "bf16")
    return {t.name: t.value_range for t in plan.tensors if t.value_range is not None}


def test_gather_indices_stay_inside_every_table_and_plan_call_evaluates_the_bound():
    task = task_of(
        tensor("x", ["tokens", "hidden"]),
        tensor("kv_cache", ["slots", "hidden"], role="inout"),
        tensor("cos_sin", [-1, "hidden"]),
        tensor("positions", ["tokens"], dtype="int64"),
        tensor("out_cache_loc", ["tokens"], dtype="int32|int64"),
    )
    done, record = completion.complete(task)
    assert [f.describe() for f in record.filled] == [
        "positions = [0, min(128, slots) - 1] (completion.toml: gather positions)",
        "out_cache_loc = [0, min(128, slots) - 1] (completion.toml: gather *_loc)",
    ]
    assert record.open == []
    # the unfilled task is refused by the harness; the filled one is planned with numbers
    with pytest.raises(ContractError, match="positions has no value_range"):
        for t in plan_call(task.contract, SIZES, "bf16").tensors:
            require_fillable(t)
    assert ranges(done) == {"positions": (0.0, 31.0), "out_cache_loc": (0.0, 31.0)}


def test_scalar_rules_and_a_range_over_a_filled_scalar():
    task = task_of(
        tensor("topk_ids", ["tokens", 8], dtype="int32"),
        scalar("num_experts", "int"),
        scalar("page_size", "int"),
        scalar("eps", "float"),  # the harness settles epsilons itself: not filled here
    )
    done, record = completion.complete(task)
    assert {f.name: (f.value, f.value_range) for f in record.filled} == {
        "topk_ids": (None, ("0", "num_experts - 1")),
        "num_experts": (64, None),
        "page_size": (64, None),
    }
    assert ranges(done) == {"topk_ids": (0.0, 63.0)}
    # without num_experts the bounded rule does not apply and the next one (ids below 8) does
    _, alone = completion.complete(task_of(tensor("topk_ids", ["tokens", 8], dtype="int32")))
    assert alone.filled[0].value_range == ("0", "7")


def test_masked_counts_stay_within_the_padded_rows():
    task = task_of(
        tensor("x", ["num_experts", "num_tokens_padded", 16]), tensor("masked_m", ["num_experts"], dtype="int32")
    )
    _done, record = completion.complete(task)
    assert [(f.name, tuple(f.value_range)) for f in record.filled] == [("masked_m", ("0", "num_tokens_padded"))]


def test_lengths_stay_inside_the_rows_they_index():
    task = task_of(
        tensor("scores", ["batch", "max_seq_len"], dtype="float32"),
        tensor("page_table", ["batch", -1], dtype="int32"),
        tensor("seq_lens", ["batch"], dtype="int32"),
    )
    _done, record = completion.complete(task)
    got = {f.name: tuple(f.value_range) for f in record.filled}
    assert got["seq_lens"] == ("1", "max_seq_len")  # the float rows, not the int page table
    assert got["page_table"] == ("0", "1023")  # no page pool in the call: any id is one
    pooled = task_of(
        tensor("kv", ["pages", 64]),
        tensor("page_table", ["batch", 4], dtype="int32"),
        tensor("topk_idx", ["batch", 8], dtype="int32"),
    )
    got = {f.name: tuple(f.value_range) for f in completion.complete(pooled)[1].filled}
    assert got == {"page_table": ("0", "pages - 1"), "topk_idx": ("0", "pages - 1")}  # a pool: ids stay inside it
    alone = task_of(tensor("score", ["batch", 64]), tensor("topk_idx", ["batch", 8], dtype="int32"))
    assert [tuple(f.value_range) for f in completion.complete(alone)[1].filled] == [
        (0, 0)
    ]  # no table: 0 is valid anywhere
    wide = task_of(
        tensor("score", ["H", "B", "S"], dtype="float32"),
        tensor("q", ["B", -1]),
        tensor("seq_lens", ["B"], dtype="int32"),
    )
    assert {f.name: tuple(f.value_range) for f in completion.complete(wide)[1].filled}["seq_lens"] == (
        "1",
        "min(128, S)",
    )


def test_sequence_offsets_are_a_prefix_sum_over_the_tokens():
    """Found in the coverage sweep (2026-11-29): inkling_sconv's causal_conv1d (`cu`) and
    update_sconv_cache (`qsl`) read cumulative sequence starts; no independent range is
    valid for them, so they were left open."""
    task = task_of(
        tensor("x", ["T", "D"]),
        tensor("cache_indices", ["B"], dtype="int32"),
        tensor("qsl", [-1], dtype="int32"),
        symbols=("T", "D", "B"),
    )
    done, record = completion.complete(task)
    assert [f.describe() for f in record.filled][
        -1
    ] == "qsl = offsets [0, T], shape ['B + 1'] (completion.toml: offsets qsl)"
    plan = {t.name: t for t in plan_call(done.contract, {"T": 7, "D": 8, "B": 3}, "bf16").tensors}
    assert plan["qsl"].shape == (4,) and plan["qsl"].value_range == (0.0, 7.0) and plan["qsl"].structure == "offsets"
    tied = task_of(
        tensor("x", ["T", "D"]), tensor("cu", ["B1"], dtype="int64"), tensor("w", ["B1", 2]), symbols=("T", "D", "B1")
    )
    assert completion.complete(tied)[1].filled[0].shape is None  # its length is another tensor's already


@pytest.mark.parametrize("count", [0, 1, 2, 5, 40])
def test_offsets_start_at_low_end_at_high_and_never_decrease(count):
    import random

    for seed in range(20):
        values = offsets(count, 0, 9, random.Random(seed))
        assert len(values) == count
        if count:
            assert values[0] == 0 and all(a <= b for a, b in zip(values, values[1:]))
            assert count == 1 or values[-1] == 9


def test_inout_counters_packed_data_and_what_no_rule_may_guess():
    task = task_of(
        tensor("slot_state", ["slots"], dtype="int32", role="inout"),
        tensor("qweight", ["hidden", 8], dtype="int32"),
        tensor("q_fp4", ["tokens", 8], dtype="int8"),
        tensor("seq_lens", ["tokens"], dtype="int32"),
        tensor("cu_seqlens_q", ["tokens"], dtype="int32"),
        tensor("k_payload", ["tokens", 64], dtype="uint8"),
        scalar("chunk_rows", "int"),
    )
    done, record = completion.complete(task)
    got = {f.name: tuple(f.value_range) for f in record.filled}
    assert got == {"slot_state": (0, 0), "qweight": (-(2**31), 2**31 - 1), "q_fp4": (-128, 127), "k_payload": (0, 255)}
    assert record.open == [
        "tensor seq_lens (int32, input): no value range",
        "tensor cu_seqlens_q (int32, input): no value range",
        "scalar chunk_rows (int): no value to call with",
    ]
    assert completion.open_items(done.contract) == record.open


def test_a_string_scalar_takes_the_literal_the_kernel_compares_it_with(tmp_path):
    src = tmp_path / "src" / "kernels" / "act.cuh"
    src.parent.mkdir(parents=True)
    src.write_text('void run(std::string type) {\n  if (type == "gelu") {} else if ("silu" == type) {}\n}\n')
    task = task_of(tensor("x", ["tokens", "hidden"]), scalar("type", "str"))
    done, record = completion.complete(task, tmp_path)
    (filled,) = record.filled
    assert (filled.value, filled.rule) == ("gelu", "source-literal")
    assert plan_call(done.contract, SIZES, "bf16").args[1] == "gelu"
    _, nothing = completion.complete(task, None)  # no sources: stays open
    assert nothing.open == ["scalar type (str): no value to call with"]


def test_an_empty_range_and_an_unreadable_contract_are_reported():
    bad = task_of(tensor("ids", ["tokens"], dtype="int32", value_range=("0", "slots - 64")))
    with pytest.raises(ContractError, match="value range of ids is empty"):
        plan_call(bad.contract, SIZES, "bf16")
    unreadable = task_of(tensor("x", ["hidden x 2"]), tensor("ids", ["tokens"], dtype="int32"))
    same, record = completion.complete(unreadable)
    assert same == unreadable and record.open[0].startswith("not completed: shape entry 'hidden x 2'")


def test_every_rule_in_the_shipped_file_is_well_formed():
    rules = completion.load_rules()
    assert rules["scalar"] and rules["index"]
    for rule in rules["scalar"]:
        assert rule["names"] and rule["type"] in ("int", "float", "str", "bool") and "value" in rule and rule["why"]
    for rule in rules["index"]:
        assert (
            rule["names"]
            and rule["kind"] in ("bounded", "gather", "zeros", "full", "lengths", "offsets", "open")
            and rule["why"]
        )
        if rule["kind"] == "bounded":
            expr_symbols(rule["low"]) | expr_symbols(rule["high"])  # parses
    assert rules["order"]
    for rule in rules["order"]:
        assert rule["ops"] and rule["names"] and rule["order"] == "rows" and rule["why"]
    assert rules["floor"]
    for rule in rules["floor"]:
        assert rule["ops"] and rule["byte_bound"] is False and rule["why"]


def test_a_sort_or_selection_op_is_marked_not_byte_bound_and_others_stay_byte_bound():
    args = (
        tensor("topk_ids", ["tokens", 4], dtype="int32"),
        tensor("sorted_ids", ["tokens"], dtype="int32", role="output"),
    )
    done, record = completion.complete(task_of(*args).model_copy(update={"op_id": "moe.moe_align_block_size"}))
    assert done.contract.byte_bound is False
    (floor,) = [f for f in record.filled if f.kind == "floor"]
    assert floor.describe() == "time ÷ floor: n/a, not byte-bound (completion.toml: moe.moe_align_block_size)"
    assert completion.complete(task_of(*args))[0].contract.byte_bound is True
    again, more = completion.complete(done)
    assert again.contract.byte_bound is False and not [f for f in more.filled if f.kind == "floor"], "filled once"


def test_the_n_gram_decode_gather_has_no_floor_and_its_prefill_twin_keeps_one():
    """compute_n_gram_ids_decode reads a few tokens a row of a table sized for whole contexts: on the
    H200 (2026-12-05) both its baseline and its candidate ran at 0.107 of the floor its tensors give."""
    args = (
        tensor("ne_token_table", ["batch + 8", 4096], dtype="int32"),
        tensor("n_gram_ids", ["batch", 12], dtype="int32", role="output"),
    )
    decode = task_of(*args, symbols=("batch",)).model_copy(update={"op_id": "embeddings.compute_n_gram_ids_decode"})
    done, record = completion.complete(decode)
    assert done.contract.byte_bound is False
    assert [f.rule for f in record.filled if f.kind == "floor"] == [
        "completion.toml: embeddings.compute_n_gram_ids_decode"
    ]
    prefill = decode.model_copy(update={"op_id": "embeddings.compute_n_gram_ids"})
    assert completion.complete(prefill)[0].contract.byte_bound is True


def test_an_order_rule_names_the_op_and_its_outputs_and_combines_with_a_role_the_baseline_proves():
    """topk_transform_paged's indices are compared as per-row sets (TensorSpec.order); the baseline's
    own role fix for the same tensor later does not drop it (fixes are applied in order, not by name)."""
    args = (
        tensor("scores", ["tokens", "hidden"]),
        tensor("page_indices", ["tokens", 4], dtype="int32", role="output"),
        tensor("raw_indices", ["tokens", 4], dtype="int32", role="output"),
    )
    task = task_of(*args).model_copy(update={"op_id": "attention.topk_transform_paged"})
    done, record = completion.complete(task)
    orders = {a.tensor.name: a.tensor.order for a in done.contract.args}
    assert orders == {"scores": None, "page_indices": "rows", "raw_indices": "rows"}
    assert {f.describe() for f in record.filled if f.kind == "order"} == {
        "page_indices: order rows (completion.toml: page_indices)",
        "raw_indices: order rows (completion.toml: raw_indices)",
    }
    assert all(a.tensor.order is None for a in completion.complete(task_of(*args))[0].contract.args), (
        "another op with the same names keeps element-wise comparison"
    )
    fixed, _ = completion.refixed(
        done, completion.roles_from_baseline(done.contract, {"page_indices": "never_written"}), None
    )
    (page,) = [a.tensor for a in fixed.contract.args if a.tensor.name == "page_indices"]
    assert (page.role, page.order) == ("inout", "rows")
    plan = plan_call(fixed.contract, SIZES, "bf16")
    assert {t.name: t.order for t in plan.tensors}["raw_indices"] == "rows", "the plan carries it to the worker"


# ------------------------------------------------------------------ the model path


def open_task() -> Task:
    return task_of(
        tensor("x", ["tokens", "hidden"]),
        tensor("token_map", ["tokens", 4], dtype="int32"),
        tensor("cu_seqlens", ["tokens"], dtype="int32"),
        scalar("chunk_rows", "int"),
        scalar("mode", "str"),
    )


def test_the_model_fills_what_the_rules_leave_open_and_wrong_types_are_refused():
    reply = {
        "scalars": {"chunk_rows": 16, "mode": 3},  # mode must be a string
        "ranges": {"cu_seqlens": [1, "hidden"], "token_map": [0, "pages - 1"]},  # `pages` is not a symbol
        "why": {"chunk_rows": "rows per CTA chunk", "cu_seqlens": "at most the cache width"},
    }
    model = ScriptedModel(["Here:\n```json\n" + json.dumps(reply) + "\n```"], name="m1")
    done, record = testing.complete_contract(open_task(), None, model=model)
    assert model.agents() == ["testing"]
    prompt = model.prompts[0][1][1]["content"]
    assert "scalar chunk_rows (int): no value to call with" in prompt and "Size symbols: hidden, tokens" in prompt
    assert {f.name: (f.value, f.value_range, f.rule) for f in record.filled} == {
        "chunk_rows": (16, None, "llm:m1"),
        "cu_seqlens": (None, (1, "hidden"), "llm:m1"),
    }
    assert record.open[:2] == [
        "tensor token_map (int32, input): no value range",
        "scalar mode (str): no value to call with",
    ]
    assert "unusable entries: scalar mode=3, range token_map=[0, 'pages - 1']" in record.open[-1]
    cu_seqlens = next(a.tensor for a in done.contract.args if a.tensor is not None and a.tensor.name == "cu_seqlens")
    assert cu_seqlens.value_range == (1, "hidden")


@pytest.mark.parametrize(
    "reply, problem",
    [
        ("no json at all", "has no JSON object"),
        ("{not json}", "does not parse"),
        (ModelError("endpoint down"), "no LLM completion: endpoint down"),
    ],
)
def test_a_model_failure_keeps_the_rules_result_and_says_why(reply, problem):
    done, record = testing.complete_contract(open_task(), None, model=ScriptedModel([reply]))
    assert record.filled == [] and problem in record.open[-1]
    assert done.contract == open_task().contract


def test_no_model_call_when_the_rules_leave_nothing_open():
    model = ScriptedModel([])
    _, record = testing.complete_contract(
        task_of(tensor("x", ["tokens"]), scalar("page_size", "int")), None, model=model
    )
    assert model.prompts == [] and record.open == [] and record.filled[0].value == 64


def test_a_run_keeps_its_completion_and_later_stages_call_the_kernel_the_same_way(tmp_path):
    from pipeline.record_io import write_record

    task = task_of(tensor("x", ["tokens", "hidden"]), scalar("page_size", "int"))
    assert layout.completed_in_run(task, tmp_path) is None
    _, record = completion.complete(task)
    write_record(
        record.model_copy(update={"filled": [record.filled[0].model_copy(update={"value": 16})]}),
        tmp_path / layout.COMPLETION_FILE,
    )
    again = layout.completed_in_run(task, tmp_path)  # the recorded value, not today's rule
    assert plan_call(again.contract, SIZES, "bf16").args[1] == 16


def test_a_role_fix_from_the_baseline_makes_the_tensor_inout_and_drops_the_reference():
    task = task_of(
        tensor("x", ["tokens"]),
        tensor("gating_output", ["tokens"], role="output"),
        tensor("y", ["tokens"], role="output"),
    )
    contract = task.contract.model_copy(update={"reference": "silu_and_mul"})
    fixes = completion.roles_from_baseline(
        contract, {"x": "written", "gating_output": "never_written", "nope": "written"}
    )
    assert [f.describe() for f in fixes] == [
        "x: role inout (baseline: written)",
        "gating_output: role inout (baseline: never written)",
    ]
    fixed = completion.apply(contract, fixes)
    assert [a.tensor.role for a in fixed.args] == ["inout", "inout", "output"] and fixed.reference is None
    assert completion.apply(contract, []).reference == "silu_and_mul"
    assert completion.roles_from_baseline(fixed, {"x": "written"}) == []  # already inout: nothing more to learn


MISMATCH = (
    "the baseline rejects catalog shape synthetic[hidden=128,tokens=8]: Tensor match failed for "
    "Tensor<8, {got}>[strides=<{got}, 1>, dtype={dtype}, device=cuda:0] at src/k.cuh:204 - Root cause: "
    "Size mismatch for shape#1: expected {want} but got {got}"
)


def test_the_size_a_baseline_rejection_asks_for():
    task = task_of(
        tensor("x", ["tokens", "hidden"]),
        tensor("y", ["tokens", "2*half"]),
        tensor("w", ["hidden"], dtype="float32"),
        symbols=("tokens", "hidden", "half"),
    )
    sizes = {"tokens": 8, "hidden": 128, "half": 64}

    def ask(want: int, got: int = 128, dtype: str = "bfloat16") -> tuple[str, int] | None:
        return completion.size_from_rejection(
            task.contract, sizes, "bf16", MISMATCH.format(want=want, got=got, dtype=dtype)
        )

    assert ask(6144) == ("hidden", 6144)  # x is the first bf16 Tensor<8, 128>: its dim 1 is `hidden`
    assert completion.size_from_rejection(
        task.contract.model_copy(update={"args": task.contract.args[1:]}),
        sizes,
        "bf16",
        MISMATCH.format(want=96, got=128, dtype="bfloat16"),
    ) == ("half", 48)  # `2*half` solved for half
    assert ask(6144, dtype="float32") is None  # no float32 tensor of that shape
    assert ask(6144, got=256) is None  # no tensor of that shape at all
    assert (
        completion.size_from_rejection(task.contract, sizes, "bf16", "gelu_tanh_cat: expected at least two dimensions")
        is None
    )


def test_a_rejected_quotient_moves_its_divisor():
    """Found in the coverage sweep (2026-11-29): awq_marlin_repack's `b_q_weight[size_k,
    size_n / pack_factor]` at pack_factor 128 was one column wide; the matcher expects 16
    (4-bit values packed 8 to an int32). The divisor moves where it divides exactly."""
    task = task_of(
        tensor("b_q_weight", ["size_k", "size_n / pack_factor"], dtype="int32"),
        symbols=("size_k", "size_n", "pack_factor"),
    )
    sizes = {"size_k": 128, "size_n": 128, "pack_factor": 128}
    message = MISMATCH.format(want=16, got=1, dtype="int32").replace("Tensor<8, 1>", "Tensor<128, 1>")
    assert completion.size_from_rejection(task.contract, sizes, "bf16", message) == ("pack_factor", 8)
    odd = MISMATCH.format(want=3, got=1, dtype="int32").replace("Tensor<8, 1>", "Tensor<128, 1>")
    assert completion.size_from_rejection(task.contract, sizes, "bf16", odd) == ("size_n", 384)  # 128 / 3 is no size


def test_the_dtype_a_baseline_check_demands():
    task = task_of(tensor("gating", ["tokens", 8]), tensor("correction_bias", [8]), tensor("n_pad", [1], dtype="int64"))
    msg = "the baseline rejects catalog shape M[]: Failed at k.cuh:662: correction_bias must be float32"
    fix = completion.dtype_from_rejection(task.contract, msg)
    assert fix.describe() == "correction_bias: dtype float32 (baseline: check)"
    fixed = completion.apply(task.contract, [fix])
    assert [a.tensor.dtype for a in fixed.args] == [
        "T",
        "float32",
        "int64",
    ] and fixed.reference == task.contract.reference
    on_cuda = completion.dtype_from_rejection(task.contract, "Failed at h.cuh:187: n_pad on CUDA must be int32")
    assert (on_cuda.name, on_cuda.value) == ("n_pad", "int32")
    assert completion.dtype_from_rejection(task.contract, "scale must be float32") is None  # no such tensor
    assert completion.dtype_from_rejection(fixed, msg) is None  # already so


def test_a_check_that_names_the_symbol_gives_its_size():
    task = task_of(tensor("x", ["tokens", "freq_dim"]), symbols=("tokens", "freq_dim"))
    sizes = {"tokens": 8, "freq_dim": 128}
    msg = "Failed at helios_qk_rope.cuh:101: Helios QK RoPE expects freq_dim=256, got 128"
    assert completion.size_from_rejection(task.contract, sizes, "bf16", msg) == ("freq_dim", 256)
    assert completion.size_from_rejection(task.contract, sizes, "bf16", msg.replace("freq_dim", "rope_dim")) is None
