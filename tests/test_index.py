"""extract.index on the real SGLang tree (completeness, golden files, speed) and on small snippets.

Regenerate the golden files with ``UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_index.py``
after checking the diff by eye: they are the reviewed record of what the index
says about the ops Kernelsmith optimizes first.
"""

from __future__ import annotations

import pathlib
import re

import pytest
from golden import assert_golden

from extract.cxx import code_only
from extract.file_scan import scan_file
from extract.index import ScanResult, index_texts, scan_tree
from extract.macros import collect_macros
from pipeline.records import SourceInfo

GOLDEN = pathlib.Path(__file__).parent / "golden" / "index"
GOLDEN_FILES = {
    "activation": "kernels/jit/csrc/elementwise/activation.cuh",
    "rmsnorm": "kernels/jit/csrc/elementwise/rmsnorm.cuh",
    "fused_add_rmsnorm": "kernels/jit/csrc/elementwise/fused_add_rmsnorm.cuh",
    # kernels spelled through per-file macros (C4_KERNEL, WRITE_KERNEL; the
    # latter is defined differently in c128_v2.cuh)
    "c4_v2": "kernels/jit/csrc/deepseek_v4/c4_v2.cuh",
    # launched through a constexpr table of another struct's `kFn` members
    "small_gemm_bf16": "kernels/jit/csrc/gemm/small_gemm_bf16.cuh",
}


@pytest.fixture(scope="module")
def scan(sglang_source) -> ScanResult:
    return scan_tree(sglang_source)


@pytest.fixture(scope="module")
def texts(sglang_source, scan) -> dict[str, str]:
    root = pathlib.Path(sglang_source.root)
    return {d.path: (root / d.path).read_text(encoding="utf-8", errors="replace") for d in scan.files}


# --------------------------------------------------------------------------- independent regex

_NOISE = re.compile(r"//[^\n]*|/\*.*?\*/|^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.S | re.M)
_ATTRIBUTE = re.compile(r"\b__\w+__\s*\(")


def _without_attribute_calls(head: str) -> str:
    while match := _ATTRIBUTE.search(head):
        depth, end = 0, len(head)
        for j in range(match.end() - 1, len(head)):
            depth += {"(": 1, ")": -1}.get(head[j], 0)
            if depth == 0:
                end = j + 1
                break
        head = head[: match.start()] + " " + head[end:]
    return head


def _without_angle_groups(head: str) -> str:
    previous = None
    while previous != head:
        previous, head = head, re.sub(r"<[^<>]*>", " ", head)
    return head


def regex_definitions(text: str, marker: str) -> set[str]:
    """Names of functions whose head holds ``marker`` and that have a body.

    Deliberately simple and independent of tree-sitter: blank comments and
    preprocessor lines, then for each marker take the text up to the first
    ``{`` or ``;``; a ``{`` means a definition, and its name is the identifier
    right before the parameter list once attribute calls and template
    arguments are dropped.
    """
    code = _NOISE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)
    names = set()
    for match in re.finditer(rf"\b(?:{marker})\b", code):
        stop = re.compile(r"[{;]").search(code, match.end())
        if stop is None or stop.group() == ";":
            continue
        head = _without_angle_groups(_without_attribute_calls(code[match.end() : stop.start()]))
        name = re.search(r"([A-Za-z_]\w*)\s*\(", head)
        if name:
            names.add(name.group(1))
    return names


def _kernel_macros(texts: dict[str, str]) -> set[str]:
    """Object-like macros that expand (possibly through each other) to `__global__`."""
    defines = re.findall(r"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+([^\n]*)", "\n".join(texts.values()), re.M)
    found: set[str] = set()
    while True:
        pattern = r"\b(?:__global__" + "".join(f"|{re.escape(m)}" for m in found) + r")\b"
        more = {name for name, body in defines if re.search(pattern, body)} - found
        if not more:
            return found
        found |= more


def _simple(name: str) -> str:
    return "operator" if name.startswith("operator") else name


# --------------------------------------------------------------------------- real tree


def test_scan_speed_and_counts(scan, sglang_source):
    print(
        f"\nscan_tree: {scan.elapsed_s:.2f} s for {len(scan.files)} files "
        f"({sum(f.size for f in scan.files) / 1e6:.1f} MB): {len(scan.kernels)} kernels, "
        f"{len(scan.device_functions)} device functions, {len(scan.launchers)} launchers, "
        f"{len(scan.parse_issues)} parse issues"
    )
    assert scan.elapsed_s < 30, "the whole JIT tree should index in seconds; something regressed badly"
    assert len(scan.files) > 200
    assert all(f.path.startswith("kernels/jit/") for f in scan.files)
    assert scan.grammar == {s: "cuda" for s in (".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc")}
    assert {f.path for f in scan.files} == set(scan.includes)


