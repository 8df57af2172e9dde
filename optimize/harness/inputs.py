"""Arguments for a kernel call, planned from its Contract and filled on the GPU.

Two halves:

*Planning* (pure Python, CPU-tested): resolve a catalog ShapeCase into sizes for
every contract symbol, draw held-out shapes, evaluate the shape/stride
expressions, choose contiguous or padded row strides, and lay every tensor out in
a flat storage with guard bands on both sides.

*Filling* (torch, imported lazily, GPU only): turn a plan into device buffers and
value "images" (a whole storage's contents, guard bands and stride gaps
included), so that a case can be replayed on the baseline and the candidate with
exactly the same bytes.

Why guard bands and gaps: an output's guards and gaps are filled with the poison
bit pattern and must still hold it afterwards (a write outside the tensor is
caught); an input's guards and gaps hold random finite noise, so a kernel that
reads outside its tensor (wrong stride, off-by-one tail) computes visibly wrong
values instead of reading zeros.

What must stay true:
- Held-out shapes are drawn from an RNG the caller seeds from ``os.urandom``: a
  candidate never sees the same held-out inputs twice. Every case records its own
  seed, so a failure can be reproduced from the request file.
- Never zeros by default: the default distributions are normal/uniform; the
  "edge" distribution mixes zeros in with large, tiny and negative values, and
  the large magnitudes are chosen so the *baseline* stays finite (see
  :data:`LARGE`), so that any Inf/NaN a candidate produces is its own.
- Only shapes the contract accepts are drawn: T=1 and odd token counts, widths
  from ``allowed_values`` or multiples of ``divisibility`` up to ``max_values``,
  and, where the instantiation is specialised on a width (a template argument),
  only widths that have an instantiation.
"""

from __future__ import annotations

import ast
import math
import random
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from optimize.harness import constraints
from optimize.harness.errors import ContractError
from optimize.harness.protocol import Distribution, Layout
from pipeline.records import Contract, Instantiation, ShapeCase, TensorSpec

# Bytes of guard band on each side of every tensor's storage. 256 keeps the data
# pointer 256-byte aligned inside a torch allocation (which is 512-aligned), so
# 16- and 32-byte vector loads stay legal.
GUARD_BYTES = 256
# Padding unit of a non-contiguous row stride, in bytes: keeps rows 64-byte
# aligned, which every vectorised kernel in SGLang accepts.
STRIDE_PAD_BYTES = 64
# Largest tensor a held-out draw may produce, in elements (keeps a check fast).
MAX_HELD_OUT_ELEMENTS = 1 << 26

ITEMSIZE: dict[str, int] = {
    "bf16": 2, "fp16": 2, "fp32": 4, "fp64": 8, "fp8e4m3": 1,
    "int8": 1, "uint8": 1, "bool": 1, "int16": 2, "int32": 4, "int64": 8,
}  # fmt: skip
_DTYPE_ALIASES = {
    "bfloat16": "bf16", "bf16_t": "bf16", "float16": "fp16", "half": "fp16", "fp16_t": "fp16",
    "float32": "fp32", "float": "fp32", "fp32_t": "fp32", "float64": "fp64", "double": "fp64",
    "int": "int32", "int32_t": "int32", "int64_t": "int64", "long": "int64", "uint8_t": "uint8",
    "int8_t": "int8", "int16_t": "int16",
    "float8_e4m3fn": "fp8e4m3", "fp8_e4m3_t": "fp8e4m3", "__nv_fp8_e4m3": "fp8e4m3", "fp8_e4m3": "fp8e4m3",
}  # fmt: skip
FLOAT_DTYPES = ("bf16", "fp16", "fp32", "fp64", "fp8e4m3")
# Largest finite magnitude of the formats whose conversion from float32 is not saturating
# (torch's float8_e4m3fn turns anything beyond 448 into NaN): noise is clamped to it.
FINITE_MAX: dict[str, float] = {"fp8e4m3": 448.0}

# Edge-distribution magnitudes per dtype. LARGE is the largest magnitude for which
# the default ops' baselines stay finite: fp16 silu(x)*y <= 65504 needs |x|,|y| <~ 250
# and residual+input must not overflow; bf16/fp32 share fp32's exponent range, and
# an fp32 sum of squares over 16384 elements of 1e16 is 1.6e36 < 3.4e38.
LARGE: dict[str, float] = {"fp16": 192.0, "bf16": 1e16, "fp32": 1e16, "fp64": 1e16, "fp8e4m3": 224.0}
# TINY stays a normal number (no subnormal inputs: flush-to-zero differences between
# a fast-math and a precise build would otherwise dominate the comparison).
TINY: dict[str, float] = {"fp16": 1e-4, "bf16": 1e-20, "fp32": 1e-20, "fp64": 1e-20, "fp8e4m3": 2.0**-6}

