"""What a launcher's checks say: its ``RuntimeCheck`` / ``CHECK_HOST`` conditions and refusals.

:func:`check_conditions` lists a body's conditions; :func:`read_condition` reads the
divisibilities (``D % kVec == 0``) and relations (``input_width == 2 * output_width``)
one states; :func:`read_limits` the limits a refusing ``else`` (``if (n <= kMax) {..}
else { RuntimeCheck(false, ..) }``) or ``switch`` (``default: Panic(..)``) sets; and
:func:`constraint` translates a condition into Python over the contract's own names,
for the harness to choose values the baseline accepts.

Why a module of its own: the checks are the half of a launcher's facts that judge
values rather than declare shapes; :mod:`extract.launcher_facts` reads the entry, its
forwarded helpers and their ``TensorMatcher`` chains, and hands each body's names
(symbols, constants, tensor shapes) here.

What must stay true: reading never raises on odd C++; a condition that reads
anything the contract does not name (a pointer, a stride, a value read from data, a
constant that differs by dtype) is no constraint (None), never a guess.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TypeVar

from extract.cexpr import ARCH_CONSTANTS, DTYPE_BYTES, c_to_python, eval_c
from extract.cxx import balanced_end, split_top

# `.shape()[i]` or `.size(i)` after a tensor (or its `.value()`): two groups, one set.
DIM_USE = r"(?:\.value\(\))?(?:\.shape\(\)\s*\[\s*(-?\d+)\s*\]|\.size\(\s*(-?\d+)\s*\))"


def dim_index(match: re.Match, first: int) -> int:
    """The dimension a `DIM_USE` match reads, its groups starting at ``first``."""
    shape_index, size_index = match.group(first), match.group(first + 1)
    return int(shape_index if shape_index is not None else size_index)


def check_conditions(body: str) -> list[str]:
    """The conditions of a body's ``RuntimeCheck`` / ``CHECK_HOST`` calls, in order, whitespace folded."""
    conds = []
    for match in re.finditer(r"\b(RuntimeCheck|CHECK_HOST)\s*\(", body):
        open_at = match.end() - 1
        args = split_top(body[open_at + 1 : balanced_end(body, open_at) - 1])
        if args and args[0].strip() not in ("false", "0"):  # an unconditional failure is a limit, read elsewhere
            conds.append(" ".join(args[0].split()))
    return conds


def read_condition(
    cond: str,
    unwrap: dict[str, str],
    symbols: dict[str, str],
    consts: dict[str, str],
    dtypes: Iterable[str],
    divisibility: dict[str, int],
    relations: dict[str, str],
) -> None:
    """A divisibility (``x % k == 0``) or a relation (``a * k == b``) one condition states about
    two symbols, into ``divisibility`` / ``relations``."""

    def symbol_of(text: str) -> str | None:
        text = text.strip()
        m = re.fullmatch(r"(?:static_cast<[^>]*>\s*\()?\s*(\w+)(?:\.unwrap\(\))?\s*\)?", text)
        if not m:
            return None
        name = m.group(1)
        if name in unwrap:
            return unwrap[name]
        if name in symbols and text.endswith("unwrap()"):
            return symbols[name]
        return None

    m = re.fullmatch(r"\s*(.+?)\s*%\s*(.+?)\s*==\s*0\s*", cond)
    if m:
        sym = symbol_of(m.group(1))
        if sym:
            value = _eval_per_dtype(m.group(2), consts, list(dtypes), max)
            if value and value > 1:
                divisibility[sym] = max(value, divisibility.get(sym, 1))
        return
    m = re.fullmatch(r"\s*(\w+)\s*\*\s*(\d+)\s*==\s*(.+?)\s*", cond) or re.fullmatch(
        r"\s*(\d+)\s*\*\s*(\w+)\s*==\s*(.+?)\s*", cond
    )
    if m:
        a, k = (m.group(1), m.group(2)) if not m.group(1).isdigit() else (m.group(2), m.group(1))
        left, right = symbol_of(a), symbol_of(m.group(3))
        if left and right and left != right:
            relations[right] = f"{int(k)}*{left}"


