"""Which editable regions belong to other ops (optimize.reach), on real SGLang source and small cases."""

from __future__ import annotations

import pathlib

import pytest

from optimize.cuda_spans import definition_spans, region_texts
from optimize.reach import (
    Foreign,
    bare_name,
    confine,
    foreign_code,
    merge_functions,
    outside_text,
    task_wrappers,
)
from optimize.transforms import registry as T

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
    mask = foreign_code(hash_topk, ["MaskKernel::run"]).regions
    hashed = foreign_code(hash_topk, ["HashTopKKernel<act_sqrt_softplus, true>::run"]).regions
    assert mask == {"HashTopKKernel", "moe_hash_topk_fused"}
    assert hashed == {"MaskKernel", "mask_topk_ids_padded_region"}
    assert "act_sqrt_softplus" not in mask | hashed, "a device function is never foreign"


def test_a_transform_confined_to_the_op_edits_only_what_the_op_runs(hash_topk):
    moved = T.apply("pdl_early_trigger", hash_topk, {})
    assert moved["moe_hash_topk_fused"] != hash_topk["moe_hash_topk_fused"], "unconfined: both kernels change"
    kept = confine(hash_topk, moved, foreign_code(hash_topk, ["MaskKernel::run"]))
    changed = {name for name in kept if kept[name] != hash_topk[name]}
    assert changed == {"mask_topk_ids_padded_region"}


def test_nothing_is_foreign_when_no_launch_matches_an_export(hash_topk):
    assert not foreign_code(hash_topk, ["some_function_pointer_launch"])
    assert not foreign_code(hash_topk, [])


KERNEL_A = "__global__ void kernel_a(float* x) { x[threadIdx.x] = 1.0f; }"
KERNEL_B = "__global__ void kernel_b(float* x) { x[threadIdx.x] = 2.0f; }"


def test_a_helper_launcher_our_launcher_calls_is_ours():
    regions = {
        "kernel_a": KERNEL_A,
        "kernel_b": KERNEL_B,
        "launch_b": "void launch_b(float* x, int n) { LaunchKernel(n, 128, dev)(kernel_b, x); }",
        "OpA": "struct OpA { static void run(float* x, int n) { LaunchKernel(n, 128, dev)(kernel_a, x); launch_b(x, n); } };",
    }
    assert not foreign_code(regions, ["OpA::run"])
    regions["OpA"] = "struct OpA { static void run(float* x, int n) { LaunchKernel(n, 128, dev)(kernel_a, x); } };"
    assert foreign_code(regions, ["OpA::run"]).regions == {"launch_b", "kernel_b"}


@pytest.mark.wheel
def test_integrate_refuses_a_candidate_from_before_the_confinement_that_edits_another_ops_kernel(
    tmp_path, sglang_source
):
    """The H200 sweep's mask_topk_ids candidate (made before 4ffcd35) moved moe.hash_topk's trigger too."""
    from cli.main import main
    from contract.layout import load_task
    from integrate.accepted import Accepted, spans_by_name
    from integrate.patch import PatchError, _refuse_foreign_edits
    from pipeline.run_records import Candidate

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
        _refuse_foreign_edits(accepted(moved), spans_by_name(task), root)
    confined = confine(base, moved, foreign_code(base, task_wrappers(task)))
    _refuse_foreign_edits(accepted(confined), spans_by_name(task), root)  # its own kernel's edit passes


# --------------------------------------------------------------------------- methods of one launcher struct

NGRAM = "kernels/jit/csrc/speculative/ngram_embedding.cuh"
NGRAM_WRAPPERS = [
    ("compute_n_gram_ids", "&NgramEmbeddingKernel::compute_n_gram_ids"),
    ("compute_n_gram_ids_decode", "&NgramEmbeddingKernel::compute_n_gram_ids_decode"),
    ("update_token_table", "&NgramEmbeddingKernel::update_token_table"),
    ("update_token_table_decode", "&NgramEmbeddingKernel::update_token_table_decode"),
]


@pytest.fixture(scope="module")
def ngram(sglang_source):
    data = (pathlib.Path(sglang_source.root) / NGRAM).read_bytes()
    return region_texts({NGRAM: data}, definition_spans(NGRAM, data))


def pdl_member(regions, blocks_per_sm):
    """Session 11's accepted members for the two compute ops: PDL for small grids, trigger after the wait."""
    return T.apply("pdl_early_trigger", T.apply("enable_pdl", regions, {"blocks_per_sm": blocks_per_sm}), {})