# Bit patterns written into outputs before every run: a NaN with a recognisable
# payload for floats (so "never written" is told apart from "computed NaN").
POISON_BITS: dict[str, int] = {
    "bf16": 0x7FE5, "fp16": 0x7E5A, "fp32": 0x7FC5A5A5, "fp64": 0x7FF8A5A5A5A5A5A5, "fp8e4m3": 0x7F,
    "int8": 0x5A, "uint8": 0xA5, "bool": 0xA5, "int16": 0x5A5A, "int32": 0x5A5A5A5A, "int64": 0x5A5A5A5A5A5A5A5A,
}  # fmt: skip

# ---------------------------------------------------------------------------- expressions

_ALLOWED_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Div, ast.Mod)
_CALLS = {"min": min, "max": max}  # the only calls an entry may make (an index range's "smallest table")


def expr_symbols(expr: str | int) -> set[str]:
    """Names used by a shape/stride entry ("hidden_size", "2*hidden", 16 -> set())."""
    if isinstance(expr, int):
        return set()
    tree = _parse(expr)
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and id(node) not in called}


def _parse(expr: str) -> ast.Expression:
    try:
        tree = ast.parse(str(expr).strip(), mode="eval")
    except SyntaxError as err:
        raise ContractError(f"shape entry {expr!r} is not an arithmetic expression", fix="fix the contract") from err
    for node in ast.walk(tree):
        ok = isinstance(node, (ast.Expression, ast.Name, ast.Load, ast.BinOp, ast.UnaryOp, ast.USub, ast.UAdd))
        ok = ok or isinstance(node, _ALLOWED_BINOPS) or (isinstance(node, ast.Constant) and type(node.value) is int)
        ok = ok or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS and not node.keywords)
        if not ok:
            raise ContractError(
                f"shape entry {expr!r} uses {type(node).__name__}; only integers, symbols, + - * // / % and min/max are allowed",
                fix="rewrite the entry in the contract",
            )
    return tree


def eval_expr(expr: str | int, sizes: dict[str, int]) -> int:
    """Evaluate a shape/stride entry over integer sizes; exact division only."""
    if isinstance(expr, int):
        return expr
    text = str(expr).strip()
    if text.lstrip("-").isdigit():
        return int(text)

    def walk(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant):
            return int(node.value)
        if isinstance(node, ast.Name):
            if node.id not in sizes:
                raise ContractError(
                    f"shape entry {expr!r} uses symbol {node.id!r} with no value "
                    f"(known: {', '.join(sorted(sizes)) or 'none'})",
                    fix="add the symbol to the contract's symbols and the shape catalog",
                )
            return int(sizes[node.id])
        if isinstance(node, ast.Call):
            return _CALLS[node.func.id](*(walk(arg) for arg in node.args))  # type: ignore[union-attr]
        if isinstance(node, ast.UnaryOp):
            value = walk(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp):
            left, right = walk(node.left), walk(node.right)
            op = node.op
            if isinstance(op, ast.Add):
                return left + right
            if isinstance(op, ast.Sub):
                return left - right
            if isinstance(op, ast.Mult):
                return left * right
            if isinstance(op, ast.Mod):
                return left % right
            if isinstance(op, (ast.FloorDiv, ast.Div)):
                if right == 0 or (isinstance(op, ast.Div) and left % right):
                    raise ContractError(f"shape entry {expr!r} divides {left} by {right} inexactly", fix="check sizes")
                return left // right
        raise ContractError(f"cannot evaluate shape entry {expr!r}", fix="fix the contract")

    return walk(_parse(text))


# ---------------------------------------------------------------------------- symbols


def tensor_specs(contract: Contract) -> list[TensorSpec]:
    return [arg.tensor for arg in contract.args if arg.kind == "tensor" and arg.tensor is not None]


def shape_symbols(contract: Contract) -> set[str]:
    """Symbols that size some tensor dimension (stride-only symbols excluded)."""
    out: set[str] = set()
    for spec in tensor_specs(contract):
        for dim in spec.shape:
            out |= expr_symbols(dim)
    return out


def free_stride_symbols(contract: Contract) -> set[str]:
    """Stride symbols no shape determines: the harness chooses them (padded rows)."""
    shape_syms = shape_symbols(contract)
    out: set[str] = set()
    for spec in tensor_specs(contract):
        for stride in spec.strides or []:
            out |= expr_symbols(stride) - shape_syms
    return out


def token_symbol(contract: Contract, catalog: Sequence[ShapeCase] = ()) -> str | None:
    """The symbol that counts tokens: the one equal to ``case.tokens`` in every catalog case.

    Falls back to a shape symbol named like a token count, then to the leading
    dimension of the first tensor.
    """
    syms = shape_symbols(contract)
    ordered = [s for s in contract.symbols if s in syms] + sorted(syms - set(contract.symbols))
    # A synthetic shape's token count is a placeholder where the contract has no token
    # symbol: matching it would take any width of that value for the token count
    # (awq_marlin_repack's pack_factor repaired to 8, then drawn as odd token counts).
    with_values = [c for c in catalog if c.sizes and c.model != SYNTHETIC_MODEL]
    if with_values:
        matches = [s for s in ordered if all(c.sizes.get(s) == c.tokens for c in with_values)]
        if len(matches) == 1:
            return matches[0]
        missing = [s for s in ordered if all(s not in c.sizes for c in with_values)]
        if len(missing) == 1:
            return missing[0]
    for s in ordered:
        if "token" in s.lower() or s in ("N", "T", "M", "batch", "num_rows"):
            return s
    specs = tensor_specs(contract)
    if specs and specs[0].shape and isinstance(specs[0].shape[0], str) and specs[0].shape[0] in syms:
        return specs[0].shape[0]
    return None