def test_every_global_definition_in_the_text_is_indexed(scan, texts):
    indexed = {(k.file, _simple(k.name)) for k in scan.kernels}
    wanted = {(path, name) for path, text in texts.items() for name in regex_definitions(text, "__global__")}
    assert len(wanted) > 250
    missing = sorted(wanted - indexed)
    assert not missing, f"kernels the index lost: {missing}"


def test_kernels_spelled_through_macros_are_indexed(scan, texts):
    macros = _kernel_macros(texts)
    assert {"C4_KERNEL", "CLUSTER_TOPK_KERNEL"} <= macros
    indexed = {(k.file, _simple(k.name)) for k in scan.kernels}
    marker = "|".join(re.escape(m) for m in sorted(macros))
    wanted = {(path, name) for path, text in texts.items() for name in regex_definitions(text, marker)}
    assert len(wanted) > 20
    assert not sorted(wanted - indexed)


def test_every_device_definition_in_the_text_is_indexed(scan, texts):
    indexed = {(k.file, _simple(k.name)) for k in scan.device_functions}
    wanted = {
        (path, name)
        for path, text in texts.items()
        for name in regex_definitions(text, "__device__|SGL_DEVICE|SGL_DEVICE_HOST")
    }
    assert len(wanted) > 800
    assert not sorted(wanted - indexed)


def test_parse_issues_are_reported_and_scan_goes_on(scan):
    issue_files = sorted({i.file for i in scan.parse_issues})
    print(f"\n{len(issue_files)} files where tree-sitter hit errors or definitions were recovered from text:")
    for issue in scan.parse_issues:
        print(f"  {issue.file}:{issue.line}: {issue.message[:150]}")
    known = {f.path for f in scan.files}
    assert set(issue_files) <= known
    assert all(i.line is None or i.line >= 1 for i in scan.parse_issues)
    # files with issues still contribute definitions
    assert any(k.file in issue_files for k in scan.kernels)


def test_spans_are_whole_definitions(scan, sglang_source):
    root = pathlib.Path(sglang_source.root)
    cache: dict[str, bytes] = {}
    for record in scan.kernels + scan.device_functions:
        data = cache.setdefault(record.file, (root / record.file).read_bytes())
        text = data[record.start_byte : record.end_byte]
        assert text.rstrip().endswith(b"}"), (record.file, record.name)
        assert record.line == data.count(b"\n", 0, record.start_byte) + 1
        head = code_only(text).split(b"{", 1)[0]
        if record.template_params:
            assert text.startswith(b"template"), (record.file, record.name)
        if record.kind == "kernel":
            assert re.search(rb"\b__global__\b|\b[A-Z][A-Z0-9_]*KERNEL\b", head), (record.file, record.name)
        else:
            assert re.search(rb"__device__|DEVICE|DEVI\b", head), (record.file, record.name)
        # the span starts at a token, not in the middle of one
        assert record.start_byte == 0 or not data[record.start_byte - 1 : record.start_byte].isalnum()


def test_activation_launcher_follows_aliases(scan):
    launcher = next(lr for lr in scan.launchers if lr.qualified_name == "sglang::ActivationKernel")
    assert launcher.kind == "struct"
    assert launcher.launches == ["act_and_mul_kernel", "act_kernel"]
    assert {"run_activation", "run_activation_filtered", "run_unary_activation"} <= set(launcher.methods)


def test_include_graph(scan):
    includes = scan.includes["kernels/jit/csrc/elementwise/activation.cuh"]
    assert "kernels/jit/include/sgl_kernel/utils.cuh" in includes
    assert "<tvm/ffi/container/tensor.h>" in includes
    assert "<cmath>" in includes
    resolved = [i for incs in scan.includes.values() for i in incs if not i.startswith("<")]
    assert all(i in scan.includes for i in resolved)  # every resolved include is a scanned file