def test_an_op_owns_only_its_own_method_of_a_launcher_struct_four_ops_share(ngram):
    """ngram_embedding's module exports four ops' wrappers from one struct. Session 11's PDL candidate for
    compute_n_gram_ids also changed the other three launches, which none of its checks ran."""
    own = foreign_code(ngram, ["&NgramEmbeddingKernel::compute_n_gram_ids"])
    assert own.regions == {"ComputeNGramIdsDecodeKernel", "UpdateTokenTableKernel", "UpdateTokenTableDecodeKernel"}
    assert own.functions == {
        "NgramEmbeddingKernel": {
            "NgramEmbeddingKernel::compute_n_gram_ids_decode",
            "NgramEmbeddingKernel::update_token_table",
            "NgramEmbeddingKernel::update_token_table_decode",
        }
    }
    moved = pdl_member(ngram, 2112)
    assert len(own.touched(ngram, moved)) == 6, "unconfined, the member edits every op's kernel and launch"
    kept = confine(ngram, moved, own)
    assert {n for n in kept if kept[n] != ngram[n]} == {"ComputeNGramIdsKernel", "NgramEmbeddingKernel"}
    assert own.touched(ngram, kept) == []
    assert kept["NgramEmbeddingKernel"].count("enable_pdl") == ngram["NgramEmbeddingKernel"].count("enable_pdl") + 1


def test_the_twins_confined_edits_of_one_struct_merge_and_conflicting_ones_do_not(ngram):
    """Integrate's way to keep both compute ops (issue 14: the twins were accepted, one was left out)."""
    base = ngram["NgramEmbeddingKernel"]
    texts = []
    for export, blocks_per_sm in (("compute_n_gram_ids", 16), ("compute_n_gram_ids_decode", 1)):
        own = foreign_code(ngram, [f"NgramEmbeddingKernel::{export}"])
        texts.append(confine(ngram, pdl_member(ngram, blocks_per_sm), own)["NgramEmbeddingKernel"])
    merged = merge_functions("NgramEmbeddingKernel", base, texts)
    assert merged is not None and "<= 16ull * sm_count" in merged and "<= 1ull * sm_count" in merged
    assert merged.count("enable_pdl") == base.count("enable_pdl") + 2
    assert merge_functions("NgramEmbeddingKernel", base, [texts[0], texts[0]]) == texts[0]
    # the same method changed two ways, or text between methods changed, does not combine
    unconfined = pdl_member(ngram, 1)["NgramEmbeddingKernel"]
    assert merge_functions("NgramEmbeddingKernel", base, [texts[0], unconfined]) is None
    between = texts[1].replace("struct NgramEmbeddingKernel {", "struct NgramEmbeddingKernel {  // moved", 1)
    assert between != texts[1], "the struct head changed in SGLang: update the test's edit"
    assert merge_functions("NgramEmbeddingKernel", base, [texts[0], between]) is None


def test_a_launcher_only_other_ops_methods_call_is_theirs_and_their_kernel_too(sglang_source):
    """activation.cuh: relu2 runs run_unary_activation (act_kernel); silu_and_mul runs run_activation, which
    calls the struct's launch helper (act_and_mul_kernel). Issue 14's first H200 run spent a round of
    silu_and_mul on launch_bounds for act_kernel, which that op never launches."""
    path = "kernels/jit/csrc/elementwise/activation.cuh"
    data = (pathlib.Path(sglang_source.root) / path).read_bytes()
    regions = region_texts({path: data}, definition_spans(path, data))
    silu = foreign_code(regions, ["ActivationKernel<bf16_t, true>::run_activation"])
    relu2 = foreign_code(regions, ["ActivationKernel<bf16_t, true>::run_unary_activation"])
    assert "act_kernel" in silu.regions and "act_and_mul_kernel" not in silu.regions
    assert "act_and_mul_kernel" in relu2.regions and "act_kernel" not in relu2.regions
    assert "ActivationKernel::launch" not in silu.functions["ActivationKernel"], "a helper the entry calls is ours"
    assert "ActivationKernel::launch" in relu2.functions["ActivationKernel"]


