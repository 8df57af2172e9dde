"""optimize.search: the space from real SGLang source, Kernel Tuner's strategies over it, a search round."""

from __future__ import annotations

import itertools
import pathlib

import pytest

from optimize.cuda_spans import definition_spans, region_texts
from optimize.errors import SearchError
from optimize.features import features_of_regions
from optimize.policy import Decision, plan
from optimize.search.rounds import search_round
from optimize.search.space import Dimension, Space, Unrealizable, build_space, realize
from optimize.search.tuner import choose_strategy, run_search
from optimize.skills import load_skills
from optimize.trajectory import candidate_id
from pipeline.config import Config
from pipeline.run_records import Candidate, Evaluation, Outcome, ShapeTiming

ELEMENTWISE = "kernels/jit/csrc/elementwise"


def real(root: str, name: str) -> tuple[dict[str, str], Space]:
    path = f"{ELEMENTWISE}/{name}"
    data = (pathlib.Path(root) / path).read_bytes()
    regions = region_texts({path: data}, definition_spans(path, data))
    decisions = plan(features_of_regions(regions), load_skills(), [], llm_available=False, limit=256)
    return regions, build_space(decisions)


def points(space: Space):
    names = [d.name for d in space.dimensions]
    for combo in itertools.product(*(d.values for d in space.dimensions)):
        yield dict(zip(names, combo))


@pytest.mark.wheel
def test_fused_add_rmsnorm_space_composes_pdl_bounds_and_unroll(sglang_source):
    regions, space = real(sglang_source.root, "fused_add_rmsnorm.cuh")
    names = [d.name for d in space.dimensions]
    # PDL first (the late wait and the early trigger need it on), the others after; one dimension per
    # transform and target
    assert names[:3] == ["enable_pdl", "pdl_late_wait", "pdl_early_trigger"]
    assert any(n.startswith("set_launch_bounds") and "fused_add_rmsnorm_reg_kernel" in n for n in names)
    # PDL off, always, or for grids of at most 1 / 4 / 16 blocks per SM, each with the kernel's
    # statements guarded by the same test or not: 8 x 48
    assert space.size == len(list(points(space))) == 384
    # a point of three transforms changes the code in three places, each as its transform alone would
    pdl, bounds = space.dimensions[0], next(d for d in space.dimensions if d.transform == "set_launch_bounds")
    unroll = next(d for d in space.dimensions if d.transform == "add_pragma_unroll")
    point = {pdl.name: 1, bounds.name: 1, unroll.name: 1}
    composed, steps = realize(space, point, regions)
    assert [s.skill for s in steps] == ["pdl_enable", bounds.choices[0].skill, unroll.choices[0].skill]
    text = "\n".join(composed.values())
    assert "PDLWaitPrimary" in text and "__launch_bounds__" in text and "#pragma unroll" in text
    assert realize(space, point, regions) == (composed, steps), "a point names the same code every time"
    # every dimension kept is the base itself
    assert realize(space, {}, regions)[0] == regions


@pytest.mark.wheel
def test_a_space_scoped_to_some_skills_leaves_their_followers_out_unless_named(sglang_source):
    """--skills: PDL's late wait and early trigger follow enable_pdl only when their skills are allowed."""
    path = f"{ELEMENTWISE}/fused_add_rmsnorm.cuh"
    data = (pathlib.Path(sglang_source.root) / path).read_bytes()
    regions = region_texts({path: data}, definition_spans(path, data))
    allowed = ("pdl_enable", "pdl_small_grids", "pdl_early_trigger")
    decisions = plan(features_of_regions(regions), load_skills().only(allowed), [], llm_available=False, limit=256)
    space = build_space(decisions, allowed)
    assert [d.name for d in space.dimensions] == ["enable_pdl", "pdl_early_trigger"]
    assert space.size == 8 * 2
    assert [d.name for d in build_space(decisions).dimensions] == ["enable_pdl", "pdl_late_wait", "pdl_early_trigger"]


