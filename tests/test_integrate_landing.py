"""The KDA landing of a rewrite (integrate.landing), on the real extracted task of
layernorm.fused_add_rmsnorm and the pinned wheel's sources.

The candidate is the baseline kernel with a comment added, labelled as an outside agent's: what is
tested is where a rewrite lands and how (files, registration, guard, dispatch, verification), which
does not depend on what the kernel computes. The GPU half (the registry dispatches to it through
the public function) is tests/test_integrate_landing_gpu.py.
"""

from __future__ import annotations

import ast
import pathlib
import shutil
import subprocess

import pytest
from conftest import ensure_default_tasks
from test_integrate_patch import make_best

from contract.layout import load_task
from integrate.diffs import file_diff, git_blob_sha1
from integrate.in_place import swap_in_place
from integrate.landing import is_rewrite, kda_landing, unreached
from integrate.patch import build_patch
from integrate.pr import status
from integrate.records import IntegrateReport, OpCheck

OP = "layernorm.fused_add_rmsnorm"
CUH = "kernels/jit/csrc/elementwise/fused_add_rmsnorm.cuh"
MODULE = "kernels/kda_kernels/fused_add_rmsnorm_jit.py"
SOURCE = "kernels/kda_kernels/csrc/elementwise/fused_add_rmsnorm.cuh"
FACADE = "kernels/ops/layernorm/norm.py"
INIT = "kernels/ops/layernorm/__init__.py"
README = "kernels/kda_kernels/README.md"


def rewrite_run(tmp_path: pathlib.Path, coder: str = "external:agent") -> tuple[pathlib.Path, object]:
    """A work folder holding the real task and a run whose best candidate edits its kernel span."""
    work = tmp_path / "work"
    shutil.copytree(ensure_default_tasks() / OP, work / "tasks" / OP)
    task = load_task(work / "tasks" / OP)
    span = next(s for s in task.editable if s.kind == "kernel")
    text = (pathlib.Path(task.source.root) / span.file).read_bytes()[span.start_byte : span.end_byte].decode()
    make_best(work, "r1", OP, {span.name: text.replace("{", "{  // one row per block\n", 1)}, coder=coder)
    return work, task


def test_a_rewrite_lands_beside_its_kernel_in_kda_kernels(tmp_path):
    work, task = rewrite_run(tmp_path)
    patch = build_patch("r1", work / "runs" / "r1", work / "tasks", task.source, tmp_path / "out")
    (op,) = patch.ops
    assert op.landing == "kda" and op.landing_note == ""
    assert op.kda_target == "sglang.kernels.kda_kernels.fused_add_rmsnorm_jit:fused_add_rmsnorm"
    assert op.kda_guard == "sglang.kernels.kda_kernels.fused_add_rmsnorm_jit:can_use_fused_add_rmsnorm"
    files = {f.path: f for f in patch.files}
    assert sorted(files) == sorted([FACADE, INIT, MODULE, README, SOURCE]), "the JIT kernel itself stays pristine"
    assert files[MODULE].created and files[SOURCE].created and not files[FACADE].created
    assert {"spans", "git apply", "patch -p1"} <= set(patch.verified)

    tree = pathlib.Path(patch.patched_tree) / patch.prefix
    pristine = pathlib.Path(task.source.root)
    assert (tree / CUH).read_bytes() == (pristine / CUH).read_bytes()
    assert b"// one row per block" in (tree / SOURCE).read_bytes()
    module = (tree / MODULE).read_text()
    ast.parse(module)
    assert '"kda_fused_add_rmsnorm"' in module and '_cuda_source("elementwise/fused_add_rmsnorm.cuh")' in module
    assert "def fused_add_rmsnorm(" in module and "def can_use_fused_add_rmsnorm(" in module
    guard = module[module.index("def can_use_fused_add_rmsnorm(") :]
    for condition in (
        "input.is_cuda and _on_validated_arch(input.device)",
        "input.dtype in (torch.bfloat16, torch.float16)",
        "residual.dtype == input.dtype",
        "residual.shape[1] == input.shape[1]",
        "weight.shape[0] == input.shape[1]",
        "cast_x_before_out_mul is False",
    ):
        assert condition in guard, condition
    assert "eps ==" not in guard, "a float scalar is data, not a code path"
    assert "get_device_capability(device) == (9, 0)" in module

    facade = (tree / FACADE).read_text()
    ast.parse(facade)
    assert "from sglang.kernels.kda_kernels.fused_add_rmsnorm_jit import can_use_fused_add_rmsnorm" in facade
    body = facade[facade.index("def fused_add_rmsnorm(") :]
    assert body.index("if can_use_fused_add_rmsnorm(") < body.index("module = _jit_fused_add_rmsnorm_module(")
    assert 'return get_kernel("layernorm.fused_add_rmsnorm", KernelBackend.KDA)(' in body
    init = (tree / INIT).read_text()
    ast.parse(init)
    assert "backend=KernelBackend.KDA" in init and "CapabilityRequirement.cuda(min_sm=(9, 0), max_sm=(9, 0))" in init
    assert (
        "`fused_add_rmsnorm_jit.py`, `csrc/elementwise/fused_add_rmsnorm.cuh` | this pull request |"
        in (tree / README).read_text()
    )

    text = pathlib.Path(patch.patch_file).read_text()
    assert "kernelsmith" not in text.lower()
    assert "\nnew file mode 100644\nindex 000000000000.." in text
    assert f"--- /dev/null\n+++ b/sglang/{MODULE}\n" in text


