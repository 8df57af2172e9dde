"""Source acquisition: local trees are recognised, and misreported provenance is avoided."""

from __future__ import annotations

import subprocess

import pytest

from extract.errors import SourceError
from extract.sources import acquire


def _tree(root):
    (root / "kernels/jit/csrc").mkdir(parents=True)
    (root / "version.py").write_text('__version__ = "9.9.9"\n')
    return root


def test_checkout_layout_records_the_commit(tmp_path):
    _tree(tmp_path / "python" / "sglang")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(tmp_path),
            "-c",
            "user.email=a@b",
            "-c",
            "user.name=a",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "x",
        ],
        check=True,
    )
    info = acquire("0.5.23", tmp_path / "cache", str(tmp_path))
    assert info.kind == "checkout" and len(info.commit or "") == 40
    assert info.root.endswith("python/sglang") and info.version == "9.9.9"


def test_package_folder_inside_another_repo_is_not_a_checkout(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    pkg = _tree(tmp_path / "work" / "cache" / "sglang")
    info = acquire("0.5.23", tmp_path / "cache", str(pkg))
    assert info.kind == "package" and info.commit is None


def test_missing_or_wrong_tree_says_how_to_fix(tmp_path):
    with pytest.raises(SourceError, match="does not exist") as err:
        acquire("0.5.23", tmp_path, str(tmp_path / "nope"))
    assert "SGLANG_SRC" in str(err.value)
    with pytest.raises(SourceError, match="no SGLang JIT kernel tree"):
        acquire("0.5.23", tmp_path, str(tmp_path))


def test_a_release_in_the_older_jit_kernel_layout_is_read_and_says_so_in_one_line(tmp_path):
    """Up to 0.5.16 the JIT kernels live in ``sglang/jit_kernel/``: such a tree is read (its jit dir is
    ``jit_kernel``), extract says in one line that its ops take the newer layout's ids, and a tree
    with neither layout says that no CUDA task comes from it."""
    from extract.sources import layout_note, unread_layout
    from pipeline.records import SourceInfo

    old = tmp_path / "old" / "sglang"
    (old / "jit_kernel" / "csrc").mkdir(parents=True)
    source = acquire("0.5.16", tmp_path, str(old))
    assert source.jit_dirs == ["jit_kernel"] and unread_layout(source) is None
    said = layout_note(source.model_copy(update={"version": "0.5.16"}))
    assert said is not None and "sglang 0.5.16" in said and "older `jit_kernel/` layout" in said and "renamed" in said
    bare = tmp_path / "bare"
    bare.mkdir()
    said = unread_layout(SourceInfo(kind="package", root=str(bare), jit_dirs=[])) or ""
    assert "has no kernels/jit/csrc/ or jit_kernel/csrc/" in said and "Triton" in said
    current = tmp_path / "new" / "sglang"
    (current / "kernels" / "jit" / "csrc").mkdir(parents=True)
    assert layout_note(acquire("0.5.23", tmp_path, str(current))) is None
