"""What the PR says beyond ``report.json``: facts read from the optimize run and the patch.

Why: a reviewer needs more than the figures: was anything measured at all (a
replay run simulates every timing), what the bottleneck was (the baseline's
Nsight Compute profile), which skill made the change and why it is safe (the
skill file's reviewer text), what the diff itself changes about launches, and
the diff. All of it is on disk already; this module reads it, once, into
:class:`RunFacts`, so :mod:`integrate.pr` renders from records only.

What must stay true: a fact that cannot be read is absent, never guessed (no
profile: the PR says none was taken); a run is *simulated* when its
``summary.json`` says so or its ``run.json`` names the replay backend.
"""

from __future__ import annotations

import pathlib
import re
from dataclasses import dataclass, field
from typing import Any

from contract import layout
from contract.layout import profile_path
from integrate.errors import KernelsmithError, SimulatedRunError
from integrate.records import IntegrateReport, Patch
from optimize.run_folder import read_run_meta
from optimize.skills import Skill, load_skills
from pipeline.record_io import read_record
from pipeline.run_records import Candidate, RunSummary

REPLAY_BACKEND = "replay"  # run.json's "backend" for a replayed run (optimize.command)


@dataclass(frozen=True)
class OpFacts:
    """One integrated op: how its candidate came about and what its baseline was bound by."""

    op_id: str
    skills: tuple[Skill, ...] = ()  # the skills on the path from the baseline to the best candidate, in order
    unknown_skills: tuple[str, ...] = ()  # skill ids the library no longer has
    params: dict[str, object] = field(default_factory=dict)  # the best candidate's skill parameters
    baseline_profile: dict[str, float] = field(default_factory=dict)  # NcuResult.metrics() of the baseline
    profile_note: str = ""  # why there is no profile
    guarded: bool = False  # a shape dispatch keeps the baseline at some shapes (OpSummary.guarded)
    language: str = "cuda"  # Task.language of the op's task
    kernels: tuple[str, ...] = ()  # Triton: the kernels the wrapper launches (Task.entry_points)
    wrapper: str = ""  # Triton: the wrapper's dotted module:function (TritonFacts.wrapper)
    registered_as: str | None = None  # Triton: the KernelSpec op the wrapper is registered as


@dataclass(frozen=True)
class RunFacts:
    simulated: bool = False
    backend: str = ""  # RunSummary.backend (or run.json's backend)
    coder: str = ""  # "llm" | "offline" (run.json / RunSummary), for the reproduce command
    device: str | None = None
    diff: str = ""  # sglang.patch's text
    ops: dict[str, OpFacts] = field(default_factory=dict)


def default_run_dir(patch: Patch) -> pathlib.Path:
    """``work/runs/<run>`` of a patch written to ``work/integrate/<run>/sglang.patch``."""
    return layout.run_dir(pathlib.Path(patch.patch_file).resolve().parent.parent.parent, patch.run)


def run_summary(run_dir: pathlib.Path) -> RunSummary | None:
    """The run's ``summary.json``; None where the run folder has none yet."""
    path = layout.summary_path(run_dir)
    return read_record(RunSummary, path) if path.is_file() else None


def simulated_run(run_dir: pathlib.Path) -> tuple[bool, str]:
    """(simulated?, the backend as recorded); (False, "") when the run folder records neither."""
    record = run_summary(run_dir)
    if record is not None:
        return record.simulated, record.backend
    data = read_run_meta(run_dir)
    if data:
        backend = str(data.get("backend", ""))
        return backend == REPLAY_BACKEND, f"{backend} {data.get('replay') or ''}".strip()
    return False, ""


def refuse_simulated(patch: Patch, run_dir: pathlib.Path | None = None) -> None:
    """Raise :class:`SimulatedRunError` when the patch comes from a replayed (simulated) run."""
    run_dir = run_dir or default_run_dir(patch)
    simulated, backend = simulated_run(run_dir)
    if simulated:
        raise SimulatedRunError(
            f"run {patch.run} was made with the replay backend ({backend}): its timings were replayed, not measured, "
            "so its patch is not committed",
            fix="run `kernelsmith optimize --ops ... --run NAME` on a GPU machine (no --replay), then `kernelsmith integrate --run NAME --git-branch ...`",
        )


def _chain(op_dir: pathlib.Path, best: str) -> list[Candidate]:
    """Candidates from the best back to the baseline (whatever of the chain is on disk)."""
    out: list[Candidate] = []
    path = layout.best_candidate_path(op_dir)
    cid: str | None = best
    seen: set[str] = set()
    while cid and cid not in seen:
        seen.add(cid)
        candidate_path = layout.candidate_path(op_dir, cid)
        if candidate_path.is_file():
            path = candidate_path
        elif not (path.is_file() and read_record(Candidate, path).id == cid):
            break
        candidate = read_record(Candidate, path)
        out.append(candidate)
        cid = candidate.parent
    return out


def _profile(op_dir: pathlib.Path, baseline: str | None) -> tuple[dict[str, float], str]:
    from optimize.harness.tools import NcuResult

    if baseline is None:
        return {}, "the baseline candidate is not in the run folder"
    path = profile_path(op_dir, baseline)
    if not path.is_file():
        return {}, "no Nsight Compute profile of the baseline was taken in this run"
    result = read_record(NcuResult, path)
    if result.status != "ok":
        return {}, f"the baseline's Nsight Compute profile is {result.status}: {result.detail}"
    return result.metrics(), ""


