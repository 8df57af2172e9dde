"""End-to-end evidence: a decoder layer's non-GEMM ops through SGLang, pristine vs patched.

The model-step proxy. One Llama-3.1-8B decoder layer runs, outside attention
and the GEMMs, this sequence of SGLang ops (what ``LlamaDecoderLayer`` calls
for a middle layer):

1. ``input_norm``: ``fused_add_rmsnorm(hidden, residual, w, eps)`` (the first
   layer uses ``rmsnorm`` instead; every other layer adds the residual),
2. ``rope``: ``apply_rope_with_cos_sin_cache_inplace(q, k, cos_sin, positions,
   is_neox=True)``, when the tree has that JIT op (skipped, and said so, if not),
3. ``post_attention_norm``: ``fused_add_rmsnorm``,
4. ``silu_and_mul`` on the gate/up projection's output.

Each worker (:mod:`integrate.sglang_worker`) imports one tree, builds the ops
with SGLang's own ``load_jit``, captures many back-to-back layers in one CUDA
graph (buffer sets rotated so the working set is at least 3x L2, as a real
model streams different weights and activations per layer) and times replays
with CUDA events (:mod:`optimize.harness.timing`). Decode at batch 1-256 and a
4096-token prefill; the two trees are measured in alternating order over
several rounds, and the pooled samples give a median and a p10-p90 spread.

The implied tokens/s is ``tokens / (layer time x layers)``: it counts the
non-GEMM ops above and nothing else (no attention, GEMMs, sampling,
scheduling), so it is an upper bound on what these ops allow, not a model's
throughput; what carries over to a real model is the absolute time saved per
layer (:data:`ASSUMPTION`).

SGLang adapter: when the full SGLang runtime imports from the patched tree and
a local model folder is named in ``ONE_BATCH_MODEL_PATH``, it also runs
``python -m sglang.benchmark.one_batch --load-format dummy`` on both trees and
parses the prefill / median decode / total throughput lines. Otherwise the
result says precisely why it did not run.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from integrate.records import E2EResult, LayerTiming, OneBatchResult

ENV_MODEL = "ONE_BATCH_MODEL_PATH"
ONE_BATCH_MODULE = "sglang.benchmark.one_batch"


@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    eps: float
    rope_theta: float
    max_position: int = 8192  # size of the cos/sin cache the proxy allocates (positions are drawn below it)


# Llama-3.1-8B's config.json values.
LLAMA_3_1_8B = ModelShape(
    name="Llama-3.1-8B", hidden=4096, intermediate=14336, heads=32, kv_heads=8, head_dim=128, layers=32, eps=1e-5, rope_theta=500000.0
)
DECODE_BATCHES: tuple[int, ...] = (1, 8, 32, 64, 128, 256)
PREFILL_TOKENS: tuple[int, ...] = (4096,)
ASSUMPTION = (
    "Implied tokens/s = tokens per step / (one layer's non-GEMM time x {layers} layers). It counts only the "
    "ops in the layer proxy (RMSNorms, RoPE, SiLU-and-mul); attention, every GEMM, sampling and scheduling "
    "are left out, so it is an upper bound set by these ops, not a model throughput. The time saved per "
    "layer is what carries over to a real model step."
)


def implied_tokens_per_s(tokens: int, layer_us: float, layers: int) -> float:
    """Tokens per second if a step cost only ``layers`` x this layer's non-GEMM time."""
    if layer_us <= 0:
        return float("nan")
    return tokens / (layer_us * layers * 1e-6)


def points(decode: Sequence[int] = DECODE_BATCHES, prefill: Sequence[int] = PREFILL_TOKENS) -> list[tuple[str, int]]:
    return [("decode", b) for b in decode] + [("prefill", t) for t in prefill]


