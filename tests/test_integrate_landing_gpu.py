"""GPU half of the KDA landing (integrate.landing): SGLang's registry dispatches the public function
to the landed implementation, which builds its own source under its own JIT module name.

The candidate is the baseline kernel with a comment (tests/test_integrate_landing.py says why): the
outputs must be bit-identical, and every call inside the guard must have reached the KDA target.
"""

from __future__ import annotations

import pathlib

import pytest
from test_integrate_landing import OP, rewrite_run

from contract.layout import load_task
from integrate import sglang_runner
from integrate.landing import unreached
from integrate.patch import build_patch, package_dir


@pytest.mark.gpu
def test_the_registry_dispatches_the_public_function_to_the_kda_landing(tmp_path):
    work, _ = rewrite_run(tmp_path)
    task = load_task(work / "tasks" / OP)
    patch = build_patch("r1", work / "runs" / "r1", work / "tasks", task.source, tmp_path / "out")
    assert patch.ops[0].landing == "kda"
    out = tmp_path / "out"
    (check,) = sglang_runner.check_ops(
        [task], package_dir(patch, patched=False), package_dir(patch, patched=True), out, sanitizer=False, held_out=1
    )
    assert check.ran and check.failed == 0, [c.reason for c in check.cases if c.status != "pass"]
    assert all(c.bitwise_equal for c in check.cases if c.status == "pass")
    assert check.kda_cases and check.kda_cases > 0 and not unreached(patch, [check])
    inside = [
        c for c in check.cases if c.status == "pass" and any(n for k, n in c.launches.items() if k.startswith("kda:"))
    ]
    assert all("backend KDA" in c.via for c in inside)
    assert any("kda_fused_add_rmsnorm" in p.name for p in (out / "cache" / "patched").rglob("*")), (
        "the landing builds under its own JIT module name"
    )
    assert not any("kda_" in p.name for p in (out / "cache" / "baseline").rglob("*"))
    assert pathlib.Path(patch.patched_tree).is_dir()
