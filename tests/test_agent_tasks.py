"""agent/tasks.py: an op id looked up (issue 47: an unknown id got `extract --ops` of itself), and the code of a
task only other ops run marked in `agent show` exactly as `agent submit` refuses it.

The real half extracts SGLang's deepseek_v4/hash_topk.cuh ops (moe.hash_topk and moe.mask_topk_ids: one file,
each op's launcher and kernel beside the other's) into a folder of the test's own; measurements are replayed
(SYNTHETIC), so what is tested is which regions the session accepts, never a figure.
"""

from __future__ import annotations

import json
import pathlib

import pytest
from test_loop import write_task

from cli.main import main as cli
from contract.layout import baseline_regions, load_task, read_task_files
from pipeline.record_io import write_record

ROOT = pathlib.Path(__file__).resolve().parent.parent
MASK, HASH = "moe.mask_topk_ids", "moe.hash_topk"


@pytest.fixture
def no_gpu(monkeypatch):
    from optimize.backends.gpu import GpuBackend

    monkeypatch.setattr(GpuBackend, "available", lambda self: (False, "no GPU in this test"))


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_an_unknown_op_gets_the_closest_task_ids_and_never_an_extract_of_itself(tmp_path, capsys, no_gpu):
    """No index in the work folder: the task folders are the known ids. Every verb about one op answers the same."""
    write_task(tmp_path)
    (tmp_path / "x.cu").write_text("int x;")
    for argv in (["show"], ["brief"], ["trajectory"], ["build", "--region", f"launch_scale={tmp_path / 'x.cu'}"]):
        verb, *rest = argv
        assert cli(["agent", verb, "demo.scal", *rest, "--work-dir", str(tmp_path)]) == 2, verb
        err = _error(capsys)
        assert "unknown op 'demo.scal'" in err and "(closest: demo.scale)" in err, err
        assert "kernelsmith agent ops" in err and "extract --ops demo.scal" not in err, err


@pytest.fixture(scope="module")
def hash_topk_work(sglang_source, triton_wheel_index, tmp_path_factory):
    """A work folder with the two hash_topk.cuh tasks (the real `kernelsmith extract`, no compile check), its CUDA
    index, the Triton index of the pinned wheel, and a SYNTHETIC replay file for moe.mask_topk_ids."""
    work = tmp_path_factory.mktemp("work")
    config = work / "kernelsmith.toml"
    config.write_text(f'[sglang]\ncache_dir = "{ROOT / "work" / "cache"}"\n')
    argv = ["extract", "--no-compile", "--config", str(config), "--work-dir", str(work), "--ops", MASK, HASH]
    assert cli(argv) == 0
    write_record(triton_wheel_index, work / "triton_index.json")
    timing = {"label": "x", "sizes": {"n": 1}, "dtype": "fp32", "time_us": 2.0, "spread_pct": 1.0, "gbps": 1.0}
    replay = {
        "format": "kernelsmith-replay/1",
        "source": "synthetic",
        "device": "none (SYNTHETIC, written by this test)",
        "recorded_at": "2026-01-01T00:00:00+00:00",
        "ops": {
            MASK: {
                "baseline": [{**timing, "pct_of_copy_bw": 1.0, "time_over_floor": 1.5}],
                "candidates": {},
                "rules": [],
                "unmatched": {"outcome": "ok", "speedup": 1.01},
            }
        },
    }
    (work / "mask.replay.json").write_text(json.dumps(replay))
    return work


@pytest.mark.wheel
def test_an_unknown_op_gets_the_closest_cuda_and_triton_ids_of_the_index(hash_topk_work, capsys, no_gpu):
    """With an index the known ids are the indexes' (CUDA and Triton): an indexed op not extracted yet gets its
    `extract --ops`; a typo gets the closest ids of either language, never an extract of itself."""
    merge = "attention.merge_state_triton"

    def show(op):
        assert cli(["agent", "show", op, "--work-dir", str(hash_topk_work)]) == 2
        return _error(capsys)

    err = show("moe.mask_topk_idz")
    assert "unknown op 'moe.mask_topk_idz'" in err and f"closest: {MASK}" in err, err
    assert "extract --ops moe.mask_topk_idz" not in err and "kernelsmith extract --list" in err
    err = show("attention.merge_state_trito")
    assert merge in err.split("closest:")[1] and "extract --ops attention.merge_state_trito" not in err, err
    for indexed in ("activation.silu_and_mul", merge):  # CUDA, Triton: known, not extracted here
        err = show(indexed)
        assert "indexed but not extracted" in err and f"kernelsmith extract --ops {indexed}" in err, err


def _edited(text: str) -> str:
    return text.replace("{", "{ /* an edit */", 1)


@pytest.mark.wheel
def test_show_marks_the_code_only_another_op_runs_exactly_as_submit_refuses_it(hash_topk_work, capsys, no_gpu):
    """`agent show moe.mask_topk_ids` listed HashTopKKernel and moe_hash_topk_fused as editable, and `agent
    submit` then refused an edit to either as moe.hash_topk's. Now show (without a GPU, and in a run) marks them
    not editable, naming the op that runs them; every region it lists as editable is one submit accepts."""
    work = str(hash_topk_work)
    assert cli(["agent", "show", MASK, "--work-dir", work]) == 0
    offline = json.loads(capsys.readouterr().out)
    assert set(offline["not_editable"]) == {"HashTopKKernel", "moe_hash_topk_fused"}
    assert all(f"only {HASH} runs it" in why and "submit" in why for why in offline["not_editable"].values())
    assert set(offline["editable"]) == set(offline["regions"]) - set(offline["not_editable"])
    assert "MaskKernel" in offline["editable"]
    assert cli(["agent", "show", HASH, "--work-dir", work]) == 0
    other = json.loads(capsys.readouterr().out)
    assert set(other["not_editable"]) == {"MaskKernel", "mask_topk_ids_padded_region"}
    assert all(f"only {MASK} runs it" in why for why in other["not_editable"].values())

    replay = ["--work-dir", work, "--run", "r1", "--replay", str(hash_topk_work / "mask.replay.json")]
    assert cli(["agent", "show", MASK, *replay]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["evaluated"] and (shown["editable"], shown["not_editable"]) == (
        offline["editable"],
        offline["not_editable"],
    )
    folder = hash_topk_work / "tasks" / MASK
    task = load_task(folder)
    regions = baseline_regions(read_task_files(folder, task), task)
    for name in shown["regions"]:
        path = hash_topk_work / f"{name}.cu"
        path.write_text(_edited(regions[name]))
        code = cli(["agent", "submit", MASK, "--region", f"{name}={path}", *replay])
        captured = capsys.readouterr()
        if name in shown["not_editable"]:
            assert code == 2 and f"{name} belongs to another op" in captured.err, (name, captured.err)
        else:
            assert code == 0 and json.loads(captured.out)["outcome"] == "ok", (name, captured.err)
