"""integrate.triton_probe: a Triton op's kernels found in the worker's tree and their launches counted.

CPU: a small tree of our own (no torch, no SGLang code) with a plain and an autotuned kernel; Triton
is installed but has no driver here, so a launch reaches the counted ``run`` and then fails, which is
enough to prove the counting. The KernelSpec half needs the wheel's ``sglang.kernels`` (torch): the
GPU tests of ``tests/test_integrate_triton.py`` cover it.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")

KERNELS = """\
import triton
import triton.language as tl


@triton.jit
def add_one(x_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)


@triton.autotune(configs=[triton.Config({}, num_warps=2)], key=[])
@triton.jit
def tuned(x_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) * 2)


not_a_kernel = 3


def launches(x):
    add_one[(1,)](x, 4)
    tuned[(1,)](x, 4)


def idle(x):
    return x
"""

SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
from pipeline.sglang_package import install
install(sys.argv[2])
if len(sys.argv) > 3:
    sys.path.insert(0, sys.argv[3])
from integrate.triton_probe import Probe, ProbeError
request = json.loads(sys.stdin.read())
out = {}
try:
    probe = Probe(request["triton"], request["module"], request["function"], sys.argv[2])
except ProbeError as err:
    print(json.dumps({"error": str(err)}))
    raise SystemExit(0)
with probe.counting() as launches:
    try:
        probe.fn(None)
    except Exception as err:  # no driver here: the launch fails after run() was entered
        out["raised"] = type(err).__name__
out.update(launches=launches, verdict=probe.verdict(), via=probe.via,
           unwrapped=all("run" not in vars(jit) for jit in probe.kernels.values()))
print(json.dumps(out))
"""

MODULE = "sglang.kernels.ops.demo.probe_demo"


@pytest.fixture
def tree(tmp_path):
    package = tmp_path / "tree" / "sglang"
    (package / "kernels" / "jit").mkdir(parents=True)
    (package / "kernels" / "ops" / "demo").mkdir(parents=True)
    (package / "kernels" / "ops" / "demo" / "probe_demo.py").write_text(KERNELS, encoding="utf-8")
    return package


def probe(package: pathlib.Path, function: str, kernels: list[tuple[str, str]], *extra: str) -> dict:
    request = {
        "module": MODULE,
        "function": function,
        "triton": {"spec": None, "backend": "triton", "kernels": [{"module": m, "name": n} for m, n in kernels]},
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(ROOT), str(package), *extra],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(package.parent)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_launch_of_the_trees_kernels_is_counted_and_the_wrappers_removed(tree):
    answer = probe(tree, "launches", [(MODULE, "add_one"), (MODULE, "tuned")])
    assert answer["launches"][f"{MODULE}:add_one"] == 1  # the second launch is never reached: no driver
    assert answer["verdict"] == "" and answer["unwrapped"]
    assert answer["via"] == f"{MODULE}:launches (no KernelSpec registration)"


def test_an_autotuned_kernel_is_counted_through_its_autotuner(tree):
    answer = probe(tree, "launches", [(MODULE, "tuned")])
    assert answer["launches"] == {f"{MODULE}:tuned": 0}  # add_one failed first, before tuned was launched
    text = KERNELS.replace("    add_one[(1,)](x, 4)\n", "")
    (tree / "kernels" / "ops" / "demo" / "probe_demo.py").write_text(text, encoding="utf-8")
    answer = probe(tree, "launches", [(MODULE, "tuned")])
    assert answer["launches"] == {f"{MODULE}:tuned": 1} and answer["verdict"] == ""


def test_a_call_that_launches_no_kernel_of_the_task_proves_nothing(tree):
    answer = probe(tree, "idle", [(MODULE, "add_one")])
    assert answer["launches"] == {f"{MODULE}:add_one": 0}
    assert answer["verdict"].startswith("no kernel of the task launched during the call")


def test_a_kernel_outside_the_tree_or_no_kernel_is_refused(tree, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "stray_kernels.py").write_text(KERNELS, encoding="utf-8")
    answer = probe(tree, "launches", [("stray_kernels", "add_one")], str(elsewhere))
    assert "outside the tree" in answer["error"] and "stray_kernels.py" in answer["error"]
    answer = probe(tree, "launches", [(MODULE, "not_a_kernel")])
    assert "is not a Triton kernel" in answer["error"]
    answer = probe(tree, "launches", [])
    assert "names no launched kernel" in answer["error"]
