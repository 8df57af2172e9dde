"""integrate.patch and integrate.diffs on the real sglang wheel's sources.

The candidate is synthetic (a hand edit of act_and_mul_kernel in the wheel's
activation.cuh); everything else is real: the task folder read by
contract.layout.load_task, the splice, the diff, `git apply` and `patch -p1` on a
fresh unpacked copy of the wheel.

The builders here are imported by the other test_integrate_* modules.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import zipfile

import pytest
from test_agents import shape

from extract.entry import read_signature
from integrate import patch as patch_mod
from integrate.accepted import load_run, resolve_overlaps
from integrate.diffs import Segment, file_diff, outside_segments, patched_paths, sha256, verify_spans
from integrate.errors import ConfigError, PatchError
from integrate.in_place import swap_in_place
from integrate.patch import build_patch, layout_of
from integrate.records import Patch
from pipeline.errors import StaleRecordError
from pipeline.record_io import content_hash, read_record, write_record
from pipeline.records import (
    ArgSpec,
    BuildRecipe,
    Contract,
    FileDigest,
    Instantiation,
    ShapeCase,
    SourceInfo,
    Span,
    Task,
    TensorSpec,
)
from pipeline.run_records import Candidate, Evaluation, Outcome, ShapeTiming

ROOT = pathlib.Path(__file__).resolve().parent.parent
ACT = "kernels/jit/csrc/elementwise/activation.cuh"
RMS = "kernels/jit/csrc/elementwise/rmsnorm.cuh"
OP = "activation.silu_and_mul"


# --------------------------------------------------------------------------- builders


def function_span(data: bytes, path: str, signature: bytes, name: str) -> Span:
    """The span of a C++ function definition: its template<> header through its closing brace."""
    at = data.index(signature)
    start = data.rfind(b"template <", 0, at)
    assert start >= 0 and data[start:at].count(b";") == 0, "no template header right before the signature"
    depth, pos = 0, data.index(b"{", at)
    while True:
        ch = data[pos : pos + 1]
        depth += ch == b"{"
        depth -= ch == b"}"
        pos += 1
        if depth == 0:
            break
    return Span(file=path, start_byte=start, end_byte=pos, name=name, kind="kernel")


def act_span(root: pathlib.Path) -> Span:
    return function_span((root / ACT).read_bytes(), ACT, b"__global__ void act_and_mul_kernel(", "act_and_mul_kernel")


def edited_kernel(root: pathlib.Path) -> str:
    """act_and_mul_kernel with a visible, semantics-preserving rewrite of two lines."""
    span = act_span(root)
    text = (root / ACT).read_bytes()[span.start_byte : span.end_byte].decode()
    assert "  vec_t out;\n" in text and "#pragma unroll\n" in text
    text = text.replace("  vec_t out;\n", "  vec_t out;  // kernelsmith: accumulate in registers\n", 1)
    return text.replace("#pragma unroll\n", "#pragma unroll\n  // kernelsmith: fully unrolled over kVecSize\n", 1)


def silu_contract() -> Contract:
    return Contract(
        entry="run_activation",
        args=[
            ArgSpec(
                kind="tensor",
                tensor=TensorSpec(name="input", shape=["num_tokens", "2*hidden_size"], dtype="T", role="input"),
            ),
            ArgSpec(
                kind="tensor",
                tensor=TensorSpec(name="out", shape=["num_tokens", "hidden_size"], dtype="T", role="output"),
            ),
        ],
        symbols=["num_tokens", "hidden_size"],
        origin="curated",
    )


def make_task(
    work: pathlib.Path,
    source: SourceInfo,
    op_id: str,
    spans: list[Span],
    *,
    contract: Contract | None = None,
    shapes: list[ShapeCase] | None = None,
    dtypes: tuple[str, ...] = ("bf16",),
) -> pathlib.Path:
    """A task folder (task.json + src/) as extract writes it, for the files the spans live in."""
    root = pathlib.Path(source.root)
    task_dir = work / "tasks" / op_id
    contract = contract or silu_contract()
    entry, module = contract.entry, "kernels/ops/activation/activation.py"
    files = sorted({s.file for s in spans})
    digests = []
    for rel in files:
        data = (root / rel).read_bytes()
        dest = task_dir / "src" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        digests.append(FileDigest(path=rel, sha256=sha256(data), size=len(data)))
    task = Task(
        op_id=op_id,
        module=module,
        public_functions=[op_id.partition(".")[2]],
        entry_points=[entry],
        source=source,
        files=digests,
        instantiations=[
            Instantiation(
                dtype=d,
                module_args=[d + "_t"],
                template_args=[d + "_t", "true"],
                wrappers=[[entry, f"ActivationKernel<{d}_t>::{entry}"]],
            )
            for d in dtypes
        ],
        build=BuildRecipe(cuda_files=files, include_dirs=["kernels/jit/include"], cuda_cflags=[]),
        editable=spans,
        contract=contract,
        shapes=shapes or [ShapeCase(model="Llama-3.1-8B", tokens=8, sizes={"num_tokens": 8, "hidden_size": 14336})],
        entry_signature=read_signature(root, module, op_id.partition(".")[2], contract, [entry]),
    )
    write_record(task, task_dir / "task.json")
    return task_dir


def make_best(
    work: pathlib.Path,
    run: str,
    op_id: str,
    regions: dict[str, str],
    *,
    parent: str | None = "base0",
    outcome: Outcome = Outcome.ok,
    timings: list[ShapeTiming] | None = None,
    rationale: str = "unrolled vector loop",
    best_src: dict[str, bytes] | None = None,
    coder: str = "offline",
) -> Candidate:
    cid = content_hash(*sorted(f"{k}\0{v}" for k, v in regions.items()))[:16]
    cand = Candidate(op_id=op_id, id=cid, parent=parent, regions=regions, coder=coder, rationale=rationale)
    best = work / "runs" / run / op_id / "best"
    write_record(cand, best / "candidate.json")
    if best_src is not None:
        for rel, data in best_src.items():
            (best / "src" / rel).parent.mkdir(parents=True, exist_ok=True)
            (best / "src" / rel).write_bytes(data)
    write_record(
        Evaluation(
            op_id=op_id,
            candidate=cid,
            outcome=outcome,
            checks_passed=12,
            bitwise_equal=True,
            max_abs_err=0.0,
            timings=timings or [],
        ),
        best / "evaluation.json",
    )
    return cand


def unpack_wheel(source: SourceInfo, dest: pathlib.Path) -> pathlib.Path:
    """A fresh unpacked copy of the pinned wheel's sglang/ tree; returns the folder holding sglang/."""
    wheel = ROOT / "work" / "cache" / "wheels" / source.wheel
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(dest, [m for m in archive.namelist() if m.startswith("sglang/")])
    return dest


