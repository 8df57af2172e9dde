"""Two compile-time knobs as mechanical transforms: a constant's value (``tune_constant``) and a
kernel's ``__launch_bounds__`` (``set_launch_bounds``).

Each keeps the transforms' contract (:mod:`optimize.transforms`: byte-exact edits that parse;
:class:`~optimize.transforms.edits.NotApplicable` with the reason when there is nothing to do).
They apply after PDL and before the grid cap: a bound set here may depend on a constant set here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from optimize.cuda_facts import (
    iter_literal_constants,
    owner_name,
)
from optimize.cuda_regions import Region
from optimize.features import Features
from optimize.transforms.edits import Edit, NotApplicable, TransformError, apply_edits
from optimize.transforms.spec import Params, TransformSpec
from source.cuda_text import (
    text_of,
)

# --------------------------------------------------------------------------- tune_constant


def tune_constant(regions: Mapping[str, str], *, name: str, value: int, owner: str | None = None) -> dict[str, str]:
    """Set the integer literal of compile-time constant ``name`` to ``value``.

    Applies to ``constexpr``/``const`` declarations whose initializer is an
    integer literal, possibly inside ``static_cast<...>(...)``; only the digits
    change (a ``u`` suffix stays). ``owner`` (struct or function name) picks one
    when several scopes define the same name.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise TransformError(f"tune_constant: value must be a positive integer, got {value!r}")
    region = Region(regions)
    found = []
    for doc, decl, const_name, literal in iter_literal_constants(region):
        if const_name != name:
            continue
        f = region.func_of(doc, decl)
        where = owner_name(doc, decl) or (f.qualname if f is not None else None)
        if owner is not None and where != owner:
            continue
        found.append((doc, literal, where))
    if not found:
        raise NotApplicable(
            "tune_constant",
            f"no compile-time constant {name!r} with an integer literal value" + (f" in {owner!r}" if owner else ""),
        )
    if owner is None and len({w for _d, _l, w in found}) > 1:
        raise NotApplicable(
            "tune_constant",
            f"{name!r} is defined in several scopes ({sorted(str(w) for _d, _l, w in found)}); pass owner=",
        )
    edits = []
    for doc, literal, _where in found:
        text = text_of(doc.src, literal)
        digits = re.match(r"(0[xX][0-9a-fA-F']+|[0-9']+)", text)
        assert digits is not None
        if int(digits.group(1).replace("'", ""), 0 if digits.group(1).lower().startswith("0x") else 10) == value:
            continue
        edits.append(
            Edit(doc.span, literal.start_byte, literal.start_byte + len(digits.group(1).encode()), str(value).encode())
        )
    if not edits:
        raise NotApplicable("tune_constant", f"{name} is already {value}")
    return apply_edits("tune_constant", regions, edits)


# --------------------------------------------------------------------------- set_launch_bounds

_EXPR_OK = re.compile(r"^[\w\s+\-*/%()<>:.]+$")


