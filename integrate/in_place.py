"""``--in-place``: the checked patch written into the tree it was taken from.

:func:`integrate.patch.build_patch` never writes the user's tree. Only after the GPU checks ran
and passed on the patched copy does :func:`swap_in_place` write it: each original is backed up,
each file replaced by an atomic rename (a file the patch creates, a KDA landing's, is written the
same way and has no original), and the tree's hashes are checked.

What must stay true: any failure restores every file already replaced (a created file is removed),
so the tree is byte for byte as it was, and the error says so.
"""

from __future__ import annotations

import os
import pathlib
import uuid

from contract.layout import IntegrateFolder
from integrate.diffs import sha256
from integrate.errors import ConfigError, PatchError
from integrate.patch import BACKUP_DIR, BASELINE_DIR, NewFile, TreeLayout, materialize, write_atomic
from integrate.records import Patch
from pipeline.record_io import write_record


def apply_in_place(layout: TreeLayout, files: list[NewFile], backup_dir: pathlib.Path) -> None:
    """Replace the files of the original tree, one atomic rename each, restoring all on failure."""
    root = layout.package_root
    for f in files:
        target = root / f.path
        if target.exists() if f.created else target.read_bytes() != f.old:
            raise PatchError(
                f"{root / f.path} changed since the patch was computed; nothing was modified", fix="re-run integrate"
            )
    backup_dir.mkdir(parents=True, exist_ok=True)
    for f in (f for f in files if not f.created):
        backup = backup_dir / f.path
        backup.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(backup, f.old)
        if backup.read_bytes() != f.old:
            raise PatchError(f"could not back up {f.path} to {backup}; nothing was modified")
    replaced: list[NewFile] = []
    step = ""
    try:
        for f in files:
            step = f"replacing {f.path}"
            (root / f.path).parent.mkdir(parents=True, exist_ok=True)
            write_atomic(root / f.path, f.new, f.mode)
            replaced.append(f)
        step = "checking the replaced files"
        for f in files:
            if sha256((root / f.path).read_bytes()) != sha256(f.new):
                raise PatchError(f"{root / f.path} does not hash as expected after the swap")
    except BaseException as err:
        problems = []
        for f in reversed(replaced):
            try:
                _restore(root / f.path, backup_dir / f.path, f)
            except OSError as restore_err:  # pragma: no cover - reported, never swallowed
                problems.append(f"{f.path}: {restore_err}")
        if problems:
            raise PatchError(
                f"in-place patch failed while {step}, and restoring failed for: {'; '.join(problems)}",
                fix=f"copy the originals back from {backup_dir} by hand",
                detail=str(err),
            ) from err
        raise PatchError(
            f"in-place patch failed while {step}; every file was restored from {backup_dir}",
            detail=f"{type(err).__name__}: {err}",
        ) from err


def _restore(target: pathlib.Path, backup: pathlib.Path, f: NewFile) -> None:
    if f.created:
        target.unlink(missing_ok=True)
        return
    data = backup.read_bytes()
    if data != f.old:
        raise OSError(f"backup {backup} does not hold the original bytes")
    tmp = target.parent / f".{target.name}.ks-restore-{uuid.uuid4().hex}"
    tmp.write_bytes(data)
    os.chmod(tmp, f.mode & 0o7777)
    os.replace(tmp, target)  # the real rename, never the test hook
    if target.read_bytes() != f.old:
        raise OSError(f"{target} does not hold the original bytes after restoring")


def swap_in_place(patch: Patch, out_dir: pathlib.Path) -> Patch:
    """Write a checked patch into the tree it was taken from (``--in-place``); return the updated record.

    Call only after the GPU checks passed on ``patch.patched_tree``: the bytes written
    are that copy's, each checked against the hash the patch recorded, and every original
    must still hash as it did when the patch was made. The pristine op is kept at
    ``baseline/`` (later GPU re-runs compare against it), the originals at ``backup/``;
    on any failure every file is restored (:func:`apply_in_place`). Also rewrites
    ``patch.json``.
    """
    if patch.in_place or not patch.files:
        return patch
    if patch.source.kind == "wheel":
        raise ConfigError(
            "--in-place would rewrite the shared, read-only cache of the pinned sglang wheel",
            fix="give the tree to patch with --sglang PATH (or SGLANG_SRC), or drop --in-place to get a patched copy",
        )
    if patch.patched_tree is None:
        raise PatchError("the patch has no patched copy to take the checked files from", fix="re-run integrate")
    tree_root = pathlib.Path(patch.tree_root)
    layout = TreeLayout(patch.layout, tree_root / patch.prefix, tree_root, patch.prefix)
    copy = pathlib.Path(patch.patched_tree) / patch.prefix
    files = []
    for change in patch.files:
        target = layout.package_root / change.path
        try:
            new = (copy / change.path).read_bytes()
            old, mode = (b"", 0o100644) if change.created else (target.read_bytes(), target.stat().st_mode)
        except OSError as err:
            raise PatchError(
                f"cannot read {change.path} for the in-place swap; nothing was modified",
                fix="check the tree and the patched copy are readable, then re-run integrate --in-place",
                detail=str(err),
            ) from err
        if target.exists() if change.created else sha256(old) != change.sha256_before:
            raise PatchError(
                f"{target} changed since the patch was computed; nothing was modified", fix="re-run integrate"
            )
        if sha256(new) != change.sha256_after:
            raise PatchError(
                f"the checked copy {copy / change.path} changed since the checks; nothing was modified",
                fix="re-run integrate --in-place",
            )
        files.append(NewFile(change.path, old, new, change.spans, change.ops, mode, change.created))
    baseline_tree = str(materialize(layout, [], out_dir / BASELINE_DIR))
    backups = out_dir / BACKUP_DIR
    apply_in_place(layout, files, backups)
    record = patch.model_copy(
        update={
            "in_place": True,
            "baseline_tree": baseline_tree,
            "backups": str(backups),
            "verified": [*patch.verified, "in-place hashes"],
        }
    )
    write_record(record, IntegrateFolder(out_dir).patch_record)
    return record
