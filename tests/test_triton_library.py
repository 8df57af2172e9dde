"""optimize.harness.triton_library (and the Triton half of optimize.harness.languages): a Triton task's library.

CPU: everything up to the GPU launch, on a tiny tree of our own (``tiny_tree``: Triton files that
import only triton, and one that imports ``sglang``): the spliced file in a content-addressed build
folder, its key, loading it as one module per owner under a unique name, the exports, the check of
what a wrapper returns, the worker's blame for a file that does not import, and ``evaluate`` up to
the worker request. GPU (``@pytest.mark.gpu``, skipped here): merge_state_triton's baseline against
itself, and a cheating candidate (skips the last token's store, so the poison survives) rejected.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

from contract.layout import SRC_DIR, baseline_regions, read_task_files, task_dir
from extract import triton_ops, triton_tasks
from optimize.harness import loader, triton_library
from optimize.harness.errors import HarnessError
from optimize.languages import language_of
from pipeline.config import Config
from pipeline.records import SourceInfo
from pipeline.run_records import Candidate

ROOT = pathlib.Path(__file__).resolve().parents[1]
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")

COPY = """\
import triton
import triton.language as tl


@triton.jit
def row_copy_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    vals = tl.load(x_ptr + row * n_cols + offs, mask=mask)
    tl.store(out_ptr + row * n_cols + offs, vals, mask=mask)


def row_copy(x, out):
    num_tokens, hidden_size = x.shape
    assert out.shape == x.shape
    row_copy_kernel[(num_tokens,)](x, out, hidden_size, BLOCK=1024, num_warps=4)
    return out
"""

SCALED = """\
import triton
import triton.language as tl

from sglang.kernels.ops.tiny.helper import SCALE


@triton.jit
def scaled_copy_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    vals = tl.load(x_ptr + row * n_cols + offs, mask=mask)
    tl.store(out_ptr + row * n_cols + offs, vals * SCALE, mask=mask)


def scaled_copy(x, out):
    num_tokens, hidden_size = x.shape
    assert out.shape == x.shape
    scaled_copy_kernel[(num_tokens,)](x, out, hidden_size, BLOCK=1024)
    return out
"""

REGISTRY = """\
from sglang.kernels.spec import KernelBackend, KernelSpec
from sglang.kernels.registry import register_kernel

for _mod, _fn in [("copy", "row_copy"), ("scaled", "scaled_copy")]:
    register_kernel(
        KernelSpec(op=f"tiny.{_fn}", backend=KernelBackend.TRITON, target=f"sglang.kernels.ops.tiny.{_mod}:{_fn}")
    )
