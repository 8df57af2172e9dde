"""integrate.series: a patch of two op families (activation, layernorm) on the real wheel, written as one
part and one PR per family that apply in order; one family gives no series."""

from __future__ import annotations

import pathlib
import subprocess

from test_integrate_command import _config, no_gpu  # noqa: F401 (fixtures)
from test_integrate_patch import ACT, OP, RMS, one_op_run, two_op_run, wheel_source  # noqa: F401

from cli.parser import build_parser
from cli.stages import integrate_stage as main
from contract.layout import SERIES_DIR
from integrate.accepted import load_run
from integrate.patch import layout_of
from integrate.records import IntegrateReport
from integrate.series import family, write_series
from pipeline.record_io import read_record


def test_two_families_give_two_parts_that_apply_in_order_and_a_pr_each(tmp_path, wheel_source, no_gpu):
    work = two_op_run(tmp_path, wheel_source)
    assert main(build_parser().parse_args(["integrate", "--run", "r1"]), _config(work)) == 0
    out = work / "integrate" / "r1"
    report = read_record(IntegrateReport, out / "report.json")
    assert [(p.index, p.family, p.ops, p.files) for p in report.series] == [
        (1, "activation", [OP], [ACT]),
        (2, "layernorm", ["layernorm.rmsnorm"], [RMS]),
    ]
    fresh = tmp_path / "fresh"
    for rel in (ACT, RMS):
        (fresh / "sglang" / rel).parent.mkdir(parents=True, exist_ok=True)
        (fresh / "sglang" / rel).write_bytes((pathlib.Path(wheel_source.root) / rel).read_bytes())
    for part in report.series:
        done = subprocess.run(["git", "apply", str(out / part.file)], cwd=fresh, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    for rel in (ACT, RMS):
        assert (fresh / "sglang" / rel).read_bytes() == (out / "tree" / "sglang" / rel).read_bytes(), rel
    second = (out / SERIES_DIR / "02-layernorm.md").read_text()
    assert "Part 2 of 2 of a series" in second and "parts before it, to apply first: 1 (activation)" in second
    assert "`layernorm.rmsnorm`" in second and "act_and_mul_kernel" not in second, "a part's PR shows its own diff"
    assert "series/01-activation.patch" in second and "series/02-layernorm.patch" in second
    first = (out / SERIES_DIR / "01-activation.md").read_text()
    assert "Part 1 of 2" in first and "parts before it, to apply first: none" in first
    whole = (out / "PR.md").read_text()
    assert "Also written as a series of 2 pull requests, one per op family" in whole


def test_one_family_writes_no_series(one_op_run, wheel_source):
    work = one_op_run
    accepted, _ = load_run(work / "runs" / "r1", work / "tasks")
    out = work / "integrate" / "r1"
    (out / SERIES_DIR).mkdir(parents=True)  # left by an earlier integrate of more families
    assert write_series(accepted, layout_of(wheel_source), out) == []
    assert not (out / SERIES_DIR).exists() and family(OP) == "activation"