@pytest.mark.wheel
def test_points_that_do_not_compose_are_unrealizable_not_errors(sglang_source):
    regions, space = real(sglang_source.root, "fused_add_rmsnorm.cuh")
    trigger = next(d for d in space.dimensions if d.transform == "pdl_early_trigger")
    with pytest.raises(Unrealizable, match="pdl_early_trigger"):
        realize(space, {trigger.name: 1}, regions)  # PDL is off in the baseline: nothing to move
    _, act = real(sglang_source.root, "activation.cuh")
    block = next(d for d in act.dimensions if d.transform == "tune_constant")
    bounds = next(d for d in act.dimensions if d.transform == "set_launch_bounds")
    big = next(
        i for i, c in enumerate(block.choices, 1) if c.as_dict["value"] > bounds.choices[0].as_dict["max_threads"]
    )
    with pytest.raises(Unrealizable, match="launch would be refused"):
        realize(act, {block.name: big, bounds.name: 1}, {})


def test_every_transform_has_a_place_in_the_order_and_the_order_is_written_once():
    """A transform missing from ORDER broke build_space on the H200 (ValueError, 2026-12-05): the order
    is now the registry's own, and what it must keep is checked here."""
    from optimize.search.space import ORDER
    from optimize.transforms import registry as transforms

    assert ORDER == tuple(transforms.TRANSFORMS)
    before = [
        ("enable_pdl", "pdl_early_trigger"),  # the early trigger moves the trigger PDL placed
        ("enable_pdl", "pdl_late_wait"),
        ("tune_constant", "set_launch_bounds"),  # constants before the attributes that use them
        ("incremental_divmod", "add_pragma_unroll"),  # the pragma stays next to its loop
        ("streaming_hints", "fast_math"),  # both rename callees; fast math last
    ]
    assert all(ORDER.index(a) < ORDER.index(b) for a, b in before)
    cuda = [t for t in ORDER if not t.startswith("triton_")]
    assert ORDER[: len(cuda)] == tuple(cuda), "Triton's transforms after every CUDA one"


@pytest.mark.wheel
def test_bias_gelu_s_space_carries_its_division_before_unrolling(sglang_source):
    """The sweep's skills on bias_gelu.cuh: incremental_divmod is a dimension, composed with the others."""
    regions, space = real(sglang_source.root, "bias_gelu.cuh")
    names = [d.transform for d in space.dimensions]
    assert "incremental_divmod" in names
    divmod = next(d for d in space.dimensions if d.transform == "incremental_divmod")
    composed, steps = realize(space, {divmod.name: 1}, regions)
    assert [s.skill for s in steps] == ["incremental_divmod"]
    assert "vec_id % row_vecs" not in composed["bias_gelu_tanh_kernel"]


def toy_space(*sizes: int) -> Space:
    from optimize.search.space import Choice

    return Space(
        tuple(
            Dimension(f"d{i}", "tune_constant", tuple(Choice("s", "tune_constant", (("value", v),)) for v in range(n)))
            for i, n in enumerate(sizes)
        )
    )


def test_auto_walks_a_small_space_and_samples_a_large_one():
    assert choose_strategy("auto", toy_space(2, 3).size, 32) == "brute_force"
    assert choose_strategy("auto", toy_space(8, 8).size, 32) == "genetic_algorithm"
    assert choose_strategy("greedy_ils", toy_space(2).size, 32) == "greedy_ils"


def test_brute_force_measures_every_point_in_one_batch():
    space = toy_space(2, 3)  # 3 x 4 = 12 points
    seen: list[dict] = []

    def measure(batch):
        seen.extend(batch)
        return [1.0 + 0.1 * p["d0"] + 0.01 * p["d1"] for p in batch]

    name, trials, batches = run_search(space, measure, strategy="auto", population=16, max_evals=32, seed=1)
    assert name == "brute_force" and batches == [12] and len(trials) == 12
    assert sorted(map(str, seen)) == sorted(map(str, ({"d0": a, "d1": b} for a in range(3) for b in range(4))))


