"""extract.triton_scan and extract.triton_ops: on a small tree written for the tests, then on the real wheel.

Regenerate the golden files with ``UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_triton_scan.py``
after checking the diff by eye. They hold our facts about SGLang's Triton ops (names, spans,
lines, counts, parameter flags), never its source text.
"""

from __future__ import annotations

import pathlib

import pytest
from golden import assert_golden
from triton_demo import demo_tree

from extract import triton_ops
from extract.triton_scan import MARKER, scan_file, triton_files

GOLDEN = pathlib.Path(__file__).parent / "golden" / "triton"
#: merge_state_triton (the Astra paper's third kernel), then ops with real-model shapes
GOLDEN_OPS = (
    "attention.merge_state_triton",
    "kvcache.reshape_and_cache_flash",
    "attention.merge_suffix_attention_in_place",
    "layernorm.rmsnorm_fp32",
    "attention.dcp_lse_combine_triton",
)


def _scan(tmp_path: pathlib.Path):
    source = demo_tree(tmp_path)
    root = pathlib.Path(source.root)
    rel = "kernels/ops/demo/scale.py"
    return root, scan_file(rel, (root / rel).read_bytes())


def test_kernels_spans_constexprs_and_autotune(tmp_path):
    root, file = _scan(tmp_path)
    data = (root / file.module).read_bytes()
    kernels = {k.name: k for k in file.kernels}
    assert list(kernels) == ["_store_row", "scaled_add_kernel"]
    kernel = kernels["scaled_add_kernel"]
    text = data[kernel.start_byte : kernel.end_byte]
    assert text.startswith(b"@triton.autotune(") and text.rstrip().endswith(
        b"tl.store(acc_ptr + offs, acc + x, mask=mask)"
    )
    assert data.count(b"\n", 0, kernel.start_byte) + 1 == kernel.line
    assert [p.name for p in kernel.params if p.constexpr] == ["BLOCK"]
    assert [(c.kwargs, c.num_warps, c.num_stages) for c in kernel.autotune] == [
        ({"BLOCK": 64}, 2, 1),
        ({"BLOCK": 128}, 4, 2),
    ]
    assert kernel.autotune_key == ["n_cols"]
    assert kernel.decorators == ["triton.autotune", "triton.jit"]


def test_stores_follow_locals_and_jit_helpers(tmp_path):
    _, file = _scan(tmp_path)
    kernel = next(k for k in file.kernels if k.name == "scaled_add_kernel")
    # out_ptr only through _store_row; n_cols offsets the pointers (what a pointer derives from)
    assert kernel.stores == ["out_ptr", "acc_ptr", "n_cols"]
    assert kernel.loads == ["x_ptr", "y_ptr", "acc_ptr", "n_cols"]
    assert kernel.calls == ["_store_row"]


def test_launch_sites(tmp_path):
    root, file = _scan(tmp_path)
    data = (root / file.module).read_bytes()
    launch = next(x for x in file.launches if x.function == "scaled_add")
    assert data[launch.start_byte : launch.end_byte].startswith(b"scaled_add_kernel[(num_tokens,)](")
    assert data[launch.start_byte : launch.end_byte].endswith(b")")
    assert launch.grid == "(num_tokens,)" and len(launch.args) == 6
    assert file.functions == ["scaled_add", "offsets", "untyped", "no_shape", "gated", "pairs"]


def test_a_file_that_does_not_parse_is_a_parse_error(tmp_path):
    source = demo_tree(tmp_path)
    rel = "kernels/ops/demo/broken.py"
    file = scan_file(rel, (pathlib.Path(source.root) / rel).read_bytes())
    assert file.parse_error is not None and file.parse_error.startswith("line 6: ")
    assert file.kernels == []


