"""optimize.skills: the rule language, every skill's rule on crafted features, and skill-file validation."""

from __future__ import annotations

import pathlib

import pytest

from optimize.features import Features, ProfileFacts, StaticFeatures
from optimize.skills import SKILL_DIR, Rule, RuleError, SkillError, load_skill, load_skills

# --------------------------------------------------------------------------- the rule language

VALUES = {
    "memory_bound": True,
    "small_batch": None,
    "load_bytes": 8,
    "block_size": None,
    "pct_of_copy_bw": 62.5,
    "grid_kind": "per_row",
    "reduction": False,
    "registers": 40,
}
KNOWN = {
    "memory_bound": "bool",
    "small_batch": "bool",
    "load_bytes": "num",
    "block_size": "num",
    "pct_of_copy_bw": "num",
    "grid_kind": "str",
    "reduction": "bool",
    "registers": "num",
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("memory_bound and load_bytes < 16", True),
        ("memory_bound and load_bytes >= 16", False),
        ("not memory_bound or reduction", False),
        ("load_bytes * 2 == 16 and pct_of_copy_bw / 2 > 31", True),
        ("-load_bytes + 10 == 2", True),
        ("(memory_bound or reduction) and not (load_bytes != 8)", True),
        ('grid_kind == "per_row" and grid_kind != "persistent"', True),
        ("registers - 8 * 5 == 0 and 1.5e1 > 14", True),
        ("true and not false", True),
        # Kleene logic: unknown decides nothing unless the other side does
        ("small_batch", None),
        ("not small_batch", None),
        ("small_batch and memory_bound", None),
        ("small_batch and reduction", False),
        ("small_batch or memory_bound", True),
        ("small_batch or reduction", None),
        ("block_size > 128", None),
        ("block_size + 1 > 0 or load_bytes == 8", True),
        ("load_bytes / 0 > 1", None),
    ],
)
def test_rule_evaluation(text, expected):
    assert Rule(text, known=KNOWN).evaluate(VALUES) is expected


@pytest.mark.parametrize(
    ("text", "message", "column"),
    [
        ("memory_bound and load_byte < 16", "unknown feature 'load_byte' (did you mean load_bytes", 18),
        ("memory_bound and (load_bytes < 16", "expected ')' but found 'end of rule'", 34),
        ("memory_bound and", "expected a value", 17),
        ("load_bytes < 16 reduction", "unexpected 'reduction'", 17),
        ("1 < load_bytes < 3", "comparisons cannot be chained", 16),
        ("memory_bound && reduction", "unexpected character '&'", 14),
        ("memory_bound + 1 > 0", "'+' needs a num, got a bool", 1),
        ("load_bytes and memory_bound", "'and' needs a condition, got a num", 1),
        ("not load_bytes", "'not' needs a condition, got a num", 5),
        ("grid_kind < 3", "'<' needs a num, got a str", 1),
        ("memory_bound == 1", "'==' compares a bool with a num", 14),
        ('grid_kind == "per_rows"', "grid_kind is never 'per_rows'", 14),
        ("load_bytes", "the rule is a num, not a condition", 1),
        ("   ", "empty rule", None),
        ('grid_kind == "unterminated', "unexpected character '\"'", 14),
    ],
)
def test_rule_errors_name_the_problem_and_the_column(text, message, column):
    with pytest.raises(RuleError) as info:
        Rule(text, known=KNOWN)
    err = info.value
    assert message in err.message
    if column is not None:
        assert f"at column {column}" in err.message
        assert err.detail.splitlines()[1].index("^") == column + 1  # caret under the column, after the indent
        assert "and/or/not" in err.fix


def test_rule_reports_names_and_missing_values():
    rule = Rule("memory_bound and load_bytes < 16", known=KNOWN)
    assert rule.names == {"memory_bound", "load_bytes"}
    assert rule.explain({"memory_bound": True, "load_bytes": None}) == "load_bytes=?, memory_bound=True"
    with pytest.raises(RuleError, match=r"no value given for \['load_bytes'\]"):
        rule.evaluate({"memory_bound": True})


