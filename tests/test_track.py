"""`kernelsmith track`: history and regressions, also after a crash tore the history file."""

from __future__ import annotations

from types import SimpleNamespace

from pipeline import track
from pipeline.store import Measurement, ResultsStore, Row


def _batch(time_us: float, when: str) -> Measurement:
    return Measurement(
        device="NVIDIA H200",
        taken_at=when,
        command="kernelsmith bench --ops activation.silu_and_mul",
        sglang="0.5.23",
        rows=[Row(op_id="activation.silu_and_mul", dtype="bf16", shape="T=8192,H=14336", time_us=time_us)],
    )


def _config(work):
    return SimpleNamespace(work=work, harness=SimpleNamespace(noise_pct=3.0))


def test_regression_after_a_torn_history_line_fails_the_nightly_check(tmp_path, capsys):
    """Issue 16 row 4: the batch appended after a torn line holds a regression; track must see it."""
    store = ResultsStore(tmp_path)
    store.add(_batch(161.0, "2026-11-29T00:00:00+00:00"))
    with open(store.history_file, "a") as handle:
        handle.write('{"key": "0123')  # crash mid-append
    ResultsStore(tmp_path).add(_batch(200.0, "2026-11-30T00:00:00+00:00"))  # the next nightly run

    rc = track.main(SimpleNamespace(op=None, fail_on_regression=True), _config(tmp_path))
    out = capsys.readouterr().out
    assert rc == 1
    assert "1 regression(s)" in out and "161.00 -> 200.00" in out
    assert "2 batches" in out


def test_track_without_measurements_says_what_to_run(tmp_path, capsys):
    assert track.main(SimpleNamespace(op=None, fail_on_regression=True), _config(tmp_path)) == 0
    assert "`kernelsmith bench`" in " ".join(capsys.readouterr().out.split())