def resolve_sizes(contract: Contract, case: ShapeCase, catalog: Sequence[ShapeCase] = ()) -> dict[str, int]:
    """Every shape symbol of the contract -> value for one catalog case."""
    sizes = {k: int(v) for k, v in case.sizes.items()}
    token = token_symbol(contract, catalog or [case])
    if token is not None and token not in sizes:
        sizes[token] = case.tokens
    missing = shape_symbols(contract) - set(sizes)
    if missing:
        raise ContractError(
            f"shape {case.label} gives no value for {', '.join(sorted(missing))}",
            fix="add the symbols to the shape catalog entry (extract/shapes/*.toml) or the contract",
        )
    sizes.update(constraints.settle_scalars(contract, sizes))  # open int scalars the kernel's checks relate to sizes
    return sizes


def refused_by_checks(contract: Contract, case: ShapeCase, catalog: Sequence[ShapeCase] = ()) -> bool:
    """Whether the kernel's own checks (``Contract.constraints``) refuse ``case``; a case
    the contract cannot size is not refused here (planning it says what is wrong)."""
    try:
        return bool(constraints.violated(contract, resolve_sizes(contract, case, catalog)))
    except ContractError:
        return False


def derived_symbols(contract: Contract, catalog: Sequence[ShapeCase], token: str | None) -> dict[str, tuple[str, int]]:
    """Width symbols that are a fixed integer multiple of another in every catalog case.

    Example: silu_and_mul's input width is twice its output width. Static inference
    records that only as a RuntimeCheck text; the catalog proves it on data, and a
    held-out draw must keep it (varying one alone would be a shape the kernel
    rejects, not a test).
    """
    syms = sorted(shape_symbols(contract) - {token})
    cases = [resolve_sizes(contract, c, catalog) for c in catalog]
    if not cases:
        return {}
    related = [set(re.findall(r"[A-Za-z_]\w*", text)) for text in contract.constraints]
    out: dict[str, tuple[str, int]] = {}
    for a in syms:
        for b in syms:
            if a == b or b in out:
                continue
            if len({(sizes[a], sizes[b]) for sizes in cases}) < 2 and not any({a, b} <= names for names in related):
                # One pair of values proves no relation (two synthetic sizes of 128 and 256, or
                # a head count equal to a batch): only a constraint naming both says they are tied.
                continue
            ratios = {sizes[a] / sizes[b] if sizes[b] else math.nan for sizes in cases}
            if len(ratios) == 1:
                ratio = ratios.pop()
                if ratio >= 2 and float(ratio).is_integer():
                    out[a] = (b, int(ratio))
                    break
                if ratio == 1 and a > b:  # two names for one width: keep them equal
                    out[a] = (b, 1)
                    break
    return out


def template_ints(inst: Instantiation) -> set[int]:
    """Integer literals among an instantiation's template arguments (a specialised width);
    none for a size-free instantiation (its integers are constants: a thread count)."""
    out: set[int] = set()
    if inst.size_free:
        return out
    for arg in inst.template_args:
        text = str(arg).strip()
        if text.isdigit():
            out.add(int(text))
    return out


def width_symbols(contract: Contract) -> set[str]:
    """Size symbols that can be a specialised width: every tensor dimension but the leading
    (token) one of a multi-dimensional tensor. Strides and token counts are excluded, so a
    token count that happens to equal another instantiation's width (T=512 against
    rmsnorm's width-512 kernel) never selects that instantiation.
    """
    inner: set[str] = set()
    for arg in contract.args:
        if arg.kind != "tensor" or arg.tensor is None:
            continue
        shape = arg.tensor.shape
        for position, dim in enumerate(shape):
            if not isinstance(dim, str) or dim.strip() == "-1":
                continue
            if not (position == 0 and len(shape) > 1):
                # the symbols of an expression too: hc_combine's `kHcCount * kHiddenSize`
                # row is specialised on both (Hc<4, 4096>)
                inner |= _symbols_of(dim)
    return inner


def _symbols_of(dim: str) -> set[str]:
    """The symbols a shape entry names; none for an entry that is not arithmetic."""
    if dim.isidentifier():
        return {dim}
    try:
        return expr_symbols(dim)
    except ContractError:  # not arithmetic (`Trait1::K`): planning says so where it matters
        return set()


def instantiations_for(contract: Contract, instantiations: Sequence[Instantiation]) -> list[Instantiation]:
    """Instantiations that export the contract's entry."""
    return [inst for inst in instantiations if any(export == contract.entry for export, _ in inst.wrappers)]


