"""optimize.harness.population: a population built at once, evaluated in one worker; a member that takes
the worker down is blamed alone and the rest run in a fresh worker (fault injection, no GPU)."""

from __future__ import annotations

import pathlib

import pytest
from test_harness_evaluate import DEVICE, check, rms_task, timing

from optimize.harness import evaluate, population, worker
from optimize.harness.isolate import WorkerRun
from optimize.harness.protocol import WorkerRequest, WorkerResult
from pipeline.config import Config
from pipeline.record_io import write_record
from pipeline.records import BuildReport
from pipeline.run_records import Candidate, Outcome


def cand(i: int, text: str = "") -> Candidate:
    return Candidate(op_id="layernorm.rmsnorm", id=f"c{i}", parent="base", regions={"r": text or f"code {i}"})


def answer(request: WorkerRequest, workdir: pathlib.Path, index: int, factor: float) -> None:
    """Member ``index``'s result: correct, ``factor`` times as fast as the baseline at every timed shape."""
    timings = [timing(10.0, 10.0 / factor, label=c.label, sizes=c.sizes, dtype=c.dtype) for c in request.timings]
    result = WorkerResult(status="ok", checks=[check()], timings=timings, seconds={"test": 1.0}, device=DEVICE)
    write_record(result, worker.member_path(workdir / "result.json", index))


def stage(monkeypatch, build_units, run_request, base_libs: list[str]) -> None:
    """Builds, the baseline's build and the worker replaced for one population."""
    monkeypatch.setattr(evaluate, "build_units", build_units)
    monkeypatch.setattr(
        population, "build_baseline", lambda *a, **k: (BuildReport(ok=True, key="b", seconds=0), base_libs)
    )
    monkeypatch.setattr(population, "run_request", run_request)


@pytest.fixture
def staged(monkeypatch, tmp_path):
    """Builds and the worker replaced: candidate regions say what each member does."""
    requests: list[WorkerRequest] = []
    built: list[str] = []

    def build_units(task_dir, task, units, *, config, regions=None, max_workers=None, isolate=False):
        text = (regions or {}).get("r", "")
        built.append(text)
        if "syntax error" in text:
            return BuildReport(ok=False, key="k", seconds=0.1, stderr="scale.cuh(3): error: expected a ';'"), []
        return BuildReport(ok=True, key="k", seconds=0.1), [f"/lib/{text}.so"]

    monkeypatch.setattr(evaluate, "build_units", build_units)  # what build_candidate builds with
    monkeypatch.setattr(
        population, "build_baseline", lambda *a, **k: (BuildReport(ok=True, key="b", seconds=0), ["/lib/base.so"])
    )

    def run_request(request, config, workdir):
        requests.append(request)
        workdir.mkdir(parents=True, exist_ok=True)
        for i, libs in enumerate(request.population):
            if "hang" in libs[0]:
                return WorkerRun("timeout", None, 30.0, "killed", None)
            if "fault" in libs[0]:
                return WorkerRun("crashed", -11, 3.0, "an illegal memory access was encountered", None)
            ok = WorkerResult(
                status="ok", checks=[check()], timings=[timing(10.0, 8.0)], seconds={"test": 1.0, "profile": 1.0}
            )
            write_record(ok, worker.member_path(workdir / "result.json", i))
        return WorkerRun("finished", 0, 5.0, "", WorkerResult(status="ok"))

    monkeypatch.setattr(population, "run_request", run_request)
    config = Config.model_validate(
        {"work_dir": str(tmp_path), "harness": {"held_out_shapes": 0}, "search": {"screen_per_bucket": 0}}
    )
    return requests, built, config


def test_members_are_evaluated_in_one_worker_and_a_broken_build_never_reaches_it(staged, tmp_path):
    requests, built, config = staged
    members = [cand(0), cand(1, "syntax error"), cand(2)]
    out = population.evaluate_population(tmp_path, rms_task(), members, config=config)
    assert [e.candidate for e in out] == ["c0", "c1", "c2"]
    assert [e.outcome for e in out] == [Outcome.ok, Outcome.compile_failed, Outcome.ok]
    assert "expected a ';'" in out[1].detail
    assert len(requests) == 1 and requests[0].mode == "population" and len(requests[0].population) == 2
    assert sorted(built) == ["code 0", "code 2", "syntax error"]
    assert out[0].seconds.get("worker_overhead", 0) >= 0  # the shared start-up is charged once, to the first


