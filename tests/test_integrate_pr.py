"""integrate.pr: PR.md from records, its computed status, and --git-branch on a real git checkout."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest
from test_integrate_patch import ACT, OP, act_span, edited_kernel, make_best, make_task

from integrate.branch import commit_branch
from integrate.errors import GitError
from integrate.patch import build_patch
from integrate.pr import SECTIONS, render, status, title
from integrate.records import (
    CheckCase,
    E2EResult,
    IntegrateReport,
    LayerTiming,
    OneBatchResult,
    OpChange,
    OpCheck,
    PartTiming,
    Patch,
    SanitizerRun,
    TestRun,
)
from pipeline.records import SourceInfo, Span
from pipeline.run_records import Evaluation, Outcome, ShapeTiming


def timings() -> list[ShapeTiming]:
    return [
        ShapeTiming(
            label="Llama-3.1-8B[hidden_size=14336,num_tokens=1]",
            sizes={"num_tokens": 1, "hidden_size": 14336},
            dtype="bf16",
            time_us=2.61,
            spread_pct=1.2,
            gbps=65.9,
            pct_of_copy_bw=1.5,
            time_over_floor=1.31,
            baseline_us=3.05,
            speedup=1.1686,
        ),
        ShapeTiming(
            label="Llama-3.1-8B[hidden_size=14336,num_tokens=4096]",
            sizes={"num_tokens": 4096, "hidden_size": 14336},
            dtype="bf16",
            time_us=131.4,
            spread_pct=0.8,
            gbps=2680.3,
            pct_of_copy_bw=62.3,
            time_over_floor=1.6,
            baseline_us=158.2,
            speedup=None,
        ),
    ]


def fake_patch(tmp_path: pathlib.Path) -> Patch:
    source = SourceInfo(
        kind="wheel", root=str(tmp_path / "sglang-0.5.23" / "sglang"), version="0.5.23", wheel="sglang-0.5.23-x.whl"
    )
    evaluation = Evaluation(
        op_id=OP,
        candidate="c1",
        outcome=Outcome.ok,
        checks_passed=40,
        checks_failed=0,
        bitwise_equal=False,
        max_abs_err=0.0078,
        timings=timings(),
    )
    span = Span(file=ACT, start_byte=100, end_byte=900, name="act_and_mul_kernel", kind="kernel")
    return Patch(
        run="r1",
        source=source,
        layout="wheel",
        prefix="sglang",
        tree_root=str(tmp_path / "sglang-0.5.23"),
        patch_file=str(tmp_path / "sglang.patch"),
        patch_sha256="ab" * 32,
        files=[
            dict(
                path=ACT,
                diff_path=f"sglang/{ACT}",
                sha256_before="0" * 64,
                sha256_after="1" * 64,
                size_before=1000,
                size_after=1040,
                spans=[span],
                ops=[OP],
            )
        ],
        ops=[
            OpChange(
                op_id=OP,
                candidate="c1" * 8,
                task_dir="work/tasks/x",
                spans=[span.name],
                files=[ACT],
                evaluation=evaluation,
                rationale="two rows per warp, 16-byte loads",
            )
        ],
        skipped={"layernorm.rmsnorm": "the best candidate is the baseline: optimize found nothing faster"},
        patched_tree=str(tmp_path / "tree"),
        verified=["spans", "git apply", "patch -p1"],
    )


def full_report(tmp_path: pathlib.Path, *, failing: bool = False) -> IntegrateReport:
    cases = [
        CheckCase(
            label=f"Llama-3.1-8B[hidden_size=14336,num_tokens={n}]",
            sizes={"num_tokens": n, "hidden_size": 14336},
            rows=n,
            width=28672,
            dtype=d,
            seed=7,
            status="fail" if failing and n == 8 else "pass",
            reason="out[3, 5] = 1.5, expected 1.25" if failing and n == 8 else "",
            bitwise_equal=d != "fp32",
            max_abs_err=0.0 if d != "fp32" else 2.4e-7,
            rtol=2**-6,
            atol=1e-37,
            outputs=["out"],
            poisoned=True,
        )
        for n in (1, 8, 4096)
        for d in ("bf16", "fp16", "fp32")
    ]
    check = OpCheck(
        op_id=OP,
        function="sglang.kernels.ops.activation.silu_and_mul",
        ran=True,
        cases=cases,
        passed=sum(c.status == "pass" for c in cases),
        failed=sum(c.status != "pass" for c in cases),
        sanitizer=[SanitizerRun(tool="memcheck", ran=True, errors=0, cases=["Llama-3.1-8B[...] bf16"])],
        command="python -m integrate.sglang_runner --run r1",
    )
    e2e = E2EResult(
        ran=True,
        model="Llama-3.1-8B",
        layers=32,
        recipe="integrate/layers/llama-3.1-8b.toml",
        kv_len=2048,
        attention="torch 2.11.0 scaled_dot_product_attention",
        ops=["input_norm", "qkv_proj", "attention", "silu_and_mul"],
        parts={
            "input_norm": "SGLang layernorm.fused_add_rmsnorm",
            "qkv_proj": "torch linear",
            "attention": "torch attention_decode",
            "silu_and_mul": "SGLang activation.silu_and_mul",
        },
        rows=[
            LayerTiming(
                phase="decode",
                tokens=1,
                kv_len=2048,
                baseline_us=10.0,
                patched_us=9.5,
                baseline_spread_pct=1.0,
                patched_spread_pct=1.1,
                change_pct=-5.0,
                noise_band_pct=0.55,
                verdict="faster",
                baseline_tokens_per_s=3125.0,
                patched_tokens_per_s=3289.5,
                non_gemm=PartTiming(
                    baseline_us=3.0,
                    patched_us=2.5,
                    baseline_spread_pct=20.0,
                    patched_spread_pct=18.0,
                    change_pct=-16.7,
                    share_of_layer_pct=-5.0,
                    verdict="faster",
                ),
            ),
            LayerTiming(
                phase="prefill",
                tokens=4096,
                baseline_us=400.0,
                patched_us=399.0,
                baseline_spread_pct=0.5,
                patched_spread_pct=0.6,
                change_pct=-0.25,
                noise_band_pct=0.3,
                verdict="no change",
                baseline_tokens_per_s=320000.0,
                patched_tokens_per_s=320802.0,
            ),
        ],
        assumption="non-GEMM time only",
        command="kernelsmith integrate --run r1",
        one_batch=OneBatchResult(
            ran=False, reason="the full SGLang runtime does not import here (No module named 'IPython')"
        ),
    )
    tests = [
        TestRun(
            op_id=OP, ran=False, reason="the sources are the sglang 0.5.23 wheel, which has no test/registered/ folder"
        )
    ]
    return IntegrateReport(
        run="r1", patch=fake_patch(tmp_path), gpu="NVIDIA H200", torch="2.11.0", checks=[check], tests=tests, e2e=e2e
    )


def test_pr_has_every_section_and_the_figures(tmp_path):
    text = render(full_report(tmp_path))
    positions = [text.index(s) for s in SECTIONS]
    assert positions == sorted(positions), "sections out of order"
    assert text.startswith("# [Kernel] Faster JIT silu_and_mul on NVIDIA H200 (geomean 1.19x over 2 shapes)")
    # only what is checked: no Python file changes; a kernel's own signature may (an outside coder's did)
    assert "No Python file changes" in text and "launch interfaces are unchanged" not in text
    # per-shape table: baseline, new, % of bandwidth, time / floor, speedup computed when the record has none
    assert "| shape | dtype | baseline µs | new µs | speedup | % of BW | time ÷ floor |" in text
    assert "| Llama-3.1-8B[hidden_size=14336,num_tokens=1] | bf16 | 3.05 | 2.61 | 1.169x | 1.5 | 1.31 |" in text
    assert "| 158.20 | 131.40 | 1.204x | 62.3 | 1.60 |" in text
    # correctness: shapes, dtypes, tolerances, bitwise, sanitizer, optimize-stage validation
    assert "| bf16 | 3 | 3 | 0 | 3 | 0 | 0.0156 | 1e-37 | yes |" in text
    assert "| fp32 | 3 | 3 | 0 | 0 | 2.4e-07 |" in text
    assert "compute-sanitizer `memcheck` on Llama-3.1-8B[...] bf16: 0 errors." in text
    assert "40 checks passed, 0 failed" in text
    assert "not run: the sources are the sglang 0.5.23 wheel" in text
    # end-to-end with the assumption and the skipped adapter
    assert "| decode | 1 | 2048 | 10.00 (±1.0%) | 9.50 (±1.1%) | -5.00% | ±0.55% | faster | 3,125 → 3,290 |" in text
    assert "| prefill | 4096 | — | 400.00 (±0.5%) | 399.00 (±0.6%) | -0.25% | ±0.30% | no change |" in text
    assert "**Non-GEMM part only** (SGLang's ops alone, back to back, NOT the whole layer" in text
    assert "| decode | 1 | 3.00 (±20.0%) | 2.50 (±18.0%) | -16.7% | -5.00% | faster |" in text
    assert "over a KV cache of 2048 tokens" in text and "qkv_proj (torch linear)" in text
    assert "Assumption: non-GEMM time only" in text
    assert "`sglang.benchmark.one_batch`: not run: the full SGLang runtime does not import here" in text
    # reproduce commands for each figure
    for command in (
        "kernelsmith optimize --ops activation.silu_and_mul --run r1",
        "kernelsmith integrate --run r1",
        "python -m integrate.sglang_runner --run r1",
        'git apply "$P"',
    ):
        assert command in text
    # the skipped op is listed, and SGLang's tests not having run keeps the PR a draft
    assert "`layernorm.rmsnorm`: the best candidate is the baseline" in text
    state, reasons = status(full_report(tmp_path))
    assert state == "ready" and reasons == []


def test_status_is_computed_from_the_records(tmp_path):
    failing = full_report(tmp_path, failing=True)
    state, reasons = status(failing)
    assert state == "failing" and "3 of 9 cases fail" in reasons[0]
    text = render(failing)
    assert "**Status: FAILING: do not submit.**" in text
    assert (
        "- **fail** Llama-3.1-8B[hidden_size=14336,num_tokens=8] bf16 (seed 7): out[3, 5] = 1.5, expected 1.25" in text
    )

    no_gpu = IntegrateReport(
        run="r1", patch=fake_patch(tmp_path), not_run={"correctness": "no GPU here (torch is not installed)"}
    )
    state, reasons = status(no_gpu)
    assert state == "draft"
    assert any("no GPU here" in r for r in reasons)
    text = render(no_gpu)
    assert "**Status: DRAFT" in text
    for section in SECTIONS:
        assert section in text
    assert "Not checked through SGLang: no GPU here (torch is not installed)." in text
    assert "### The model step\n\nNot run:" in text

    bad_sanitizer = full_report(tmp_path)
    check = bad_sanitizer.checks[0].model_copy(
        update={"sanitizer": [SanitizerRun(tool="memcheck", ran=True, errors=2)]}
    )
    assert status(bad_sanitizer.model_copy(update={"checks": [check]}))[0] == "failing"


def test_title_without_timings(tmp_path):
    report = IntegrateReport(
        run="r1",
        patch=fake_patch(tmp_path).model_copy(
            update={"ops": [OpChange(op_id=OP, candidate="c", task_dir="t", spans=[], files=[])]}
        ),
    )
    assert title(report) == "[Kernel] Faster JIT silu_and_mul", "no GPU step yet: no card is named"
    assert title(report.model_copy(update={"gpu": "NVIDIA H100 80GB HBM3"})).endswith(" on NVIDIA H100 80GB HBM3")
    # a run measured on one card and integrated on another: the isolated figures are the run's card's
    integrated_elsewhere = report.model_copy(update={"gpu": "NVIDIA H100 80GB HBM3"})
    assert title(integrated_elsewhere, "NVIDIA H200").endswith(" on NVIDIA H200")


def test_the_pr_names_the_card_that_measured_the_isolated_figures(tmp_path):
    """2026-12-08: a run made on the H200 and integrated on an H100 was titled "on NVIDIA H100"."""
    import dataclasses

    report = full_report(tmp_path).model_copy(update={"gpu": "NVIDIA H100 80GB HBM3"})
    text = render(report, facts=dataclasses.replace(_facts(), device="NVIDIA H200"))
    head = text.splitlines()[0]
    assert head.startswith("# [Kernel] Faster") and " on NVIDIA H200 (geomean" in head, head
    assert "final validation on NVIDIA H200:" in text


# --------------------------------------------------------------------------- git branch


def _git(repo: pathlib.Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def checkout(tmp_path, sglang_source):
    """A git checkout laid out like sglang's (python/sglang/...) holding the real activation.cuh."""
    from extract.sources import acquire

    repo = tmp_path / "sglang"
    pkg = repo / "python" / "sglang"
    for rel in (ACT, "kernels/jit/include/sgl_kernel/utils.cuh"):
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(pathlib.Path(sglang_source.root) / rel, pkg / rel)
    (repo / "README.md").write_text("sglang\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=dev", "-c", "user.email=dev@example.com", "commit", "-qm", "base")
    return acquire("0.5.23", tmp_path / "cache", str(repo))


