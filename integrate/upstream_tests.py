"""SGLang's own kind of test and benchmark for an op of a PR, generated (the PR issue's item 3).

SGLang takes a JIT kernel change with a pytest file under ``test/registered/kernels/ops/<group>/``
and a benchmark under ``test/registered/kernels/benchmark/<group>/`` on its ``marker`` module
(CUDA-graph timing, the read arguments cloned per iteration, a GB/s column). This module writes
both for an op from its task: the op's public function and module, its instantiated dtypes, and
its catalog shapes as literal values (the full range) with a short CI range
(``get_ci_test_range``), plus token counts no power of two aligns.

What a test compares against is a torch reference, which is ours to write per op family
(``FAMILIES``): the template files beside this module (``upstream_templates/``). An op of no known
family gets :class:`NotGenerated` saying what is missing, and its PR stays a draft.

What must stay true: the generated files name no tool (``grep -i`` for the tool finds nothing),
import only SGLang's public modules and torch, and carry literal values (``register_cuda_ci``
reads its arguments from the syntax tree).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import string
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from typing import Literal

from contract.layout import IntegrateFolder
from integrate.records import BenchRun, UpstreamCheck
from pipeline.records import Task

TEMPLATES = pathlib.Path(__file__).with_name("upstream_templates")
TEST_DIR = "test/registered/kernels/ops"
BENCH_DIR = "test/registered/kernels/benchmark"
TEST_MAX_TOKENS = 512  # the generated test's largest token count
_TORCH_DTYPES = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32"}


@dataclass(frozen=True)
class Family:
    """Ops whose test shares one reference: the template pair and the sizes a case names."""

    template: str
    dims: tuple[str, ...]  # the task's size names, in the order of a case tuple
    odd_tokens: tuple[int, ...] = (7, 83)  # token counts no power of two aligns (SGLang's tests add such)
    fields: tuple[tuple[str, str], ...] = ()  # extra template values


_ACT = ("num_tokens", "hidden_size")
_ROPE = ("num_tokens", "num_qo_heads", "num_kv_heads", "rope_dim")
FAMILIES: dict[str, Family] = {
    "activation.silu_and_mul": Family("act_and_mul", _ACT, fields=(("activation", "F.silu(gate)"),)),
    "activation.gelu_and_mul": Family(
        "act_and_mul", _ACT, fields=(("activation", 'F.gelu(gate, approximate="none")'),)
    ),
    "activation.gelu_tanh_and_mul": Family(
        "act_and_mul", _ACT, fields=(("activation", 'F.gelu(gate, approximate="tanh")'),)
    ),
    "activation.bias_gelu_tanh": Family("bias_gelu", ("num_rows", "hidden_dim")),
    "embeddings.compute_n_gram_ids": Family("ngram_ids", ("num_tokens", "batch")),
    "layernorm.rmsnorm": Family("rmsnorm", _ACT),
    "lora.kimi_k2_moe_fused_gate": Family("moe_fused_gate", ("num_rows", "num_experts", "topk")),
    "layernorm.fused_add_rmsnorm": Family("fused_add_rmsnorm", _ACT),
    "attention.apply_rope_inplace": Family("rope", _ROPE),
    "attention.apply_rope_with_cos_sin_cache_inplace": Family("rope", _ROPE),
}


@dataclass(frozen=True)
class Generated:
    op_id: str
    test_path: str  # SGLang-repo-relative
    test_text: str
    bench_path: str
    bench_text: str


@dataclass(frozen=True)
class NotGenerated:
    op_id: str
    missing: str  # what a maintainer would have to supply


Outcome = Generated | NotGenerated


def _python_module(task: Task) -> str:
    return "sglang." + task.module.removesuffix(".py").replace("/", ".")


def case_sizes(task: Task, family: Family) -> list[tuple[int, ...]]:
    """Each catalog shape's sizes in the family's order, once, sorted (tokens last to vary)."""
    seen: set[tuple[int, ...]] = set()
    for shape in task.shapes:
        if all(d in shape.sizes for d in family.dims):
            seen.add(tuple(int(shape.sizes[d]) for d in family.dims))
    return sorted(seen, key=lambda c: (c[1:], c[0]))


def ranges(cases: list[tuple[int, ...]], family: Family) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """(full, ci): the catalog cases plus each odd token count at the first and last widths; CI keeps
    the smallest case, an odd one and the largest width's smallest token count."""
    widths = [cases[0][1:], cases[-1][1:]]
    odd = sorted({(t, *w) for t in family.odd_tokens for w in widths} - set(cases))
    full = cases + odd
    ci = list(dict.fromkeys([cases[0], *odd[:1], min((c for c in cases if c[1:] == widths[-1]), default=cases[-1])]))
    return full, ci


