"""The results store: content-addressed objects, append-only history, regressions."""

from __future__ import annotations

import json

from pipeline.store import Measurement, ResultsStore, Row


def _batch(
    time_us: float, *, device: str = "NVIDIA H200", spread: float = 1.0, when: str = "2026-11-29T00:00:00+00:00"
):
    return Measurement(
        device=device,
        taken_at=when,
        command="kernelsmith bench --ops activation.silu_and_mul",
        sglang="0.5.23",
        rows=[
            Row(
                op_id="activation.silu_and_mul",
                dtype="bf16",
                shape="T=8192,H=14336",
                time_us=time_us,
                spread_pct=spread,
            )
        ],
    )


def test_add_is_idempotent_and_content_addressed(tmp_path):
    store = ResultsStore(tmp_path)
    key1 = store.add(_batch(161.0))
    key2 = store.add(_batch(161.0))
    assert key1 == key2
    assert store.keys() == [key1]
    assert store.get(key1).rows[0].time_us == 161.0
    assert store.add(_batch(162.0)) != key1
    assert len(store.keys()) == 2


def test_regression_beyond_noise_is_reported(tmp_path):
    store = ResultsStore(tmp_path)
    store.add(_batch(161.0, when="2026-11-27T00:00:00+00:00"))
    store.add(_batch(170.0, when="2026-11-28T00:00:00+00:00"))
    store.add(_batch(180.0, when="2026-11-29T00:00:00+00:00"))
    found = store.regressions(noise_pct=3.0)
    assert len(found) == 1
    assert found[0].best_us == 161.0 and found[0].now_us == 180.0
    assert found[0].slowdown_pct > 11


def test_change_within_noise_or_other_device_is_not_a_regression(tmp_path):
    store = ResultsStore(tmp_path)
    store.add(_batch(161.0, when="a"))
    store.add(_batch(163.0, when="b"))  # +1.2 %: inside the 3 % band
    assert store.regressions(noise_pct=3.0) == []
    store.add(_batch(120.0, device="NVIDIA H100", when="c"))
    store.add(_batch(200.0, device="NVIDIA H100", when="d"))
    assert [r.now_us for r in store.regressions()] == [200.0]


def test_torn_history_line_is_skipped(tmp_path):
    store = ResultsStore(tmp_path)
    key = store.add(_batch(161.0))
    with open(store.history_file, "a") as handle:
        handle.write('{"key": "trunc')
    assert store.keys() == [key]
    assert json.loads(store.history_file.read_text().splitlines()[0])["key"] == key


def test_batch_after_a_torn_line_is_kept_and_the_fragment_quarantined(tmp_path, capsys):
    """Issue 16 row 4: a crash mid-append, then the next batch: the new batch must not vanish."""
    store = ResultsStore(tmp_path)
    first = store.add(_batch(161.0, when="a"))
    with open(store.history_file, "a") as handle:
        handle.write('{"key": "trunc')  # the crash: no newline
    second = store.add(_batch(190.0, when="b"))
    assert store.keys() == [first, second]
    assert store.history_file.read_text().endswith("\n")
    assert all(json.loads(line) for line in store.history_file.read_text().splitlines())
    assert store.torn_file.read_text() == '{"key": "trunc\n', "the fragment is kept aside, not thrown away"
    assert "torn line" in capsys.readouterr().err
    found = store.regressions(noise_pct=3.0)
    assert [r.now_us for r in found] == [190.0], "the regression the new batch holds is found"


def test_a_line_glued_onto_a_fragment_by_an_older_version_is_read(tmp_path, capsys):
    store = ResultsStore(tmp_path)
    first = store.add(_batch(161.0, when="a"))
    second = store.add(_batch(162.0, when="b"))
    lines = store.history_file.read_text().splitlines()
    store.history_file.write_text(lines[0] + "\n" + '{"key": "trunc' + lines[1] + "\n" + '{"ke\n')
    assert store.keys() == [first, second]
    err = capsys.readouterr().err
    assert "skipped a torn line" in err and ":3:" in err
    store.keys()
    assert capsys.readouterr().err == "", "a torn line is reported once per store"


def test_an_object_without_its_history_line_is_listed_on_the_next_add(tmp_path):
    store = ResultsStore(tmp_path)
    key = store.add(_batch(161.0))
    store.history_file.write_text("")  # the crash came between the object and its line
    assert store.add(_batch(161.0)) == key
    assert store.keys() == [key]
    assert store.add(_batch(161.0)) == key and store.keys() == [key], "still idempotent"
