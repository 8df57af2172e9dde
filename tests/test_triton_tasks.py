"""extract.triton_contract and extract.triton_tasks: contracts from wrappers, task folders, error paths, records.

Regenerate the task golden files with ``UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_triton_tasks.py``
after checking the diff by eye: our facts about each task (contract, shapes, spans), no SGLang text.
"""

from __future__ import annotations

import json
import pathlib

import pytest
from golden import assert_golden
from triton_demo import demo_tree

from contract.layout import load_task
from extract import shapes, triton_ops, triton_tasks
from pipeline.errors import ConfigError, StaleRecordError
from pipeline.record_io import read_record
from pipeline.records import Task

GOLDEN = pathlib.Path(__file__).parent / "golden" / "triton_tasks"
#: Triton tasks with real-model (catalog) shapes in sglang 0.5.23
GOLDEN_TASKS = (
    "attention.merge_state_triton",
    "speculative.build_qo_indptr_triton",
    "elementwise.fused_sigmoid_mul",
    "layernorm.hc_broadcast",
    "moe.fused_moe_router_cudacore",
    "srt.layers.logsumexp.row_logsumexp",  # outputs the wrapper allocates and returns (`returned`)
    "moe.moe_sum_reduce_triton",
)


@pytest.fixture
def demo(tmp_path):
    source = demo_tree(tmp_path)
    index, _ = triton_ops.scan_tree(source, None)
    return source, index, {op.id: op for op in index.ops}


def _args(task: Task) -> dict[str, tuple]:
    out = {}
    for arg in task.contract.args:
        if arg.tensor is not None:
            out[arg.tensor.name] = (arg.tensor.shape, arg.tensor.dtype, arg.tensor.role)
        elif arg.scalar is not None:
            out[arg.scalar.name] = (arg.scalar.type, arg.scalar.value)
    return out


def test_contract_from_the_wrapper(demo, tmp_path):
    _, index, ops = demo
    task = triton_tasks.write_task(index, ops["demo.scaled_add"], tmp_path / "work")
    assert _args(task) == {
        "x": (["num_tokens", "hidden_size"], "T", "input"),
        "y": (["num_tokens", "hidden_size"], "T", "input"),
        "acc": (["num_tokens", "hidden_size"], "T", "inout"),  # read and written in place
        "scale": ("float", 1.0),
        "out": (["num_tokens", "hidden_size"], "T", "output"),  # allocated when None, only written
    }
    assert task.contract.entry == "scaled_add" and task.contract.unresolved == []
    assert task.shapes and task.shapes[0].model == "Llama-3.1-8B"  # num_tokens, hidden_size: catalog names
    feeds = {p.name: p.feeds for p in task.entry_signature.params}
    assert feeds == {"x": "x", "y": "y", "acc": "acc", "scale": "scale", "out": "out"}


def test_ranks_from_chained_asserts_and_sizes_from_numel(demo, tmp_path):
    _, index, ops = demo
    task = triton_tasks.write_task(index, ops["demo.offsets"], tmp_path / "work")
    args = _args(task)
    assert args["lens"][0] == ["lens_dim0"]  # lens.ndim == starts.ndim == 1
    assert args["starts"][0] == ["rows + 1"]  # starts.numel() == rows + 1
    assert args["out"] == (["rows", "width"], "T", "inout")
    assert task.contract.symbols == ["lens_dim0", "rows", "width"]


def test_tensors_the_wrapper_allocates_and_returns_are_returned_outputs(demo, tmp_path):
    _, index, ops = demo
    # `out = x if inplace else torch.empty_like(x)`, inplace False by default: a new tensor, so the
    # launch that stores to out does not make x inout
    gated = triton_tasks.write_task(index, ops["demo.gated"], tmp_path / "work")
    assert _args(gated) == {
        "x": (["rows", "width"], "T", "input"),
        "inplace": ("bool", False),
        "out": (["rows", "width"], "T", "output"),
    }
    assert [a.tensor.returned for a in gated.contract.args if a.tensor is not None] == [None, 0]
    # the last statement's tuple, not the early return; sizes from x's dims and the int k
    pairs = triton_tasks.write_task(index, ops["demo.pairs"], tmp_path / "work")
    args = _args(pairs)
    assert args["out"] == (["rows", "width"], "T", "output")  # new_empty: x's dtype
    assert args["idx"] == (["rows", "k + 1"], "int32", "output")
    assert "spare" not in args  # no launch stores to it: not checkable, and said so
    assert pairs.contract.unresolved == ["returned spare: no launch of the wrapper stores to it; not checked"]
    assert {a.tensor.name: a.tensor.returned for a in pairs.contract.args if a.tensor is not None} == {
        "x": None,
        "out": 0,
        "idx": 1,
    }
    assert pairs.contract.symbols == ["rows", "width", "k"]  # the int k sizes idx, so the call passes that size


