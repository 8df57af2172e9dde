"""Nsight Compute / compute-sanitizer output parsing and tool discovery (optimize.harness.tools)."""

from __future__ import annotations

import pytest

from optimize.harness import tools

NCU_OUT = """==PROF== Connected to process 123 (/usr/bin/python3.12)
[worker 10:00:00] run 1
==PROF== Profiling "act_and_mul_kernel" - 0: 0%....50%....100% - 9 passes
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes.sum.per_second","dram__throughput.avg.pct_of_peak_sustained_elapsed","gpu__time_duration.sum","launch__registers_per_thread","sm__warps_active.avg.pct_of_peak_sustained_active","smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio","smsp__average_warps_issue_stalled_selected_per_issue_active.ratio","smsp__average_warps_issue_stalled_wait_per_issue_active.ratio"
"","","","","","","","","","","","byte/second","%","ns","register/thread","%","inst","inst","inst"
"0","123","python3.12","127.0.0.1","act_and_mul_kernel","1","7","(256, 1, 1)","(57344, 1, 1)","0","9.0","3,912,000,000,000","85.2","161,500","24","78.5","12.5","1.0","0.8"
==PROF== Disconnected from process 123
"""


def test_parse_ncu_raw_csv_with_units():
    (k,) = tools.parse_ncu_csv(NCU_OUT)
    assert k.kernel == "act_and_mul_kernel"
    assert k.duration_us == 161.5 and k.dram_throughput_pct == 85.2 and k.dram_gbps == pytest.approx(3912.0)
    assert k.achieved_occupancy_pct == 78.5 and k.registers == 24
    assert k.top_stalls == [("long_scoreboard", 12.5), ("wait", 0.8)]  # "selected" is not a stall
    result = tools.NcuResult(status="ok", kernels=[k])
    assert result.metrics()["stall_long_scoreboard"] == 12.5 and result.metrics()["duration_us"] == 161.5


def test_parse_ncu_without_rows():
    assert tools.parse_ncu_csv("==PROF== error: no kernels were profiled\n") == []


def test_parse_sanitizer_summaries():
    assert tools.parse_sanitizer("memcheck", "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n") == (
        "clean",
        0,
        "",
    )
    text = (
        "========= COMPUTE-SANITIZER\n========= Invalid __global__ write of size 16 bytes\n"
        "=========     at act_and_mul_kernel+0x1b0\n========= ERROR SUMMARY: 3 errors\n"
    )
    status, errors, detail = tools.parse_sanitizer("memcheck", text)
    assert status == "errors" and errors == 3 and "Invalid __global__ write" in detail
    race = "========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)\n"
    assert tools.parse_sanitizer("racecheck", race)[:2] == ("errors", 1)
    assert tools.parse_sanitizer("memcheck", "Traceback: boom")[0] == "failed"


def test_missing_tools_are_unavailable(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.setattr(tools.glob, "glob", lambda pattern: [])
    monkeypatch.setattr(tools, "find_tool", lambda name: None)
    from optimize.harness.protocol import WorkerRequest
    from pipeline.records import Contract

    request = WorkerRequest(
        op_id="x", contract=Contract(entry="e", args=[], symbols=[]), baseline_libraries=[], device_cache_dir="/tmp"
    )
    assert tools.run_ncu(request, tmp_path, ["k"]).status == "unavailable"
    assert tools.run_sanitizer(request, tmp_path, "memcheck").status == "unavailable"


def test_find_tool_searches_cuda_home(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", "/nonexistent")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "compute-sanitizer"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert tools.find_tool("compute-sanitizer") == str(exe)
    assert tools.find_tool("surely-not-a-cuda-tool") is None