def test_default_rules_know_every_feature_name():
    flat = Features(static=StaticFeatures()).flat()
    for name in flat:
        Rule(f"{name} == {name}")  # each name parses and type-checks against itself


# --------------------------------------------------------------------------- the library

REQUIRED_TOPICS = {
    "coalesced_access",
    "vector_loads_128",
    "loads_in_flight",
    "items_per_thread",
    "keep_in_registers",
    "hoist_loop_invariants",
    "fast_math_intrinsics",
    "warp_shuffle_reduction",
    "single_barrier_block_reduce",
    "tune_block_size",
    "grid_2d_rows",
    "persistent_grid",
    "occupancy_min_blocks",
    "launch_bounds",
    "reduce_register_pressure",
    "smem_tiling",
    "smem_bank_padding",
    "pdl_enable",
    "pdl_early_trigger",
    "cp_async_prefetch",
    "tma_bulk_row_copy",
    "split_row_reduction",
    "fuse_launches",
    "small_batch_latency",
    "warp_per_row",
    "streaming_cache_hints",
    "vector_width_cap_hopper",
    "index_math_32bit",
    "reduce_integer_division",
}


def test_library_loads_and_covers_the_required_topics():
    lib = load_skills()
    assert len(lib) >= 25
    assert REQUIRED_TOPICS <= set(lib.ids())
    for skill in lib:
        assert (SKILL_DIR / f"{skill.id}.toml").is_file()
        assert skill.version >= 1 and skill.method.strip() and skill.risks
        low, high = skill.effect.speedup
        assert 0.5 <= low <= high
        assert skill.title in skill.prompt_text() and skill.risks[0] in skill.prompt_text()
    mechanical = {s.id: s.transform for s in lib if s.mechanical}
    assert mechanical["pdl_enable"] == "enable_pdl" and mechanical["launch_bounds"] == "set_launch_bounds"
    assert len(mechanical) >= 8
    with pytest.raises(SkillError, match="did you mean launch_bounds"):
        lib.get("launch_bound")


def base_flat(**overrides):
    """A neutral feature set: nothing found, nothing measured; memory_bound as the caller says."""
    flat = Features(static=StaticFeatures(), profile=ProfileFacts()).flat()
    flat.update(
        memory_bound=True,
        time_over_floor=1.0,
        pct_of_copy_bw=95.0,
        min_time_us=50.0,
        registers=32,
        spills=0,
        stack_bytes=0,
        occupancy=1.0,
        small_batch=False,
    )
    flat.update(overrides)
    return flat


