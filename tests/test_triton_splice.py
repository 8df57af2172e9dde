"""integrate.triton_splice and patch.task_patch: a Triton region spliced into the wheel's Python file, as a diff."""

from __future__ import annotations

import pathlib

import pytest

from contract.layout import baseline_regions, read_task_files, task_dir
from extract import triton_ops, triton_tasks
from integrate.errors import PatchError
from integrate.patch import task_patch
from integrate.triton_splice import check_python
from optimize.search import triton_space
from optimize.search.space import realize


@pytest.fixture(scope="module")
def merge_state(sglang_source, tmp_path_factory):
    root = pathlib.Path(__file__).resolve().parent.parent
    index, _ = triton_ops.scan_tree(sglang_source, root / "work" / "cache")
    op = next(o for o in index.ops if o.id == "attention.merge_state_triton")
    work = tmp_path_factory.mktemp("work")
    task = triton_tasks.write_task(index, op, work)
    folder = task_dir(work, task.op_id)
    return sglang_source, task, folder, baseline_regions(read_task_files(folder, task), task)


@pytest.mark.wheel
def test_the_baseline_region_gives_no_diff(merge_state):
    source, task, folder, base = merge_state
    files, text = task_patch(task, folder, source, base)
    assert files == [] and text == b""


@pytest.mark.wheel
def test_an_edited_launch_gives_exactly_that_hunk(merge_state):
    source, task, folder, base = merge_state
    space = triton_space.triton_space(task, folder)
    point = next(p for p in triton_space.single_points(space) if "num_warps@T<=64=8" in triton_space.point_id(space, p))
    regions, _ = realize(space, point, base)
    files, text = task_patch(task, folder, source, regions)
    [changed] = files
    span = next(s for s in task.editable if s.name == "launch:merge_state_kernel")
    old = (pathlib.Path(source.root) / task.module).read_bytes()
    assert changed.path == task.module and changed.old == old
    assert changed.new == old[: span.start_byte] + regions[span.name].encode() + old[span.end_byte :]
    lines = text.decode().splitlines()
    assert lines[0] == f"diff --git a/sglang/{task.module} b/sglang/{task.module}"
    added = [l for l in lines if l.startswith("+") and not l.startswith("+++")]
    removed = [l for l in lines if l.startswith("-") and not l.startswith("---")]
    assert removed == [] and len(added) == 1 and "num_warps=(8 if prefix_output.shape[0] <= 64 else 4)," in added[0]
    assert sum(l.startswith("@@") for l in lines) == 1


@pytest.mark.wheel
def test_a_region_that_breaks_the_file_is_refused_before_any_diff(merge_state):
    source, task, folder, base = merge_state
    broken = dict(base, **{"launch:merge_state_kernel": base["launch:merge_state_kernel"] + "("})
    with pytest.raises(PatchError, match="does not parse as Python"):
        task_patch(task, folder, source, broken)


def test_check_python_names_the_line():
    check_python("a.py", b"x = 1\n")
    with pytest.raises(PatchError, match=r"a\.py: the spliced file does not parse as Python: line 2"):
        check_python("a.py", b"x = 1\ndef (:\n")