def test_registrations_unroll_loops_and_keep_triton_only(tmp_path):
    source = demo_tree(tmp_path)
    rel = "kernels/ops/demo/__init__.py"
    specs = triton_ops.read_specs(rel, (pathlib.Path(source.root) / rel).read_bytes())
    assert [(s.op, s.module, s.function) for s in specs] == [
        ("demo.scaled_add", "sglang.kernels.ops.demo.scale", "scaled_add"),
        ("demo.bare_kernel", "sglang.kernels.ops.demo.bare", "bare_kernel"),
    ]


def test_ops_and_their_reasons(tmp_path):
    source = demo_tree(tmp_path)
    index, cached = triton_ops.scan_tree(source, tmp_path / "cache")
    assert not cached
    ops = {op.id: op for op in index.ops}
    assert ops["demo.scaled_add"].reason == "" and ops["demo.scaled_add"].registered_as == "demo.scaled_add"
    assert ops["demo.scaled_add"].kernels == ["kernels/ops/demo/scale.py:scaled_add_kernel"]
    assert "is the @triton.jit kernel itself" in ops["demo.bare_kernel"].reason
    assert "demo.no_shape" in ops  # a public wrapper nobody registered
    assert next(f for f in index.files if f.module.endswith("broken.py")).parse_error
    again, cached = triton_ops.scan_tree(source, tmp_path / "cache")
    assert cached and again.ops == index.ops


# --------------------------------------------------------------------------- the real wheel


@pytest.mark.wheel
def test_every_file_with_the_marker_is_scanned(sglang_source, triton_wheel_index):
    root = pathlib.Path(sglang_source.root)
    marked = triton_files(root)
    assert len(marked) == 408  # sglang 0.5.23 (issue 19)
    scanned = {f.module for f in triton_wheel_index.files}
    assert set(marked) <= scanned
    assert not [f.module for f in triton_wheel_index.files if f.parse_error]
    # every kernel the scan found carries the marker or a bare @jit in its own span
    kernels = sum(len(f.kernels) for f in triton_wheel_index.files)
    text_count = sum((root / rel).read_text(encoding="utf-8").count(MARKER) for rel in marked)
    assert kernels >= 1000 and kernels <= text_count


@pytest.mark.wheel
@pytest.mark.parametrize("op_id", GOLDEN_OPS)
def test_golden_ops(triton_wheel_index, op_id):
    op = next(o for o in triton_wheel_index.ops if o.id == op_id)
    files = {f.module: f for f in triton_wheel_index.files}
    kernels = {f"{f.module}:{k.name}": k for f in triton_wheel_index.files for k in f.kernels}
    launches = [x for x in files[op.module].launches if x.function == op.function]
    actual = {
        "op": op.id,
        "module": op.module,
        "function": op.function,
        "registered_as": op.registered_as,
        "reason": op.reason,
        "kernels": [
            {
                "name": k,
                "span": [kernels[k].start_byte, kernels[k].end_byte],
                "line": kernels[k].line,
                "constexprs": [p.name for p in kernels[k].params if p.constexpr],
                "params": len(kernels[k].params),
                "autotune_configs": len(kernels[k].autotune),
                "stores": kernels[k].stores,
                "loads": kernels[k].loads,
            }
            for k in op.kernels
        ],
        "launches": [
            {
                "kernel": x.kernel,
                "line": x.line,
                "span": [x.start_byte, x.end_byte],
                "args": len(x.args),
                "kwargs": sorted(x.kwargs),
            }
            for x in launches
        ],
    }
    golden = GOLDEN / f"{op_id}.json"
    assert_golden(golden, actual)


def test_ids_a_cuda_op_has_are_renamed_after_the_module(tmp_path):
    index, _ = triton_ops.scan_tree(demo_tree(tmp_path), None)
    renamed = triton_ops.avoid(index, ["demo.scaled_add", "demo.offsets", "demo.scale.offsets"])
    ids = [op.id for op in renamed.ops]
    assert "demo.scale.scaled_add" in ids and "demo.scaled_add" not in ids
    assert "demo.scale.offsets#2" in ids  # the stem form is taken too
    assert len(set(ids)) == len(ids)