# skill id -> (features under which it applies, features under which it does not)
CASES: dict[str, tuple[dict, dict]] = {
    "coalesced_access": ({"pct_of_copy_bw": 30.0}, {"pct_of_copy_bw": 90.0}),
    "vector_loads_128": ({"vector_loads": False}, {"vector_loads": True, "load_bytes": 16}),
    "vector_width_cap_hopper": ({"max_load_bytes": 32}, {"max_load_bytes": 16}),
    "loads_in_flight": (
        {"pct_of_copy_bw": 60.0, "time_over_floor": 1.5},
        {"pct_of_copy_bw": 60.0, "time_over_floor": 1.05},
    ),
    "items_per_thread": ({"elementwise": True, "per_item_grid": True}, {"elementwise": False, "per_item_grid": True}),
    "unroll_constant_loops": ({"loops_missing_unroll": 2}, {"loops_missing_unroll": 0}),
    "unroll_grid_stride_loop": (
        {"grid_stride_loop": True, "runtime_loops": 1},
        {"grid_stride_loop": False, "runtime_loops": 1},
    ),
    "keep_in_registers": ({"reduction": True, "time_over_floor": 1.6}, {"reduction": True, "time_over_floor": 1.1}),
    "hoist_loop_invariants": ({"loop_invariant_loads": 1}, {"loop_invariant_loads": 0}),
    "fast_math_intrinsics": ({"fast_math_swappable": 1}, {"float_divisions": 1, "reciprocal_divisions": 1}),
    "exact_reciprocal": ({"reciprocal_divisions": 1}, {"reciprocal_divisions": 0}),
    "warp_shuffle_reduction": (
        {"shared_memory": True, "syncthreads": 1},
        {"shared_memory": True, "syncthreads": 1, "warp_reduce": True},
    ),
    "single_barrier_block_reduce": ({"cta_reduce": True, "syncthreads": 2}, {"cta_reduce": True, "syncthreads": 1}),
    "tune_block_size": ({"tunable_block_size": True}, {"tunable_block_size": False}),
    "grid_2d_rows": (
        {"int_divmod_runtime": 2, "per_item_grid": True},
        {"int_divmod_runtime": 0, "per_item_grid": True},
    ),
    "persistent_grid": ({"per_row_grid": True}, {"per_row_grid": True, "persistent_grid": True}),
    "launch_bounds": ({"kernels_without_launch_bounds": 1}, {"kernels_without_launch_bounds": 0}),
    "occupancy_min_blocks": ({"launch_bounds_min_blocks": False}, {"launch_bounds_min_blocks": True}),
    "reduce_register_pressure": ({"spills": 4}, {"spills": 0}),
    "smem_tiling": ({"pct_of_copy_bw": 20.0}, {"pct_of_copy_bw": 20.0, "shared_memory": True}),
    "smem_bank_padding": ({"smem_2d_arrays": 1}, {"smem_2d_arrays": 0}),
    "pdl_enable": ({"pdl_off": True}, {"pdl_off": False}),
    "pdl_small_grids": ({"pdl_off": True}, {"pdl_off": False}),
    "pdl_early_trigger": (
        {"pdl_launch": True, "pdl_trigger_at_end": True},
        {"pdl_launch": False, "pdl_trigger_at_end": True},
    ),
    "pdl_trigger_small_grids": (
        {"pdl_launch": True, "pdl_trigger_at_end": True},
        {"pdl_launch": True, "pdl_trigger_at_end": False},
    ),
    "pdl_prologue_overlap": (
        {"pdl_wait": True, "pdl_launch": True, "small_batch": True},
        {"pdl_wait": True, "pdl_launch": True},
    ),
    "cp_async_prefetch": ({"grid_stride_loop": True}, {"grid_stride_loop": True, "cp_async": True}),
    "tma_bulk_row_copy": (
        {"reduction": True, "pct_of_copy_bw": 50.0},
        {"reduction": True, "pct_of_copy_bw": 50.0, "tma": True},
    ),
    "split_row_reduction": ({"reduction": True, "small_batch": True}, {"reduction": True}),
    "fuse_launches": ({"launches_per_entry": 2}, {"launches_per_entry": 1}),
    "warp_per_row": (
        {"reduction": True, "per_row_grid": True},
        {"reduction": True, "per_row_grid": True, "warp_per_row": True},
    ),
    "small_batch_latency": ({"small_batch": True, "min_time_us": 4.0}, {"small_batch": True, "min_time_us": 40.0}),
    "streaming_cache_hints": ({"cache_hints": False, "typed_accesses": 4}, {"cache_hints": True, "typed_accesses": 4}),
    "index_math_32bit": ({"int64_index": True}, {"int64_index": False}),
    "reduce_integer_division": ({"int_divmod_runtime": 1}, {"int_divmod_runtime": 0}),
    "incremental_divmod": ({"strided_divmod": 1}, {"strided_divmod": 0}),
    "grid_waves": ({"grid_stride_loop": True}, {"grid_stride_loop": True, "persistent_grid": True}),
    "specialize_size_dispatch": ({"size_dispatch": 1}, {"size_dispatch": 0}),
    "packed_conversions": ({"elementwise": True}, {"elementwise": True, "packed_casts": True}),
}


def test_every_skill_has_applicability_cases():
    assert set(CASES) == set(load_skills().ids()), "add a (applies, does not apply) case for each new skill"


