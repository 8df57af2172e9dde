"""``--git-branch``: the patch committed on a new branch of the user's SGLang checkout, never pushed;
a patch written as a series (:mod:`integrate.series`) gets one stacked branch per part.

What must stay true: the user's HEAD, index and working tree never change (a temporary worktree
does the work and is removed, and only that one); a branch that exists, a name git refuses, a
checkout whose HEAD holds other bytes than the patch was taken against, and a replayed (simulated)
run are refused before anything is made.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import tempfile

from integrate.diffs import sha256
from integrate.errors import GitError
from integrate.evidence import refuse_simulated
from integrate.pr import title
from integrate.records import IntegrateReport, Patch, SeriesPart


def _git(
    checkout: pathlib.Path, *args: str, check: bool = True, input_: bytes | None = None
) -> subprocess.CompletedProcess:
    done = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, input=input_, timeout=300)
    if check and done.returncode != 0:
        raise GitError(
            f"`git {' '.join(args[:3])}` failed in {checkout}",
            detail=(done.stdout + done.stderr).decode(errors="replace")[-3000:],
        )
    return done


def commit_branch(
    patch: Patch,
    branch: str,
    message_title: str,
    message_body: str,
    *,
    run_dir: pathlib.Path | None = None,
    base: str = "HEAD",
    diff: pathlib.Path | None = None,
) -> str:
    """Commit the patch on a new branch ``branch`` of the checkout; return the commit id. Never pushes.

    ``diff`` and ``base``: one part of a series (:mod:`integrate.series`), applied on the branch of the
    part before it; HEAD's files are checked against the patch only for the first part.
    A patch from a replayed (simulated) run is refused first (:func:`integrate.evidence.refuse_simulated`).
    """
    refuse_simulated(patch, run_dir)
    if shutil.which("git") is None:
        raise GitError("--git-branch needs git, which is not on PATH", fix="install git")
    if patch.layout != "checkout":
        raise GitError(
            f"--git-branch needs an SGLang git checkout, but the sources are the {patch.layout} at {patch.tree_root}",
            fix="clone sglang, check out the commit to patch, and pass it with --sglang PATH (or SGLANG_SRC)",
        )
    if not patch.files:
        raise GitError(
            "the patch changes no file; there is nothing to commit", fix="integrate a run with an accepted candidate"
        )
    checkout = pathlib.Path(patch.tree_root)
    if _git(checkout, "check-ref-format", "--branch", branch, check=False).returncode != 0:
        raise GitError(f"{branch!r} is not a valid branch name", fix="pick a name like perf/silu-and-mul")
    if _git(checkout, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False).returncode == 0:
        raise GitError(
            f"branch {branch} already exists in {checkout}", fix="pick another --git-branch name, or delete that branch"
        )
    for f in patch.files if base == "HEAD" else []:
        shown = _git(checkout, "show", f"HEAD:{f.diff_path}", check=False)
        if shown.returncode != 0 or sha256(shown.stdout) != f.sha256_before:
            raise GitError(
                f"HEAD's {f.diff_path} is not the file the patch was taken against",
                fix="commit or stash local changes to it, or check out the commit the run used; then re-run integrate",
            )
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="ks-branch-"))
    worktree = tmp / "wt"
    created = False
    try:
        _git(checkout, "worktree", "add", "--quiet", "-b", branch, str(worktree), base)
        created = True
        applied = diff if diff is not None else pathlib.Path(patch.patch_file)
        _git(worktree, "apply", "--index", "--whitespace=nowarn", str(applied.resolve()))
        identity: list[str] = []
        if not _git(worktree, "config", "user.email", check=False).stdout.strip():
            # no identity configured: a neutral one (what goes upstream names no tool); the user
            # amends the author before pushing (`git commit --amend --reset-author`)
            identity = ["-c", "user.name=kernel patch", "-c", "user.email=kernel-patch@localhost"]
        _git(
            worktree, *identity, "commit", "--quiet", "-F", "-", input_=f"{message_title}\n\n{message_body}\n".encode()
        )
        commit = _git(worktree, "rev-parse", "HEAD").stdout.decode().strip()
    except GitError:
        if created:
            _git(checkout, "worktree", "remove", "--force", str(worktree), check=False)
            _git(checkout, "branch", "-D", branch, check=False)
        raise
    finally:
        # Only the worktree made here is removed: `git worktree prune` would also drop the
        # user's own stale worktree entries (a worktree on an unmounted disk, say).
        if worktree.exists():
            _git(checkout, "worktree", "remove", "--force", str(worktree), check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    return commit


def commit_series(
    report: IntegrateReport, branch: str, body: str, *, run_dir: pathlib.Path | None = None
) -> list[SeriesPart]:
    """Each part of the report's series on its own branch, ``<branch>-<NN>-<family>``, each made from the
    branch of the part before it (the first from HEAD), committed with its family PR's title; returns the
    parts with their branch and commit. Never pushes. A part that fails leaves the ones before it."""
    from integrate.series import family_report

    out_dir = pathlib.Path(report.patch.patch_file).parent
    base, done = "HEAD", []
    for part in report.series:
        name = f"{branch}-{part.index:02d}-{part.family}"
        commit = commit_branch(
            report.patch,
            name,
            title(family_report(report, part)),
            f"Ops: {', '.join(part.ops)}. Part {part.index} of {len(report.series)}.\n{body}",
            run_dir=run_dir,
            base=base,
            diff=out_dir / part.file,
        )
        done.append(part.model_copy(update={"branch": name, "commit": commit}))
        base = name
    return done
