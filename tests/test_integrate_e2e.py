"""integrate.e2e: the layer plan, the throughput arithmetic, the one_batch adapter's parsing and refusals."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from contract.layout import IntegrateFolder
from integrate import e2e, layer_verdicts
from integrate.e2e import one_batch, parse_one_batch, points, runtime_importable
from integrate.errors import RecipeError
from integrate.layer_verdicts import implied_tokens_per_s, judge, layer_timing, noise_band_pct
from integrate.recipe import DEFAULT_RECIPE, load_recipe, plan
from integrate.records import E2EResult
from optimize.harness.timing import summarize

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_recipe_ties_every_figure_to_its_config_key():
    r = load_recipe()
    assert r.model == "Llama-3.1-8B" and r.layers == 32
    assert r.figures["hidden_size"].value == 4096 and '"hidden_size"' in r.figures["hidden_size"].source
    assert r.figures["rms_norm_eps"].value == 1e-5 and '"rms_norm_eps"' in r.figures["rms_norm_eps"].source
    assert "derived" in r.figures["head_dim"].source or "/" in r.figures["head_dim"].source
    for name, figure in r.figures.items():
        assert "config.json" in figure.source, name
    assert points(r) == [("decode", b) for b in (1, 8, 32, 64, 128, 256)] + [("prefill", 4096)]
    parts = r.parts()
    assert parts["qkv_proj"] == "torch linear" and parts["input_norm"] == "SGLang layernorm.fused_add_rmsnorm"
    assert parts["attention"] == "torch attention_decode (decode) / torch attention_causal (prefill)"
    assert [s.name for s in r.steps_in("decode")] == [
        "input_norm",
        "qkv_proj",
        "rope",
        "attention",
        "o_proj",
        "post_attention_norm",
        "gate_up_proj",
        "silu_and_mul",
        "down_proj",
    ]


def test_shape_expressions_follow_the_model_and_the_point():
    r = load_recipe()
    decode = plan(r, "decode", 8)
    shapes = {name: spec["shape"] for name, spec in decode["tensors"].items()}
    assert shapes["w_qkv"] == [(32 + 2 * 8) * 128, 4096] and shapes["w_gate_up"] == [2 * 14336, 4096]
    assert shapes["k_cache"] == [8, 8, 2048, 128] and "v" not in shapes  # the prefill-only tensor is left out
    prefill = plan(r, "prefill", 4096)
    assert prefill["tensors"]["v"]["shape"] == [4096, 8, 128] and "k_cache" not in prefill["tensors"]
    steps = {s["name"]: s for s in prefill["steps"]}
    assert steps["attention"]["torch"] == "attention_causal"
    assert steps["input_norm"]["args"][-1] == {"value": 1e-5}
    assert steps["rope"]["kwargs"] == {"is_neox": {"value": True}}


def _bad(tmp_path, old: str, new: str) -> pathlib.Path:
    path = tmp_path / "bad.toml"
    text = DEFAULT_RECIPE.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("old", "new", "match"),
    [
        (
            'rms_norm_eps = { value = 1e-5, key = "rms_norm_eps" }',
            "rms_norm_eps = { value = 1e-5 }",
            "needs a number and its source",
        ),
        (
            "rope_theta = { value",
            'hidden_size = { value = 1, key = "hidden_size" }\nrope_theta = { value',
            "already has this figure",
        ),
        ('x = { shape = ["T", "hidden_size"] }', 'x = { shape = ["T", "hidden"] }', "unknown names"),
        ('args = ["gate_up", "act"]', 'args = ["gate_up", "nothing"]', "neither a tensor nor a figure"),
        (
            'torch = "linear"\nargs = ["x", "w_qkv", "qkv"]',
            'torch = "matmul"\nargs = ["x", "w_qkv", "qkv"]',
            "unknown torch part",
        ),
        ('model = "Llama-3.1-8B"', 'model = "Llama-9"', "not in the shape catalog"),
    ],
)
def test_a_bad_recipe_is_a_clear_error(tmp_path, old, new, match):
    with pytest.raises(RecipeError, match=match) as err:
        load_recipe(_bad(tmp_path, old, new))
    assert "bad.toml" in err.value.message and err.value.fix


def test_noise_band_and_share_of_layer():
    base = summarize([100.0, 101.0, 99.0, 100.0, 102.0, 98.0])
    same = summarize([100.2, 101.1, 99.3, 100.1, 101.9, 98.2])
    band = noise_band_pct(base, same)
    assert band == pytest.approx((max(base.p90 - base.p10, same.p90 - same.p10) / 2) / base.median * 100)
    assert (
        judge(-0.5, band) == "no change"
        and judge(-band - 0.01, band) == "faster"
        and judge(band + 0.01, band) == "slower"
    )
    fast = {
        "baseline": {"layer": [100.0, 100.2, 99.8] * 4, "non_gemm": [10.0, 10.2, 9.8] * 4, "qkv_proj": [30.0] * 12},
        "patched": {"layer": [98.0, 98.2, 97.8] * 4, "non_gemm": [8.0, 8.1, 7.9] * 4, "qkv_proj": [30.0] * 12},
    }
    row = layer_timing("decode", 8, fast, layers=32, kv_len=2048, steps=["qkv_proj"])
    assert row.change_pct == pytest.approx(-2.0) and row.verdict == "faster" and row.kv_len == 2048
    assert row.non_gemm is not None
    assert row.non_gemm.change_pct == pytest.approx(-20.0)  # the part alone
    assert row.non_gemm.share_of_layer_pct == pytest.approx(
        -2.0
    )  # the same microseconds, as a share of the whole layer
    assert row.ops_us == {"qkv_proj": {"baseline": 30.0, "patched": 30.0}}
    noisy = {"baseline": {"layer": [90.0, 100.0, 110.0] * 4}, "patched": {"layer": [88.0, 99.0, 108.0] * 4}}
    row = layer_timing("prefill", 4096, noisy, layers=32, kv_len=2048, steps=[])
    assert row.verdict == "no change" and row.kv_len is None and row.non_gemm is None


def test_implied_tokens_per_s_counts_the_whole_layer():
    # 256 decode tokens, 20 us per layer, 32 layers: one step = 640 us -> 400,000 tokens/s
    assert implied_tokens_per_s(256, 20.0, 32) == pytest.approx(400_000.0)
    assert implied_tokens_per_s(1, 10.0, 32) == pytest.approx(3125.0)
    assert implied_tokens_per_s(1, 0.0, 32) != implied_tokens_per_s(1, 0.0, 32)  # nan, never inf
    assert "whole decoder layer" in e2e.ASSUMPTION and "upper bound" in e2e.ASSUMPTION


def test_e2e_does_not_import_the_command_module():
    import ast

    tree = ast.parse((ROOT / "integrate" / "e2e.py").read_text(encoding="utf-8"))
    names = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    assert "integrate.command" not in names


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


def test_one_batch_runs_the_trees_with_the_scrubbed_environment(tmp_path, monkeypatch):
    """SGLang's one-batch benchmark runs the patched tree's code: no credentials reach it (issue 16)."""
    seen: list[dict] = []

    def fake_run(argv, **kwargs):
        seen.append(kwargs["env"])
        return subprocess.CompletedProcess(argv, 1, "", "no GPU")

    monkeypatch.setattr(e2e, "runtime_importable", lambda package, python=sys.executable: (True, ""))
    monkeypatch.setattr(e2e.subprocess, "run", fake_run)
    monkeypatch.setenv(e2e.ENV_MODEL, str(tmp_path / "model"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("HF_TOKEN", "hf-secret")
    result = one_batch(tmp_path / "a" / "sglang", tmp_path / "b" / "sglang", tmp_path)
    assert not result.ran and len(seen) == 1
    (env,) = seen
    assert not {"OPENAI_API_KEY", "HF_TOKEN"} & set(env)
    assert env["SGLANG_FORCE_FUSED_OP_BACKEND"] == "jit" and env["PYTHONPATH"].startswith(str(tmp_path / "a"))


class StandInWorker:
    """A stand-in for :class:`integrate.tree_worker.TreeWorker` (no GPU): a subclass's ``answer(req)``
    is what the tree's worker replies to each request."""

    def __init__(self, name, package, cache_dir, log, **kwargs):
        self.name = name

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def send(self, req):
        return None

    def receive(self, req, *, timeout_s):
        return self.answer(req)

    def request(self, req, *, timeout_s):
        return self.answer(req)

    def answer(self, req):
        raise NotImplementedError


