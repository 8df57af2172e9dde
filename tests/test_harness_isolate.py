"""Process isolation (optimize.harness.isolate) with real child processes and stand-in workers."""

from __future__ import annotations

import os
import pathlib
import sys
import time

from optimize.harness import isolate
from optimize.harness.protocol import WorkerRequest
from pipeline.records import Contract

REQUEST = WorkerRequest(
    op_id="demo.op",
    contract=Contract(entry="e", args=[], symbols=[]),
    baseline_libraries=["/nonexistent.so"],
    device_cache_dir="/tmp",
)


def stand_in(script: str) -> list[str]:
    return [sys.executable, "-c", script]


FINISH = """
import sys
from optimize.harness.protocol import WorkerRequest, WorkerResult
from pipeline.record_io import write_record
req = WorkerRequest.model_validate_json(open(sys.argv[1]).read())
print("working on", req.op_id, file=sys.stderr)
write_record(WorkerResult(status="ok", detail="saw " + req.op_id), sys.argv[2])
"""


def test_finished_worker_result_is_read_back(tmp_path):
    run = isolate.run_worker(REQUEST, tmp_path, timeout_s=60, argv_prefix=stand_in(FINISH))
    assert run.status == "finished" and run.returncode == 0
    assert run.result is not None and run.result.detail == "saw demo.op"
    assert "working on demo.op" in run.stderr_tail
    assert (tmp_path / "request.json").is_file()


def test_hanging_worker_and_its_children_are_killed_at_the_deadline(tmp_path):
    pid_file = tmp_path / "child.pid"
    script = f"""
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
open({str(pid_file)!r}, "w").write(str(child.pid))
print("about to hang", file=sys.stderr, flush=True)
time.sleep(120)
"""
    start = time.monotonic()
    run = isolate.run_worker(REQUEST, tmp_path, timeout_s=2.0, argv_prefix=stand_in(script))
    assert run.status == "timeout" and run.result is None
    assert time.monotonic() - start < 30
    assert "about to hang" in run.stderr_tail and "deadline" in run.summary
    child = int(pid_file.read_text())
    for _ in range(50):  # the grandchild was in the same process group: gone (or a zombie) soon
        status = pathlib.Path(f"/proc/{child}/status")
        if not status.exists() or "\tZ" in status.read_text():
            break
        time.sleep(0.1)
    else:
        os.kill(child, 9)
        raise AssertionError("the worker's child survived the timeout")


def test_aborting_worker_is_a_crash_with_its_stderr(tmp_path):
    script = "import os, sys\nprint('illegal memory access (simulated)', file=sys.stderr, flush=True)\nos.abort()"
    run = isolate.run_worker(REQUEST, tmp_path, timeout_s=60, argv_prefix=stand_in(script))
    assert run.status == "crashed" and run.returncode is not None and run.returncode < 0
    assert "SIGABRT" in run.summary and "illegal memory access (simulated)" in run.stderr_tail


def test_exit_without_result_and_unreadable_result_are_crashes(tmp_path):
    run = isolate.run_worker(REQUEST, tmp_path / "a", timeout_s=60, argv_prefix=stand_in("pass"))
    assert run.status == "crashed" and "without a result" in run.summary
    script = "import sys\nopen(sys.argv[2], 'w').write('{not json')"
    run = isolate.run_worker(REQUEST, tmp_path / "b", timeout_s=60, argv_prefix=stand_in(script))
    assert run.status == "crashed" and "unreadable result file" in run.stderr_tail


def test_stale_result_file_is_not_mistaken_for_a_new_one(tmp_path):
    (tmp_path / "result.json").write_text("{}")
    run = isolate.run_worker(REQUEST, tmp_path, timeout_s=60, argv_prefix=stand_in("pass"))
    assert run.status == "crashed"


def test_tail_keeps_the_end():
    assert isolate.tail("x" * 10, 4) == "...xxxx"
    assert isolate.tail("short", 40) == "short"


def test_ctrl_c_while_waiting_kills_the_worker_it_started(tmp_path):
    """The worker runs in its own session, so Ctrl-C (or the CLI's SIGTERM, turned into one) never
    reaches it: without this it kept the GPU busy after kernelsmith had exited."""
    import signal

    import pytest

    pid_file = tmp_path / "pid"
    script = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 1.5)
    try:
        with pytest.raises(KeyboardInterrupt):
            isolate.run_worker(REQUEST, tmp_path / "w", timeout_s=60, argv_prefix=stand_in(script))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


SEE_DEVICE = """
import os, sys
from optimize.harness.protocol import WorkerResult
from pipeline.record_io import write_record
write_record(WorkerResult(status="ok", detail=os.environ.get("CUDA_VISIBLE_DEVICES", "unset")), sys.argv[2])
"""


def test_a_worker_started_while_pinned_sees_that_gpu_alone_and_outside_the_environments(tmp_path, monkeypatch):
    """The scale-out lanes (optimize.scale.local) pin each lane's workers to its GPU."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    with isolate.pinned("3"):
        assert isolate.pinned_device() == "3"
        inside = isolate.run_worker(REQUEST, tmp_path / "a", timeout_s=60, argv_prefix=stand_in(SEE_DEVICE))
    outside = isolate.run_worker(REQUEST, tmp_path / "b", timeout_s=60, argv_prefix=stand_in(SEE_DEVICE))
    assert inside.result is not None and inside.result.detail == "3"
    assert outside.result is not None and outside.result.detail == "0,1,2,3" and isolate.pinned_device() is None


def test_a_worker_whose_log_stops_growing_is_killed_as_hung_long_before_its_deadline(tmp_path):
    """Without the stall limit a hung kernel holds its worker to the deadline (590 s for a bench worker)."""
    script = """
import sys, time
print("[worker] timing Qwen3-235B-A22B[num_tokens=1] bf16", file=sys.stderr, flush=True)
time.sleep(120)
"""
    start = time.monotonic()
    run = isolate.run_worker(REQUEST, tmp_path, timeout_s=60, argv_prefix=stand_in(script), stall_s=1.5)
    assert time.monotonic() - start < 20
    assert run.status == "timeout" and run.stalled_s is not None and run.stalled_s >= 1.5
    assert "had not grown for" in run.summary and "timing Qwen3-235B-A22B[num_tokens=1] bf16" in run.summary
    assert "harness.stall_s" in run.summary, "the summary names the knob for a step that is only slow"


def test_a_worker_that_keeps_logging_outlives_the_stall_limit(tmp_path):
    script = """
import sys, time
from optimize.harness.protocol import WorkerResult
from pipeline.record_io import write_record
for i in range(8):
    print("case", i, file=sys.stderr, flush=True)
    time.sleep(0.4)
write_record(WorkerResult(status="ok"), sys.argv[2])
"""
    run = isolate.run_worker(REQUEST, tmp_path, timeout_s=60, argv_prefix=stand_in(script), stall_s=1.5)
    assert run.status == "finished" and run.stalled_s is None and run.seconds > 1.5
