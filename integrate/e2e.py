"""End-to-end evidence: one whole decoder layer through SGLang, pristine vs patched.

The model-step proxy. A layer comes from a recipe (:mod:`integrate.recipe`,
``integrate/layers/<model>.toml``): the model's figures, its steps in order and
their shapes, each step with the SGLang file and line that runs it. Integrate runs
every recipe with a step that runs changed code (:func:`run`; the default recipe,
a Llama-3.1-8B middle layer, when none does): Llama-3.1-8B (dense),
Qwen3-235B-A22B (MoE: q/k norm, the router's top-k, the experts as torch grouped
GEMMs around SGLang's silu_and_mul) and DeepSeek-V3 (fp8, MLA: SGLang's fp8
quantization, RoPE, MLA cache store, router GEMM and silu_and_mul between
labelled stand-ins for the AOT, DeepGEMM, FA3 and FlashInfer kernels). GEMMs run
through torch (cuBLAS) on bf16 weights of the model's sizes;
attention through torch's ``scaled_dot_product_attention``: at decode, B sequences
x 1 query token over a KV cache of ``proxy.kv_len`` tokens each (stated in the
record and the PR), at prefill causal over the T tokens. This module holds no op
name: what runs is the recipe's.

METHOD. Each worker (:mod:`integrate.sglang_worker` -> :mod:`integrate.layer_worker`)
imports one tree, builds its ops with SGLang's own ``load_jit``, captures many
layers back to back in one CUDA graph (buffer sets rotated so the working set is
at least 3x L2, as a real model streams different weights and activations per
layer) and times replays with CUDA events (:mod:`optimize.harness.timing`); it
also times the SGLang ops alone (the *non-GEMM* part), every step alone, and each
SGLang step between the layer's steps before and after it (*in context*). Three
trees are measured in the same rounds, their order turning each round: the
pristine tree, the patched one and a byte-for-byte copy of the pristine one, built
and loaded like the patched one (*A/A*: what a change measures as when there is
none). The pooled samples give a median and a p10-p90 spread per tree.

The change is reported as a share of the WHOLE layer's time: ``(patched -
baseline) / baseline layer``, for the whole layer and for the non-GEMM part
(labelled so: its share of the whole layer, and its change on its own). The noise
band is defined once, in :mod:`integrate.layer_verdicts` (``noise_band_pct``, ``verdict_band_pct``): half the
wider of the two trees' p10-p90 spreads, widened to the A/A's difference and its own band, times
``COVERAGE`` (chosen from identical trees). A change whose size is inside it is reported as "no change"
(``judge``): the patched median then lies no farther from the pristine one than two identical trees do.

The implied tokens/s is ``tokens / (layer time x layers)``: the whole layer, but
no embedding, LM head, sampling or scheduling, so an upper bound
(:data:`ASSUMPTION`).

SGLang adapter: when the full SGLang runtime imports from the patched tree and
a local model folder is named in ``ONE_BATCH_MODEL_PATH``, it also runs
``python -m sglang.benchmark.one_batch --load-format dummy`` on both trees and
parses the prefill / median decode / total throughput lines. Otherwise the
result says precisely why it did not run.

Partial re-runs are the top's business (:mod:`integrate.command` calls
:func:`run`); this module never imports it.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from contract.layout import IntegrateFolder, pristine_folder
from integrate.errors import KernelsmithError, broke_with
from integrate.layer_verdicts import layer_timing
from integrate.recipe import (
    DEFAULT_RECIPE,
    LAYER_DIR,
    LayerRecipe,
    Phase,
    all_recipes,
    check_sources,
    load_recipe,
    plan,
    recipes_for,
)
from integrate.records import E2EResult, LayerTiming, OneBatchResult
from pipeline.record_io import write_record
from pipeline.records import Dtype

ENV_MODEL = "ONE_BATCH_MODEL_PATH"
WORKER_NAMES = {"baseline": "baseline", "patched": "patched", "copy": "pristine-copy"}
ONE_BATCH_MODULE = "sglang.benchmark.one_batch"
REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
ASSUMPTION = (
    "Implied tokens/s = tokens per step / (one whole decoder layer's time x {layers} layers). The layer is "
    "GEMMs (torch, cuBLAS), attention (torch SDPA; decode over a KV cache of {kv_len} tokens per sequence, "
    "prefill causal) and SGLang's ops; the embedding, LM head, sampling and scheduling are left out, so it is "
    "an upper bound, not a served throughput."
)


def points(recipe: LayerRecipe | None = None) -> list[tuple[Phase, int]]:
    """The (phase, tokens) points the recipe asks for."""
    return (recipe or load_recipe()).points()


def _relative(path: pathlib.Path) -> str:
    try:
        return path.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return path.name


class Trees:
    """The trees' workers, started once and shared by every recipe a run times: the pristine tree,
    the patched tree and, with ``aa``, a byte-for-byte copy of the pristine one (A/A).

    ``start`` turns the order the workers start in (:func:`round_order` of it): the rounds' turning
    order evens out which tree runs first, not which process started first, and
    :func:`pristine_runs` turns it per run so the A/A evidence shows whether a difference follows
    the start. Each worker keeps its JIT builds in ``out_dir/cache/<tree>``, so a second recipe
    loads what the first built."""

    def __init__(
        self, baseline_pkg: pathlib.Path, patched_pkg: pathlib.Path, out_dir: pathlib.Path, *, aa: bool, start: int
    ) -> None:
        self.aa = aa
        self.copy_pkg = IntegrateFolder(out_dir).aa_tree / baseline_pkg.name
        self.packages = {"baseline": baseline_pkg, "patched": patched_pkg, **({"copy": self.copy_pkg} if aa else {})}
        self.started = round_order(list(self.packages), start)
        self.out_dir = out_dir
        self.workers: dict[str, Any] = {}
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Trees:
        from integrate.tree_worker import TreeWorker

        try:
            if self.aa:
                from integrate.patch import copy_package

                shutil.rmtree(self.copy_pkg.parent, ignore_errors=True)
                copy_package(self.packages["baseline"], self.copy_pkg)
            folder = IntegrateFolder(self.out_dir)
            launched = {
                who: self._stack.enter_context(
                    TreeWorker(WORKER_NAMES[who], self.packages[who], folder.cache(who), folder.logs / f"e2e-{who}.log")
                )
                for who in self.started
            }
        except BaseException:
            self.close()
            raise
        self.workers = {who: launched[who] for who in self.packages}  # the rounds' order is the trees' order
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the workers and remove the A/A copy."""
        try:
            self._stack.close()
        finally:
            if self.aa:
                shutil.rmtree(self.copy_pkg.parent, ignore_errors=True)