def test_both_trees_build_their_modules_at_once_before_any_timing(tmp_path, monkeypatch):
    """The warm-up goes to both workers before either answer is awaited, and its samples are dropped."""
    import integrate.tree_worker as tree_worker

    events: list[tuple[str, str, dict]] = []

    class FakeWorker(StandInWorker):
        def send(self, req):
            events.append(("send", self.name, req))

        def receive(self, req, *, timeout_s):
            events.append(("receive", self.name, req))
            us = 1000.0 if req.get("parallel_build") else 10.0  # a warm-up figure must never reach a row
            return {"ops": ["input_norm"], "samples_us": {"layer": [us] * 3, "input_norm": [us / 10] * 3}}

        def request(self, req, *, timeout_s):
            self.send(req)
            return self.receive(req, timeout_s=timeout_s)

    monkeypatch.setattr(tree_worker, "TreeWorker", FakeWorker)
    package = tmp_path / "pristine" / "sglang"
    (package / "kernels").mkdir(parents=True)
    (package / "kernels" / "op.py").write_text("X = 1\n")
    seen_copy: list[bool] = []
    real_build = e2e._build_all

    def build_all(workers, first, dtype, timeout_s):  # the copy exists while the workers run
        seen_copy.append(
            (IntegrateFolder(tmp_path / "out").aa_tree / "sglang" / "kernels" / "op.py").read_text() == "X = 1\n"
        )
        return real_build(workers, first, dtype, timeout_s)

    monkeypatch.setattr(e2e, "_build_all", build_all)
    result = e2e.run_layers(package, package, tmp_path / "out", decode=(1,), prefill=(4096,), rounds=1, repeats=5)
    warm = [(kind, who) for kind, who, req in events if req.get("parallel_build")]
    assert warm == [
        ("send", "baseline"),
        ("send", "patched"),
        ("send", "pristine-copy"),
        ("receive", "baseline"),
        ("receive", "patched"),
        ("receive", "pristine-copy"),
    ]
    (first_warm,) = {id(req): req for _, _, req in events if req.get("parallel_build")}.values()
    assert first_warm["max_sets"] == 1 and first_warm["repeats"] == 1 and first_warm["plan"]["tokens"] == 1
    timed = [req for kind, _, req in events if kind == "send" and not req.get("parallel_build")]
    assert len(timed) == 6 and all(req["repeats"] == 5 for req in timed), "two points, one round, three trees"
    assert [r.baseline_us for r in result.rows] == [10.0, 10.0]
    assert all(r.aa is not None and r.aa.change_pct == 0.0 for r in result.rows)
    assert seen_copy == [True] and not (IntegrateFolder(tmp_path / "out").aa_tree).exists(), (
        "the A/A copy is removed after"
    )


