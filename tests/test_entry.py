"""extract.entry: the public functions' signatures on real SGLang wrappers, bound to their contracts.

Golden file ``golden/entry_signatures.json``: for each op below, every parameter
of its public function with its kind, default and the contract argument it feeds
(and how that was found). Regenerate after a deliberate change with
``KS_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/test_entry.py``.
"""

from __future__ import annotations

import json
import os
import pathlib

import pytest

from contract import layout
from extract import entry
from extract.pyops.modules import dotted_name
from pipeline.records import ArgSpec, Contract, ScalarSpec, Task, TensorSpec

ROOT = pathlib.Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "entry_signatures.json"
OPS = (
    "activation.silu_and_mul",
    "layernorm.fused_add_rmsnorm",
    "layernorm.rmsnorm",
    "activation.relu2",
    "moe.shuffle_weighted_sum",
    "quantization.per_token_quant_fp8",
    "attention.fused_qk_norm_rope",
    # is_neox: required, feeds no argument, reaches the loader (built for a curated value)
    "attention.apply_rope_with_cos_sin_cache_inplace",
    "activation.run_unary_activation",  # op_name: asserted in a module-level set
)
BUILT = "attention.apply_rope_with_cos_sin_cache_inplace"

pytestmark = pytest.mark.wheel


def extract_tasks(ops: tuple[str, ...]) -> pathlib.Path:
    """``work/tasks`` holding real task folders for ``ops`` (``kernelsmith extract --no-compile`` on
    the pinned wheel; a rerun finds them current and is quick)."""
    from cli.main import main

    code = main(["extract", "--no-compile", "--work-dir", str(ROOT / "work"), "--ops", *ops])
    assert code == 0, f"kernelsmith extract of {ops} failed"
    return ROOT / "work" / "tasks"


@pytest.fixture(scope="module")
def extracted() -> dict[str, tuple[pathlib.Path, Task]]:
    root = extract_tasks(OPS)
    return {op: (root / op, layout.load_task(root / op)) for op in OPS}


def test_signatures_match_the_golden_file(extracted):
    got = {op: task.entry_signature.model_dump(mode="json") for op, (_, task) in extracted.items()}
    if os.environ.get("KS_REGEN_GOLDEN"):
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    assert got == json.loads(GOLDEN.read_text(encoding="utf-8"))


def test_the_default_ops_feed_their_contract_by_the_wrappers_calls(extracted):
    feeds = {op: {p.name: (p.feeds, p.via) for p in task.entry_signature.params} for op, (_, task) in extracted.items()}
    # rmsnorm's `out` reaches the entry's `output` (out = out if out is not None else input)
    assert feeds["layernorm.rmsnorm"]["out"] == ("output", "call")
    # silu_and_mul -> run_activation -> _run_activation_inplace -> module.run_activation(input_2d, out_2d, op_name)
    assert feeds["activation.silu_and_mul"]["input"] == ("input", "call") and feeds["activation.silu_and_mul"][
        "out"
    ] == ("out", "call")
    assert feeds["activation.silu_and_mul"]["expert_ids"] == (None, ""), (
        "a parameter of another entry feeds nothing here"
    )
    assert feeds["layernorm.fused_add_rmsnorm"]["cast_x_before_out_mul"] == (None, "")
    for op, (_, task) in extracted.items():
        assert task.entry_signature.module == dotted_name(task.module)
        assert task.entry_signature.reason == "", op


