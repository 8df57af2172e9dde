"""The results store: SQLite batches in one transaction each, the JSON format imported, change points."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from pipeline.errors import StaleRecordError
from pipeline.store import Measurement, ResultsStore, Row
from pipeline.store_json import JsonStore

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _batch(
    time_us: float,
    *,
    device: str = "NVIDIA H200",
    spread: float = 1.0,
    when: str = "2026-11-29T00:00:00+00:00",
    sglang: str = "0.5.23",
    op: str = "activation.silu_and_mul",
    variant: str = "baseline",
):
    return Measurement(
        device=device,
        taken_at=when,
        command=f"kernelsmith bench --ops {op}",
        sglang=sglang,
        rows=[Row(op_id=op, dtype="bf16", shape="T=8192,H=14336", variant=variant, time_us=time_us, spread_pct=spread)],
    )


def test_add_is_idempotent_and_content_addressed(tmp_path):
    store = ResultsStore(tmp_path)
    key1 = store.add(_batch(161.0))
    assert store.add(_batch(161.0)) == key1 and store.keys() == [key1]
    assert store.get(key1) == _batch(161.0)
    assert store.add(_batch(162.0)) != key1 and len(store.keys()) == 2
    assert (tmp_path / "results" / "results.sqlite").is_file()


def test_each_step_up_is_a_regression_naming_the_release_that_introduced_it(tmp_path):
    store = ResultsStore(tmp_path)
    for i, (us, version) in enumerate([(161.0, "0.5.20"), (160.0, "0.5.21"), (190.0, "0.5.22"), (191.0, "0.5.23")]):
        store.add(_batch(us, when=f"2026-11-2{i}T00:00:00+00:00", sglang=version))
    (found,) = store.regressions(noise_pct=3.0)
    assert (found.introduced_sglang, found.before_sglang) == ("0.5.22", "0.5.21")
    assert found.best_us == pytest.approx(160.0) and found.now_us == pytest.approx(190.0) and found.slowdown_pct > 18


def test_a_resumed_census_compares_releases_in_the_order_they_came_out_not_in_arrival_order(tmp_path):
    """The census resumes op by op: here the op's 0.5.23 rows arrive before its 0.5.22 rows (as
    lora.kimi_k2_moe_fused_gate's did on the H200). Its history must still read 0.5.22 -> 0.5.23,
    so the slowdown is a regression introduced in 0.5.23 and "newest" is 0.5.23."""
    from pipeline.track import per_op_lines

    store = ResultsStore(tmp_path)
    store.add(_batch(100.0, when="1", sglang="0.5.22"))  # another op's census: 0.5.22 first seen here
    store.add(_batch(100.0, when="2", sglang="0.5.23"))
    store.add(_batch(130.0, when="3", sglang="0.5.23", op="moe.late"))
    store.add(_batch(100.0, when="4", sglang="0.5.22", op="moe.late"))  # the resumed 0.5.22 census
    assert [b.sglang for _, b, r in store.history("moe.late")] == ["0.5.22", "0.5.23"]
    (found,) = store.regressions(noise_pct=3.0, op_id="moe.late")
    assert (found.introduced_sglang, found.before_sglang) == ("0.5.23", "0.5.22")
    (line,) = [line for line in per_op_lines(store, None) if line[0] == "moe.late"]
    assert line[2] == "0.5.23" and line[3] == "+30.0% over 1 shapes"


def test_an_older_release_measured_later_still_comes_first_and_commits_keep_their_place(tmp_path):
    """History extended back: 0.5.19 measured, then 0.5.18 (as on the H200, 2026-12-07). A slowdown
    from 0.5.18 to 0.5.19 is introduced in 0.5.19; a nightly commit measured between the two stays
    where it arrived, and the numeric order is not the text order (0.5.9 before 0.5.18)."""
    from pipeline.store import release_key

    store = ResultsStore(tmp_path)
    store.add(_batch(130.0, when="1", sglang="0.5.19"))
    store.add(_batch(100.0, when="2", sglang="abc1234"))  # a commit a nightly run measured
    store.add(_batch(100.0, when="3", sglang="0.5.18"))
    store.add(_batch(100.0, when="4", sglang="0.5.9"))
    assert [b.sglang for _, b, _ in store.history()] == ["0.5.9", "abc1234", "0.5.18", "0.5.19"]
    (found,) = store.regressions(noise_pct=3.0)
    assert (found.introduced_sglang, found.before_sglang) == ("0.5.19", "0.5.18")
    assert release_key("v0.5.23.post1") == ((0, 5, 23), 1) and release_key("0.5.23") == ((0, 5, 23), -1)
    assert release_key("abc1234") is None and release_key("src:6c6149a8d12a") is None


def test_two_batches_of_one_source_keep_their_arrival_order(tmp_path):
    store = ResultsStore(tmp_path)
    store.add(_batch(100.0, when="1", sglang="0.5.22"))
    store.add(_batch(100.0, when="2", sglang="0.5.23"))
    store.add(_batch(101.0, when="3", sglang="0.5.22"))  # a re-measurement of 0.5.22: after the first
    assert [(b.sglang, r.time_us) for _, b, r in store.history()] == [
        ("0.5.22", 100.0),
        ("0.5.22", 101.0),
        ("0.5.23", 100.0),
    ]


def test_noise_the_spread_another_device_and_a_recovered_step_are_not_regressions(tmp_path):
    store = ResultsStore(tmp_path)
    store.add(_batch(161.0, when="a"))
    store.add(_batch(163.0, when="b"))  # +1.2 %: inside the 3 % band
    assert store.regressions(noise_pct=3.0) == []
    store.add(_batch(120.0, device="NVIDIA H100", when="c"))
    store.add(_batch(200.0, device="NVIDIA H100", when="d"))
    assert [r.now_us for r in store.regressions()] == [200.0], "the H100 series alone regressed"
    noisy = ResultsStore(tmp_path / "noisy")
    noisy.add(_batch(100.0, spread=6.0, when="a"))
    noisy.add(_batch(110.0, spread=6.0, when="b"))  # +10 % < 2 x 6 % spread
    assert noisy.regressions(noise_pct=3.0) == []
    back = ResultsStore(tmp_path / "back")
    for us, when in ((100.0, "a"), (100.0, "b"), (130.0, "c"), (130.0, "d"), (100.0, "e")):
        back.add(_batch(us, when=when))
    assert back.regressions(noise_pct=3.0) == [], "a step that was undone is not standing"


def test_reference_rows_are_never_kernel_regressions_and_op_filters(tmp_path):
    store = ResultsStore(tmp_path)
    store.add(_batch(10.0, when="a", variant="torch_eager"))
    store.add(_batch(20.0, when="b", variant="torch_eager"))
    store.add(_batch(10.0, when="c", op="layernorm.rmsnorm"))
    store.add(_batch(20.0, when="d", op="layernorm.rmsnorm"))
    assert [r.op_id for r in store.regressions()] == ["layernorm.rmsnorm"]
    assert store.regressions(op_id="activation.silu_and_mul") == []


WRITER = """
import sys, time
sys.path.insert(0, sys.argv[2])
from pipeline.store import Measurement, ResultsStore, Row
store = ResultsStore(sys.argv[1])
for i in range(100000):
    rows = [Row(op_id=f"op{j}", dtype="bf16", shape=f"T={i}", time_us=1.0 + j) for j in range(200)]
    store.add(Measurement(device="d", taken_at=str(i), command="c", sglang="s", rows=rows))
    print(i, flush=True)