def test_git_branch_commits_the_patch_without_touching_the_checkout(tmp_path, checkout):
    assert checkout.kind == "checkout"
    work = tmp_path / "work"
    root = pathlib.Path(checkout.root)
    make_task(work, checkout, OP, [act_span(root)])
    make_best(work, "r1", OP, {"act_and_mul_kernel": edited_kernel(root)})
    patch = build_patch("r1", work / "runs" / "r1", work / "tasks", checkout, work / "integrate" / "r1")
    assert patch.prefix == "python/sglang"
    repo = pathlib.Path(patch.tree_root)
    head = _git(repo, "rev-parse", "HEAD").strip()
    branches_before = _git(repo, "branch", "--list")

    commit = commit_branch(patch, "kernelsmith/silu-and-mul", "[Kernel] Faster JIT silu_and_mul", "body text")
    assert _git(repo, "rev-parse", "kernelsmith/silu-and-mul").strip() == commit
    assert _git(repo, "rev-parse", "HEAD").strip() == head, "HEAD must not move"
    assert _git(repo, "status", "--porcelain") == "", "the working tree and index must be untouched"
    assert _git(repo, "worktree", "list").count("\n") == 1, "the temporary worktree is removed"
    assert _git(repo, "log", "-1", "--format=%s%n%b", commit).startswith("[Kernel] Faster JIT silu_and_mul\nbody text")
    assert _git(repo, "diff", "--name-only", head, commit).split() == [f"python/sglang/{ACT}"]
    assert (
        _git(repo, "show", f"{commit}:python/sglang/{ACT}").encode()
        == (pathlib.Path(patch.patched_tree) / patch.prefix / ACT).read_bytes()
    )
    assert _git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() in branches_before

    with pytest.raises(GitError, match="already exists"):
        commit_branch(patch, "kernelsmith/silu-and-mul", "t", "b")
    with pytest.raises(GitError, match="not a valid branch name"):
        commit_branch(patch, "bad..name", "t", "b")


