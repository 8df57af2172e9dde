"""Run SGLang's own tests of an op against the patched tree, and count what really ran.

Only a git checkout of SGLang has the tests (``test/registered/kernels/ops/<group>/``);
the wheel does not. Without a checkout the result says so (``ran=False``) and
nothing is claimed.

Which files: in ``test/registered/kernels/ops/<group>/`` (recursively), those
whose name contains the op's function (``test_fused_add_rmsnorm.py``), plus
those that import the op's Python module and name the function; if that finds
nothing, those that import the op's module at all (``test_activation.py`` tests
``silu_and_mul`` through ``run_activation``).

How: ``python -m pytest`` in the checkout, with the patched copy first on
``PYTHONPATH`` and :mod:`integrate.sglang_bare` loaded as a plugin, so
``import sglang.kernels...`` in the tests resolves to the patched copy and
SGLang's ``load_jit`` builds the patched sources into a private cache. The
counts come from pytest's JUnit XML (``--junitxml``), cross-checked with its
closing summary line, which is kept verbatim.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

from contract.layout import IntegrateFolder
from integrate.records import TestRun
from pipeline.records import Task

TESTS_DIR = "test/registered/kernels/ops"
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected|warnings?)")


def find_tests(checkout: pathlib.Path, task: Task) -> list[pathlib.Path]:
    group, _, function = task.op_id.partition(".")
    folder = checkout / TESTS_DIR / group
    if not folder.is_dir():
        return []
    files = sorted(folder.rglob("test_*.py"))
    module = "sglang." + task.module.removesuffix(".py").replace("/", ".")
    word = re.compile(rf"\b{re.escape(function)}\b")
    texts = {f: f.read_text(encoding="utf-8", errors="replace") for f in files}
    by_name = {f for f in files if function in f.stem}
    by_use = {f for f in files if module in texts[f] and word.search(texts[f])}
    chosen = by_name | by_use
    if not chosen:
        chosen = {f for f in files if module in texts[f]}
    return sorted(chosen)


def parse_junit(path: pathlib.Path) -> dict[str, int]:
    """Counts from a pytest JUnit XML file (tests, failures, errors, skipped)."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    out = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in suites:
        for key in out:
            out[key] += int(suite.get(key, 0))
    return out


def parse_summary(output: str) -> tuple[str, dict[str, int]]:
    """pytest's closing summary line and its counts ({"passed": 3, "skipped": 1, ...})."""
    for line in reversed(output.strip().splitlines()):
        text = line.strip().strip("=").strip()
        if _COUNT.search(text) and (" in " in text or text.endswith("s")):
            counts: dict[str, int] = {}
            for number, word in _COUNT.findall(text):
                key = {"error": "errors", "errors": "errors", "warning": "warnings"}.get(word, word)
                counts[key] = counts.get(key, 0) + int(number)
            return text, counts
        if text.startswith("no tests ran"):
            return text, {}
    return "", {}


def run_tests(
    op_id: str,
    files: list[pathlib.Path],
    checkout: pathlib.Path,
    patched_pkg: pathlib.Path,
    cache_dir: pathlib.Path,
    log: pathlib.Path,
    *,
    timeout_s: float = 1800.0,
    python: str = sys.executable,
) -> TestRun:
    """Run ``files`` with pytest against the patched package; counts parsed from its reports."""
    from integrate.sglang_bare import ENV_PACKAGE
    from integrate.tree_worker import KERNELSMITH_ROOT, worker_env

    rel = [str(f.relative_to(checkout)) for f in files]
    junit = log.with_suffix(".xml")
    log.parent.mkdir(parents=True, exist_ok=True)
    argv = [
        python,
        "-m",
        "pytest",
        "-q",
        "-rfE",
        "-p",
        "integrate.sglang_bare",
        "-p",
        "no:cacheprovider",
        f"--junitxml={junit}",
        *rel,
    ]
    env = worker_env(cache_dir)
    env[ENV_PACKAGE] = str(patched_pkg)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(patched_pkg.parent), str(KERNELSMITH_ROOT), env.get("PYTHONPATH", "")) if p
    )
    command = f"cd {checkout} && {ENV_PACKAGE}={patched_pkg} PYTHONPATH={env['PYTHONPATH']} " + " ".join(argv[1:])
    junit.unlink(missing_ok=True)
    start = time.monotonic()
    try:
        done = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as err:
        log.write_text(_text(err.stdout) + _text(err.stderr), encoding="utf-8")
        return TestRun(
            op_id=op_id,
            ran=False,
            reason=f"pytest timed out after {timeout_s:.0f} s",
            files=rel,
            command=command,
            log=str(log),
        )
    output = done.stdout + done.stderr
    log.write_text(output, encoding="utf-8")
    summary, counts = parse_summary(done.stdout)
    if not junit.is_file():
        return TestRun(
            op_id=op_id,
            ran=False,
            reason=f"pytest wrote no report (exit {done.returncode} after {time.monotonic() - start:.0f} s); see {log}",
            files=rel,
            exit_code=done.returncode,
            summary=summary,
            command=command,
            log=str(log),
        )
    j = parse_junit(junit)
    skipped = j["skipped"]
    failed = j["failures"]
    errors = j["errors"]
    passed = j["tests"] - failed - errors - skipped
    return TestRun(
        op_id=op_id,
        ran=j["tests"] > 0 or errors > 0,
        reason="" if j["tests"] else "pytest collected no test",
        files=rel,
        passed=passed,
        failed=failed,
        skipped=skipped,
        errors=errors,
        xfailed=counts.get("xfailed", 0),
        xpassed=counts.get("xpassed", 0),
        exit_code=done.returncode,
        summary=summary,
        command=command,
        log=str(log),
    )


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")


def op_tests(
    task: Task,
    checkout: pathlib.Path | None,
    patched_pkg: pathlib.Path,
    out_dir: pathlib.Path,
    *,
    why_no_checkout: str = "",
) -> TestRun:
    """SGLang's tests for ``task``'s op, or a not-run record saying why."""
    if checkout is None:
        return TestRun(op_id=task.op_id, ran=False, reason=why_no_checkout or "no SGLang checkout was given")
    files = find_tests(checkout, task)
    if not files:
        return TestRun(
            op_id=task.op_id,
            ran=False,
            reason=f"no test in {TESTS_DIR}/{task.op_id.partition('.')[0]}/ names "
            f"{task.op_id.partition('.')[2]} or imports its module ({task.module})",
        )
    folder = IntegrateFolder(out_dir)
    log = folder.logs / f"sglang-tests-{task.op_id}.log"
    return run_tests(task.op_id, files, checkout, patched_pkg, folder.cache("tests"), log)