def set_launch_bounds(
    regions: Mapping[str, str], *, kernel: str, max_threads: int | str | None = None, min_blocks: int = 0
) -> dict[str, str]:
    """Add or set ``__launch_bounds__(max_threads[, min_blocks])`` on kernel ``kernel``.

    ``max_threads`` None keeps the kernel's existing first argument (and is an
    error when it has none). ``min_blocks`` 0 leaves the minimum-blocks argument
    out. What must hold for the result to run: every launch of the kernel uses at
    most ``max_threads`` threads per block; the caller (policy) takes it from the
    features' launch analysis.
    """
    if isinstance(max_threads, bool) or (isinstance(max_threads, int) and not 1 <= max_threads <= 1024):
        raise TransformError(f"set_launch_bounds: max_threads must be 1..1024, got {max_threads!r}")
    if isinstance(max_threads, str) and (not max_threads.strip() or not _EXPR_OK.match(max_threads)):
        raise TransformError(
            f"set_launch_bounds: max_threads expression {max_threads!r} is not a plain constant expression"
        )
    if isinstance(min_blocks, bool) or not isinstance(min_blocks, int) or min_blocks < 0:
        raise TransformError(f"set_launch_bounds: min_blocks must be an integer >= 0, got {min_blocks!r}")
    region = Region(regions)
    targets = [k for k in region.kernels if k.name == kernel]
    if not targets:
        raise NotApplicable("set_launch_bounds", f"no __global__ kernel named {kernel!r} in the region")
    edits = []
    for k in targets:
        src = k.doc.src
        lb = next((c for c in k.node.children if c.type == "launch_bounds"), None)
        if lb is not None:
            open_paren = next(c for c in lb.children if c.type == "(")
            close_paren = next(c for c in reversed(lb.children) if c.type == ")")
            args = [c for c in lb.children if c.is_named]
            first = str(max_threads) if max_threads is not None else text_of(src, args[0])
            inner = first + (f", {min_blocks}" if min_blocks else "")
            if inner == src[open_paren.end_byte : close_paren.start_byte].decode():
                continue
            edits.append(Edit(k.doc.span, open_paren.end_byte, close_paren.start_byte, inner.encode()))
        else:
            if max_threads is None:
                raise NotApplicable(
                    "set_launch_bounds", f"{kernel} has no __launch_bounds__ and no max_threads was given"
                )
            glob = next((c for c in k.node.children if c.type == "__global__"), None)
            if glob is None:
                raise NotApplicable(
                    "set_launch_bounds", f"{kernel}: __global__ is spelled through a macro; cannot place the attribute"
                )
            inner = str(max_threads) + (f", {min_blocks}" if min_blocks else "")
            edits.append(Edit(k.doc.span, glob.end_byte, glob.end_byte, f" __launch_bounds__({inner})".encode()))
    if not edits:
        raise NotApplicable("set_launch_bounds", f"{kernel} already has these launch bounds")
    return apply_edits("set_launch_bounds", regions, edits)


# --------------------------------------------------------------------------- registered


def _tune_targets(features: Features, point: Params) -> list[Params]:
    role = point.get("role")
    value = point.get("value")
    out = []
    for c in features.constants:
        if role is not None and c.role != role or value is None or c.value == value:
            continue
        if c.role == "block_size":
            if not (isinstance(value, int) and value % 32 == 0 and 32 <= value <= 1024):
                continue
            # a kernel this owner launches with tighter launch bounds would refuse the launch
            bounds = [
                int(k.launch_bounds.split(",")[0])
                for l in features.launches
                if l.function.split("::")[0] == c.owner
                for k in features.kernels
                if k.name in l.kernels and k.launch_bounds and k.launch_bounds.split(",")[0].strip().isdigit()
            ]
            if bounds and value > min(bounds):
                continue
        out.append({"name": c.name, "owner": c.owner, "value": value})
    return out


def _launch_bounds_targets(features: Features, point: Params) -> list[Params]:
    min_blocks = int(point.get("min_blocks", 0))
    out: list[Params] = []
    for k in features.kernels:
        if not k.launched:
            continue
        if k.launch_bounds:
            parts = [p.strip() for p in k.launch_bounds.split(",")]
            if parts[1:] == ([str(min_blocks)] if min_blocks else []):
                continue
            first = parts[0]
            if min_blocks and first.isdigit() and int(first) * min_blocks > 2048:
                continue
            out.append({"kernel": k.name, "max_threads": None, "min_blocks": min_blocks})
            continue
        threads = k.block_size if k.block_size is not None else (1024 if k.block_size_runtime else None)
        if threads is None or (min_blocks and threads * min_blocks > 2048):
            continue
        out.append({"kernel": k.name, "max_threads": threads, "min_blocks": min_blocks})
    return out


#: constants before the attributes that depend on them
SPECS = (
    TransformSpec(
        "tune_constant",
        tune_constant,
        {"name": "constant to set", "value": "new integer value", "owner": "struct/function that defines it"},
        ("role",),
        _tune_targets,
        "set a literal compile-time constant (block size, items, unroll, vector bytes)",
        choice=("value",),
    ),
    TransformSpec(
        "set_launch_bounds",
        set_launch_bounds,
        {
            "kernel": "kernel name",
            "max_threads": "threads per block bound (None keeps the existing one)",
            "min_blocks": "minimum resident blocks per SM (0 = leave out)",
        },
        (),
        _launch_bounds_targets,
        "add or set __launch_bounds__ on a kernel",
        choice=("max_threads", "min_blocks"),
    ),
)


__all__ = ["SPECS", "set_launch_bounds", "tune_constant"]