def test_git_branch_leaves_the_users_other_worktrees_registered(tmp_path, checkout):
    """Issue 16 row 12: only the worktree commit_branch made is removed; a stale one of the user's survives."""
    work = tmp_path / "work"
    root = pathlib.Path(checkout.root)
    make_task(work, checkout, OP, [act_span(root)])
    make_best(work, "r1", OP, {"act_and_mul_kernel": edited_kernel(root)})
    patch = build_patch("r1", work / "runs" / "r1", work / "tasks", checkout, work / "integrate" / "r1")
    repo = pathlib.Path(patch.tree_root)
    stale = tmp_path / "users-other-worktree"
    _git(repo, "worktree", "add", "-q", "-b", "users-work", str(stale), "HEAD")
    shutil.rmtree(stale)  # e.g. on a disk that is not mounted right now: prunable, but the user's
    assert str(stale) in _git(repo, "worktree", "list", "--porcelain")

    commit_branch(patch, "kernelsmith/keep-others", "t", "b")
    listed = _git(repo, "worktree", "list", "--porcelain")
    assert f"worktree {stale}" in listed, "the user's stale worktree must stay registered"
    assert "ks-branch-" not in listed, "the temporary worktree is removed"
    assert "kernelsmith/keep-others" in _git(repo, "branch", "--list")