def run_layers(
    baseline_pkg: pathlib.Path,
    patched_pkg: pathlib.Path,
    out_dir: pathlib.Path,
    *,
    recipe: LayerRecipe | None = None,
    aa: bool = True,
    start: int = 0,
    **options: Any,
) -> E2EResult:
    """Whole-layer timings for every point of the recipe on its own :class:`Trees` (``options``:
    :func:`time_recipe`'s)."""
    with Trees(baseline_pkg, patched_pkg, out_dir, aa=aa, start=start) as trees:
        return time_recipe(trees, recipe or load_recipe(DEFAULT_RECIPE), **options)


def time_recipe(
    trees: Trees,
    recipe: LayerRecipe,
    *,
    dtype: Dtype = "bf16",
    rounds: int = 3,
    repeats: int = 15,
    graph_calls: int = 20,
    l2_multiple: float = 3.0,
    timeout_s: float = 900.0,
    shift_placement: bool = False,
    decode: Sequence[int] | None = None,
    prefill: Sequence[int] | None = None,
    command: str = "",
) -> E2EResult:
    """Whole-layer timings for every point of the recipe on the trees' workers, in an order that
    turns each round."""
    todo: list[tuple[Phase, int]] = [
        *(("decode", b) for b in (recipe.proxy.decode if decode is None else decode)),
        *(("prefill", t) for t in (recipe.proxy.prefill if prefill is None else prefill)),
    ]
    workers = trees.workers
    rows: list[LayerTiming] = []
    skipped: dict[str, str] = {}
    ops: list[str] = []
    attention = ""
    if todo:
        _build_all(workers, plan(recipe, *todo[0]), dtype, timeout_s)
    for phase, tokens in todo:
        req = {
            "cmd": "layer",
            "plan": plan(recipe, phase, tokens),
            "dtype": dtype,
            "repeats": repeats,
            "graph_calls": graph_calls,
            "l2_multiple": l2_multiple,
        }
        samples: dict[str, dict[str, list[float]]] = {who: {} for who in workers}
        per_round: dict[str, list[float]] = {who: [] for who in workers}
        contexts: dict[str, list[str]] = {}
        for r in range(rounds):
            for who in round_order(list(workers), r):
                shift = {"placement_shift_mib": placement_shift_mib(r)} if shift_placement else {}
                answer = workers[who].request({**req, "seed": r, **shift}, timeout_s=timeout_s)
                skipped.update({f"{name} ({phase})": why for name, why in answer.get("skipped", {}).items()})
                ops = list(answer["ops"])
                contexts = dict(answer.get("contexts", {}))
                attention = str(answer.get("attention", attention))
                for name, values in answer["samples_us"].items():
                    samples[who].setdefault(name, []).extend(float(v) for v in values)
                if answer["samples_us"].get("layer"):
                    per_round[who].append(statistics.median(float(v) for v in answer["samples_us"]["layer"]))
        rows.append(
            layer_timing(
                phase,
                tokens,
                samples,
                layers=recipe.layers,
                kv_len=recipe.proxy.kv_len,
                steps=ops,
                contexts=contexts,
                rounds_us=per_round,
            )
        )
    parts = recipe.parts()
    return E2EResult(
        ran=True,
        model=recipe.model,
        layers=recipe.layers,
        dtype=dtype,
        recipe=_relative(pathlib.Path(recipe.path)),
        kv_len=recipe.proxy.kv_len,
        attention=attention,
        ops=ops,
        parts={name: parts[name] for name in ops if name in parts},
        sources={step.name: step.source for step in recipe.steps if step.source and step.name in ops},
        skipped_ops=skipped,
        rows=rows,
        assumption=ASSUMPTION.format(layers=recipe.layers, kv_len=recipe.proxy.kv_len),
        command=command,
        start_order=trees.started,
    )


