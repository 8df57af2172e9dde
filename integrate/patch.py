"""Splice accepted candidates into SGLang and write ``sglang.patch``.

Inputs: an optimize run's accepted candidates (read by :mod:`integrate.accepted` from
``work/runs/<run>/<op>/best/candidate.json`` and ``best/evaluation.json``),
the tasks it optimized (``work/tasks/<op>/``), and the pristine SGLang tree (the unpacked pinned
wheel, or the tree given by ``SGLANG_SRC`` / ``--sglang``).

Outputs, under ``work/integrate/<run>/``:

- ``sglang.patch``: a git-style unified diff against the pristine tree.
- ``tree/``: a patched COPY of the package (same layout as the pristine tree), which the GPU steps
  import. The pristine tree is never written, except with ``--in-place`` (below).
- ``patch.json``: a :class:`integrate.records.Patch` record.

Diff paths, by layout (the folder the patch applies in, with ``git apply`` or
``patch -p1``):

==========  =========================================  ==========================
layout      apply in                                   paths in the diff
==========  =========================================  ==========================
checkout    the git checkout's top folder              ``a/python/sglang/...``
wheel       the unpacked wheel (the folder holding     ``a/sglang/...``
            ``sglang/``)
package     the folder holding the ``sglang`` package  ``a/sglang/...``
==========  =========================================  ==========================

So a patch made from the wheel applies to any fresh unpacked copy of that wheel
(or to a ``site-packages`` folder), and one made from a checkout applies at the
top of a checkout of that commit, the way SGLang maintainers apply patches.

What must stay true:

- Before anything is written, every touched file's bytes must hash to the
  sha256 the task recorded when it was extracted: a patch is never taken
  against a different tree than the one optimized.
- Every changed byte lies inside an editable span (:func:`diffs.verify_spans`),
  and the diff, applied to pristine copies with ``git apply`` and ``patch -p1``,
  reproduces exactly the expected bytes. Any failure raises
  :class:`PatchError` before the tree or ``sglang.patch`` is touched.
- ``--in-place``: :func:`build_patch` never writes the user's tree; it builds and
  verifies the patched copy like any run, and the GPU checks run on that copy; only
  then does :func:`integrate.in_place.swap_in_place` write the tree.
- A rewrite lands beside its kernel as a KDA implementation (:mod:`integrate.landing`,
  :func:`land_rewrites`): new files, and insertions into existing ones, each verified
  like a span edit; the kernel it replaces stays pristine.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass

from contract.layout import IntegrateFolder
from integrate.accepted import (
    BEST_SRC,
    Accepted,
    load_run,
    spans_by_name,
)
from integrate.diffs import patch_text, patched_paths, sha256, verify_spans
from integrate.errors import ConfigError, PatchError
from integrate.landing import KdaLanding, NotLanded, is_rewrite, kda_landing, merge
from integrate.records import FileChange, Layout, OpChange, Patch
from integrate.triton_splice import check_python
from optimize.reach import foreign_code, merge_functions, outside_text, task_wrappers
from pipeline.errors import StaleRecordError
from pipeline.record_io import content_hash, write_record
from pipeline.records import SourceInfo, Span, Task
from pipeline.run_records import Candidate

BACKUP_DIR = "backup"
BASELINE_DIR = "baseline"

# Indirection so tests can make one step of an in-place swap fail.
_replace = os.replace


# --------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class TreeLayout:
    """Where the package sits inside the tree a patch applies to."""

    kind: Layout
    package_root: pathlib.Path  # the folder holding kernels/
    tree_root: pathlib.Path  # where `git apply` / `patch -p1` run
    prefix: str  # package_root relative to tree_root, posix

    def diff_path(self, path: str) -> str:
        return f"{self.prefix}/{path}"


def layout_of(source: SourceInfo) -> TreeLayout:
    """The diff layout of a source tree (see the module docstring's table)."""
    package_root = pathlib.Path(source.root)
    if source.kind == "checkout":
        top = package_root
        while top != top.parent and not (top / ".git").exists():
            top = top.parent
        if not (top / ".git").exists():
            raise ConfigError(
                f"{package_root} was recorded as a git checkout but no .git folder is above it",
                fix="point SGLANG_SRC at the checkout's top folder, or use an installed sglang package folder",
            )
        return TreeLayout("checkout", package_root, top, package_root.relative_to(top).as_posix())
    return TreeLayout(source.kind, package_root, package_root.parent, package_root.name)


# --------------------------------------------------------------------------- inputs


# --------------------------------------------------------------------------- compose


@dataclass
class _Edit:
    span: Span
    text: bytes
    op_id: str


@dataclass(frozen=True)
class NewFile:
    path: str  # package-relative
    old: bytes
    new: bytes
    spans: list[Span]
    ops: list[str]
    mode: int
    created: bool = False  # a new file (a KDA landing's): ``old`` is empty and nothing is there in the tree


def _refuse_foreign_edits(acc: Accepted, by_name: dict[str, Span], package_root: pathlib.Path) -> None:
    """A PatchError when the candidate changes code only other ops run (a region, or a method of a shared struct).

    No check of the op runs such a region (:mod:`optimize.reach`), so the patch would carry an
    unmeasured change; optimize leaves those regions alone since 4ffcd35, and a run made before
    it is refused here (mask_topk_ids's H200 candidate also moved moe.hash_topk's trigger).
    """
    if acc.task.language != "cuda":
        return
    files: dict[str, bytes] = {}
    baseline: dict[str, str] = {}
    for name, span in by_name.items():
        if span.file not in files:
            target = package_root / span.file
            files[span.file] = target.read_bytes() if target.is_file() else b""
        baseline[name] = files[span.file][span.start_byte : span.end_byte].decode("utf-8", "replace")
    foreign = foreign_code(baseline, task_wrappers(acc.task), outside_text(files, acc.task.editable))
    changed = foreign.touched(baseline, acc.candidate.regions)
    if changed:
        raise PatchError(
            f"candidate {acc.candidate.id} of {acc.op_id} changes {', '.join(changed)}, which another op's "
            f"launcher owns: no check of {acc.op_id} ran that code, so the patch would carry it unmeasured",
            fix=f"re-run `kernelsmith optimize --ops {acc.op_id}` in a new --run (optimize now leaves those regions "
            "as they are), then integrate that run",
        )


def compose(
    accepted: list[Accepted], package_root: pathlib.Path
) -> tuple[list[NewFile], bool, dict[str, KdaLanding | NotLanded]]:
    """The new bytes of every file the accepted candidates touch, verified.

    A file touched by one op is rebuilt with :func:`extract.splice.apply_regions`
    (exactly what the optimize stage compiled). A file touched by several ops
    gets all their span edits at once with :func:`extract.splice.splice`; their
    spans must not overlap, except the same span replaced by the same text.
    A rewrite then lands as a KDA implementation where it can (:func:`land_rewrites`). Returns the
    files, whether every single-op file was also compared with the copy optimize wrote to
    ``best/src/``, and each rewrite's landing.
    """
    from extract.splice import apply_regions, splice

    edits: dict[str, list[_Edit]] = {}
    for acc in accepted:
        by_name = spans_by_name(acc.task)
        _refuse_foreign_edits(acc, by_name, package_root)
        for name, text in acc.candidate.regions.items():
            if name not in by_name:
                raise PatchError(
                    f"candidate {acc.candidate.id} of {acc.op_id} replaces span {name!r}, which task "
                    f"{acc.op_id} does not have (spans: {', '.join(sorted(by_name))})",
                    fix="re-run optimize against the current task",
                )
            edits.setdefault(by_name[name].file, []).append(_Edit(by_name[name], text.encode(), acc.op_id))

    digests = {(acc.op_id, d.path): d.sha256 for acc in accepted for d in acc.task.files}
    out: list[NewFile] = []
    matched_best = bool(edits)
    for path in sorted(edits):
        file_edits = edits[path]
        target = package_root / path
        if not target.is_file():
            raise PatchError(
                f"{target} does not exist in the SGLang tree", fix="point --sglang at the tree the tasks came from"
            )
        old = target.read_bytes()
        ops = sorted({e.op_id for e in file_edits})
        for op_id in ops:
            want = digests.get((op_id, path))
            if want is None:
                raise PatchError(
                    f"task {op_id} edits {path} but does not record its digest",
                    fix=f"re-run `kernelsmith extract --ops {op_id}`",
                )
            if sha256(old) != want:
                raise StaleRecordError(
                    f"{target} differs from the file task {op_id} was extracted from "
                    f"(sha256 {sha256(old)[:16]}..., task says {want[:16]}...)",
                    fix="integrate against the same SGLang tree the run optimized (same --sglang / version), "
                    "or re-run extract and optimize",
                )
        if len(ops) == 1:
            acc = next(a for a in accepted if a.op_id == ops[0])
            regions = {e.span.name: e.text.decode() for e in file_edits}
            editable = [s for s in acc.task.editable if s.file == path]
            new = apply_regions({path: old}, editable, regions).get(path, old)
            if path not in acc.best_files:
                matched_best = False
            elif acc.best_files[path] != new:
                raise PatchError(
                    f"{path}: the spliced file differs from the one optimize wrote to {acc.op_id}/{BEST_SRC}/{path}",
                    fix="re-run optimize (its best/ folder is out of step with its candidate)",
                )
        else:
            unique = _disjoint(path, _merge_same_spans(old, file_edits))
            new = splice(old, [(e.span.start_byte, e.span.end_byte, e.text) for e in unique])
            matched_best = False  # optimize saw each op alone; no best/src copy has both
        spans = sorted(
            {(e.span.start_byte, e.span.end_byte, e.span.name): e.span for e in file_edits}.values(),
            key=lambda s: s.start_byte,
        )
        verify_spans(path, old, new, [(s.start_byte, s.end_byte) for s in spans])
        if any(a.task.language == "triton" for a in accepted if a.op_id in ops):
            check_python(path, new)
        if new == old:
            continue
        out.append(NewFile(path, old, new, spans, ops, target.stat().st_mode))
    files, landings = land_rewrites(accepted, out, package_root)
    return files, matched_best and not any(isinstance(x, KdaLanding) for x in landings.values()), landings


def land_rewrites(
    accepted: list[Accepted], files: list[NewFile], package_root: pathlib.Path
) -> tuple[list[NewFile], dict[str, KdaLanding | NotLanded]]:
    """Each rewrite's in-place edit swapped for its KDA landing (:mod:`integrate.landing`), where it can land.

    Returns the files and, per rewrite, its landing or why it stays an in-place edit. Every edit of an
    existing file is checked to be insertions only (zero-width spans); the kernel file stays pristine.
    """
    outcomes: dict[str, KdaLanding | NotLanded] = {}
    landed: list[KdaLanding] = []
    for acc in accepted:
        if not is_rewrite(acc.candidate.coder, acc.candidate.skill_ids):
            continue
        own = [f for f in files if acc.op_id in f.ops]
        shared = [f.path for f in own if f.ops != [acc.op_id]]
        outcome = (
            NotLanded(acc.op_id, f"{', '.join(shared)} also carries another op's change")
            if shared
            else kda_landing(acc.task, acc.evaluation, {f.path: f.new for f in own}, package_root)
        )
        taken = {f.path for x in landed for f in x.files if f.old is None}
        in_place = {f.path for f in files if acc.op_id not in f.ops}
        if isinstance(outcome, KdaLanding) and taken & {f.path for f in outcome.files if f.old is None}:
            outcome = NotLanded(acc.op_id, "another rewrite of this patch lands files of the same names")
        elif isinstance(outcome, KdaLanding) and (both := in_place & {f.path for f in outcome.files}):
            outcome = NotLanded(acc.op_id, f"{', '.join(sorted(both))} also carries another op's in-place change")
        outcomes[acc.op_id] = outcome
        if isinstance(outcome, KdaLanding):
            landed.append(outcome)
    replaced = {x.replaces for x in landed}
    out = [f for f in files if f.path not in replaced]
    for edit in merge(landed):
        spans = edit.spans() if edit.old is not None else []
        if edit.old is not None:
            verify_spans(edit.path, edit.old, edit.new, [(s.start_byte, s.end_byte) for s in spans])
        ops = sorted(x.op_id for x in landed if any(f.path == edit.path for f in x.files))
        mode = (package_root / edit.path).stat().st_mode if edit.old is not None else 0o100644
        out.append(NewFile(edit.path, edit.old or b"", edit.new, spans, ops, mode, created=edit.old is None))
    return sorted(out, key=lambda f: f.path), outcomes


def task_patch(
    task: Task, task_dir: pathlib.Path, source: SourceInfo, regions: dict[str, str]
) -> tuple[list[NewFile], bytes]:
    """One op's regions spliced into ``source``'s tree and its unified diff, by :func:`compose` (checked as a run's).

    The files are compared with the task's recorded digests, changed only inside its spans and,
    for a Triton task, parsed (:func:`integrate.triton_splice.check_python`); the diff's paths
    follow ``source``'s layout. Nothing is written. Unchanged regions give no file and an empty diff.
    """
    candidate = Candidate(
        op_id=task.op_id,
        id=content_hash(*(f"{k}\0{v}" for k, v in sorted(regions.items()))),
        parent=None,
        regions=regions,
        coder="integrate:task_patch",
    )
    layout = layout_of(source)
    files, _, _ = compose([Accepted(task.op_id, candidate, None, task, task_dir)], layout.package_root)
    return files, patch_text((layout.diff_path(f.path), f.old, f.new, _git_mode(f.mode), f.created) for f in files)


def _merge_same_spans(old: bytes, file_edits: list[_Edit]) -> list[_Edit]:
    """The edits, each span several ops replace differently replaced once by the texts' function-wise merge
    (:func:`optimize.reach.merge_functions`); texts that do not combine are left for :func:`_disjoint` to refuse."""
    groups: dict[tuple[int, int], list[_Edit]] = {}
    for edit in file_edits:
        groups.setdefault((edit.span.start_byte, edit.span.end_byte), []).append(edit)
    out: list[_Edit] = []
    for (start, end), group in groups.items():
        texts = list(dict.fromkeys(e.text.decode() for e in group))
        merged = merge_functions(group[0].span.name, old[start:end].decode(), texts) if len(texts) > 1 else None
        if merged is None:
            out.extend(group)
        else:
            out.append(_Edit(group[0].span, merged.encode(), "+".join(sorted({e.op_id for e in group}))))
    return out


def _disjoint(path: str, file_edits: list[_Edit]) -> list[_Edit]:
    ordered = sorted(file_edits, key=lambda e: (e.span.start_byte, e.span.end_byte))
    unique: list[_Edit] = []
    for edit in ordered:
        if unique:
            prev = unique[-1]
            same = (prev.span.start_byte, prev.span.end_byte) == (edit.span.start_byte, edit.span.end_byte)
            if same and prev.text == edit.text:
                continue
            if edit.span.start_byte < prev.span.end_byte:
                raise PatchError(
                    f"{path}: span {edit.span.name} of {edit.op_id} overlaps span {prev.span.name} of "
                    f"{prev.op_id} with different text; the two candidates cannot both be applied",
                    fix=f"integrate one of them (optimize --ops {prev.op_id} or {edit.op_id}) first",
                )
        unique.append(edit)
    return unique


# --------------------------------------------------------------------------- verify


def _git_mode(mode: int) -> str:
    return "100755" if mode & 0o111 else "100644"


def _tool_env(root: pathlib.Path) -> dict[str, str]:
    env = dict(os.environ)
    # Never let git discover a repository above the scratch folder.
    env["GIT_CEILING_DIRECTORIES"] = str(root.parent)
    return env


def verify_applies(text: bytes, layout: TreeLayout, files: list[NewFile]) -> tuple[list[str], dict[str, str]]:
    """Apply ``text`` to pristine copies with git and with patch; compare with the expected bytes.

    Returns (checks passed, checks not run with the reason). A tool that is
    installed but fails raises :class:`PatchError` with its output.
    """
    expected_paths = [layout.diff_path(f.path) for f in files]
    if patched_paths(text) != expected_paths:
        raise PatchError(f"the patch touches {patched_paths(text)}, expected exactly {expected_paths}")
    passed, not_run = [], {}
    tools = {
        "git apply": ["git", "apply", "--whitespace=nowarn", "-"],
        "patch -p1": ["patch", "-p1", "--batch", "--silent", "--forward"],
    }
    for name, argv in tools.items():
        if shutil.which(argv[0]) is None:
            not_run[name] = f"{argv[0]} is not on PATH"
            continue
        with tempfile.TemporaryDirectory(prefix="ks-apply-") as tmp:
            root = pathlib.Path(tmp) / "tree"
            for f in (f for f in files if not f.created):  # a created file is the diff's to make
                dest = root / layout.diff_path(f.path)
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(f.old)
            done = subprocess.run(argv, input=text, cwd=root, capture_output=True, env=_tool_env(root), timeout=120)
            if done.returncode != 0:
                raise PatchError(
                    f"`{' '.join(argv[:2])}` could not apply the generated patch to pristine copies",
                    detail=(done.stdout + done.stderr).decode(errors="replace")[-4000:],
                )
            for f in files:
                got = (root / layout.diff_path(f.path)).read_bytes()
                if got != f.new:
                    raise PatchError(
                        f"`{name}` applied the patch but {f.path} came out different from the spliced file"
                    )
        passed.append(name)
    return passed, not_run


# --------------------------------------------------------------------------- trees


def write_atomic(path: pathlib.Path, data: bytes, mode: int | None = None) -> None:
    tmp = path.parent / f".{path.name}.ks-{uuid.uuid4().hex}"
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode & 0o7777)
        _replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def copy_package(src: pathlib.Path, dest: pathlib.Path) -> None:
    """Copy a package tree, writable (the wheel cache is read-only), without bytecode caches."""
    for folder, dirs, names in os.walk(src):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = pathlib.Path(folder).relative_to(src)
        (dest / rel).mkdir(parents=True, exist_ok=True)
        for name in names:
            source = pathlib.Path(folder) / name
            if source.is_symlink():
                os.symlink(os.readlink(source), dest / rel / name)
                continue
            target = dest / rel / name
            shutil.copyfile(source, target)
            os.chmod(target, 0o755 if source.stat().st_mode & 0o111 else 0o644)