def test_git_branch_refuses_a_non_checkout(tmp_path):
    with pytest.raises(GitError, match="needs an SGLang git checkout") as err:
        commit_branch(fake_patch(tmp_path), "kernelsmith/x", "t", "b")
    assert "--sglang" in err.value.fix


def test_git_branch_refuses_when_head_differs_from_the_patched_file(tmp_path, checkout):
    work = tmp_path / "work"
    root = pathlib.Path(checkout.root)
    make_task(work, checkout, OP, [act_span(root)])
    make_best(work, "r1", OP, {"act_and_mul_kernel": edited_kernel(root)})
    patch = build_patch("r1", work / "runs" / "r1", work / "tasks", checkout, work / "integrate" / "r1")
    repo = pathlib.Path(patch.tree_root)
    (root / ACT).write_bytes((root / ACT).read_bytes() + b"// local change\n")
    _git(repo, "-c", "user.name=dev", "-c", "user.email=dev@example.com", "commit", "-qam", "moved on")
    with pytest.raises(GitError, match="not the file the patch was taken against"):
        commit_branch(patch, "kernelsmith/y", "t", "b")
    assert "kernelsmith/y" not in _git(repo, "branch", "--list")


# --------------------------------------------------------------------------- for a reviewer

PDL_DIFF = """diff --git a/sglang/kernels/jit/csrc/elementwise/fused_add_rmsnorm.cuh b/sglang/kernels/jit/csrc/elementwise/fused_add_rmsnorm.cuh
--- a/sglang/kernels/jit/csrc/elementwise/fused_add_rmsnorm.cuh
+++ b/sglang/kernels/jit/csrc/elementwise/fused_add_rmsnorm.cuh
@@ -9,6 +9,7 @@ namespace {
 __global__ void fused_add_rmsnorm_kernel(const Params params) {
+  device::PDLWaitPrimary<true>();
   const auto row = blockIdx.x;
   store(params.out, row);
+  device::PDLTriggerSecondary<true>();
 }
@@ -40,3 +41,3 @@ void run(...) {
-  LaunchKernel(grid, block, stream).enable_pdl(false)(kernel, params);
+  LaunchKernel(grid, block, stream).enable_pdl(true)(kernel, params);
"""


def _facts(*, simulated: bool = False, guarded: bool = False, steps: list | None = None):
    from integrate.evidence import OpFacts, RunFacts
    from optimize.skills import load_skills

    pdl = next(s for s in load_skills() if s.id == ("pdl_small_grids" if steps else "pdl_enable"))
    profile = {
        "dram_throughput_pct": 11.0,
        "achieved_occupancy_pct": 48.0,
        "stall_long_scoreboard": 3.2,
        "stall_barrier": 1.1,
    }
    params = {"steps": steps} if steps else {}
    op = OpFacts(op_id=OP, skills=(pdl,), params=params, baseline_profile=profile, guarded=guarded)
    return RunFacts(
        simulated=simulated, backend="replay:h200.json" if simulated else "gpu", diff=PDL_DIFF, ops={OP: op}
    )


_ABS = __import__("re").compile(r"(?<![\w.~])/(?:tmp|root|home|work|usr|opt|var)/")


def test_pr_is_written_for_a_reviewer(tmp_path):
    report = full_report(tmp_path)
    report = report.model_copy(
        update={
            "tests": [
                TestRun(
                    op_id=OP,
                    ran=True,
                    files=["test/registered/kernels/ops/activation/test_act.py"],
                    passed=3,
                    command=f"cd {tmp_path}/sglang && PYTHONPATH={tmp_path}/tree/python python -m pytest test/registered/kernels/ops/activation/test_act.py",
                )
            ]
        }
    )
    text = render(report, facts=_facts())
    # no path of the machine it ran on, anywhere but inside the diff (which has none either)
    assert not _ABS.search(text), _ABS.search(text)
    assert str(tmp_path) not in text
    assert "kernelsmith extract --ops activation.silu_and_mul" in text and "kernelsmith integrate --run r1" in text
    assert "python -m pytest test/registered/kernels/ops/activation/test_act.py" in text
    # the diff, inline and folded
    assert "<details><summary>The diff: <code>sglang.patch</code>, 1 file(s), +3 −1 lines</summary>" in text
    assert "```diff\n" + PDL_DIFF.rstrip("\n") + "\n```" in text
    # the rationale: profile facts, the skill's reviewer text, what the diff does to the launch; not the planner's log line
    assert "DRAM throughput 11 % of peak" in text and "achieved occupancy 48 %" in text and "`long_scoreboard`" in text
    assert "x its floor" in text
    assert (
        "PDL was off because SGLang's launcher asks for it explicitly (`LaunchKernel(grid, block, stream).enable_pdl(false)"
        in text
    )
    assert "`device::PDLWaitPrimary<true>();`) as the first statement of the kernel body, before any read" in text
    assert (
        "`device::PDLTriggerSecondary<true>();`) as the last statement of the kernel body, after its last store" in text
    )
    assert "griddepcontrol.wait (PDLWaitPrimary) blocks" in text  # the skill's safety text
    assert "It assumes:" in text
    assert (
        "two rows per warp" not in text and "score priority" not in text
    )  # Candidate.rationale stays in the trajectory
    assert "40 checks passed and 0 failed" in text and "compute-sanitizer memcheck: 0 errors" in text
    # buckets and fallbacks
    assert (
        "one configuration (no parameters) serves every token count (token counts 1, 4096 measured); nothing falls back"
        in text
    )
    guarded = render(report, facts=_facts(guarded=True))
    assert "a shape dispatch in the diff keeps the baseline code" in guarded
    assert "SIMULATED" not in text
    # a run-time size switch (pdl_small_grids) is a bucket: the PR says what serves each side of it
    switched = render(report, facts=_facts(steps=[{"skill": "pdl_small_grids", "params": {"blocks_per_sm": 4}}]))
    assert "nothing falls back" not in switched
    assert (
        "launches of at most 4 block(s) per SM of the device (a test of each launch's own grid) get PDL; larger "
        "launches run as the baseline does there (`pdl_small_grids`)" in switched
    )
    legacy = render(report, facts=_facts(steps=[{"skill": "pdl_small_grids", "params": {"max_blocks": 132}}]))
    assert "launches of at most 132 blocks (a test of each launch's own grid) get PDL" in legacy, "older records"
    # a Triton launch option chosen per token bucket: each bucket's settings, and the bucket left to the baseline
    per_bucket = [
        {
            "skill": "triton_num_warps",
            "params": {"bucket": b, "option": "num_warps", "value": v, "tokens": "x.shape[0]"},
        }
        for b, v in (("T<=64", 1), ("T>=512", 8))
    ]
    bucketed = render(report, facts=_facts(steps=per_bucket))
    assert "nothing falls back" not in bucketed
    assert "- token count read at run time as `x.shape[0]`; per bucket (T<=64, 64<T<512, T>=512):" in bucketed
    assert "  - `T<=64`: num_warps=1 (token counts 1 measured)" in bucketed
    assert "  - `64<T<512`: the baseline's launch options (fallback) (no shape measured)" in bucketed
    assert "  - `T>=512`: num_warps=8 (token counts 4096 measured)" in bucketed


