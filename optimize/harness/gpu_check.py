"""One-call GPU check of the harness: ``python -m optimize.harness.gpu_check --out DIR``.

Made for one ``device`` call on the H200 (the tasks must already exist under
``work/tasks``; nothing is extracted here):

1. builds the default ops' baselines and every adversarial candidate, in parallel;
2. measures the device's copy bandwidth and smallest-kernel time (and caches them);
3. for each op: the baseline evaluated against itself (must be ok, "no change",
   every shape's spread under 3%), timed end to end (build excluded);
4. the adversarial suite (``tests/adversarial``): each cheat must be rejected
   with the expected outcome and reason, each honest rewrite accepted;
5. prints a compact summary table last and writes the full JSON under DIR
   (device.json, evaluations.json, adversarial.json, summary.json).

Exit status 0 when everything is as expected, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
import traceback
from typing import Any

from pipeline.buckets import floor_text

SPREAD_LIMIT_PCT = 3.0
TARGET_EVAL_S = 20.0
ORIENTATION = {  # what the brief expects on an H200 (for eyeballing, not asserted)
    ("activation.silu_and_mul", 8192, 14336): 161.0,
    ("layernorm.fused_add_rmsnorm", 8192, 4096): 68.0,
}


def say(message: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _prebuild(config, items: list[tuple[Any, Any, dict[str, str] | None]]) -> dict[str, Any]:
    """Build every (task_dir, task, regions) for its catalog plan in one parallel batch."""
    from optimize.harness.evaluate import plan_cases
    from optimize.harness.languages import cuda_jobs
    from pipeline.build import build_many

    jobs, names = [], []
    for task_dir, task, regions in items:
        plan = plan_cases(task, held_out=0, profile=True)
        jobs += cuda_jobs(task_dir, task, plan.units, config=config, regions=regions)
        for unit in plan.units:
            names.append(f"{task.op_id}{'' if regions is None else ' (candidate)'} {'+'.join(i.dtype for i in unit)}")
    start = time.monotonic()
    reports = build_many(jobs)
    return {
        "seconds": round(time.monotonic() - start, 2),
        "builds": [
            {
                "what": n,
                "ok": r.ok,
                "cached": r.cached,
                "seconds": round(r.seconds, 2),
                "stderr": r.stderr[-800:] if not r.ok else "",
            }
            for n, r in zip(names, reports)
        ],
    }


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Read the command line (--out, --ops, --work-dir, --skip-adversarial)."""
    parser = argparse.ArgumentParser(prog="python -m optimize.harness.gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the JSON results")
    parser.add_argument("--ops", nargs="+", help="op ids (default: the three default ops)")
    parser.add_argument("--work-dir", help="work folder holding tasks/ and cache/ (default ./work)")
    parser.add_argument("--skip-adversarial", action="store_true")
    return parser.parse_args(argv)


def _build_all(
    config: Any, tasks: dict[str, Any], cases: list[Any], summary: dict[str, Any], problems: list[str]
) -> None:
    """Step 1: build the baselines and every adversarial candidate in one parallel batch (into ``summary["build"]``)."""
    from optimize.harness import adversarial

    say(f"building {len(tasks)} baselines and {len(cases)} adversarial candidates in parallel")
    items: list[tuple[Any, Any, dict[str, str] | None]] = [(d, t, None) for d, t in tasks.values()]
    for case in cases:
        task_dir, task = tasks[case.op]
        try:
            items.append((task_dir, task, adversarial.candidate_for(case, task).regions))
        except KeyError as err:
            problems.append(f"adversarial {case.name}: {err}")
    try:
        summary["build"] = _prebuild(config, items)
        for b in summary["build"]["builds"]:
            if not b["ok"] and "(candidate)" not in b["what"]:
                problems.append(f"baseline build failed: {b['what']}: {b['stderr'][-300:]}")
    except Exception as err:  # noqa: BLE001
        problems.append(f"prebuild failed: {err}")
        summary["build"] = {"error": traceback.format_exc()}