"""


def tiny_tree(tmp_path: pathlib.Path) -> SourceInfo:
    """``sglang/kernels/ops/tiny/`` with two Triton ops of our own (no SGLang code)."""
    root = tmp_path / "sglang"
    ops = root / "kernels" / "ops" / "tiny"
    ops.mkdir(parents=True)
    (root / "kernels" / "jit").mkdir()  # what marks an sglang package folder (pipeline.sglang_package.install)
    for folder in (root, root / "kernels", root / "kernels" / "ops", ops):
        (folder / "__init__.py").write_text("", encoding="utf-8")
    (ops / "registry.py").write_text(REGISTRY, encoding="utf-8")  # scanned, never imported
    (ops / "copy.py").write_text(COPY, encoding="utf-8")
    (ops / "scaled.py").write_text(SCALED, encoding="utf-8")
    (ops / "helper.py").write_text("SCALE = 3.0\n", encoding="utf-8")
    return SourceInfo(kind="package", root=str(root), version="tiny")


@pytest.fixture
def tiny(tmp_path):
    index, _ = triton_ops.scan_tree(tiny_tree(tmp_path), None)
    work = tmp_path / "work"
    out = {}
    for op_id in ("tiny.row_copy", "tiny.scaled_copy"):
        task = triton_tasks.write_task(index, next(o for o in index.ops if o.id == op_id), work)
        folder = task_dir(work, op_id)
        out[op_id] = (task, folder, baseline_regions(read_task_files(folder, task), task))
    return out


def build(task, folder, tmp_path, regions=None):
    return triton_library.build(folder, task, cache_root=tmp_path / "cache" / "triton", regions=regions)


def faster(regions):
    return dict(
        regions, **{"launch:row_copy_kernel": regions["launch:row_copy_kernel"].replace("num_warps=4", "num_warps=8")}
    )


# ---------------------------------------------------------------------------- build (the parent's half)


def test_the_baseline_library_is_the_wrappers_file_in_a_content_addressed_folder(tiny, tmp_path):
    task, folder, _ = tiny["tiny.row_copy"]
    report = build(task, folder, tmp_path)
    assert report.ok and not report.cached and triton_library.is_library(report.library)
    entry = pathlib.Path(report.library).parent
    assert entry.name == report.key and (entry / "copy.py").read_text() == COPY  # the task's own bytes
    manifest = triton_library.TritonLibrary.model_validate_json(pathlib.Path(report.library).read_text())
    assert (manifest.module, manifest.function) == ("sglang.kernels.ops.tiny.copy", "row_copy")
    assert manifest.exports == ["row_copy__bf16", "row_copy__fp16", "row_copy__fp32"]  # one per dtype, one wrapper
    again = build(task, folder, tmp_path)
    assert again.cached and again.key == report.key and again.library == report.library
    assert not [p for p in entry.parent.iterdir() if p.name.startswith(".staging-")]


def test_the_key_changes_with_the_region_text_and_stays_when_nothing_changes(tiny, tmp_path):
    task, folder, regions = tiny["tiny.row_copy"]
    base = build(task, folder, tmp_path)
    same = build(task, folder, tmp_path, regions=dict(regions))  # the baseline's own regions: the same library
    assert same.key == base.key and same.cached
    edited = build(task, folder, tmp_path, regions=faster(regions))
    assert edited.ok and edited.key != base.key
    text = (pathlib.Path(edited.library).parent / "copy.py").read_text()
    assert "num_warps=8" in text and "num_warps=4" not in text and text.replace("num_warps=8", "num_warps=4") == COPY
    how = triton_library.params_of(task), triton_library.returned_of(task)
    assert triton_library.library_key(task, text.encode(), *how) == edited.key  # the key is the text's, nothing else


def test_an_edit_to_another_file_of_the_task_is_a_failed_build_and_an_unchanged_one_is_not(tiny, tmp_path):
    """The worker loads the wrapper's file alone: an edited helper elsewhere would be imported pristine."""
    from pipeline.records import Span

    task, folder, regions = tiny["tiny.scaled_copy"]
    helper = "kernels/ops/tiny/helper.py"
    copy = folder / SRC_DIR / helper
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text("SCALE = 3.0\n", encoding="utf-8")
    span = Span(file=helper, start_byte=0, end_byte=len("SCALE = 3.0"), name="SCALE")
    task = task.model_copy(update={"editable": [*task.editable, span]})
    report = build(task, folder, tmp_path, regions={**regions, "SCALE": "SCALE = 4.0"})
    assert not report.ok and helper in report.stderr and "wrapper's own file" in report.stderr
    assert build(task, folder, tmp_path, regions={**regions, "SCALE": "SCALE = 3.0"}).ok


def test_regions_that_do_not_splice_or_parse_are_a_failed_build_with_the_reason(tiny, tmp_path):
    task, folder, regions = tiny["tiny.row_copy"]
    broken = dict(regions, row_copy_kernel=regions["row_copy_kernel"].replace("def ", "def (", 1))
    report = build(task, folder, tmp_path, regions=broken)
    assert not report.ok and "does not parse after the edit" in report.stderr and "line " in report.stderr
    report = build(task, folder, tmp_path, regions={**regions, "no_such_region": "x = 1\n"})
    assert not report.ok and "cannot be spliced" in report.stderr