def test_the_workers_start_in_a_turned_order_and_the_rounds_keep_theirs(tmp_path, monkeypatch):
    """``start`` turns which tree's worker process starts (and allocates) first; the rounds' order and
    the rows do not depend on it. The record says which started first (the H100's A/A, 2026-12-07:
    the first-started tree was the fastest at decode T=256 in 4 of 4 runs)."""
    import integrate.tree_worker as tree_worker

    entered: list[str] = []
    timed: list[str] = []

    class FakeWorker(StandInWorker):
        def __enter__(self):
            entered.append(self.name)
            return self

        def answer(self, req):
            if not req.get("parallel_build"):
                timed.append(self.name)
            return {"ops": ["input_norm"], "samples_us": {"layer": [10.0] * 3, "input_norm": [1.0] * 3}}

    monkeypatch.setattr(tree_worker, "TreeWorker", FakeWorker)
    package = tmp_path / "pristine" / "sglang"
    (package / "kernels").mkdir(parents=True)
    result = e2e.run_layers(package, package, tmp_path / "out", decode=(1,), prefill=(), rounds=1, repeats=5, start=1)
    assert entered == ["patched", "pristine-copy", "baseline"]
    assert result.start_order == ["patched", "copy", "baseline"]
    assert timed == ["baseline", "patched", "pristine-copy"], "round 0 runs the trees in their own order"


