"""`kernelsmith track`: the nightly verdict's fixed semantics and the compact summary."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from cli import track
from pipeline.store import Measurement, ResultsStore, Row
from pipeline.track import per_op_lines


def _batch(time_us: float, when: str, op: str = "activation.silu_and_mul", variant: str = "baseline") -> Measurement:
    return Measurement(
        device="NVIDIA H200",
        taken_at=when,
        command=f"kernelsmith bench --ops {op}",
        sglang="0.5.23",
        rows=[Row(op_id=op, dtype="bf16", shape="T=8192,H=14336", variant=variant, time_us=time_us)],
    )


def _config(work):
    return SimpleNamespace(work=work, harness=SimpleNamespace(noise_pct=3.0))


def _args(**kw):
    return SimpleNamespace(**({"op": None, "fail_on_regression": True, "max_age_h": None} | kw))


def test_a_regression_fails_the_nightly_check_and_is_listed_first(tmp_path, capsys):
    store = ResultsStore(tmp_path)
    store.add(_batch(161.0, "2026-11-29T00:00:00+00:00"))
    store.add(_batch(200.0, "2026-11-30T00:00:00+00:00"))
    assert track.main(_args(), _config(tmp_path)) == 1
    out = capsys.readouterr().out
    assert out.index("1 regression(s)") < out.index("measurement history")
    assert "161.00 -> 200.00" in out and "+24.2%" in out and "2 batches" in out


def test_op_filters_the_verdict_and_reference_rows_never_fail_it(tmp_path, capsys):
    store = ResultsStore(tmp_path)
    store.add(_batch(10.0, "2026-11-29T00:00:00+00:00", op="layernorm.rmsnorm"))
    store.add(_batch(20.0, "2026-11-30T00:00:00+00:00", op="layernorm.rmsnorm"))
    store.add(_batch(10.0, "2026-11-29T00:00:00+00:00", variant="torch_eager"))
    store.add(_batch(20.0, "2026-11-30T00:00:00+00:00", variant="torch_eager"))
    assert track.main(_args(op="activation.silu_and_mul"), _config(tmp_path)) == 0
    assert track.main(_args(op="layernorm.rmsnorm"), _config(tmp_path)) == 1
    assert track.main(_args(), _config(tmp_path)) == 1
    capsys.readouterr()


def test_no_measurements_or_a_missed_night_is_a_failure_not_a_pass(tmp_path, capsys):
    assert track.main(_args(), _config(tmp_path)) == 1
    assert "`kernelsmith bench`" in " ".join(capsys.readouterr().out.split())
    assert track.main(_args(fail_on_regression=False), _config(tmp_path)) == 0
    store = ResultsStore(tmp_path)
    old = (datetime.now(UTC) - timedelta(hours=50)).isoformat()
    store.add(_batch(161.0, old))
    assert track.main(_args(max_age_h=26), _config(tmp_path)) == 1
    assert "a night is missing" in capsys.readouterr().out
    store.add(_batch(161.5, datetime.now(UTC).isoformat()))
    assert track.main(_args(max_age_h=26), _config(tmp_path)) == 0


def test_the_summary_gives_each_op_its_newest_time_over_floor_where_it_was_recorded():
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        store = ResultsStore(tmp)
        store.add(_batch(161.0, "2026-11-29T00:00:00+00:00"))
        newest = _batch(160.0, "2026-11-30T00:00:00+00:00")
        store.add(newest.model_copy(update={"rows": [newest.rows[0].model_copy(update={"floor_us": 100.0})]}))
        store.add(_batch(9.0, "2026-11-30T00:00:00+00:00", op="layernorm.rmsnorm"))
        lines = {line[0]: line for line in per_op_lines(store, None)}
    assert lines["activation.silu_and_mul"][4] == "1.60" and lines["layernorm.rmsnorm"][4] == "—"
    assert lines["activation.silu_and_mul"][3] == "-0.6% over 1 shapes"


def test_a_table_printed_to_a_log_keeps_its_cells_whole(monkeypatch, capsys):
    """rich assumes 80 columns without a terminal and cut the H200 logs' cells to a few letters."""
    from rich.table import Table

    from pipeline.console import LOG_COLUMNS, console

    monkeypatch.delenv("COLUMNS", raising=False)
    table = Table("op", "status", "skills")
    table.add_row("attention.apply_rope_with_cos_sin_cache_inplace", "no_improvement", "pdl_enable+pdl_early_trigger")
    console().print(table)
    out = capsys.readouterr().out
    assert "attention.apply_rope_with_cos_sin_cache_inplace" in out and "pdl_enable+pdl_early_trigger" in out
    assert console().width == LOG_COLUMNS
    monkeypatch.setenv("COLUMNS", "100")
    assert console(stderr=True).width == 100


def test_a_step_across_batches_is_a_trend_until_the_release_ab_confirms_or_retracts_it(tmp_path, capsys):
    """Only the in-process release A/B (`track ab`) gives a verdict: without it a step is labelled a trend
    (and still fails the nightly check); a confirming A/B says so; a retracting one keeps it from failing."""
    from pipeline.record_io import write_record
    from pipeline.store_records import AB_DIR, ReleaseAB

    store = ResultsStore(tmp_path)
    old = _batch(161.0, "2026-11-29T00:00:00+00:00").model_copy(update={"sglang": "0.5.22"})
    store.add(old)
    store.add(_batch(200.0, "2026-11-30T00:00:00+00:00"))
    assert track.main(_args(), _config(tmp_path)) == 1
    assert "a trend across batches, not a verdict" in " ".join(capsys.readouterr().out.split())
    record = ReleaseAB(
        op_id="activation.silu_and_mul", old="0.5.22", new="0.5.23", verdict="regression", change_pct=23.9
    )
    path = tmp_path / AB_DIR / "0.5.22-vs-0.5.23" / "activation.silu_and_mul.json"
    write_record(record, path)
    assert track.main(_args(), _config(tmp_path)) == 1
    assert "confirmed by the release A/B in one worker (+23.90%)" in " ".join(capsys.readouterr().out.split())
    write_record(record.model_copy(update={"verdict": "no change", "detail": "new vs old +0.4%"}), path)
    assert track.main(_args(), _config(tmp_path)) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "0 regression(s) (1 retracted)" in out and "retracted: the release A/B in one worker found no change" in out
    planted = tmp_path / AB_DIR / "0.5.22-vs-0.5.23-planted2" / "activation.silu_and_mul.json"
    write_record(record.model_copy(update={"planted_passes": 2}), planted)
    assert track.main(_args(), _config(tmp_path)) == 0, "a planted run confirms nothing"