@pytest.fixture
def wheel_source(sglang_source) -> SourceInfo:
    if sglang_source.kind != "wheel":
        pytest.skip("SGLANG_SRC points at a local tree; these tests patch the pinned wheel")
    return sglang_source


@pytest.fixture
def one_op_run(tmp_path, wheel_source):
    """work/ with the silu_and_mul task and run r1 whose best candidate edits act_and_mul_kernel."""
    work = tmp_path / "work"
    root = pathlib.Path(wheel_source.root)
    make_task(work, wheel_source, OP, [act_span(root)])
    span = act_span(root)
    data = (root / ACT).read_bytes()
    patched = data[: span.start_byte] + edited_kernel(root).encode() + data[span.end_byte :]
    make_best(work, "r1", OP, {"act_and_mul_kernel": edited_kernel(root)}, best_src={ACT: patched})
    return work


# --------------------------------------------------------------------------- the real patch


def test_patch_applies_with_git_and_patch_to_a_fresh_unpacked_wheel(tmp_path, wheel_source, one_op_run):
    work = one_op_run
    root = pathlib.Path(wheel_source.root)
    before = sha256((root / ACT).read_bytes())
    record = build_patch("r1", work / "runs" / "r1", work / "tasks", wheel_source, work / "integrate" / "r1")

    text = pathlib.Path(record.patch_file).read_bytes()
    assert patched_paths(text) == [f"sglang/{ACT}"]
    assert text.startswith(b"diff --git a/sglang/kernels/jit/csrc/elementwise/activation.cuh b/sglang/")
    assert record.verified == ["spans", "best/src", "git apply", "patch -p1"]
    assert sha256((root / ACT).read_bytes()) == before, "the pristine wheel tree must never be written"

    expected = (root / ACT).read_bytes()
    span = act_span(root)
    expected = expected[: span.start_byte] + edited_kernel(root).encode() + expected[span.end_byte :]
    for tool in (["git", "apply", str(record.patch_file)], ["patch", "-p1", "--batch", "-i", str(record.patch_file)]):
        fresh = unpack_wheel(wheel_source, tmp_path / tool[0])
        env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(tmp_path))
        done = subprocess.run(tool, cwd=fresh, capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr + done.stdout
        assert (fresh / "sglang" / ACT).read_bytes() == expected, tool[0]
        # and nothing else in the unpacked tree changed: compare every file with the wheel's bytes
        with zipfile.ZipFile(ROOT / "work" / "cache" / "wheels" / wheel_source.wheel) as archive:
            changed = [
                m
                for m in archive.namelist()
                if m.startswith("sglang/") and not m.endswith("/") and (fresh / m).read_bytes() != archive.read(m)
            ]
        assert changed == [f"sglang/{ACT}"], tool[0]

    # the patched copy holds the same bytes, and the record's hashes say so
    copy = pathlib.Path(record.patched_tree) / "sglang" / ACT
    assert copy.read_bytes() == expected
    (change,) = record.files
    assert (change.sha256_before, change.sha256_after) == (before, sha256(expected))
    assert change.spans == [span] and change.ops == [OP]
    assert record.layout == "wheel" and record.prefix == "sglang"


def test_every_changed_byte_lies_inside_an_editable_span(wheel_source, one_op_run):
    work = one_op_run
    record = build_patch("r1", work / "runs" / "r1", work / "tasks", wheel_source, work / "integrate" / "r1")
    root = pathlib.Path(wheel_source.root)
    for change in record.files:
        old = (root / change.path).read_bytes()
        new = (pathlib.Path(record.patched_tree) / record.prefix / change.path).read_bytes()
        verify_spans(change.path, old, new, [(s.start_byte, s.end_byte) for s in change.spans])
        # independent of verify_spans: the common prefix and suffix cover everything outside the span
        prefix = next(i for i, (a, b) in enumerate(zip(old, new)) if a != b)
        suffix = next(i for i, (a, b) in enumerate(zip(reversed(old), reversed(new))) if a != b)
        (span,) = change.spans
        assert prefix >= span.start_byte and len(old) - suffix <= span.end_byte
    # a byte changed one position outside the span is caught, on either side
    change = record.files[0]
    (span,) = change.spans
    old = (root / change.path).read_bytes()
    new = (pathlib.Path(record.patched_tree) / record.prefix / change.path).read_bytes()
    for where in (span.start_byte - 1, len(new) - (len(old) - span.end_byte)):
        tampered = new[:where] + b"#" + new[where + 1 :]
        with pytest.raises(PatchError):
            verify_spans(change.path, old, tampered, [(span.start_byte, span.end_byte)])


def test_patch_refuses_when_optimizes_patched_file_disagrees(wheel_source, one_op_run):
    work = one_op_run
    copy = work / "runs" / "r1" / OP / "best" / "src" / ACT
    copy.write_bytes(copy.read_bytes().replace(b"kernelsmith: accumulate", b"kernelsmith: ACCUMULATE"))
    with pytest.raises(PatchError, match="differs from the one optimize wrote"):
        build_patch("r1", work / "runs" / "r1", work / "tasks", wheel_source, work / "integrate" / "r1")


def test_patch_refuses_a_tree_that_is_not_the_extracted_one(tmp_path, wheel_source, one_op_run):
    work = one_op_run
    task_json = work / "tasks" / OP / "task.json"
    # pretend the task was extracted from other bytes: both the record and its src/ copy say so
    src_copy = work / "tasks" / OP / "src" / ACT
    src_copy.write_bytes(src_copy.read_bytes() + b"// other version\n")
    text = task_json.read_text()
    data = src_copy.read_bytes()
    old = next(d for d in Task.model_validate_json(text).files if d.path == ACT)
    task_json.write_text(text.replace(old.sha256, sha256(data)).replace(f'"size": {old.size}', f'"size": {len(data)}'))
    with pytest.raises(StaleRecordError, match="differs from the file task"):
        build_patch("r1", work / "runs" / "r1", work / "tasks", wheel_source, work / "integrate" / "r1")
    assert not (work / "integrate" / "r1" / "sglang.patch").exists()


def test_unknown_span_and_skipped_ops(tmp_path, wheel_source):
    work = tmp_path / "work"
    root = pathlib.Path(wheel_source.root)
    make_task(work, wheel_source, OP, [act_span(root)])
    make_best(work, "r2", OP, {"no_such_span": "x"})
    with pytest.raises(PatchError, match="no_such_span"):
        build_patch("r2", work / "runs" / "r2", work / "tasks", wheel_source, work / "integrate" / "r2")

    make_task(work, wheel_source, "layernorm.rmsnorm", [act_span(root)])
    make_best(work, "r3", OP, {"act_and_mul_kernel": edited_kernel(root)}, outcome=Outcome.incorrect)
    make_best(work, "r3", "layernorm.rmsnorm", {"act_and_mul_kernel": "x"}, parent=None)
    (work / "runs" / "r3" / "activation.other").mkdir(parents=True)
    accepted, skipped = load_run(work / "runs" / "r3", work / "tasks")
    assert accepted == []
    assert "incorrect" in skipped[OP]
    assert "baseline" in skipped["layernorm.rmsnorm"]
    assert "did not finish" in skipped["activation.other"]


def test_in_place_is_refused_on_the_shared_wheel_cache(wheel_source, one_op_run):
    work = one_op_run
    with pytest.raises(ConfigError, match="read-only cache"):
        build_patch("r1", work / "runs" / "r1", work / "tasks", wheel_source, work / "integrate" / "r1", in_place=True)


# --------------------------------------------------------------------------- in place


def small_package(tmp_path: pathlib.Path, wheel_source: SourceInfo) -> SourceInfo:
    """A writable sglang package folder holding the two real kernel files (SGLANG_SRC-style)."""
    from extract.sources import acquire

    pkg = tmp_path / "site" / "sglang"
    for rel in (ACT, RMS, "kernels/jit/include/sgl_kernel/utils.cuh"):
        dest = pkg / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(pathlib.Path(wheel_source.root) / rel, dest)
    return acquire("0.5.23", tmp_path / "cache", str(pkg))


def two_op_run(tmp_path: pathlib.Path, source: SourceInfo) -> pathlib.Path:
    work = tmp_path / "work"
    root = pathlib.Path(source.root)
    make_task(work, source, OP, [act_span(root)])
    rms = (root / RMS).read_bytes()
    sig = b"__global__ void rmsnorm_cta("
    span = function_span(rms, RMS, sig, "rms_kernel")
    make_task(work, source, "layernorm.rmsnorm", [span])
    body = rms[span.start_byte : span.end_byte].decode()
    make_best(work, "r1", OP, {"act_and_mul_kernel": edited_kernel(root)})
    make_best(work, "r1", "layernorm.rmsnorm", {"rms_kernel": body.replace("{", "{  // kernelsmith\n", 1)})
    return work


def test_in_place_patches_the_given_tree_with_backups(tmp_path, wheel_source):
    source = small_package(tmp_path, wheel_source)
    assert source.kind == "package"
    work = two_op_run(tmp_path, source)
    root = pathlib.Path(source.root)
    before = {rel: (root / rel).read_bytes() for rel in (ACT, RMS)}
    made = build_patch("r1", work / "runs" / "r1", work / "tasks", source, work / "integrate" / "r1", in_place=True)
    assert not made.in_place and {rel: (root / rel).read_bytes() for rel in (ACT, RMS)} == before, (
        "build_patch never writes the tree; the swap waits for the checks"
    )
    record = swap_in_place(made, work / "integrate" / "r1")
    assert record.in_place and "in-place hashes" in record.verified
    assert read_record(Patch, work / "integrate" / "r1" / "patch.json") == record
    for change in record.files:
        assert sha256((root / change.path).read_bytes()) == change.sha256_after
        assert (pathlib.Path(record.backups) / change.path).read_bytes() == before[change.path]
        assert (pathlib.Path(record.baseline_tree) / "sglang" / change.path).read_bytes() == before[change.path]
    assert sorted(f.path for f in record.files) == sorted([ACT, RMS])


def test_in_place_failure_leaves_the_tree_as_it_was(tmp_path, wheel_source, monkeypatch):
    source = small_package(tmp_path, wheel_source)
    work = two_op_run(tmp_path, source)
    root = pathlib.Path(source.root)
    before = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    real = os.replace
    swaps = []

    def failing_replace(src, dst):
        if pathlib.Path(dst).is_relative_to(root):
            swaps.append(dst)
            if len(swaps) == 2:  # the first file is already swapped; the second swap breaks
                raise OSError(28, "No space left on device (simulated)")
        return real(src, dst)

    made = build_patch("r1", work / "runs" / "r1", work / "tasks", source, work / "integrate" / "r1", in_place=True)
    monkeypatch.setattr(patch_mod, "_replace", failing_replace)
    with pytest.raises(PatchError, match="every file was restored") as err:
        swap_in_place(made, work / "integrate" / "r1")
    assert "No space left" in str(err.value)
    assert len(swaps) == 2
    after = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert after == before, "a failed in-place patch must leave every file of the tree byte-identical"


def test_in_place_failed_hash_check_also_restores(tmp_path, wheel_source, monkeypatch):
    source = small_package(tmp_path, wheel_source)
    work = two_op_run(tmp_path, source)
    root = pathlib.Path(source.root)
    before = {rel: (root / rel).read_bytes() for rel in (ACT, RMS)}
    real = os.replace

    def corrupting_replace(src, dst):
        out = real(src, dst)
        if pathlib.Path(dst).is_relative_to(root) and pathlib.Path(dst).name == "rmsnorm.cuh":
            pathlib.Path(dst).write_bytes(b"corrupted by a concurrent writer")
        return out

    made = build_patch("r1", work / "runs" / "r1", work / "tasks", source, work / "integrate" / "r1", in_place=True)
    monkeypatch.setattr(patch_mod, "_replace", corrupting_replace)
    with pytest.raises(PatchError, match="checking the replaced files"):
        swap_in_place(made, work / "integrate" / "r1")
    assert {rel: (root / rel).read_bytes() for rel in (ACT, RMS)} == before


def test_two_ops_in_one_file_compose_or_conflict(tmp_path, wheel_source):
    work = tmp_path / "work"
    root = pathlib.Path(wheel_source.root)
    data = (root / ACT).read_bytes()
    whole = act_span(root)
    unary = function_span(data, ACT, b"__global__ void act_kernel(", "act_kernel")
    make_task(work, wheel_source, OP, [whole])
    make_task(work, wheel_source, "activation.relu2", [unary])
    make_best(work, "r1", OP, {"act_and_mul_kernel": edited_kernel(root)})
    unary_text = data[unary.start_byte : unary.end_byte].decode().replace("{", "{  // kernelsmith unary\n", 1)
    make_best(work, "r1", "activation.relu2", {"act_kernel": unary_text})
    record = build_patch("r1", work / "runs" / "r1", work / "tasks", wheel_source, work / "integrate" / "r1")
    (change,) = record.files
    assert change.ops == ["activation.relu2", OP]
    new = (pathlib.Path(record.patched_tree) / "sglang" / ACT).read_bytes()
    assert edited_kernel(root).encode() in new and unary_text.encode() in new
    verify_spans(ACT, data, new, [(whole.start_byte, whole.end_byte), (unary.start_byte, unary.end_byte)])

    # an overlapping span of another op with different text cannot be combined
    work2 = tmp_path / "work2"
    inner = Span(file=ACT, start_byte=whole.start_byte + 10, end_byte=whole.end_byte - 10, name="inner")
    make_task(work2, wheel_source, OP, [whole])
    make_task(work2, wheel_source, "activation.other", [inner])
    make_best(work2, "r1", OP, {"act_and_mul_kernel": edited_kernel(root)}, timings=[shape("demo[n=1]", 1.04)])
    make_best(work2, "r1", "activation.other", {"inner": "x"}, timings=[shape("demo[n=1]", 1.2)])
    with pytest.raises(PatchError, match="overlaps"):
        build_patch("r1", work2 / "runs" / "r1", work2 / "tasks", wheel_source, work2 / "integrate" / "r1")
    # the command keeps the faster of the two and says why the other is left out (issue 14: a sweep
    # accepted both embeddings.compute_n_gram_ids and its _decode twin, which share one kernel)
    accepted, _ = load_run(work2 / "runs" / "r1", work2 / "tasks")
    kept, skipped = resolve_overlaps(accepted)
    assert [a.op_id for a in kept] == ["activation.other"]
    assert list(skipped) == [OP] and "activation.other (1.200x, kept)" in skipped[OP] and "1.040x" in skipped[OP]
    assert resolve_overlaps(accepted[:1]) == (accepted[:1], {}), "one op alone never clashes"


def test_twin_ops_that_edit_different_methods_of_one_launcher_struct_are_both_kept(tmp_path, wheel_source):
    """Issue 14: compute_n_gram_ids and its _decode twin were both accepted, and integrate left one out,
    since both rewrite NgramEmbeddingKernel. Confined (optimize.reach), each edits only its own method,
    and the two texts merge function by function. Here: silu_and_mul's and relu2's methods of
    activation.cuh's ActivationKernel."""
    from optimize.cuda_spans import definition_spans

    work = tmp_path / "work"
    root = pathlib.Path(wheel_source.root)
    data = (root / ACT).read_bytes()
    (struct,) = [s for s in definition_spans(ACT, data) if s.name == "ActivationKernel"]
    base = data[struct.start_byte : struct.end_byte].decode()
    relu2 = silu_contract().model_copy(update={"entry": "run_unary_activation"})
    make_task(work, wheel_source, OP, [struct])
    make_task(work, wheel_source, "activation.relu2", [struct], contract=relu2)

    def edit(method: str, note: str) -> str:
        head = f"static void {method}("
        at = base.index("{", base.index(head)) + 1
        return base[:at] + f"  // kernelsmith: {note}\n" + base[at:]

    make_best(work, "r1", OP, {"ActivationKernel": edit("run_activation", "silu")}, timings=[shape("demo[n=1]", 1.1)])
    make_best(work, "r1", "activation.relu2", {"ActivationKernel": edit("run_unary_activation", "relu2")})
    accepted, _ = load_run(work / "runs" / "r1", work / "tasks")
    kept, skipped = resolve_overlaps(accepted)
    assert [a.op_id for a in kept] == ["activation.relu2", OP] and skipped == {}
    record = build_patch("r1", work / "runs" / "r1", work / "tasks", wheel_source, work / "integrate" / "r1")
    new = (pathlib.Path(record.patched_tree) / "sglang" / ACT).read_bytes()
    assert b"// kernelsmith: silu" in new and b"// kernelsmith: relu2" in new
    # the same method edited two ways still cannot be combined
    make_best(work, "r1", "activation.relu2", {"ActivationKernel": edit("run_activation", "other")})
    accepted, _ = load_run(work / "runs" / "r1", work / "tasks")
    assert list(resolve_overlaps(accepted)[1]) == ["activation.relu2"]


# --------------------------------------------------------------------------- diff format


@pytest.mark.parametrize(
    "old,new",
    [
        (b"a\nb\nc\n", b"a\nB\nc\n"),
        (b"a\nb\nc", b"a\nb\nC"),  # no final newline on either side
        (b"a\nb\nc", b"a\nb\nc\n"),  # newline added at the end
        (b"a\r\nb\r\n", b"a\r\nB\r\n"),  # CRLF kept
        (b"x\ry\nz\n", b"x\rY\nz\n"),  # a lone CR is line content for git and patch
        (
            b"".join(b"line %d\n" % i for i in range(200)),
            b"".join(b"line %d\n" % (i if i % 50 else -i) for i in range(200)),
        ),
    ],
)
def test_file_diff_applies_with_git_and_patch(tmp_path, old, new):
    text = file_diff("pkg/f.txt", old, new)
    for tool in (["git", "apply", "-"], ["patch", "-p1", "--batch", "--silent"]):
        folder = tmp_path / tool[0]
        (folder / "pkg").mkdir(parents=True)
        (folder / "pkg" / "f.txt").write_bytes(old)
        done = subprocess.run(
            tool,
            input=text,
            cwd=folder,
            capture_output=True,
            env=dict(os.environ, GIT_CEILING_DIRECTORIES=str(tmp_path)),
        )
        assert done.returncode == 0, (done.stdout + done.stderr).decode()
        assert (folder / "pkg" / "f.txt").read_bytes() == new, tool[0]


def test_outside_segments_and_verify_spans_rules():
    assert outside_segments(10, [(2, 4), (3, 6), (8, 10)]) == [Segment(0, 2), Segment(6, 8), Segment(10, 10)]
    old = b"HEAD[aaa]MID[bbb]TAIL"
    spans = [(5, 8), (13, 16)]
    verify_spans("f", old, b"HEAD[xxxxxx]MID[]TAIL", spans)  # both spans rewritten, any length
    verify_spans("f", old, old, spans)
    for bad in (
        b"HEAd[aaa]MID[bbb]TAIL",
        b"HEAD[aaa]MId[bbb]TAIL",
        b"HEAD[aaa]MID[bbb]TAIl",
        b"HEAD[aaa]MID[bbb]TAIL!",
    ):
        with pytest.raises(PatchError):
            verify_spans("f", old, bad, spans)
    with pytest.raises(PatchError, match="no editable span"):
        verify_spans("f", b"abc", b"abd", [])


def test_layout_of_a_checkout_uses_python_sglang_paths(tmp_path, wheel_source):
    from extract.sources import acquire

    repo = tmp_path / "sglang-repo"
    pkg = repo / "python" / "sglang"
    (pkg / ACT).parent.mkdir(parents=True)
    shutil.copyfile(pathlib.Path(wheel_source.root) / ACT, pkg / ACT)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"], check=True
    )
    source = acquire("0.5.23", tmp_path / "cache", str(repo))
    layout = layout_of(source)
    assert (layout.kind, layout.prefix, layout.tree_root) == ("checkout", "python/sglang", repo.resolve())
    assert layout.diff_path(ACT) == f"python/sglang/{ACT}"


