"""Tests of pipeline.build on a real task cut by hand from the real sglang wheel.

The compile tests (``@pytest.mark.nvcc``) build SGLang's activation kernel for
sm_90a with the real nvcc and tvm-ffi. A cold build takes 7-16 s on the 2-core
CI machine, so one linked bf16 module is built once per module (``built``) and
the other tests reuse it or its cache entry.
"""

from __future__ import annotations

import ctypes
import hashlib
import pathlib
import shutil
import subprocess
import threading
import time

import pytest

from pipeline import build as B
from pipeline import build_plan as P
from pipeline import compiler_output as CO
from pipeline.records import (
    BuildRecipe,
    BuildReport,
    Contract,
    FileDigest,
    Instantiation,
    Span,
    Task,
)

GOLDEN = pathlib.Path(__file__).parent / "golden" / "ptxas"
ACTIVATION = "kernels/jit/csrc/elementwise/activation.cuh"
CFLAGS = ["-DSGL_CUDA_ARCH=900", "-std=c++20", "-O3", "--expt-relaxed-constexpr", "--use_fast_math"]
KERNEL_HEAD = b"template <\n    typename T,\n    ActivationKind kAct,"
KERNEL_TAIL = b"struct UnaryActivationParams"


def _inst(dtype: str, cpp: str) -> Instantiation:
    return Instantiation(
        dtype=dtype,
        module_args=["activation", cpp, "true"],
        template_args=[cpp, "true"],
        wrappers=[("run_activation", f"ActivationKernel<{cpp}, true>::run_activation")],
    )


BF16 = _inst("bf16", "bf16_t")
FP16 = _inst("fp16", "fp16_t")


def make_task(task_dir: pathlib.Path, source) -> Task:
    """A task folder as extract/tasks.py lays it out, made by hand from the wheel."""
    root = pathlib.Path(source.root)
    rels = [ACTIVATION] + [
        p.relative_to(root).as_posix() for p in sorted((root / "kernels/jit/include").rglob("*")) if p.is_file()
    ]
    digests = []
    for rel in rels:
        target = task_dir / "src" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / rel, target)  # copyfile: the wheel is read-only, our copy must not be
        data = target.read_bytes()
        digests.append(FileDigest(path=rel, sha256=hashlib.sha256(data).hexdigest(), size=len(data)))
    text = (task_dir / "src" / ACTIVATION).read_bytes()
    start = text.index(KERNEL_HEAD)
    end = text.rindex(b"}\n", 0, text.index(KERNEL_TAIL)) + 1
    return Task(
        op_id="activation.silu_and_mul",
        module="kernels/ops/activation/activation.py",
        public_functions=["silu_and_mul"],
        entry_points=["run_activation"],
        source=source,
        files=digests,
        instantiations=[BF16, FP16],
        build=BuildRecipe(
            cuda_files=[ACTIVATION], include_dirs=["@tvm_ffi", "@dlpack", "kernels/jit/include"], cuda_cflags=CFLAGS
        ),
        editable=[Span(file=ACTIVATION, start_byte=start, end_byte=end, name="act_and_mul_kernel", kind="kernel")],
        contract=Contract(entry="run_activation", args=[], symbols=["num_tokens", "hidden_size"]),
        shapes=[],
    )