def test_a_replay_run_is_labelled_simulated(tmp_path):
    text = render(full_report(tmp_path), facts=_facts(simulated=True))
    assert text.startswith("# [SIMULATED] [Kernel] Faster JIT silu_and_mul")
    assert "> **SIMULATED.** The optimize run `r1` replayed recorded timings (replay:h200.json)" in text
    assert "| shape | dtype | baseline µs (SIMULATED) | new µs (SIMULATED) | speedup (SIMULATED) |" in text
    assert "Geomean speedup (SIMULATED)" in text


def test_gather_reads_the_run_folder(tmp_path):
    from integrate.evidence import gather, simulated_run
    from pipeline.record_io import write_record
    from pipeline.run_records import Candidate, RunSummary

    run_dir = tmp_path / "runs" / "r1"
    report = full_report(tmp_path)
    (tmp_path / "sglang.patch").write_text(PDL_DIFF)
    op_dir = run_dir / OP
    base = Candidate(op_id=OP, id="base0", parent=None, regions={})
    best = Candidate(
        op_id=OP, id=report.patch.ops[0].candidate, parent="base0", regions={}, skill="pdl_enable", coder="offline"
    )
    write_record(base, op_dir / "candidates" / "base0.json")
    write_record(best, op_dir / "best" / "candidate.json")
    assert simulated_run(run_dir) == (False, "")
    write_record(
        RunSummary(
            run="r1",
            mode="multi",
            coder="offline",
            backend="SIMULATED: replayed",
            simulated=True,
            started_at="a",
            finished_at="b",
        ),
        run_dir / "summary.json",
    )
    facts = gather(report, run_dir)
    assert facts.simulated and facts.diff == PDL_DIFF
    assert [s.id for s in facts.ops[OP].skills] == ["pdl_enable"]
    assert "no Nsight Compute profile of the baseline" in facts.ops[OP].profile_note
    assert facts.coder == "offline"
    text = render(report, run_dir=str(run_dir))
    assert "SIMULATED" in text and "kernelsmith optimize --ops activation.silu_and_mul --coder offline --run r1" in text


def test_git_branch_refuses_a_replay_run(tmp_path, checkout):
    import json

    from integrate.errors import SimulatedRunError

    work = tmp_path / "work"
    root = pathlib.Path(checkout.root)
    make_task(work, checkout, OP, [act_span(root)])
    make_best(work, "r1", OP, {"act_and_mul_kernel": edited_kernel(root)})
    (work / "runs" / "r1" / "run.json").write_text(
        json.dumps({"run": "r1", "backend": "replay", "replay": "h200.json"})
    )
    patch = build_patch("r1", work / "runs" / "r1", work / "tasks", checkout, work / "integrate" / "r1")
    repo = pathlib.Path(patch.tree_root)
    with pytest.raises(SimulatedRunError, match="replay backend") as err:
        commit_branch(patch, "kernelsmith/sim", "t", "b")
    assert "no --replay" in err.value.fix
    assert "kernelsmith/sim" not in _git(repo, "branch", "--list")


def test_an_older_e2e_record_is_labelled_non_gemm_only(tmp_path):
    report = full_report(tmp_path)
    old = report.e2e[0].model_copy(
        update={
            "recipe": "",
            "rows": [
                r.model_copy(update={"non_gemm": None, "verdict": None, "noise_band_pct": None})
                for r in report.e2e[0].rows
            ],
        }
    )
    text = render(report.model_copy(update={"e2e": [old]}), facts=_facts())
    assert "**non-GEMM ops only**" in text and "NOT a share of a whole layer" in text
    assert "| decode | 1 | 10.00 (±1.0%) | 9.50 (±1.1%) | -5.0% |" in text
    assert "Whole layer" not in text


