"""source.treesitter: the py-tree-sitter seam, its API-drift handling and the grammar choice."""

from __future__ import annotations

import pathlib

import pytest
import tree_sitter

from source import treesitter as ts

SNIPPET = b"""
namespace outer {
template <typename T>
__global__ __launch_bounds__(128) void first_kernel(const __grid_constant__ P p) { body(); }
__device__ int helper(int x) { return x; }
struct Launch {
  static void run() {
    first_kernel<float><<<1, 32>>>(p);
    LaunchKernel(1, 32, dev).enable_pdl(true)(second_kernel, p);
    cudaLaunchKernelEx(&config, third_kernel, p);
  }
};
}
"""


def _names(nodes, data=SNIPPET):
    return [data[n.start_byte : n.end_byte].decode() for n in nodes]


def test_parsers_and_languages_are_cached_per_grammar():
    assert ts.parser("cuda") is ts.parser("cuda")
    assert ts.parser("cuda") is not ts.parser("cpp")
    assert ts.language("cuda") is ts.language("cuda")
    with pytest.raises(ValueError, match="unknown grammar"):
        ts.language("rust")


def test_grammar_for_every_suffix_is_cuda_as_measured():
    for suffix in (".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc"):
        assert ts.grammar_for(f"kernels/jit/csrc/x{suffix}") == "cuda"
    assert ts.grammar_for(pathlib.PurePosixPath("A.CUH")) == "cuda"


def test_captures_returns_expected_names_on_a_snippet():
    tree = ts.parse(SNIPPET, "cuda")
    found = ts.captures("definitions", tree.root_node)
    assert set(found) == {"function"}
    declarators = [n.child_by_field_name("declarator").child_by_field_name("declarator") for n in found["function"]]
    names = _names(declarators)
    assert names == ["first_kernel", "helper", "run"]  # document order

    launches = ts.captures("launches", tree.root_node)
    assert {"chevron", "kernel", "config", "launch", "ctor", "helper_call", "helper", "runtime", "api", "args"} <= set(
        launches
    )
    assert "first_kernel<float>" in _names(launches["kernel"])
    assert "second_kernel" in _names(launches["kernel"])
    assert _names(launches["api"]) == ["cudaLaunchKernelEx"]


def test_matches_groups_captures_per_match_in_document_order():
    tree = ts.parse(SNIPPET, "cuda")
    found = ts.matches("launches", tree.root_node)
    kinds = [next(k for k in ("chevron", "launch", "helper_call", "runtime") if k in m) for m in found]
    # the LaunchKernel(...) chain also matches the generic helper pattern on its
    # inner calls; the first chevron and the API call are unambiguous.
    assert kinds[0] == "chevron" and kinds[-1] == "runtime"
    assert "launch" in kinds and "helper_call" in kinds
    assert all(isinstance(v, list) for m in found for v in m.values())
    starts = [min(n.start_byte for ns in m.values() for n in ns) for m in found]
    assert starts == sorted(starts)


class _OldStyleQuery:
    """Stands in for a py-tree-sitter <= 0.24 Query (no QueryCursor)."""

    def __init__(self, captures_result, matches_result=()):
        self._captures = captures_result
        self._matches = list(matches_result)

    def captures(self, node):
        return self._captures

    def matches(self, node):
        return self._matches


def test_captures_absorbs_the_list_api_of_old_versions(monkeypatch):
    tree = ts.parse(SNIPPET, "cuda")
    real = ts.captures("definitions", tree.root_node)["function"]
    monkeypatch.delattr(tree_sitter, "QueryCursor")
    stand_ins = {
        # <= 0.22: a list of (node, capture name) pairs, in any order
        "old": _OldStyleQuery([(real[2], "function"), (real[0], "function"), (real[1], "function")]),
        # 0.23-0.24: a dict of lists
        "middle": _OldStyleQuery({"function": [real[1], real[0], real[2]]}),
        # matches: 0.22 gave one node per capture instead of a list
        "old_matches": _OldStyleQuery([], [(0, {"function": real[1]}), (0, {"function": [real[0]]})]),
    }
    monkeypatch.setattr(ts, "load_query", stand_ins.__getitem__)
    assert ts.captures("old", tree.root_node) == {"function": real}
    assert ts.captures("middle", tree.root_node) == {"function": real}
    assert ts.matches("old_matches", tree.root_node) == [{"function": [real[0]]}, {"function": [real[1]]}]


def test_load_query_names_the_missing_file():
    with pytest.raises(ValueError, match="no_such_query.scm"):
        ts.load_query("no_such_query")
    assert ts.load_query("definitions.scm") is ts.load_query("definitions.scm")


def test_queries_run_by_name_and_a_rejected_query_names_its_file(tmp_path, monkeypatch):
    tree = ts.parse(b"void f() { for (;;) {} for (;;) {} }", "cuda")
    assert len(ts.captures("loops", tree.root_node)["for"]) == 2
    (tmp_path / "bad.scm").write_text("(no_such_node) @x\n")
    monkeypatch.setattr(ts, "QUERY_DIR", tmp_path)
    with pytest.raises(ValueError, match="bad.scm"):
        ts.load_query("bad")


def test_problems_finds_error_nodes():
    clean = ts.parse(b"int f(int x) { return x; }", "cuda").root_node
    broken = ts.parse(b"int f(int x) { return x + ; }\nint g( {", "cuda").root_node
    assert ts.problems(clean) == []
    found = ts.problems(broken)
    assert found and all(ts.is_problem(n) for n in found)


def test_cuda_grammar_beats_cpp_where_measured(sglang_source):
    """The evidence behind GRAMMAR_BY_SUFFIX, re-measured on the real JIT tree."""
    table = ts.measure_grammars(pathlib.Path(sglang_source.root) / "kernels/jit")
    print("\nsuffix  files  global(cuda/cpp)  error files(cuda/cpp)")
    for suffix, row in table.items():
        print(
            f"{suffix:<6} {row.get('files', 0):>6}  {row.get('global_cuda', 0):>5}/{row.get('global_cpp', 0):<5}"
            f"        {row.get('error_files_cuda', 0):>5}/{row.get('error_files_cpp', 0):<5}"
        )
    total = table["total"]
    assert total["files"] > 200
    assert total["global_cuda"] > total["global_cpp"]
    for suffix, row in table.items():
        if row.get("files"):
            assert row["global_cuda"] >= row["global_cpp"], suffix
            assert row["error_files_cuda"] <= row["error_files_cpp"], suffix
            assert ts.grammar_for("x" + suffix if suffix != "total" else "x.cu") == "cuda"