def test_genetic_algorithm_batches_are_populations_within_the_evaluation_budget_and_reproducible():
    space = toy_space(6, 6, 6)  # 343 points

    def run(seed):
        asked: list[dict] = []

        def measure(batch):
            asked.extend(batch)
            return ["failed" if p["d2"] == 3 else 1.0 + abs(p["d0"] - 2) + abs(p["d1"] - 5) for p in batch]

        name, trials, batches = run_search(space, measure, strategy="auto", population=8, max_evals=24, seed=seed)
        return name, trials, batches, asked

    name, trials, batches, asked = run(7)
    assert name == "genetic_algorithm"
    assert all(b <= 8 for b in batches) and sum(batches) <= 24 and len(batches) >= 2
    assert any(t.cost is None for t in trials) or all(p["d2"] != 3 for p in asked)
    assert run(7)[3] == asked, "same seed, same points"


@pytest.mark.parametrize("sizes", [(6, 6, 6), (40,)])
def test_a_restriction_keeps_points_that_cannot_be_made_out_of_every_batch(sizes):
    """On the H200 (2026-12-02) 10 of fused_add_rmsnorm's 32 drawn points did not compose and its
    populations of 16 built 8 candidates each. The restriction is Kernel Tuner's, so no batch holds
    an invalid point, the batches stay full, and ``auto`` judges the space by its valid points."""
    space = toy_space(*sizes)
    first = space.dimensions[0].name

    def valid(point):
        return point[first] % 2 == 0  # every odd value of the first dimension cannot be made

    asked: list[dict] = []

    def measure(batch):
        asked.extend(batch)
        return [1.0 + sum(p.values()) * 0.01 for p in batch]

    name, trials, batches = run_search(
        space, measure, strategy="auto", population=8, max_evals=24, seed=3, valid=valid
    )  # fmt: skip
    assert asked and all(valid(p) for p in asked)
    assert set(asked[0]) == {d.name for d in space.dimensions}
    if len(sizes) > 1:
        assert name == "genetic_algorithm" and batches[0] == 8, "the first population is all valid points"
    else:  # 41 points, 21 valid (the base among them): 20 new ones fit the round's 24
        assert name == "brute_force" and batches == [21] and len(trials) == 21


def test_unknown_strategy_names_the_known_ones():
    with pytest.raises(SearchError, match="brute_force"):
        run_search(toy_space(2), lambda b: [1.0] * len(b), strategy="nope", population=4, max_evals=4, seed=0)


def timing(speedup: float, spread: float = 1.0) -> ShapeTiming:
    return ShapeTiming(
        label="m[T=1]",
        sizes={"T": 1},
        dtype="bf16",
        time_us=10.0 / speedup,
        spread_pct=spread,
        gbps=1.0,
        pct_of_copy_bw=1.0,
        time_over_floor=1.5,
        baseline_us=10.0,
        speedup=speedup,
    )


def decision(skill: str, transform: str, **params) -> Decision:
    return Decision(
        skill=skill, version=1, title=skill, verdict="proposed", params=params, mode="transform", transform=transform
    )


KERNEL = (
    "__global__ void k(float* o, const float* x, int n) {\n  for (int i = 0; i < 4; ++i) { o[i] = expf(x[i]); }\n}\n"
)
LAUNCHER = "void launch(float* o, const float* x, int n, cudaStream_t s) {\n  constexpr int kBlockSize = 256;\n  k<<<1, kBlockSize, 0, s>>>(o, x, n);\n}\n"


def base_candidate() -> Candidate:
    regions = {"k": KERNEL, "launch": LAUNCHER}
    return Candidate(op_id="demo", id=candidate_id(regions), parent=None, regions=regions)


