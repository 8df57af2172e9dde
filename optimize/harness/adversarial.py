"""The adversarial suite: candidate regions that each cheat one way, and what must happen to them.

Each file under ``tests/adversarial/*.cuh`` is the full text of one editable
region (it replaces the named span of a task's source), headed by metadata
comments::

    // kernelsmith-adversarial
    // op: activation.silu_and_mul
    // span: act_and_mul_kernel
    // expect: incorrect          (an Outcome value; "ok" for honest controls)
    // reason: never written      (a regular expression the Evaluation's detail must match)
    // cheat: what it does wrong, in one line
    // timed: yes                 (optional: evaluate with timing; the cheat shows only in the timed graphs)
    // stage: final               (optional: judged by final validation, its sanitizer passes included)

A harness change that lets any of them through is a regression; the GPU test
``tests/test_harness_adversarial.py`` and ``python -m optimize.harness.gpu_check``
evaluate every file and compare the outcome and detail with the metadata. The
honest rewrites (``expect: ok``) keep the harness from rejecting code merely for
being different from the baseline.
"""

from __future__ import annotations

import pathlib
import re
from dataclasses import dataclass

from contract.layout import baseline_regions, read_task_files
from pipeline.record_io import content_hash
from pipeline.records import Task
from pipeline.run_records import Candidate, Evaluation

ROOT = pathlib.Path(__file__).resolve().parents[2] / "tests" / "adversarial"
MARKER = "// kernelsmith-adversarial"
_META = re.compile(r"^//\s*(op|span|expect|reason|cheat|timed|stage):\s?(.*)$")


@dataclass(frozen=True)
class AdversarialCase:
    name: str
    op: str
    span: str
    expect: str
    reason: str  # regex over Evaluation.detail; empty = anything
    cheat: str
    text: str
    path: pathlib.Path
    timed: bool = False  # evaluate with timing: a cheat of the timed CUDA graphs passes every untimed check
    final: bool = False  # judged by final validation (optimize.backends.gpu: compute-sanitizer's tools too)


def parse_case(path: pathlib.Path) -> AdversarialCase:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    if not lines or lines[0].strip() != MARKER:
        raise ValueError(f"{path} does not start with {MARKER!r}")
    meta: dict[str, str] = {}
    for line in lines[1:]:
        match = _META.match(line.strip())
        if not match:
            break
        meta[match.group(1)] = match.group(2).strip()
    missing = {"op", "span", "expect"} - set(meta)
    if missing:
        raise ValueError(f"{path} lacks metadata {sorted(missing)}")
    return AdversarialCase(
        name=path.stem,
        op=meta["op"],
        span=meta["span"],
        expect=meta["expect"],
        reason=meta.get("reason", ""),
        cheat=meta.get("cheat", ""),
        text=text,
        path=path,
        timed=_yes(path, meta.get("timed", "no")),
        final=_final(path, meta.get("stage", "round")),
    )


def _final(path: pathlib.Path, value: str) -> bool:
    if value not in ("round", "final"):
        raise ValueError(f"{path}: `// stage:` must be round or final, not {value!r}")
    return value == "final"


def _yes(path: pathlib.Path, value: str) -> bool:
    if value not in ("yes", "no"):
        raise ValueError(f"{path}: `// timed:` must be yes or no, not {value!r}")
    return value == "yes"


def load_cases(root: pathlib.Path = ROOT, ops: list[str] | None = None) -> list[AdversarialCase]:
    cases = [parse_case(p) for p in sorted(root.glob("*.cuh"))]
    return [c for c in cases if ops is None or c.op in ops]


def span_name(task: Task, wanted: str) -> str:
    """The task's editable span for ``wanted``: same name, else the one whose name contains it."""
    names = [s.name for s in task.editable]
    if wanted in names:
        return wanted
    close = [n for n in names if wanted in n or n.split("::")[-1] == wanted]
    if len(close) == 1:
        return close[0]
    raise KeyError(f"task {task.op_id} has no editable span {wanted!r} (spans: {', '.join(names)})")


def candidate_for(case: AdversarialCase, task: Task) -> Candidate:
    regions = {span_name(task, case.span): case.text}
    return Candidate(
        op_id=task.op_id,
        id=f"adv-{case.name}-{_regions_hash(regions)}",
        parent=None,
        regions=regions,
        coder="adversarial",
        rationale=case.cheat,
    )


def baseline_candidate(task_dir: str | pathlib.Path, task: Task) -> Candidate:
    """The baseline as a candidate: every editable span's original text (builds to the baseline's key)."""
    regions = baseline_regions(read_task_files(pathlib.Path(task_dir), task), task)
    return Candidate(
        op_id=task.op_id, id=f"baseline-{_regions_hash(regions)}", parent=None, regions=regions, coder="baseline"
    )


def _regions_hash(regions: dict[str, str]) -> str:
    return content_hash(*[part for item in sorted(regions.items()) for part in item])[:12]


def judge(case: AdversarialCase, evaluation: Evaluation) -> tuple[bool, str]:
    """(as expected, explanation) for one evaluation of an adversarial case."""
    got = evaluation.outcome.value
    if got != case.expect:
        return False, f"{case.name}: expected {case.expect}, got {got}: {evaluation.detail[:400]}"
    if case.reason and not re.search(case.reason, evaluation.detail):
        return (
            False,
            f"{case.name}: {got} as expected but the detail does not match /{case.reason}/: {evaluation.detail[:400]}",
        )
    return True, f"{case.name}: {got} ({evaluation.detail[:160]})"