def placement_shift_mib(r: int) -> int:
    """How far round ``r`` moves a worker's buffers (MiB, 1 to 64, a different figure each round of the
    first 64): with ``shift_placement`` each request first holds that much memory, so the buffers of
    one tree land elsewhere each round, and an offset that comes from where one process's memory
    landed shows as spread instead of as a steady A/A difference (the H200, 2026-12-07: Qwen3-235B's
    copy 4.4 % faster than the pristine tree, every round)."""
    return 1 + (r * 37) % 64


def round_order(trees: Sequence[str], r: int) -> list[str]:
    """The trees' order in round ``r``: turned by one each round, so each tree runs first, second, ...
    equally often over as many rounds as there are trees (two trees: alternating)."""
    k = r % len(trees)
    return [*trees[k:], *trees[:k]]


def _build_all(workers: Mapping[str, Any], first: dict[str, Any], dtype: Dtype, timeout_s: float) -> None:
    """Every tree builds the layer's SGLang modules at once, before any timing.

    Why: each tree JIT-builds its ops on first call into its own private cache (the patched
    tree's code must never share builds with the pristine one), and one tree at a time that
    was most of integrate's end-to-end minutes (H100, 2026-12-05: about 2 of the 3.5 minutes
    ``kernelsmith run`` spent in integrate). The request is one layer call with one buffer set,
    one call per graph and one repeat; inside each worker the modules build concurrently
    (``parallel_build``). Its samples are dropped: the two workers share the GPU meanwhile.
    """
    warm = {
        "cmd": "layer",
        "plan": first,
        "dtype": dtype,
        "repeats": 1,
        "graph_calls": 1,
        "max_sets": 1,
        "parallel_build": True,
    }
    for worker in workers.values():
        worker.send(warm)
    for worker in workers.values():
        worker.receive(warm, timeout_s=timeout_s)


# --------------------------------------------------------------------------- one_batch

_PREFILL = re.compile(r"^Prefill\. latency: *([\d.]+) s, throughput: *([\d.]+) token/s", re.M)
_DECODE = re.compile(r"^Decode\. +median latency: *([\d.]+) s, median throughput: *([\d.]+) token/s", re.M)
_TOTAL = re.compile(r"^Total\. latency: *([\d.]+) s, throughput: *([\d.]+) token/s", re.M)


def parse_one_batch(output: str) -> dict[str, float]:
    """Throughputs from bench_one_batch's output; the last occurrence wins (the first run is a warm-up)."""
    out: dict[str, float] = {}
    for key, pattern in (("prefill_tok_s", _PREFILL), ("decode_tok_s", _DECODE), ("total_tok_s", _TOTAL)):
        found = pattern.findall(output)
        if found:
            out[key] = float(found[-1][1])
    return out


def runtime_importable(package: pathlib.Path, python: str = sys.executable) -> tuple[bool, str]:
    """Can the full SGLang runtime (``sglang/__init__.py`` and the bench module) import from this tree?"""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(package.parent), env.get("PYTHONPATH", "")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    done = subprocess.run(
        [python, "-c", f"import {ONE_BATCH_MODULE}"], capture_output=True, text=True, env=env, timeout=600
    )
    if done.returncode == 0:
        return True, ""
    missing = re.findall(r"No module named '([^']+)'", done.stderr)
    if missing:
        return False, f"No module named '{missing[-1]}'"
    last = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
    return False, last[0]