def test_a_member_that_kills_the_worker_is_blamed_alone_and_the_rest_run_again(staged, tmp_path):
    requests, _, config = staged
    members = [cand(0), cand(1, "fault"), cand(2), cand(3, "hang"), cand(4)]
    out = population.evaluate_population(tmp_path, rms_task(), members, config=config)
    assert [e.outcome for e in out] == [Outcome.ok, Outcome.crashed, Outcome.ok, Outcome.timeout, Outcome.ok]
    assert "illegal memory access" in out[1].detail and "SIGSEGV" in out[1].detail
    assert [len(r.population) for r in requests] == [5, 3, 1]  # after each fault, the members after it
    # the deadline scales with the members left: a population is not cut by one member's limit
    assert out[3].outcome == Outcome.timeout


def test_the_worker_writes_each_member_as_it_goes_and_stops_after_a_crash(monkeypatch, tmp_path):
    results = iter(
        [WorkerResult(status="ok"), WorkerResult(status="crashed", detail="CUDA error"), WorkerResult(status="ok")]
    )
    monkeypatch.setattr(worker, "run", lambda request: next(results))
    request = WorkerRequest(
        mode="population",
        op_id="x",
        contract=rms_task().contract,
        baseline_libraries=["/b.so"],
        population=[["/a.so"], ["/b.so"], ["/c.so"]],
        device_cache_dir=str(tmp_path),
    )
    summary = worker.run_population(request, str(tmp_path / "result.json"))
    assert summary.status == "crashed" and "2 of 3" in summary.detail
    files = sorted(p.name for p in pathlib.Path(tmp_path).glob("member-*.json"))
    assert files == ["member-0.json", "member-1.json"]


def test_a_population_is_screened_at_one_shape_per_bucket_and_only_the_best_are_timed_in_full(monkeypatch, tmp_path):
    """On the H200 (2026-12-02) a population of 8 did not finish a 73 s round: each member was timed at
    every shape. Now every member is checked in full, timed at one shape per token bucket, and only the
    two best that beat the baseline there are timed at every shape; the others are marked screened and
    can never be accepted."""
    from test_harness_evaluate import RMS, make_task, rms_inst

    from optimize.acceptance import judge_round
    from pipeline.records import ShapeCase

    tokens = (1, 8, 64, 128, 256, 512, 2048, 8192)  # 3 + 2 + 3 shapes in the three buckets
    shapes = [ShapeCase(model="M", tokens=n, sizes={"num_tokens": n, "hidden_size": 4096}) for n in tokens]
    task = make_task(RMS, shapes, [rms_inst(d, 4096) for d in ("bf16", "fp16")])
    speed = {"x0.9": 0.9, "x1.2": 1.2, "x1.5": 1.5, "x1.1": 1.1}
    requests: list[WorkerRequest] = []

    def build_units(task_dir, task, units, *, config, regions=None, max_workers=None, isolate=False):
        return BuildReport(ok=True, key="k", seconds=0.1), [f"/lib/{(regions or {})['r']}.so"]

    def run_request(request, config, workdir):
        requests.append(request)
        workdir.mkdir(parents=True, exist_ok=True)
        for i, libs in enumerate(request.population):
            answer(request, workdir, i, speed[pathlib.Path(libs[0]).stem])
        return WorkerRun("finished", 0, 5.0, "", WorkerResult(status="ok"))

    stage(monkeypatch, build_units, run_request, ["/lib/base.so"])
    config = Config.model_validate({"work_dir": str(tmp_path), "harness": {"held_out_shapes": 0}})
    members = [cand(i, text) for i, text in enumerate(speed)]
    out = population.evaluate_population(tmp_path, task, members, config=config)

    first, second = requests
    assert len(first.population) == 4 and len(second.checks) == 16, "the promoted are checked in full"
    assert sorted(t.sizes["num_tokens"] for t in first.timings) == [8, 256, 2048], "one per bucket, nearest the median"
    # screened members are checked where they are timed (silu_and_mul's 252 checks cost 7.8 s a member
    # on the H200, 2026-12-05), each such shape in both dtypes
    assert sorted(c.sizes["num_tokens"] for c in first.checks) == [8, 8, 256, 256, 2048, 2048]
    assert len(second.population) == 2 and len(second.timings) == 8, "the two best, timed at every shape"
    assert [pathlib.Path(libs[0]).stem for libs in second.population] == ["x1.2", "x1.5"]
    by_id = {e.candidate: e for e in out}
    assert [by_id[c].screened for c in ("c0", "c1", "c2", "c3")] == [True, False, False, True]
    assert (
        len(by_id["c2"].timings) == 8
        and by_id["c2"].seconds["test"] == 2.0
        and by_id["c2"].seconds["screen_test"] == 1.0
    )
    verdict = judge_round(by_id["c3"], None, 3.0)
    assert not verdict.accepted and "not promoted to full timing" in verdict.detail
    assert judge_round(by_id["c2"], None, 3.0).accepted


