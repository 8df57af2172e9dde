"""integrate.merge: one build of everything, `kernelsmith integrate --run NAME --from RUN ...` on the real wheel
(GPU steps recorded as not run): which run each op's candidate comes from, what is refused, and a merge again."""

from __future__ import annotations

import json
import pathlib

import pytest
from test_integrate_command import _config, no_gpu  # noqa: F401 (fixtures)
from test_integrate_patch import ACT, OP, act_span, edited_kernel, make_best, one_op_run, wheel_source  # noqa: F401
from test_search import timing

from cli.parser import build_parser
from cli.stages import integrate_stage as main
from integrate.errors import ConfigError
from integrate.merge import MERGED_FILE, merge_runs, read_merged
from pipeline.run_records import Outcome

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _second_run(
    work: pathlib.Path, root: pathlib.Path, run: str, speedup: float, outcome: Outcome = Outcome.ok
) -> None:
    span = act_span(root)
    data = (root / ACT).read_bytes()
    text = edited_kernel(root) + "\n"
    patched = data[: span.start_byte] + text.encode() + data[span.end_byte :]
    make_best(
        work, run, OP, {"act_and_mul_kernel": text}, best_src={ACT: patched}, timings=[timing(speedup)], outcome=outcome
    )


def test_each_op_takes_its_fastest_accepted_candidate_and_the_build_integrates_as_one_run(
    one_op_run, wheel_source, no_gpu, capsys
):
    work = one_op_run
    root = pathlib.Path(wheel_source.root)
    _second_run(work, root, "r2", 1.3)
    _second_run(work, root, "r3", 2.0, outcome=Outcome.incorrect)  # faster, but not accepted
    args = build_parser().parse_args(["integrate", "--run", "all", "--from", "r1", "r2", "r3"])
    assert main(args, _config(work)) == 0
    merged = read_merged(work / "runs" / "all")
    assert merged is not None and merged.ops == {OP: "r2"} and merged.sources == ["r1", "r2", "r3"]
    assert (work / "runs" / "all" / OP / "best" / "candidate.json").is_file()
    report = json.loads((work / "integrate" / "all" / "report.json").read_text())
    assert report["merged_from"] == {OP: "r2"}
    pr = (work / "integrate" / "all" / "PR.md").read_text()
    assert "kernelsmith integrate --run all --from r2" in pr and f"kernelsmith optimize --ops {OP} --run r2" in pr
    assert "changes are applied together" not in pr, "one op: nothing to say about applying them together"
    assert f"all: {OP} from run r2" in capsys.readouterr().err


def test_merging_again_replaces_the_build_and_an_ordinary_run_is_never_overwritten(one_op_run, wheel_source):
    work = one_op_run
    root = pathlib.Path(wheel_source.root)
    _second_run(work, root, "r2", 1.3)
    assert merge_runs(work, "all", ["r2"]).ops == {OP: "r2"}
    assert merge_runs(work, "all", ["r1"]).ops == {OP: "r1"}, "a merge into a merged build replaces it"
    assert sorted(p.name for p in (work / "runs").iterdir()) == ["all", "r1", "r2"], "no staging folder is left"
    with pytest.raises(ConfigError, match="holds an optimize run, not a merged build"):
        merge_runs(work, "r2", ["r1"])
    assert not (work / "runs" / "r2" / MERGED_FILE).exists()
    with pytest.raises(ConfigError, match="also one of --from's runs"):
        merge_runs(work, "all", ["all", "r1"])


def test_a_simulated_run_or_runs_with_nothing_accepted_are_refused(one_op_run, wheel_source):
    work = one_op_run
    root = pathlib.Path(wheel_source.root)
    _second_run(work, root, "bad", 1.3, outcome=Outcome.incorrect)
    with pytest.raises(ConfigError) as err:
        merge_runs(work, "all", ["bad"])
    assert "no accepted candidate in runs bad" in str(err.value) and "incorrect" in str(err.value)
    (work / "runs" / "r1" / "run.json").write_text(json.dumps({"backend": "replay", "replay": "x.json"}))
    with pytest.raises(ConfigError, match="run r1 is simulated"):
        merge_runs(work, "all", ["r1"])
    assert not (work / "runs" / "all").exists()


def test_from_without_a_name_says_so(one_op_run, no_gpu):
    args = build_parser().parse_args(["integrate", "--from", "r1"])
    with pytest.raises(ConfigError, match="--from needs --run NAME"):
        main(args, _config(one_op_run))