@pytest.mark.parametrize("name", sorted(GOLDEN_FILES))
def test_golden(scan, name):
    path = GOLDEN_FILES[name]
    actual = {
        "file": next(f.model_dump() for f in scan.files if f.path == path),
        "kernels": [k.model_dump() for k in scan.kernels if k.file == path],
        "device_functions": [d.model_dump() for d in scan.device_functions if d.file == path],
        "launchers": [lr.model_dump() for lr in scan.launchers if lr.file == path],
        "includes": scan.includes[path],
        "parse_issues": [i.model_dump() for i in scan.parse_issues if i.file == path],
    }
    golden = GOLDEN / f"{name}.json"
    assert_golden(golden, actual)


def test_pool_and_single_process_agree(sglang_source, scan):
    single = scan_tree(sglang_source, workers=1)
    assert single.model_dump(exclude={"elapsed_s"}) == scan.model_dump(exclude={"elapsed_s"})


# --------------------------------------------------------------------------- snippets

LAUNCHERS = b"""
#include <sgl_kernel/utils.cuh>
#include "local.cuh"
#include "../missing.h"
namespace demo {
template <typename T, bool kPdl>
__global__ void alpha_kernel(const __grid_constant__ Params p) { p.run(); }
template <typename T>
__global__ void beta_kernel(T* out) {}
__global__ void gamma_kernel(int n) {}
__global__ void delta_kernel(int n) {}
__global__ void unused_kernel(int n) {}
__global__ void declared_only(int n);

template <typename T>
struct Alias {
  using fn_t = decltype(&alpha_kernel<T, true>);
  template <bool kPdl>
  static constexpr fn_t member = alpha_kernel<T, kPdl>;
  template <bool kPdl>
  static fn_t select_kernel(int which) {
    if (which) return member<kPdl>;
    return nullptr;
  }
  static void run(int which) {
    const auto kernel = select_kernel<true>(which);
    LaunchKernel(1, 32, device).enable_pdl(true)(kernel, params);
  }
  static void run_other() { helper(); }
  void not_static() {}
};

struct Chevron {
  static void go(float* out) { beta_kernel<float><<<1, 32, 0, stream>>>(out); }
};

void api_launch() {
  cudaLaunchKernelEx(&config, gamma_kernel, 4);
}

void lambda_launch(int n) {
  const auto run = [&](auto kernel) { host::LaunchKernel(1, 32, device)(kernel, n); };
  run(delta_kernel);
}

void named_launch() {
  auto launch = LaunchKernel(1, 32, device);
  launch(gamma_kernel, 3);
}

template <auto kKernel>
void shared_helper(int n) { LaunchKernel(1, 32, device)(kKernel, n); }

struct ThroughHelper {
  static void run(int n) { shared_helper<beta_kernel<float>>(n); }
};

#define DEMO_LAUNCH(K) LaunchKernel(1, 32, device)(K, 1)
void macro_launch() { DEMO_LAUNCH(delta_kernel); }
}  // namespace demo
"""


@pytest.fixture(scope="module")
def snippet_scan() -> ScanResult:
    return index_texts(
        {
            "kernels/jit/csrc/demo/launchers.cuh": LAUNCHERS,
            "kernels/jit/csrc/demo/local.cuh": b"#pragma once\n#include <sgl_kernel/utils.cuh>\n",
            "kernels/jit/include/sgl_kernel/utils.cuh": (
                b"#pragma once\n#define SGL_DEVICE __forceinline__ __device__\n"
            ),
        },
        search=["kernels/jit/include"],
        workers=1,
    )


def test_snippet_kernels_and_declarations(snippet_scan):
    names = [k.name for k in snippet_scan.kernels]
    assert names == ["alpha_kernel", "beta_kernel", "gamma_kernel", "delta_kernel", "unused_kernel"]
    alpha = snippet_scan.kernels[0]
    assert alpha.qualified_name == "demo::alpha_kernel"
    assert [(p.name, p.type) for p in alpha.template_params] == [("T", "typename"), ("kPdl", "bool")]
    assert [(p.name, p.type) for p in alpha.params] == [("p", "const __grid_constant__ Params")]
    assert LAUNCHERS[alpha.start_byte : alpha.end_byte].startswith(b"template <typename T, bool kPdl>\n__global__")


