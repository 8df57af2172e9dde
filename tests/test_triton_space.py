"""optimize.search.triton_space and triton_check: a Triton task's search space, and each point compiled for sm_90.

Regenerate the golden files with ``UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_triton_space.py``
after checking the diff by eye: ids of dimensions and points, reasons, counts; no SGLang text.
"""

from __future__ import annotations

import importlib.util
import pathlib

import pytest
from golden import assert_golden
from triton_demo import demo_tree

from contract.layout import baseline_regions, read_task_files, task_dir
from extract import triton_ops, triton_tasks
from optimize.harness import triton_check
from optimize.search import triton_space
from optimize.search.space import realize
from optimize.transforms import triton_edits as tt
from pipeline.run_records import Outcome

GOLDEN = pathlib.Path(__file__).parent / "golden" / "triton_space"
#: real Triton ops whose baseline compiles on the CPU: bucketed launch options; unbucketed; block sizes with the grid
SPACE_OPS = ("attention.merge_state_triton", "speculative.build_qo_indptr_triton", "moe.shuffle_weighted_sum")
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")


def _task(index, op_id, work):
    op = next(o for o in index.ops if o.id == op_id)
    task = triton_tasks.write_task(index, op, work)
    folder = task_dir(work, task.op_id)
    return task, folder, baseline_regions(read_task_files(folder, task), task)


@pytest.fixture
def demo(tmp_path):
    index, _ = triton_ops.scan_tree(demo_tree(tmp_path), None)
    return _task(index, "demo.scaled_add", tmp_path / "work")


def test_an_autotuned_kernel_offers_a_pin_and_no_launch_options(demo):
    task, folder, _ = demo
    found, skipped, tokens = triton_space.tunables(task, folder)
    assert [(t.id, t.values) for t in found] == [
        ("launch:scaled_add_kernel/programs[0]", (2, 4, 8)),  # program coarsening (optimize.transforms.triton_coarsen)
        ("scaled_add_kernel/autotune", (0, 1)),
    ]
    assert {s.what for s in skipped} == {"launch:scaled_add_kernel/num_warps", "launch:scaled_add_kernel/num_stages"}
    assert tokens == "x.shape[0]"  # num_tokens, read from the first required tensor
    space = triton_space.triton_space(task, folder)
    assert [triton_space.point_id(space, p) for p in triton_space.single_points(space)] == [
        "scaled_add_kernel/autotune=0",
        "scaled_add_kernel/autotune=1",
        *(f"launch:scaled_add_kernel/programs[0]@{b}={k}" for b in ("T<=64", "T>=512") for k in (2, 4, 8)),
    ]


@needs_triton
def test_a_pinned_point_compiles_and_a_broken_one_is_a_typed_failure_with_tritons_message(demo):
    task, folder, base = demo
    space = triton_space.triton_space(task, folder)
    regions, steps = realize(space, triton_space.single_points(space)[1], base)
    assert [s.skill for s in steps] == ["triton_autotune_pin"]
    assert triton_check.check_point(folder, task, regions).outcome == Outcome.ok
    broken = dict(
        regions, scaled_add_kernel=regions["scaled_add_kernel"].replace("tl.arange(0, BLOCK)", "tl.arange(0, 48)", 1)
    )
    check = triton_check.check_point(folder, task, broken, point="broken")
    assert check.outcome == Outcome.compile_failed and check.point == "broken"
    assert check.stderr.startswith("scaled_add_kernel: ") and "power of 2" in check.stderr  # Triton's own words
    unparsable = dict(regions, scaled_add_kernel=regions["scaled_add_kernel"].replace("def ", "def (", 1))
    check = triton_check.check_point(folder, task, unparsable)
    assert check.outcome == Outcome.compile_failed and "does not parse after the edit" in check.stderr


@pytest.mark.wheel
@pytest.mark.parametrize("op_id", SPACE_OPS)
def test_golden_spaces(triton_wheel_index, op_id, tmp_path):
    task, folder, base = _task(triton_wheel_index, op_id, tmp_path / "work")
    found, skipped, tokens = triton_space.tunables(task, folder)
    space = triton_space.triton_space(task, folder)
    points = triton_space.single_points(space)
    actual = {
        "op": op_id,
        "tokens": tokens,
        "buckets": triton_space.buckets_of(task),
        "tunables": [[t.id, t.transform, t.baseline, list(t.values)] for t in found],
        "untunable": [[s.what, s.why] for s in skipped],
        "size": space.size,
        "dimensions": [d.name for d in space.dimensions],
        "points": [triton_space.point_id(space, p) for p in points],
    }
    golden = GOLDEN / f"{op_id}.json"
    assert_golden(golden, actual)
    for point in points:  # every point's edit parses and keeps Triton's limits
        regions, _ = realize(space, point, base)
        for name, text in regions.items():
            if name.startswith("launch:"):
                call = tt.parse_launch(text, name)
                for option in tt.LAUNCH_OPTIONS:
                    arg = tt.keyword(call, option)
                    if arg is None:
                        continue
                    chosen, fallback = tt.split_chain(arg.value, tokens) if tokens else ({}, arg.value)
                    for v in [*chosen.values(), fallback]:
                        tt.check_value(option, int(tt.code(v)))
            else:
                tt.parse_kernel(text, name)


@needs_triton
@pytest.mark.wheel
@pytest.mark.parametrize("op_id", SPACE_OPS)
def test_points_compile_for_sm90(triton_wheel_index, op_id, tmp_path):
    """The first single-change point and the point at every dimension's last value (capped: two a task)."""
    task, folder, base = _task(triton_wheel_index, op_id, tmp_path / "work")
    space = triton_space.triton_space(task, folder)
    last = {d.name: d.values[-1] for d in space.dimensions}
    for point in (triton_space.single_points(space)[0], last):
        regions, _ = realize(space, point, base)
        check = triton_check.check_point(folder, task, regions, point=triton_space.point_id(space, point))
        assert check.outcome == Outcome.ok, check.stderr
        assert check.buckets == (triton_space.buckets_of(task) if "@" in check.point else [""])  # each branch compiled