def test_the_patch_applies_to_a_fresh_copy_of_the_wheel_with_git(tmp_path):
    work, task = rewrite_run(tmp_path)
    patch = build_patch("r1", work / "runs" / "r1", work / "tasks", task.source, tmp_path / "out")
    fresh = tmp_path / "fresh" / "sglang"
    shutil.copytree(task.source.root, fresh)
    done = subprocess.run(["git", "apply", patch.patch_file], cwd=fresh.parent, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    tree = pathlib.Path(patch.patched_tree) / patch.prefix
    for f in patch.files:
        assert (fresh / f.path).read_bytes() == (tree / f.path).read_bytes(), f.path


def test_a_tuned_candidate_is_patched_in_place(tmp_path):
    work, task = rewrite_run(tmp_path, coder="offline:search")
    patch = build_patch("r1", work / "runs" / "r1", work / "tasks", task.source, tmp_path / "out")
    assert [f.path for f in patch.files] == [CUH] and patch.ops[0].landing == "in_place"
    assert not is_rewrite("offline:search", ["pdl_enable"]) and is_rewrite("llm:coding", [])


def test_a_rewrite_that_cannot_land_stays_in_place_and_the_pr_says_why(tmp_path):
    """A parameter no contract argument feeds, without a default: the values it was judged at are
    unknown, so no guard can be written; the rewrite stays an in-place edit and the PR a draft."""
    work, task = rewrite_run(tmp_path)
    sig = task.entry_signature
    params = [
        p.model_copy(update={"has_default": False, "default": None}) if p.feeds is None else p for p in sig.params
    ]
    refused = kda_landing(
        task.model_copy(update={"entry_signature": sig.model_copy(update={"params": params})}),
        None,
        {CUH: b"x"},
        pathlib.Path(task.source.root),
    )
    assert "cast_x_before_out_mul feeds no contract argument and has no default" in refused.reason

    triton = kda_landing(
        task.model_copy(update={"language": "triton"}),
        None,
        {CUH: b"x"},
        pathlib.Path(task.source.root),
    )
    assert "Triton" in triton.reason

    patch = build_patch("r1", work / "runs" / "r1", work / "tasks", task.source, tmp_path / "out")
    op = patch.ops[0].model_copy(update={"landing": "in_place", "landing_note": refused.reason})
    report = IntegrateReport(run="r1", patch=patch.model_copy(update={"ops": [op]}))
    state, reasons = status(report)
    assert state == "draft" and any("could not land there: parameter cast_x_before_out_mul" in r for r in reasons)


def test_a_kda_landing_whose_check_never_reached_it_fails(tmp_path):
    work, task = rewrite_run(tmp_path)
    patch = build_patch("r1", work / "runs" / "r1", work / "tasks", task.source, tmp_path / "out")
    check = OpCheck(op_id=OP, function="sglang.kernels.ops.layernorm.norm.fused_add_rmsnorm", ran=True, passed=3)
    assert unreached(patch, [check.model_copy(update={"kda_cases": 2})]) == []
    (why,) = unreached(patch, [check.model_copy(update={"kda_cases": 0})])
    assert "no case reached its KDA implementation" in why
    report = IntegrateReport(run="r1", patch=patch, checks=[check.model_copy(update={"kda_cases": 0})])
    assert status(report)[0] == "failing"


def test_in_place_creates_the_landing_files_and_a_failed_swap_removes_them(tmp_path, monkeypatch):
    """--in-place on a writable tree: new files are created; a swap that breaks removes them again."""
    from extract.sources import acquire
    from integrate import patch as patch_mod

    work, task = rewrite_run(tmp_path)
    pkg = tmp_path / "site" / "sglang"
    for rel in (CUH, FACADE, INIT, README, *(f.path for f in task.files)):
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(pathlib.Path(task.source.root) / rel, pkg / rel)
    (pkg / "kernels/ops/__init__.py").write_text("")
    source = acquire("0.5.23", tmp_path / "cache", str(pkg))
    before = {p: p.read_bytes() for p in pkg.rglob("*") if p.is_file()}
    made = build_patch("r1", work / "runs" / "r1", work / "tasks", source, tmp_path / "out")
    assert made.ops[0].landing == "kda"

    real, swaps = patch_mod._replace, []

    def failing_replace(src, dst):
        swaps.append(dst)
        if len(swaps) == 4:
            raise OSError(28, "No space left on device (simulated)")
        return real(src, dst)

    monkeypatch.setattr(patch_mod, "_replace", failing_replace)
    with pytest.raises(Exception, match="every file was restored"):
        swap_in_place(made, tmp_path / "out")
    assert {p: p.read_bytes() for p in pkg.rglob("*") if p.is_file()} == before
    monkeypatch.setattr(patch_mod, "_replace", real)
    record = swap_in_place(made, tmp_path / "out")
    assert record.in_place and (pkg / MODULE).is_file() and (pkg / SOURCE).is_file()
    assert (pkg / CUH).read_bytes() == before[pkg / CUH]


def test_a_created_file_diff_is_git_s_new_file_form():
    text = file_diff("pkg/new.py", b"", b"x = 1\n", created=True).decode()
    assert text.splitlines() == [
        "diff --git a/pkg/new.py b/pkg/new.py",
        "new file mode 100644",
        f"index {'0' * 12}..{git_blob_sha1(b'x = 1' + bytes([10]))[:12]}",
        "--- /dev/null",
        "+++ b/pkg/new.py",
        "@@ -0,0 +1 @@",
        "+x = 1",
    ]