def one_batch(
    baseline_pkg: pathlib.Path,
    patched_pkg: pathlib.Path,
    out_dir: pathlib.Path,
    *,
    model_path: str | None = None,
    batch_size: int = 32,
    input_len: int = 1024,
    output_len: int = 32,
    python: str = sys.executable,
    timeout_s: float = 1800.0,
) -> OneBatchResult:
    """SGLang's own one-batch benchmark on both trees, or why it cannot run here."""
    ok, why = runtime_importable(patched_pkg, python)
    if not ok:
        return OneBatchResult(
            ran=False,
            reason=f"the full SGLang runtime does not import here ({why}); the layer proxy stands in for it",
        )
    model_path = model_path or os.environ.get(ENV_MODEL)
    if not model_path:
        return OneBatchResult(
            ran=False,
            reason=f"no model folder: set {ENV_MODEL} to a local model (config and tokenizer; "
            "--load-format dummy needs no weights)",
        )
    from integrate.tree_worker import worker_env

    args = [
        "--model-path",
        model_path,
        "--load-format",
        "dummy",
        "--batch-size",
        str(batch_size),
        "--input-len",
        str(input_len),
        "--output-len",
        str(output_len),
    ]
    results: dict[str, dict[str, float]] = {}
    command = ""
    folder = IntegrateFolder(out_dir)
    for who, package in (("baseline", baseline_pkg), ("patched", patched_pkg)):
        env = worker_env(folder.cache(f"one-batch-{who}"))  # the patched tree's code: no credentials
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(package.parent), env.get("PYTHONPATH", "")) if p)
        result_file = folder.logs / f"one-batch-{who}.jsonl"
        result_file.parent.mkdir(parents=True, exist_ok=True)
        argv = [python, "-m", ONE_BATCH_MODULE, *args, "--result-filename", str(result_file)]
        command = f"PYTHONPATH={package.parent} SGLANG_FORCE_FUSED_OP_BACKEND=jit " + " ".join(argv[1:])
        try:
            done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return OneBatchResult(
                ran=False, reason=f"{who}: one_batch timed out after {timeout_s:.0f} s", command=command
            )
        (folder.logs / f"one-batch-{who}.log").write_text(done.stdout + done.stderr, encoding="utf-8")
        parsed = parse_one_batch(done.stdout)
        if done.returncode != 0 or not parsed:
            return OneBatchResult(
                ran=False,
                reason=f"{who}: one_batch exited {done.returncode} with no throughput line; see logs/one-batch-{who}.log",
                command=command,
            )
        results[who] = parsed
    return OneBatchResult(ran=True, command=command, baseline=results["baseline"], patched=results["patched"])


def run(
    baseline_pkg: pathlib.Path,
    patched_pkg: pathlib.Path,
    out_dir: pathlib.Path,
    *,
    command: str = "",
    ops: Sequence[str] = (),
    recipes: Sequence[LayerRecipe] | None = None,
) -> list[E2EResult]:
    """The layer proxy of every recipe with a step that runs one of ``ops`` (the changed code's ops;
    with none, the default recipe), then the one_batch adapter: :mod:`integrate.command`'s e2e step.

    A recipe that does not load, whose ``source`` lines are not in this tree, or whose run breaks
    gives a result that did not run and says why; the other recipes run on and keep their figures.
    Each recipe's result is also written to ``out_dir/e2e/<recipe>.json`` as it ends."""
    broken: dict[str, str] = {}
    if recipes is None:
        loaded, broken = all_recipes()
        recipes = recipes_for(ops, loaded)
    results = [E2EResult(ran=False, recipe=f"{LAYER_DIR.name}/{name}", reason=why) for name, why in broken.items()]
    trees: Trees | None = None
    try:
        for recipe in recipes:
            where = _relative(pathlib.Path(recipe.path))
            moved = check_sources(recipe, baseline_pkg)
            if moved:
                results.append(E2EResult(ran=False, model=recipe.model, recipe=where, reason="; ".join(moved)))
                continue
            try:
                trees = trees or Trees(baseline_pkg, patched_pkg, out_dir, aa=True, start=0).__enter__()
                results.append(time_recipe(trees, recipe, command=command))
                # kept as soon as it exists: a run stopped in a later recipe loses none of this one
                write_record(results[-1], IntegrateFolder(out_dir).e2e(pathlib.Path(recipe.path).stem))
            except (KernelsmithError, OSError, subprocess.SubprocessError) as err:
                results.append(
                    E2EResult(ran=False, model=recipe.model, recipe=where, reason=f"it broke: {broke_with(err)}")
                )
                if trees is not None:  # a worker that broke is not trusted with the next recipe: fresh ones
                    trees.close()
                    trees = None
    finally:
        if trees is not None:
            trees.close()
    ran = [i for i, r in enumerate(results) if r.ran]
    if ran:  # the whole-server adapter once, on the first recipe that ran
        first = results[ran[0]]
        results[ran[0]] = first.model_copy(update={"one_batch": one_batch(baseline_pkg, patched_pkg, out_dir)})
    return results