def test_an_op_without_improvement_is_reported_as_such(tmp_path):
    """The H200 run's PR said 'optimize did not finish' for ops that finished with no gain."""
    from integrate.accepted import load_run
    from pipeline.record_io import write_record
    from pipeline.run_records import OpSummary, RunSummary

    run_dir = tmp_path / "runs" / "r"
    (run_dir / "activation.silu_and_mul").mkdir(parents=True)
    (run_dir / "layernorm.rmsnorm").mkdir(parents=True)
    (run_dir / "layernorm.fused_add_rmsnorm").mkdir(parents=True)
    write_record(
        RunSummary(
            run="r",
            mode="multi",
            coder="offline",
            backend="gpu",
            simulated=False,
            started_at="a",
            finished_at="b",
            ops=[
                OpSummary(op_id="activation.silu_and_mul", status="no_improvement", stop_reason="rounds", rounds=4),
                OpSummary(
                    op_id="layernorm.fused_add_rmsnorm",
                    status="model_failed",
                    rounds=2,
                    detail="the endpoint answered 500 on every call",
                ),
            ],
        ),
        run_dir / "summary.json",
    )
    accepted, skipped = load_run(run_dir, tmp_path / "tasks")
    assert accepted == []
    assert skipped["activation.silu_and_mul"].startswith("optimize found nothing faster than the baseline (4 round(s)")
    assert "did not finish" in skipped["layernorm.rmsnorm"]
    assert skipped["layernorm.fused_add_rmsnorm"] == (
        "every LLM call of this op failed, and nothing faster was found: the endpoint answered 500 on every call"
    )