def select_instantiation(
    contract: Contract, instantiations: Sequence[Instantiation], dtype: str, sizes: dict[str, int]
) -> Instantiation:
    """The instantiation that serves ``dtype`` at ``sizes``.

    An instantiation specialised on a width (an integer template argument, like
    rmsnorm's hidden size) serves only shapes that have that width. Among several
    that fit, the first in task order wins: the extractor lists SGLang's default
    variant first. Where the contract has no width dimension at all, a dtype's
    single instantiation serves whatever its integer arguments are.
    """
    pool = [i for i in instantiations_for(contract, instantiations) if i.dtype == dtype]
    if not pool:
        raise ContractError(
            f"no instantiation of {contract.entry} for dtype {dtype}",
            fix="re-run `kernelsmith extract` or drop that dtype",
        )
    values = {sizes[name] for name in width_symbols(contract) - _row_counts(contract) if name in sizes}
    fitting = [i for i in pool if (i.serves(sizes) if i.sizes else template_ints(i) <= values)]
    if not fitting and not values and len(pool) == 1 and not pool[0].sizes:
        # No tensor of the contract has a width dimension, so the integer template
        # arguments cannot be widths (a block count, a page size): the only
        # instantiation of this dtype serves the call.
        return pool[0]
    if not fitting:
        raise ContractError(
            f"no {dtype} instantiation of {contract.entry} fits sizes {sizes} "
            f"(specialised on {_specialisations(pool)})",
            fix="add the width to the shape catalog and re-run `kernelsmith extract`",
        )
    return fitting[0]


def _row_counts(contract: Contract) -> set[str]:
    """The token symbol where it counts the rows of a multi-dimensional tensor: never a
    specialised width, even where a 1-D tensor (``indices[num_tokens]``) has it as its
    only dimension (fused_store_index_k_cache's page size 64 is no token count)."""
    token = token_symbol(contract)
    rows = any(spec.shape and spec.shape[0] == token and len(spec.shape) > 1 for spec in tensor_specs(contract))
    return {token} if token is not None and rows else set()


def _specialisations(pool: Sequence[Instantiation]) -> str:
    recorded = sorted({", ".join(f"{k}={v}" for k, v in i.sizes.items()) for i in pool if i.sizes})
    return "; ".join(recorded) if recorded else str(sorted({n for i in pool for n in template_ints(i)}))


def pinned_sizes(pool: Sequence[Instantiation], dtypes: Iterable[str]) -> dict[str, list[int]]:
    """Sizes instantiations were made for (``Instantiation.sizes``): symbol -> the values
    every one of ``dtypes`` has an instantiation for. A symbol some instantiation of a
    dtype leaves free is not pinned."""
    dtypes = list(dtypes) or sorted({i.dtype for i in pool})
    out: dict[str, list[int]] = {}
    names = {k for i in pool for k in i.sizes}
    for name in sorted(names):
        per_dtype = []
        for dtype in dtypes:
            mine = [i for i in pool if i.dtype == dtype]
            if not mine or any(name not in i.sizes for i in mine):
                break
            per_dtype.append({i.sizes[name] for i in mine})
        else:
            common = set.intersection(*per_dtype) if per_dtype else set()
            if common:
                out[name] = sorted(common)
    return out


def _pinned_widths(contract: Contract, pool: Sequence[Instantiation], widths: list[str], pinned: list[int]) -> dict[str, int]:
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


SYNTHETIC_MODEL = "synthetic"
SYNTHETIC_TOKENS = 8
SYNTHETIC_WIDTH = 128  # a multiple of every vector width (8/16 bytes of bf16/fp32) the kernels use


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
            candidates = [*([pinned_for[sym]] if sym in pinned_for else []), *sorted(contract.allowed_values.get(sym, [])), SYNTHETIC_WIDTH]
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
    return ShapeCase(model=SYNTHETIC_MODEL, tokens=sizes.get(token, SYNTHETIC_TOKENS) if token else SYNTHETIC_TOKENS, sizes=sizes, source=source)


def _bounded(contract: Contract, sizes: dict[str, int], free: list[str]) -> dict[str, int]:
    """``sizes`` with free sizes halved, largest first, until no tensor holds more than
    :data:`MAX_HELD_OUT_ELEMENTS` (a six-dimensional video tensor at 128 a dimension is
    256 GiB) and no more of the kernel's checks break than before."""
    sizes = dict(sizes)
    before = len(constraints.violated(contract, sizes))
    for _ in range(256):
        specs = tensor_specs(contract)
        biggest = max(specs, key=lambda spec: _numel(spec, sizes), default=None)
        if biggest is None or _numel(biggest, sizes) <= MAX_HELD_OUT_ELEMENTS:
            break
        mine = {name for dim in biggest.shape if isinstance(dim, str) for name in _symbols_of(dim)}
        for name in sorted((n for n in free if n in mine and sizes.get(n, 0) > 1), key=lambda n: -sizes[n]):
            step = contract.divisibility.get(name, 1)
            smaller = sizes[name] // 2 // step * step
            trial = {**sizes, name: smaller}
            if smaller >= 1 and contract.accepts(name, smaller) and len(constraints.violated(contract, trial)) <= before:
                sizes = trial
                break
        else:
            break
    return sizes


