"""``kernelsmith headroom``: which ops could save the most model-step time, from the store and the recipes.

Why: a kernel 3x over its floor that runs once per model step is worth less than one 1.3x over its
floor that every decoder layer runs. So the census's figures (each op's time and floor at each
catalog shape, :mod:`pipeline.store`) are weighed by how often a model step runs the op: the layer
recipes (:mod:`integrate.recipe`) say which SGLang ops each model's decoder layer calls and how many
times, and the model's layer count multiplies it. The sum over a recipe's steps at one decode point is
the time a perfect kernel (one at its floor) would save per decode step of that model.

Reading a row: ``gap_us`` = time - floor of one call, at the store's newest batch that measured the op
at that model and token count (bf16, the baseline kernel); ``per_step_us`` = gap x calls per layer x
layers. Ops the store measured that no recipe runs are listed after, by their worst time ÷ floor, so
they are not lost; ops a recipe runs that the store never measured at its shapes are named too.

Beside the ranking, each ranked op's task says whether its launches use PDL and which skills' rules hold
for its kernel (the mechanical ones apart: those the offline coder applies).

What a model-step goal asks of SGLang's ops (``--goal-pct``, default 2): from the newest layer records
integrate wrote (``work/integrate/*/e2e/*.json`` and the A/A runs', measured on a GPU), each recipe's
decode points up to T=64 with the layer's time, the part SGLang's ops take of it (each step timed
alone in the layer's graph, :class:`integrate.records.LayerTiming.ops_us`), and the speedup those ops
would need together for the whole layer to be ``goal`` % faster; where their whole part is less than
the goal, no kernel work on them alone reaches it, and the table says so.

What must stay true: pure reading (the store, the recipe files, the tasks); a row without a floor (an op
that is not byte-bound) saves nothing here and says so.
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.table import Table

from contract.layout import INTEGRATE_DIR, has_task, layer_records, load_task, task_dir
from integrate.recipe import LayerRecipe, all_recipes
from integrate.records import E2EResult
from optimize.features import features
from optimize.skills import load_skills
from pipeline.config import Config
from pipeline.console import console as make_console
from pipeline.errors import StaleRecordError
from pipeline.output import emit
from pipeline.record_io import read_record
from pipeline.store import ResultsStore
from pipeline.store_records import Row

DTYPE = "bf16"
GOAL_PCT = 2.0  # the model-step issue's goal: a decode step (T <= 64) this much faster on a MoE model
DECODE_MAX = 64
_TOKENS = re.compile(r"(?:^|,)(?:num_tokens|T|tokens|batch_size)=(\d+)(?:,|\])")


@dataclass(frozen=True)
class Saving:
    """One op at one decode point of one model."""

    op_id: str
    model: str
    tokens: int
    time_us: float
    floor_us: float | None
    calls_per_layer: int
    layers: int

    @property
    def gap_us(self) -> float:
        return max(0.0, self.time_us - self.floor_us) if self.floor_us else 0.0

    @property
    def per_step_us(self) -> float:
        return self.gap_us * self.calls_per_layer * self.layers


def shape_of(label: str) -> tuple[str, int | None]:
    """(model, tokens) of a store row's shape label ``Model[dim=..,..]`` (tokens None when it names none)."""
    model, _, dims = label.partition("[")
    found = _TOKENS.search(dims)
    return model, int(found.group(1)) if found else None


def newest_rows(store: ResultsStore) -> dict[tuple[str, str, int], Row]:
    """(op, model, tokens) -> the newest baseline bf16 row of the store at that model and token count."""
    out: dict[tuple[str, str, int], Row] = {}
    for _, _, row in store.history():
        if row.variant != "baseline" or row.dtype != DTYPE:
            continue
        model, tokens = shape_of(row.shape)
        if tokens is not None:
            out[(row.op_id, model, tokens)] = row  # history order: a later batch replaces an earlier one
    return out


def savings(recipes: Sequence[LayerRecipe], rows: dict[tuple[str, str, int], Row]) -> tuple[list[Saving], list[str]]:
    """Every (op, model, decode point) a recipe runs and the store measured, most per-step time first;
    and "op at model T=n" for each one the store has no row for."""
    found: list[Saving] = []
    missing: list[str] = []
    for recipe in recipes:
        counts: dict[str, int] = {}
        for step in recipe.steps_in("decode"):
            if step.op is not None:
                counts[step.op] = counts.get(step.op, 0) + 1
        for tokens in recipe.proxy.decode:
            for op_id, calls in sorted(counts.items()):
                row = rows.get((op_id, recipe.model, tokens))
                if row is None:
                    missing.append(f"{op_id} at {recipe.model} T={tokens}")
                    continue
                found.append(Saving(op_id, recipe.model, tokens, row.time_us, row.floor_us, calls, recipe.layers))
    return sorted(found, key=lambda s: (-s.per_step_us, s.op_id, s.model, s.tokens)), missing