def materialize(layout: TreeLayout, files: list[NewFile], dest: pathlib.Path) -> pathlib.Path:
    """Build the patched copy in a staging folder, verify it, publish it at ``dest`` by rename."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = dest.parent / f".{dest.name}-staging-{uuid.uuid4().hex}"
    old = dest.parent / f".{dest.name}-old-{uuid.uuid4().hex}"
    try:
        package = staging / layout.prefix
        copy_package(layout.package_root, package)
        for f in files:
            (package / f.path).parent.mkdir(parents=True, exist_ok=True)
            write_atomic(package / f.path, f.new)
        for f in files:
            if sha256((package / f.path).read_bytes()) != sha256(f.new):
                raise PatchError(f"the patched copy of {f.path} does not hash as expected after writing")
        if dest.exists():
            os.replace(dest, old)
        os.replace(staging, dest)
    finally:
        for leftover in (staging, old):
            if leftover.exists():
                shutil.rmtree(leftover, ignore_errors=True)
    return dest


# --------------------------------------------------------------------------- entry


def _landing_fields(outcome: KdaLanding | NotLanded | None) -> dict[str, str]:
    """OpChange's landing fields: a KDA landing's target and guard, or why a rewrite stays in place."""
    if isinstance(outcome, KdaLanding):
        return {"landing": "kda", "kda_target": outcome.target, "kda_guard": outcome.guard}
    return {"landing_note": outcome.reason} if outcome is not None else {}


def build_patch(
    run: str,
    run_dir: pathlib.Path,
    tasks_dir: pathlib.Path,
    source: SourceInfo,
    out_dir: pathlib.Path,
    *,
    in_place: bool = False,
    accepted: list[Accepted] | None = None,
    skipped: dict[str, str] | None = None,
) -> Patch:
    """Make, verify and publish the patch of a run; return its record (also written to patch.json).

    Never writes the source tree, ``in_place`` or not (see :func:`integrate.in_place.swap_in_place`).
    """
    if accepted is None:
        accepted, skipped = load_run(run_dir, tasks_dir)
    skipped = dict(skipped or {})
    layout = layout_of(source)
    if in_place and source.kind == "wheel":
        raise ConfigError(
            "--in-place would rewrite the shared, read-only cache of the pinned sglang wheel",
            fix="give the tree to patch with --sglang PATH (or SGLANG_SRC), or drop --in-place to get a patched copy",
        )
    files, matched_best, landings = compose(accepted, layout.package_root)
    text = patch_text((layout.diff_path(f.path), f.old, f.new, _git_mode(f.mode), f.created) for f in files)
    verified, not_verified = (["spans"], {})
    if matched_best:
        verified.append("best/src")
    if files:
        passed, not_run = verify_applies(text, layout, files)
        verified += passed
        not_verified.update(not_run)

    out_dir.mkdir(parents=True, exist_ok=True)
    folder = IntegrateFolder(out_dir)
    patch_path = folder.patch
    patched_tree = None
    backups = None
    if files:
        patched_tree = str(materialize(layout, files, folder.tree))
        write_atomic(patch_path, text)
    baseline_tree = None
    # ``in_place`` only refuses a tree that may not be written (above): the swap itself is
    # swap_in_place's, after the GPU checks passed on the patched copy.

    touched = {f.path for f in files}
    record = Patch(
        run=run,
        source=source,
        layout=layout.kind,
        prefix=layout.prefix,
        tree_root=str(layout.tree_root),
        patch_file=str(patch_path),
        patch_sha256=sha256(text),
        files=[
            FileChange(
                created=f.created,
                path=f.path,
                diff_path=layout.diff_path(f.path),
                sha256_before=sha256(f.old),
                sha256_after=sha256(f.new),
                size_before=len(f.old),
                size_after=len(f.new),
                spans=f.spans,
                ops=f.ops,
            )
            for f in files
        ],
        ops=[
            OpChange(
                op_id=acc.op_id,
                candidate=acc.candidate.id,
                task_dir=str(acc.task_dir),
                spans=sorted(acc.candidate.regions),
                files=sorted({s.file for s in acc.task.editable if s.name in acc.candidate.regions} & touched),
                evaluation=acc.evaluation,
                rationale=acc.candidate.rationale,
                skills=acc.candidate.skill_ids,
                coder=acc.candidate.coder,
                **_landing_fields(landings.get(acc.op_id)),
            )
            for acc in accepted
        ],
        skipped=skipped,
        patched_tree=patched_tree,
        baseline_tree=baseline_tree,
        in_place=False,  # set by swap_in_place once the checks passed
        backups=backups,
        verified=verified,
        not_verified=not_verified,
    )
    write_record(record, folder.patch_record)
    return record


def package_dir(patch: Patch, *, patched: bool) -> pathlib.Path:
    """The sglang package folder of the patched copy (or of the pristine tree)."""
    if patched:
        if patch.in_place:
            return pathlib.Path(patch.tree_root) / patch.prefix
        if patch.patched_tree is None:
            raise ConfigError("this patch changed no file, so there is no patched tree", fix="nothing to integrate")
        return pathlib.Path(patch.patched_tree) / patch.prefix
    if patch.in_place:
        if patch.baseline_tree is None:
            raise ConfigError("the tree was patched in place and no pristine copy was kept", fix="re-run integrate")
        return pathlib.Path(patch.baseline_tree) / patch.prefix
    return pathlib.Path(patch.tree_root) / patch.prefix