def test_each_round_keeps_each_trees_median_and_shifted_placement_moves_its_buffers(tmp_path, monkeypatch):
    """The record keeps every tree's whole-layer median per round, in round order: on the H200
    (2026-12-07) the A/A copy of Qwen3-235B was 4.4 % faster than the pristine tree, and only per-round
    figures tell a steady offset of one worker process from scatter. With ``shift_placement`` each
    round's request asks its worker to hold a different amount of memory first, so the tree's buffers
    land elsewhere each round; without it, no request asks."""
    import integrate.tree_worker as tree_worker

    shifts: list[tuple[str, int, int | None]] = []

    class FakeWorker(StandInWorker):
        def answer(self, req):
            seed = int(req.get("seed", 0))
            if not req.get("parallel_build"):
                shifts.append((self.name, seed, req.get("placement_shift_mib")))
            offset = 5.0 if self.name == "pristine-copy" else 0.0  # a steady offset of one process
            layer = [100.0 + seed + offset, 101.0 + seed + offset, 102.0 + seed + offset]
            return {"ops": ["input_norm"], "samples_us": {"layer": layer, "input_norm": [1.0] * 3}}

    monkeypatch.setattr(tree_worker, "TreeWorker", FakeWorker)
    package = tmp_path / "pristine" / "sglang"
    (package / "kernels").mkdir(parents=True)
    result = e2e.run_layers(
        package, package, tmp_path / "out", decode=(1,), prefill=(), rounds=3, repeats=3, shift_placement=True
    )
    (row,) = result.rows
    assert row.rounds_us == {
        "baseline": [101.0, 102.0, 103.0],
        "patched": [101.0, 102.0, 103.0],
        "copy": [106.0, 107.0, 108.0],
    }
    assert sorted({(seed, mib) for _, seed, mib in shifts}) == [(0, 1), (1, 38), (2, 11)]
    assert len({e2e.placement_shift_mib(r) for r in range(64)}) == 64, "a different shift each round"
    assert all(1 <= e2e.placement_shift_mib(r) <= 64 for r in range(200))
    shifts.clear()
    e2e.run_layers(package, package, tmp_path / "out2", decode=(1,), prefill=(), rounds=2, repeats=3)
    assert shifts and all(mib is None for _, _, mib in shifts), "no shift unless asked"


def test_each_tree_takes_each_place_in_the_round_order():
    trees = ["baseline", "patched", "copy"]
    orders = [e2e.round_order(trees, r) for r in range(3)]
    assert orders == [trees, ["patched", "copy", "baseline"], ["copy", "baseline", "patched"]]
    assert {tuple(o.index(t) for o in orders) for t in trees} == {(0, 2, 1), (1, 0, 2), (2, 1, 0)}
    assert e2e.round_order(["baseline", "patched"], 1) == ["patched", "baseline"]  # two trees: alternating


def test_an_a_a_difference_wider_than_the_spread_widens_the_band():
    """Two identical trees 1 % apart: a patched change of 0.6 % is inside what no change measures as."""
    tight = [100.0, 100.05, 99.95] * 4
    samples = {
        "baseline": {"layer": tight, "context:rope": [10.0, 10.01, 9.99] * 4},
        "patched": {"layer": [x * 1.006 for x in tight], "context:rope": [10.5, 10.51, 10.49] * 4},
        "copy": {"layer": [x * 1.01 for x in tight], "context:rope": [10.0, 10.01, 9.99] * 4},
    }
    row = layer_timing("decode", 1, samples, layers=32, kv_len=2048, steps=[], contexts={"rope": ["a", "rope", "b"]})
    assert row.aa is not None and row.aa.change_pct == pytest.approx(1.0) and not row.aa.inside
    # the difference plus its spread band, times the coverage (the A/A's band has the coverage in it already)
    assert row.noise_band_pct == pytest.approx(layer_verdicts.COVERAGE * row.aa.change_pct + row.aa.band_pct)
    assert row.noise_band_pct > 1.0 and row.verdict == "no change"
    without = layer_timing(
        "decode", 1, {k: v for k, v in samples.items() if k != "copy"}, layers=32, kv_len=2048, steps=[]
    )
    assert without.aa is None and without.verdict == "slower", "the spread band alone calls it slower"
    ctx = row.context["rope"]
    assert ctx.neighbours == ["a", "rope", "b"] and ctx.change_pct == pytest.approx(5.0) and ctx.verdict == "slower"
    assert ctx.aa is not None and ctx.aa.inside


def test_a_change_as_large_as_the_a_a_difference_is_no_change():
    """The H100's decode T=1 (2026-12-07): the copy +0.78 % (spread band 0.30 %), the patched tree +0.79 %.
    The A/A difference alone as the band called that "slower"; the difference plus its spread does not."""
    base = [173.34, 173.30, 173.38] * 4
    samples = {
        "baseline": {"layer": base},
        "patched": {"layer": [x * 1.0079 for x in base]},
        "copy": {"layer": [x * 1.0078 for x in base]},
    }
    row = layer_timing("decode", 1, samples, layers=32, kv_len=2048, steps=[])
    assert row.aa is not None and row.aa.change_pct == pytest.approx(0.78)
    assert row.noise_band_pct > abs(row.change_pct) and row.verdict == "no change"
    assert layer_verdicts.band_with_aa(0.1, row.aa) == pytest.approx(
        layer_verdicts.COVERAGE * row.aa.change_pct + row.aa.band_pct
    )