def _odd_token_count(rng: random.Random, index: int) -> int:
    """An odd count in the band of draw ``index`` (band 0: 3..63 is the smallest)."""
    bands = [(3, 63), (65, 1023), (1025, 8191)]
    lo, hi = bands[index % len(bands)]
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
    among the widths every requested dtype has an instantiation for.
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
    for w in widths:
        if w in recorded:
            bound[w] = {v for v in recorded[w] if contract.accepts(w, v)}
    cycles: dict[str, list[int]] = {}
    for w in widths:
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
            base[token] = 1 if index == 0 else _odd_token_count(rng, band)
            cap = contract.max_values.get(token)
            if cap is not None and base[token] > cap:  # the most rows the op is called with
                base[token] = max(1, cap if cap % 2 else cap - 1)
        if not all(contract.accepts(s, v) for s, v in base.items() if s != token):
            continue
        biggest = max((_numel(spec, base) for spec in tensor_specs(contract)), default=0)
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
            low, high = _resolved_range(spec, known) or (0, -1)
        except ContractError:
            return False
        if _numel(spec, sizes) > high - low + 1:
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


def _numel(spec: TensorSpec, sizes: dict[str, int]) -> int:
    try:
        return math.prod(eval_expr(d, sizes) for d in spec.shape)
    except ContractError:
        return 0


# ---------------------------------------------------------------------------- tensor plans


def canonical_dtype(name: str, case_dtype: str) -> str:
    """A TensorSpec dtype ("T" = the instantiation's) in the harness's short spelling.

    A union (``bfloat16|float32``: the kernel accepts either) is the instantiation's
    dtype when it is one of them, else the first the harness can fill.
    """
    if name == "T":
        return case_dtype
    options = [_DTYPE_ALIASES.get(part.strip(), part.strip()) for part in str(name).split("|")]
    if case_dtype in options:
        return case_dtype
    short = next((o for o in options if o in ITEMSIZE), None)
    if short is None:
        raise ContractError(f"tensor dtype {name!r} is not one the harness can fill", fix="fix the contract")
    return short