def test_snippet_launchers(snippet_scan):
    by_name = {lr.name: lr for lr in snippet_scan.launchers}
    assert by_name["Alias"].kind == "struct"
    assert by_name["Alias"].launches == ["alpha_kernel"]  # kernel -> select_kernel -> member -> alpha_kernel
    assert by_name["Alias"].methods == ["select_kernel", "run", "run_other"]
    assert by_name["Chevron"].launches == ["beta_kernel"]
    assert by_name["api_launch"].launches == ["gamma_kernel"]  # the kernel is cudaLaunchKernelEx's 2nd argument
    assert by_name["lambda_launch"].launches == ["delta_kernel"]  # through the lambda's argument
    assert by_name["named_launch"].launches == ["gamma_kernel"]
    assert by_name["ThroughHelper"].launches == ["beta_kernel"]  # through a same-file launcher function
    assert by_name["macro_launch"].launches == ["delta_kernel"]  # a launch written in a #define
    assert "unused_kernel" not in {k for lr in snippet_scan.launchers for k in lr.launches}


def test_snippet_includes(snippet_scan):
    assert snippet_scan.includes["kernels/jit/csrc/demo/launchers.cuh"] == [
        "kernels/jit/include/sgl_kernel/utils.cuh",
        "kernels/jit/csrc/demo/local.cuh",
        "<../missing.h>",
    ]
    assert snippet_scan.includes["kernels/jit/csrc/demo/local.cuh"] == ["kernels/jit/include/sgl_kernel/utils.cuh"]


def test_device_macros_from_another_file_are_understood():
    macros = collect_macros(
        [b"#define SGL_DEVICE __forceinline__ __device__\n#define MY_KERNEL __global__ __launch_bounds__(128, 2)\n"]
    )
    assert macros["SGL_DEVICE"] == "device" and macros["MY_KERNEL"] == "kernel"
    data = (
        b"namespace n {\nstruct S {\n  SGL_DEVICE float twice(float x) { return 2 * x; }\n"
        b"  SGL_DEVICE Storage& operator()(int i) { return data[i]; }\n};\n"
        b"template <int N>\nMY_KERNEL void k(float* x) { x[0] = N; }\n"
        b"SGL_DEVICE float declared(float x);\n}\n"
    )
    result = scan_file("x.cuh", data, macros)
    assert [(d.qualified_name, d.kind) for d in result.device_functions] == [
        ("n::S::twice", "device_function"),
        ("n::S::operator()", "device_function"),
    ]
    (kernel,) = result.kernels
    assert kernel.name == "k" and kernel.template_params[0].name == "N"
    assert data[kernel.start_byte : kernel.end_byte] == b"template <int N>\nMY_KERNEL void k(float* x) { x[0] = N; }"
    assert kernel.line == 6


def test_garbled_definitions_are_recovered_and_reported():
    data = (
        b"#define PARAMS int a, int b\n"
        b"__global__ void fine(int n) {}\n"
        b"__global__ void from_macro(PARAMS){};\n"
        b"int after = 1;\n"
    )
    result = scan_file("g.cuh", data, {})
    assert [k.name for k in result.kernels] == ["fine", "from_macro"]
    recovered = result.kernels[1]
    assert data[recovered.start_byte : recovered.end_byte] == b"__global__ void from_macro(PARAMS){}"
    assert any("from_macro" in i.message and i.line == 3 for i in result.issues)


def test_broken_and_unreadable_files_never_stop_the_scan(tmp_path):
    root = tmp_path / "sglang"
    csrc = root / "kernels" / "jit" / "csrc"
    csrc.mkdir(parents=True)
    (csrc / "good.cuh").write_bytes(b"__global__ void good_kernel(int n) {}\n")
    (csrc / "broken.cuh").write_bytes(b"int f( {\n\n__global__ void still_found(int n) { if (n) { } }\n")
    (csrc / "latin1.cu").write_bytes(b"// caf\xe9\n__global__ void latin_kernel() {}\n")
    (csrc / "gone.cuh").symlink_to(csrc / "does_not_exist.cuh")
    (csrc / "notes.txt").write_text("__global__ void not_source() {}")
    source = SourceInfo(kind="package", root=str(root), jit_dirs=["kernels/jit"])
    result = scan_tree(source)
    assert {k.name for k in result.kernels} == {"good_kernel", "still_found", "latin_kernel"}
    assert [f.path for f in result.files] == [
        "kernels/jit/csrc/broken.cuh",
        "kernels/jit/csrc/good.cuh",
        "kernels/jit/csrc/latin1.cu",
    ]
    issues = {i.file: i for i in result.parse_issues}
    assert "could not read" in issues["kernels/jit/csrc/gone.cuh"].message
    assert issues["kernels/jit/csrc/broken.cuh"].line == 1