def _literal(cases: list[tuple[int, ...]], indent: int) -> str:
    """The cases as the items of a list literal, one per line, as black (SGLang's formatter) lays a list
    with a trailing comma out."""
    lines = [" " * (indent + 4) + "(" + ", ".join(str(v) for v in c) + ")," for c in cases]
    return "\n" + "\n".join(lines) + "\n" + " " * indent


def generate(task: Task) -> Outcome:
    """The op's SGLang-form test and benchmark, or what is missing for them."""
    family = FAMILIES.get(task.op_id)
    if family is None:
        return NotGenerated(
            task.op_id,
            f"no torch reference for {task.op_id} in integrate.upstream_tests.FAMILIES: a test under "
            f"{TEST_DIR}/{task.op_id.partition('.')[0]}/ needs one written for it",
        )
    if not task.public_functions:
        return NotGenerated(task.op_id, f"{task.op_id} has no public Python function to call")
    cases = case_sizes(task, family)
    if not cases:
        return NotGenerated(task.op_id, f"{task.op_id} has no catalog shape naming {', '.join(family.dims)}")
    full, ci = ranges(cases, family)
    small = [c for c in full if c[0] <= TEST_MAX_TOKENS]  # a unit test stays seconds long; the benchmark keeps all
    dtypes = [d for d in ("bf16", "fp16", "fp32") if any(i.dtype == d for i in task.instantiations)]
    neox = sorted({bool(i.run_time.get("is_neox", True)) for i in task.instantiations}, reverse=True)
    models = sorted({s.model for s in task.shapes if s.model})
    group, _, name = task.op_id.partition(".")
    values = {
        "module": _python_module(task),
        "function": task.public_functions[0],
        "dtypes": ", ".join(_TORCH_DTYPES[d] for d in dtypes),
        "test_full": _literal(small, 4),
        "test_ci": _literal(ci, 4),
        "bench_full": _literal(full, 4),
        "bench_ci": _literal(ci, 4),
        "test_est_time": str(max(10, min(120, len(small) * len(dtypes) // 2))),
        "bench_est_time": str(max(10, min(300, len(full) // 2))),
        "shape_note": textwrap.fill(
            f"({', '.join(family.dims)}): the catalog widths of {', '.join(models)} at their token "
            f"counts, and token counts {', '.join(map(str, family.odd_tokens))}",
            width=88,
            initial_indent="# ",
            subsequent_indent="# ",
        ),
        "is_neox": ", ".join(str(v) for v in neox),
        "is_neox_first": str(neox[0]) if neox else "True",
        **dict(family.fields),
    }
    test = formatted(string.Template((TEMPLATES / f"test_{family.template}.py.tmpl").read_text()).substitute(values))
    bench = formatted(string.Template((TEMPLATES / f"bench_{family.template}.py.tmpl").read_text()).substitute(values))
    return Generated(
        op_id=task.op_id,
        test_path=f"{TEST_DIR}/{group}/test_{name}.py",
        test_text=test,
        bench_path=f"{BENCH_DIR}/{group}/bench_{name}.py",
        bench_text=bench,
    )


_FIRST_PARTY = "lint.isort.known-first-party = ['sglang']"  # SGLang's isort sections


def _ruff() -> list[str] | None:
    found = shutil.which("ruff") or shutil.which("ruff", path=str(pathlib.Path(sys.executable).parent))
    return [found] if found else None


def formatted(text: str) -> str:
    """``text`` laid out as SGLang's pre-commit lays Python out (black's style at 88 columns, imports
    sorted), with ruff where it is installed; as written where it is not (the templates are close)."""
    ruff = _ruff()
    if ruff is None:
        return text
    steps = (
        [*ruff, "check", "--isolated", "--select", "I", "--config", _FIRST_PARTY, "--fix", "--quiet", "-"],
        [*ruff, "format", "--isolated", "--line-length", "88", "--quiet", "-"],
    )
    for argv in steps:
        try:
            done = subprocess.run(argv, input=text, capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return text
        if done.returncode not in (0, 1) or not done.stdout:
            return text
        text = done.stdout
    return text


def write(generated: Generated, root: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """Both files under ``root`` (a tree laid out as SGLang's repository), written whole."""
    paths = (root / generated.test_path, root / generated.bench_path)
    for path, text in zip(paths, (generated.test_text, generated.bench_text)):
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_suffix(".tmp")
        staging.write_text(text, encoding="utf-8")
        staging.replace(path)
    return paths


def run_bench(
    generated: Generated,
    root: pathlib.Path,
    package: pathlib.Path,
    tree: Literal["pristine", "patched"],
    cache_dir: pathlib.Path,
    log: pathlib.Path,
    *,
    full: bool = False,
    timeout_s: float = 600.0,
) -> BenchRun:
    """The generated benchmark run as a script against ``package`` (SGLang's ``load_jit`` builds that
    tree's sources into ``cache_dir``); marker's table kept verbatim. Its CI range unless ``full``
    (``SGLANG_IS_IN_CI``, as SGLang's CI runs it): the full range of a big op is minutes per tree."""
    from integrate.tree_worker import KERNELSMITH_ROOT, worker_env

    script = root / generated.bench_path
    code = (
        "import runpy, sys; from pipeline.sglang_package import install; "
        f"install({str(package)!r}); sys.argv = [{str(script)!r}]; "
        f"runpy.run_path({str(script)!r}, run_name='__main__')"
    )
    env = worker_env(cache_dir)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(KERNELSMITH_ROOT), env.get("PYTHONPATH", "")) if p)
    if not full:
        env["SGLANG_IS_IN_CI"] = "true"
    command = ("" if full else "SGLANG_IS_IN_CI=true ") + f"python {generated.bench_path}  # the {tree} tree"
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return BenchRun(op_id=generated.op_id, tree=tree, ran=False, reason=f"timed out after {timeout_s:.0f} s")
    log.write_text(done.stdout + done.stderr, encoding="utf-8")
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return BenchRun(
            op_id=generated.op_id,
            tree=tree,
            ran=False,
            reason=f"exit {done.returncode}: {tail[0]}",
            command=command,
            log=str(log),
        )
    return BenchRun(
        op_id=generated.op_id, tree=tree, ran=True, table=done.stdout.strip(), command=command, log=str(log)
    )


def check(
    task: Task,
    out_dir: pathlib.Path,
    baseline_pkg: pathlib.Path,
    patched_pkg: pathlib.Path,
    *,
    run: bool = True,
    bench: bool = True,
) -> UpstreamCheck:
    """Generate the op's test and benchmark under ``out_dir/upstream``; with ``run`` (a GPU is here), run
    the test against the patched tree and the benchmark against both. A step that cannot run says why
    in the record."""
    from integrate.sglang_tests import run_tests

    outcome = generate(task)
    if isinstance(outcome, NotGenerated):
        return UpstreamCheck(op_id=task.op_id, generated=False, missing=outcome.missing)
    folder = IntegrateFolder(out_dir)
    root = folder.upstream
    write(outcome, root)
    files = {"test_file": outcome.test_path, "bench_file": outcome.bench_path}
    if not run:
        return UpstreamCheck(op_id=task.op_id, generated=True, **files)
    logs = folder.logs
    test = run_tests(
        task.op_id,
        [root / outcome.test_path],
        root,
        patched_pkg,
        folder.cache("upstream-patched"),
        logs / f"upstream-test-{task.op_id}.log",
    )
    runs = []
    if bench:
        for tree, package in (("pristine", baseline_pkg), ("patched", patched_pkg)):
            runs.append(
                run_bench(
                    outcome,
                    root,
                    package,
                    tree,  # type: ignore[arg-type]
                    folder.cache(f"upstream-{tree}"),
                    logs / f"upstream-bench-{tree}-{task.op_id}.log",
                )
            )
    return UpstreamCheck(op_id=task.op_id, generated=True, **files, test=test, bench=runs)


def main(argv: list[str] | None = None) -> int:
    """``python -m integrate.upstream_tests --ops OP ... --package PKG [--patched PKG] --out DIR``: write
    the ops' SGLang-form tests and benchmarks, and with a GPU run them (the test against ``--patched``,
    default the package itself; the benchmark against both)."""
    import argparse
    import json

    from contract.layout import load_task
    from pipeline.gpu import gpu_available

    parser = argparse.ArgumentParser(prog="python -m integrate.upstream_tests", description=main.__doc__)
    parser.add_argument("--ops", nargs="+", required=True)
    parser.add_argument("--tasks", default="work/tasks")
    parser.add_argument("--package", required=True, help="an sglang package folder (the one holding kernels/)")
    parser.add_argument("--patched", default=None)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    baseline = pathlib.Path(args.package)
    patched = pathlib.Path(args.patched) if args.patched else baseline
    ok, device = gpu_available()
    for op in args.ops:
        record = check(load_task(pathlib.Path(args.tasks) / op), out, baseline, patched, run=ok)
        if not record.generated:
            print(f"{op}: not generated: {record.missing}")
            continue
        if not ok:
            print(f"{op}: wrote {record.test_file} and {record.bench_file}; not run: no GPU here ({device})")
            continue
        (out / f"upstream-{op}.json").write_text(json.dumps(record.model_dump(), indent=1), encoding="utf-8")
        test = record.test
        print(f"{op}: test " + (f"{test.summary or test.reason}" if test else record.missing))
        for run in record.bench:
            print(f"{op}: benchmark against the {run.tree} tree: " + ("ran" if run.ran else run.reason))
            if run.table:
                print(run.table)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