# --------------------------------------------------------------------------- the model step holds the PR


def _with_rope(report: IntegrateReport, *, reach: dict[str, list[str]], verdict: str, ctx_verdict: str = "no change"):
    """``report``'s layer gains a rope step (apply_rope_with_cos_sin_cache_inplace) and the decode row the
    given whole-layer verdict, A/A figures and the rope step in context."""
    from integrate.records import AATiming, ContextTiming

    e2e = report.e2e[0]
    aa = AATiming(copy_us=10.01, copy_spread_pct=0.3, change_pct=0.1, band_pct=0.15, inside=True)
    ctx = ContextTiming(
        neighbours=["qkv_proj", "rope", "attention"],
        baseline_us=4.0,
        patched_us=4.2 if ctx_verdict == "slower" else 4.0,
        change_pct=5.0 if ctx_verdict == "slower" else 0.0,
        noise_band_pct=0.4,
        verdict=ctx_verdict,  # type: ignore[arg-type]
        aa=aa,
    )
    decode = e2e.rows[0].model_copy(
        update={
            "patched_us": 10.05 if verdict == "slower" else 10.0,
            "change_pct": 0.5 if verdict == "slower" else 0.0,
            "noise_band_pct": 0.2,
            "verdict": verdict,
            "aa": aa,
            "context": {"rope": ctx},
        }
    )
    e2e = e2e.model_copy(
        update={
            "ops": ["input_norm", "qkv_proj", "rope", "attention", "silu_and_mul"],
            "parts": {**e2e.parts, "rope": "SGLang attention.apply_rope_with_cos_sin_cache_inplace"},
            "rows": [decode, *e2e.rows[1:]],
        }
    )
    patch = report.patch.model_copy(
        update={"ops": [op.model_copy(update={"op_id": "attention.apply_rope_inplace"}) for op in report.patch.ops]}
    )
    checks = [c.model_copy(update={"op_id": "attention.apply_rope_inplace"}) for c in report.checks]
    tests = [t.model_copy(update={"op_id": "attention.apply_rope_inplace"}) for t in report.tests]
    return report.model_copy(update={"e2e": [e2e], "patch": patch, "reach": reach, "checks": checks, "tests": tests})


def test_a_layer_that_runs_the_change_through_another_op_says_so_and_its_slower_point_keeps_the_pr_draft(tmp_path):
    report = _with_rope(
        full_report(tmp_path),
        reach={"attention.apply_rope_inplace": ["attention.apply_rope_with_cos_sin_cache_inplace"]},
        verdict="slower",
        ctx_verdict="slower",
    )
    state, reasons = status(report)
    assert state == "draft"
    assert any(
        "Llama-3.1-8B decode T=1: the whole layer +0.50% (band ±0.20%, A/A +0.10% (±0.15%))" in r for r in reasons
    )
    assert any(
        "`attention.apply_rope_with_cos_sin_cache_inplace` in context (qkv_proj → rope → attention) +5.00%" in r
        for r in reasons
    )
    text = render(report)
    assert "This layer runs the changed code at: `rope` (attention.apply_rope_with_cos_sin_cache_inplace)" in text
    assert "cannot show" not in text and "No step of this layer's recipe" not in text
    assert "**Slower in the model step** (this keeps the PR in draft):" in text
    assert (
        "| decode | 1 | rope | qkv_proj → rope → attention | 4.00 | 4.20 | +5.00% | +0.10% (±0.15%) | ±0.40% | slower |"
        in text
    )
    assert "| -5.00% |" not in text.split("**Whole layer**")[1].split("\n")[4]  # the decode row is the slower one now
    assert "A/A (copy − pristine) |" in text


def test_a_layer_that_runs_the_change_and_is_not_slower_leaves_the_pr_ready(tmp_path):
    report = _with_rope(
        full_report(tmp_path),
        reach={"attention.apply_rope_inplace": ["attention.apply_rope_with_cos_sin_cache_inplace"]},
        verdict="no change",
    )
    assert status(report) == ("ready", [])


def test_a_slower_layer_that_runs_none_of_the_change_does_not_hold_the_pr(tmp_path):
    report = _with_rope(full_report(tmp_path), reach={"attention.apply_rope_inplace": []}, verdict="slower")
    assert status(report) == ("ready", [])
    text = render(report)
    assert "No step of this layer's recipe runs the changed code (`attention.apply_rope_inplace`" in text


def test_an_op_whose_reach_is_unknown_counts_as_running_the_change(tmp_path):
    report = _with_rope(full_report(tmp_path), reach={"attention.apply_rope_inplace": []}, verdict="slower")
    report = report.model_copy(
        update={"reach_unknown": {"attention.apply_rope_with_cos_sin_cache_inplace": "no task: no wheel here"}}
    )
    state, reasons = status(report)
    assert state == "draft" and any("the whole layer +0.50%" in r for r in reasons)
    assert "Whether `attention.apply_rope_with_cos_sin_cache_inplace` runs the changed code is unknown" in render(
        report
    )


