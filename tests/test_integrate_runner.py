"""integrate.sglang_runner, sglang_worker and sglang_bare.

CPU: the bare-package import against the real wheel tree, case planning from
contracts, the wheel set kept in one place, the worker pipe protocol's failure
handling, the worker's argument binding. GPU (@pytest.mark.gpu): the real check through SGLang's ops, a
correct patch passing and a wrong one caught.
"""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys
import textwrap
import time

import pytest
from test_integrate_patch import OP, act_span, edited_kernel, make_best, make_task

from integrate import sglang_runner, tree_worker
from integrate.calls import plan_op, sanitizer_picks, task_dtypes
from integrate.errors import WorkerError
from integrate.patch import build_patch, package_dir
from integrate.sglang_runner import GPU_WHEELS, rows_width
from integrate.sglang_worker import bind
from integrate.tree_worker import TreeWorker
from pipeline.records import ArgSpec, Contract, ScalarSpec, ShapeCase, TensorSpec

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_the_wheel_set_is_the_same_in_code_script_and_readme():
    script = (ROOT / "integrate" / "wheels.sh").read_text()
    listed = re.findall(r"^\s+([A-Za-z0-9_.-]+==[0-9][^\s\\]*)", script, re.M)
    assert sorted(listed) == sorted(GPU_WHEELS)
    readme = (ROOT / "integrate" / "README.md").read_text()
    for pin in GPU_WHEELS:
        assert f"| `{pin}` |" in readme
    names = [p.split("==")[0] for p in GPU_WHEELS]
    assert len(set(names)) == len(names)
    # none of them is already on the GPU image (device/KINDS.md's package list)
    kinds = pathlib.Path("/work/.library/device/KINDS.md")
    if kinds.is_file():
        image = kinds.read_text().split("## Python packages already there", 1)[1]
        present = {p.strip().lower() for p in image.split("Packages:", 1)[1].split(".\n", 1)[0].split(",")}
        assert not present & set(names)