@pytest.mark.parametrize("skill_id", sorted(CASES))
def test_skill_rule_applies_and_does_not_apply(skill_id):
    skill = load_skills().get(skill_id)
    applies, does_not = CASES[skill_id]
    assert skill.applies(base_flat(**applies)) is True, skill.rule.explain(base_flat(**applies))
    assert skill.applies(base_flat(**does_not)) is False, skill.rule.explain(base_flat(**does_not))


def test_memory_bound_rules_are_undecided_without_the_measurement():
    lib = load_skills()
    flat = base_flat(pct_of_copy_bw=None, time_over_floor=None)
    assert lib.get("coalesced_access").applies(flat) is None
    assert lib.get("loads_in_flight").applies(flat) is None
    assert lib.get("coalesced_access").applies(base_flat(pct_of_copy_bw=None, memory_bound=False)) is False


# --------------------------------------------------------------------------- skill-file validation

GOOD = """id = "{id}"
version = 1
title = "A test skill"
category = "memory"
applies_when = "{rule}"
method = "do it"
risks = ["it may break"]
{extra}
[effect]
summary = "faster"
speedup = [1.0, 1.2]
{grid}
"""


def write(
    tmp_path: pathlib.Path,
    skill_id: str = "demo",
    rule: str = "memory_bound",
    extra: str = "",
    grid: str = "",
    name: str | None = None,
) -> pathlib.Path:
    path = tmp_path / f"{name or skill_id}.toml"
    path.write_text(GOOD.format(id=skill_id, rule=rule, extra=extra, grid=grid))
    return path


def test_a_good_skill_file_loads(tmp_path):
    skill = load_skill(
        write(tmp_path, extra='transform = "tune_constant"', grid='[grid]\nrole = ["block_size"]\nvalue = [64]')
    )
    assert (
        skill.id == "demo"
        and skill.transform == "tune_constant"
        and skill.grid == {"role": ["block_size"], "value": [64]}
    )
    assert load_skills(tmp_path).ids() == ["demo"]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"name": "other"}, SkillError, "differs from the file name"),
        ({"rule": "memory_bound and load_byte < 16"}, RuleError, "unknown feature 'load_byte'"),
        ({"extra": 'transform = "vectorize"'}, SkillError, "unknown transform 'vectorize'"),
        (
            {"extra": 'transform = "tune_constant"', "grid": "[grid]\nwidth = [4]"},
            SkillError,
            "grid keys ['width'] are not parameters",
        ),
        ({"grid": "[grid]\nfactor = [2]"}, SkillError, "a grid needs a transform"),
        ({"extra": 'transform = "add_pragma_unroll"', "grid": "[grid]\nfactor = []"}, SkillError, "non-empty list"),
        ({"extra": "colour = 3"}, SkillError, "colour"),
        ({"skill_id": "Bad-Id", "name": "Bad-Id"}, SkillError, "lower_snake_case"),
    ],
)
def test_bad_skill_files_fail_with_the_file_and_the_reason(tmp_path, kwargs, error, message):
    path = write(tmp_path, **kwargs)
    with pytest.raises(error) as info:
        load_skill(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_bad_toml_and_empty_folders(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('id = "bad"\nversion = ')
    with pytest.raises(SkillError, match="not valid TOML"):
        load_skill(bad)
    with pytest.raises(SkillError, match="no skill files"):
        load_skills(tmp_path / "empty")
    speed = write(tmp_path, skill_id="speedy")
    speed.write_text(speed.read_text().replace("[1.0, 1.2]", "[1.5, 1.2]"))
    with pytest.raises(SkillError, match="low <= high"):
        load_skill(speed)


def test_every_skill_carries_reviewer_text():
    """The PR quotes these (integrate.pr), never the planner's score line: why it helps, why it is safe, what it assumes."""
    from optimize.skills import load_skills

    for skill in load_skills():
        assert skill.rationale.strip() and skill.safety.strip() and skill.assumes.strip(), skill.id
        assert "priority" not in skill.rationale and "score" not in skill.rationale, skill.id