def test_the_pr_follows_sglangs_template_and_ticks_only_what_the_records_show(tmp_path):
    text = render(full_report(tmp_path))
    assert [line for line in text.splitlines() if line.startswith("## ")] == list(SECTIONS)
    bench = text.split("## Benchmark and Profiling")[1]
    assert bench.index("### The model step") < bench.index(
        "### The kernel alone (isolated: each op replayed after itself)"
    )
    checklist = text.split("## Checklist")[1]
    assert "- [x] Accuracy: every case through SGLang's public op matches the pristine op (9 cases)." in checklist
    # the layer of full_report runs the changed silu_and_mul and is slower nowhere
    assert "- [x] Model step:" in checklist
    assert "- [ ] A registered test: `test/registered/kernels/ops/activation/` (to add or to run)." in checklist
    failing = full_report(tmp_path, failing=True)
    assert "- [ ] Accuracy:" in render(failing)


def _upstream(op_id="activation.silu_and_mul", *, generated=True, failed=0, bench_ran=True):
    from integrate.records import BenchRun, TestRun, UpstreamCheck

    if not generated:
        return UpstreamCheck(op_id=op_id, generated=False, missing="no torch reference for it")
    test = TestRun(op_id=op_id, ran=True, passed=295 - failed, failed=failed, summary=f"{295 - failed} passed")
    table = "   num_tokens  hidden_size |  jit(us) | jit(GB/s)\n0  10  512 |  1.2406 |  23.06"
    bench = [
        BenchRun(
            op_id=op_id,
            tree=tree,
            ran=bench_ran,
            table=table if bench_ran else "",
            reason="" if bench_ran else "exit 1: ImportError",
        )
        for tree in ("pristine", "patched")
    ]
    return UpstreamCheck(
        op_id=op_id,
        generated=True,
        test_file="test/registered/kernels/ops/activation/test_silu_and_mul.py",
        bench_file="test/registered/kernels/benchmark/activation/bench_silu_and_mul.py",
        test=test,
        bench=bench,
    )


def test_the_generated_sglang_test_and_benchmark_tick_their_boxes_and_show_their_tables(tmp_path):
    report = full_report(tmp_path).model_copy(update={"upstream": [_upstream()]})
    assert status(report) == ("ready", [])
    text = render(report)
    assert (
        "- `test/registered/kernels/ops/activation/test_silu_and_mul.py` (activation.silu_and_mul): against the patched tree: `295 passed`"
        in text
    )
    checklist = text.split("## Checklist")[1]
    assert "- [x] A registered test: `test/registered/kernels/ops/activation/test_silu_and_mul.py`." in checklist
    assert (
        "- [x] A `marker` benchmark: `test/registered/kernels/benchmark/activation/bench_silu_and_mul.py`." in checklist
    )
    bench = text.split("## Benchmark and Profiling")[1].split("## Checklist")[0]
    assert bench.count("jit(GB/s)") == 2, "the pristine and the patched table"
    reproduce = text.split("### Reproduce")[1]
    own = reproduce.index("python -m pytest -q test/registered/kernels/ops/activation/test_silu_and_mul.py")
    assert own < reproduce.index("kernelsmith extract"), "SGLang's own tools come before how the candidate was found"
    assert "python test/registered/kernels/benchmark/activation/bench_silu_and_mul.py" in reproduce


def test_a_pr_op_without_a_generated_test_or_with_a_failing_one_is_not_ready(tmp_path):
    missing = full_report(tmp_path).model_copy(update={"upstream": [_upstream(generated=False)]})
    state, reasons = status(missing)
    assert state == "draft" and reasons == ["activation.silu_and_mul: no SGLang-form test: no torch reference for it"]
    assert "- `activation.silu_and_mul`: none yet: no torch reference for it" in render(missing)
    failing = full_report(tmp_path).model_copy(update={"upstream": [_upstream(failed=3)]})
    assert status(failing)[0] == "failing"
    unbenched = full_report(tmp_path).model_copy(update={"upstream": [_upstream(bench_ran=False)]})
    state, reasons = status(unbenched)
    assert state == "draft" and any("did not run against the pristine tree: exit 1: ImportError" in r for r in reasons)
    assert "- [ ] A `marker` benchmark:" in render(unbenched)


def test_every_recipe_the_proxy_ran_has_its_own_part_and_any_of_them_holds_the_pr(tmp_path):
    """Two recipes: the Llama layer does not run the change, a second one (the MoE layer's rope step)
    does and is slower; a third did not run and says why. The PR is a draft because of the second."""
    report = _with_rope(full_report(tmp_path), reach={"attention.apply_rope_inplace": []}, verdict="slower")
    llama = report.e2e[0].model_copy(update={"parts": {**report.e2e[0].parts, "rope": "torch linear"}})
    moe = report.e2e[0].model_copy(
        update={"model": "Qwen3-235B-A22B", "recipe": "integrate/layers/qwen3-235b-a22b.toml", "one_batch": None}
    )
    broke = E2EResult(ran=False, model="GLM-5-Next", reason="it broke: the worker died")
    report = report.model_copy(
        update={
            "e2e": [llama, moe, broke],
            "reach": {"attention.apply_rope_inplace": ["attention.apply_rope_with_cos_sin_cache_inplace"]},
        }
    )
    state, reasons = status(report)
    assert state == "draft" and any(
        r.startswith("slower in the model step: Qwen3-235B-A22B decode T=1") for r in reasons
    )
    assert not any("Llama-3.1-8B decode" in r for r in reasons)
    text = render(report)
    model = text.split("### The model step")[1]
    assert model.index("#### Llama-3.1-8B") < model.index("#### Qwen3-235B-A22B") < model.index("#### GLM-5-Next")
    assert "Not run: it broke: the worker died." in model


