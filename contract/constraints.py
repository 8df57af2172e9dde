"""Sizes and scalars the kernel's own checks accept (``Contract.constraints``).

Extract translates the launcher's ``RuntimeCheck`` conditions into Python over the
contract's symbols and scalar names where it can (``(kH == 3) or (kH == 6) or
(kH == 12)``, ``(numel % hidden_size) == 0``). The harness uses them where it has
to choose a value itself:

- a **synthetic shape** (no model config sizes the op): the generic sizes are moved
  until the checks hold (:func:`solve`), instead of being refused by the baseline
  one message at a time;
- an **open int scalar** the checks mention (``hidden_size``, ``num_heads``): it is
  settled per shape case, from that case's sizes (:func:`settle_scalars`);
- **held-out draws**: a draw the checks refuse is not a test of anything
  (:func:`violated`), so it is drawn again.

What must stay true:
- A constraint that cannot be evaluated (a name with no value, a division by zero)
  is neither kept nor broken: only what the baseline itself would check is solved,
  and the baseline stays the judge (a check extract could not translate still
  refuses a bad value on the GPU, and the sweep reports it).
- Catalog sizes are never changed (they are real model shapes); only sizes the
  harness invented and scalars no one supplied are free.
- Pure Python, no torch: the sweep plans every call on the CPU.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Iterable, Mapping

from contract import expr
from contract.errors import ExprError
from pipeline.records import Contract

# Values tried for a free name, beside the constants the constraints mention and the
# other names' values: powers of two and the small head counts kernels specialise on.
POOL = (1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
MAX_VALUE = 1 << 16  # a size the harness invents stays small enough to allocate and check fast
MAX_STEPS = 24  # value changes per solve; each must leave fewer constraints broken


@functools.lru_cache(maxsize=4096)
def _compiled(constraint: str) -> tuple[ast.Expression, frozenset[str], tuple[int, ...]] | None:
    """(tree, names, integer literals) of one constraint; None when it is not the
    restricted Python extract writes (:data:`contract.expr.CONDITION`; it is then
    ignored, never evaluated)."""
    try:
        tree = expr.parse(constraint, expr.CONDITION)
    except ExprError:
        return None
    return tree, expr.names(tree), expr.int_literals(tree)


def names_of(constraint: str) -> frozenset[str]:
    compiled = _compiled(constraint)
    return compiled[1] if compiled else frozenset()


_UNKNOWN = object()


def _evaluate(expression: str, env: Mapping[str, int | bool]) -> object:
    """The value of a validated expression at ``env``, or ``_UNKNOWN`` (a name with no
    value, a division by zero, text that is not the restricted Python extract writes)."""
    compiled = _compiled(expression)
    if compiled is None or not compiled[1] <= env.keys():
        return _UNKNOWN
    try:
        return expr.evaluate(compiled[0], env)
    except (ExprError, ArithmeticError, TypeError):
        return _UNKNOWN


def holds(constraint: str, env: Mapping[str, int | bool]) -> bool | None:
    """Whether ``constraint`` holds at ``env``; None when it cannot be evaluated there."""
    value = _evaluate(constraint, env)
    return None if value is _UNKNOWN else bool(value)


def value_at(expression: str, env: Mapping[str, int | bool]) -> int | None:
    """An integer expression's value at ``env`` (None when it cannot be evaluated)."""
    value = _evaluate(expression, env)
    return int(value) if isinstance(value, int) else None


def scalar_env(contract: Contract) -> dict[str, int | bool]:
    """The int and bool scalars' known values; an open bool is False (as the harness calls it)."""
    env: dict[str, int | bool] = {}
    for arg in contract.args:
        spec = arg.scalar
        if spec is None:
            continue
        if spec.type == "bool":
            env[spec.name] = bool(spec.value) if spec.value is not None else False
        elif spec.type == "int" and isinstance(spec.value, int) and not isinstance(spec.value, bool):
            env[spec.name] = spec.value
    return env


def open_ints(contract: Contract) -> set[str]:
    """Int scalars with no value that some constraint mentions: settled per case here.
    A scalar named after a size symbol (``timestep_embedding(..., dim)`` beside
    ``out[batch_size, dim]``) is not one: it takes that size."""
    mentioned = set().union(*(names_of(c) for c in contract.constraints)) if contract.constraints else set()
    return {
        a.scalar.name
        for a in contract.args
        if a.scalar is not None
        and a.scalar.type == "int"
        and a.scalar.value is None
        and a.scalar.name in mentioned
        and a.scalar.name not in contract.symbols
    }


def violated(contract: Contract, sizes: Mapping[str, int]) -> list[str]:
    """The constraints that evaluate to False at ``sizes`` (plus the scalars' values)."""
    env = {**scalar_env(contract), **sizes}
    return [c for c in contract.constraints if holds(c, env) is False]


def _direct(constraint: str, name: str, env: Mapping[str, int | bool]) -> list[int]:
    """Values of ``name`` that an equality in ``constraint`` states outright
    (``input_width == query_width + ...`` with ``name`` alone on one side)."""
    out: list[int] = []
    if _compiled(constraint) is None:
        return out
    for node in ast.walk(expr.parse(constraint, expr.CONDITION)):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq):
            for mine, other in ((node.left, node.comparators[0]), (node.comparators[0], node.left)):
                if isinstance(mine, ast.Name) and mine.id == name:
                    value = value_at(ast.unparse(other), env)
                    if value is not None:
                        out.append(value)
    return out