def test_the_harness_builds_a_triton_task_through_the_language_seam_one_library_for_every_unit(tiny, tmp_path):
    from optimize.harness.evaluate import build_units, plan_cases

    task, folder, regions = tiny["tiny.row_copy"]
    assert language_of(task).name == "triton"
    plan = plan_cases(task, held_out=2)
    assert {c.export for c in plan.checks} == {"row_copy__bf16", "row_copy__fp16", "row_copy__fp32"}
    assert len(plan.units) == 1 and {c.unit for c in plan.checks} == {0}
    config = Config.model_validate({"work_dir": str(tmp_path / "w")})
    report, libs = build_units(folder, task, plan.units, config=config, regions=faster(regions))
    assert report.ok and len(libs) == 1 and libs[0].startswith(str(config.cache / "triton"))


def test_evaluate_hands_the_worker_both_libraries_and_the_carried_sglang_package(tiny, tmp_path, monkeypatch):
    """Up to the GPU launch: the request the worker would get (the worker itself is stubbed: no GPU here)."""
    from optimize.harness import evaluate as ev
    from optimize.harness.isolate import WorkerRun, _library_dirs

    task, folder, regions = tiny["tiny.scaled_copy"]
    seen = []
    monkeypatch.setattr(ev, "run_request", lambda request, config, workdir: seen.append(request) or stopped)
    stopped = WorkerRun("crashed", 3, 0.0, "stub: no worker on this machine", None)
    config = Config.model_validate({"work_dir": str(tmp_path / "w"), "harness": {"held_out_shapes": 1}})
    cand = dict(regions, **{"launch:scaled_copy_kernel": regions["launch:scaled_copy_kernel"].replace("1024", "512")})
    evaluation = ev.evaluate(
        folder, task, Candidate(op_id=task.op_id, id="c1", parent="baseline", regions=cand, coder="test"), config=config
    )
    assert evaluation.outcome.value == "crashed" and "stub" in evaluation.detail
    (request,) = seen
    assert request.sglang_package == task.source.root  # the tree the task came from, on this machine
    assert request.baseline_libraries != request.candidate_libraries
    assert all(triton_library.is_library(lib) for lib in [*request.baseline_libraries, *request.candidate_libraries])
    assert task.source.root in _library_dirs(request)  # readable inside the worker's sandbox


def test_a_triton_population_is_built_then_judged_in_one_worker_request(tiny, tmp_path, monkeypatch):
    """What the search's GPU backend does (evaluate_population), up to the worker: a member that does not
    parse is compile_failed and never reaches the worker; the others go in one request, each its own library."""
    from optimize.harness import population
    from optimize.harness.isolate import WorkerRun

    task, folder, regions = tiny["tiny.row_copy"]
    seen = []
    monkeypatch.setattr(population, "run_request", lambda request, config, workdir: seen.append(request) or stopped)
    stopped = WorkerRun("crashed", 3, 0.0, "stub: no worker on this machine", None)
    config = Config.model_validate({"work_dir": str(tmp_path / "w"), "harness": {"held_out_shapes": 1}})
    broken = dict(regions, row_copy_kernel=regions["row_copy_kernel"].replace("def ", "def (", 1))
    members = [
        Candidate(op_id=task.op_id, id=f"m{i}", parent="baseline", regions=r, coder="test")
        for i, r in enumerate((faster(regions), broken, dict(regions)))
    ]
    out = population.evaluate_population(folder, task, members, config=config)
    assert [e.candidate for e in out] == ["m0", "m1", "m2"]
    assert out[1].outcome.value == "compile_failed" and "does not parse" in out[1].detail
    assert seen and all(r.sglang_package == task.source.root for r in seen)
    libraries = [libs[0] for libs in seen[0].population]
    assert len(libraries) == 2 and libraries[0] != libraries[1] and libraries[1] == seen[0].baseline_libraries[0]