def test_a_parameter_the_build_fixed_is_passed_the_built_value(extracted, sglang_source):
    """apply_rope_with_cos_sin_cache_inplace(q, k, cos_sin_cache, positions, *, is_neox) ->
    apply_rope_inplace(..., is_neox=is_neox) -> _jit_fused_rope_module(is_neox, ...): every
    instantiation is built with the curated is_neox = True, so the parameter takes that value;
    without the loader traced, or with the value not fixed by the build, it is a reason."""
    task = extracted[BUILT][1]
    (is_neox,) = [p for p in task.entry_signature.params if p.name == "is_neox"]
    assert (is_neox.kind, is_neox.has_default, is_neox.feeds) == ("keyword_only", False, None)
    assert (is_neox.via, is_neox.loader_param) == ("build", "is_neox")
    assert [i.run_time for i in task.instantiations] == [{"is_neox": True}] * len(task.instantiations)
    feeds = {p.name: (p.feeds, p.via) for p in task.entry_signature.params}
    assert feeds["q"] == ("q", "call") and feeds["k"] == ("k", "call"), "the loader's k.dtype does not hide k"
    root = pathlib.Path(sglang_source.root)
    args = (root, task.module, "apply_rope_with_cos_sin_cache_inplace", task.contract, task.entry_points)
    for loader, built in (("_jit_fused_rope_module", ()), (None, ("is_neox",))):
        signature = entry.read_signature(*args, loader=loader, built=built)
        assert "is_neox" in signature.reason and "no default and feed no argument" in signature.reason, loader
        (param,) = [p for p in signature.params if p.name == "is_neox"]
        assert (param.via, param.loader_param) == ("", None)
    assert entry.read_signature(*args, loader="_jit_fused_rope_module", built=("is_neox",)) == task.entry_signature


def test_a_missing_function_is_a_reason_not_an_error(sglang_source):
    contract = Contract(
        entry="run",
        args=[ArgSpec(kind="tensor", tensor=TensorSpec(name="x", shape=["n"], dtype="T", role="input"))],
        symbols=["n"],
    )
    root = pathlib.Path(sglang_source.root)
    signature = entry.read_signature(root, "kernels/ops/layernorm/norm.py", "no_such_function", contract, ["run"])
    assert signature.params == [] and "not a top-level def" in signature.reason
    signature = entry.read_signature(root, "kernels/ops/nope.py", "f", contract, ["run"])
    assert "cannot read kernels/ops/nope.py" in signature.reason


def test_a_size_parameter_and_a_name_match(tmp_path):
    (tmp_path / "m.py").write_text(
        "def f(x, topk, eps, *, flag):\n    mod.run(x.view(-1), eps)\n\n"
        "def g(y, scale=1.0):\n    h(y)\n\ndef h(z):\n    w = z[0]\n    mod.run(w)\n"
    )
    contract = Contract(
        entry="run",
        args=[
            ArgSpec(kind="tensor", tensor=TensorSpec(name="x", shape=["n", "topk"], dtype="T", role="input")),
            ArgSpec(kind="scalar", scalar=ScalarSpec(name="eps", type="float", value=1e-6)),
            ArgSpec(kind="scalar", scalar=ScalarSpec(name="flag", type="bool")),
        ],
        symbols=["n", "topk"],
    )
    sig = entry.read_signature(tmp_path, "m.py", "f", contract, ["run"])
    assert [(p.name, p.feeds, p.via) for p in sig.params] == [
        ("x", "x", "call"),
        ("topk", "topk", "size"),
        ("eps", "eps", "call"),
        ("flag", "flag", "name"),
    ]
    assert sig.reason == "" and sig.module == "sglang.m"
    sig = entry.read_signature(tmp_path, "m.py", "g", contract, ["run"])  # through helper h and a local
    assert [(p.name, p.feeds, p.via) for p in sig.params] == [("y", "x", "call"), ("scale", None, "")]


def test_a_value_the_wrapper_asserts_outranks_a_literal_the_kernel_compares(extracted):
    """On the H200 (2026-12-02) every call of run_unary_activation was refused: the contract's `type`
    came from the first literal the header compares it with ("silu", another entry's), while the
    wrapper asserts op_name in {"relu2"}. The asserted value is now the one planned."""
    from contract.completion import complete

    folder, task = extracted["activation.run_unary_activation"]
    (op_name,) = [p for p in task.entry_signature.params if p.name == "op_name"]
    assert op_name.feeds == "type" and op_name.allowed == ["relu2"]
    _, completion = complete(task, folder)
    (filled,) = [f for f in completion.filled if f.name == "type"]
    assert (filled.value, filled.rule) == ("relu2", "python-assert")
    relu2 = extracted["activation.relu2"][1]
    assert all(p.allowed == [] for p in relu2.entry_signature.params), "no assert, nothing stated"