"""


def test_a_writer_killed_mid_batch_loses_nothing_it_committed(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path), ROOT], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for _ in range(5):  # five batches committed, then kill it while it writes more
        proc.stdout.readline()
    time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    store = ResultsStore(tmp_path)
    keys = store.keys()
    assert len(keys) >= 5
    for key in keys:
        assert len(store.get(key).rows) == 200, "every batch in the store is whole"
    store.add(_batch(1.0))  # and the store takes the next batch
    assert len(store.keys()) == len(keys) + 1


def test_the_json_store_is_imported_whole_torn_lines_included(tmp_path, capsys):
    legacy = JsonStore(tmp_path)
    first = legacy.add(_batch(161.0, when="a"))
    with open(legacy.history_file, "a") as handle:
        handle.write('{"key": "trunc')  # the crash of issue 16 row 4
    second = legacy.add(_batch(190.0, when="b"))
    assert legacy.keys() == [first, second] and legacy.torn_file.read_text() == '{"key": "trunc\n'
    store = ResultsStore(tmp_path)
    assert store.keys() == [first, second]
    assert [r.now_us for r in store.regressions(noise_pct=3.0)] == [190.0]
    assert legacy.history_file.exists(), "the JSON files are kept"
    assert ResultsStore(tmp_path).keys() == [first, second], "importing again adds nothing"
    assert "torn line" in capsys.readouterr().err


def test_a_corrupt_json_object_costs_its_batch_named_not_the_import(tmp_path, capsys):
    legacy = JsonStore(tmp_path)
    bad = legacy.add(_batch(161.0, when="a"))
    good = legacy.add(_batch(162.0, when="b"))
    (legacy.objects / f"{bad}.json").write_text("{")
    assert ResultsStore(tmp_path).keys() == [good]
    err = capsys.readouterr().err
    assert f"{bad}.json" in err and "fix:" in err


def test_a_corrupt_database_is_named_with_the_fix(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "results.sqlite").write_bytes(b"not a database" * 100)
    with pytest.raises(StaleRecordError, match="results.sqlite") as err:
        ResultsStore(tmp_path).keys()
    assert "move" in err.value.fix


def test_legacy_lines_glued_by_an_older_version_are_still_read(tmp_path, capsys):
    legacy = JsonStore(tmp_path)
    first = legacy.add(_batch(161.0, when="a"))
    second = legacy.add(_batch(162.0, when="b"))
    lines = legacy.history_file.read_text().splitlines()
    legacy.history_file.write_text(lines[0] + "\n" + '{"key": "trunc' + lines[1] + "\n" + '{"ke\n')
    assert JsonStore(tmp_path).keys() == [first, second]
    assert json.loads(lines[0])["key"] == first
    assert "skipped a torn line" in capsys.readouterr().err


def test_a_store_from_before_the_floor_column_is_read_and_then_migrated(tmp_path):
    """Row.floor_us came after the first schema: a store without the column reads (floors None),
    and the first write adds it without touching the rows already there."""
    import sqlite3

    from pipeline import store as store_module

    root = tmp_path / "results"
    root.mkdir()
    old_schema = store_module.SCHEMA.replace(",\n    floor_us REAL", "")
    assert "floor_us" not in old_schema
    with sqlite3.connect(root / store_module.DB_NAME) as conn:
        conn.executescript(old_schema)
        conn.execute(
            "INSERT INTO batches (key, taken_at, device, command, sglang, n_rows) VALUES ('k0', 't', 'H200', 'c', '0.5.22', 1)"
        )
        conn.execute(
            "INSERT INTO rows (batch_seq, op_id, dtype, shape, variant, time_us, spread_pct, gbps) "
            "VALUES (1, 'op', 'bf16', 's', 'baseline', 5.0, 0.5, NULL)"
        )
    store = ResultsStore(tmp_path)
    ((_, _, old),) = store.history()
    assert old.time_us == 5.0 and old.floor_us is None
    batch = _batch(4.0)
    store.add(batch.model_copy(update={"rows": [batch.rows[0].model_copy(update={"floor_us": 2.0})]}))
    floors = [r.floor_us for _, _, r in store.history()]
    assert floors == [None, 2.0]
