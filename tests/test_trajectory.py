"""The per-op trajectory: append-only, resumable, ranked, summarised for prompts."""

from __future__ import annotations

import ast
import pathlib

import pytest
from pydantic import ValidationError
from test_import_graph import FLOORS

from optimize.errors import TrajectoryError
from optimize.trajectory import (
    ROUND_OUTCOMES,
    Attempt,
    RoundOutcome,
    RoundRecord,
    Trajectory,
    candidate_id,
    regions_hash,
)
from pipeline.run_records import NotEvaluated, Outcome, ShapeTiming
from pipeline.stats import geomean


def timing(label: str, speedup: float | None, time_us: float = 10.0) -> ShapeTiming:
    return ShapeTiming(
        label=label,
        sizes={"n": 1},
        dtype="bf16",
        time_us=time_us,
        spread_pct=1.0,
        gbps=100.0,
        pct_of_copy_bw=50.0,
        time_over_floor=2.0,
        baseline_us=None if speedup is None else time_us * speedup,
        speedup=speedup,
    )


def baseline(cid: str = "base") -> RoundRecord:
    return RoundRecord(
        kind="baseline",
        op_id="op",
        round=0,
        candidate=cid,
        outcome=Outcome.ok,
        timings=[timing("a", None)],
        speedup_geomean=1.0,
        best=cid,
        tokens=10,
        gpu_s=2.0,
    )


def round_(
    n: int,
    skill: str,
    outcome: RoundOutcome,
    geo: float | None = None,
    accepted: bool = False,
    cid: str | None = None,
    **kw,
) -> RoundRecord:
    return RoundRecord(
        kind="round",
        op_id="op",
        round=n,
        skill=skill,
        params={"w": n},
        outcome=outcome,
        speedup_geomean=geo,
        speedup_min=geo,
        accepted=accepted,
        candidate=cid or f"c{n}",
        tokens=100,
        cost_usd=0.01,
        wall_s=3.0,
        gpu_s=1.5,
        **kw,
    )


def test_append_only_and_reload(tmp_path):
    path = tmp_path / "op" / "trajectory.jsonl"
    traj = Trajectory(path)
    traj.append(baseline())
    first = path.read_bytes()
    traj.append(round_(1, "vec", Outcome.ok, 1.2, accepted=True))
    second = path.read_bytes()
    assert second.startswith(first) and second.count(b"\n") == 2
    again = Trajectory(path)
    assert [r.kind for r in again.records] == ["baseline", "round"]
    assert again.records[1].finished_at  # stamped on append
    assert again.last_round() == 1


def test_torn_last_line_is_cut_and_bad_middle_line_is_an_error(tmp_path):
    path = tmp_path / "trajectory.jsonl"
    traj = Trajectory(path)
    traj.append(baseline())
    traj.append(round_(1, "vec", Outcome.ok, 1.2, accepted=True))
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"kind": "round", "op_id": "op", "rou')  # killed mid-write
    resumed = Trajectory(path)
    assert resumed.torn_bytes > 0 and len(resumed.records) == 2
    assert path.read_bytes() == whole
    resumed.append(round_(2, "unroll", Outcome.compile_failed))
    assert len(Trajectory(path).records) == 3

    lines = path.read_bytes().split(b"\n")
    lines[1] = b'{"kind": "round", "garbage": true}'
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(TrajectoryError, match="trajectory.jsonl:2"):
        Trajectory(path)


def test_best_is_the_fastest_accepted_round_not_disqualified(tmp_path):
    traj = Trajectory(tmp_path / "t.jsonl")
    assert traj.best() is None
    traj.append(baseline())
    assert traj.best().kind == "baseline" and traj.best_id() == "base"
    traj.append(round_(1, "vec", Outcome.ok, 1.2, accepted=True))
    traj.append(round_(2, "unroll", Outcome.ok, 1.5, accepted=True))
    traj.append(round_(3, "fast", Outcome.incorrect))
    traj.append(round_(4, "pdl", Outcome.ok, 1.9, accepted=False))  # correct but not accepted (e.g. a regression)
    assert traj.best_id() == "c2"
    traj.append(RoundRecord(kind="final", op_id="op", round=2, candidate="c2", outcome=Outcome.incorrect))
    assert traj.disqualified() == {"c2"}
    assert traj.best_id() == "c1"
    assert [r.candidate for r in traj.ranked()] == ["c1"]


def test_history_marks_failed_and_slower_for_the_policy(tmp_path):
    traj = Trajectory(tmp_path / "t.jsonl")
    traj.append(baseline())
    traj.append(round_(1, "vec", Outcome.compile_failed))
    traj.append(round_(2, "unroll", Outcome.slower, 0.9))
    traj.append(round_(3, "pdl", Outcome.ok, 1.1, accepted=True))
    traj.append(round_(4, "fast", Outcome.budget_exhausted))
    history = traj.history()
    assert [(h.skill, h.failed) for h in history] == [("vec", True), ("unroll", True), ("pdl", False), ("fast", False)]
    assert traj.tried("unroll", {"w": 2}).round == 2
    assert traj.tried("unroll", {"w": 3}) is None