def _candidates(
    contract: Contract, constraint: str, name: str, env: Mapping[str, int | bool], *, scalar: bool = False
) -> list[int]:
    """Values to try for ``name``: what an equality states, the constraints' constants,
    :data:`POOL`, the other names' values, small multiples and pairwise products of them.
    A scalar may be 0 (a count of shared experts), a size not."""
    literals = {v for c in contract.constraints if (k := _compiled(c)) for v in k[2]}
    others = {int(v) for k, v in env.items() if k != name and not isinstance(v, bool) and isinstance(v, int)}
    scaled = {v * f for v in others for f in (2, 3, 4)} | {v // f for v in others for f in (2, 4) if v % f == 0}
    products = {a * b for a in others for b in others if a * b <= MAX_VALUE}  # `elements % (channels * spatial)`
    ordered = [
        *_direct(constraint, name, env),
        *sorted(literals),
        *POOL,
        *sorted(others),
        *sorted(scaled),
        *sorted(products),
    ]
    return [v for v in dict.fromkeys(ordered) if (0 if scalar else 1) <= v <= MAX_VALUE]


def _starts(contract: Contract, mine: list[str], name: str, env: Mapping[str, int | bool]) -> list[int]:
    """First values for an open scalar: what an equality states, then the size of a
    name sharing a word with it (``hidden_size`` ~ ``hidden_dim``), then 0 (a count
    that can be none: ``num_fused_shared_experts <= 1``), then the other sizes,
    largest first, then the usual candidates: a scalar that sizes something is more
    often one of the op's widths than 1."""
    words = set(name.lower().split("_")) - {"num", "size", "dim"}
    sized = {k: int(v) for k, v in env.items() if not isinstance(v, bool) and isinstance(v, int) and k != name}
    similar = [v for k, v in sorted(sized.items()) if words & set(k.lower().split("_"))]
    direct = [v for c in mine for v in _direct(c, name, env)]
    rest = [v for c in mine for v in _candidates(contract, c, name, env, scalar=True)]
    ordered = [*direct, *similar, 0, *sorted(sized.values(), reverse=True), *rest]
    return [v for v in dict.fromkeys(ordered) if 0 <= v <= MAX_VALUE]


def _conjuncts(constraint: str) -> list[str]:
    """The operands of a top-level ``and`` (nested ones flattened), else the constraint."""
    if _compiled(constraint) is None:
        return [constraint]
    tree = expr.parse(constraint, expr.CONDITION).body
    if not (isinstance(tree, ast.BoolOp) and isinstance(tree.op, ast.And)):
        return [constraint]
    return [part for value in tree.values for part in _conjuncts(ast.unparse(value))]


def solve(
    contract: Contract,
    sizes: Mapping[str, int],
    free: Iterable[str],
    *,
    accepts: Callable[[str, int], bool] | None = None,
) -> tuple[dict[str, int], list[str]]:
    """``sizes`` with the ``free`` names moved until no constraint is broken, or as few
    as this greedy search reaches; and the constraints still broken.

    Each step tries, for each broken constraint and each free name in it, the values
    an equality states, the constants the constraints use, :data:`POOL` and the other
    names' values (and small multiples), and takes the change that breaks the fewest
    constraints, only if that is fewer than before. A free name missing from
    ``sizes`` (an open scalar) starts at the first value that breaks the fewest
    of the constraints that mention it (:func:`_starts` orders them)."""
    accepts = accepts or (lambda _name, _value: True)
    env: dict[str, int | bool] = {**scalar_env(contract), **sizes}
    free = [n for n in dict.fromkeys(free)]
    scalars = {n for n in free if n not in sizes}  # open scalars: 0 is a value, not an empty size
    # each side of a top-level `and` on its own: one name moved can mend one side
    # (`(num_experts > 0) and (block_size > 0)` with both at 0)
    constraints = [part for c in contract.constraints for part in _conjuncts(c)]
    for name in free:
        if name not in env:
            mine = [c for c in constraints if name in names_of(c)]
            starts = _starts(contract, mine, name, env) or [1]
            env[name] = min(
                starts, key=lambda v: sum(holds(m, {**env, name: v}) is False for m in mine)
            )  # first of the best

    def broken(at: Mapping[str, int | bool]) -> list[str]:
        return [c for c in constraints if holds(c, at) is False]

    now = broken(env)
    for _ in range(MAX_STEPS):
        if not now:
            break
        best: tuple[dict[str, int | bool], list[str]] | None = None
        for constraint in now:
            for name in sorted(names_of(constraint) & set(free)):
                for value in _candidates(contract, constraint, name, env, scalar=name in scalars):
                    if value == env.get(name) or not accepts(name, value):
                        continue
                    trial = {**env, name: value}
                    after = broken(trial)
                    if len(after) < len(now) and (best is None or len(after) < len(best[1])):
                        best = (trial, after)
        if best is None:
            break
        env, now = best
    keep = set(sizes) | set(free)
    return {k: int(v) for k, v in env.items() if k in keep}, now


def settle_scalars(contract: Contract, sizes: Mapping[str, int]) -> dict[str, int]:
    """Values for the open int scalars the constraints mention, at one case's sizes
    (which stay as they are): ``hidden_size`` with ``numel % hidden_size == 0``."""
    wanted = open_ints(contract) - set(sizes)
    if not wanted:
        return {}
    solved, _ = solve(contract, sizes, wanted)
    return {k: v for k, v in solved.items() if k in wanted}
