"""agent/: the outside coder's verbs, on the command line and over MCP (the SDK's own stdio client).

Measurements are replayed (SYNTHETIC rules over tests/fixtures/replay/demo.replay.json), so every
figure here is SIMULATED; what is tested is that a submission goes through the same session,
harness verdicts and records as the loop's own coders.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

import anyio
import pytest
from test_loop import LAUNCHER, REPLAY, write_task

from cli.main import main as cli
from pipeline.record_io import read_record
from pipeline.run_records import RunSummary

ROOT = pathlib.Path(__file__).resolve().parent.parent
HONEST = LAUNCHER.replace("kBlockSize = 256", "kBlockSize = 128")
CHEAT = LAUNCHER.replace("(n + kBlockSize - 1) / kBlockSize", "(n / 2 + kBlockSize - 1) / kBlockSize /* skip_tail */")


@pytest.fixture
def work(tmp_path):
    write_task(tmp_path)
    data = json.loads(REPLAY.read_text())
    rules = data["ops"]["demo.scale"]["rules"]
    rules[:0] = [  # SYNTHETIC: what the harness would say of these two submissions
        {
            "contains": "skip_tail",
            "outcome": "incorrect",
            "detail": "catalog demo[n=1024] fp32: out[512] was never written (poison)",
        },
        {"contains": "kBlockSize = 128", "outcome": "ok", "speedup": 1.08},
    ]
    replay = tmp_path / "agent.replay.json"
    replay.write_text(json.dumps(data))
    return tmp_path, replay


def agent(work, *argv):
    tmp, replay = work
    return cli(["agent", *argv, "--work-dir", str(tmp), "--replay", str(replay), "--run", "a1"])


def test_show_without_a_gpu_shows_the_task_and_other_verbs_still_refuse(work, capsys, monkeypatch):
    """A coder writes its candidate where it is: `agent show` on a machine with no GPU gives the task's
    regions, contract and shapes (nothing evaluated, and it says why); a verb that measures still refuses."""
    from optimize.backends.gpu import GpuBackend

    monkeypatch.setattr(GpuBackend, "available", lambda self: (False, "no GPU in this test"))
    tmp, _ = work
    assert cli(["agent", "show", "demo.scale", "--work-dir", str(tmp)]) == 0
    captured = capsys.readouterr()
    shown = json.loads(captured.out)
    assert shown["evaluated"] is False and "no GPU in this test" in shown["why_not_evaluated"]
    assert shown["regions"]["launch_scale"].splitlines()[1].startswith("   2    constexpr int kBlockSize = 256;")
    assert shown["contract"]["entry"] == "scale" and len(shown["shapes"]) == 3 and shown["tried"] == []
    assert "answering from the tasks" in captured.err
    assert not (tmp / "runs").exists(), "nothing was opened or recorded"
    assert cli(["agent", "submit", "demo.scale", "--region", "launch_scale=-", "--work-dir", str(tmp)]) != 0
    assert "needs a CUDA GPU" in capsys.readouterr().err


def _run_files(tmp):
    runs = tmp / "runs"
    return {str(p): p.stat().st_mtime_ns for p in runs.rglob("*") if p.is_file()} if runs.exists() else {}


def test_without_a_gpu_the_reading_verbs_answer_and_the_measuring_ones_refuse_before_any_work(
    work, capsys, monkeypatch
):
    """Issue 47: on a CPU machine `agent ops`, `brief`, `trajectory` (and `show` without an op) exited 2 with the
    GPU error. The verbs that only read answer from the task and the run's records (a run recorded elsewhere, here
    replayed, included); submit, finish and integrate refuse in one line with the fix before reading a region file
    or stdin, opening an op or writing anything."""
    from optimize.backends.gpu import GpuBackend

    monkeypatch.setattr(GpuBackend, "available", lambda self: (False, "no GPU in this test"))
    tmp, _ = work

    def offline(*argv):
        return cli(["agent", *argv, "--work-dir", str(tmp), "--run", "a1"])

    assert offline("ops") == 0
    assert json.loads(capsys.readouterr().out) == [{"op": "demo.scale", "evaluated_in_run": False}]
    assert offline("brief", "demo.scale") == 0
    brief = json.loads(capsys.readouterr().out)
    assert brief["evaluated"] is False and "no GPU in this test" in brief["why_not_evaluated"]
    assert brief["skills"] and all(row["method"] for row in brief["skills"]), "the code's static features plan"
    assert offline("trajectory", "demo.scale") == 2
    err = capsys.readouterr().err
    assert "run a1 has no op demo.scale yet" in err and "CUDA GPU" not in err
    assert offline("show") == 2
    err = capsys.readouterr().err
    assert "needs an op" in err and "kernelsmith agent ops" in err and "CUDA GPU" not in err

    class Unread:
        def read(self, *_):
            raise AssertionError("stdin was read before the GPU refusal")

    monkeypatch.setattr(sys, "stdin", Unread())
    for argv in (["submit", "demo.scale", "--region", "launch_scale=-"], ["finish"], ["integrate"]):
        assert offline(*argv) == 2
        err = capsys.readouterr().err
        assert f"`{argv[0]}` needs a CUDA GPU" in err and "no GPU in this test" in err, err
        assert "--replay FILE" in err and "show, brief, trajectory" in err and "Traceback" not in err
        assert [line.split(":")[0] for line in err.strip().splitlines()] == ["error", "fix"]
    assert not (tmp / "runs").exists(), "nothing was opened or recorded"

    # a run recorded where timings were had (replayed here) is read back here without a GPU, nothing rewritten
    (tmp / "honest.cu").write_text(HONEST)
    assert agent(work, "submit", "demo.scale", "--region", f"launch_scale={tmp / 'honest.cu'}") == 0
    honest = json.loads(capsys.readouterr().out)["candidate"]
    before = _run_files(tmp)
    assert offline("ops") == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["evaluated_in_run"] and row["best_speedup_geomean"] == pytest.approx(1.08)
    assert offline("show", "demo.scale") == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["evaluated"] is True and shown["best"] == honest and shown["buckets"] and shown["tried"]
    assert "kBlockSize = 128" in shown["regions"]["launch_scale"]
    assert offline("brief", "demo.scale") == 0
    assert json.loads(capsys.readouterr().out)["evaluated"] is True
    assert offline("trajectory", "demo.scale") == 0
    rounds = json.loads(capsys.readouterr().out)
    assert [r["coder"] for r in rounds if r["kind"] == "round"] == ["external:cli"]
    assert _run_files(tmp) == before, "reading a run writes nothing"


def test_mcp_tools_that_read_answer_without_a_gpu_and_submit_refuses_with_the_fix(work):
    """In process, as `kernelsmith mcp` serves on a machine without a GPU: list_ops (the instructions' first call),
    show_task, planning_brief and trajectory answer; submit_candidate, finish and integrate answer the GPU error."""
    from agent.mcp_server import INSTRUCTIONS, build_server
    from agent.verbs import AgentRun
    from pipeline.config import Config

    tmp, _ = work
    config = Config.model_validate({"work_dir": str(tmp)})
    server = build_server(
        lambda client: AgentRun(config, "m1", None, client=client, no_gpu="no GPU here"), config=config
    )

    async def calls():
        out = {}
        for name, arguments in [
            ("list_ops", {}),
            ("show_task", {"op": "demo.scale"}),
            ("planning_brief", {"op": "demo.scale"}),
            ("submit_candidate", {"op": "demo.scale", "regions": {"launch_scale": HONEST}, "rationale": "y"}),
            ("finish", {}),
        ]:
            try:
                out[name] = await server.call_tool(name, arguments)
            except Exception as err:  # the SDK raises a tool's error in process
                out[name] = err
        return out

    answers = anyio.run(calls)
    assert "Start with list_ops" in INSTRUCTIONS
    assert [row["op"] for row in answers["list_ops"].structured_content["result"]] == ["demo.scale"]
    assert answers["show_task"].structured_content["evaluated"] is False
    assert answers["planning_brief"].structured_content["skills"]
    for name in ("submit_candidate", "finish"):
        assert isinstance(answers[name], Exception) and "needs a CUDA GPU" in str(answers[name]), answers[name]
        assert "--replay FILE" in str(answers[name])
    assert not (tmp / "runs").exists()


def test_cli_verbs_submit_an_honest_and_a_cheating_candidate(work, capsys):
    tmp, _ = work
    assert agent(work, "show", "demo.scale") == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["regions"]["launch_scale"].splitlines()[1].startswith("   2    constexpr int kBlockSize = 256;")
    assert shown["contract"]["entry"] == "scale" and len(shown["shapes"]) == 3 and shown["evaluated"] is True
    (tmp / "honest.cu").write_text(HONEST)
    (tmp / "cheat.cu").write_text(CHEAT)
    assert (
        agent(work, "submit", "demo.scale", "--region", f"launch_scale={tmp / 'cheat.cu'}", "--rationale", "half grid")
        == 0
    )
    cheat = json.loads(capsys.readouterr().out)
    assert cheat["outcome"] == "incorrect" and not cheat["accepted"] and "never written" in cheat["detail"]
    assert (
        agent(work, "submit", "demo.scale", "--region", f"launch_scale={tmp / 'honest.cu'}", "--rationale", "128") == 0
    )
    honest = json.loads(capsys.readouterr().out)
    assert honest["outcome"] == "ok" and honest["accepted"] and honest["speedup_geomean"] == pytest.approx(1.08)
    assert {s["shape"] for s in honest["shapes"]} == {"demo[n=1024]", "demo[n=1048576]", "demo[n=16777216]"}
    # the same text again: nothing new to build
    assert agent(work, "submit", "demo.scale", "--region", f"launch_scale={tmp / 'honest.cu'}") == 0
    assert json.loads(capsys.readouterr().out)["outcome"] == "no_change"
    assert agent(work, "trajectory", "demo.scale") == 0
    rounds = json.loads(capsys.readouterr().out)
    assert [r["coder"] for r in rounds if r["kind"] == "round"] == ["external:cli"] * 3
    assert agent(work, "finish") == 0
    capsys.readouterr()
    summary = read_record(RunSummary, tmp / "runs" / "a1" / "summary.json")
    assert summary.simulated and summary.ops[0].status == "improved" and summary.coder == "external"
    assert agent(work, "ops") == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["evaluated_in_run"] and row["best_speedup_geomean"] == pytest.approx(1.08)


def test_cli_errors_name_the_fix_and_print_no_traceback(work, capsys):
    assert agent(work, "submit", "demo.scale", "--region", "nope") == 2
    err = capsys.readouterr().err
    assert "NAME=FILE" in err and "Traceback" not in err
    (work[0] / "x.cu").write_text("int x;")
    assert agent(work, "submit", "demo.scale", "--region", f"no_such_region={work[0] / 'x.cu'}") == 2
    err = capsys.readouterr().err
    assert "no editable region no_such_region" in err and "launch_scale" in err and "Traceback" not in err
    assert agent(work, "show", "no.such_op") != 0
    err = capsys.readouterr().err
    assert "unknown op 'no.such_op'" in err and "kernelsmith agent ops" in err and "Traceback" not in err
    assert "extract --ops no.such_op" not in err, "never extract an op id no index knows"


def test_mcp_server_over_stdio_with_the_sdks_client(work):
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    tmp, replay = work
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "cli", "mcp", "--work-dir", str(tmp), "--replay", str(replay), "--run", "m1"],
        cwd=str(ROOT),
    )

    async def session_run():
        async with stdio_client(params) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                tools = {t.name for t in (await session.list_tools()).tools}
                shown = await session.call_tool("show_task", {"op": "demo.scale"})
                cheat = await session.call_tool(
                    "submit_candidate", {"op": "demo.scale", "regions": {"launch_scale": CHEAT}, "rationale": "x"}
                )
                honest = await session.call_tool(
                    "submit_candidate", {"op": "demo.scale", "regions": {"launch_scale": HONEST}, "rationale": "y"}
                )
                bad = await session.call_tool("show_task", {"op": "no.such_op"})
                traj = await session.call_tool("trajectory", {"op": "demo.scale"})
                return tools, shown, cheat, honest, bad, traj

    tools, shown, cheat, honest, bad, traj = anyio.run(session_run)
    assert tools >= {"list_ops", "show_task", "planning_brief", "submit_candidate", "trajectory", "finish", "integrate"}
    assert shown.structured_content["contract"]["entry"] == "scale"
    assert cheat.structured_content["outcome"] == "incorrect"
    assert honest.structured_content["outcome"] == "ok" and honest.structured_content["accepted"]
    assert bad.is_error and "unknown op 'no.such_op'" in bad.content[0].text
    assert "extract --ops no.such_op" not in bad.content[0].text
    coders = {r["coder"] for r in traj.structured_content["result"] if r["kind"] == "round"}
    assert len(coders) == 1 and next(iter(coders)).startswith("external:")


def test_mcp_server_without_a_gpu_shows_tasks_and_refuses_measuring_with_the_fix(work):
    """No GPU and no --replay: the server starts; show_task answers the task itself; a tool that
    measures answers the GPU error (a tool error with the fix, not a dead server)."""
    import importlib.util

    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    if importlib.util.find_spec("torch") is not None:
        pytest.skip("needs a machine where the GPU harness is unavailable (no torch)")
    tmp, _ = work
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "cli", "mcp", "--work-dir", str(tmp)], cwd=str(ROOT)
    )

    async def session_run():
        async with stdio_client(params) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                listed = await session.call_tool("list_ops", {})
                shown = await session.call_tool("show_task", {"op": "demo.scale"})
                brief = await session.call_tool("planning_brief", {"op": "demo.scale"})
                submitted = await session.call_tool(
                    "submit_candidate", {"op": "demo.scale", "regions": {"launch_scale": HONEST}, "rationale": "y"}
                )
                return listed, shown, brief, submitted

    listed, shown, brief, submitted = anyio.run(session_run)
    assert not listed.is_error and listed.structured_content["result"][0]["op"] == "demo.scale", "issue 47"
    assert not brief.is_error and brief.structured_content["evaluated"] is False
    assert not shown.is_error and shown.structured_content["evaluated"] is False
    assert shown.structured_content["regions"]["launch_scale"].splitlines()[1].startswith("   2    constexpr int")
    assert submitted.is_error and "needs a CUDA GPU" in submitted.content[0].text
    assert "--replay" in submitted.content[0].text, "the error carries its fix"
    assert not (tmp / "runs").exists()


@pytest.mark.nvcc
@pytest.mark.wheel
def test_build_compiles_a_candidate_on_the_cpu_as_the_harness_would(tmp_path, sglang_source, capsys):
    """`agent build`: nvcc for sm_90a with the task's recipe, no GPU and no run: ptxas resources for a good
    candidate, the compiler's error in the region's own line numbers for a broken one, a clear refusal for a
    region the task does not have."""
    import shutil

    from test_build import make_task

    from pipeline.record_io import write_record

    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    pytest.importorskip("tvm_ffi.libinfo")
    from test_build import _inst

    task_dir = tmp_path / "tasks" / "activation.silu_and_mul"
    task = make_task(task_dir, sglang_source)
    # two bf16 instantiations (PDL on and off) cannot share one unit: the harness's units are used
    no_pdl = _inst("bf16", "bf16_t").model_copy(
        update={
            "module_args": ["activation", "bf16_t", "false"],
            "template_args": ["bf16_t", "false"],
            "wrappers": [("run_activation", "ActivationKernel<bf16_t, false>::run_activation")],
        }
    )
    task = task.model_copy(update={"instantiations": [*task.instantiations, no_pdl]})
    write_record(task, task_dir / "task.json")
    (span,) = task.editable
    text = (task_dir / "src" / span.file).read_bytes()[span.start_byte : span.end_byte].decode()
    good, bad = tmp_path / "good.cu", tmp_path / "bad.cu"
    good.write_text(text.replace("{", "{\n  // a candidate", 1))
    bad.write_text(text.replace("{", "{\n  undeclared_name += 1;", 1))

    def build(path):
        return cli(["agent", "build", task.op_id, "--region", f"{span.name}={path}", "--work-dir", str(tmp_path)])

    assert build(good) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["ok"] and not answer["errors"]
    assert any("act_and_mul_kernel" in r["kernel"] and r["registers"] > 0 for r in answer["ptxas"])
    assert build(bad) == 1
    answer = json.loads(capsys.readouterr().out)
    assert not answer["ok"] and "undeclared_name" in answer["errors"]
    line = text[: text.index("{")].count("\n") + 2  # the inserted statement's line within the region
    assert f"[region {span.name} line {line}]" in answer["errors"], "the error points into the region"
    assert cli(["agent", "build", task.op_id, "--region", f"nope={good}", "--work-dir", str(tmp_path)]) != 0
    assert "no editable region nope" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists(), "a build records nothing in any run"


def test_a_submission_that_edits_another_ops_region_is_refused_with_the_regions_it_may_edit(work, capsys, monkeypatch):
    """optimize.reach: a region another op's launcher owns is never run by this op's checks. `agent build`
    names it too, before any GPU time."""
    import shutil

    from optimize import reach  # what the CUDA language asks (optimize.languages.Cuda.foreign_code)

    monkeypatch.setattr(reach, "foreign_code", lambda *_: reach.Foreign(frozenset({"launch_scale"})))
    (work[0] / "l.cu").write_text(HONEST)
    assert agent(work, "submit", "demo.scale", "--region", f"launch_scale={work[0] / 'l.cu'}") == 2
    err = capsys.readouterr().err
    assert "launch_scale belongs to another op" in err and "edit only the code this op runs: scale_kernel" in err
    assert "Traceback" not in err
    if shutil.which("nvcc") is None:
        return  # the build half needs nvcc (CI has it)
    built = cli(
        ["agent", "build", "demo.scale", "--region", f"launch_scale={work[0] / 'l.cu'}", "--work-dir", str(work[0])]
    )
    answer = json.loads(capsys.readouterr().out)
    assert built == (0 if answer["ok"] else 1) and answer["foreign"] == ["launch_scale"]


# --------------------------------------------------------------------------- a Triton op (issue 19 item 4)

MERGE = "attention.merge_state_triton"
LAUNCH = "launch:merge_state_kernel"


@pytest.fixture
def merge_state(triton_wheel_index, tmp_path):
    """merge_state_triton from the pinned wheel as a task in tmp_path, its regions, and a SYNTHETIC replay."""
    from test_loop import merge_state_task

    folder, task, regions, replay = merge_state_task(triton_wheel_index, tmp_path)
    return tmp_path, task, regions, replay


def triton_candidates(regions, tmp_path):
    """Our own candidate files, built from the task's region text at run time (no SGLang text in the repo)."""
    from test_loop import with_num_warps

    good = with_num_warps(regions[LAUNCH], 8)
    kernel = regions["merge_state_kernel"]
    undefined = kernel.replace("tl.exp(p_lse) + tl.exp(s_lse)", "tl.no_such_fn(p_lse) + tl.exp(s_lse)")
    assert undefined != kernel, "merge_state_kernel changed: update the test's edit"
    files = {
        "good": good,
        "syntax": good.replace("num_warps=8,", "num_warps=8 8,"),
        "undefined": undefined,
    }
    for name, text in files.items():
        (tmp_path / f"{name}.py").write_text(text)
    return files


@pytest.mark.wheel
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_a_triton_op_is_shown_built_and_submitted_in_python_regions(merge_state, capsys, monkeypatch):
    """`agent show` without a GPU: the Python regions numbered, the tunables and the token buckets. `agent build`:
    triton.compile for sm_90 on this CPU; a syntax error and an undefined tl function are answered in the
    regions' own line numbers. `agent submit` (SIMULATED, a synthetic replay): the num_warps=8 launch is
    measured; the syntax error is compile_failed without reaching the backend."""
    from optimize.backends.gpu import GpuBackend

    tmp, task, regions, replay = merge_state
    files = triton_candidates(regions, tmp)
    monkeypatch.setattr(GpuBackend, "available", lambda self: (False, "no GPU in this test"))
    assert cli(["agent", "show", MERGE, "--work-dir", str(tmp)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["language"] == "triton" and shown["evaluated"] is False
    assert shown["regions"][LAUNCH].splitlines()[0].startswith("   1  merge_state_kernel[")
    assert "   2  def merge_state_kernel(" in shown["regions"]["merge_state_kernel"]
    warps = next(t for t in shown["facts"]["tunables"] if t["what"] == f"{LAUNCH}/num_warps")
    assert warps["baseline"] == 4 and 8 in warps["values"] and warps["per_bucket"]
    assert shown["facts"]["buckets"] == ["T<=64", "T>=512"] and shown["facts"]["token_count"]

    def build(name, region):
        code = cli(["agent", "build", MERGE, "--region", f"{region}={tmp / name}.py", "--work-dir", str(tmp)])
        return code, json.loads(capsys.readouterr().out)

    code, answer = build("good", LAUNCH)
    assert code == 0 and answer["ok"] and answer["language"] == "triton" and not answer["errors"]
    code, answer = build("syntax", LAUNCH)
    wrong = 1 + next(i for i, line in enumerate(files["syntax"].splitlines()) if "8 8," in line)
    assert code == 1 and f"region {LAUNCH} line {wrong}: does not parse (libcst)" in answer["errors"]
    code, answer = build("undefined", "merge_state_kernel")
    wrong = 1 + next(i for i, line in enumerate(files["undefined"].splitlines()) if "no_such_fn" in line)
    assert code == 1 and "no_such_fn" in answer["errors"]
    assert f"[region merge_state_kernel line {wrong}]" in answer["errors"], answer["errors"]
    assert not (tmp / "runs").exists(), "a build records nothing in any run"

    from test_loop import CountingBackend

    from agent.verbs import AgentRun
    from pipeline.config import Config

    backend = CountingBackend(replay)
    run = AgentRun(Config.model_validate({"work_dir": str(tmp)}), "a1", backend, client="test")
    bad = run.submit(MERGE, {LAUNCH: files["syntax"]}, "8 warps, typo")
    assert bad["outcome"] == "compile_failed" and f"region {LAUNCH} line" in bad["evaluation"]
    assert bad["candidate"] not in {cid for cid, _ in backend.calls}, "a refused candidate used GPU time"
    good = run.submit(MERGE, {LAUNCH: files["good"]}, "8 warps")
    assert good["outcome"] == "ok" and good["accepted"] and (good["candidate"], "round") in backend.calls


@pytest.mark.wheel
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_mcp_show_task_and_build_candidate_answer_a_triton_op_without_a_gpu(merge_state):
    """The MCP tools (in process, offline as `kernelsmith mcp` is without a GPU): show_task gives the Python
    regions, tunables and buckets; build_candidate answers Triton's error in the region's own line."""
    from agent.mcp_server import build_server
    from agent.verbs import AgentRun
    from pipeline.config import Config

    tmp, task, regions, _ = merge_state
    files = triton_candidates(regions, tmp)
    config = Config.model_validate({"work_dir": str(tmp)})

    def no_backend(client):
        return AgentRun(config, "m1", None, client=client, no_gpu="no GPU in this test")

    server = build_server(no_backend, config=config)

    async def calls():
        shown = await server.call_tool("show_task", {"op": MERGE})
        built = await server.call_tool(
            "build_candidate", {"op": MERGE, "regions": {"merge_state_kernel": files["undefined"]}}
        )
        return shown, built

    shown, built = anyio.run(calls)
    assert not shown.is_error and shown.structured_content["language"] == "triton"
    assert shown.structured_content["facts"]["buckets"] == ["T<=64", "T>=512"]
    assert "   1  merge_state_kernel[" in shown.structured_content["regions"][LAUNCH]
    answer = built.structured_content
    assert not built.is_error and answer["ok"] is False and "no_such_fn" in answer["errors"]
    assert "[region merge_state_kernel line" in answer["errors"]
