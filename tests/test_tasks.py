"""extract.tasks: the three default ops written as standalone task folders from the real sources."""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from contract import layout
from extract import pyops, tasks
from extract.command import build_index
from extract.splice import apply_regions
from pipeline.errors import StaleRecordError
from pipeline.records import Task

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_OPS = ("activation.silu_and_mul", "layernorm.fused_add_rmsnorm", "layernorm.rmsnorm")

pytestmark = pytest.mark.wheel


@pytest.fixture(scope="module")
def index(sglang_source):
    return build_index(sglang_source, ROOT / "work" / "cache")[0]


@pytest.fixture(scope="module")
def written(index, tmp_path_factory):
    work = tmp_path_factory.mktemp("work")
    program = pyops.Program(pathlib.Path(index.source.root))
    out = {}
    for op_id in DEFAULT_OPS:
        op = next(o for o in index.ops if o.id == op_id)
        out[op_id] = tasks.write_task(index, op, work, program=program)
    return work, out


@pytest.mark.parametrize("op_id", DEFAULT_OPS)
def test_task_json_validates_and_src_matches(written, op_id):
    work, made = written
    folder = layout.task_dir(work, op_id)
    loaded = layout.load_task(folder)
    assert loaded == made[op_id]
    assert Task.model_validate(json.loads((folder / "task.json").read_text())) == loaded
    on_disk = sorted(p.relative_to(folder / "src").as_posix() for p in (folder / "src").rglob("*") if p.is_file())
    assert on_disk == sorted(f.path for f in loaded.files)