def test_screening_checks_are_the_screened_shapes_and_every_held_out_one():
    from optimize.harness.population import screening_checks
    from optimize.harness.protocol import CheckCase, TimingCase

    def at(n: int, held_out: bool = False) -> CheckCase:
        return CheckCase(label=f"{n}", sizes={"t": n}, dtype="bf16", export="e", held_out=held_out, seed=n)

    checks = [at(1), at(8), at(8), at(4096), at(7, held_out=True), at(5000, held_out=True)]
    screen = [TimingCase(label="8", sizes={"t": 8}, dtype="bf16", export="e")]
    assert [c.label for c in screening_checks(checks, screen)] == ["8", "8", "7", "5000"]
    elsewhere = [TimingCase(label="9", sizes={"t": 9}, dtype="bf16", export="e")]
    assert screening_checks(checks, elsewhere) == checks, "no check at the screened sizes: all of them"


def test_screening_takes_a_shape_per_bucket_by_the_catalog_token_count():
    """Sizes that name no num_tokens (num_rows here) are bucketed by the case's own token count, so a
    population is screened at a decode and a prefill shape, not at one 'decode' shape for all."""
    from optimize.harness.population import screening
    from optimize.harness.protocol import TimingCase

    cases = [
        TimingCase(label=f"M[num_rows={n}]", sizes={"num_rows": n}, dtype="bf16", export="e", tokens=n)
        for n in (1, 8, 4096, 16384)
    ]
    picked = screening(cases, per_bucket=1)
    assert sorted(c.tokens for c in picked) == [8, 16384]  # one per bucket: T<=64 and T>=512
    blind = [c.model_copy(update={"tokens": None}) for c in cases]
    assert len(screening(blind, per_bucket=1)) == 1, "without the token count every case is one bucket"


def test_screened_members_are_built_at_the_units_they_are_screened_at_and_the_promoted_at_every_unit(
    monkeypatch, tmp_path
):
    """rmsnorm has a build unit per width; a population of 8 members, each building all of them one
    unit at a time, was most of a round. Screening builds the units its cases use; the promoted are
    then built at every unit (cached ones served), and one that does not build there is
    compile_failed, never timed in full."""
    names = ["x0.9", "x1.2", "x1.5-breaks-at-4096", "x1.1"]
    shapes, builds, requests, out = lazy_population(monkeypatch, tmp_path, names)

    first, second = requests
    screened_widths = sorted(
        {c.sizes["hidden_size"] for c in first.checks} | {t.sizes["hidden_size"] for t in first.timings}
    )
    assert 4096 not in screened_widths, "screening needs fewer units than the task has"
    assert all(sorted(int(w) for w in widths) == screened_widths for name, widths in builds[:4])
    # promoted: x1.5 (fails at 4096) and x1.2; both rebuilt at every width, only x1.2 timed in full
    assert sorted(name for name, widths in builds[4:] if len(widths) == 3) == ["x1.2", "x1.5-breaks-at-4096"]
    assert [pathlib.Path(libs[0]).stem.split("@")[0] for libs in second.population] == ["x1.2"]
    assert out["c2"].outcome == Outcome.compile_failed and "too many resources" in out["c2"].detail
    assert out["c1"].outcome == Outcome.ok and not out["c1"].screened and len(out["c1"].timings) == len(shapes)
    assert out["c0"].screened and out["c3"].screened, "x0.9 (slower) and x1.1 were not promoted"