def run_layers(
    baseline_pkg: pathlib.Path,
    patched_pkg: pathlib.Path,
    out_dir: pathlib.Path,
    *,
    model: ModelShape = LLAMA_3_1_8B,
    dtype: str = "bf16",
    rounds: int = 3,
    repeats: int = 15,
    graph_calls: int = 20,
    l2_multiple: float = 3.0,
    timeout_s: float = 900.0,
    decode: Sequence[int] = DECODE_BATCHES,
    prefill: Sequence[int] = PREFILL_TOKENS,
    command: str = "",
) -> E2EResult:
    """Layer-proxy timings for every point, both trees, alternating order per round."""
    from integrate.sglang_runner import TreeWorker
    from optimize.harness.timing import summarize

    logs = out_dir / "logs"
    rows: list[LayerTiming] = []
    skipped: dict[str, str] = {}
    ops: list[str] = []
    with TreeWorker("baseline", baseline_pkg, out_dir / "cache" / "baseline", logs / "e2e-baseline.log") as base, TreeWorker(
        "patched", patched_pkg, out_dir / "cache" / "patched", logs / "e2e-patched.log"
    ) as new:
        workers = {"baseline": base, "patched": new}
        for phase, tokens in points(decode, prefill):
            req = {
                "cmd": "layer",
                "model": asdict(model),
                "tokens": tokens,
                "dtype": dtype,
                "repeats": repeats,
                "graph_calls": graph_calls,
                "l2_multiple": l2_multiple,
            }
            samples: dict[str, dict[str, list[float]]] = {"baseline": {}, "patched": {}}
            for r in range(rounds):
                order = ["baseline", "patched"] if r % 2 == 0 else ["patched", "baseline"]
                for who in order:
                    answer = workers[who].request({**req, "seed": r}, timeout_s=timeout_s)
                    skipped.update(answer.get("skipped", {}))
                    ops = list(answer["ops"])
                    for name, values in answer["samples_us"].items():
                        samples[who].setdefault(name, []).extend(float(v) for v in values)
            b, p = summarize(samples["baseline"]["layer"]), summarize(samples["patched"]["layer"])
            rows.append(
                LayerTiming(
                    phase=phase,
                    tokens=tokens,
                    baseline_us=b.median,
                    patched_us=p.median,
                    baseline_spread_pct=b.spread_pct,
                    patched_spread_pct=p.spread_pct,
                    change_pct=(p.median - b.median) / b.median * 100.0,
                    baseline_tokens_per_s=implied_tokens_per_s(tokens, b.median, model.layers),
                    patched_tokens_per_s=implied_tokens_per_s(tokens, p.median, model.layers),
                    ops_us={
                        name: {
                            "baseline": summarize(samples["baseline"][name]).median,
                            "patched": summarize(samples["patched"][name]).median,
                        }
                        for name in ops
                    },
                )
            )
    return E2EResult(
        ran=True,
        model=model.name,
        layers=model.layers,
        dtype=dtype,
        ops=ops,
        skipped_ops=skipped,
        rows=rows,
        assumption=ASSUMPTION.format(layers=model.layers),
        command=command,
    )


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
    done = subprocess.run([python, "-c", f"import {ONE_BATCH_MODULE}"], capture_output=True, text=True, env=env, timeout=600)
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
    from integrate.sglang_bare import private_cache_env

    args = [
        "--model-path", model_path, "--load-format", "dummy", "--batch-size", str(batch_size),
        "--input-len", str(input_len), "--output-len", str(output_len),
    ]  # fmt: skip
    results: dict[str, dict[str, float]] = {}
    command = ""
    for who, package in (("baseline", baseline_pkg), ("patched", patched_pkg)):
        env = dict(os.environ)
        env.update(private_cache_env(str(out_dir / "cache" / f"one-batch-{who}")))
        env["SGLANG_FORCE_FUSED_OP_BACKEND"] = "jit"
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(package.parent), env.get("PYTHONPATH", "")) if p)
        result_file = out_dir / "logs" / f"one-batch-{who}.jsonl"
        result_file.parent.mkdir(parents=True, exist_ok=True)
        argv = [python, "-m", ONE_BATCH_MODULE, *args, "--result-filename", str(result_file)]
        command = f"PYTHONPATH={package.parent} SGLANG_FORCE_FUSED_OP_BACKEND=jit " + " ".join(argv[1:])
        try:
            done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return OneBatchResult(ran=False, reason=f"{who}: one_batch timed out after {timeout_s:.0f} s", command=command)
        (out_dir / "logs" / f"one-batch-{who}.log").write_text(done.stdout + done.stderr, encoding="utf-8")
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
    **kwargs: Any,
) -> E2EResult:
    """The layer proxy, then the one_batch adapter."""
    result = run_layers(baseline_pkg, patched_pkg, out_dir, command=command, **kwargs)
    return result.model_copy(update={"one_batch": one_batch(baseline_pkg, patched_pkg, out_dir)})


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m integrate.e2e --run RUN``: re-measure only the end-to-end proxy of a run's patch."""
    import argparse

    from integrate.command import e2e_only

    parser = argparse.ArgumentParser(prog="python -m integrate.e2e", description=main.__doc__)
    parser.add_argument("--run", required=True)
    parser.add_argument("--work-dir", default=None)
    args = parser.parse_args(argv)
    return e2e_only(args.run, work_dir=args.work_dir)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