def test_a_shared_region_whose_foreign_method_cannot_be_matched_goes_back_whole():
    base = {
        "k": KERNEL_A,
        "S": "struct S { static void a(float* x) { LaunchKernel(1, 32, d)(k, x); } "
        "static void b(float* x) { LaunchKernel(2, 32, d)(k, x); } };",
    }
    own = foreign_code(base, ["S::a"])
    assert own.functions == {"S": {"S::b"}} and not own.regions
    both = {"k": KERNEL_A, "S": base["S"].replace("(1, 32", "(1, 64").replace("(2, 32", "(2, 64")}
    assert confine(base, both, own)["S"] == base["S"].replace("(1, 32", "(1, 64"), "b's edit is given back"
    dropped = {"k": KERNEL_A, "S": "struct S { static void a(float* x) { LaunchKernel(1, 64, d)(k, x); } };"}
    assert confine(base, dropped, own)["S"] == base["S"], "b removed: nothing of the edit is kept"
    assert own.touched(base, dropped) == ["S: S::b"]
    assert Foreign().names() == [] and not Foreign()


class _Task:
    def __init__(self, entry_points, wrappers):
        self.entry_points = entry_points
        self.instantiations = [type("I", (), {"wrappers": wrappers})()]


def test_an_op_s_launchers_are_the_wrappers_its_entry_points_export():
    assert task_wrappers(_Task(["compute_n_gram_ids"], NGRAM_WRAPPERS)) == ["&NgramEmbeddingKernel::compute_n_gram_ids"]
    assert len(task_wrappers(_Task(["run"], NGRAM_WRAPPERS))) == 4, "no export named so: every wrapper (unsure)"


def test_a_launcher_only_a_macro_outside_the_regions_calls_stays_the_ops(sglang_source):
    """moe_topk_softmax.cuh: topkGatingSoftmaxKernelLauncher (which topk_softmax calls) reaches
    topkGatingSoftmaxLauncherHelper only through the file-level `#define LAUNCH_SOFTMAX(...)`, which no region holds. Who expands it is not known, so
    the helper and its kernel stay editable; by region text alone they would look like another op's."""
    path = "kernels/jit/csrc/moe/moe_topk_softmax.cuh"
    data = (pathlib.Path(sglang_source.root) / path).read_bytes()
    spans = definition_spans(path, data)
    regions = region_texts({path: data}, spans)
    blind = foreign_code(regions, ["topkGatingSoftmaxKernelLauncher<bf16_t>"])
    assert {"topkGatingSoftmaxLauncherHelper", "topkGatingSoftmax"} <= blind.regions
    outside = outside_text({path: data, "kernels/jit/include/sgl_kernel/utils.cuh": b"void launch();"}, spans)
    assert "#define LAUNCH_SOFTMAX" in outside and "void launch()" not in outside, "only the spans' files"
    assert not foreign_code(regions, ["topkGatingSoftmaxKernelLauncher<bf16_t>"], outside)


def test_a_method_is_reached_by_its_struct_s_name_not_by_a_namesake():
    """Two ops' launcher structs both name their method `run` (silu_and_mul's post-quant file has three):
    `A::run` in our code reaches A's, never B's."""
    regions = {
        "ka": KERNEL_A,
        "kb": KERNEL_B,
        "A": "struct A { static void run(float* x) { LaunchKernel(1, 32, d)(kernel_a, x); } };",
        "B": "struct B { static void run(float* x) { LaunchKernel(1, 32, d)(kernel_b, x); } };",
        "go": "void go(float* x) { A::run(x); }",
    }
    assert foreign_code(regions, ["go"]).regions == {"B", "kb"}
    regions["go"] = "void go(float* x) { A::run(x); B::template run<2>(x); }"
    assert not foreign_code(regions, ["go"])


def test_a_shared_region_with_a_definition_inside_another_goes_back_whole():
    """A method holding a local struct's method cannot be cut into disjoint definitions: giving a foreign one
    back by byte offsets would splice inside a span already replaced, so the region is given back whole."""
    base = {
        "k": KERNEL_A,
        "S": "struct S { static void a(float* x) { LaunchKernel(1, 32, d)(k, x); } "
        "static void b(float* x) { struct L { void f() {} }; LaunchKernel(2, 32, d)(k, x); } };",
    }
    own = foreign_code(base, ["S::a"])
    assert "S::b" in own.functions["S"]
    both = {"k": KERNEL_A, "S": base["S"].replace("(1, 32", "(1, 64").replace("(2, 32", "(2, 64")}
    assert confine(base, both, own)["S"] == base["S"]
    assert merge_functions("S", base["S"], [both["S"]]) is None