def _measure_device(config: Any, out: pathlib.Path, summary: dict[str, Any]) -> Any:
    """Step 2: import torch and tvm-ffi (timing the latter), measure the device's ceilings, write device.json."""
    from optimize.harness import roofline

    say(f"builds done in {summary['build'].get('seconds', '?')} s; measuring copy bandwidth and smallest-kernel time")
    import torch

    t0 = time.monotonic()
    import tvm_ffi  # noqa: F401 - first import may JIT tvm-ffi's torch DLPack addon into ~/.cache: pay it here, once

    summary["tvm_ffi_import_s"] = round(time.monotonic() - t0, 2)
    device = roofline.device_info(config.cache / "device", remeasure=True)
    (out / "device.json").write_text(device.model_dump_json(indent=2) + "\n", encoding="utf-8")
    summary["device"] = device.model_dump()
    torch.cuda.empty_cache()
    return device


def _baseline_vs_baseline(
    config: Any, out: pathlib.Path, tasks: dict[str, Any], problems: list[str]
) -> list[tuple[str, Any, float, float]]:
    """Step 3: each op's baseline evaluated against itself and timed, then evaluations.json; the summary's rows."""
    from optimize.harness import adversarial
    from optimize.harness.evaluate import evaluate

    evaluations: dict[str, Any] = {}
    rows = []
    for op, (task_dir, task) in tasks.items():
        candidate = adversarial.baseline_candidate(task_dir, task)
        say(f"{op}: baseline vs baseline (checks + timing)")
        t0 = time.monotonic()
        try:
            ev = evaluate(task_dir, task, candidate, config=config)
        except Exception as err:  # noqa: BLE001
            problems.append(f"{op}: baseline-vs-baseline raised {type(err).__name__}: {err}")
            evaluations[op] = {"error": traceback.format_exc()}
            continue
        wall = time.monotonic() - t0
        say(f"{op}: {ev.outcome.value} in {wall:.1f} s: {ev.detail[:200]}")
        evaluations[op] = json.loads(ev.model_dump_json())
        evaluations[op]["wall_s"] = round(wall, 2)
        spreads = [t.spread_pct for t in ev.timings]
        worst = max(spreads) if spreads else float("nan")
        eval_s = wall - ev.seconds.get("build", 0.0)
        rows.append((op, ev, worst, eval_s))
        if ev.outcome.value != "ok" or "no change" not in ev.detail:
            problems.append(f"{op}: baseline vs baseline is {ev.outcome.value}: {ev.detail[:300]}")
        if spreads and worst >= SPREAD_LIMIT_PCT:
            problems.append(f"{op}: largest per-shape spread {worst:.2f}% >= {SPREAD_LIMIT_PCT}%")
        if eval_s > TARGET_EVAL_S:
            problems.append(f"{op}: evaluation took {eval_s:.1f} s (target < {TARGET_EVAL_S:.0f} s, build excluded)")
    (out / "evaluations.json").write_text(json.dumps(evaluations, indent=1) + "\n", encoding="utf-8")
    return rows


