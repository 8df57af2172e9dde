"""pipeline.digest.source_digest: the one way a cache key covers our own code."""

from __future__ import annotations

from pipeline import digest


def test_digest_covers_content_and_place_and_ignores_patterns_that_match_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(digest, "ROOT", tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.py").write_text("one")

    def key(*patterns: str) -> str:
        digest.source_digest.cache_clear()
        return digest.source_digest(patterns)

    first = key("a/*.py")
    assert key("a/*.py", "missing/*.py") == first  # a module becoming a package: both spellings listed
    (tmp_path / "a" / "x.py").write_text("two")
    changed = key("a/*.py")
    assert changed != first
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x.py").rename(tmp_path / "b" / "x.py")
    assert key("a/*.py", "b/*.py") != changed  # the same bytes in another place: another key


def test_the_task_key_and_the_verdict_key_cover_the_contract_package():
    from bench import health
    from extract import tasks

    assert "contract/*.py" in tasks._OWN_CODE
    assert {"contract/*.py", "contract/*.toml"} <= set(health._FINGERPRINT_GLOBS)


def test_a_dirty_checkout_is_named_by_its_commit_and_the_digest_of_its_sources(tmp_path, monkeypatch):
    """The device's copy of the tree had an old HEAD under new files: ``+dirty`` alone did not say which
    code measured a batch; the sources' digest does."""
    import subprocess

    monkeypatch.setattr(digest, "ROOT", tmp_path)
    (tmp_path / "pipeline").mkdir()
    (tmp_path / "pipeline" / "x.py").write_text("one\n")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout[:12]
    digest.source_digest.cache_clear()
    assert digest.kernelsmith_version() == head, "a clean checkout is its commit"
    (tmp_path / "pipeline" / "x.py").write_text("two\n")
    digest.source_digest.cache_clear()
    version = digest.kernelsmith_version()
    assert version == f"{head}+dirty src:{digest.source_digest(digest.PROJECT_SOURCES)[:12]}"
    (tmp_path / "pipeline" / "x.py").write_text("three\n")
    digest.source_digest.cache_clear()
    assert digest.kernelsmith_version() != version, "other uncommitted code, another name"
    digest.source_digest.cache_clear()
