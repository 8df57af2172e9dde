"""Shapes the harness invents: one synthetic shape, and fresh held-out draws.

Two kinds, both pure Python (extract plans instantiations at the synthetic shape on
the CPU, and the sweep asks whether a contract can be drawn from before any build):

- :func:`synthetic_shape`: one small generic shape for a contract no model config
  sizes (``bench --all`` only; never timed, never a catalog shape);
- :func:`draw_held_out`: fresh shapes for one evaluation, T=1 first, then odd token
  counts in each token bucket, then next to the buckets' edges; widths varied within
  what the contract and the instantiations accept.

What must stay true:
- Held-out shapes are drawn from an RNG the caller seeds from ``os.urandom``: a
  candidate never sees the same held-out inputs twice; each case records its sizes.
- Only shapes the contract accepts are drawn: T=1 and odd token counts, widths from
  ``allowed_values`` or multiples of ``divisibility`` up to ``max_values``, and, where
  the instantiation is specialised on a width, only widths that have an instantiation;
  a draw the kernel's own checks refuse (:mod:`contract.constraints`) is drawn again.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

from contract import constraints
from contract.errors import ContractError
from contract.sizes import (
    SYNTHETIC_MODEL,
    derived_symbols,
    eval_expr,
    instantiations_for,
    numel_at,
    pinned_sizes,
    resolve_sizes,
    resolved_range,
    select_instantiation,
    shape_symbols,
    symbols_of,
    template_ints,
    tensor_specs,
    token_symbol,
    width_symbols,
)
from pipeline.buckets import BUCKETS
from pipeline.records import Contract, Instantiation, ShapeCase

# Largest tensor a held-out draw may produce, in elements (keeps a check fast).
MAX_HELD_OUT_ELEMENTS = 1 << 26
SYNTHETIC_TOKENS = 8
SYNTHETIC_WIDTH = 128  # a multiple of every vector width (8/16 bytes of bf16/fp32) the kernels use


def _pinned_widths(
    contract: Contract, pool: Sequence[Instantiation], widths: list[str], pinned: list[int]
) -> dict[str, int]:
    """Which width symbol takes which integer the first instantiation is specialised on:
    the first assignment (widths in name order, at most 5040 tried) under which that
    instantiation is the one :func:`select_instantiation` picks; else widths and
    integers paired in sorted order."""
    import itertools

    fallback = dict(zip(widths, pinned))
    if not pool or not pinned or not widths:
        return fallback
    first = pool[0]
    for count in range(min(len(widths), len(pinned)), 0, -1):
        for chosen in itertools.islice(itertools.permutations(pinned, count), 5040):
            for names in itertools.islice(itertools.combinations(widths, count), 64):
                trial = dict(zip(names, chosen))
                sizes = {w: trial.get(w, SYNTHETIC_WIDTH) for w in widths}
                try:
                    if select_instantiation(contract, pool, first.dtype, sizes) == first:
                        return trial
                except ContractError:
                    continue
    return fallback


def synthetic_shape(contract: Contract, instantiations: Sequence[Instantiation] = ()) -> ShapeCase | None:
    """One small shape for a contract the model catalog cannot size, for ``bench --all`` only.

    About two thirds of SGLang's ops size tensors by symbols no model config names
    (``num_slots``, ``page_size``, ``draft_token_num``): without a shape their
    baselines could not be tested at all. Each symbol gets a small generic value:
    the token symbol :data:`SYNTHETIC_TOKENS`, a width an instantiation is
    specialised on that width, an ``allowed_values`` entry, else
    :data:`SYNTHETIC_WIDTH` rounded up to ``divisibility``. Relations the contract
    does not state (``hidden_size_times_2``) may be broken by such a shape; the
    kernel's own checks then refuse it, and the sweep reports that refusal.

    What must stay true: these shapes are labelled ``synthetic`` and never become
    catalog shapes, timings or speedups: no model runs them.
    """
    symbols = shape_symbols(contract)
    if not symbols:
        return None
    token = token_symbol(contract)
    pool = instantiations_for(contract, instantiations)
    widths = sorted(width_symbols(contract) & symbols - {token})
    if pool and pool[0].sizes:  # made for these sizes (a loader read them from a tensor)
        pinned_for = {k: v for k, v in pool[0].sizes.items() if k in symbols}
    else:
        pinned = sorted(template_ints(pool[0])) if pool else []
        pinned_for = _pinned_widths(contract, pool, widths, pinned)
    sizes: dict[str, int] = {}
    for sym in sorted(symbols):
        if sym == token:
            candidates = [*([pinned_for[sym]] if sym in pinned_for else []), SYNTHETIC_TOKENS]
        else:
            candidates = [
                *([pinned_for[sym]] if sym in pinned_for else []),
                *sorted(contract.allowed_values.get(sym, [])),
                SYNTHETIC_WIDTH,
            ]
        step = contract.divisibility.get(sym, 1)
        candidates = [step * -(-c // step) for c in candidates]
        if sym in contract.max_values:  # the largest accepted value, when the generic one is too big
            candidates.append(contract.max_values[sym] // step * step)
        sizes[sym] = next((c for c in candidates if contract.accepts(sym, c)), candidates[0])
    # The kernel's own checks, where extract could translate them, move the generic
    # values (and settle the open int scalars they mention): `kH in {3, 6, 12}`.
    free = (set(sizes) - set(pinned_for)) | constraints.open_ints(contract)
    sizes, _broken = constraints.solve(contract, sizes, sorted(free), accepts=contract.accepts)
    sizes = _bounded(contract, sizes, [s for s in sorted(free) if s in symbols])
    source = "synthetic: no model config sizes this contract; generic values for the baseline's own tests only"
    return ShapeCase(
        model=SYNTHETIC_MODEL,
        tokens=sizes.get(token, SYNTHETIC_TOKENS) if token else SYNTHETIC_TOKENS,
        sizes=sizes,
        source=source,
    )


def _bounded(contract: Contract, sizes: dict[str, int], free: list[str]) -> dict[str, int]:
    """``sizes`` with free sizes halved, largest first, until no tensor holds more than
    :data:`MAX_HELD_OUT_ELEMENTS` (a six-dimensional video tensor at 128 a dimension is
    256 GiB) and no more of the kernel's checks break than before."""
    sizes = dict(sizes)
    before = len(constraints.violated(contract, sizes))
    for _ in range(256):
        specs = tensor_specs(contract)
        biggest = max(specs, key=lambda spec: numel_at(spec, sizes), default=None)
        if biggest is None or numel_at(biggest, sizes) <= MAX_HELD_OUT_ELEMENTS:
            break
        mine = {name for dim in biggest.shape if isinstance(dim, str) for name in symbols_of(dim)}
        for name in sorted((n for n in free if n in mine and sizes.get(n, 0) > 1), key=lambda n: -sizes[n]):
            step = contract.divisibility.get(name, 1)
            smaller = sizes[name] // 2 // step * step
            trial = {**sizes, name: smaller}
            if (
                smaller >= 1
                and contract.accepts(name, smaller)
                and len(constraints.violated(contract, trial)) <= before
            ):
                sizes = trial
                break
        else:
            break
    return sizes


