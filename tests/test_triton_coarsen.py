"""optimize.transforms.triton_coarsen: program coarsening of a Triton grid axis (kernel and launch edited together)."""

from __future__ import annotations

import importlib.util

import pytest
from triton_demo import scaled_add_task

from contract.layout import baseline_regions, read_task_files, task_dir
from optimize.search import triton_space
from optimize.transforms import registry as transforms
from optimize.transforms import triton_coarsen as tc
from optimize.transforms.edits import NotApplicable, TransformError

KERNEL = (
    "@triton.jit\n"
    "def k(x, out, n, B: tl.constexpr):\n"
    '    """one row a program"""\n'
    "    row = tl.program_id(0)\n"
    "    rows = tl.num_programs(0)\n"
    "    col = tl.program_id(axis=1)\n"
    "    offs = tl.arange(0, B)\n"
    "    tl.store(out + row * n + offs, tl.load(x + row * n + offs) + rows + col)\n"
)
LAUNCH = "k[(num_rows, 2)](x, out, n, B=64)"
REGIONS = {"k": KERNEL, "launch:k": LAUNCH}


def test_the_body_runs_once_per_folded_program_guarded_and_the_grid_shrinks():
    out = tc.coarsen_programs(REGIONS, launch="launch:k", kernel="k", axis=0, value=4)
    assert (
        out["launch:k"]
        == "k[(triton.cdiv(num_rows, 4), 2)](x, out, n, B=64, coarse_extent_0=num_rows, COARSE_PROGRAMS_0=4)"
    )
    kernel = out["k"]
    assert "def k(x, out, n, B: tl.constexpr, coarse_extent_0=-1, COARSE_PROGRAMS_0: tl.constexpr = 1):\n" in kernel
    assert kernel.index('"""one row a program"""') < kernel.index(
        "for _coarse_step_0 in tl.static_range(COARSE_PROGRAMS_0):"
    )
    assert "_coarse_pid_0 = tl.program_id(0) * COARSE_PROGRAMS_0 + _coarse_step_0" in kernel
    assert "if (coarse_extent_0 < 0) | (_coarse_pid_0 < coarse_extent_0):" in kernel  # the last program's overhang
    assert "            row = _coarse_pid_0\n" in kernel  # the body, two levels in
    assert "rows = tl.where(coarse_extent_0 < 0, tl.num_programs(0), coarse_extent_0)" in kernel  # the real extent
    assert "col = tl.program_id(axis=1)" in kernel  # another axis stays


def test_a_caller_that_passes_nothing_runs_the_kernel_as_before():
    """The neutral defaults: one step, no guard, num_programs as Triton gives it (evaluated in plain Python)."""
    kernel = tc.coarsen_programs(REGIONS, launch="launch:k", kernel="k", axis=0, value=2)["k"]
    body = kernel.split("):\n", 1)[1]
    seen: list[tuple[int, int]] = []
    pid = {0: 5, 1: 1}

    class TL:  # just enough of triton.language to run the body's control flow
        constexpr = int

        @staticmethod
        def program_id(axis):
            return pid[axis]

        @staticmethod
        def num_programs(axis):
            return 9

        @staticmethod
        def where(c, a, b):
            return a if c else b

        @staticmethod
        def static_range(n):
            return range(n)

        @staticmethod
        def arange(a, b):
            return 0

        @staticmethod
        def load(p):
            return 0

        @staticmethod
        def store(p, v):
            seen.append((p, v))

    fn = "def run(x, out, n, B, coarse_extent_0=-1, COARSE_PROGRAMS_0=1):\n" + body
    env: dict = {"tl": TL}
    exec(fn, env)  # noqa: S102  (our own test text)
    env["run"](0, 0, 10, 64)
    assert seen == [(50, 9 + 1)]  # row 5 (program 5), rows = 9 (num_programs), col 1
    seen.clear()
    pid[0] = 2
    env["run"](0, 0, 10, 64, coarse_extent_0=11, COARSE_PROGRAMS_0=4)  # program 2 of cdiv(11, 4): rows 8, 9, 10
    assert seen == [(80, 12), (90, 12), (100, 12)]


def test_a_second_edit_of_the_same_axis_changes_the_launch_only():
    once = tc.coarsen_programs(REGIONS, launch="launch:k", kernel="k", axis=0, value=4)
    twice = tc.coarsen_programs(
        once, launch="launch:k", kernel="k", axis=0, value=2, bucket="T<=64", tokens="x.shape[0]"
    )
    assert twice["k"] == once["k"]
    factor = "(2 if x.shape[0] <= 64 else 4)"
    assert twice["launch:k"] == (
        f"k[(triton.cdiv(num_rows, {factor}), 2)](x, out, n, B=64, coarse_extent_0=num_rows, COARSE_PROGRAMS_0={factor})"
    )


def test_what_cannot_be_coarsened_says_why():
    with pytest.raises(NotApplicable, match="not a literal tuple"):
        tc.coarsen_programs(
            {**REGIONS, "launch:k": "k[grid](x, out, n, B=64)"}, launch="launch:k", kernel="k", axis=0, value=2
        )
    with pytest.raises(NotApplicable, match="returns early"):
        early = KERNEL.replace("    offs = ", "    if row > n:\n        return\n    offs = ")
        tc.coarsen_programs({**REGIONS, "k": early}, launch="launch:k", kernel="k", axis=0, value=2)
    with pytest.raises(NotApplicable, match=r"never reads tl.program_id\(1\)"):
        plain = KERNEL.replace("tl.program_id(axis=1)", "0")
        tc.coarsen_programs({**REGIONS, "k": plain}, launch="launch:k", kernel="k", axis=1, value=2)
    with pytest.raises(TransformError, match="power of two"):
        tc.coarsen_programs(REGIONS, launch="launch:k", kernel="k", axis=0, value=3)
    assert "triton_coarsen_programs" in transforms.TRANSFORMS


@pytest.fixture
def demo_task(tmp_path):
    work, task = scaled_add_task(tmp_path)
    return task_dir(work, task.op_id), task


def test_the_search_offers_each_axis_the_kernel_reads_per_token_bucket(demo_task):
    folder, task = demo_task
    found, _, _ = triton_space.tunables(task, folder)
    (coarsen,) = [t for t in found if t.transform == tc.TRANSFORM]
    assert coarsen.id == "launch:scaled_add_kernel/programs[0]"
    assert (coarsen.baseline, coarsen.values, coarsen.bucketed) == (1, tc.FACTORS, True)
    labels = [d.title for d in triton_space.decisions(task, folder) if d.transform == tc.TRANSFORM]
    assert labels and all(label.startswith("launch:scaled_add_kernel/programs[0]") for label in labels)


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_a_coarsened_point_compiles_for_sm90_on_the_cpu(demo_task):
    from optimize.harness.triton_check import check_point

    folder, task = demo_task
    regions = baseline_regions(read_task_files(folder, task), task)
    edited = tc.coarsen_programs(
        regions, launch="launch:scaled_add_kernel", kernel="scaled_add_kernel", axis=0, value=4
    )
    check = check_point(folder, task, edited)
    assert check.outcome.value == "ok", check.stderr