@dataclass(frozen=True)
class StepShare:
    """One decode point of one recipe's newest layer record: the layer, and SGLang's ops in it."""

    model: str
    tokens: int
    layer_us: float
    ops_us: dict[str, float]  # SGLang op id -> its steps' time in one layer (µs), largest first
    record: str  # the layer record it comes from

    @property
    def sglang_us(self) -> float:
        return sum(self.ops_us.values())

    @property
    def share_pct(self) -> float:
        return 100.0 * self.sglang_us / self.layer_us

    def needed_speedup(self, goal_pct: float) -> float | None:
        """How much faster SGLang's ops would have to get together for the layer to be ``goal_pct`` % faster
        (None: their whole part is less than that)."""
        saved = self.layer_us * goal_pct / 100.0
        return self.sglang_us / (self.sglang_us - saved) if self.sglang_us > saved else None


def step_shares(work: pathlib.Path) -> list[StepShare]:
    """Each recipe's decode points up to :data:`DECODE_MAX` from its newest layer record (by file time) under
    ``work/integrate``; a record that does not read is left out (it is integrate's to rewrite)."""
    newest: dict[str, tuple[float, pathlib.Path, E2EResult]] = {}
    for path in layer_records(work):
        try:
            result = read_record(E2EResult, path)
        except StaleRecordError:
            continue
        if not result.ran or not result.model:
            continue
        when = path.stat().st_mtime
        if result.model not in newest or when > newest[result.model][0]:
            newest[result.model] = (when, path, result)
    out: list[StepShare] = []
    for model, (_, path, result) in sorted(newest.items()):
        ops = {step: part.removeprefix("SGLang ") for step, part in result.parts.items() if part.startswith("SGLang ")}
        for row in result.rows:
            if row.phase != "decode" or row.tokens > DECODE_MAX:
                continue
            per_op: dict[str, float] = {}
            for step, times in row.ops_us.items():
                if step in ops and "baseline" in times:
                    per_op[ops[step]] = per_op.get(ops[step], 0.0) + times["baseline"]
            if per_op:
                ranked = dict(sorted(per_op.items(), key=lambda kv: (-kv[1], kv[0])))
                out.append(StepShare(model, row.tokens, row.baseline_us, ranked, str(path.relative_to(work))))
    return out


def _goal_table(shares: Sequence[StepShare], goal_pct: float) -> Table:
    table = Table(title=f"what a {goal_pct:g} % faster decode step asks of SGLang's ops (newest layer records)")
    for col in (
        "model",
        "T",
        "layer µs",
        "SGLang ops µs",
        "share %",
        f"their speedup for {goal_pct:g} %",
        "ops, most µs first",
    ):
        table.add_column(col, overflow="fold")
    for s in shares:
        need = s.needed_speedup(goal_pct)
        table.add_row(
            s.model, str(s.tokens), f"{s.layer_us:.1f}", f"{s.sglang_us:.2f}", f"{s.share_pct:.2f}",
            f"{need:.2f}x" if need is not None else "not reachable (their whole part is less)",
            ", ".join(f"{op} {us:.2f}" for op, us in s.ops_us.items()),
        )  # fmt: skip
    return table


@dataclass(frozen=True)
class TaskFacts:
    """What the op's task says of its kernel: whether its launches use PDL, and the skills whose rule
    holds for it (mechanical ones, which the offline coder can apply, apart)."""

    pdl: str  # "on" (every launch, or by a template flag), "off", "mixed", or "no launch found"
    mechanical: list[str]
    other: list[str]