HELD_OUT_MAX_TOKENS = 8191  # the largest held-out token count (before a contract's own cap)


def _bands() -> list[tuple[int, int, tuple[int, ...]]]:
    """One odd token-count band inside each token bucket (:data:`pipeline.buckets.BUCKETS`), with
    the odd counts next to the bucket's inner edges: (3, 63, (63,)), (65, 511, (65, 511)),
    (513, 8191, (513,)). Why from the buckets: a configuration chosen per bucket is validated
    inside every bucket and on both sides of each edge (issue 14 item 4)."""
    out = []
    for i, (_, low, high) in enumerate(BUCKETS):
        lo = max(3, low | 1)
        hi = min(high, HELD_OUT_MAX_TOKENS)
        hi = hi if hi % 2 else hi - 1
        edges = tuple(e for e, inner in ((lo, i > 0), (hi, i < len(BUCKETS) - 1)) if inner)
        out.append((lo, hi, edges))
    return out


_BANDS = _bands()


def _odd_token_count(rng: random.Random, index: int, *, edge: bool = False) -> int:
    """An odd count in the band of draw ``index``: anywhere in it, or (``edge``) next to an edge of its bucket."""
    lo, hi, edges = _BANDS[index % len(_BANDS)]
    if edge and edges:
        return rng.choice(edges)
    value = rng.randrange(lo, hi + 1)
    return value if value % 2 else value + 1