def test_task_folder_and_record(demo, tmp_path):
    source, index, ops = demo
    task = triton_tasks.write_task(index, ops["demo.scaled_add"], tmp_path / "work")
    folder = tmp_path / "work" / "tasks" / "demo.scaled_add"
    loaded = load_task(folder)
    assert loaded == task and loaded.language == "triton" and loaded.schema_version == 3
    assert loaded.entry_points == ["scaled_add_kernel"]
    assert loaded.triton.wrapper == "sglang.kernels.ops.demo.scale:scaled_add"
    assert loaded.triton.registered_as == "demo.scaled_add"
    data = (folder / "src" / "kernels/ops/demo/scale.py").read_bytes()
    spans = {s.name: (s.kind, data[s.start_byte : s.end_byte]) for s in loaded.editable}
    assert spans["scaled_add_kernel"][0] == "kernel" and spans["scaled_add_kernel"][1].startswith(b"@triton.autotune")
    assert spans["_store_row"][1].startswith(b"@triton.jit\ndef _store_row(")  # the helper it calls
    assert spans["launch:scaled_add_kernel"] == (
        "launcher",
        data[data.index(b"scaled_add_kernel[") : data.index(b"_ALPHA)") + 7],
    )
    assert [i.dtype for i in loaded.instantiations] == ["bf16", "fp16", "fp32"]
    assert loaded.build.cuda_files == []


def test_a_tensor_without_a_shape_is_one_line_with_the_fix(demo, tmp_path):
    _, index, ops = demo
    with pytest.raises(ConfigError) as err:
        triton_tasks.write_task(index, ops["demo.no_shape"], tmp_path / "work")
    assert "\n" not in err.value.message and "tensor x: no .shape read" in err.value.message  # x: passed to x_ptr
    assert "extract/curated/" in err.value.fix


def test_a_parameter_of_unknown_type_is_one_line_with_the_fix(demo, tmp_path):
    _, index, ops = demo
    with pytest.raises(ConfigError) as err:
        triton_tasks.write_task(index, ops["demo.untyped"], tmp_path / "work")
    assert err.value.message.endswith(
        "parameter eps: type unknown (no annotation, no literal default, not passed to a kernel pointer)"
    )
    assert "\n" not in err.value.message and "extract/curated/" in err.value.fix


def test_an_op_without_a_wrapper_is_one_line_with_the_fix(demo, tmp_path):
    _, index, ops = demo
    with pytest.raises(ConfigError) as err:
        triton_tasks.write_task(index, ops["demo.bare_kernel"], tmp_path / "work")
    assert err.value.message.startswith("demo.bare_kernel: target bare_kernel is the @triton.jit kernel itself")
    assert "\n" not in err.value.message and err.value.fix
    assert triton_tasks.reason_group(err.value.message) == "registered target is the kernel itself (no wrapper)"


def test_a_wrapper_file_that_does_not_parse_is_one_line_with_the_fix(demo, tmp_path):
    _, index, ops = demo
    broken = ops["demo.scaled_add"].model_copy(update={"module": "kernels/ops/demo/broken.py", "id": "demo.broken"})
    with pytest.raises(ConfigError) as err:
        triton_tasks.write_task(index, broken, tmp_path / "work")
    assert err.value.message.startswith("demo.broken: kernels/ops/demo/broken.py does not parse: line 6")
    assert "\n" not in err.value.message and "SGLANG_SRC" in err.value.fix