def lazy_population(monkeypatch, tmp_path, names: list[str]):
    """Members named "x<speedup>[-breaks-at-<width>]" evaluated over rmsnorm-like build units, one per
    width (512, 1024, 4096): (shapes, builds as (name, widths), worker requests, evaluations by id)."""
    from test_harness_evaluate import RMS, make_task, rms_inst

    from pipeline.records import ShapeCase

    shapes = [
        ShapeCase(model="M", tokens=n, sizes={"num_tokens": n, "hidden_size": w})
        for n in (1, 8, 64, 512, 2048)
        for w in (512, 1024, 4096)
    ]
    task = make_task(RMS, shapes, [rms_inst(d, w) for w in (512, 1024, 4096) for d in ("bf16", "fp16")])
    builds: list[tuple[str, list[str]]] = []
    requests: list[WorkerRequest] = []

    def build_units(task_dir, task, units, *, config, regions=None, max_workers=None, isolate=False):
        name = (regions or {}).get("r", "base")
        widths = [unit[0].template_args[0] for unit in units]
        builds.append((name, widths))
        if "-breaks-at-" in name and name.rsplit("-", 1)[1] in widths:
            return BuildReport(ok=False, key="k", seconds=0.1, stderr="k.cuh(9): error: too many resources"), []
        return BuildReport(ok=True, key="k", seconds=0.1), [f"/lib/{name}@{w}.so" for w in widths]

    def run_request(request, config, workdir):
        requests.append(request)
        workdir.mkdir(parents=True, exist_ok=True)
        for i, libs in enumerate(request.population):
            used = {c.unit for c in request.checks} | {t.unit for t in request.timings}
            assert all(libs[u] for u in used), "a case names a unit that was not built"
            answer(request, workdir, i, float(pathlib.Path(libs[next(iter(used))]).stem.split("@")[0][1:4]))
        return WorkerRun("finished", 0, 5.0, "", WorkerResult(status="ok"))

    stage(monkeypatch, build_units, run_request, ["/lib/base.so"] * 3)
    config = Config.model_validate({"work_dir": str(tmp_path), "harness": {"held_out_shapes": 0}})
    out = {
        e.candidate: e
        for e in population.evaluate_population(
            tmp_path, task, [cand(i, n) for i, n in enumerate(names)], config=config
        )
    }
    return shapes, builds, requests, out


def test_members_too_few_to_screen_once_built_are_built_at_every_unit_and_judged_in_full(monkeypatch, tmp_path):
    """Three members would be screened (more than the two promoted), but one does not build at the
    screening units: the two left are built at every unit and judged in full in one worker, and
    the broken one is not built again."""
    names = ["x1.2", "x1.3-breaks-at-512", "x1.1"]
    shapes, builds, requests, out = lazy_population(monkeypatch, tmp_path, names)
    (only,) = requests
    assert len(only.population) == 2 and len(only.timings) == len(shapes), "judged in full, at every shape"
    assert all(all(libs) for libs in only.population), "built at every unit"
    assert [name for name, _ in builds].count("x1.3-breaks-at-512") == 1
    assert sorted(name for name, widths in builds if len(widths) == 3) == ["x1.1", "x1.2"]
    assert out["c1"].outcome == Outcome.compile_failed and "too many resources" in out["c1"].detail
    assert [out[c].outcome for c in ("c0", "c2")] == [Outcome.ok, Outcome.ok]
    assert not out["c0"].screened and len(out["c0"].timings) == len(shapes)