def test_a_cuda_task_gets_no_package_and_no_precheck():
    from test_loop import make_task

    task = make_task()
    language = language_of(task)
    assert language.name == "cuda"
    assert language.build.sglang_package(task, Config()) is None
    assert (
        language.build.precheck(
            "/nonexistent", task, Candidate(op_id=task.op_id, id="x", parent="baseline", regions={}, coder="test")
        )
        is None
    )


# ---------------------------------------------------------------------------- load (the worker's half)


@needs_triton
def test_each_owner_gets_its_own_module_under_a_unique_name_with_triton_imported(tiny, tmp_path, monkeypatch):
    import triton

    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # as a worker without PYTHONDONTWRITEBYTECODE

    task, folder, regions = tiny["tiny.row_copy"]
    lib = build(task, folder, tmp_path).library
    _, baseline = triton_library.load(lib, "baseline")
    _, candidate = triton_library.load(lib, "candidate")  # the same text: still its own module
    assert baseline is not candidate and baseline.__name__ != candidate.__name__
    assert baseline.__name__.startswith("sglang.kernels.ops.tiny.copy__ks_") and baseline.__name__.endswith("_baseline")
    assert sys.modules[baseline.__name__] is baseline and sys.modules[candidate.__name__] is candidate
    assert baseline.triton is triton and isinstance(baseline.row_copy_kernel, triton.runtime.JITFunction)
    assert baseline.row_copy_kernel is not candidate.row_copy_kernel  # separate JIT caches
    assert triton_library.load(lib, "baseline")[1] is baseline  # once per process
    assert sorted(p.name for p in pathlib.Path(lib).parent.iterdir()) == ["copy.py", "triton-library.json"]  # no pyc
    other = build(task, folder, tmp_path, regions=faster(regions)).library
    assert triton_library.load(other, "candidate")[1].__name__ != candidate.__name__
    fn = loader.function(lib, "row_copy__bf16", owner="baseline")
    assert callable(fn)
    with pytest.raises(HarnessError, match="no export 'row_copy__fp8'"):
        loader.function(lib, "row_copy__fp8", owner="baseline")


@needs_triton
def test_a_file_that_does_not_import_is_blamed_on_its_author(tiny, tmp_path):
    from optimize.harness.worker_base import CaseFailure, Impl

    task, folder, regions = tiny["tiny.row_copy"]
    bad = dict(regions, row_copy_kernel="ROWS = undefined_name\n\n\n" + regions["row_copy_kernel"])
    lib = build(task, folder, tmp_path, regions=bad).library  # it parses: only importing it fails
    with pytest.raises(CaseFailure) as failure:
        Impl("candidate", [lib]).fn(0, "row_copy__bf16")
    assert (
        failure.value.kind == "incorrect" and "NameError" in failure.value.reason and "copy.py" in failure.value.reason
    )
    with pytest.raises(CaseFailure) as failure:
        Impl("baseline", [lib]).fn(0, "row_copy__bf16")
    assert failure.value.kind == "baseline_failed"