def test_file_reasons(demo):
    _, index, ops = demo
    results = {op_id: "" if op_id == "demo.scaled_add" else "x" for op_id in ops}
    reasons = triton_tasks.file_reasons(index, results)
    assert reasons["kernels/ops/demo/broken.py"] == "file does not parse"
    assert "kernels/ops/demo/scale.py" not in reasons  # it yields a task
    assert reasons["kernels/ops/demo/bare.py"].startswith("its ops yield no task")


def test_a_version_1_task_reads_as_cuda_and_language_needs_its_facts(demo, tmp_path):
    _, index, ops = demo
    task = triton_tasks.write_task(index, ops["demo.scaled_add"], tmp_path / "work")
    data = json.loads(task.model_dump_json())
    old = {k: v for k, v in data.items() if k not in ("language", "triton")} | {"schema_version": 1}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old), encoding="utf-8")
    assert read_record(Task, path).language == "cuda"
    path.write_text(json.dumps(data | {"schema_version": 1}), encoding="utf-8")
    with pytest.raises(StaleRecordError, match="schema_version 1 task is CUDA"):
        read_record(Task, path)
    path.write_text(json.dumps(data | {"triton": None}), encoding="utf-8")
    with pytest.raises(StaleRecordError, match="exactly when its language is triton"):
        read_record(Task, path)
    path.write_text(json.dumps(data | {"schema_version": 2}), encoding="utf-8")
    assert read_record(Task, path) == task.model_copy(update={"schema_version": 2})
    path.write_text(json.dumps(data | {"schema_version": 4}), encoding="utf-8")
    with pytest.raises(StaleRecordError, match="reads 1 or 2 or 3"):
        read_record(Task, path)


# --------------------------------------------------------------------------- the real wheel


@pytest.mark.wheel
def test_merge_state_triton_task(sglang_source, tmp_path):
    root = pathlib.Path(__file__).resolve().parent.parent
    index, _ = triton_ops.scan_tree(sglang_source, root / "work" / "cache")
    op = next(o for o in index.ops if o.id == "attention.merge_state_triton")
    task = triton_tasks.write_task(index, op, tmp_path / "work")
    assert task.contract.origin == "curated"
    args = _args(task)
    assert args["prefix_lse"] == (["num_tokens", "num_heads"], "float32", "input")
    assert args["output"] == (["num_tokens", "num_heads", "head_size"], "T", "output")
    # exactly the models whose SGLang model file calls it: DeepSeek-V3's MLA merges its chunked-prefix
    # passes with it (deepseek_v2.py); Llama's flashinfer backend merges with flashinfer's own kernel
    assert ("DeepSeek-V3", 4096, 128, 128) in {
        (c.model, c.tokens, c.sizes["num_heads"], c.sizes["head_size"]) for c in task.shapes
    }
    assert "Llama-3.1-8B" not in {c.model for c in task.shapes}
    assert any("DeepSeek-V3 (srt/models/deepseek_v2.py)" in n for n in task.notes)
    assert [s.name for s in task.editable] == ["merge_state_kernel", "launch:merge_state_kernel"]
    assert task.entry_signature.reason == ""


@pytest.mark.wheel
def test_a_triton_op_takes_the_shapes_of_the_models_that_call_it_and_tests_kernels_are_no_ops(
    triton_wheel_index, tmp_path
):
    ops = {o.id: o for o in triton_wheel_index.ops}
    # mHC is DeepSeek-V4's: before the model-to-op map every catalog model whose widths fit gave shapes
    task = triton_tasks.write_task(triton_wheel_index, ops["layernorm.hc_broadcast"], tmp_path / "work")
    assert {c.model for c in task.shapes} == {"DeepSeek-V4"}
    # a wrapper no model file names falls back to every LLM of the catalog whose widths fit, and says so
    chosen, why = triton_tasks.catalog_models(
        triton_wheel_index, ops["speculative.build_qo_indptr_triton"], shapes.load_catalog()
    )
    assert "fallback" in why and {m.family for m in chosen} == {"llm"}
    tests = [o for o in triton_wheel_index.ops if o.module.startswith("test/")]
    assert tests and all("reference kernel of SGLang's tests" in o.reason for o in tests)