@pytest.mark.parametrize("op_id", DEFAULT_OPS)
def test_src_holds_the_whole_include_closure(written, op_id):
    work, made = written
    src = layout.task_dir(work, op_id) / "src"
    task = made[op_id]
    assert task.build.cuda_files[0] in {f.path for f in task.files}
    assert any(f.path.startswith("kernels/jit/include/sgl_kernel/") for f in task.files)
    # every package include of every copied file resolves inside src/ (like nvcc with -I include dirs)
    for f in task.files:
        text = (src / f.path).read_text(errors="replace")
        for quote, name in re.findall(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', text, re.M):
            here = (src / f.path).parent / name
            candidates = ([here] if quote == '"' else []) + [src / "kernels/jit/include" / name]
            if name.startswith("sgl_kernel/") or quote == '"':
                assert any(c.is_file() for c in candidates), (f.path, name)


@pytest.mark.parametrize("op_id", DEFAULT_OPS)
def test_editable_spans_lie_in_the_ops_own_file(written, op_id, sglang_source):
    work, made = written
    task = made[op_id]
    own = set(task.build.cuda_files)
    assert task.editable
    names = [s.name for s in task.editable]
    assert len(names) == len(set(names))
    root = pathlib.Path(sglang_source.root)
    for span in task.editable:
        assert span.file in own
        data = (root / span.file).read_bytes()
        assert 0 <= span.start_byte < span.end_byte <= len(data)
        assert data[span.end_byte - 1 : span.end_byte] in (b"}", b";")
    kinds = {s.kind for s in task.editable}
    assert {"kernel", "launcher"} <= kinds
    # no overlaps, and splicing every span's own text back reproduces the file
    spans = sorted(task.editable, key=lambda s: (s.file, s.start_byte))
    for a, b in zip(spans, spans[1:]):
        assert a.file != b.file or a.end_byte <= b.start_byte
    files = {f: (root / f).read_bytes() for f in own}
    regions = {s.name: files[s.file][s.start_byte : s.end_byte].decode() for s in task.editable}
    assert apply_regions(files, task.editable, regions) == files


def test_instantiations_and_recipe(written):
    _, made = written
    silu = made["activation.silu_and_mul"]
    assert [i.dtype for i in silu.instantiations] == ["bf16", "fp16", "fp32"]
    assert silu.instantiations[0].module_args == ["activation", "bf16_t", "true"]
    assert ("run_activation", "ActivationKernel<bf16_t, true>::run_activation") in silu.instantiations[0].wrappers
    assert silu.build.cuda_cflags == [
        "-DSGL_CUDA_ARCH=900",
        "-std=c++20",
        "-O3",
        "--expt-relaxed-constexpr",
        "--use_fast_math",
    ]
    assert silu.build.include_dirs == ["kernels/jit/include", "@tvm_ffi", "@dlpack"]
    assert silu.build.cuda_files == ["kernels/jit/csrc/elementwise/activation.cuh"]
    assert silu.contract.origin == "curated" and silu.shapes

    rms = made["layernorm.rmsnorm"]
    assert {i.dtype for i in rms.instantiations} == {"bf16", "fp16"}
    widths = {int(i.template_args[0]): i.wrappers[0][1].split("<")[0] for i in rms.instantiations}
    # one instantiation per catalog width, kernel class as norm.py picks it
    # no SGLang model file calls the JIT rmsnorm by name (Llama's RMSNorm uses sgl_kernel's):
    # every LLM of the catalog, the fallback, said so in the notes
    assert any("fallback" in n and "no SGLang model file" in n for n in rms.notes)
    assert widths == {
        64: "RMSNormWarpKernel",  # Muse-Spark q/k norm (head_dim)
        128: "RMSNormWarpKernel",  # Qwen3 q/k norm (head_dim)
        256: "RMSNormWarpKernel",  # Qwen3-Next q/k norm (head_dim)
        512: "RMSNormHalfKernel",  # DeepSeek kv_a_layernorm
        1024: "RMSNormKernel",  # DeepSeek-V4 q_lora_rank
        1536: "RMSNormKernel",  # DeepSeek q_a_layernorm
        2048: "RMSNormHalfKernel",  # Qwen3-Next hidden
        2560: "RMSNormHalfKernel",  # Qwen4-exp hidden
        4096: "RMSNormHalfKernel",
        5120: "RMSNormHalfKernel",
        7168: "RMSNormHalfKernel",
        8192: "RMSNormHalfKernel",
    }
    assert {c.sizes["hidden_size"] for c in rms.shapes} == set(widths)
    assert rms.build.cuda_cflags == ["-DSGL_CUDA_ARCH=900", "-std=c++20", "-O3", "--expt-relaxed-constexpr"]
    assert any("fp32" in n for n in rms.notes)

    fused = made["layernorm.fused_add_rmsnorm"]
    assert [(i.dtype, i.template_args) for i in fused.instantiations] == [
        ("bf16", ["false", "bf16_t"]),
        ("fp16", ["false", "fp16_t"]),
    ]
    assert all(c.sizes["hidden_size"] <= 8192 for c in fused.shapes)


def test_rerun_is_current_and_tampering_is_caught(written, index):
    work, made = written
    op = next(o for o in index.ops if o.id == "layernorm.fused_add_rmsnorm")
    key = tasks.task_key(index, op, "sm_90a", tasks.DEFAULT_TOKEN_COUNTS)
    assert tasks.is_current(work, op.id, key)
    assert not tasks.is_current(work, op.id, key[::-1])
    folder = layout.task_dir(work, op.id)
    target = folder / "src" / made[op.id].build.cuda_files[0]
    original = target.read_bytes()
    target.write_bytes(original + b"\n// edited\n")
    try:
        with pytest.raises(StaleRecordError, match="differs"):
            layout.load_task(folder)
    finally:
        target.write_bytes(original)
    layout.load_task(folder)


def test_include_closure_fallback_without_index(sglang_source):
    root = pathlib.Path(sglang_source.root)
    closure = tasks.include_closure(root, ["kernels/jit/csrc/elementwise/rmsnorm.cuh"], {})
    assert "kernels/jit/include/sgl_kernel/impl/norm.cuh" in closure
    assert "kernels/jit/include/sgl_kernel/warp.cuh" in closure


def test_a_curated_loader_value_naming_modules_applies_to_those_only():
    """`topk` is fast_topk's index top-k (2048) but a MoE router's experts per token: the
    curated value names the module it is for."""
    from extract.tasks import loader_fallbacks

    fast = loader_fallbacks({}, "kernels/ops/attention/fast_topk.py")
    assert fast["topk"][0] == 2048 and "index_topk" in fast["topk"][1]
    assert "topk" not in loader_fallbacks({}, "kernels/ops/moe/other.py")
    assert loader_fallbacks({}, None)["hc_count"][0] == 4  # an entry naming no module applies everywhere


@pytest.mark.wheel
def test_the_qsa_indexer_ops_are_instantiated_at_their_own_head_dim_not_the_models():
    """With Qwen4-exp in the catalog (2026-12-04) the QSA indexer ops took its attention head_dim
    (256) as their loader's head_dim, which their curated contracts refuse (D = 128, the indexer's):
    no case could be planned. The module-scoped loader value keeps 128."""
    from test_entry import extract_tasks

    from bench.health import prepare

    ops = ("attention.qsa_index_k_compress_store", "attention.qsa_index_q_norm_rope_store")
    root = extract_tasks(ops)
    for op in ops:
        assert {i.sizes.get("D") for i in layout.load_task(root / op).instantiations} == {128}, op
        prep = prepare(root / op)  # what the GPU sweep and tools/plan-tasks.py plan
        assert prep.plan is not None and prep.plan.checks, (op, prep.row.reason)
