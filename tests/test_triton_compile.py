"""extract.triton_compile: triton.compile for GPUTarget("cuda", 90, 32) on this CPU machine, no torch, no GPU.

Needs the ``triton`` extra (``make install`` installs it); without it the tests skip with that reason.
"""

from __future__ import annotations

import importlib.util
import pathlib

import pytest
from triton_demo import scaled_add_task

from contract.layout import task_dir
from extract import triton_compile, triton_launch_values, triton_ops, triton_tasks

needs_triton = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="triton is not installed (pip install -e '.[triton]')"
)


@pytest.fixture
def demo_task(tmp_path):
    return scaled_add_task(tmp_path)


def test_kernel_module_keeps_triton_and_drops_the_rest():
    text = triton_compile.kernel_module(
        b"import torch\nimport triton\nimport triton.language as tl\nfrom x import y\n_K = 4\n_T = torch.float32\n"
        b"@triton.autotune(configs=[], key=[])\n@triton.jit\ndef k(p, B: tl.constexpr):\n    pass\n\n"
        b"def wrapper(x):\n    k[(1,)](x, 4)\n"
    )
    assert "import torch\n" not in text and "_T = torch" not in text and "from x" not in text
    assert "def wrapper" not in text
    assert 'torch = _types.ModuleType("torch")' in text  # what a `torch.Tensor` annotation reads
    assert "_K = 4" in text and "@triton.jit\ndef k(p, B: tl.constexpr):" in text and "autotune" not in text


def test_launch_values_from_the_contract(demo_task):
    work, task = demo_task
    import libcst as cst

    src = (task_dir(work, task.op_id) / "src" / task.module).read_bytes()
    module = cst.parse_module(src)
    fn = next(s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == "scaled_add")
    env = {
        **triton_launch_values.module_constants(module),
        **triton_launch_values.case_env(task, task.shapes[0], "bf16"),
    }
    kernel = next(k for k in task.triton.kernels if k.name == "scaled_add_kernel")
    signature, constexprs, options = triton_launch_values.launch_values(fn, task.triton.launches[0], kernel, env)
    assert signature == {
        "x_ptr": "*bf16",
        "y_ptr": "*bf16",
        "out_ptr": "*bf16",
        "acc_ptr": "*bf16",
        "n_cols": "i32",
        "scale": "fp32",
        "BLOCK": "constexpr",
    }
    assert constexprs == {"BLOCK": 64}  # the first autotune config
    assert options == {"num_warps": 2, "num_stages": 1}


@needs_triton
def test_compiles_to_a_cubin_without_a_gpu(demo_task):
    work, task = demo_task
    report = triton_compile.compile_task(task_dir(work, task.op_id), task)
    assert report.ok, report.stderr
    assert [r.kernel for r in report.resources] == ["scaled_add_kernel"]


@needs_triton
def test_a_kernel_triton_refuses_fails_with_the_compiler_error(demo_task):
    work, task = demo_task
    path = task_dir(work, task.op_id) / "src" / task.module
    path.write_text(path.read_text().replace("tl.arange(0, BLOCK)", "tl.arange(0, BLOCK + 1)", 1))
    report = triton_compile.compile_task(task_dir(work, task.op_id), task)
    assert not report.ok
    assert report.stderr.startswith("scaled_add_kernel: ") and "power of 2" in report.stderr


def test_an_unknown_launch_value_names_the_parameter_and_the_fix(demo_task):
    work, task = demo_task
    open_scale = [
        a.model_copy(update={"scalar": a.scalar.model_copy(update={"value": None})}) if a.scalar else a
        for a in task.contract.args
    ]
    task = task.model_copy(
        update={
            "contract": task.contract.model_copy(update={"args": open_scale}),
            "entry_signature": task.entry_signature.model_copy(update={"params": []}),
        }
    )
    report = triton_compile.compile_task(task_dir(work, task.op_id), task)
    assert not report.ok and "scaled_add_kernel.scale" in report.stderr and "extract/curated/" in report.stderr


@needs_triton
@pytest.mark.wheel
@pytest.mark.parametrize(
    ("op_id", "kernel"),
    [
        ("attention.merge_state_triton", "merge_state_kernel"),
        # launched with *input.stride(), *output.stride() and **pdl_kwargs: before the star was kept, the
        # stride tuple landed in one parameter and every later argument one parameter early
        ("moe.moe_sum_reduce_triton", "_moe_sum_reduce_kernel"),
        # hidden_dim and head_dim are bound in both arms of an `if`: the first binding that settles counts
        ("elementwise.fused_sigmoid_mul", "_fused_sigmoid_mul_kernel"),
        # kernel parameters annotated torch.Tensor, which Triton evaluates when the kernel is defined
        ("attention.prepare_trtllm_nope_sparse_metadata", "prepare_trtllm_nope_sparse_metadata_kernel"),
        # HC=hc_mult: an open int scalar named after a size symbol takes the case's size
        ("layernorm.hc_broadcast", "_hc_broadcast_kernel"),
    ],
)
def test_real_triton_ops_compile(sglang_source, tmp_path, op_id, kernel):
    root = pathlib.Path(__file__).resolve().parent.parent
    index, _ = triton_ops.scan_tree(sglang_source, root / "work" / "cache")
    op = next(o for o in index.ops if o.id == op_id)
    task = triton_tasks.write_task(index, op, tmp_path / "work")
    report = triton_compile.compile_task(task_dir(tmp_path / "work", task.op_id), task)
    assert report.ok, report.stderr
    assert [r.kernel for r in report.resources] == [kernel]


@needs_triton
@pytest.mark.wheel
def test_a_launch_with_a_config_dict_compiles_with_its_settled_entries(sglang_source, tmp_path):
    """fused_moe_router_cudacore launches with **config, config = {"BLOCK_SIZE": next_power_of_2(hidden_dim),
    "num_warps": ...a value of the platform...}: BLOCK_SIZE settles, num_warps keeps Triton's default."""
    from contract.completion import complete

    root = pathlib.Path(__file__).resolve().parent.parent
    index, _ = triton_ops.scan_tree(sglang_source, root / "work" / "cache")
    op = next(o for o in index.ops if o.id == "moe.fused_moe_router_cudacore")
    task = triton_tasks.write_task(index, op, tmp_path / "work")
    folder = task_dir(tmp_path / "work", task.op_id)
    task, _ = complete(task, folder)  # moe_softcapping: completion.toml's rule
    report = triton_compile.compile_task(folder, task)
    assert report.ok, report.stderr
