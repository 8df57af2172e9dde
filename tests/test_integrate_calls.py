"""integrate.calls: the JSON plans the SGLang worker runs, planned from real tasks' contracts.

No GPU needed: planning is pure Python. The tasks are the real ``kernelsmith
extract --no-compile`` output on the pinned wheel (``test_entry.extract_tasks``).
"""

from __future__ import annotations

import json
import random

import pytest
from test_entry import BUILT, extract_tasks

from contract.completion import complete
from contract.dtypes import POISON_BITS
from contract.layout import load_task
from integrate.calls import HELD_OUT, plan_case, plan_op, task_dtypes, warm_cases, why_uncallable
from optimize.harness.errors import ContractError

OPS = (
    "activation.silu_and_mul",
    "layernorm.fused_add_rmsnorm",
    "layernorm.rmsnorm",
    "moe.shuffle_weighted_sum",
    "activation.run_activation",  # no model sizes it: its one synthetic shape
    BUILT,
)

pytestmark = pytest.mark.wheel


@pytest.fixture(scope="module")
def tasks():
    root = extract_tasks(OPS)
    return {op: complete(load_task(root / op), root / op)[0] for op in OPS}


def test_every_catalog_case_and_dtype_is_planned_plus_held_out_draws(tasks):
    task = tasks["layernorm.fused_add_rmsnorm"]
    plan = plan_op(task, rng=random.Random(1))
    assert not plan.reason and plan.function == "sglang.kernels.ops.layernorm.norm.fused_add_rmsnorm"
    dtypes = task_dtypes(task)
    assert len(plan.cases) == (len(task.shapes) + HELD_OUT) * len(dtypes)
    assert sum(c.held_out for c in plan.cases) == HELD_OUT * len(dtypes)
    request = plan.cases[0].request
    json.dumps(request)  # what goes down the pipe is plain JSON
    assert request["module"] == "sglang.kernels.ops.layernorm.norm" and request["function"] == "fused_add_rmsnorm"
    assert [t["name"] for t in request["tensors"]] == ["input", "residual", "weight"]
    assert all(t["role"] != "output" for t in request["tensors"]), "fused_add_rmsnorm writes in place"
    shape = task.shapes[0].sizes
    assert request["tensors"][0]["shape"] == [shape["num_tokens"], shape["hidden_size"]]
    assert request["scalars"] == {"eps": 1e-6}
    assert {p["name"]: p["feeds"] for p in request["params"]}["cast_x_before_out_mul"] is None
    # seeds differ per case and are recorded; the JIT module key is the instantiation's
    assert len({c.seed for c in plan.cases}) == len(plan.cases)
    assert {c.key for c in plan.cases} == {"|".join([task.op_id, *i.module_args]) for i in task.instantiations}


def test_outputs_the_caller_passes_are_planned_for_poison(tasks):
    plan = plan_op(tasks["layernorm.rmsnorm"], held_out=0)
    (output,) = [t for t in plan.cases[0].request["tensors"] if t["role"] == "output"]
    assert (
        output["name"] == "output"
        and {p["name"]: p["feeds"] for p in plan.cases[0].request["params"]}["out"] == "output"
    )
    assert POISON_BITS["bf16"] == 0x7FE5, "the worker fills with the harness's poison"
    # rmsnorm has one module per width and dtype: warm-up builds each once, from its smallest case
    warm = warm_cases([plan])
    assert len(warm) == len({c.key for c in plan.cases}) and len(warm) > len(task_dtypes(tasks["layernorm.rmsnorm"]))
    for request in warm:
        same = [c for c in plan.cases if c.key == request["key"]]
        assert min(c.numel for c in same) == next(c.numel for c in same if c.request is request)


def test_index_tensors_get_their_value_ranges_and_a_synthetic_shape_stands_in(tasks):
    plan = plan_op(tasks["moe.shuffle_weighted_sum"], held_out=0)
    assert plan.cases and not plan.reason
    ranged = [t for t in plan.cases[0].request["tensors"] if t["value_range"] is not None]
    assert "permutation" in [t["name"] for t in ranged]
    plan = plan_op(tasks["activation.run_activation"])
    assert plan.cases and all(c.label.startswith("synthetic") and not c.held_out for c in plan.cases)


def test_a_value_the_build_fixed_reaches_the_request_and_an_unmappable_op_is_reported(tasks):
    plan = plan_op(tasks[BUILT], held_out=0)
    assert plan.cases and not plan.reason
    for case in plan.cases:
        (is_neox,) = [p for p in case.request["params"] if p["name"] == "is_neox"]
        assert is_neox == {"name": "is_neox", "kind": "keyword_only", "feeds": None, "via": "build", "value": True}
    signature = tasks[BUILT].entry_signature
    assert signature is not None
    unfixed = [i.model_copy(update={"run_time": {}}) for i in tasks[BUILT].instantiations]
    with pytest.raises(ContractError, match="is_neox.*re-run|was not built for"):
        plan_case(tasks[BUILT].model_copy(update={"instantiations": unfixed}), signature, plan.cases[0].sizes, "bf16")
    unmappable = signature.model_copy(update={"reason": "parameter(s) is_neox ... no default"})
    plan = plan_op(tasks[BUILT].model_copy(update={"entry_signature": unmappable}))
    assert plan.cases == [] and plan.reason == why_uncallable(unmappable)
    old = tasks["layernorm.rmsnorm"].model_copy(
        update={"entry_signature": None}
    )  # a task.json from before extract.entry
    assert "re-run `kernelsmith extract`" in plan_op(old).reason