def draw_held_out(
    contract: Contract,
    catalog: Sequence[ShapeCase],
    count: int,
    rng: random.Random,
    *,
    instantiations: Sequence[Instantiation] = (),
    dtypes: Iterable[str] = (),
) -> list[ShapeCase]:
    """Fresh shapes for one evaluation: T=1 first, then odd token counts; widths varied.

    Widths: a symbol with ``allowed_values`` cycles through them (shuffled), so
    ``count`` draws cover every accepted width when ``count`` is at least their
    number; a symbol with ``divisibility`` gets a random multiple up to
    ``max_values`` (else the catalog's largest); other widths keep a catalog
    case's values. A width that an instantiation is specialised on is drawn only
    among the widths every requested dtype has an instantiation for; where two or more widths
    are bound that way, they keep a catalog case's values together (nothing records which
    template integer is which width).
    """
    if count <= 0 or not catalog:
        return []
    token = token_symbol(contract, catalog)
    derived = derived_symbols(contract, catalog, token)
    base_sizes = [resolve_sizes(contract, c, catalog) for c in catalog]
    widths = sorted(shape_symbols(contract) - {token} - set(derived))
    # widths pinned by template specialisation, per dtype: only values every dtype has
    pool = instantiations_for(contract, instantiations)
    dtypes = list(dtypes) or sorted({i.dtype for i in pool})
    per_dtype = [set().union(*[template_ints(i) for i in pool if i.dtype == d]) for d in dtypes]
    bound: dict[str, set[int]] = {}
    for w in widths:
        catalog_values = {s[w] for s in base_sizes}
        if per_dtype and all(ints and catalog_values <= ints for ints in per_dtype):
            common = set.intersection(*per_dtype)
            bound[w] = {v for v in common if contract.accepts(w, v)}
    recorded = pinned_sizes(pool, dtypes)  # sizes the instantiations were made for
    # Two or more widths bound only by the same template integers: which integer is which width is
    # not recorded (hc_combine's Hc<4, 2560> also serves kHcCount=2560, kHiddenSize=4 by set
    # inclusion, a pairing its baseline refuses), so they keep a catalog case's values, together.
    template_only = [w for w in bound if w not in recorded]
    joint = set(template_only) if len(template_only) > 1 else set()
    for w in joint:
        del bound[w]
    for w in widths:
        if w in recorded:
            bound[w] = {v for v in recorded[w] if contract.accepts(w, v)}
    cycles: dict[str, list[int]] = {}
    for w in widths:
        if w in joint:
            continue
        if w in bound:
            cycles[w] = sorted(bound[w])
        elif w in contract.allowed_values:
            cycles[w] = sorted(v for v in contract.allowed_values[w] if contract.accepts(w, v))
        if w in cycles:
            rng.shuffle(cycles[w])
    out: list[ShapeCase] = []
    attempts = 0
    accepted_at = 0  # the attempt that gave the last draw; one refused since: cycled widths at random
    while len(out) < count and attempts < count * 50:
        attempts += 1
        missed = attempts - 1 - accepted_at
        index = len(out)
        base = dict(rng.choice(base_sizes))
        for w in widths:
            if w in joint:
                continue  # the catalog case's value, paired as the catalog pairs it
            if cycles.get(w):
                base[w] = cycles[w][index % len(cycles[w])] if not missed else rng.choice(cycles[w])
            elif w in contract.divisibility:
                step = contract.divisibility[w]
                top = contract.max_values.get(w, max(s[w] for s in base_sizes))
                base[w] = step * rng.randint(1, max(1, top // step))
        for sym, (src, factor) in derived.items():
            base[sym] = base[src] * factor
        if token is not None and token in recorded:  # a token count the loader specialised on
            base[token] = recorded[token][index % len(recorded[token])]
        elif token is not None:
            # after a refused draw, a smaller band may do (slots distinct within a pool)
            band = index if not missed else rng.choice([index, 0])
            # the first visit of each band draws inside it, the next one at its bucket's edge
            edge = not missed and index > len(BUCKETS)
            base[token] = 1 if index == 0 else _odd_token_count(rng, band, edge=edge)
            cap = contract.max_values.get(token)
            if cap is not None and base[token] > cap:  # the most rows the op is called with
                base[token] = max(1, cap if cap % 2 else cap - 1)
        if not all(contract.accepts(s, v) for s, v in base.items() if s != token):
            continue
        biggest = max((numel_at(spec, base) for spec in tensor_specs(contract)), default=0)
        if token is not None and biggest > MAX_HELD_OUT_ELEMENTS and base[token] > 1:
            per_token = max(1, biggest // base[token])
            base[token] = max(1, (MAX_HELD_OUT_ELEMENTS // per_token) | 1)
        for name in constraints.open_ints(contract):  # settled again at the drawn sizes
            base.pop(name, None)
        base.update(constraints.settle_scalars(contract, base))
        if constraints.violated(contract, base):  # a shape the kernel's own checks refuse tests nothing
            continue
        if not _exact(contract, base):  # `size_n * tile_size / pack_factor` must divide exactly
            continue
        if not _distinct_fit(contract, base):  # more slots than the range has
            continue
        if pool and not all(_servable(contract, pool, dtype, base) for dtype in dtypes):
            continue  # no instantiation was made for it (minimax_qknorm_rope's head 128, rope 64)
        tokens = base.get(token, 1) if token is not None else 1
        dims = ",".join(f"{k}={v}" for k, v in sorted(base.items()))
        out.append(ShapeCase(model="held-out", tokens=tokens, sizes=base, source=f"held-out draw {index}: {dims}"))
        accepted_at = attempts
    return out


def _distinct_fit(contract: Contract, sizes: dict[str, int]) -> bool:
    """Whether every ``distinct`` tensor's range holds as many values as it has elements."""
    fixed = [a.scalar for a in contract.args if a.kind == "scalar" and a.scalar is not None]
    known = {**sizes, **{s.name: int(s.value) for s in fixed if s.type == "int" and s.value is not None}}
    for spec in tensor_specs(contract):
        if spec.structure != "distinct":
            continue
        try:
            low, high = resolved_range(spec, known) or (0, -1)
        except ContractError:
            return False
        if numel_at(spec, sizes) > high - low + 1:
            return False
    return True


def _exact(contract: Contract, sizes: dict[str, int]) -> bool:
    """Whether every tensor's shape evaluates at ``sizes`` (each division exact)."""
    try:
        for spec in tensor_specs(contract):
            for dim in spec.shape:
                if dim not in (-1, "-1"):
                    eval_expr(dim, sizes)
    except ContractError:
        return False
    return True


def _servable(contract: Contract, pool: Sequence[Instantiation], dtype: str, sizes: dict[str, int]) -> bool:
    try:
        select_instantiation(contract, pool, dtype, sizes)
    except ContractError:
        return False
    return True