def test_a_search_round_records_every_member_and_wins_with_the_fastest_that_regresses_nowhere(tmp_path):
    base = base_candidate()
    decisions = [
        decision("tune_block_size", "tune_constant", name="kBlockSize", owner="launch", value=v) for v in (128, 512)
    ] + [decision("unroll_constant_loops", "add_pragma_unroll", factor=0, runtime_loops=False)]
    measured: list[list[str]] = []

    def measure(cands):
        measured.append([c.id for c in cands])
        out = []
        for c in cands:
            text = "".join(c.regions.values())
            fast = 1.3 if "kBlockSize = 512" in text else 1.1 if "kBlockSize = 128" in text else 1.0
            fast *= 1.05 if "#pragma unroll" in text else 1.0
            # the 512 + unroll point is fastest overall but regresses at one shape
            regress = "kBlockSize = 512" in text and "#pragma unroll" in text
            timings = [timing(fast), timing(0.5 if regress else fast)]
            out.append(Evaluation(op_id="demo", candidate=c.id, outcome=Outcome.ok, timings=timings))
        return out

    config = Config.model_validate({"work_dir": str(tmp_path)})
    found = search_round(base, None, decisions, config=config, coder="offline", measure=measure, seed=1)
    assert found.strategy == "brute_force" and len(measured) == 1
    assert len(found.members) == 5  # 3 x 2 points, less the base
    assert len({m.candidate.id for m in found.members}) == 5
    attempts, winner = found.outcome()
    assert [a.candidate for a in attempts] == [m.candidate.id for m in found.members]
    assert winner is not None and [s.skill for s in winner.candidate.steps] == ["tune_block_size"]
    assert winner.candidate.steps[0].params["value"] == 512
    assert winner.candidate.parent == base.id and winner.candidate.coder == "offline:search"
    # a second search over the same space with a measure that knows the members reads nothing new
    again = search_round(
        base,
        None,
        decisions,
        config=config,
        coder="offline",
        measure=lambda cands: [next(m.evaluation for m in found.members if m.candidate.id == c.id) for c in cands],
        seed=1,
    )
    assert [m.candidate.id for m in again.members] == [m.candidate.id for m in found.members]


def test_a_budget_spent_before_a_population_ends_the_search_with_what_was_measured(tmp_path):
    base = base_candidate()
    decisions = [decision("tune_block_size", "tune_constant", name="kBlockSize", owner="launch", value=128)]
    config = Config.model_validate({"work_dir": str(tmp_path)})
    found = search_round(
        base, None, decisions, config=config, coder="offline", measure=lambda c: [None] * len(c), seed=1
    )
    assert found.budget_spent and not found.members and found.winner is None


def test_a_round_with_nothing_to_search_says_why_each_allowed_skill_was_rejected(tmp_path):
    """moe.topk_sigmoid, H200 2026-12-05: the round's record read "search () over 0 points over 0
    dimensions: ; 0 candidates in 0 batch(es) []"; it now names each allowed skill and why not."""
    rejected = [
        Decision(skill=s, version=1, title=s, verdict="rejected", reasons=[why])
        for s, why in (
            ("pdl_enable", "the launch already enables PDL"),
            ("fast_math_intrinsics", "no libm call in the kernel"),
            ("tune_block_size", "not among the run's skills"),
        )
    ]
    config = Config.model_validate(
        {"work_dir": str(tmp_path), "search": {"skills": ["pdl_enable", "fast_math_intrinsics"]}}
    )
    found = search_round(base_candidate(), None, rejected, config=config, coder="offline", measure=lambda c: [], seed=1)
    attempts, winner = found.outcome()
    assert winner is None and [a.status for a in attempts] == ["not_applicable"]
    assert attempts[0].detail == (
        "nothing to search: no allowed skill proposes a change to this op's code (pdl_enable: the launch "
        "already enables PDL; fast_math_intrinsics: no libm call in the kernel)"
    )
    found = search_round(base_candidate(), None, [], config=config, coder="offline", measure=lambda c: [], seed=1)
    assert found.summary().endswith("(the policy made no proposal)")