def test_a_launch_overlap_candidate_waits_for_its_in_context_figure(tmp_path):
    """A candidate made only by PDL skills is accepted on its in-context figure: "no change" in context is
    not enough for "ready"; "faster" at one point of a recipe that runs it is."""
    report = _with_rope(
        full_report(tmp_path),
        reach={"attention.apply_rope_inplace": ["attention.apply_rope_with_cos_sin_cache_inplace"]},
        verdict="no change",
    )
    ops = [op.model_copy(update={"skills": ["pdl_enable", "pdl_trigger_small_grids"]}) for op in report.patch.ops]
    report = report.model_copy(update={"patch": report.patch.model_copy(update={"ops": ops})})
    state, reasons = status(report)
    assert state == "draft" and any(
        "attention.apply_rope_inplace: its gain is launch overlap (pdl_enable + pdl_trigger_small_grids)" in r
        and "no in-context point is faster" in r
        for r in reasons
    )
    assert "Its gain is launch overlap (pdl_enable + pdl_trigger_small_grids)" in render(report)
    e2e = report.e2e[0]
    row = e2e.rows[0]
    faster = row.model_copy(update={"context": {"rope": row.context["rope"].model_copy(update={"verdict": "faster"})}})
    shown = report.model_copy(update={"e2e": [e2e.model_copy(update={"rows": [faster, *e2e.rows[1:]]})]})
    assert status(shown) == ("ready", [])
    mixed = [op.model_copy(update={"skills": ["pdl_enable", "streaming_cache_hints"]}) for op in report.patch.ops]
    assert status(report.model_copy(update={"patch": report.patch.model_copy(update={"ops": mixed})})) == ("ready", [])


def test_git_branch_stacks_one_branch_per_part_of_a_series(tmp_path, sglang_source):
    """Two families (activation, layernorm): `<branch>-01-activation` from HEAD, `<branch>-02-layernorm` on it,
    each with its part's diff and its family PR's title; the last holds the whole patch's bytes."""
    from test_integrate_patch import RMS, two_op_run

    from extract.sources import acquire
    from integrate.accepted import load_run
    from integrate.branch import commit_series
    from integrate.patch import layout_of
    from integrate.series import write_series

    repo = tmp_path / "sglang"
    pkg = repo / "python" / "sglang"
    for rel in (ACT, RMS, "kernels/jit/include/sgl_kernel/utils.cuh"):
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(pathlib.Path(sglang_source.root) / rel, pkg / rel)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=dev", "-c", "user.email=dev@example.com", "commit", "-qm", "base")
    source = acquire("0.5.23", tmp_path / "cache", str(repo))
    work = two_op_run(tmp_path, source)
    out = work / "integrate" / "r1"
    patch = build_patch("r1", work / "runs" / "r1", work / "tasks", source, out)
    accepted, _ = load_run(work / "runs" / "r1", work / "tasks")
    report = IntegrateReport(run="r1", patch=patch, series=write_series(accepted, layout_of(source), out))
    head = _git(repo, "rev-parse", "HEAD").strip()
    parts = commit_series(report, "perf/all", "body")
    assert [p.branch for p in parts] == ["perf/all-01-activation", "perf/all-02-layernorm"]
    assert _git(repo, "rev-parse", f"{parts[1].commit}^").strip() == parts[0].commit, "part 2 sits on part 1"
    assert _git(repo, "rev-parse", f"{parts[0].commit}^").strip() == head
    assert _git(repo, "diff", "--name-only", parts[0].commit, parts[1].commit).split() == [f"python/sglang/{RMS}"]
    assert "silu_and_mul" in _git(repo, "log", "-1", "--format=%s", parts[0].commit)
    for rel in (ACT, RMS):
        assert (
            _git(repo, "show", f"{parts[1].commit}:python/sglang/{rel}").encode()
            == (pathlib.Path(patch.patched_tree) / patch.prefix / rel).read_bytes()
        )
    assert _git(repo, "rev-parse", "HEAD").strip() == head and _git(repo, "status", "--porcelain") == ""


def test_a_rewrite_left_in_place_is_a_draft_that_says_why_and_a_tuned_kernel_is_not(tmp_path):
    """An outside agent's or an LLM's kernel (or one made by a skill no transform implements) belongs in
    SGLang's kda_kernels/ zone; one that could not land there (tests/test_integrate_landing.py) stays an
    in-place edit, and the PR says why and stays a draft."""
    report = full_report(tmp_path)
    assert status(report)[0] == "ready"

    def with_op(**update):
        ops = [op.model_copy(update=update) for op in report.patch.ops]
        return report.model_copy(update={"patch": report.patch.model_copy(update={"ops": ops})})

    state, reasons = status(with_op(coder="external:claude"))
    assert state == "draft" and any(
        "a rewrite (external:claude; skills: none) belongs in SGLang's kda_kernels/" in r
        and "could not land there: no reason recorded" in r
        for r in reasons
    )
    landed = with_op(coder="external:claude", landing="kda")
    state, reasons = status(landed)
    assert state == "failing" and any("no case reached its KDA implementation" in r for r in reasons)
    reached = landed.model_copy(update={"checks": [c.model_copy(update={"kda_cases": 3}) for c in landed.checks]})
    assert status(reached) == ("ready", [])
    assert status(with_op(coder="offline:search", skills=["warp_per_row"]))[0] == "draft"
    assert status(with_op(coder="offline:search", skills=["pdl_enable", "streaming_cache_hints"])) == ("ready", [])