def test_summary_is_compact_and_spent_sums_every_line(tmp_path):
    traj = Trajectory(tmp_path / "t.jsonl")
    traj.append(baseline())
    for n in range(1, 13):
        traj.append(
            round_(
                n,
                f"s{n}",
                Outcome.compile_failed,
                detail=f"error: line {n}\nmore\nand more",
                attempts=[Attempt(agent="coding", status="edited", candidate=f"c{n}", outcome=Outcome.compile_failed)],
            )
        )
    traj.append(round_(13, "vec", Outcome.ok, 1.25, accepted=True))
    text = traj.summary(limit=4)
    assert "best so far: round 13 vec{w=13}" in text and "1.250x" in text
    assert "(9 earlier rounds omitted)" in text
    assert "round 12: s12{w=12} -> compile_failed — error: line 12" in text
    assert "more" not in text  # only the first line of a detail
    assert len(text.splitlines()) == 7
    spent = traj.spent()
    assert spent["tokens"] == 10 + 13 * 100 and spent["gpu_s"] == pytest.approx(2.0 + 13 * 1.5)


def test_summary_says_the_floor_does_not_apply_to_an_op_that_is_not_byte_bound(tmp_path):
    """A sort's shapes read "floor n/a" in the prompt's summary, not "n/ax floor"."""
    traj = Trajectory(tmp_path / "t.jsonl")
    sort = baseline().model_copy(update={"timings": [timing("a", None).model_copy(update={"floor_applies": False})]})
    traj.append(sort)
    text = traj.summary()
    assert "a bf16 10.00us (floor n/a: not byte-bound)" in text and "x floor" not in text
    traj = Trajectory(tmp_path / "u.jsonl")
    traj.append(baseline())
    assert "a bf16 10.00us (2.00x floor)" in traj.summary()


def test_candidate_ids_hash_region_texts_not_dict_order():
    a = {"k1": "x", "k2": "y"}
    b = {"k2": "y", "k1": "x"}
    assert candidate_id(a) == candidate_id(b) == regions_hash(a)[:16]
    assert candidate_id({"k1": "xy", "k2": ""}) != candidate_id({"k1": "x", "k2": "y"})
    assert geomean([2.0, 0.5]) == pytest.approx(1.0) and geomean([]) is None


def test_every_round_outcome_reads_back_as_itself_and_the_two_sets_share_no_value():
    """A round's outcome is an evaluation's Outcome or why nothing was evaluated (NotEvaluated),
    written as its value: each must read back as the same member, which needs the two sets disjoint."""
    assert not {o.value for o in Outcome} & {o.value for o in NotEvaluated}
    assert ROUND_OUTCOMES == (*Outcome, *NotEvaluated)
    for outcome in ROUND_OUTCOMES:
        line = round_(1, "pdl_enable", outcome).model_dump_json()
        back = RoundRecord.model_validate_json(line).outcome
        assert back is outcome
    edited = round_(1, "pdl_enable", Outcome.ok).model_dump_json().replace('"outcome":"ok"', '"outcome":"edited"')
    with pytest.raises(ValidationError):  # an attempt's status, never a round's outcome
        RoundRecord.model_validate_json(edited)


def test_the_outcome_sets_are_spelt_once_in_pipeline_run_records():
    """The house issue: RoundOutcome re-listed Outcome's seven values, and the coders' statuses were
    spelt in three places. A Literal[...] or an enum anywhere else that spells most of either set fails
    here (four of Outcome's seven, two of NotEvaluated's four); fewer is another vocabulary that shares
    a word (a worker's "ok" or "crashed", a timing's "no_change")."""
    root = pathlib.Path(__file__).resolve().parent.parent
    sets = [({o.value for o in Outcome}, 4), ({o.value for o in NotEvaluated}, 2)]
    found = []
    for pkg in FLOORS:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = str(path.relative_to(root))
            if rel == "pipeline/run_records.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                spelt: list[str] = []
                if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("Literal"):
                    spelt = [c.value for c in ast.walk(node.slice) if isinstance(c, ast.Constant)]
                elif isinstance(node, ast.ClassDef) and any(ast.unparse(b).endswith("Enum") for b in node.bases):
                    spelt = [
                        s.value.value
                        for s in node.body
                        if isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant)
                    ]
                if any(len(values & set(spelt)) >= most for values, most in sets):
                    found.append(f"{rel}:{node.lineno}: {sorted(set(spelt))}")
    assert found == [], "outcome values spelt again:\n" + "\n".join(found)
