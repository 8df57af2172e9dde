"""The search space of a Triton task: its tunables, read from the task record and its wrapper, as decisions.

Why: a Triton kernel's launch configuration is data the task already records (the
launch sites' keywords, the kernels' ``tl.constexpr`` parameters and defaults, the
``@triton.autotune`` configs); the search (:mod:`optimize.search.space`) needs it as the
same :class:`optimize.policy.Decision` proposals the CUDA planner makes, so
``build_space(decisions(task, task_dir))`` is a :class:`~optimize.search.space.Space`
whose points :func:`~optimize.search.space.realize` turns into regions through
:mod:`optimize.transforms.triton_edits`.

What is tunable (:func:`tunables`), and what is not (with the reason, :class:`Untunable`):

- a launch's ``num_warps`` / ``num_stages``: given as an integer literal, or absent (Triton's
  default, :data:`optimize.transforms.triton_edits.DEFAULTS`) when no ``**splat`` may set it; not
  for an autotuned kernel (its configs carry them: a launch keyword would clash);
- a block-size constexpr (a parameter named ``*BLOCK*``) the launch passes by keyword as an
  integer literal, or as a wrapper local bound once to an integer literal (``block_h = 1024``);
  a value the wrapper computes (``triton.next_power_of_2(n)``) is shape-derived and stays;
- a block-size constexpr the launches leave to its integer default (the kernel's own default);
- an autotune list of two or more literal configs: pin one.

Values: ``num_warps`` over :data:`~optimize.transforms.triton_edits.NUM_WARPS`, ``num_stages`` over
:data:`~optimize.transforms.triton_edits.NUM_STAGES`, block sizes the powers of two from a quarter to
four times the baseline's, all but the baseline's own. Shape buckets: when the wrapper's token
count can be written (:func:`token_expression`), each launch-side tunable is one dimension per
token bucket the task's shapes fall in (decode T<=64, mid, prefill T>=512 of
:data:`pipeline.buckets.BUCKETS`), so a point picks a value per bucket and the baseline's stays
the fallback; a kernel-side one (a default, an autotune pin) is one dimension.

What must stay true: pure over the task folder (reads, never writes); the decisions' order
and values are a function of the task alone, so a point names the same edit every time;
every value offered is one Triton accepts (checked again by the transforms).
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import libcst as cst

from contract.layout import SRC_DIR, baseline_regions, read_task_files
from optimize.policy import Decision
from optimize.search.space import Choice, Space, build_space
from optimize.transforms import triton_coarsen as coarsen
from optimize.transforms import triton_edits as tt
from pipeline.buckets import BUCKETS, bucket_for
from pipeline.records import Task, TritonKernel, TritonLaunch

SKILLS = {
    "triton_launch_option": "triton_{option}",
    "triton_block_size": "triton_block_size",
    "triton_constexpr_default": "triton_constexpr_default",
    "triton_autotune_pin": "triton_autotune_pin",
    "triton_coarsen_programs": "triton_coarsen_programs",
}


def what_of(target: Mapping[str, Any]) -> str:
    """The part of a target a choice sets: an option, a constexpr, ``programs[axis]``, or the autotune list."""
    if "axis" in target:
        return f"programs[{target['axis']}]"
    return str(target.get("option") or target.get("name") or "autotune")


@dataclass(frozen=True)
class Tunable:
    """One thing a point may change: a transform on one target, the baseline's value, the others offered."""

    transform: str
    # launch/option, launch/name, kernel/name, kernel, or axis/kernel/launch (sorted items)
    target: tuple[tuple[str, str | int], ...]
    baseline: int | None
    values: tuple[int, ...]
    bucketed: bool  # a launch-side choice, one dimension per token bucket

    @property
    def id(self) -> str:
        t = dict(self.target)
        return f"{t.get('launch') or t.get('kernel')}/{what_of(t)}"


@dataclass(frozen=True)
class Untunable:
    what: str  # launch/option, launch/name, kernel/name
    why: str


# --------------------------------------------------------------------------- the wrapper