def test_nvcc_refuses_a_triton_task_with_the_reason(demo, tmp_path):
    from pipeline.build import build

    _, index, ops = demo
    task = triton_tasks.write_task(index, ops["demo.scaled_add"], tmp_path / "work")
    report = build(tmp_path / "work" / "tasks" / task.op_id, task, task.instantiations, cache_root=tmp_path / "b")
    assert not report.ok and "is a triton task: nvcc builds CUDA tasks only" in report.stderr


@pytest.mark.wheel
@pytest.mark.parametrize("op_id", GOLDEN_TASKS)
def test_golden_tasks(triton_wheel_index, op_id, tmp_path):
    op = next(o for o in triton_wheel_index.ops if o.id == op_id)
    task = triton_tasks.write_task(triton_wheel_index, op, tmp_path / "work")
    actual = {
        "op": task.op_id,
        "language": task.language,
        "wrapper": task.triton.wrapper,
        "entry_points": task.entry_points,
        "origin": task.contract.origin,
        "args": [
            {k: v for k, v in (a.tensor or a.scalar).model_dump().items() if v is not None} | {"kind": a.kind}
            for a in task.contract.args
        ],
        "symbols": task.contract.symbols,
        "unresolved": len(task.contract.unresolved),
        "shapes": len(task.shapes),
        "first_shape": [task.shapes[0].model, task.shapes[0].sizes],
        "dtypes": [i.dtype for i in task.instantiations],
        "editable": [[s.name, s.kind, s.file, s.start_byte, s.end_byte] for s in task.editable],
    }
    golden = GOLDEN / f"{op_id}.json"
    assert_golden(golden, actual)


@pytest.mark.wheel
def test_kernelsmith_extract_lists_and_writes_triton_ops(monkeypatch, sglang_source, tmp_path, capsys):
    from cli.main import main

    root = pathlib.Path(__file__).resolve().parent.parent
    monkeypatch.setenv("KERNELSMITH_SGLANG__CACHE_DIR", str(root / "work" / "cache"))
    if sglang_source.kind != "wheel":
        monkeypatch.setenv("SGLANG_SRC", sglang_source.root)
    work = tmp_path / "work"
    assert main(["extract", "--work-dir", str(work), "--list"]) == 0
    listed = capsys.readouterr().out
    assert "activation.silu_and_mul" in listed and "attention.merge_state_triton" in listed
    assert "moe.shuffle_weighted_sum " in listed  # the CUDA op keeps its id ...
    assert "moe.shuffle_weighted_sum.shuffle_weighted_sum" in listed  # ... and the Triton one takes its module's
    ops = ["attention.merge_state_triton", "activation.silu_and_mul"]
    assert main(["extract", "--work-dir", str(work), "--no-compile", "--ops", *ops]) == 0
    out = capsys.readouterr().out
    merge_state = load_task(work / "tasks" / "attention.merge_state_triton")
    written = f"attention.merge_state_triton: triton task written ({len(merge_state.shapes)} shapes), compile check"
    assert f"{written} skipped" in out and merge_state.language == "triton"
    assert load_task(work / "tasks" / "activation.silu_and_mul").language == "cuda"
    assert main(["extract", "--work-dir", str(work), "--no-compile", "--ops", "attention.merge_state_tritn"]) != 0
    err = capsys.readouterr().err
    assert "closest: attention.merge_state_triton" in err and len(err.strip().splitlines()) <= 2


def test_a_starred_launch_argument_fills_one_parameter_per_item_and_an_unknown_length_binds_no_further():
    from extract.triton_scan import positional_binding

    names = ["x", "x_stride_0", "x_stride_1", "out", "USE_GDC"]
    args = ["x", "*x.stride()", "out", "**pdl_kwargs"]
    known = positional_binding(names, args, lambda expr: 2 if expr == "x.stride()" else None)
    assert known == [
        ("x", "x", None),
        ("x_stride_0", "x.stride()", 0),
        ("x_stride_1", "x.stride()", 1),
        ("out", "out", None),
    ]
    # before the star was kept, `out` was bound to x_stride_1: a wrong parameter, never a missing one
    assert positional_binding(names, args) == [("x", "x", None)]
