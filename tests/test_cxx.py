"""extract.cxx (the one C++ text toolkit) and extract.cxx_nodes.find_definition (definitions through tree-sitter)."""

from __future__ import annotations

from extract import cxx
from extract.cxx_nodes import calls_in, find_definition

SNIPPET = """\
// a "quoted" comment with a ( bracket
struct Launcher {
  static constexpr char kQuote = '"';  // not the start of a string
  static void run(tvm::ffi::TensorView x, int n = 1'000) {
    const char* s = "// not a comment ( either";
    /* block ( */ RuntimeCheck(n % 4 == 0, "n must divide by 4 (", n);
  }
};
"""


def test_both_readings_agree_on_what_is_a_literal():
    code = cxx.code_only(SNIPPET.encode()).decode()
    kept = cxx.strip_comments(SNIPPET)
    assert len(code) == len(kept) == len(SNIPPET)  # offsets never move
    assert code.count("\n") == SNIPPET.count("\n")
    # a character literal holding a quote opens no string: the comment after it is one
    assert "not the start" not in kept and "'\"'" in kept
    assert "not the start" not in code and "'\"'" not in code
    # a // inside a string is no comment; the string stays in strip_comments, blanked in code_only
    assert '"// not a comment ( either"' in kept and "not a comment" not in code
    assert "1'000" in code  # a digit separator is no character literal
    assert cxx.strip_comments(SNIPPET.encode()) == kept.encode()  # bytes read the same way


def test_balanced_end_skips_strings_only_when_asked():
    text = 'f(a, ")", (b))'
    assert cxx.balanced_end(text, 1) == len(text)
    assert cxx.balanced_end(text, 1, strings=False) == text.index(")") + 1
    assert cxx.balanced_end("f(a", 1) == 3
    assert cxx.balanced_end(b"f(a", 1, strings=False, unbalanced=-1) == -1
    assert cxx.balanced_end(b"x<y<z>>", 1, strings=False) == 7


def test_split_top_reads_template_brackets_not_comparisons():
    assert cxx.split_top("std::pair<int, int> p, int q = a < b, c") == ["std::pair<int, int> p", "int q = a < b", "c"]
    assert cxx.split_top("f(a, b), {1, 2}, x[i, j]") == ["f(a, b)", "{1, 2}", "x[i, j]"]
    assert cxx.split_top("") == []


def test_tree_and_text_readings_of_a_definition_agree():
    text = cxx.strip_comments(SNIPPET)
    tree, plain = find_definition(text, "run"), cxx.find_function(text, "run")
    assert tree is not None and plain is not None
    assert tree == plain
    assert tree.params == [("tvm::ffi::TensorView", "x"), ("int", "n")]
    assert "RuntimeCheck(n % 4 == 0" in tree.body
    assert find_definition(text, "RuntimeCheck") is None  # a call is no definition


def test_template_header_of_a_definition():
    text = "template <typename T, int kN>\nvoid launch(tvm::ffi::TensorView out) {\n  go<T, kN>(out);\n}\n"
    found = find_definition(text, "launch")
    assert found is not None and found == cxx.find_function(text, "launch")
    assert cxx.template_params(found.template) == [("typename", "T"), ("int", "kN")]


def test_calls_in_a_body_through_tree_sitter():
    body = '  RuntimeCheck(n > 0, "launch(x) is no call");\n  details::impl<T, 4>(x, out);\n  self.run(x);\n'
    calls = calls_in(body)
    assert [c.name for c in calls] == ["RuntimeCheck", "impl", "run"]  # text order; nothing inside a string
    impl = calls[1]
    assert impl.template_args == "T, 4"
    assert (
        body[impl.open_paren] == "(" and body[impl.open_paren : cxx.balanced_end(body, impl.open_paren)] == "(x, out)"
    )
    assert calls[0].template_args is None
