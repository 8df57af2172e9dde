"""integrate.e2e: the layer plan, the throughput arithmetic, the one_batch adapter's parsing and refusals."""

from __future__ import annotations

import pathlib
import sys

import pytest

from integrate import e2e
from integrate.e2e import LLAMA_3_1_8B, implied_tokens_per_s, one_batch, parse_one_batch, points, runtime_importable

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_llama_shapes_and_points():
    m = LLAMA_3_1_8B
    assert (m.hidden, m.intermediate, m.heads, m.kv_heads, m.head_dim, m.layers) == (4096, 14336, 32, 8, 128, 32)
    assert m.heads * m.head_dim == m.hidden
    assert points() == [("decode", b) for b in (1, 8, 32, 64, 128, 256)] + [("prefill", 4096)]


def test_implied_tokens_per_s_counts_only_the_layer_ops():
    # 256 decode tokens, 20 us per layer, 32 layers: one step = 640 us -> 400,000 tokens/s
    assert implied_tokens_per_s(256, 20.0, 32) == pytest.approx(400_000.0)
    assert implied_tokens_per_s(1, 10.0, 32) == pytest.approx(3125.0)
    assert implied_tokens_per_s(1, 0.0, 32) != implied_tokens_per_s(1, 0.0, 32)  # nan, never inf
    assert "non-GEMM" in e2e.ASSUMPTION and "upper bound" in e2e.ASSUMPTION


def test_parse_one_batch_takes_the_measured_run_not_the_warmup():
    output = "\n".join(
        [
            "Warmup ...",
            "Prefill. latency: 0.50000 s, throughput:   2048.00 token/s",
            "Decode 0. Batch size: 32, latency: 0.02000 s, throughput:   1600.00 token/s",
            "Decode.  median latency: 0.02000 s, median throughput:   1600.00 token/s",
            "Total. latency:  0.700 s, throughput:   3000.00 token/s",
            "Benchmark ...",
            "Prefill. latency: 0.12345 s, throughput: 265451.19 token/s",
            "Decode 0. Batch size: 32, latency: 0.01100 s, throughput:   2909.09 token/s",
            "Decode.  median latency: 0.01050 s, median throughput:   3047.62 token/s",
            "Total. latency:  0.456 s, throughput:  73964.91 token/s",
        ]
    )
    assert parse_one_batch(output) == {"prefill_tok_s": 265451.19, "decode_tok_s": 3047.62, "total_tok_s": 73964.91}
    assert parse_one_batch("Traceback (most recent call last):\nRuntimeError: CUDA error") == {}


def test_one_batch_says_why_it_cannot_run_here(sglang_source, tmp_path, monkeypatch):
    """The full SGLang runtime needs far more than this venv has: the adapter names the missing module."""
    package = pathlib.Path(sglang_source.root)
    ok, why = runtime_importable(package, sys.executable)
    assert not ok and why.startswith("No module named")
    result = one_batch(package, package, tmp_path)
    assert not result.ran and "does not import here (No module named" in result.reason and result.baseline == {}

    monkeypatch.setattr(e2e, "runtime_importable", lambda package, python=sys.executable: (True, ""))
    monkeypatch.delenv(e2e.ENV_MODEL, raising=False)
    result = one_batch(package, package, tmp_path)
    assert not result.ran and e2e.ENV_MODEL in result.reason


@pytest.mark.gpu
def test_layer_proxy_on_the_gpu(sglang_source, tmp_path):
    """Pristine tree against itself: both sides measure, nothing is skipped but what the tree lacks."""
    package = pathlib.Path(sglang_source.root)
    result = e2e.run_layers(package, package, tmp_path, decode=(1, 64), prefill=(4096,), rounds=2, repeats=5)
    assert result.ran and [r.tokens for r in result.rows] == [1, 64, 4096]
    assert result.ops[0] == "input_norm" and result.ops[-1] == "silu_and_mul"
    for row in result.rows:
        assert row.baseline_us > 0 and row.patched_us > 0
        assert abs(row.change_pct) < 25, "the same tree on both sides must time alike"
        assert set(row.ops_us) == set(result.ops)
