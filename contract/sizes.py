"""Sizes: the symbols of a contract and their values at one shape case.

A contract sizes its tensors by symbols (``num_tokens``, ``hidden_size``) and
expressions of them (``2 * hidden``), in the grammar :data:`contract.expr.ARITHMETIC`.
This module says which symbol counts tokens, which are widths an instantiation may be
specialised on, which strides the harness chooses, and what every symbol is worth at
one catalog case (:func:`resolve_sizes`); and which instantiation serves a dtype at
those sizes (:func:`select_instantiation`).

What must stay true:
- A token count never selects an instantiation (only :func:`width_symbols` can), so
  T=512 never picks rmsnorm's width-512 kernel.
- A synthetic shape's placeholder token count never names the token symbol
  (:data:`SYNTHETIC_MODEL` cases are skipped by :func:`token_symbol`).
- Pure Python, no torch: extract and the sweep plan on the CPU.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Iterable, Mapping, Sequence

from contract import constraints, expr
from contract.errors import ContractError, ExprError
from pipeline.records import Contract, Instantiation, ShapeCase, TensorSpec

# The model name of a shape no model config gives (contract.shapes.synthetic_shape).
SYNTHETIC_MODEL = "synthetic"


def _tree(entry: str) -> ast.Expression:
    try:
        return expr.parse(entry, expr.ARITHMETIC)
    except ExprError as err:
        fix = "fix the contract" if err.syntax else "rewrite the entry in the contract"
        raise ContractError(err.message, fix=fix) from err


def expr_symbols(entry: str | int) -> set[str]:
    """Names used by a shape/stride entry ("hidden_size", "2*hidden", 16 -> set())."""
    if isinstance(entry, int):
        return set()
    return set(expr.names(_tree(str(entry))))


def eval_expr(entry: str | int, sizes: Mapping[str, int]) -> int:
    """Evaluate a shape/stride entry over integer sizes; ``/`` divides exactly only."""
    if isinstance(entry, int):
        return entry
    text = str(entry).strip()
    if text.lstrip("-").isdigit():
        return int(text)
    tree = _tree(text)
    try:
        return int(expr.evaluate(tree, sizes, exact=True))
    except ExprError as err:
        if err.message.startswith("no value for"):
            name = err.message.split("'")[1]
            raise ContractError(
                f"shape entry {entry!r} uses symbol {name!r} with no value "
                f"(known: {', '.join(sorted(sizes)) or 'none'})",
                fix="add the symbol to the contract's symbols and the shape catalog",
            ) from err
        raise ContractError(f"shape entry {entry!r} {err.message}", fix="check sizes") from err


def numel_at(spec: TensorSpec, sizes: Mapping[str, int]) -> int:
    """Elements of ``spec`` at ``sizes``; 0 where its shape does not evaluate there."""
    try:
        return math.prod(eval_expr(d, sizes) for d in spec.shape)
    except ContractError:
        return 0


def resolved_range(spec: TensorSpec, known: Mapping[str, int]) -> tuple[float, float] | None:
    """The tensor's value range in numbers: an entry may be an expression of sizes and
    integer scalars (``["0", "min(capacity, 128) - 1"]``); an empty range is an error."""
    if spec.value_range is None:
        return None
    low, high = (float(eval_expr(v, known)) if isinstance(v, str) else float(v) for v in spec.value_range)
    if high < low:
        raise ContractError(
            f"value range of {spec.name} is empty at sizes {dict(known)}: {list(spec.value_range)} -> [{low:g}, {high:g}]",
            fix="widen the range or the sizes it depends on",
        )
    return low, high


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
                inner |= symbols_of(dim)
    return inner


def symbols_of(dim: str) -> set[str]:
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