def tree_digest(folder: pathlib.Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def task_setup(tmp_path_factory, sglang_source):
    task_dir = tmp_path_factory.mktemp("task") / "activation.silu_and_mul"
    task = make_task(task_dir, sglang_source)
    return task_dir, task, tmp_path_factory.mktemp("builds")


@pytest.fixture(scope="module")
def built(task_setup):
    """The one cold, linked bf16 build every compile test shares."""
    task_dir, task, cache = task_setup
    before = tree_digest(task_dir)
    report = B.build(task_dir, task, [BF16], cache_root=cache)
    assert tree_digest(task_dir) == before, "build wrote into the task folder"
    return report


# --------------------------------------------------------------------------- ptxas


def test_parse_ptxas_activation_report_captured_from_nvcc13():
    """Captured with nvcc 13.0 (`-Xptxas=-v`, sm_90a) on ActivationKernel<bf16_t, true>::run_activation."""
    resources = CO.parse_ptxas((GOLDEN / "activation_bf16_sm90a_nvcc13.txt").read_text())
    assert len(resources) == 9
    first = resources[0]
    assert first.kernel == (
        "_ZN6sglang18act_and_mul_kernelI13__nv_bfloat16LNS_14ActivationKindE2ELb1ELb0ELb0ELb0ELb0ELb0EEEvNS_16ActivationParamsE"
    )
    assert (first.registers, first.barriers, first.stack_bytes, first.spill_stores, first.smem_bytes) == (
        26,
        0,
        0,
        0,
        0,
    )
    assert [r.registers for r in resources] == [26, 32, 26, 32, 27, 26, 32, 27, 27]
    assert all(r.kernel.startswith("_ZN6sglang18act_and_mul_kernel") for r in resources)


def test_parse_ptxas_spills_smem_and_device_functions():
    """Captured with nvcc 13.0 -maxrregcount=32 on golden/ptxas/spill_smem_devfn.cu: an extern "C"
    kernel, a spilling template kernel, a kernel with shared memory calling a noinline device function."""
    resources = {r.kernel: r for r in CO.parse_ptxas((GOLDEN / "spill_smem_devfn_sm90a_nvcc13.txt").read_text())}
    assert set(resources) == {"plain_c", "_Z12spill_kernelILi96EEvPfPKf", "_Z11smem_kernelPfPKfi"}  # not _Z6helperfi
    spill = resources["_Z12spill_kernelILi96EEvPfPKf"]
    assert (spill.registers, spill.stack_bytes, spill.spill_stores, spill.spill_loads) == (32, 616, 868, 928)
    smem = resources["_Z11smem_kernelPfPKfi"]
    assert (smem.registers, smem.barriers, smem.smem_bytes, smem.stack_bytes, smem.spill_stores) == (
        32,
        1,
        4096,
        128,
        0,
    )
    assert resources["plain_c"].registers == 8


def test_parse_ptxas_older_used_line_with_cmem():
    """CUDA 12.x spelling of the Used line (cmem banks listed; written from that format, not captured here)."""
    text = (
        "ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90a'\n"
        "ptxas info    : Function properties for _Z1kPf\n"
        "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, 360 bytes cmem[0], 8 bytes cmem[2]\n"
    )
    (r,) = CO.parse_ptxas(text)
    assert (r.registers, r.barriers, r.smem_bytes, r.cmem_bytes, r.stack_bytes, r.spill_stores, r.spill_loads) == (
        40,
        1,
        2048,
        360,
        8,
        4,
        4,
    )


def test_parse_ptxas_ignores_other_text_and_truncation():
    assert CO.parse_ptxas("") == []
    assert CO.parse_ptxas("cuda.cu(3): warning: unused\nptxas info    : 0 bytes gmem\n") == []
    truncated = (
        "ptxas info    : Compiling entry function '_Z1kv' for 'sm_90a'\nptxas info    : Function properties for _Z1kv\n"
    )
    assert CO.parse_ptxas(truncated) == []


def test_strip_ptxas_keeps_warnings_only():
    text = (GOLDEN / "activation_bf16_sm90a_nvcc13.txt").read_text()
    assert CO.strip_ptxas(text) == ""
    assert CO.strip_ptxas("x.cuh(3): warning #177-D: unused\n" + text) == "x.cuh(3): warning #177-D: unused\n"


# --------------------------------------------------------------------------- wrapper, spans, diagnostics


def test_export_names_and_wrapper_text():
    assert P.export_name("run_activation", BF16) == "run_activation__bf16"
    recipe = BuildRecipe(cuda_files=[ACTIVATION], include_dirs=["kernels/jit/include"], cuda_cflags=CFLAGS)
    text = P.wrapper_source(recipe, [BF16, FP16])
    lines = text.splitlines()
    assert "#include <tvm/ffi/function.h>" in lines and "#include <tvm/ffi/container/tensor.h>" in lines
    assert f'#include "src/{ACTIVATION}"' in lines
    ns = lines.index("namespace sglang {")
    assert lines[ns + 1 :] == [
        "TVM_FFI_DLL_EXPORT_TYPED_FUNC(run_activation__bf16, (ActivationKernel<bf16_t, true>::run_activation));",
        "TVM_FFI_DLL_EXPORT_TYPED_FUNC(run_activation__fp16, (ActivationKernel<fp16_t, true>::run_activation));",
        "}  // namespace sglang",
    ]
    with pytest.raises(ValueError, match="requested twice"):
        P.wrapper_source(recipe, [BF16, BF16])
    with pytest.raises(ValueError, match="at least one"):
        P.wrapper_source(recipe, [])


def test_relocate_spans_follows_region_growth():
    spans = [
        Span(file="a.cuh", start_byte=50, end_byte=60, name="second"),
        Span(file="a.cuh", start_byte=10, end_byte=20, name="first"),
        Span(file="b.cuh", start_byte=5, end_byte=9, name="other"),
    ]
    moved = CO.relocate_spans(spans, {"first": "x" * 25, "other": "é"})  # +15 bytes in a.cuh; é is 2 bytes
    assert [(s.name, s.start_byte, s.end_byte) for s in moved] == [
        ("second", 65, 75),
        ("first", 10, 35),
        ("other", 5, 7),
    ]
    original = b"0123456789" + b"A" * 10 + b"." * 30 + b"B" * 10 + b"tail"
    spliced = original[:10] + b"x" * 25 + original[20:]
    assert spliced[moved[0].start_byte : moved[0].end_byte] == b"B" * 10


def test_annotate_diagnostics_maps_to_region_lines():
    content = b"line1\nline2\nvoid k() {\n  a;\n  b;\n}\nline7\n"
    start = content.index(b"void k")
    span = Span(file="k/x.cuh", start_byte=start, end_byte=content.index(b"}\n") + 1, name="k")
    text = (
        'k/x.cuh(5): error: identifier "b" is undefined\n'
        "      b;\n"
        "k/x.cuh(7): warning: something\n"
        "other.h(5): error: unrelated\n"
        '          detected during instantiation of "k" at line 4 of k/x.cuh\n'
        "k/x.cuh:3:1: error: gcc style\n"
    )
    out = CO.annotate_diagnostics(text, {"k/x.cuh": content}, [span], overridden={"k/x.cuh"}).splitlines()
    assert out[0].endswith("[region k line 3]")
    assert out[1] == "      b;"
    assert out[2].endswith("[k/x.cuh line 7: outside editable regions]")
    assert out[3] == "other.h(5): error: unrelated"
    assert out[4].endswith("[region k line 2]")
    assert out[5].endswith("[region k line 1]")


def test_publish_losing_the_race_keeps_the_winner(tmp_path):
    entry = tmp_path / "key"
    winner = tmp_path / ".staging-winner"
    loser = tmp_path / ".staging-loser"
    for folder, payload in ((winner, b"winner"), (loser, b"loser")):
        folder.mkdir()
        (folder / P.LIBRARY_NAME).write_bytes(payload)
        report = BuildReport(ok=True, key="key", seconds=1.0, library=P.LIBRARY_NAME)
        (folder / P.REPORT_NAME).write_text(report.model_dump_json())
    assert B._publish(winner, entry) is True
    assert B._publish(loser, entry) is False
    assert (entry / P.LIBRARY_NAME).read_bytes() == b"winner"
    assert not loser.exists()
    assert B._read_entry(entry).library == str(entry / P.LIBRARY_NAME)


def test_publish_replaces_a_broken_entry(tmp_path):
    entry = tmp_path / "key"
    entry.mkdir()
    (entry / "junk").write_text("half a build from a crash")  # no build.json
    staging = tmp_path / ".staging-x"
    staging.mkdir()
    (staging / P.LIBRARY_NAME).write_bytes(b"so")
    (staging / P.REPORT_NAME).write_text(
        BuildReport(ok=True, key="key", seconds=1.0, library=P.LIBRARY_NAME).model_dump_json()
    )
    assert B._publish(staging, entry) is True
    assert B._read_entry(entry) is not None and not (entry / "junk").exists()


# --------------------------------------------------------------------------- keys (need nvcc for the fingerprint)


@pytest.mark.nvcc
def test_cache_key_covers_flags_sources_overrides_and_is_location_free(task_setup, tmp_path):
    task_dir, task, _ = task_setup
    base = P.build_key(task_dir, task, [BF16])
    assert base == P.build_key(task_dir, task, [BF16])
    assert base != P.build_key(task_dir, task, [BF16], extra_cuda_cflags=["-lineinfo"])
    assert base != P.build_key(
        task_dir, task.model_copy(update={"build": task.build.model_copy(update={"cuda_cflags": CFLAGS[:-1]})}), [BF16]
    )
    assert base != P.build_key(task_dir, task, [BF16], link=False)
    assert base != P.build_key(task_dir, task, [FP16])
    original = (task_dir / "src" / ACTIVATION).read_bytes()
    assert base != P.build_key(task_dir, task, [BF16], overrides={ACTIVATION: original + b" "})
    assert base == P.build_key(task_dir, task, [BF16], overrides={ACTIVATION: original})
    # a byte of a header the unit includes indirectly
    moved = tmp_path / "elsewhere"
    shutil.copytree(task_dir, moved)
    assert P.build_key(moved, task, [BF16]) == base  # where the task lives is not an input
    vec = moved / "src" / "kernels/jit/include/sgl_kernel/vec.cuh"
    vec.write_bytes(vec.read_bytes() + b"\n")
    assert P.build_key(moved, task, [BF16]) != base


def _fake_flashinfer(root: pathlib.Path, header: bytes = b"#pragma once\n") -> pathlib.Path:
    for rel in ("data/cutlass/include/cute", "data/cutlass/tools/util/include"):
        (root / "flashinfer" / rel).mkdir(parents=True, exist_ok=True)
    (root / "flashinfer/data/cutlass/include/cute/tensor.hpp").write_bytes(header)
    return root


@pytest.mark.nvcc
def test_a_header_dependency_is_resolved_keyed_by_contents_and_named_when_missing(task_setup, tmp_path, monkeypatch):
    """SGLang's `extra_dependencies=["cutlass"]` (qprep_bf16_fp8_sm90, convrot_int8):
    extract records `@dep:cutlass`; the builder adds flashinfer's bundled CUTLASS
    folders, and the key takes their contents, not their place."""
    from pipeline import deps
    from pipeline.errors import ConfigError

    task_dir, task, _ = task_setup
    needs = task.model_copy(
        update={"build": task.build.model_copy(update={"include_dirs": [*task.build.include_dirs, "@dep:cutlass"]})}
    )
    monkeypatch.setattr(deps.importlib.util, "find_spec", lambda name: None)  # no installed flashinfer here
    monkeypatch.delenv(deps.DEPS_DIR_ENV, raising=False)
    with pytest.raises(ConfigError, match="make deps"):
        P.plan(task_dir, needs, [BF16])
    one = _fake_flashinfer(tmp_path / "one")
    monkeypatch.setenv(deps.DEPS_DIR_ENV, str(one))
    the_plan = P.plan(task_dir, needs, [BF16])
    assert "-I@dep:cutlass#0" in the_plan.compile_args and "-I@dep:cutlass#1" in the_plan.compile_args
    resolved = the_plan.resolve(the_plan.compile_args)
    assert f"-I{one}/flashinfer/data/cutlass/include" in resolved
    assert the_plan.key != P.plan(task_dir, task, [BF16]).key
    monkeypatch.setenv(deps.DEPS_DIR_ENV, str(_fake_flashinfer(tmp_path / "two")))
    assert P.plan(task_dir, needs, [BF16]).key == the_plan.key  # the same headers elsewhere
    monkeypatch.setenv(deps.DEPS_DIR_ENV, str(_fake_flashinfer(tmp_path / "three", b"#pragma once // v2\n")))
    assert P.plan(task_dir, needs, [BF16]).key != the_plan.key  # a changed header
    with pytest.raises(ConfigError, match="not one kernelsmith can provide"):
        deps.find("mathdx")


@pytest.mark.nvcc
def test_override_paths_must_stay_inside_the_tree(task_setup):
    task_dir, task, _ = task_setup
    for bad in ("../escape.cuh", "/abs/x.cuh"):
        with pytest.raises(ValueError, match="inside it"):
            P.build_key(task_dir, task, [BF16], overrides={bad: b""})


# --------------------------------------------------------------------------- real builds


@pytest.mark.nvcc
def test_cold_build_links_a_module_with_resources(built):
    assert built.ok, built.stderr
    assert not built.cached
    library = pathlib.Path(built.library)
    assert library.is_file() and library.name == P.LIBRARY_NAME and library.parent.name == built.key
    assert built.resources and all(r.registers > 0 for r in built.resources)
    assert all("act_and_mul_kernel" in (r.demangled or "") for r in built.resources)
    assert "ptxas info" not in built.stderr
    entry = library.parent
    assert {p.name for p in entry.iterdir()} == {
        P.LIBRARY_NAME,
        P.REPORT_NAME,
        P.INPUTS_NAME,
        P.LOG_NAME,
        P.WRAPPER_NAME,
    }
    assert not list(entry.parent.glob(".staging-*"))
    symbols = subprocess.run(["nm", "-D", str(library)], capture_output=True, text=True, check=True).stdout
    assert "__tvm_ffi_run_activation__bf16" in symbols


@pytest.mark.nvcc
def test_built_module_loads_through_tvm_ffi(built):
    """The same loading path SGLang uses; no GPU needed to open the module."""
    tvm_ffi = pytest.importorskip("tvm_ffi")
    from pipeline.toolchain import find_nvcc

    cudart = sorted(find_nvcc().lib_dir.glob("libcudart.so.*"))
    assert cudart, "toolkit without a versioned libcudart"
    ctypes.CDLL(str(cudart[0]), mode=ctypes.RTLD_GLOBAL)  # the loader path lacks the toolkit's lib64 on CI
    module = tvm_ffi.load_module(built.library)
    assert callable(module["run_activation__bf16"])


@pytest.mark.nvcc
def test_second_build_is_a_cache_hit(built, task_setup):
    task_dir, task, cache = task_setup
    start = time.monotonic()
    again = B.build(task_dir, task, [BF16], cache_root=cache)
    assert time.monotonic() - start < 2.0
    assert again.cached and again.ok and again.key == built.key and again.library == built.library
    assert again.resources == built.resources


@pytest.mark.nvcc
def test_concurrent_same_key_builds_compile_once(task_setup):
    """Three threads ask for one cold key: one compiles, the others wait and hit its entry."""
    task_dir, task, cache = task_setup
    results: list[BuildReport] = []

    def one() -> None:
        results.append(B.build(task_dir, task, [BF16], cache_root=cache, extra_cuda_cflags=["-DKS_CONCURRENCY_PROBE"]))

    threads = [threading.Thread(target=one) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 3 and all(r.ok for r in results)
    assert len({r.key for r in results}) == 1 and len({r.library for r in results}) == 1
    assert sorted(r.cached for r in results) == [False, True, True]


@pytest.mark.nvcc
def test_build_many_reports_in_order_and_maps_errors_to_the_region(built, task_setup):
    task_dir, task, cache = task_setup
    before = tree_digest(task_dir)
    original = (task_dir / "src" / ACTIVATION).read_bytes()
    broken = original.replace(b"const auto offset = tid % num_vecs;", b"const int broken = ;")
    assert broken != original
    span = task.editable[0]
    region_line = broken[span.start_byte : broken.index(b"const int broken")].count(b"\n") + 1
    bad_region = broken[span.start_byte : span.end_byte - len(original) + len(broken)].decode()
    editable = CO.relocate_spans(task.editable, {span.name: bad_region})
    jobs = [
        B.BuildJob(task_dir, task, (BF16,), cache),
        B.BuildJob(task_dir, task, (BF16,), cache, overrides={ACTIVATION: broken}, editable=tuple(editable)),
    ]
    good, bad = B.build_many(jobs, max_workers=2)
    assert good.ok and good.cached and good.key == built.key
    assert not bad.ok and bad.library is None and bad.key != built.key
    assert "expected an expression" in bad.stderr
    error_line = next(line for line in bad.stderr.splitlines() if "expected an expression" in line)
    assert error_line.startswith(f"{ACTIVATION}(")  # package-relative, no staging folder
    assert f"[region act_and_mul_kernel line {region_line}]" in error_line
    assert ".staging-" not in bad.stderr
    assert not (cache / bad.key).exists(), "failures are not cached"
    assert tree_digest(task_dir) == before


@pytest.mark.nvcc
def test_timeout_is_a_failed_report_not_an_exception(task_setup):
    task_dir, task, cache = task_setup
    start = time.monotonic()
    report = B.build(task_dir, task, [BF16], cache_root=cache, extra_cuda_cflags=["-DKS_TIMEOUT_PROBE"], timeout_s=1)
    assert time.monotonic() - start < 10
    assert not report.ok and "timed out" in report.stderr
    assert not (cache / report.key).exists() and not list(cache.glob(".staging-*"))


@pytest.mark.nvcc
def test_two_instantiations_in_one_object(task_setup):
    """link=False stops at the object; both dtypes' exports and kernels are in it."""
    task_dir, task, cache = task_setup
    report = B.build(task_dir, task, [BF16, FP16], cache_root=cache, link=False)
    assert report.ok, report.stderr
    obj = pathlib.Path(report.library)
    assert obj.name == P.OBJECT_NAME and obj.is_file()
    symbols = subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout
    assert "__tvm_ffi_run_activation__bf16" in symbols and "__tvm_ffi_run_activation__fp16" in symbols
    kernels = " ".join(r.demangled or r.kernel for r in report.resources)
    assert "__nv_bfloat16" in kernels and "__half" in kernels


def test_build_raises_toolchain_error_not_a_failed_report(monkeypatch, tmp_path, sglang_source):
    """A missing nvcc must stop the run, not be blamed on the candidate."""
    from pipeline.errors import ToolchainError

    task = make_task(tmp_path / "task", sglang_source)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nothing-here"))
    with pytest.raises(ToolchainError, match="no bin/nvcc"):
        B.build(tmp_path / "task", task, [BF16], cache_root=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_first_error_quotes_the_line_that_says_why():
    from pipeline.compiler_output import first_error

    nvcc = 'a.cuh(3): warning: x\na.cuh(9): error: identifier "y" is undefined\n1 error detected\n'
    assert first_error(nvcc) == 'a.cuh(9): error: identifier "y" is undefined'
    assert (
        first_error("2 errors detected in the compilation of cuda.cu\n")
        == "2 errors detected in the compilation of cuda.cu"
    )
    assert first_error("nvcc failed (exit 1)\nnvcc fatal   : Unknown option '-ffp-contract=off'\n") == (
        "nvcc fatal   : Unknown option '-ffp-contract=off'"
    )
    assert first_error("") == "failed" and len(first_error("error " * 100)) == 300


def test_shared_compilers_bound_the_compiler_processes_of_every_thread_together(tmp_path):
    """Lanes of the scale-out pool each build with their own pool; under shared_compilers(1) two
    threads' compilers run one after the other, and the wait is not charged to a build's timeout."""

    def two_at_once() -> float:
        start = time.monotonic()
        runs = []
        threads = [
            threading.Thread(target=lambda: runs.append(B._run(["sleep", "0.6"], tmp_path, timeout_s=0.9)))
            for _ in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [r.returncode for r in runs] == [0, 0], "the second compiler's wait for its slot did not time it out"
        return time.monotonic() - start

    assert two_at_once() < 1.1
    with B.shared_compilers(1):
        assert two_at_once() >= 1.2
    assert B._compiler_slots is None