@pytest.mark.wheel
@pytest.mark.parametrize("restrict_points", [512, 0])
def test_a_real_search_round_builds_only_points_that_compose(sglang_source, tmp_path, restrict_points):
    """fused_add_rmsnorm's 384 points, cut by making each point (512) or by pairs of choices (0,
    as a space too large to make point by point is): every candidate measured is a real one,
    and the first population is full."""
    regions, _ = real(sglang_source.root, "fused_add_rmsnorm.cuh")
    decisions = plan(features_of_regions(regions), load_skills(), [], llm_available=False, limit=256)
    base = Candidate(op_id="layernorm.fused_add_rmsnorm", id=candidate_id(regions), parent=None, regions=regions)
    batches: list[int] = []

    def measure(cands):
        batches.append(len(cands))
        return [
            Evaluation(op_id=base.op_id, candidate=c.id, outcome=Outcome.ok, timings=[timing(1.0 + 0.001 * i)])
            for i, c in enumerate(cands)
        ]

    config = Config.model_validate(
        {"work_dir": str(tmp_path), "search": {"restrict_points": restrict_points, "evals_per_round": 16}}
    )
    found = search_round(base, None, decisions, config=config, coder="offline", measure=measure, seed=5)
    # full: 16 draws, each a point that composes; the all-keep point (the base, never rebuilt) may be one
    assert found.strategy == "one choice at a time then genetic_algorithm" and sum(batches) >= 15
    assert all(len(m.point) == 1 for m in found.members[: batches[0]]), "the first batch: each choice alone"
    space = found.space
    for member in found.members:  # each is its point's candidate, made again here
        assert realize(space, member.point, regions)[0] == member.candidate.regions


def test_a_point_whose_edits_all_land_in_another_ops_regions_is_not_measured(tmp_path):
    """With ``launch`` another op's launcher (optimize.reach), the block-size points edit nothing
    of this op's: they do not compose and are never built; the unroll points keep their kernel edit."""
    from optimize.reach import Foreign

    base = base_candidate()
    decisions = [decision("tune_block_size", "tune_constant", name="kBlockSize", owner="launch", value=128)] + [
        decision("unroll_constant_loops", "add_pragma_unroll", factor=0, runtime_loops=False)
    ]
    measured: list[Candidate] = []

    def measure(cands):
        measured.extend(cands)
        return [Evaluation(op_id="demo", candidate=c.id, outcome=Outcome.ok, timings=[timing(1.1)]) for c in cands]

    config = Config.model_validate({"work_dir": str(tmp_path)})
    found = search_round(
        base,
        None,
        decisions,
        config=config,
        coder="offline",
        measure=measure,
        seed=1,
        foreign=Foreign(frozenset({"launch"})),
    )
    assert measured, "the unroll point is measured"
    assert all(c.regions["launch"] == LAUNCHER for c in measured), "another op's region is never changed"
    # the block-size dimension edits only ``launch``: it is left out of the space, and the round says so
    assert [d.transform for d in found.space.dimensions] == ["add_pragma_unroll"]
    assert len(found.foreign) == 1 and "never runs" in found.summary()


@pytest.mark.wheel
def test_silu_and_mul_searches_no_dimension_of_a_kernel_it_never_launches(sglang_source, tmp_path):
    """activation.cuh on the H200 (2026-12-05): silu_and_mul's 2560-point space held launch bounds of
    ``act_kernel`` (relu2's), 4x its real size. The round leaves that dimension out, keeps its own
    kernel's, and measures the same candidates a draw would make."""
    from optimize.reach import foreign_code

    path = "kernels/jit/csrc/elementwise/activation.cuh"
    data = (pathlib.Path(sglang_source.root) / path).read_bytes()
    regions = region_texts({path: data}, definition_spans(path, data))
    others = foreign_code(regions, ["ActivationKernel<bf16_t, true>::run_activation"])
    decisions = plan(features_of_regions(regions), load_skills(), [], llm_available=False, limit=256)
    full = build_space(decisions)
    assert any("act_kernel" in d.name for d in full.dimensions), "SGLang changed: pick another shared file"
    base = Candidate(op_id="activation.silu_and_mul", id=candidate_id(regions), parent=None, regions=regions)
    config = Config.model_validate({"work_dir": str(tmp_path), "search": {"evals_per_round": 8}})
    found = search_round(
        base, None, decisions, config=config, coder="offline", measure=lambda c: [None] * len(c), seed=1, foreign=others
    )
    names = [d.name for d in found.space.dimensions]
    assert not any("act_kernel" in n for n in names) and any("act_and_mul_kernel" in n for n in names)
    assert found.foreign and all("act_kernel" in n for n in found.foreign)
    assert found.space.size * 4 == full.size