@needs_triton
def test_a_file_importing_sglang_loads_once_the_worker_has_the_carried_package(tiny, tmp_path):
    """In a fresh interpreter, as in the worker (this process must not install an sglang of its own)."""
    task, folder, _ = tiny["tiny.scaled_copy"]
    lib = build(task, folder, tmp_path).library
    code = (
        "import sys\n"
        "from optimize.harness import loader, triton_library\n"
        f"lib, package = {lib!r}, sys.argv[1] if len(sys.argv) > 1 else None\n"
        "loader.use_package(package)\n"
        "try:\n"
        "    _, module = triton_library.load(lib, 'baseline')\n"
        "except triton_library.LibraryLoadFailed as err:\n"
        "    print('FAILED', err)\n"
        "else:\n"
        "    print('SCALE', module.SCALE, 'sglang' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    without = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert without.stdout.startswith("FAILED") and "sglang package" in without.stdout, without.stderr
    given = [sys.executable, "-c", code, task.source.root]
    done = subprocess.run(given, capture_output=True, text=True, env=env, timeout=120)
    assert done.stdout.strip() == "SCALE 3.0 True", done.stderr


class _Storage:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def data_ptr(self) -> int:
        return self.ptr


class _Tensor:
    """What the check reads of a torch tensor: its storage's address and its shape."""

    def __init__(self, ptr: int, shape: tuple[int, ...] = (4,)) -> None:
        self.shape, self._storage = shape, _Storage(ptr)

    def untyped_storage(self) -> _Storage:
        return self._storage


def test_a_wrapper_must_return_only_its_arguments_tensors():
    out, lse, x = _Tensor(100), _Tensor(200), _Tensor(300)
    view = _Tensor(100, (2, 2))  # a view of `out`: same storage
    params = ["x", "out", "lse"]
    honest = triton_library.returning_arguments(lambda **kw: (view, lse, None, 3), "f.py::merge", params, {})
    assert honest(x, out, lse)[0] is view
    own = triton_library.returning_arguments(lambda **kw: {"out": _Tensor(999, (8,))}, "f.py::merge", params, {})
    with pytest.raises(triton_library.StrayOutput, match=r"f.py::merge returned a tensor of shape \(8,\)") as err:
        own(x, out, lse)
    assert "curated contract" in str(err.value)


# ---------------------------------------------------------------------------- merge_state_triton (the wheel)

MERGE = "attention.merge_state_triton"
#: the kernel's last store, and the same store skipping the last token (its output keeps the poison)
STORE = "        out,\n        mask=head_mask,\n"
SKIP_LAST = "        out,\n        mask=head_mask & (token_idx < num_tokens - 1),\n"


def wheel_task(index, op_id: str, tmp_path):
    """(task, its folder, its baseline regions) of a Triton op of the pinned wheel, extracted under tmp_path."""
    op = next(o for o in index.ops if o.id == op_id)
    task = triton_tasks.write_task(index, op, tmp_path / "work")
    folder = task_dir(tmp_path / "work", op_id)
    return task, folder, baseline_regions(read_task_files(folder, task), task)


@pytest.fixture
def merge_state(triton_wheel_index, tmp_path):
    return wheel_task(triton_wheel_index, MERGE, tmp_path)


def skip_last_token(regions: dict[str, str]) -> dict[str, str]:
    kernel = regions["merge_state_kernel"]
    assert kernel.count(STORE) == 1, "merge_state_kernel's last store changed: update STORE"
    return {**regions, "merge_state_kernel": kernel.replace(STORE, SKIP_LAST)}


def small_shapes(task):
    """One catalog shape per token bucket (T = 1, 64, 512), the first model's."""
    wanted = [next((s for s in task.shapes if s.sizes.get("num_tokens") == t), None) for t in (1, 64, 512)]
    return [s for s in wanted if s is not None]


def gpu_config(tmp_path) -> Config:
    return Config.model_validate({"work_dir": str(tmp_path / "w"), "harness": {"held_out_shapes": 3}})


@pytest.mark.wheel
@needs_triton
def test_the_cheat_compiles_so_only_the_gpu_checks_can_refuse_it(merge_state, tmp_path):
    """The GPU test below is needed: Triton's CPU check passes the cheating candidate."""
    task, folder, regions = merge_state
    cheat = Candidate(op_id=MERGE, id="cheat", parent="baseline", regions=skip_last_token(regions), coder="test")
    assert language_of(task).build.precheck(folder, task, cheat) is None
    assert build(task, folder, tmp_path, regions=cheat.regions).ok


@pytest.mark.gpu
@pytest.mark.wheel
def test_merge_state_triton_baseline_against_itself_on_the_gpu(merge_state, tmp_path):
    """The baseline's file loaded twice (two modules): every check passes bitwise, the timed graphs agree."""
    from optimize.harness.evaluate import evaluate
    from pipeline.run_records import Outcome

    task, folder, regions = merge_state
    shapes = small_shapes(task)
    itself = Candidate(op_id=MERGE, id="itself", parent="baseline", regions=dict(regions), coder="test")
    ev = evaluate(folder, task, itself, config=gpu_config(tmp_path), shapes=shapes)
    assert ev.outcome in (Outcome.ok, Outcome.slower), ev.detail  # slower only by noise: the same code
    assert ev.bitwise_equal and ev.checks_failed == 0 and ev.checks_passed >= 3 * len(shapes), ev.detail
    assert len(ev.timings) == len(shapes) and ev.timed_sets_validated > 0, ev.detail


@pytest.mark.gpu
@pytest.mark.wheel
def test_a_triton_candidate_that_skips_the_last_token_is_incorrect(merge_state, tmp_path):
    """The last token's output is never stored: the NaN poison survives there, and the harness says so."""
    from optimize.harness.evaluate import evaluate
    from pipeline.run_records import Outcome

    task, folder, regions = merge_state
    cheat = Candidate(op_id=MERGE, id="cheat", parent="baseline", regions=skip_last_token(regions), coder="test")
    ev = evaluate(folder, task, cheat, config=gpu_config(tmp_path), shapes=small_shapes(task))
    assert ev.outcome == Outcome.incorrect, ev.detail
    assert "output" in ev.detail, ev.detail


# ---------------------------------------------------------------------------- row_logsumexp: returned outputs

LSE = "srt.layers.logsumexp.row_logsumexp"
#: the launch's grid, and the same launch one row short (the last row's outputs keep the poison)
ALL_ROWS, ONE_SHORT = "_row_logsumexp_kernel[(num_rows,)]", "_row_logsumexp_kernel[(max(num_rows - 1, 1),)]"


@pytest.fixture
def row_logsumexp(triton_wheel_index, tmp_path):
    return wheel_task(triton_wheel_index, LSE, tmp_path)


@pytest.mark.wheel
def test_row_logsumexp_returns_both_outputs_and_its_library_says_so(row_logsumexp, tmp_path):
    task, folder, regions = row_logsumexp
    assert triton_library.returned_of(task) == {"out_max": 0, "out_log_sum": 1}
    assert triton_library.params_of(task) == ["x", "", ""]
    assert [r for r in regions if r.startswith("launch:")] and ALL_ROWS in regions["launch:_row_logsumexp_kernel"]
    report = build(task, folder, tmp_path)
    manifest = triton_library.TritonLibrary.model_validate_json(pathlib.Path(report.library or "").read_text())
    assert manifest.returned == {"out_max": 0, "out_log_sum": 1} and manifest.params == ["x", "", ""]


@pytest.mark.gpu
@pytest.mark.wheel
def test_row_logsumexp_outputs_it_allocates_are_checked_like_arguments_on_the_gpu(row_logsumexp, tmp_path):
    """Against itself every check passes; one row short, the poison the harness handed to the wrapper's
    torch.empty survives in the last row and the candidate is incorrect."""
    from optimize.harness.evaluate import evaluate
    from pipeline.run_records import Outcome

    task, folder, regions = row_logsumexp
    shapes = [s for s in task.shapes if s.model == "Llama-3.1-8B" and s.tokens in (1, 64, 512)]
    itself = Candidate(op_id=LSE, id="itself", parent="baseline", regions=dict(regions), coder="test")
    ev = evaluate(folder, task, itself, config=gpu_config(tmp_path), shapes=shapes)
    assert ev.outcome in (Outcome.ok, Outcome.slower), ev.detail
    assert ev.bitwise_equal and ev.checks_failed == 0 and ev.timed_sets_validated > 0, ev.detail
    launch = regions["launch:_row_logsumexp_kernel"].replace(ALL_ROWS, ONE_SHORT)
    short = Candidate(
        op_id=LSE, id="short", parent="baseline", regions={**regions, "launch:_row_logsumexp_kernel": launch}, coder="t"
    )
    ev = evaluate(folder, task, short, config=gpu_config(tmp_path), shapes=shapes)
    assert ev.outcome == Outcome.incorrect and "out_max" in ev.detail, ev.detail
