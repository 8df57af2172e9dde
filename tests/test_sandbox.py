"""pipeline.sandbox: what generated code can reach (issue 16): no credentials in its environment, no
network, no home folders; and the evaluation worker and nvcc are started that way."""

from __future__ import annotations

import json
import os
import pathlib
import socket
import sys

import pytest

from optimize.harness import isolate
from optimize.harness.protocol import WorkerRequest
from pipeline import sandbox
from pipeline.records import Contract

PROBE = r"""
import json, os, socket, sys
out = {}
s = socket.socket()
s.settimeout(3)
try:
    s.connect(("127.0.0.1", int(sys.argv[1])))
    out["socket"] = "connected"
except OSError as err:
    out["socket"] = f"refused: {err}"
try:
    out["ssh"] = open(os.path.join(sys.argv[2], ".ssh", "id_rsa")).read()
except OSError as err:
    out["ssh"] = f"unreadable: {err.strerror}"
out["key"] = os.environ.get("OPENAI_API_KEY")
out["aws"] = os.environ.get("AWS_SECRET_ACCESS_KEY")
open(os.path.join(sys.argv[3], "written.txt"), "w").write("ok")
print(json.dumps(out))
"""


def test_the_environment_keeps_the_toolchain_and_drops_every_credential(tmp_path):
    environ = {
        "PATH": "/usr/bin",
        "CUDA_HOME": "/usr/local/cuda",
        "CUDA_VISIBLE_DEVICES": "0",
        "OPENAI_API_KEY": "sk-secret",
        "AWS_SECRET_ACCESS_KEY": "x",
        "GITHUB_TOKEN": "y",
        "HOME": "/home/me",
        "PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
    }
    env = sandbox.scrubbed_env(tmp_path / "h", environ)
    assert env["PATH"] == "/usr/bin" and env["CUDA_HOME"] == "/usr/local/cuda" and env["CUDA_VISIBLE_DEVICES"] == "0"
    assert env["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "1"
    assert not {"OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN"} & set(env)
    assert env["HOME"] == str(tmp_path / "h") and pathlib.Path(env["TMPDIR"]).is_dir()


def test_a_candidate_cannot_reach_the_network_a_home_folder_or_a_key(tmp_path, monkeypatch):
    if sandbox.bwrap()[0] is None:
        pytest.skip(f"no sandbox on this machine: {sandbox.bwrap()[1]}")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("PRIVATE KEY")
    monkeypatch.setenv("HOME", str(home))  # the user's home, hidden with the others
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    work = tmp_path / "work"
    argv = sandbox.wrap(
        [sys.executable, str(probe), str(port), str(home), str(work)],
        writable=[work],
        readable=[*sandbox.project_paths(), str(probe)],
    )
    env = sandbox.scrubbed_env(work / "home")
    status, code, _, tail, _ = isolate.run_process(
        argv, timeout_s=60, workdir=tmp_path / "run", result_path=tmp_path / "none", env=env
    )
    assert code == 0, tail
    out = json.loads((tmp_path / "run" / "worker.stdout").read_text())
    assert out["socket"].startswith("refused"), "no network, not even loopback"
    assert out["ssh"].startswith("unreadable"), "the home folders are hidden"
    assert out["key"] is None and out["aws"] is None
    assert (work / "written.txt").read_text() == "ok", "its own folder stays writable"
    listener.close()


#: A candidate's host code as the worker meets it: a shared library whose load-time code (as a
#: launcher's static initializer would) tries the network, the user's key, the API key and a folder
#: outside the worker's own, and writes what it saw into $HOME (the worker's folder).
CANDIDATE = r"""
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
__attribute__((constructor)) static void probe(void) {
  char path[4096];
  snprintf(path, sizeof path, "%s/probe.txt", getenv("HOME"));
  FILE* out = fopen(path, "w");
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {0};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(PORT);
  addr.sin_addr.s_addr = htonl(0x7f000001);
  fprintf(out, "socket=%s\n", connect(s, (struct sockaddr*)&addr, sizeof addr) == 0 ? "connected" : "refused");
  FILE* key = fopen(SSH_KEY, "r");
  fprintf(out, "ssh=%s\n", key ? "read" : "unreadable");
  const char* api = getenv("OPENAI_API_KEY");
  fprintf(out, "api_key=%s\n", api ? api : "none");
  FILE* outside = fopen(OUTSIDE, "w");
  fprintf(out, "outside=%s\n", outside ? "written" : "refused");
  if (outside) fclose(outside);
  fclose(out);
}
"""

#: Stands in for the worker module (the real one needs torch and a GPU): loads the request's
#: candidate libraries the way the worker does, in the process run_worker starts.
LOADER = """
import ctypes, json, sys
request = json.load(open(sys.argv[1]))
for lib in request["candidate_libraries"]:
    ctypes.CDLL(lib)
"""


def test_a_candidate_library_loaded_by_the_worker_reaches_no_network_key_or_outside_folder(tmp_path, monkeypatch):
    """The sandbox as run_worker builds it (argv, readable and writable folders, environment), tried by
    C code that runs when a candidate's library is loaded, as a launcher's initializer would."""
    import shutil
    import subprocess

    if sandbox.bwrap()[0] is None:
        pytest.skip(f"no sandbox on this machine: {sandbox.bwrap()[1]}")
    if shutil.which("cc") is None:
        pytest.skip("no C compiler on this machine")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("PRIVATE KEY")
    outside = tmp_path / "tasks" / "some.op"  # a folder of the work dir that is not the worker's
    outside.mkdir(parents=True)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    build = tmp_path / "cache" / "builds" / "cand"
    build.mkdir(parents=True)
    (build / "probe.c").write_text(CANDIDATE)
    defines = [f"-DPORT={port}", f'-DSSH_KEY="{home}/.ssh/id_rsa"', f'-DOUTSIDE="{outside}/planted.txt"']
    subprocess.run(
        ["cc", "-shared", "-fPIC", *defines, "-o", str(build / "lib.so"), str(build / "probe.c")], check=True
    )
    loader = tmp_path / "loader" / "ks_probe_loader.py"
    loader.parent.mkdir()
    loader.write_text(LOADER)
    monkeypatch.setattr(isolate, "WORKER_MODULE", "ks_probe_loader")
    monkeypatch.setenv("PYTHONPATH", str(loader.parent))  # an import path: mounted back, as on the GPU machine
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    request = WorkerRequest(
        op_id="x",
        contract=Contract(entry="e", args=[], symbols=[]),
        baseline_libraries=[],
        candidate_libraries=[str(build / "lib.so")],
        device_cache_dir=str(tmp_path / "device"),
    )
    workdir = tmp_path / "harness" / "w"
    run = isolate.run_worker(request, workdir, timeout_s=60)
    listener.close()
    seen = dict(line.split("=", 1) for line in (workdir / "home" / "probe.txt").read_text().split())
    assert seen == {"socket": "refused", "ssh": "unreadable", "api_key": "none", "outside": "refused"}, run.stderr_tail
    assert not (outside / "planted.txt").exists()


def test_folders_beside_the_project_are_hidden_outside_the_system_dirs(tmp_path):
    """The file system is limited to the system's folders, the toolchain, the project and the process's own
    folders: another checkout or data beside the project (here /work/main beside /work/wt16) is not there."""
    if sandbox.bwrap()[0] is None:
        pytest.skip(f"no sandbox on this machine: {sandbox.bwrap()[1]}")
    root = pathlib.Path(sandbox.__file__).resolve().parents[1]
    parent = root.parent
    if parent == pathlib.Path("/") or parent.parts[1] in sandbox.SYSTEM_DIRS:
        pytest.skip(f"the project sits in a system folder ({parent}): nothing beside it is hidden")
    readable = sandbox.project_paths()
    own = [*readable, str(tmp_path / "w")]  # the process's own folder may lie beside the project (a clone in /tmp)
    mounted = {pathlib.Path(p).relative_to(parent).parts[0] for p in own if pathlib.Path(p).is_relative_to(parent)}
    beside = set(os.listdir(parent)) - mounted
    if not beside:
        pytest.skip(f"nothing beside the project in {parent} to hide")
    argv = sandbox.wrap(
        [sys.executable, "-c", f"import json, os; print(json.dumps(sorted(os.listdir({str(parent)!r}))))"],
        writable=[tmp_path / "w"],
        readable=readable,
    )
    env = sandbox.scrubbed_env(tmp_path / "w" / "home")
    _, code, _, tail, _ = isolate.run_process(
        argv, timeout_s=60, workdir=tmp_path / "run", result_path=tmp_path / "x", env=env
    )
    assert code == 0, tail
    seen = set(json.loads((tmp_path / "run" / "worker.stdout").read_text()))
    assert seen <= mounted and not seen & beside, f"visible beside the project: {sorted(seen & beside)}"


def test_the_worker_is_started_sandboxed_with_the_scrubbed_environment(tmp_path, monkeypatch):
    seen = {}

    def fake_run(argv, *, timeout_s, workdir, result_path, env=None, stall_s=None):
        seen.update(argv=list(argv), env=dict(env or {}))
        return "crashed", 1, 0.1, "", None

    monkeypatch.setattr(isolate, "run_process", fake_run)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    (tmp_path / "cache" / "builds" / "k").mkdir(parents=True)
    request = WorkerRequest(
        op_id="x",
        contract=Contract(entry="e", args=[], symbols=[]),
        baseline_libraries=[str(tmp_path / "cache" / "builds" / "k" / "lib.so")],
        device_cache_dir=str(tmp_path / "device"),
    )
    isolate.run_worker(request, tmp_path / "w", timeout_s=5)
    assert "OPENAI_API_KEY" not in seen["env"] and seen["env"]["HOME"].startswith(str(tmp_path / "w"))
    if sandbox.bwrap()[0] is not None:
        argv = seen["argv"]
        assert argv[0] == sandbox.bwrap()[0] and "--unshare-net" in argv
        assert str(tmp_path / "cache" / "builds" / "k") in argv, "the built libraries are readable"
        assert argv[argv.index("--") + 1 :][:3] == [sys.executable, "-m", isolate.WORKER_MODULE]
    isolate.run_worker(request, tmp_path / "w2", timeout_s=5, use_sandbox=False)
    assert seen["argv"][0] == sys.executable and "OPENAI_API_KEY" not in seen["env"]


def test_the_import_paths_stay_readable_in_the_sandbox(tmp_path, monkeypatch):
    """On the GPU machine the carried wheels live in /tmp/site (PYTHONPATH), which --tmpfs /tmp hides:
    every import path is mounted back, or the worker could not import pydantic there."""
    site = tmp_path / "site"
    (site / "carried_pkg").mkdir(parents=True)
    (site / "carried_pkg" / "__init__.py").write_text("VALUE = 42\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    assert str(site) in sandbox.project_paths()
    if sandbox.bwrap()[0] is None:
        pytest.skip(f"no sandbox on this machine: {sandbox.bwrap()[1]}")
    argv = sandbox.wrap(
        [sys.executable, "-c", "import carried_pkg; print(carried_pkg.VALUE)"],
        writable=[tmp_path / "w"],
        readable=sandbox.project_paths(),
    )
    env = sandbox.scrubbed_env(tmp_path / "w" / "home")
    env["PYTHONPATH"] = str(site)
    _, code, _, tail, _ = isolate.run_process(
        argv, timeout_s=60, workdir=tmp_path / "run", result_path=tmp_path / "x", env=env
    )
    assert code == 0, tail
    assert (tmp_path / "run" / "worker.stdout").read_text().strip() == "42"


def test_nvcc_runs_with_the_scrubbed_environment(tmp_path, monkeypatch):
    from pipeline import build

    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    script = tmp_path / "fake-nvcc"
    script.write_text("#!/bin/sh\nenv\n")
    script.chmod(0o755)
    run = build._run([str(script)], tmp_path, timeout_s=30)
    assert run.returncode == 0 and "PATH=" in run.output and "OPENAI_API_KEY" not in run.output
    assert os.environ["OPENAI_API_KEY"] == "sk-secret", "only the child's environment is scrubbed"


def test_a_symlinked_toolchain_folder_is_readable_at_either_path(tmp_path):
    """On the H200 (2026-12-02) CUDA_HOME is /usr/local/cuda -> cuda-13.0, and bwrap refused to mount onto
    the symlink, so every worker stopped before it ran. Folders are mounted at their real paths: a
    symlink in a visible system folder (/var/tmp here) is read through the read-only root, and one
    inside a hidden folder (tmp_path, under /tmp) is recreated as the same symlink."""
    if sandbox.bwrap()[0] is None:
        pytest.skip(f"no sandbox on this machine: {sandbox.bwrap()[1]}")
    import tempfile

    visible = pathlib.Path(tempfile.mkdtemp(dir="/var/tmp"))
    try:
        for root in (visible, tmp_path):
            (root / "cuda-13.0" / "bin").mkdir(parents=True)
            (root / "cuda-13.0" / "bin" / "tool").write_text(f"tool in {root.name}\n")
            (root / "cuda").symlink_to(root / "cuda-13.0")
        readable = [visible / "cuda", tmp_path / "cuda"]
        argv = sandbox.wrap(
            ["sh", "-c", f"cat {visible}/cuda/bin/tool {tmp_path}/cuda/bin/tool"],
            writable=[tmp_path / "w"],
            readable=readable,
        )
        assert argv[0] == sandbox.bwrap()[0], "the sandbox is made, not given up"
        env = sandbox.scrubbed_env(tmp_path / "w" / "home")
        _, code, _, tail, _ = isolate.run_process(
            argv, timeout_s=60, workdir=tmp_path / "run", result_path=tmp_path / "x", env=env
        )
        assert code == 0, tail
        out = (tmp_path / "run" / "worker.stdout").read_text().split("\n")
        assert out[:2] == [f"tool in {visible.name}", f"tool in {tmp_path.name}"]
    finally:
        import shutil

        shutil.rmtree(visible, ignore_errors=True)


def test_a_mount_set_bwrap_refuses_runs_in_process_isolation_and_says_so_once(tmp_path, monkeypatch, capsys):
    if sandbox.bwrap()[0] is None:
        pytest.skip(f"no sandbox on this machine: {sandbox.bwrap()[1]}")
    assert sandbox._refused(("/nonexistent/bwrap",)), "a mount set that cannot run says why"
    monkeypatch.setattr(sandbox, "_refused", lambda mounts: "bwrap: Can't bind mount /oldroot/x on /newroot/y")
    monkeypatch.setattr(sandbox, "_warned", [])
    argv = ["true"]
    assert sandbox.wrap(argv, writable=[tmp_path / "w"]) == argv
    assert sandbox.wrap(argv, writable=[tmp_path / "w2"]) == argv
    err = capsys.readouterr().err
    assert err.count("bwrap refuses this sandbox's mounts: bwrap: Can't bind mount") == 1
    assert "process isolation only" in err
