"""A patch of several op families as a series: one patch and one PR per family, applying in order.

Why: SGLang's maintainers take one pull request per op family (an activation change and a layernorm
change are reviewed by different people), while the one build of everything
(:mod:`integrate.merge`) is proven as a whole. So a patch whose ops span several families
(``activation``, ``layernorm``, ... : the op id's group) is also written as ``series/NN-<family>.patch``,
each the diff from the tree with the parts before it applied, and ``series/NN-<family>.md``, that
family's PR (its ops, checks, tests and diff; the model step as measured with the whole series).

Order: families sorted by name. Part k is made from the accepted candidates of families 1..k
composed together (:func:`integrate.patch.compose`), diffed against parts 1..k-1, so a file two
families touch is in both parts, each adding its own spans.

What must stay true: applying the parts in order with ``git apply`` to a pristine copy of the
touched files gives exactly the bytes of the whole patch (:func:`write_series` checks it before it
publishes the folder), and each part changes only its family's spans.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import tempfile
from collections.abc import Sequence

from contract.layout import SERIES_DIR, IntegrateFolder
from integrate.accepted import Accepted
from integrate.diffs import patch_text, sha256
from integrate.errors import PatchError
from integrate.patch import TreeLayout, _git_mode, _tool_env, compose, write_atomic
from integrate.records import IntegrateReport, SeriesPart


def family(op_id: str) -> str:
    """An op's family: its id's group (``activation.silu_and_mul`` -> ``activation``)."""
    return op_id.partition(".")[0]


def write_series(accepted: Sequence[Accepted], layout: TreeLayout, out_dir: pathlib.Path) -> list[SeriesPart]:
    """Write ``out_dir/series/`` when the accepted candidates span several families; [] otherwise."""
    families = sorted({family(a.op_id) for a in accepted})
    folder = IntegrateFolder(out_dir).series
    if len(families) < 2:
        shutil.rmtree(folder, ignore_errors=True)
        return []
    current: dict[str, bytes] = {}  # package-relative path -> its bytes after the parts so far
    pristine: dict[str, tuple[bytes, int]] = {}
    texts: list[bytes] = []
    parts: list[SeriesPart] = []
    for upto, name in enumerate(families, start=1):
        files, _, _ = compose([a for a in accepted if family(a.op_id) in families[:upto]], layout.package_root)
        changed = []
        for f in files:
            if not f.created:  # a created file has no pristine copy: its part adds it
                pristine.setdefault(f.path, (f.old, f.mode))
            before = current.get(f.path, f.old)
            if before != f.new:
                changed.append((f.path, before, f.new, f.mode, f.created and f.path not in current))
                current[f.path] = f.new
        if not changed:  # its spans already hold these texts (another family's same edit): no part of its own
            continue
        text = patch_text((layout.diff_path(p), old, new, _git_mode(mode), made) for p, old, new, mode, made in changed)
        texts.append(text)
        index = len(parts) + 1
        parts.append(
            SeriesPart(
                index=index,
                family=name,
                ops=sorted(a.op_id for a in accepted if family(a.op_id) == name),
                file=f"{SERIES_DIR}/{index:02d}-{name}.patch",
                sha256=sha256(text),
                files=[p for p, *_ in changed],
            )
        )
    if len(parts) < 2:
        shutil.rmtree(folder, ignore_errors=True)
        return []
    _check_in_order(texts, layout, pristine, current)
    staging = out_dir / f".{SERIES_DIR}.staging"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for part, text in zip(parts, texts, strict=True):
        write_atomic(staging / pathlib.PurePosixPath(part.file).name, text)
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return parts


def _check_in_order(
    texts: Sequence[bytes], layout: TreeLayout, pristine: dict[str, tuple[bytes, int]], final: dict[str, bytes]
) -> None:
    """Apply every part in order with ``git apply`` to pristine copies; the result must be the whole patch."""
    if shutil.which("git") is None:
        return  # build_patch already records git apply as not run, with the reason
    with tempfile.TemporaryDirectory(prefix="ks-series-") as tmp:
        root = pathlib.Path(tmp) / "tree"
        for path, (data, _) in pristine.items():
            dest = root / layout.diff_path(path)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        for index, text in enumerate(texts, start=1):
            done = subprocess.run(
                ["git", "apply", "--whitespace=nowarn", "-"],
                input=text,
                cwd=root,
                capture_output=True,
                env=_tool_env(root),
                timeout=120,
            )
            if done.returncode != 0:
                raise PatchError(
                    f"part {index} of the series does not apply after the parts before it",
                    detail=(done.stdout + done.stderr).decode(errors="replace")[-4000:],
                )
        for path, data in final.items():
            if (root / layout.diff_path(path)).read_bytes() != data:
                raise PatchError(f"the series applied in order gives another {path} than the whole patch")


def family_report(report: IntegrateReport, part: SeriesPart) -> IntegrateReport:
    """``report`` narrowed to one family's PR: its ops, the checks of them and of the ops they reach,
    their tests; the model step stays the whole series' (the PR says so)."""
    ops = set(part.ops)
    reach = {op: others for op, others in report.reach.items() if op in ops}
    checked = ops | {other for others in reach.values() for other in others}
    patch = report.patch.model_copy(
        update={
            "ops": [op for op in report.patch.ops if op.op_id in ops],
            "files": [f for f in report.patch.files if f.path in part.files],
        }
    )
    return report.model_copy(
        update={
            "patch": patch,
            "checks": [c for c in report.checks if c.op_id in checked],
            "tests": [t for t in report.tests if t.op_id in ops],
            "upstream": [u for u in report.upstream if u.op_id in ops],
            "reach": reach,
            "merged_from": {op: run for op, run in report.merged_from.items() if op in ops},
            "series_part": part.index,
        }
    )
