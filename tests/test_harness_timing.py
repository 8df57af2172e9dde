"""Timing statistics and the rotation plan (optimize.harness.timing), pure Python."""

from __future__ import annotations

import math

import pytest

from optimize.harness import timing


def test_percentile_interpolates_linearly():
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert timing.percentile(values, 50) == 3.0
    assert timing.percentile(values, 0) == 1.0 and timing.percentile(values, 100) == 5.0
    assert timing.percentile(values, 10) == pytest.approx(1.4)
    assert timing.percentile([7.0], 90) == 7.0
    with pytest.raises(ValueError):
        timing.percentile([], 50)


def test_spread_is_p90_minus_p10_over_median():
    stats = timing.summarize([10.0] * 8 + [9.0, 11.0])
    assert stats.median == 10.0 and stats.n == 10
    assert stats.spread_pct == pytest.approx((stats.p90 - stats.p10) / 10.0 * 100)
    assert timing.summarize([4.0, 4.0, 4.0]).spread_pct == 0.0


def test_verdict_uses_the_threshold_both_ways():
    assert timing.verdict(100.0, 90.0, 3.0) == "faster"
    assert timing.verdict(100.0, 98.0, 3.0) == "no_change"
    assert timing.verdict(100.0, 103.5, 3.0) == "slower"
    assert timing.verdict(100.0, 103.5, 5.0) == "no_change"


def test_threshold_is_the_largest_of_noise_and_spreads():
    assert timing.threshold_pct(3.0, 1.0, 2.0) == 3.0
    assert timing.threshold_pct(3.0, 4.5, 1.0) == 4.5
    assert timing.threshold_pct(3.0, math.inf) == 3.0


def test_geomean():
    assert timing.geomean([2.0, 0.5]) == pytest.approx(1.0)
    assert timing.geomean([1.1, 1.1, 1.1]) == pytest.approx(1.1)
    assert math.isnan(timing.geomean([]))


L2 = 60 * 2**20


def test_buffer_sets_cover_three_times_l2():
    for per_set in (86_016, 1 << 20, 7 << 20, 59 << 20):
        sets = timing.buffer_sets(per_set, L2, 3.0)
        assert sets * per_set >= 3 * L2
        assert (sets - 1) * per_set < 3 * L2  # no more than needed
    assert timing.buffer_sets(1 << 30, L2, 3.0) == 1
    assert timing.buffer_sets(16, L2, 3.0) == timing.MAX_SETS
    assert timing.buffer_sets(0, L2, 3.0) == 1


def test_calls_per_graph_uses_every_set():
    assert timing.calls_per_graph(20, 3) == 20
    assert timing.calls_per_graph(20, 700) == 700