def _adversarial_suite(
    config: Any, out: pathlib.Path, tasks: dict[str, Any], cases: list[Any], problems: list[str]
) -> list[dict[str, Any]]:
    """Step 4: each adversarial case evaluated and judged against its expected outcome, then adversarial.json."""
    from optimize.harness import adversarial
    from optimize.harness.evaluate import evaluate

    adv_rows = []
    for case in cases:
        task_dir, task = tasks[case.op]
        say(f"adversarial {case.name} ({case.op}): expect {case.expect}")
        try:
            cand = adversarial.candidate_for(case, task)
            t0 = time.monotonic()
            ev = evaluate(task_dir, task, cand, config=config, profile=case.timed)
            ok, why = adversarial.judge(case, ev)
            adv_rows.append(
                {
                    "case": case.name,
                    "op": case.op,
                    "cheat": case.cheat,
                    "expect": case.expect,
                    "got": ev.outcome.value,
                    "as_expected": ok,
                    "why": why,
                    "detail": ev.detail,
                    "seconds": round(time.monotonic() - t0, 2),
                }
            )
            say(f"  -> {ev.outcome.value}{'' if ok else ' (NOT AS EXPECTED)'}: {ev.detail[:160]}")
            if not ok:
                problems.append(f"adversarial {why}")
        except Exception as err:  # noqa: BLE001
            adv_rows.append({"case": case.name, "as_expected": False, "error": traceback.format_exc()})
            problems.append(f"adversarial {case.name}: raised {type(err).__name__}: {err}")
    (out / "adversarial.json").write_text(json.dumps(adv_rows, indent=1) + "\n", encoding="utf-8")
    return adv_rows


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)

    # every module the steps use is imported here, before the out folder is made or anything printed
    from contract import layout
    from contract.layout import load_task
    from optimize.harness import adversarial, roofline  # noqa: F401 - roofline: step 2's
    from optimize.harness.evaluate import evaluate  # noqa: F401 - steps 3 and 4's
    from pipeline.config import DEFAULT_OPS, load_config

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = load_config(overrides={"work_dir": args.work_dir} if args.work_dir else None)
    ops = list(args.ops or DEFAULT_OPS)
    problems: list[str] = []
    summary: dict[str, Any] = {"ops": ops, "problems": problems}
    started = time.monotonic()

    tasks = {}
    for op in ops:
        task_dir = layout.task_dir(config.work, op)
        try:
            tasks[op] = (task_dir, load_task(task_dir))
        except Exception as err:  # noqa: BLE001
            problems.append(f"{op}: task does not load from {task_dir}: {err}")
    cases = [] if args.skip_adversarial else [c for c in adversarial.load_cases() if c.op in tasks]

    _build_all(config, tasks, cases, summary, problems)
    device = _measure_device(config, out, summary)
    rows = _baseline_vs_baseline(config, out, tasks, problems)
    adv_rows = _adversarial_suite(config, out, tasks, cases, problems)

    summary["wall_s"] = round(time.monotonic() - started, 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n", encoding="utf-8")
    _print_summary(device, rows, adv_rows, summary, problems)
    return 1 if problems else 0


def _print_summary(device, rows, adv_rows, summary, problems) -> None:
    print()
    print(
        f"device: {device.name}  copy {device.copy_gbps:.0f} GB/s (spread {device.copy_spread_pct:.1f}%)  "
        f"smallest kernel {device.min_kernel_us:.2f} us  L2 {device.l2_bytes / 2**20:.0f} MiB"
    )
    build = summary.get("build", {})
    if "builds" in build:
        n_ok = sum(1 for b in build["builds"] if b["ok"])
        print(f"builds: {n_ok}/{len(build['builds'])} ok in {build['seconds']:.1f} s (parallel)")
    print()
    print(f"{'op':30} {'outcome':8} {'speedup':>8} {'max spread':>10} {'eval s':>7} {'checks':>6}  test/profile s")
    for op, ev, worst, eval_s in rows:
        speed = ev.detail.split("geomean speedup ")[-1].split("x")[0] if "geomean speedup" in ev.detail else "-"
        split = f"{ev.seconds.get('test', 0):.1f}/{ev.seconds.get('profile', 0):.1f}"
        print(f"{op:30} {ev.outcome.value:8} {speed:>8} {worst:>9.2f}% {eval_s:>7.1f} {ev.checks_passed:>6}  {split}")
    print()
    print(f"{'op':30} {'dtype':5} {'shape':42} {'us':>9} {'GB/s':>7} {'%copy':>6} {'t/floor':>7} {'spread':>6}")
    for op, ev, _, _ in rows:
        picked = [t for t in ev.timings if t.sizes.get("num_tokens") in (1, 8192)] or ev.timings[:4]
        for t in picked[:8]:
            mark = ""
            for (o, tok, width), expect in ORIENTATION.items():
                if o == op and t.sizes.get("num_tokens") == tok and t.sizes.get("hidden_size") == width:
                    mark = f"  (brief: ~{expect:.0f} us)"
            print(
                f"{op:30} {t.dtype:5} {t.label[:42]:42} {t.time_us:9.2f} {t.gbps:7.0f} {t.pct_of_copy_bw:6.1f} "
                f"{floor_text(t):>7} {t.spread_pct:5.1f}%{mark}"
            )
    if adv_rows:
        print()
        good = sum(1 for r in adv_rows if r.get("as_expected"))
        print(f"adversarial: {good}/{len(adv_rows)} as expected")
        for r in adv_rows:
            flag = "ok  " if r.get("as_expected") else "FAIL"
            detail = (r.get("detail") or r.get("error") or "").replace("\n", " ")
            print(f"  {flag} {r['case']:22} {r.get('got', 'error'):10} {detail[:110]}")
    print()
    if problems:
        print(f"PROBLEMS ({len(problems)}):")
        for p in problems:
            print(f"  - {p[:400]}")
    else:
        print("ALL CHECKS AS EXPECTED")
    print(f"wall {summary.get('wall_s', 0):.0f} s")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