def read_limits(
    body: str,
    unwrap: dict[str, str],
    consts: dict[str, str],
    dtypes: Iterable[str],
    max_values: dict[str, int],
    allowed: dict[str, list[int]],
) -> None:
    """The limits a body's refusals set, into ``max_values`` and ``allowed`` (symbol -> the values accepted)."""
    for match in re.finditer(r"\bif\s*\(\s*(\w+)\s*<=\s*([^{]+?)\)\s*\{", body):
        var, limit = match.group(1), match.group(2)
        block_end = balanced_end(body, match.end() - 1)
        rest = body[block_end:]
        if re.match(r"\s*else\s*\{[^{}]*RuntimeCheck\s*\(\s*false", rest) and var in unwrap:
            value = _eval_per_dtype(limit, consts, dtypes, min)
            if value is not None:
                max_values[unwrap[var]] = value
    # `switch (num_experts) { case 256: ... case 384: ... default: Panic(...) }`:
    # the cases are the only values the launcher accepts.
    for match in re.finditer(r"\bswitch\s*\(\s*(\w+)\s*\)\s*\{", body):
        var = match.group(1)
        block = body[match.end() - 1 : balanced_end(body, match.end() - 1)]
        refused = re.search(r"\bdefault\s*:\s*(?:\{\s*)?(?:Panic\s*\(|RuntimeCheck\s*\(\s*false)", block)
        cases = [int(v) for v in re.findall(r"\bcase\s+(\d+)\s*:", block)]
        if var in unwrap and refused is not None and cases:
            allowed[unwrap[var]] = sorted(set(cases))


_SIZE_CALL = re.compile(rf"\b(\w+){DIM_USE}")


def constraint(
    cond: str,
    names: dict[str, str],
    alias: dict[str, str],
    consts: dict[str, str],
    shapes: dict[str, list[str | int]],
    scalars: set[str],
    by_tparam: dict[str, str],
    relations: dict[str, str],
    dtypes: Iterable[str],
) -> str | None:
    """One RuntimeCheck condition as a Python expression over the contract's own names,
    or None when it reads anything else (a pointer, a stride, a value read from data,
    a constant that differs by dtype).

    Why: the harness invents sizes for ops no model config sizes, and fills scalars
    the callers pass at run time; the kernel's own checks say which values it
    accepts (``kH == 3 || kH == 6 || kH == 12``, ``numel % hidden_size == 0``), so
    the harness can choose values the baseline will not reject. Names map to: a
    SymbolicSize (``D.unwrap()``) or a local holding one -> its symbol (or the
    relation extract folded it into: ``input_width`` -> ``(2*output_width)``); a
    template parameter that fixes a width -> that width's symbol; a scalar
    parameter of the entry -> itself; ``x.size(i)`` / ``x.shape()[i]`` -> the
    dimension its TensorMatcher names (``shapes``: each tensor's plain-path matcher's shape); a ``constexpr`` with one value for every
    dtype -> the number; any other local -> its own definition, translated the same way.
    """
    dtypes = list(dtypes)
    sizes: dict[str, str | int] = {}

    def size_token(match: re.Match) -> str:
        shape = shapes.get(match.group(1))
        if shape is None:
            return match.group(0)
        index = dim_index(match, 2)
        if not -len(shape) <= index < len(shape) or shape[index] in (-1, "-1"):
            return match.group(0)
        token = f"__size_{len(sizes)}"
        sizes[token] = shape[index]
        return token

    def symbol(sym: str) -> str:
        return f"({relations[sym]})" if sym in relations else sym

    def name_of(name: str, depth: int = 0) -> str | int | None:
        if name in sizes:
            dim = sizes[name]
            return dim if isinstance(dim, int) else symbol(dim) if re.fullmatch(r"\w+", dim) else f"({dim})"
        if name in names:
            return symbol(names[name])
        if name in by_tparam:
            return symbol(by_tparam[name])
        own = alias.get(name, name)
        if own in scalars:
            return own
        values = _eval_per_dtype(name, consts, dtypes, set)  # one value for every dtype, or no number
        if values is not None:
            return next(iter(values)) if len(values) == 1 else None
        if name in consts and depth < 4:  # a local defined from sizes: `const int64_t kH = A_log.shape()[0];`
            inner = c_to_python(_SIZE_CALL.sub(size_token, consts[name]), lambda n: name_of(n, depth + 1))
            return None if inner is None else f"({inner})"
        return None

    translated = c_to_python(_SIZE_CALL.sub(size_token, cond), name_of)
    if translated is None or not set(re.findall(r"[A-Za-z_]\w*", translated)) - {"and", "or", "not", "if", "else"}:
        return None  # untranslatable, or only constants: nothing for the harness to choose
    return translated


_Picked = TypeVar("_Picked")


def _eval_per_dtype(
    expr: str, consts: dict[str, str], dtypes: Iterable[str], pick: Callable[[list[int]], _Picked]
) -> _Picked | None:
    values = []
    for dtype in dtypes:
        env = dict(ARCH_CONSTANTS)
        sizes = {
            "T": DTYPE_BYTES[dtype],
            "DType": DTYPE_BYTES[dtype],
            "Float": DTYPE_BYTES[dtype],
            "scalar_t": DTYPE_BYTES[dtype],
        }
        for _ in range(3):  # constants defined from constants
            for name, text in consts.items():
                if name not in env:
                    value = eval_c(text, env, sizes)
                    if value is not None:
                        env[name] = value
        value = eval_c(expr, env, sizes)
        if value is None:
            return None
        values.append(value)
    return pick(values) if values else None