@pytest.mark.wheel
def test_a_sampled_space_is_measured_one_choice_at_a_time_first_then_the_winners_composed(sglang_source, tmp_path):
    """fused_add_rmsnorm (384 points): its first batch is each choice alone, PDL's first (the only
    offline win on the H200 so far was pdl_enable alone); the next batch starts from the choices
    that beat the base, composed."""
    regions, _ = real(sglang_source.root, "fused_add_rmsnorm.cuh")
    decisions = plan(features_of_regions(regions), load_skills(), [], llm_available=False, limit=256)
    base = Candidate(op_id="layernorm.fused_add_rmsnorm", id=candidate_id(regions), parent=None, regions=regions)
    speedup = {"pdl_enable": 1.07, "launch_bounds": 1.04}
    batches: list[list[str]] = []

    def measure(cands):
        batches.append([c.skill or "" for c in cands])
        return [
            Evaluation(
                op_id=base.op_id, candidate=c.id, outcome=Outcome.ok, timings=[timing(speedup.get(c.skill or "", 0.97))]
            )
            for c in cands
        ]

    config = Config.model_validate({"work_dir": str(tmp_path), "search": {"population": 8, "evals_per_round": 16}})
    found = search_round(base, None, decisions, config=config, coder="offline", measure=measure, seed=3)
    first = batches[0]
    assert len(first) == 8 and first[0] == "pdl_enable" and all("+" not in skill for skill in first)
    assert "pdl_enable+launch_bounds" in batches[1], batches[1]
    assert found.winner is not None and found.winner.candidate.skill in ("pdl_enable+launch_bounds", "pdl_enable")
    # off: the genetic algorithm's own random first draws
    off = Config.model_validate(
        {"work_dir": str(tmp_path), "search": {"population": 8, "evals_per_round": 16, "singles_first": False}}
    )
    batches.clear()
    assert search_round(base, None, decisions, config=off, coder="offline", measure=measure, seed=3).strategy == (
        "genetic_algorithm"
    )
    assert any("+" in skill for skill in batches[0])
    # a budget spent before the singles are measured: no draw follows them
    spent = search_round(
        base, None, decisions, config=config, coder="offline", measure=lambda c: [None] * len(c), seed=3
    )
    assert spent.budget_spent and spent.batches == [8] and not spent.members


def test_every_member_module_of_the_transforms_package_is_registered_once():
    """A transform is defined in its member module (edit, targets, spec); the registry's MEMBERS is the
    one place that orders them. A member left out of MEMBERS would never be planned or searched, and
    a spec registered twice (or a name reused) would shadow another."""
    import ast
    import importlib
    import pathlib
    import pkgutil

    import optimize.transforms as package
    from optimize.transforms import registry

    machinery = {"edits", "spec", "registry", "triton_edits"}
    members = {m.name for m in pkgutil.iter_modules(package.__path__)} - machinery
    assert {m.__name__.rpartition(".")[2] for m in registry.MEMBERS} == members
    specs = [spec for module in registry.MEMBERS for spec in module.SPECS]
    assert len({s.name for s in specs}) == len(specs) == len(registry.TRANSFORMS)
    for name in machinery - {"registry"}:  # the machinery defines no transform
        assert not hasattr(importlib.import_module(f"optimize.transforms.{name}"), "SPECS"), name
    # the package's __init__ imports nothing: optimize.features sits below the members and above cuda_sites
    init = ast.parse(pathlib.Path(str(package.__file__)).read_text(encoding="utf-8"))
    assert not [n for n in ast.walk(init) if isinstance(n, (ast.Import, ast.ImportFrom))]