@pytest.mark.parametrize("sets", [2, 3, 5, 64])
@pytest.mark.parametrize("graph_calls", [1, 20, 21])
def test_no_call_reads_the_inputs_the_call_before_on_its_buffers_read(sets, graph_calls):
    """Within a replay and from one replay to the next, consecutive calls on one buffer set read the two
    input images in turn (odd sets hold the second image: inputs.load_sets)."""
    calls = timing.rotated_calls(graph_calls, sets)
    assert calls >= graph_calls and calls % sets == 0 and (calls // sets) % 2 == 0
    order = timing.rotation(calls, sets) * 2  # two replays back to back
    image = lambda q: q % 2  # noqa: E731 - the image set q was loaded with
    for s in range(sets):
        uses = [image(q) for out, q in order if out == s]
        assert all(a != b for a, b in zip(uses, uses[1:])), (s, uses)


def test_a_kernel_that_skips_when_its_output_holds_a_number_is_caught_by_the_rotation():
    """The cheat of tests/adversarial/act_skip_when_answered.cuh, simulated over the schedule: the timed
    graph replayed after its buffers are reloaded (outputs poisoned) leaves, in some set, the answer to
    other inputs than the baseline's last call read. With every call reading one image (the schedule
    before the rotation) it leaves exactly the baseline's answers and passes."""

    def final_outputs(order, sets, skip):
        out = [None] * sets  # None: poison
        for s, q in order:
            answer = f"f(image {q % 2})"
            if not (skip and out[s] is not None):
                out[s] = answer
        return out

    sets = 4
    order = timing.rotation(timing.rotated_calls(20, sets), sets)
    assert final_outputs(order, sets, skip=True) != final_outputs(order, sets, skip=False)
    before = [(i % sets, 0) for i in range(timing.calls_per_graph(20, sets))]
    assert final_outputs(before, sets, skip=True) == final_outputs(before, sets, skip=False)


def test_two_sets_are_partners_and_an_odd_last_set_reads_its_neighbour():
    assert [timing.input_partner(s, 4) for s in range(4)] == [1, 0, 3, 2]
    assert [timing.input_partner(s, 3) for s in range(3)] == [1, 0, 1]
    assert timing.input_partner(0, 1) == 0  # one set: nothing to rotate with (the worker notes it)


# ---------------------------------------------------------------------------- validating what was timed


def test_every_buffer_set_is_validated_when_there_are_few():
    import random

    assert timing.sets_to_validate(1, random.Random(1)) == [0]
    assert timing.sets_to_validate(timing.MAX_VALIDATED_SETS, random.Random(1)) == list(
        range(timing.MAX_VALIDATED_SETS)
    )
    assert timing.sets_to_validate(0, random.Random(1)) == []


def test_many_buffer_sets_are_sampled_afresh_with_the_first_two_and_the_last_always_in():
    import random

    draws = [timing.sets_to_validate(4096, random.Random(seed)) for seed in range(20)]
    for chosen in draws:
        assert len(chosen) == timing.MAX_VALIDATED_SETS == len(set(chosen))
        assert chosen == sorted(chosen) and all(0 <= i < 4096 for i in chosen)
        assert {0, 1, 4095} <= set(chosen)  # the first call, the first one a "skip after the first" skips, the last
    assert len({tuple(c) for c in draws}) > 1  # a fresh sample each evaluation, not a fixed pattern
    assert timing.sets_to_validate(10, random.Random(3), limit=2) == [0, 1]


def test_set_uses_counts_the_calls_of_one_replay_on_each_set():
    assert [timing.set_uses(i, 3, 20) for i in range(3)] == [7, 7, 6]
    assert sum(timing.set_uses(i, 7, 20) for i in range(7)) == 20
    assert timing.set_uses(0, 1, 20) == 20 and timing.set_uses(5, 4096, 4096) == 1


def test_a_timed_failure_names_shape_dtype_buffer_set_and_the_comparison():
    reason = "out[0, 7] was never written (still holds the NaN poison written before the run); expected 1.5"
    text = timing.timed_failure("llama-8b T=8", "bf16", 1, 37, 37, "candidate", reason)
    assert text.startswith("timed shape llama-8b T=8 bf16, buffer set 1 of 37 ")
    assert "CUDA-graph timing replay, 37 calls" in text and "candidate's graph" in text
    assert text.endswith(reason)


def test_the_clock_note_reads_nvidia_smi_s_line_and_is_empty_without_one(monkeypatch):
    """The worker logs each population member's clocks (a paired baseline's time switched between two
    values from one member to the next on the H200, 2026-12-05); no nvidia-smi, or an N/A field, is ""."""
    from optimize.harness.timing import clock_note, clock_text

    assert clock_text("1980, 3201, 121.37, 38\n") == ", SM 1980 MHz, memory 3201 MHz, 121.37 W, 38 C"
    assert clock_text("1980, 3201, [N/A], 38") == ""
    assert clock_text("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.") == ""
    assert clock_text("") == ""
    monkeypatch.setenv("PATH", "/nonexistent")
    assert clock_note() == ""
