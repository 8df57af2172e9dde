"""The store's batches as JSON lines kept with the project, and the store rebuilt from them (pipeline.history)."""

from __future__ import annotations

import json

from pipeline import history
from pipeline.store import ResultsStore
from pipeline.store_records import Measurement, Row


def _batch(release: str, time_us: float, when: str = "2026-12-07T08:00:00+00:00") -> Measurement:
    rows = [
        Row(op_id="activation.silu_and_mul", dtype="bf16", shape="T=1,H=4096", time_us=time_us, spread_pct=0.4),
        Row(op_id="activation.silu_and_mul", dtype="bf16", shape="T=1,H=4096", variant="torch_eager", time_us=9.5),
        Row(op_id="layernorm.rmsnorm", dtype="fp16", shape="T=8,H=4096", time_us=2.25, gbps=120.5, floor_us=1.5),
    ]
    return Measurement(
        device="NVIDIA H200",
        taken_at=when,
        command="kernelsmith track run",
        sglang=release,
        rows=rows,
        kernelsmith="abc1234",
        notes={"files:activation.silu_and_mul": json.dumps({"a.cuh": "0123"})},
    )


def _store_with_two(tmp_path) -> ResultsStore:
    store = ResultsStore(tmp_path / "work")
    store.add(_batch("0.5.22", 1.25))
    store.add(_batch("0.5.23", 1.5, "2026-12-07T09:00:00+00:00"))
    return store


def test_a_store_exported_and_rebuilt_holds_the_same_batches(tmp_path):
    store = _store_with_two(tmp_path)
    folder = tmp_path / "history"
    written = history.export(store, folder)
    assert len(written) == 2 and all(p.name.startswith("2026-12-07-") for p in written)
    assert history.export(store, folder) == [], "a batch already there is not written again"
    first = written[0].read_text().splitlines()
    head, row = json.loads(first[0]), json.loads(first[1])
    assert head["kind"] == "batch" and head["rows"] == 3 and head["kernelsmith"] == "abc1234"
    assert row["kind"] == "row" and row["sglang"] and row["device"] == "NVIDIA H200", "each row line stands alone"
    again = ResultsStore(tmp_path / "clone")
    read, problems = history.rebuild(again, folder)
    assert (read, problems) == (2, [])
    assert again.keys() == store.keys()
    assert [again.get(k) for k in again.keys()] == [store.get(k) for k in store.keys()]
    assert history.rebuild(again, folder) == (2, []) and len(again.keys()) == 2, "rebuilding twice adds nothing"


def test_a_corrupt_or_edited_file_costs_its_batch_named_by_file_and_line(tmp_path):
    store = _store_with_two(tmp_path)
    folder = tmp_path / "history"
    torn, edited = history.export(store, folder)
    text = torn.read_text().splitlines()
    torn.write_text("\n".join([*text[:2], text[2][:20], *text[3:]]) + "\n")
    row = json.loads(edited.read_text().splitlines()[1])
    lines = edited.read_text().splitlines()
    lines[1] = json.dumps(row | {"time_us": 0.5}, sort_keys=True)
    edited.write_text("\n".join(lines) + "\n")
    (folder / "empty.jsonl").write_text("")
    clone = ResultsStore(tmp_path / "clone")
    read, problems = history.rebuild(clone, folder)
    assert read == 0 and clone.keys() == []
    by_file = {p.path.name: p for p in problems}
    assert str(by_file[torn.name]) == f"{torn}:3: not JSON (Unterminated string starting at); the batch is left out"
    assert "do not hash to its key" in by_file[edited.name].what
    assert by_file["empty.jsonl"].line == 1
    # a good file beside them still goes in
    history.write_batch(folder, *_keyed(_batch("0.5.21", 1.0)))
    assert history.rebuild(clone, folder)[0] == 1


def _keyed(m: Measurement) -> tuple[str, Measurement]:
    from pipeline.store import batch_key

    return batch_key(m), m


def test_track_export_and_rebuild_from_the_command_line(tmp_path, capsys):
    from cli.main import main

    _store_with_two(tmp_path)
    folder = tmp_path / "history"
    assert main(["track", "export", "--work-dir", str(tmp_path / "work"), "--history", str(folder)]) == 0
    assert "2 batch(es) written" in capsys.readouterr().out
    assert main(["track", "rebuild", "--work-dir", str(tmp_path / "clone"), "--history", str(folder)]) == 0
    assert "2 batch(es) read" in capsys.readouterr().out
    html = tmp_path / "html"
    assert main(["track", "--work-dir", str(tmp_path / "clone"), "--html", str(html)]) in (0, 1)
    assert (html / "index.html").is_file(), "a clone redraws the dashboard from the folder, no GPU"
    assert main(["track", "rebuild", "--work-dir", str(tmp_path / "x"), "--history", str(tmp_path / "none")]) == 1
    assert "no history folder at" in capsys.readouterr().out


def test_the_history_folder_is_beside_the_work_folder_unless_absolute_or_off(tmp_path):
    from pipeline.config import load_config

    config = load_config(overrides={"work_dir": str(tmp_path / "work")})
    assert config.history == tmp_path / "history" / "census", "work/ at the repository's root: its history/census"
    elsewhere = load_config(overrides={"work_dir": str(tmp_path / "work"), "harness": {"history_dir": "/srv/h"}})
    assert str(elsewhere.history) == "/srv/h"
    off = load_config(overrides={"work_dir": str(tmp_path / "work"), "harness": {"history_dir": ""}})
    assert off.history is None