def task_facts(work: pathlib.Path, op_ids: Sequence[str]) -> dict[str, TaskFacts]:
    """:class:`TaskFacts` of each op with a CUDA task in the work folder (others are left out)."""
    library = load_skills()
    out: dict[str, TaskFacts] = {}
    for op_id in op_ids:
        folder = task_dir(work, op_id)
        if not has_task(folder):
            continue
        task = load_task(folder)
        if task.language != "cuda":
            continue
        found = features(folder / "src", task.editable, build_flags=task.build.cuda_cflags)
        modes = {launch.pdl for launch in found.launches}
        on = modes & {"on", "flag"}
        pdl = "no launch found" if not modes else "on" if modes == on else "mixed" if on else "off"
        skills = library.applicable(found)
        out[op_id] = TaskFacts(
            pdl=pdl,
            mechanical=[k.id for k in skills if k.transform],
            other=[k.id for k in skills if not k.transform],
        )
    return out


def unweighed(rows: dict[tuple[str, str, int], Row], recipes: Sequence[LayerRecipe]) -> list[tuple[str, float]]:
    """(op, worst time ÷ floor) of each op the store measured that no recipe runs, worst first."""
    run = {step.op for recipe in recipes for step in recipe.steps if step.op}
    worst: dict[str, float] = {}
    for (op_id, _, _), row in rows.items():
        if op_id in run or not row.floor_us:
            continue
        worst[op_id] = max(worst.get(op_id, 0.0), row.time_us / row.floor_us)
    return sorted(worst.items(), key=lambda item: -item[1])


@dataclass(frozen=True)
class HeadroomOptions:
    """What ``kernelsmith headroom`` is asked: the model-step goal (%) SGLang's ops are weighed against,
    and where ``--json`` collects the result."""

    goal_pct: float = GOAL_PCT
    emitted: list[Any] | None = None


def run(options: HeadroomOptions, config: Config) -> int:
    """The table of what a kernel at its floor would save per decode step, most first (see the module doc)."""
    console = make_console()
    recipes, broken = all_recipes()
    for name, why in broken.items():
        console.print(f"recipe {name} left out: {why}")
    rows = newest_rows(ResultsStore(config.work))
    found, missing = savings(recipes, rows)
    others = unweighed(rows, recipes)
    if not rows:
        console.print(
            f"no bf16 baseline rows with a token count in {config.work / 'results'}: run `kernelsmith track run` "
            "(the census) on a GPU machine first, or `kernelsmith track rebuild` from history/census/"
        )
    facts = task_facts(config.work, sorted({s.op_id for s in found}))
    table = Table(title="what a kernel at its floor would save per decode step (µs), most first")
    for col in ("op", "model", "T", "time µs", "floor µs", "time ÷ floor", "calls/layer", "layers", "per step µs"):
        table.add_column(col, overflow="fold")
    for s in found:
        ratio = f"{s.time_us / s.floor_us:.2f}" if s.floor_us else "no floor"
        floor = f"{s.floor_us:.2f}" if s.floor_us else "—"
        table.add_row(
            s.op_id, s.model, str(s.tokens), f"{s.time_us:.2f}", floor, ratio, str(s.calls_per_layer), str(s.layers),
            f"{s.per_step_us:.1f}",
        )  # fmt: skip
    console.print(table)
    for op_id, fact in facts.items():
        console.print(
            f"{op_id}: PDL {fact.pdl}; mechanical skills that apply: {', '.join(fact.mechanical) or 'none'}; "
            f"others: {', '.join(fact.other) or 'none'}"
        )
    if others:
        console.print(
            "measured, but no recipe runs them (worst time ÷ floor): " + ", ".join(f"{o} {r:.2f}" for o, r in others)
        )
    if missing:
        console.print(f"run by a recipe, not measured at its shapes ({len(missing)}): " + "; ".join(missing))
    shares = step_shares(config.work)
    if shares:
        console.print(_goal_table(shares, options.goal_pct))
    else:
        console.print(
            f"no layer records under {config.work / INTEGRATE_DIR}: `kernelsmith integrate` (or "
            "`python -m integrate.e2e --pristine`) on a GPU machine writes them"
        )
    emit(
        options,
        {
            "savings": [s.__dict__ | {"gap_us": s.gap_us, "per_step_us": s.per_step_us} for s in found],
            "no_recipe": [{"op_id": o, "worst_time_over_floor": r} for o, r in others],
            "not_measured": missing,
            "tasks": {op_id: fact.__dict__ for op_id, fact in facts.items()},
            "goal_pct": options.goal_pct,
            "step_shares": [
                s.__dict__
                | {
                    "sglang_us": s.sglang_us,
                    "share_pct": s.share_pct,
                    "needed_speedup": s.needed_speedup(options.goal_pct),
                }
                for s in shares
            ],
        },
    )
    return 0