def gather(report: IntegrateReport, run_dir: pathlib.Path | None = None) -> RunFacts:
    """Everything :mod:`integrate.pr` needs beyond the report."""
    patch = report.patch
    run_dir = run_dir or default_run_dir(patch)
    simulated, backend = simulated_run(run_dir)
    device = None
    coder = ""
    guarded: dict[str, bool] = {}
    coder = str(read_run_meta(run_dir).get("coder") or "")
    summary = run_summary(run_dir)
    if summary is not None:
        device, coder = summary.device, summary.coder
        guarded = {op.op_id: op.guarded for op in summary.ops}
    diff_path = pathlib.Path(patch.patch_file)
    diff = diff_path.read_text(encoding="utf-8", errors="replace") if diff_path.is_file() else ""
    library = {skill.id: skill for skill in load_skills()}
    ops: dict[str, OpFacts] = {}
    for op in patch.ops:
        op_dir = run_dir / op.op_id
        chain = _chain(op_dir, op.candidate)
        ids = [i for c in reversed(chain) for i in c.skill_ids]
        root = chain[-1].id if chain and chain[-1].parent is None else None
        profile, note = _profile(op_dir, root)
        ops[op.op_id] = OpFacts(
            **_task_facts(pathlib.Path(op.task_dir)),
            op_id=op.op_id,
            skills=tuple(library[i] for i in ids if i in library),
            unknown_skills=tuple(i for i in ids if i not in library),
            params=dict(chain[0].params) if chain else {},
            baseline_profile=profile,
            profile_note=note,
            guarded=guarded.get(op.op_id, False),
        )
    return RunFacts(simulated=simulated, backend=backend, coder=coder, device=device, diff=diff, ops=ops)


def _task_facts(task_dir: pathlib.Path) -> dict[str, Any]:
    """The language and, for a Triton op, its kernels and KernelSpec, from the task; {} when it cannot be read."""
    from contract.layout import load_task

    try:
        task = load_task(task_dir)
    except (OSError, KernelsmithError, ValueError):
        return {}
    if task.triton is None:
        return {"language": task.language}
    return {
        "language": task.language,
        "kernels": tuple(task.entry_points),
        "wrapper": task.triton.wrapper,
        "registered_as": task.triton.registered_as,
    }


# --------------------------------------------------------------------------- what the diff changes

_PDL_OFF = re.compile(r"enable_pdl\(\s*false\s*\)|use_pdl\s*=\s*false")
_PDL_ON = re.compile(r"enable_pdl\(\s*true\s*\)|use_pdl\s*=\s*true")
_WAIT = re.compile(r"PDLWaitPrimary|griddepcontrol\.wait|cudaGridDependencySynchronize")
_TRIGGER = re.compile(r"PDLTriggerSecondary|griddepcontrol\.launch_dependents|cudaTriggerProgrammaticLaunchCompletion")


def launch_facts(diff: str) -> list[str]:
    """Sentences about programmatic dependent launch, read from the diff's own lines."""
    removed = [line[1:].strip() for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    out: list[str] = []
    turned_on = [line for line in added if _PDL_ON.search(line)]
    if not turned_on:
        return out
    was_off = [line for line in removed if _PDL_OFF.search(line)]
    if was_off:
        out.append(
            f"PDL was off because SGLang's launcher asks for it explicitly (`{was_off[0]}`); the patch turns it on (`{turned_on[0]}`)."
        )
    else:
        out.append(
            "PDL was off because SGLang's launcher never asks for it (no `enable_pdl` / PDL launch attribute), and a CUDA "
            f"launch without the attribute is not programmatic; the patch adds it (`{turned_on[0]}`)."
        )
    lines = diff.splitlines()
    # the new side of each hunk; a hunk header is a barrier (what lies beyond it is not adjacent)
    body = [
        (i, "@@" if line.startswith("@@") else line[1:].strip())
        for i, line in enumerate(lines)
        if (line[:1] in ("+", " ") and not line.startswith("+++")) or line.startswith("@@")
    ]

    def neighbour(index: int, step: int) -> str:
        """The nearest non-blank new-side line before (step -1) or after (+1) diff line ``index`` in its hunk."""
        pos = next(k for k, (i, _) in enumerate(body) if i == index) + step
        while 0 <= pos < len(body) and not body[pos][1]:
            pos += step
        return body[pos][1] if 0 <= pos < len(body) else ""

    waits = [(i, line[1:].strip()) for i, line in enumerate(lines) if line.startswith("+") and _WAIT.search(line)]
    triggers = [(i, line[1:].strip()) for i, line in enumerate(lines) if line.startswith("+") and _TRIGGER.search(line)]
    if waits:
        first = neighbour(waits[0][0], -1).endswith("{")
        where = (
            "as the first statement of the kernel body, before any read"
            if first
            else "(statements precede it: check they read nothing the previous kernel writes)"
        )
        out.append(f"The kernel now waits for the previous grid (`{waits[0][1]}`) {where}.")
    else:
        out.append(
            "The diff adds no PDL wait: the kernel already waits in its source, or the reviewer should check it reads nothing a previous kernel writes."
        )
    if triggers:
        last = neighbour(triggers[0][0], 1).startswith("}")
        where = (
            "as the last statement of the kernel body, after its last store"
            if last
            else "before the end of the kernel (statements follow it)"
        )
        out.append(f"It triggers dependents (`{triggers[0][1]}`) {where}.")
    else:
        out.append("It never triggers early: dependents are released when the grid exits.")
    return out