def pristine_runs(package: pathlib.Path, out_dir: pathlib.Path, runs: int, **options: Any) -> list[E2EResult]:
    """The layer proxy on the pristine tree against itself, ``runs`` times: the A/A evidence.

    Each run compares the pristine tree with itself loaded a second time (its own worker and JIT
    cache: the A/B side, where any difference is noise) and with a byte-for-byte copy of it (the
    A/A side). Every result is written as ``<out_dir>/pristine-<i>.json`` as soon as it exists."""
    results = []
    for i in range(runs):
        result = run_layers(
            package,
            package,
            out_dir,
            command=f"python -m integrate.e2e --pristine --runs {runs}"
            + (" --shift-placement" if options.get("shift_placement") else ""),
            start=i,  # each run starts another tree first
            **options,
        )
        write_record(result, IntegrateFolder(out_dir).pristine_run(i + 1))
        results.append(result)
    return results


def inside_counts(results: Sequence[E2EResult]) -> dict[str, tuple[int, int]]:
    """Over the points of ``results``: how many pristine-vs-pristine differences lie inside the band that
    point reports ("A/B": the second load of the same tree, judged with A/A; "A/A, spread": the copy
    against its own spread band times ``layer_verdicts.COVERAGE``), as (inside, points)."""
    rows = [row for result in results for row in result.rows]
    ab = sum(row.verdict == "no change" for row in rows)
    aa = sum(bool(row.aa and row.aa.inside) for row in rows)
    return {"A/B": (ab, len(rows)), "A/A, spread": (aa, len(rows))}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m integrate.e2e --run RUN``: re-run only the end-to-end step of a run's patch;
    ``python -m integrate.e2e --pristine [--runs N]``: the pristine tree against itself (A/A)."""
    import argparse

    from integrate.steps import e2e_only

    parser = argparse.ArgumentParser(prog="python -m integrate.e2e", description=main.__doc__)
    parser.add_argument("--run", default=None)
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--pristine", action="store_true", help="time the pristine tree against itself (A/A)")
    parser.add_argument("--runs", type=int, default=3, help="with --pristine: how many runs")
    parser.add_argument(
        "--recipe", default=None, help=f"with --pristine: a layer recipe file (default: {_relative(DEFAULT_RECIPE)})"
    )
    parser.add_argument(
        "--shift-placement",
        action="store_true",
        help="with --pristine: each round's buffers land elsewhere in memory (placement_shift_mib)",
    )
    args = parser.parse_args(argv)
    if args.pristine:
        from extract.sources import acquire
        from pipeline.config import load_config

        config = load_config(overrides={"work_dir": args.work_dir} if args.work_dir else None)
        source = acquire(config.sglang.version, config.cache, config.sglang.src)
        try:
            recipe = load_recipe(pathlib.Path(args.recipe) if args.recipe else DEFAULT_RECIPE)
        except KernelsmithError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        default = pathlib.Path(recipe.path).resolve() == DEFAULT_RECIPE.resolve()
        out_dir = pristine_folder(config.work, None if default else pathlib.Path(recipe.path).stem).root
        results = pristine_runs(
            pathlib.Path(source.root), out_dir, args.runs, recipe=recipe, shift_placement=args.shift_placement
        )
        for result in results:
            print(f"workers started: {' then '.join(result.start_order)}")
            for row in result.rows:
                aa = row.aa
                print(
                    f"{row.phase} T={row.tokens}: A/B {row.change_pct:+.3f}% (band ±{row.noise_band_pct:.3f}%, {row.verdict}); "
                    + (f"A/A {aa.change_pct:+.3f}% (band ±{aa.band_pct:.3f}%, inside: {aa.inside})" if aa else "")
                )
                for tree, medians in row.rounds_us.items():
                    print(f"  {tree} per round: {', '.join(f'{us:.2f}' for us in medians)} us")
        for name, (inside, total) in inside_counts(results).items():
            print(f"{name}: {inside} of {total} points inside their band")
        print(f"records: {out_dir}/pristine-*.json")
        return 0
    if not args.run:
        parser.error("give --run RUN, or --pristine")
    return e2e_only(args.run, run, work_dir=args.work_dir)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