def test_each_sglang_step_is_timed_between_its_neighbours_wrapping_around_the_layer():
    from integrate.layer_worker import neighbourhoods

    names = ["input_norm", "qkv_proj", "rope", "attention", "down_proj"]
    assert neighbourhoods(names, ["input_norm", "rope"]) == {
        "input_norm": ["down_proj", "input_norm", "qkv_proj"],
        "rope": ["qkv_proj", "rope", "attention"],
    }
    assert neighbourhoods(["a", "b"], ["a"]) == {}


@pytest.mark.gpu
def test_layer_proxy_on_the_gpu(sglang_source, tmp_path):
    """Pristine tree against itself: both sides measure, nothing is skipped but what the tree lacks."""
    package = pathlib.Path(sglang_source.root)
    result = e2e.run_layers(package, package, tmp_path, decode=(1, 64), prefill=(4096,), rounds=2, repeats=5)
    assert result.ran and [r.tokens for r in result.rows] == [1, 64, 4096]
    assert result.ops[0] == "input_norm" and result.ops[-1] == "down_proj" and result.kv_len == 2048
    for row in result.rows:
        assert row.baseline_us > 0 and row.patched_us > 0 and row.non_gemm is not None
        assert row.non_gemm.baseline_us < row.baseline_us, "the SGLang ops alone take less than the whole layer"
        assert abs(row.change_pct) < 5, "the same tree on both sides must time alike"
        assert set(row.ops_us) == set(result.ops)
        assert row.aa is not None and abs(row.aa.change_pct) < 5
        assert set(row.context) == {n for n in result.ops if result.parts[n].startswith("SGLang")}


def test_pristine_runs_count_the_points_inside_their_band(tmp_path, monkeypatch):
    """``python -m integrate.e2e --pristine``: each run's record is written as it ends, and the A/A counts are
    over every point of every run."""
    from pipeline.record_io import read_record

    def one(i, verdict, inside):
        aa = layer_verdicts.aa_timing(
            summarize([100.0, 100.1, 99.9]), summarize([100.0, 100.1, 99.9] if inside else [103.0] * 3)
        )
        row = layer_timing(
            "decode",
            8,
            {"baseline": {"layer": [100.0] * 3}, "patched": {"layer": [100.0] * 3}},
            layers=32,
            kv_len=1,
            steps=[],
        )
        return row.model_copy(update={"verdict": verdict, "aa": aa})

    answers = iter(
        [
            E2EResult(ran=True, rows=[one(0, "no change", True), one(1, "no change", True)]),
            E2EResult(ran=True, rows=[one(2, "slower", False), one(3, "no change", True)]),
        ]
    )
    starts: list[int] = []

    def run_layers(*a, **kw):
        starts.append(kw["start"])
        return next(answers)

    monkeypatch.setattr(e2e, "run_layers", run_layers)
    results = e2e.pristine_runs(tmp_path / "sglang", tmp_path / "out", 2)
    assert starts == [0, 1], "each run starts another tree's worker first"
    assert [read_record(E2EResult, tmp_path / "out" / f"pristine-{i}.json") for i in (1, 2)] == results
    assert e2e.inside_counts(results) == {"A/B": (3, 4), "A/A, spread": (3, 4)}


def test_identical_trees_are_called_apart_at_no_more_than_one_point_in_twenty():
    """The verdict band's coverage, checked on recorded A/A runs (tests/fixtures/aa_points.json: 182 points
    of six pristine layer records, three byte-identical trees each). Tree 2 against tree 1 is a change of
    nothing: without the coverage factor the rule called 13 % of the in-context points of those records
    faster or slower; at most 5 % may be, for the layer points and for the in-context points alike."""
    doc = json.loads((pathlib.Path(__file__).parent / "fixtures" / "aa_points.json").read_text())
    flagged: dict[str, list[bool]] = {"layer": [], "context": []}
    for record in doc["records"]:
        for p in record["points"]:
            band = layer_verdicts.verdict_band_pct(
                p["band_without_coverage_pct"], p["aa_change_pct"], p["aa_spread_pct"]
            )
            flagged[p["part"].split(":")[0]].append(judge(p["change_pct"], band) != "no change")
    assert len(flagged["layer"]) == 30 and len(flagged["context"]) == 152
    for part, calls in flagged.items():
        assert sum(calls) <= 0.05 * len(calls), (
            f"{part}: {sum(calls)} of {len(calls)} identical-tree points called apart"
        )