def test_bare_install_imports_sglang_submodules_without_the_top_level_init(sglang_source, tmp_path):
    """sglang.srt.environ is stdlib-only: it imports from the tree while sglang/__init__.py never runs."""
    code = textwrap.dedent(
        f"""
        import importlib.util, json, sys
        sys.path.insert(0, {str(ROOT)!r})
        from integrate.sglang_bare import install
        install({sglang_source.root!r})
        import sglang.srt.environ as environ
        spec = importlib.util.find_spec("sglang.kernels")
        print(json.dumps({{
            "environ": environ.__file__,
            "jit": spec.origin,
            "init_ran": "sglang.lang" in sys.modules or "sglang.version" in sys.modules,
            "file": getattr(sys.modules["sglang"], "__file__", None),
            "cache": environ.envs.SGLANG_JIT_CACHE_DIR.get(),
        }}))
        """
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "SGLANG_JIT_CACHE_DIR": str(tmp_path / "jit")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    root = pathlib.Path(sglang_source.root)
    assert pathlib.Path(out["environ"]) == root / "srt" / "environ.py"
    assert pathlib.Path(out["jit"]) == root / "kernels" / "__init__.py"
    assert out["init_ran"] is False and out["file"] is None
    assert out["cache"] == str(tmp_path / "jit")


def test_bare_install_refuses_a_folder_without_kernels(tmp_path):
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from integrate.sglang_bare import install; install({str(tmp_path)!r})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "not an sglang package folder" in done.stderr


def _task(sglang_source, tmp_path, contract=None, shapes=None, dtypes=("bf16", "fp16", "fp32")):
    from contract.layout import load_task

    root = pathlib.Path(sglang_source.root)
    return load_task(
        make_task(
            tmp_path / "work", sglang_source, OP, [act_span(root)], contract=contract, shapes=shapes, dtypes=dtypes
        )
    )


def test_cases_are_planned_from_the_contract(sglang_source, tmp_path):
    shapes = [
        ShapeCase(model="Llama-3.1-8B", tokens=4096, sizes={"num_tokens": 4096, "hidden_size": 14336}),
        ShapeCase(model="Mixtral-8x7B", tokens=1, sizes={"num_tokens": 2, "hidden_size": 14336}),
        ShapeCase(model="Llama-3.1-70B", tokens=64, sizes={"num_tokens": 64, "hidden_size": 28672}),
    ]
    task = _task(sglang_source, tmp_path, shapes=shapes)
    plan = plan_op(task, held_out=0)
    assert not plan.reason and plan.function == "sglang.kernels.ops.activation.activation.silu_and_mul"
    first = plan.cases[0]
    assert first.sizes == {"num_tokens": 4096, "hidden_size": 14336} and rows_width(first) == (
        4096,
        28672,
    )  # input is [N, 2*H]
    assert rows_width(plan.cases[3])[:2] == (2, 28672)
    assert task_dtypes(task) == ["bf16", "fp16", "fp32"]
    assert [c.dtype for c in plan.cases[:3]] == ["bf16", "fp16", "fp32"] and len(plan.cases) == 9
    # the smallest case and the middle one go under the sanitizer
    assert [c.label for c in sanitizer_picks(plan)] == [shapes[1].label, shapes[2].label]

    norm = Contract(
        entry="run_activation",
        args=[
            ArgSpec(
                kind="tensor",
                tensor=TensorSpec(name="input", shape=["num_tokens", "hidden_size"], dtype="T", role="inout"),
            ),
            ArgSpec(
                kind="tensor",
                tensor=TensorSpec(name="out", shape=["num_tokens", "hidden_size"], dtype="T", role="inout"),
            ),
            ArgSpec(kind="scalar", scalar=ScalarSpec(name="eps", type="float", value=1e-5)),
        ],
        symbols=["num_tokens", "hidden_size"],
    )
    task = _task(
        sglang_source,
        tmp_path / "n",
        contract=norm,
        shapes=[ShapeCase(model="m", tokens=8, sizes={"num_tokens": 8, "hidden_size": 4096})],
    )
    (case,) = plan_op(task, held_out=0).cases[:1]
    assert rows_width(case) == (8, 4096)
    assert case.request["scalars"] == {} and [t["name"] for t in case.request["tensors"]] == [
        "input",
        "out",
    ]  # eps feeds no parameter


def test_the_worker_binds_parameters_by_name_and_keeps_defaults():
    params = [
        {"name": "x", "kind": "positional_only", "feeds": "input", "via": "call"},
        {"name": "out", "kind": "positional_or_keyword", "feeds": "output", "via": "call"},
        {"name": "expert_ids", "kind": "positional_or_keyword", "feeds": None, "via": ""},
        {"name": "eps", "kind": "keyword_only", "feeds": "eps", "via": "name"},
        {"name": "topk", "kind": "keyword_only", "feeds": "topk", "via": "size"},
        {"name": "is_neox", "kind": "keyword_only", "feeds": None, "via": "build", "value": False},
    ]
    args, kwargs = bind(params, {"input": "X", "output": "O"}, {"eps": 1e-6}, {"topk": 8})
    assert args == ["X"] and kwargs == {"out": "O", "eps": 1e-6, "topk": 8, "is_neox": False}
    with pytest.raises(ValueError, match="follows skipped"):
        bind(
            [{"name": "skipped", "kind": "positional_only", "feeds": None, "via": ""}, params[0]],
            {"input": "X"},
            {},
            {},
        )
    with pytest.raises(KeyError, match="does not hold"):
        bind(params[:2], {"input": "X"}, {}, {})


def test_the_worker_answers_a_bad_request_as_data():
    from integrate.sglang_worker import handle

    assert handle({"cmd": "nope"}, "/x") == {"ok": False, "error": "unknown command 'nope'"}
    answer = handle({"cmd": "check"}, "/x")  # no plan: the failure comes back, the worker lives on
    assert answer["ok"] is False and answer["error"] and "Traceback" in answer["traceback"]


def _stand_in(tmp_path: pathlib.Path, body: str) -> str:
    """A stand-in 'python' for the worker: ignores its arguments, runs ``body`` (a bash script)."""
    exe = tmp_path / "fake-python"
    exe.write_text("#!/bin/bash\n" + body)
    exe.chmod(0o755)
    return str(exe)


def test_worker_protocol_reports_a_crash_with_its_stderr(tmp_path):
    python = _stand_in(
        tmp_path, 'read line; echo \'{"ok": true}\'; read line; echo "Fatal: illegal memory access" >&2; exit 134\n'
    )
    worker = TreeWorker("patched", tmp_path / "pkg", tmp_path / "cache", tmp_path / "w.log", python=python)
    worker.start()
    with pytest.raises(WorkerError, match="exited with code 134") as err:
        worker.request({"cmd": "check"}, timeout_s=30)
    assert "illegal memory access" in err.value.detail
    worker.close()


def test_worker_protocol_kills_a_hung_worker(tmp_path):
    python = _stand_in(tmp_path, "read line; echo '{\"ok\": true}'; read line; sleep 600\n")
    with TreeWorker("baseline", tmp_path / "pkg", tmp_path / "cache", tmp_path / "w.log", python=python) as worker:
        with pytest.raises(WorkerError, match="did not answer check within 1 s"):
            worker.request({"cmd": "check"}, timeout_s=1)
        assert worker.proc.poll() is not None, "the hung worker is killed"


def test_worker_protocol_surfaces_a_failed_command(tmp_path):
    answer = json.dumps({"ok": False, "error": "KeyError: 'x'", "traceback": "Traceback ..."})
    python = _stand_in(tmp_path, f"read line; echo '{{\"ok\": true}}'; read line; echo '{answer}'; read line\n")
    with TreeWorker("patched", tmp_path / "pkg", tmp_path / "cache", tmp_path / "w.log", python=python) as worker:
        with pytest.raises(WorkerError, match="failed check: KeyError"):
            worker.request({"cmd": "check"}, timeout_s=30)


def test_worker_environment_is_private(tmp_path, monkeypatch):
    """The patched tree's code is candidate code: its processes get no credentials (issue 16), only
    the toolchain's variables and SGLang's own settings."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-secret")
    monkeypatch.setenv("SGLANG_ENABLE_JIT_DEEPGEMM", "0")
    env = tree_worker.worker_env(tmp_path / "c")
    assert not {"OPENAI_API_KEY", "GITHUB_TOKEN"} & set(env)
    assert env["SGLANG_ENABLE_JIT_DEEPGEMM"] == "0" and env["PATH"] and env["HOME"].startswith(str(tmp_path / "c"))
    assert env["SGLANG_JIT_CACHE_DIR"] == str(tmp_path / "c" / "jit")
    assert env["SGLANG_CACHE_DIR"] == str(tmp_path / "c")
    assert env["TRITON_CACHE_DIR"].startswith(str(tmp_path / "c"))
    assert env["SGLANG_FORCE_FUSED_OP_BACKEND"] == "jit"
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"


# --------------------------------------------------------------------------- GPU


def _patched(sglang_source, tmp_path, new_text: str):
    work = tmp_path / "work"
    root = pathlib.Path(sglang_source.root)
    shapes = [
        ShapeCase(model="Llama-3.1-8B", tokens=1, sizes={"num_tokens": 1, "hidden_size": 14336}),
        ShapeCase(model="Llama-3.1-8B", tokens=37, sizes={"num_tokens": 37, "hidden_size": 14336}),
        ShapeCase(model="Llama-3.1-70B", tokens=512, sizes={"num_tokens": 512, "hidden_size": 28672}),
    ]
    task_dir = make_task(work, sglang_source, OP, [act_span(root)], shapes=shapes, dtypes=("bf16", "fp16", "fp32"))
    make_best(work, "r1", OP, {"act_and_mul_kernel": new_text})
    patch = build_patch("r1", work / "runs" / "r1", work / "tasks", sglang_source, work / "integrate" / "r1")
    from contract.layout import load_task

    return patch, load_task(task_dir), work / "integrate" / "r1"


@pytest.mark.gpu
def test_a_correct_patch_passes_through_sglang(sglang_source, tmp_path):
    patch, task, out = _patched(sglang_source, tmp_path, edited_kernel(pathlib.Path(sglang_source.root)))
    (check,) = sglang_runner.check_ops(
        [task], package_dir(patch, patched=False), package_dir(patch, patched=True), out, sanitizer=False, held_out=0
    )
    assert check.ran and check.failed == 0 and check.passed == 9
    assert all(c.bitwise_equal for c in check.cases), "a comment-only edit must be bit-identical"
    assert all(c.poisoned for c in check.cases)
    assert check.jit_build_s["patched"] > 0 and check.jit_build_s["baseline"] > 0
    # each tree compiled its own module into its own cache
    assert list((out / "cache" / "patched" / "jit").rglob("*.so")) and list(
        (out / "cache" / "baseline" / "jit").rglob("*.so")
    )


@pytest.mark.gpu
def test_a_wrong_patch_is_caught_through_sglang(sglang_source, tmp_path):
    root = pathlib.Path(sglang_source.root)
    wrong = edited_kernel(root).replace("* up_f32);", "* up_f32 * 1.0625f);")  # both rounding paths
    assert wrong != edited_kernel(root)
    patch, task, out = _patched(sglang_source, tmp_path, wrong)
    (check,) = sglang_runner.check_ops(
        [task], package_dir(patch, patched=False), package_dir(patch, patched=True), out, sanitizer=False, held_out=0
    )
    assert check.ran and check.failed == len(check.cases) == 9
    assert all("tolerance" in c.reason or "expected" in c.reason for c in check.cases)


STUB = """
import json, sys
role = "patched" if "patched" in sys.argv[sys.argv.index("--package") + 1] else "baseline"
out = sys.stdout
for line in sys.stdin:
    req = json.loads(line)
    if req["cmd"] == "warm":
        assert [c["tensors"][0]["shape"] for c in req["cases"]] == [[1, 128]]  # one module: its smallest case
        out.write(json.dumps({"ok": True, "seconds": 2.5 if role == "patched" else 2.0, "modules": 1, "first_call_s": {req["cases"][0]["key"]: 1.5}}) + "\\n"); out.flush()
        continue
    if req["cmd"] in ("ping", "exit"):
        out.write(json.dumps({"ok": True}) + "\\n"); out.flush()
        if req["cmd"] == "exit":
            break
        continue
    assert req["function"] == "silu_and_mul" and [p["name"] for p in req["params"] if p["feeds"]] == ["input", "out"]
    rows = req["tensors"][0]["shape"][0]
    if role == "baseline" and rows == 3:  # the pristine op rejects this shape
        out.write(json.dumps({"ok": False, "error": "RuntimeError: unsupported"}) + "\\n")
    elif role == "baseline":
        open(req["path"], "w").write("outputs")
        out.write(json.dumps({"ok": True, "first_call_s": 0.5}) + "\\n")
    elif rows == 5:  # the patched op crashes: the worker dies
        sys.stderr.write("CUDA error: an illegal memory access was encountered\\n"); sys.exit(1)
    else:
        assert open(req["path"]).read() == "outputs"
        out.write(json.dumps({"ok": True, "status": "pass", "bitwise_equal": True, "max_abs_err": 0.0, "outputs": ["out"], "poisoned": True}) + "\\n")
    out.flush()
"""


def _check_with_stub(sglang_source, tmp_path, stub_text: str, **limits):
    """check_ops over silu_and_mul at T = 1, 3, 5, 7 (bf16) with both workers replaced by ``stub_text``."""
    stub = tmp_path / "stub.py"
    stub.write_text(stub_text)
    python = _stand_in(tmp_path, f'exec {sys.executable} {stub} "$@"\n')
    shapes = [ShapeCase(model="m", tokens=n, sizes={"num_tokens": n, "hidden_size": 64}) for n in (1, 3, 5, 7)]
    task = _task(sglang_source, tmp_path, shapes=shapes, dtypes=("bf16",))
    (check,) = sglang_runner.check_ops(
        [task],
        tmp_path / "baseline" / "sglang",
        tmp_path / "patched" / "sglang",
        tmp_path / "out",
        sanitizer=False,
        python=python,
        held_out=0,
        **limits,
    )
    return check


def test_check_ops_records_rejected_and_crashing_cases_and_goes_on(sglang_source, tmp_path):
    """Worker stand-ins (the GPU workers cannot run here) drive check_ops' bookkeeping: a case the
    pristine op rejects is skipped, a patched crash is an error and the worker is restarted."""
    check = _check_with_stub(sglang_source, tmp_path, STUB)
    assert [c.status for c in check.cases] == ["pass", "skipped", "error", "pass"]
    assert (check.passed, check.failed, check.skipped) == (2, 1, 1) and check.ran
    assert "illegal memory access" in check.cases[2].reason
    assert check.cases[1].reason.startswith("the pristine op fails here too")
    assert check.jit_build_s == {"baseline": 2.0, "patched": 2.5}
    assert check.first_call_s == 1.5 and check.modules == 1
    assert not list((tmp_path / "out").glob(".exchange/*")), "exchanged outputs are removed"


HANG_STUB = """
import json, sys, time
role = "patched" if "patched" in sys.argv[sys.argv.index("--package") + 1] else "baseline"
out = sys.stdout
for line in sys.stdin:
    req = json.loads(line)
    if req["cmd"] == "warm" and role == "baseline":
        time.sleep(600)  # a module whose first call never returns
    if req["cmd"] in ("ping", "exit", "warm"):
        out.write(json.dumps({"ok": True, "seconds": 1.0, "modules": 1}) + "\\n"); out.flush()
        if req["cmd"] == "exit":
            break
        continue
    rows = req["tensors"][0]["shape"][0]
    if role == "baseline" and rows == 3:
        time.sleep(600)  # the call hangs at this shape
    if role == "baseline":
        open(req["path"], "w").write("outputs")
        out.write(json.dumps({"ok": True}) + "\\n")
    else:
        out.write(json.dumps({"ok": True, "status": "pass", "bitwise_equal": True, "max_abs_err": 0.0}) + "\\n")
    out.flush()
"""


def test_a_hanging_op_costs_one_time_limit_and_the_sweep_goes_on(sglang_source, tmp_path):
    """On the H200 (2026-12-01) one hanging batch held the self-check until its time limit and lost
    every later op: a warm that does not answer is killed, and after an op's first hung case
    its other cases are skipped with the reason, not waited on one by one."""
    start = time.monotonic()
    check = _check_with_stub(sglang_source, tmp_path, HANG_STUB, timeout_s=2, warm_timeout_s=2)
    assert time.monotonic() - start < 60, "two time limits and restarts, not one per case"
    assert [c.status for c in check.cases] == ["pass", "skipped", "skipped", "skipped"]
    assert check.cases[1].timed_out and "did not answer" in check.cases[1].reason
    assert all(
        c.reason.startswith("not run: case ") and "did not answer within 2 s" in c.reason for c in check.cases[2:]
    )
    assert (tmp_path / "out" / "logs" / "warm-baseline.error").is_file(), "the hung warm is logged"


RAISE_STUB = """
import json, os, sys
role = "patched" if "patched" in sys.argv[sys.argv.index("--package") + 1] else "baseline"
open(os.environ["KERNELSMITH_WORKER_STARTS"], "a").write(role + "\\n")
out = sys.stdout
for line in sys.stdin:
    req = json.loads(line)
    if req["cmd"] in ("ping", "exit", "warm"):
        out.write(json.dumps({"ok": True, "seconds": 1.0, "modules": 1}) + "\\n"); out.flush()
        if req["cmd"] == "exit":
            break
        continue
    # SGLang's wrapper refuses the contract's argument at every shape; CUDA is fine afterwards
    out.write(json.dumps({"ok": False, "error": "AssertionError: Unsupported unary activation: silu", "usable": True}) + "\\n")
    out.flush()
"""


def test_an_op_the_pristine_tree_rejects_for_one_reason_costs_three_calls_and_no_restart(
    sglang_source, tmp_path, monkeypatch
):
    """On the H200 (2026-12-02) each of run_unary_activation's 78 cases was rejected by SGLang's
    wrapper for the same argument, and each rejection restarted the worker (12 s): the whole
    self-check's time. A plain Python error keeps the worker; three same rejections skip the rest."""
    starts = tmp_path / "starts.txt"
    monkeypatch.setenv("KERNELSMITH_WORKER_STARTS", str(starts))  # kept by the scrubbed environment
    check = _check_with_stub(sglang_source, tmp_path, RAISE_STUB)
    assert [c.status for c in check.cases] == ["skipped"] * 4 and not check.ran
    assert all("Unsupported unary activation" in c.reason for c in check.cases[:3])
    assert check.cases[3].reason.startswith("not run: the pristine op rejected 3 cases in a row")
    assert sorted(starts.read_text().split()) == ["baseline", "patched"], "no worker was restarted"


LINGERING_STUB = """
import json, subprocess, sys
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])  # keeps our stdout open after we exit
for line in sys.stdin:
    req = json.loads(line)
    sys.stdout.write(json.dumps({"ok": True}) + "\\n"); sys.stdout.flush()
    if req["cmd"] == "exit":
        break
"""


def test_a_restarted_worker_never_reads_the_end_of_the_worker_before_it(tmp_path):
    """Found in CI (2026-12-02): the pump of a worker that was replaced read its end-of-output after
    restart() had swapped in the new worker's queue, so the new worker's next request read "exited"
    and then waited forever on a live process. Each pump now writes to its own worker's queue."""
    stub = tmp_path / "stub.py"
    stub.write_text(LINGERING_STUB)
    python = _stand_in(tmp_path, f'exec {sys.executable} {stub} "$@"\n')
    worker = tree_worker.TreeWorker("baseline", tmp_path / "pkg", tmp_path / "cache", tmp_path / "w.log", python=python)
    worker.start()
    worker.restart()  # the first process exits; its stdout closes 1.5 s later, after the swap
    time.sleep(2.0)
    try:
        assert worker.request({"cmd": "ping"}, timeout_s=10) == {"ok": True}
    finally:
        worker.close()


def test_warm_batches_cut_the_ops_so_each_batch_builds_at_most_the_limit():
    """A long self-check builds and checks batch by batch, so an op is recorded before the next batch builds."""
    from integrate.calls import OpPlan, PlannedCase
    from integrate.sglang_runner import warm_batches

    def plan(op: str, *keys: str) -> OpPlan:
        cases = [PlannedCase(k, {}, "bf16", 0, f"{op}|{k}", False, {}, 1) for k in keys]
        return OpPlan(op, f"m.{op}", cases)

    plans = [
        plan("a", "1", "2"),
        plan("b", "1"),
        plan("c", "1", "2", "3"),
        plan("d", *map(str, range(5))),
        plan("e", "x"),
    ]
    batches = warm_batches(plans, limit=4)
    assert [[p.op_id for p in b] for b in batches] == [["a", "b"], ["c"], ["d"], ["e"]]
    assert [p for b in batches for p in b] == plans  # every op once, in order