def wrapper_function(module: cst.Module, qualname: str) -> cst.FunctionDef | None:
    """The module-level function (or ``Class.method``) ``qualname`` of the wrapper's file."""
    head, _, tail = qualname.partition(".")
    for stmt in module.body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == qualname:
            return stmt
        if tail and isinstance(stmt, cst.ClassDef) and stmt.name.value == head:
            return next(
                (s for s in stmt.body.body if isinstance(s, cst.FunctionDef) and s.name.value == tail),
                None,
            )
    return None


class _Bindings(cst.CSTVisitor):
    """Every name a function binds (parameters, assignments, loop and ``with`` targets) and the assigned values."""

    def __init__(self) -> None:
        self.values: dict[str, list[cst.BaseExpression | None]] = {}

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression | None) -> None:
        if isinstance(target, cst.Name):
            self.values.setdefault(target.value, []).append(value)
        elif isinstance(target, cst.Tuple | cst.List):
            for el in target.elements:
                self._bind(el.value, None)
        elif isinstance(target, cst.StarredElement):
            self._bind(target.value, None)

    def visit_Param(self, node: cst.Param) -> None:
        self.values.setdefault(node.name.value, []).append(None)

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            self._bind(t.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind(node.target, node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._bind(node.target, None)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind(node.target, None)

    def visit_For(self, node: cst.For) -> None:
        self._bind(node.target, None)

    def visit_AsName(self, node: cst.AsName) -> None:
        if isinstance(node.name, cst.BaseExpression):
            self._bind(node.name, None)


def bindings(fn: cst.FunctionDef) -> dict[str, list[cst.BaseExpression | None]]:
    visitor = _Bindings()
    fn.visit(visitor)
    return visitor.values


def _splat_keys(call: cst.Call, bound: Mapping[str, list[cst.BaseExpression | None]]) -> set[str] | None:
    """The keys the launch's ``**name`` arguments may hold; None when one cannot be read (any key)."""
    keys: set[str] = set()
    for arg in call.args:
        if arg.star != "**":
            continue
        values = bound.get(arg.value.value, []) if isinstance(arg.value, cst.Name) else [None]
        if not values or any(not isinstance(v, cst.Dict) for v in values):
            return None
        for v in values:
            assert isinstance(v, cst.Dict)
            for el in v.elements:
                if not (isinstance(el, cst.DictElement) and isinstance(el.key, cst.SimpleString)):
                    return None
                keys.add(str(el.key.evaluated_value))
    return keys


def token_expression(task: Task, fn: cst.FunctionDef) -> str:
    """The wrapper's expression of the token count (``x.shape[0]``); "" when it cannot be written.

    The token axis is the size every catalog shape sets to the shape's token count
    (``num_tokens`` first); the expression reads it from the first required tensor parameter
    whose shape has that axis and that the wrapper never rebinds.
    """
    cases = [c for c in task.shapes if c.tokens is not None]
    if not cases:
        return ""
    axes = [s for s in cases[0].sizes if all(c.sizes.get(s) == c.tokens for c in cases)]
    axes.sort(key=lambda s: (s != "num_tokens", s))
    if not axes:
        return ""
    bound = bindings(fn)
    optional = {p.name for p in task.entry_signature.params if p.default is not None} if task.entry_signature else set()
    for axis in axes:
        for arg in task.contract.args:
            t = arg.tensor
            if t is None or t.name in optional or len(bound.get(t.name, [])) != 1 or axis not in t.shape:
                continue
            return f"{t.name}.shape[{t.shape.index(axis)}]"
    return ""


# --------------------------------------------------------------------------- tunables


def _kernel_of(task: Task, launch: TritonLaunch) -> TritonKernel | None:
    assert task.triton is not None
    return next((k for k in task.triton.kernels if k.name == launch.kernel.split(".")[-1]), None)


def _launch_spans(task: Task) -> list[tuple[str, TritonLaunch]]:
    assert task.triton is not None
    by_place = {(s.file, s.start_byte): s.name for s in task.editable if s.kind == "launcher"}
    return [(by_place[(l.file, l.start_byte)], l) for l in task.triton.launches if (l.file, l.start_byte) in by_place]


def is_block_size(name: str) -> bool:
    return "BLOCK" in name.upper()


def block_values(baseline: int) -> tuple[int, ...]:
    """Powers of two from a quarter to four times ``baseline``, without it."""
    return tuple(
        v for v in (baseline >> 2, baseline >> 1, baseline << 1, baseline << 2) if v >= 1 and v <= tt.MAX_BLOCK
    )


def _literal_binding(name: str, bound: Mapping[str, list[cst.BaseExpression | None]]) -> int | None:
    values = bound.get(name, [])
    return tt.literal_int(values[0]) if len(values) == 1 else None


def imports_triton(module: cst.Module) -> bool:
    """Whether the wrapper's file binds the name ``triton`` (``import triton``): a coarsened grid calls
    ``triton.cdiv``."""
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Import) and any(
                    tt.code(a.name) == "triton" and a.asname is None for a in small.names
                ):
                    return True
    return False


def _coarsening(
    call: cst.Call, kernel_text: str, kernel: str, span: str, has_triton: bool
) -> tuple[list[Tunable], list[Untunable]]:
    """Program coarsening (:mod:`optimize.transforms.triton_coarsen`) per grid axis the kernel reads, bucketed."""
    what = f"{span}/programs"
    entries = coarsen.grid_entries(call)
    if entries is None:
        return [], [Untunable(what, "the grid is not a literal tuple in the launch (the wrapper computes it)")]
    if not has_triton:
        return [], [Untunable(what, "the wrapper's file does not `import triton` (a coarsened grid calls triton.cdiv)")]
    try:
        _, fn = tt.parse_kernel(kernel_text, kernel)
    except tt.TransformError:
        return [], [Untunable(what, "the kernel's region is not a module-level function")]
    refused = coarsen.why_not(fn)
    if refused:
        return [], [Untunable(what, refused)]
    axes, _ = coarsen.program_axes(fn)
    out = []
    for axis in sorted(axes):
        if axis < len(entries) and tt.literal_int(entries[axis]) is None:
            target = (("axis", axis), ("kernel", kernel), ("launch", span))
            out.append(Tunable(coarsen.TRANSFORM, target, 1, coarsen.FACTORS, True))
    return out, []


def tunables(task: Task, task_dir: pathlib.Path) -> tuple[list[Tunable], list[Untunable], str]:
    """(the task's tunables, what looked tunable but is not and why, the token expression or "")."""
    if task.triton is None:
        raise ValueError(f"{task.op_id} is a {task.language} task, not a Triton one")
    regions = baseline_regions(read_task_files(task_dir, task), task)
    module = cst.parse_module((pathlib.Path(task_dir) / SRC_DIR / task.module).read_bytes())
    out: list[Tunable] = []
    skipped: list[Untunable] = []
    tokens = ""
    passed: dict[str, set[str]] = {}  # kernel -> constexprs some launch passes
    has_triton = imports_triton(module)
    for span, launch in _launch_spans(task):
        kernel = _kernel_of(task, launch)
        fn = wrapper_function(module, launch.function)
        if kernel is None or fn is None:
            skipped.append(Untunable(span, "the launched kernel or its wrapper function is not in the task"))
            continue
        tokens = tokens or token_expression(task, fn)
        bound = bindings(fn)
        call = tt.parse_launch(regions[span], span)
        splat = _splat_keys(call, bound)
        names = [p.name for p in kernel.params]
        given = set(names[: len([a for a in call.args if a.keyword is None and not a.star])])
        given |= {a.keyword.value for a in call.args if a.keyword is not None}
        passed.setdefault(kernel.name, set()).update(given | (splat or set()))
        autotuned = bool(kernel.autotune) or any(d.split(".")[-1] == "autotune" for d in kernel.decorators)
        for option in tt.LAUNCH_OPTIONS:
            what = f"{span}/{option}"
            arg = tt.keyword(call, option)
            if autotuned:
                skipped.append(Untunable(what, "the kernel is autotuned: its configs set it"))
                continue
            if arg is not None:
                baseline = tt.literal_int(arg.value)
                if baseline is None:
                    skipped.append(Untunable(what, f"the wrapper computes it ({tt.code(arg.value)})"))
                    continue
            elif splat is None or option in splat:
                skipped.append(Untunable(what, "a **argument of the launch sets it or may"))
                continue
            else:
                baseline = tt.DEFAULTS[option]
            choices = tt.NUM_WARPS if option == "num_warps" else tt.NUM_STAGES
            target = (("launch", span), ("option", option))
            out.append(
                Tunable("triton_launch_option", target, baseline, tuple(v for v in choices if v != baseline), True)
            )
        found, why = _coarsening(call, regions.get(kernel.name, ""), kernel.name, span, has_triton)
        out += found
        skipped += why
        for p in kernel.params:
            if not (p.constexpr and is_block_size(p.name)):
                continue
            what = f"{span}/{p.name}"
            arg = tt.keyword(call, p.name)
            if arg is None:
                if p.name in given:
                    skipped.append(Untunable(what, "passed by position"))
                continue
            value = tt.literal_int(arg.value)
            if value is None and isinstance(arg.value, cst.Name):
                value = _literal_binding(arg.value.value, bound)
            if value is None or value & (value - 1):
                skipped.append(Untunable(what, f"the wrapper computes it from the shapes ({tt.code(arg.value)})"))
                continue
            out.append(
                Tunable("triton_block_size", (("launch", span), ("name", p.name)), value, block_values(value), True)
            )
    for kernel in task.triton.kernels:
        if kernel.name not in regions:
            continue
        try:
            _, fn_def = tt.parse_kernel(regions[kernel.name], kernel.name)
        except tt.TransformError:
            skipped.append(Untunable(kernel.name, "its region is not a module-level function (defined inside a block)"))
            continue
        tuned = tt.autotune_call(fn_def)
        configs = tt.autotune_list(tuned) if tuned is not None else None
        if configs is not None and len(configs.elements) > 1:
            out.append(
                Tunable(
                    "triton_autotune_pin",
                    (("kernel", kernel.name),),
                    None,
                    tuple(range(len(configs.elements))),
                    False,
                )
            )
        configured = {k for c in kernel.autotune for k in c.kwargs}
        for p in kernel.params:
            if not (p.constexpr and is_block_size(p.name)) or p.default is None:
                continue
            if kernel.name not in passed or p.name in passed[kernel.name] or p.name in configured:
                continue  # a helper's (its caller passes it), a launch's, or an autotune config's
            value = tt.literal_int(cst.parse_expression(p.default))
            if value is None or value & (value - 1):
                skipped.append(Untunable(f"{kernel.name}/{p.name}", f"its default is not a power of two ({p.default})"))
                continue
            out.append(
                Tunable(
                    "triton_constexpr_default",
                    (("kernel", kernel.name), ("name", p.name)),
                    value,
                    block_values(value),
                    False,
                )
            )
    return out, skipped, tokens


def buckets_of(task: Task) -> list[str]:
    """The token buckets the task's shapes fall in, in :data:`BUCKETS` order."""
    present = {bucket_for(c.tokens) for c in task.shapes if c.tokens is not None}
    return [name for name, _, _ in BUCKETS if name in present]


def decisions(task: Task, task_dir: pathlib.Path) -> list[Decision]:
    """The tunables as proposals: one per value, per bucket where the tunable is launch-side and tokens are known."""
    found, _, tokens = tunables(task, task_dir)
    buckets = buckets_of(task) if tokens else []
    out: list[Decision] = []
    for t in found:
        target = dict(t.target)
        skill = SKILLS[t.transform].format(**target)
        key = "index" if t.transform == "triton_autotune_pin" else "value"
        for bucket in buckets if t.bucketed and buckets else [""]:
            where = {"bucket": bucket, "tokens": tokens} if bucket else {}
            for value in t.values:
                out.append(
                    Decision(
                        skill=skill,
                        version=1,
                        title=f"{t.id}{f' at {bucket}' if bucket else ''} = {value}",
                        verdict="proposed",
                        params={**target, **where, key: value},
                        mode="transform",
                        transform=t.transform,
                        reasons=[f"baseline {t.baseline}" if t.baseline is not None else "keep every config"],
                    )
                )
    return out


def facts(task: Task, task_dir: pathlib.Path) -> dict[str, Any]:
    """What a coder of this Triton task needs beside its regions (JSON-ready; the LLM prompts and
    ``agent show`` both read it): the tunables with their baseline and the values offered, what is
    not tunable and why, the kernels' constexprs and autotune configs, the launches' keywords, the
    wrapper's token count and the token buckets the task's shapes fall in."""
    assert task.triton is not None
    found, skipped, tokens = tunables(task, task_dir)
    return {
        "wrapper": task.triton.wrapper,
        "kernels": [
            {
                "name": k.name,
                "constexprs": [p.name + (f" = {p.default}" if p.default else "") for p in k.params if p.constexpr],
                "autotune": [c.model_dump(mode="json", exclude_defaults=True) for c in k.autotune],
                "autotune_key": list(k.autotune_key),
                "heuristics": list(k.heuristics),
            }
            for k in task.triton.kernels
        ],
        "launches": [{"kernel": l.kernel, "grid": l.grid, "keywords": dict(l.kwargs)} for l in task.triton.launches],
        "tunables": [
            {"what": t.id, "baseline": t.baseline, "values": list(t.values), "per_bucket": t.bucketed} for t in found
        ],
        "not_tunable": [{"what": u.what, "why": u.why} for u in skipped],
        "token_count": tokens or None,
        "buckets": buckets_of(task),
    }


def facts_text(found: Mapping[str, Any]) -> str:
    """:func:`facts` as prompt lines."""
    lines = [f"- wrapper: {found['wrapper']} (token count: {found['token_count'] or 'not known'})"]
    lines.append(f"- token buckets of the task's shapes: {', '.join(found['buckets']) or '(none)'}")
    for k in found["kernels"]:
        lines.append(f"- kernel {k['name']}: constexprs {', '.join(k['constexprs']) or '(none)'}")
        for config in k["autotune"]:
            lines.append(f"  autotune config: {config}")
        if k["autotune_key"]:
            lines.append(f"  autotune key: {', '.join(k['autotune_key'])}")
    for launch in found["launches"]:
        keywords = ", ".join(f"{n}={v}" for n, v in launch["keywords"].items()) or "(none: Triton's defaults)"
        lines.append(f"- launch {launch['kernel']}[{launch['grid']}]: keywords {keywords}")
    for t in found["tunables"]:
        where = " (one value per token bucket)" if t["per_bucket"] else ""
        lines.append(f"- tunable {t['what']}: baseline {t['baseline']}, values {t['values']}{where}")
    for u in found["not_tunable"]:
        lines.append(f"- not tunable {u['what']}: {u['why']}")
    return "\n".join(lines)


def triton_space(task: Task, task_dir: pathlib.Path) -> Space:
    return build_space(decisions(task, task_dir))


def choice_id(choice: Choice) -> str:
    """A choice as text: ``launch:k/num_warps@T<=64=8``, ``k/BLOCK=128``, ``k/autotune=1``."""
    p: dict[str, Any] = choice.as_dict
    where = p.get("launch") or p.get("kernel")
    what = what_of(p)
    bucket = f"@{p['bucket']}" if p.get("bucket") else ""
    return f"{where}/{what}{bucket}={p.get('value', p.get('index'))}"


def point_id(space: Space, point: Mapping[str, int]) -> str:
    """A point as text: its choices' ids joined by "+", or "baseline"."""
    return "+".join(choice_id(c) for c in space.steps(point)) or "baseline"


def single_points(space: Space) -> list[dict[str, int]]:
    """Every point that changes one dimension, in dimension then value order."""
    return [{d.name: i} for d in space.dimensions for i in d.values[1:]]


__all__ = [
    "SKILLS",
    "Tunable",
    "Untunable",
    "bindings",
    "block_values",
    "buckets_of",
    "choice_id",
    "decisions",
    "facts",
    "facts_text",
    "point_id",
    "single_points",
    "token_expression",
    "triton_space",
    "tunables",
    "wrapper_function",
]
