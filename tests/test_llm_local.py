"""The internal LLM loop against a real model: llama.cpp's llama-server with Qwen2.5-Coder-1.5B on 127.0.0.1.

Opt-in (``make test-llm`` sets KERNELSMITH_LOCAL_MODEL and KERNELSMITH_LLAMA_SERVER; without
them this skips). The one test in the suite that talks to a real model. It asserts the
plumbing only (a small model's edits are not expected to be good): every round ends in an
outcome of the closed set, nothing raises, tokens are counted, the trajectory is written.
Measurements are replayed (the demo task's SYNTHETIC file): the figures are SIMULATED.
"""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import time
import urllib.request

import pytest
from test_loop import CountingBackend, write_task

from optimize.llm.client import LlmClient
from optimize.loop import Loop
from optimize.session import LoopOptions
from optimize.trajectory import ROUND_OUTCOMES, Trajectory
from pipeline.config import Config

pytestmark = pytest.mark.local_model
READY_S = 120.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server(tmp_path):
    model = os.environ.get("KERNELSMITH_LOCAL_MODEL")
    binary = os.environ.get("KERNELSMITH_LLAMA_SERVER")
    if not model or not binary:
        pytest.skip(
            "`make test-llm` sets up llama-server and the model (KERNELSMITH_LOCAL_MODEL, KERNELSMITH_LLAMA_SERVER)"
        )
    port = _free_port()
    log = open(tmp_path / "llama-server.log", "wb")
    proc = subprocess.Popen(
        [binary, "-m", model, "--host", "127.0.0.1", "--port", str(port), "--ctx-size", "8192", "--threads", "2"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + READY_S
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
                if reply.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"llama-server did not become ready: {(tmp_path / 'llama-server.log').read_text()[-2000:]}")
        time.sleep(0.5)
    yield f"http://127.0.0.1:{port}/v1"
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def test_the_llm_loop_runs_against_a_real_local_model(tmp_path, server):
    task_dir, task = write_task(tmp_path)
    config = Config.model_validate(
        {
            "work_dir": str(tmp_path),
            "budget": {"rounds": 2, "repair_attempts": 1},
            "llm": {
                "base_url": server,
                "model": "qwen2.5-coder-1.5b-instruct",
                "prices_usd_per_mtok": {"qwen2.5-coder-1.5b-instruct": {"input": 0.0, "output": 0.0}},
            },
        }
    )
    model = LlmClient(config.llm, cache_dir=tmp_path / "cache" / "llm", environ={"OPENAI_API_KEY": "local"})
    started = time.monotonic()
    loop = Loop(config, LoopOptions(run="local", coder="llm"), CountingBackend(), model=model)
    summary = loop.run([(task_dir, task)])
    elapsed = time.monotonic() - started
    traj = Trajectory(pathlib.Path(tmp_path) / "runs" / "local" / "demo.scale" / "trajectory.jsonl")
    rounds = traj.rounds()
    assert rounds, "the loop wrote no round"
    assert all(r.outcome in set(ROUND_OUTCOMES) for r in rounds)
    assert summary.tokens > 0, "the model's tokens were counted"
    assert summary.ops[0].status in ("improved", "no_improvement", "model_failed")
    print(
        f"\nlocal model: {len(rounds)} rounds in {elapsed:.0f} s, {summary.tokens} tokens, outcomes "
        f"{[r.outcome.value for r in rounds]}"
    )
