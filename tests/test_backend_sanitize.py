"""Final validation's compute-sanitizer passes (optimize.backends.gpu.GpuBackend._sanitize), with the sanitizer faked.

Each tool's verdict is scripted (optimize.harness.tools.run_sanitizer replaced): a tool's errors reject the
candidate, a tool that is missing or refuses the device is "not run" with the reason, never a pass, and a
racecheck/synccheck/initcheck error the baseline shows too is noted, not held against the candidate.
"""

from __future__ import annotations

import types

import pytest
from test_loop import make_task

from optimize.backends import gpu
from optimize.harness.protocol import CheckCase
from optimize.harness.tools import SanitizerResult
from pipeline.config import Config
from pipeline.run_records import Candidate, Evaluation, Outcome


def _case(label: str, dtype: str, n: int, held_out: bool = False) -> CheckCase:
    return CheckCase(label=label, sizes={"n": n}, dtype=dtype, export="scale", seed=1, held_out=held_out)  # type: ignore[arg-type]


CHECKS = [_case("big", "fp32", 1 << 20), _case("small", "fp32", 4), _case("mid", "bf16", 64), _case("tiny", "bf16", 2)]


@pytest.fixture
def backend(tmp_path, monkeypatch):
    from optimize.harness import evaluate as harness

    monkeypatch.setattr(gpu.shutil, "which", lambda name: "/usr/bin/compute-sanitizer")
    monkeypatch.setattr(harness, "plan_cases", lambda task, **kw: types.SimpleNamespace(checks=CHECKS, units=[[]]))
    monkeypatch.setattr(harness, "build_units", lambda *a, **kw: (types.SimpleNamespace(ok=True), ["lib.so"]))
    return gpu.GpuBackend(Config.model_validate({"work_dir": str(tmp_path)}))


def _script(monkeypatch, verdicts: dict[tuple[str, str], SanitizerResult]) -> list[tuple[str, str, list[str]]]:
    """run_sanitizer answers ``verdicts[(tool, who)]`` (who: candidate / baseline), else clean; returns the calls."""
    import optimize.harness.tools as tools

    calls: list[tuple[str, str, list[str]]] = []

    def run_sanitizer(request, workdir, tool, *, timeout_s):
        who = "baseline" if request.candidate_libraries is None else "candidate"
        calls.append((tool, who, [c.label for c in request.checks]))
        return verdicts.get((tool, who), SanitizerResult(tool=tool, status="clean"))

    monkeypatch.setattr(tools, "run_sanitizer", run_sanitizer)
    return calls


def _sanitize(backend):
    candidate = Candidate(op_id="demo.scale", id="c1", parent="b", regions={}, coder="offline")
    ok = Evaluation(op_id="demo.scale", candidate="c1", outcome=Outcome.ok, detail="40 checks passed")
    return backend._sanitize("/nonexistent", make_task(), candidate, ok)


def test_every_tool_runs_memcheck_wide_and_the_others_on_one_small_case_per_dtype(backend, monkeypatch):
    calls = _script(monkeypatch, {})
    evaluation = _sanitize(backend)
    assert sorted(tool for tool, _, _ in calls) == sorted(gpu.SANITIZER_TOOLS)
    # memcheck: small token counts (and held-out cases); the others one per dtype, the smallest
    assert all(labels == ["small", "tiny"] for _, _, labels in calls)
    assert evaluation.outcome == Outcome.ok
    for tool in gpu.SANITIZER_TOOLS:
        assert f"compute-sanitizer {tool}: clean" in evaluation.detail
        assert f"sanitize_{tool}" in evaluation.seconds


def test_a_race_rejects_the_candidate(backend, monkeypatch):
    race = SanitizerResult(tool="racecheck", status="errors", errors=1, detail="Race reported between Write access")
    calls = _script(monkeypatch, {("racecheck", "candidate"): race})
    evaluation = _sanitize(backend)
    assert evaluation.outcome == Outcome.incorrect
    assert "compute-sanitizer racecheck: 1 errors" in evaluation.detail and "Race reported" in evaluation.detail
    assert ("racecheck", "baseline", ["small", "tiny"]) in calls  # the baseline was asked before blaming
    assert [who for tool, who, _ in calls if tool != "racecheck"] == ["candidate"] * 3  # the others: no baseline
    assert "synccheck: clean" not in evaluation.detail  # the first failure in the tools' order ends the reading


def test_a_hazard_the_baseline_has_too_is_noted_not_held(backend, monkeypatch):
    race = SanitizerResult(tool="racecheck", status="errors", errors=2, detail="hazard")
    _script(monkeypatch, {("racecheck", "candidate"): race, ("racecheck", "baseline"): race})
    evaluation = _sanitize(backend)
    assert evaluation.outcome == Outcome.ok
    assert "compute-sanitizer racecheck: the baseline reports errors too, not held" in evaluation.detail


def test_memcheck_errors_are_a_crash(backend, monkeypatch):
    bad = SanitizerResult(tool="memcheck", status="errors", errors=3, detail="Invalid __global__ write")
    _script(monkeypatch, {("memcheck", "candidate"): bad})
    evaluation = _sanitize(backend)
    assert evaluation.outcome == Outcome.crashed and "Invalid __global__ write" in evaluation.detail


@pytest.mark.parametrize("status", ["unavailable", "failed"])
def test_a_tool_that_refuses_or_hangs_is_not_run_never_a_pass(backend, monkeypatch, status):
    refused = SanitizerResult(tool="synccheck", status=status, detail="========= Error: Device not supported")
    _script(monkeypatch, {("synccheck", "candidate"): refused})
    evaluation = _sanitize(backend)
    assert evaluation.outcome == Outcome.ok
    assert (
        f"compute-sanitizer synccheck: not run ({status}: ========= Error: Device not supported)" in evaluation.detail
    )
    assert "synccheck: clean" not in evaluation.detail


def test_no_sanitizer_on_the_machine_says_every_tool_was_not_run(backend, monkeypatch):
    monkeypatch.setattr(gpu.shutil, "which", lambda name: None)
    evaluation = _sanitize(backend)
    assert evaluation.outcome == Outcome.ok
    assert "memcheck, racecheck, synccheck, initcheck not run" in evaluation.detail


def test_the_four_tools_run_at_once_and_their_verdicts_are_read_in_order(backend, monkeypatch):
    """Each tool holds its own process for seconds (26 s of fused_add_rmsnorm's 49 s final validation in
    turn, H100, 2026-12-08): they run at once, and memcheck's crash still comes before a later race."""
    import threading

    import optimize.harness.tools as tools

    started = threading.Barrier(len(gpu.SANITIZER_TOOLS), timeout=10)
    verdicts = {
        "memcheck": SanitizerResult(tool="memcheck", status="errors", errors=1, detail="Invalid __global__ read"),
        "racecheck": SanitizerResult(tool="racecheck", status="errors", errors=1, detail="Race reported"),
    }

    def run_sanitizer(request, workdir, tool, *, timeout_s):
        started.wait()  # returns only once every tool has started: in turn, the first would wait alone and fail
        return verdicts.get(tool, SanitizerResult(tool=tool, status="clean"))

    monkeypatch.setattr(tools, "run_sanitizer", run_sanitizer)
    evaluation = _sanitize(backend)
    assert evaluation.outcome == Outcome.crashed and "compute-sanitizer memcheck: 1 errors" in evaluation.detail
    assert all(f"sanitize_{tool}" in evaluation.seconds for tool in gpu.SANITIZER_TOOLS)
