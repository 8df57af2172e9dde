"""Which editable regions belong to other ops (optimize.reach), on real SGLang source and small cases."""

from __future__ import annotations

import pathlib

import pytest

from optimize import transforms as T
from optimize.cuda_spans import definition_spans, region_texts
from optimize.reach import bare_name, confine, foreign_regions

HASH_TOPK = "kernels/jit/csrc/deepseek_v4/hash_topk.cuh"


@pytest.fixture(scope="module")
def hash_topk(sglang_source):
    data = (pathlib.Path(sglang_source.root) / HASH_TOPK).read_bytes()
    return region_texts({HASH_TOPK: data}, definition_spans(HASH_TOPK, data))


def test_the_template_arguments_and_address_of_a_wrapper_are_dropped():
    assert bare_name("&TransferMambaKernel::run_lf_pf") == "TransferMambaKernel::run_lf_pf"
    assert bare_name("HFRMSNormKernel<2240, true, Foo<int>>::run") == "HFRMSNormKernel::run"


def test_the_mask_op_owns_its_launcher_and_kernel_and_not_the_hash_ops(hash_topk):
    """One file, two ops: moe.mask_topk_ids exports MaskKernel::run, moe.hash_topk HashTopKKernel::run.
    On the H200 sweep (2026-12-02) mask_topk_ids's early-trigger candidate also moved the trigger
    of the hash op's kernel, which no check of mask_topk_ids runs."""
    mask = foreign_regions(hash_topk, ["MaskKernel::run"])
    hashed = foreign_regions(hash_topk, ["HashTopKKernel<act_sqrt_softplus, true>::run"])
    assert mask == {"HashTopKKernel", "moe_hash_topk_fused"}
    assert hashed == {"MaskKernel", "mask_topk_ids_padded_region"}
    assert "act_sqrt_softplus" not in mask | hashed, "a device function is never foreign"


def test_a_transform_confined_to_the_op_edits_only_what_the_op_runs(hash_topk):
    moved = T.apply("pdl_early_trigger", hash_topk, {})
    assert moved["moe_hash_topk_fused"] != hash_topk["moe_hash_topk_fused"], "unconfined: both kernels change"
    kept = confine(hash_topk, moved, foreign_regions(hash_topk, ["MaskKernel::run"]))
    changed = {name for name in kept if kept[name] != hash_topk[name]}
    assert changed == {"mask_topk_ids_padded_region"}


def test_nothing_is_foreign_when_no_launch_matches_an_export(hash_topk):
    assert foreign_regions(hash_topk, ["some_function_pointer_launch"]) == frozenset()
    assert foreign_regions(hash_topk, []) == frozenset()


KERNEL_A = "__global__ void kernel_a(float* x) { x[threadIdx.x] = 1.0f; }"
KERNEL_B = "__global__ void kernel_b(float* x) { x[threadIdx.x] = 2.0f; }"


def test_a_helper_launcher_our_launcher_calls_is_ours():
    regions = {
        "kernel_a": KERNEL_A,
        "kernel_b": KERNEL_B,
        "launch_b": "void launch_b(float* x, int n) { LaunchKernel(n, 128, dev)(kernel_b, x); }",
        "OpA": "struct OpA { static void run(float* x, int n) { LaunchKernel(n, 128, dev)(kernel_a, x); launch_b(x, n); } };",
    }
    assert foreign_regions(regions, ["OpA::run"]) == frozenset()
    regions["OpA"] = "struct OpA { static void run(float* x, int n) { LaunchKernel(n, 128, dev)(kernel_a, x); } };"
    assert foreign_regions(regions, ["OpA::run"]) == {"launch_b", "kernel_b"}


@pytest.mark.wheel
def test_integrate_refuses_a_candidate_from_before_the_confinement_that_edits_another_ops_kernel(
    tmp_path, sglang_source
):
    """The H200 sweep's mask_topk_ids candidate (made before 4ffcd35) moved moe.hash_topk's trigger too."""
    from contract.layout import load_task
    from integrate.patch import Accepted, PatchError, _refuse_foreign_edits, _spans_by_name
    from pipeline.cli import main
    from pipeline.records import Candidate

    assert main(["extract", "--no-compile", "--work-dir", str(tmp_path), "--ops", "moe.mask_topk_ids"]) == 0
    task_dir = tmp_path / "tasks" / "moe.mask_topk_ids"
    task = load_task(task_dir)
    root = pathlib.Path(sglang_source.root)
    data = {s.file: (root / s.file).read_bytes() for s in task.editable}
    base = {s.name: data[s.file][s.start_byte : s.end_byte].decode() for s in task.editable}
    moved = T.apply("pdl_early_trigger", base, {})

    def accepted(regions):
        cand = Candidate(op_id=task.op_id, id="c1", parent=None, regions=regions)
        return Accepted(op_id=task.op_id, candidate=cand, evaluation=None, task=task, task_dir=task_dir)

    with pytest.raises(PatchError, match="moe_hash_topk_fused, which another op's"):
        _refuse_foreign_edits(accepted(moved), _spans_by_name(task), root)
    confined = confine(base, moved, foreign_regions(base, [w for i in task.instantiations for _, w in i.wrappers]))
    _refuse_foreign_edits(accepted(confined), _spans_by_name(task), root)  # its own kernel's edit passes
