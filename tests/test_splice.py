"""extract.splice: byte-exact edits, over the whole real tree and on hand-made cases."""

from __future__ import annotations

import collections
import pathlib

import pytest

from extract.index import ScanResult, scan_tree
from extract.splice import SpliceError, apply_regions, splice
from pipeline.records import Span


@pytest.fixture(scope="module")
def scan(sglang_source) -> ScanResult:
    return scan_tree(sglang_source)


@pytest.fixture(scope="module")
def contents(sglang_source, scan) -> dict[str, bytes]:
    root = pathlib.Path(sglang_source.root)
    return {f.path: (root / f.path).read_bytes() for f in scan.files}


def _definitions_by_file(scan: ScanResult) -> dict[str, list]:
    grouped = collections.defaultdict(list)
    for record in scan.kernels + scan.device_functions:
        grouped[record.file].append(record)
    return grouped


def test_splicing_every_span_back_reproduces_every_file(scan, contents):
    grouped = _definitions_by_file(scan)
    assert sum(len(v) for v in grouped.values()) > 1000
    for path, data in contents.items():
        edits = [(d.start_byte, d.end_byte, data[d.start_byte : d.end_byte]) for d in grouped.get(path, [])]
        assert splice(data, edits) == data, path


def test_a_modified_region_leaves_every_other_byte_alone(scan, contents):
    checked = 0
    for path, records in _definitions_by_file(scan).items():
        data = contents[path]
        target = records[len(records) // 2]
        new = b"/* replaced */\n__global__ void other() {}\n"
        out = splice(data, [(target.start_byte, target.end_byte, new)])
        assert out[: target.start_byte] == data[: target.start_byte], path
        assert out[target.start_byte : target.start_byte + len(new)] == new
        assert out[target.start_byte + len(new) :] == data[target.end_byte :], path
        checked += 1
    assert checked > 100


def test_apply_regions_on_real_spans(scan, contents):
    kernels = [k for k in scan.kernels if k.file == "kernels/jit/csrc/elementwise/activation.cuh"]
    spans = [
        Span(file=k.file, start_byte=k.start_byte, end_byte=k.end_byte, name=k.name, kind="kernel") for k in kernels
    ]
    files = {"kernels/jit/csrc/elementwise/activation.cuh": contents["kernels/jit/csrc/elementwise/activation.cuh"]}
    same = apply_regions(files, spans, {s.name: files[s.file][s.start_byte : s.end_byte].decode() for s in spans})
    assert same == files
    changed = apply_regions(files, spans, {"act_kernel": "// gone\n"})
    data = files["kernels/jit/csrc/elementwise/activation.cuh"]
    act = next(s for s in spans if s.name == "act_kernel")
    assert changed[act.file] == data[: act.start_byte] + b"// gone\n" + data[act.end_byte :]


def test_edits_in_any_order_and_adjacent():
    data = b"0123456789"
    assert splice(data, []) == data
    assert splice(data, [(8, 10, b"XY"), (0, 2, b"ab")]) == b"ab234567XY"
    assert splice(data, [(2, 4, b"--"), (4, 6, b"++")]) == b"01--++6789"  # touching is fine
    assert splice(data, [(3, 3, b"^"), (3, 5, b"_")]) == b"012^_56789"  # insertion goes before
    assert splice(data, [(10, 10, b"!")]) == b"0123456789!"
    assert splice(data, [(0, 10, b"")]) == b""


@pytest.mark.parametrize(
    "edits",
    [
        [(2, 5, b"a"), (4, 6, b"b")],  # overlap
        [(2, 8, b"a"), (3, 4, b"b")],  # one inside the other
        [(4, 4, b"a"), (4, 4, b"b")],  # two insertions at one point: order unknowable
        [(2, 6, b"a"), (3, 3, b"b")],  # insertion strictly inside an edit
        [(0, 3, b"a"), (1, 2, b"b"), (8, 9, b"c")],
    ],
)
def test_overlapping_edits_are_rejected(edits):
    with pytest.raises(SpliceError, match="overlap"):
        splice(b"0123456789", edits)


@pytest.mark.parametrize(
    "edit, message",
    [
        ((5, 11, b""), "outside the file"),
        ((-1, 2, b""), "outside the file"),
        ((6, 5, b""), "reversed"),
        ((1.0, 2, b""), "non-integer"),
        ((1, 2, "text"), "not bytes"),
        ((1, 2), "triple"),
    ],
)
def test_bad_edits_say_what_is_wrong(edit, message):
    with pytest.raises(SpliceError, match=message) as caught:
        splice(b"0123456789", [edit])
    assert caught.value.fix


def _spans():
    return [
        Span(file="a.cuh", start_byte=0, end_byte=3, name="first", kind="kernel"),
        Span(file="a.cuh", start_byte=5, end_byte=8, name="second", kind="device_function"),
        Span(file="b.cuh", start_byte=1, end_byte=2, name="third", kind="launcher"),
    ]


def test_apply_regions_touches_only_named_spans_and_their_files():
    files = {"a.cuh": b"AAA--BBB--", "b.cuh": b"xyz"}
    out = apply_regions(files, _spans(), {"second": "ß", "first": ""})
    assert out == {"a.cuh": b"--\xc3\x9f--"}
    assert apply_regions(files, _spans(), {}) == {}
    assert apply_regions(files, _spans(), {"third": "Y"}) == {"b.cuh": b"xYz"}


def test_apply_regions_errors_name_the_problem():
    files = {"a.cuh": b"AAA--BBB--", "b.cuh": b"xyz"}
    with pytest.raises(SpliceError, match="'nope' names no editable span") as caught:
        apply_regions(files, _spans(), {"nope": "x"})
    assert "first" in caught.value.fix and "third" in caught.value.fix
    with pytest.raises(SpliceError, match="b.cuh, which was not given"):
        apply_regions({"a.cuh": files["a.cuh"]}, _spans(), {"third": "x"})
    with pytest.raises(SpliceError, match="both named 'first'"):
        apply_regions(files, [*_spans(), Span(file="b.cuh", start_byte=0, end_byte=1, name="first")], {})
    overlapping = [*_spans()[:1], Span(file="a.cuh", start_byte=2, end_byte=6, name="wide")]
    with pytest.raises(SpliceError, match="a.cuh: cannot apply regions first, wide"):
        apply_regions(files, overlapping, {"first": "1", "wide": "2"})
    stale = [Span(file="b.cuh", start_byte=1, end_byte=50, name="stale")]
    with pytest.raises(SpliceError, match="outside the file"):
        apply_regions(files, stale, {"stale": "x"})