@dataclass(frozen=True)
class TensorPlan:
    """Where one tensor argument lives inside its flat storage."""

    name: str
    role: str  # input | output | inout
    dtype: str  # short spelling: bf16, fp16, fp32, int32, ...
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    offset: int  # elements before the first one (the leading guard band)
    storage_numel: int
    value_range: tuple[float, float] | None = None
    structure: str | None = None  # TensorSpec.structure

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the logical elements (what the kernel must move), not of the storage."""
        return self.numel * self.itemsize

    @property
    def contiguous(self) -> bool:
        expect = 1
        for size, stride in zip(reversed(self.shape), reversed(self.strides)):
            if size != 1 and stride != expect:
                return False
            expect *= size
        return True

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES


@dataclass(frozen=True)
class CallPlan:
    """Every argument of one call, in call order: TensorPlans and plain scalar values."""

    args: tuple[TensorPlan | Any, ...]
    sizes: dict[str, int] = field(default_factory=dict)
    strides_chosen: dict[str, int] = field(default_factory=dict)

    @property
    def tensors(self) -> list[TensorPlan]:
        return [a for a in self.args if isinstance(a, TensorPlan)]

    def index(self, name: str) -> int:
        for i, arg in enumerate(self.args):
            if isinstance(arg, TensorPlan) and arg.name == name:
                return i
        raise KeyError(name)


# A tensor dimension declared as -1 (SGLang's TensorMatcher wildcard: any size) gets this size.
ANY_SIZE = 128
# Float scalars the contract leaves open whose name says what they are.
_EPS_NAMES = ("eps", "epsilon", "variance_epsilon", "norm_eps", "rms_eps")


def scalar_value(contract: Contract, index: int, sizes: dict[str, int] | None = None) -> Any:
    """The value of scalar argument ``index``: the contract's; else, for an open one, what
    its name and type fix: an ``int`` named after a size symbol takes that size (``topk``
    beside ``out[num_tokens, topk]``), a ``bool`` is False, an epsilon (``eps``,
    ``*_eps``) 1e-6, a scale (``scale``, ``*_scale``, ``*scaling_factor``) 1.0. Any
    other open scalar is a ContractError naming it (the testing agent's to fill in)."""
    arg = contract.args[index]
    spec = arg.scalar
    if spec is None:
        raise ContractError(f"scalar argument {index} of {contract.entry} has no spec", fix="fix the contract")
    if spec.value is None:
        if spec.type == "bool":
            return False
        if spec.type == "int" and sizes and spec.name in sizes:
            return int(sizes[spec.name])
        name = spec.name.lower()
        if spec.type == "float" and (name in _EPS_NAMES or name.endswith("_eps")):
            return 1e-6
        if spec.type == "float" and (name == "scale" or name.endswith(("_scale", "scaling_factor"))):
            return 1.0  # a neutral multiplier: the kernel's arithmetic is exercised, not skewed
        raise ContractError(
            f"scalar {spec.name!r} of {contract.entry} has no value to call with",
            fix="add a rule to optimize/harness/completion.toml, or a value to the curated contract (extract/curated/*.toml)",
        )
    if spec.type == "float":
        return float(spec.value)
    if spec.type == "int":
        return int(spec.value)
    if spec.type == "bool":
        return bool(spec.value)
    return spec.value


def plan_call(
    contract: Contract, sizes: dict[str, int], dtype: str, layout: Layout = "contiguous", rng: random.Random | None = None
) -> CallPlan:
    """Shapes, strides and storage of every argument for one call."""
    rng = rng or random.Random(0)
    free = free_stride_symbols(contract)
    chosen: dict[str, int] = {}
    scalars = {i: scalar_value(contract, i, sizes) for i, arg in enumerate(contract.args) if arg.kind == "scalar"}
    # An index tensor's range may name sizes and integer scalars ("num_experts - 1").
    known = dict(sizes)
    for i, value in scalars.items():
        spec = contract.args[i].scalar
        if spec is not None and spec.type == "int" and spec.name not in known:
            known[spec.name] = int(value)
    args: list[TensorPlan | Any] = []
    for index, arg in enumerate(contract.args):
        if arg.kind == "scalar":
            args.append(scalars[index])
            continue
        spec = arg.tensor
        assert spec is not None
        tdtype = canonical_dtype(spec.dtype, dtype)
        itemsize = ITEMSIZE[tdtype]
        shape = tuple(ANY_SIZE if d in (-1, "-1") else eval_expr(d, sizes) for d in spec.shape)
        if any(s < 0 for s in shape):
            raise ContractError(f"tensor {spec.name} has a negative size {shape}", fix="check the shape catalog")
        strides = [0] * len(shape)
        inner = 1
        for dim in reversed(range(len(shape))):
            contiguous = inner
            entry = spec.strides[dim] if spec.strides is not None and dim < len(spec.strides) else None
            if entry is None or entry in (-1, "-1"):  # -1: a TensorMatcher wildcard, any stride; dense is one
                stride = contiguous
            else:
                names = expr_symbols(entry)
                if names & free:
                    if len(names) != 1 or not isinstance(entry, str) or entry.strip() not in free:
                        raise ContractError(
                            f"stride {entry!r} of {spec.name} mixes a free stride symbol into an expression",
                            fix="give the stride as a single symbol or an expression of sizes",
                        )
                    sym = entry.strip()
                    if sym not in chosen:
                        pad_unit = max(1, STRIDE_PAD_BYTES // itemsize)
                        pad = pad_unit * rng.randint(1, 3) if layout == "strided" and dim < len(shape) - 1 else 0
                        chosen[sym] = contiguous + pad
                    stride = chosen[sym]
                    if stride < contiguous:
                        raise ContractError(
                            f"stride {sym}={stride} is too small for tensor {spec.name} (needs >= {contiguous})",
                            fix="use distinct stride symbols for tensors of different widths",
                        )
                else:
                    stride = eval_expr(entry, sizes)
            strides[dim] = stride
            inner = stride * max(shape[dim], 1)
        guard = max(1, GUARD_BYTES // itemsize)
        span = 0 if 0 in shape else 1 + sum((s - 1) * st for s, st in zip(shape, strides))
        args.append(
            TensorPlan(
                name=spec.name,
                role=spec.role,
                dtype=tdtype,
                shape=shape,
                strides=tuple(strides),
                offset=guard,
                storage_numel=guard + span + guard,
                value_range=_resolved_range(spec, known),
                structure=spec.structure,
            )
        )
    return CallPlan(args=tuple(args), sizes=dict(sizes), strides_chosen=chosen)


def _resolved_range(spec: TensorSpec, known: dict[str, int]) -> tuple[float, float] | None:
    """The tensor's value range in numbers: an entry may be an expression of sizes and
    integer scalars (``["0", "min(capacity, 128) - 1"]``); an empty range is an error."""
    if spec.value_range is None:
        return None
    low, high = (float(eval_expr(v, known)) if isinstance(v, str) else float(v) for v in spec.value_range)
    if high < low:
        raise ContractError(
            f"value range of {spec.name} is empty at sizes {known}: {list(spec.value_range)} -> [{low:g}, {high:g}]",
            fix="widen the range or the sizes it depends on",
        )
    return low, high


def layouts_for(contract: Contract) -> list[Layout]:
    """Layouts worth testing: strided only when some stride is free (a padded row is allowed)."""
    return ["contiguous", "strided"] if free_stride_symbols(contract) else ["contiguous"]


# ---------------------------------------------------------------------------- filling (torch)


def torch_dtype(short: str):
    import torch

    return {
        "bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64,
        "fp8e4m3": torch.float8_e4m3fn,
        "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool, "int16": torch.int16,
        "int32": torch.int32, "int64": torch.int64,
    }[short]  # fmt: skip


def bits_dtype(short: str):
    """The integer dtype of the same width, for bit-exact views."""
    import torch

    return {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[ITEMSIZE[short]]


def _signed(bits: int, width_bytes: int) -> int:
    limit = 1 << (8 * width_bytes)
    return bits - limit if bits >= limit // 2 and width_bytes > 1 else bits


def poison_value(short: str) -> int:
    """The poison as the signed integer the bit view holds."""
    return _signed(POISON_BITS[short], ITEMSIZE[short])


def view_of(storage, plan: TensorPlan):
    """The logical tensor inside a flat storage."""
    return storage.as_strided(plan.shape, plan.strides, plan.offset)


def _row_split(shape: tuple[int, ...]) -> tuple[int, int]:
    if not shape:
        return 1, 1
    rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
    return rows, shape[-1]


def needs_value_range(role: str, short_dtype: str, value_range: object) -> bool:
    """Whether the harness must be told a tensor's values: an integer (not bool)
    tensor the kernel reads (indices, metadata) with no ``value_range``. The one
    rule behind :func:`require_fillable` and the completion step's "open" tensors."""
    return role != "output" and short_dtype not in FLOAT_DTYPES and short_dtype != "bool" and value_range is None


def require_fillable(plan: TensorPlan) -> None:
    """Raise ContractError when the harness cannot draw values for this input: an
    integer tensor (indices, metadata) without a ``value_range``. Pure, so a sweep
    can ask before it builds or starts a GPU worker."""
    if needs_value_range(plan.role, plan.dtype, plan.value_range):
        raise ContractError(
            f"integer tensor {plan.name} has no value_range: the harness cannot invent valid indices",
            fix="add a rule to optimize/harness/completion.toml, or a value_range to the curated contract",
        )


def offsets(count: int, low: int, high: int, rng: random.Random) -> list[int]:
    """``count`` prefix-sum entries from ``low`` to ``high``: the first is ``low``, the last
    ``high``, each at least the one before (``cu_seqlens`` of ``count - 1`` sequences whose
    lengths add up to ``high - low``; some may be empty). One entry is ``[low]``."""
    if count <= 0:
        return []
    if count == 1:
        return [low]
    cuts = sorted(rng.randint(low, high) for _ in range(count - 2))
    return [low, *cuts, high]


def distinct(count: int, low: int, high: int, rng: random.Random) -> list[int]:
    """``count`` different values in ``[low, high]``, in random order (slots that two
    threads must never share). A range holding fewer than ``count`` values is a
    ContractError: repeating one would make the kernel race, not test it."""
    if count > high - low + 1:
        raise ContractError(
            f"{count} distinct values do not fit in [{low}, {high}]",
            fix="widen the value_range (or bound the tensor's size) in the contract",
        )
    return rng.sample(range(low, high + 1), count)


def _finite(values, dtype: str):
    """float32 values clamped into ``dtype``'s finite range where its conversion would make NaN."""
    limit = FINITE_MAX.get(dtype)
    return values if limit is None else values.clamp(-limit, limit)


def logical_values(plan: TensorPlan, distribution: Distribution, gen, device):
    """Values for one input tensor, contiguous, in the plan's dtype."""
    import torch

    shape = plan.shape
    if not plan.is_float:
        if plan.dtype == "bool":
            return torch.randint(0, 2, shape, generator=gen, device=device).to(torch.bool)
        require_fillable(plan)
        lo, hi = int(plan.value_range[0]), int(plan.value_range[1])
        if plan.structure in ("offsets", "distinct"):
            seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen, device=device))
            draw = offsets if plan.structure == "offsets" else distinct
            values = draw(plan.numel, lo, hi, random.Random(seed))
            return torch.tensor(values, device=device, dtype=torch_dtype(plan.dtype)).reshape(shape)
        return torch.randint(lo, hi + 1, shape, generator=gen, device=device, dtype=torch_dtype(plan.dtype))
    out_dtype = torch_dtype(plan.dtype)
    if plan.numel == 0:
        return torch.empty(shape, dtype=out_dtype, device=device)
    if distribution == "normal":
        values = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    elif distribution == "uniform":
        values = torch.rand(shape, generator=gen, device=device, dtype=torch.float32) * 6.0 - 3.0
    elif distribution == "edge":
        values = _edge_values(plan, gen, device)
    else:  # pragma: no cover - Literal guards it
        raise ValueError(distribution)
    if plan.value_range is not None:
        values = values.clamp(float(plan.value_range[0]), float(plan.value_range[1]))
    return _finite(values, plan.dtype).to(out_dtype)


def _edge_values(plan: TensorPlan, gen, device):
    """Rows of zeros, of tiny, of large, of negative values, and rows mixing all of them.

    Whole-row modes matter for row-wise kernels (a norm over a zero row exercises
    eps; a row of large values exercises overflow in a sum of squares); the mixed
    rows put every kind next to each other within one vector load.
    """
    import torch

    rows, width = _row_split(plan.shape)
    large, tiny = LARGE[plan.dtype], TINY[plan.dtype]
    normal = torch.randn((rows, width), generator=gen, device=device, dtype=torch.float32)
    sign = torch.where(torch.rand((rows, width), generator=gen, device=device) < 0.5, -1.0, 1.0)
    mag = torch.rand((rows, width), generator=gen, device=device, dtype=torch.float32)
    kind = torch.rand((rows, width), generator=gen, device=device)
    mixed = torch.where(kind < 0.15, torch.zeros_like(normal), normal)
    mixed = torch.where((kind >= 0.15) & (kind < 0.30), sign * tiny * (1 + 7 * mag), mixed)
    mixed = torch.where((kind >= 0.30) & (kind < 0.40), sign * large * (0.5 + 0.5 * mag), mixed)
    mixed = torch.where((kind >= 0.40) & (kind < 0.55), -(normal.abs() * 4 + 1), mixed)
    if rows == 1:
        return mixed.reshape(plan.shape)
    mode = torch.randint(0, 5, (rows, 1), generator=gen, device=device)
    out = mixed
    out = torch.where(mode == 1, torch.zeros_like(normal), out)
    out = torch.where(mode == 2, sign * tiny * (1 + 7 * mag), out)
    out = torch.where(mode == 3, sign * large * (0.5 + 0.5 * mag), out)
    out = torch.where(mode == 4, -(normal.abs() * 4 + 0.01), out)
    return out.reshape(plan.shape)


def input_image(plan: TensorPlan, distribution: Distribution, gen, device):
    """A whole storage for an input/inout tensor: noise in guards and gaps, values inside."""
    import torch

    dtype = torch_dtype(plan.dtype)
    if plan.is_float:
        image = _finite(torch.randn(plan.storage_numel, generator=gen, device=device, dtype=torch.float32) * 1e3, plan.dtype).to(dtype)
    elif plan.dtype == "bool":
        image = torch.zeros(plan.storage_numel, device=device, dtype=dtype)
    else:
        image = torch.randint(-1000, 1000, (plan.storage_numel,), generator=gen, device=device).to(dtype)
    view_of(image, plan).copy_(logical_values(plan, distribution, gen, device))
    return image


def poison_image(plan: TensorPlan, device):
    """A whole storage holding the poison bit pattern everywhere."""
    import torch

    image = torch.empty(plan.storage_numel, device=device, dtype=torch_dtype(plan.dtype))
    image.view(bits_dtype(plan.dtype)).fill_(poison_value(plan.dtype))
    return image


def garbage_image(plan: TensorPlan, gen, device):
    """A whole storage of finite random values: what an output holds before a second run.

    Unlike the NaN poison, finite garbage survives arithmetic: a kernel that reads
    its output before writing it (or skips some of it) yields wrong finite values.
    """
    import torch

    dtype = torch_dtype(plan.dtype)
    if plan.is_float:
        return _finite(torch.randn(plan.storage_numel, generator=gen, device=device, dtype=torch.float32) * 777.0, plan.dtype).to(dtype)
    if plan.dtype == "bool":
        return torch.ones(plan.storage_numel, device=device, dtype=dtype)
    return torch.randint(-999, 999, (plan.storage_numel,), generator=gen, device=device).to(dtype)


def decoy_image(image, plan: TensorPlan):
    """What an input holds until the real values are copied in: the negated values.

    Cheap (one pass, no RNG) and always different where it matters: every op of
    interest gives a different result on -x than on x for non-zero rows. Integer
    (index) tensors keep their values, a wrong index being no test of ordering.
    """
    if not plan.is_float:
        return image.clone()
    if plan.dtype in FINITE_MAX:  # torch has no negation for float8: through float32, exactly
        return (-image.float()).to(image.dtype)
    return -image


class Buffers:
    """Device storages for one CallPlan, and the argument list that calls a kernel on them."""

    def __init__(self, plan: CallPlan, device) -> None:
        import torch

        self.plan = plan
        self.device = device
        self.storages = {
            t.name: torch.empty(t.storage_numel, dtype=torch_dtype(t.dtype), device=device) for t in plan.tensors
        }
        self.views = {t.name: view_of(self.storages[t.name], t) for t in plan.tensors}

    def args(self) -> list[Any]:
        return [self.views[a.name] if isinstance(a, TensorPlan) else a for a in self.plan.args]

    def load(self, images: dict[str, Any]) -> None:
        """Copy whole-storage images into the buffers (on the current stream)."""
        for name, image in images.items():
            self.storages[name].copy_(image)

    def nbytes(self) -> int:
        return sum(s.numel() * s.element_size() for s in self.storages.values())


def make_images(plan: CallPlan, distribution: Distribution, gen, device, *, outputs: str = "poison") -> dict[str, Any]:
    """Images for every tensor: inputs/inout get values, outputs get poison or garbage."""
    images = {}
    for t in plan.tensors:
        if t.role == "output":
            images[t.name] = poison_image(t, device) if outputs == "poison" else garbage_image(t, gen, device)
        else:
            images[t.name] = input_image(t, distribution, gen, device)
    return images
