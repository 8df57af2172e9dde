"""The libcst machinery of the Triton transforms: a task's launch and kernel regions parsed, edited and
checked, values checked against what Triton accepts, and choices by token bucket.

Why: a Triton kernel's speed turns on a few compile-time choices (``num_warps``,
``num_stages``, the block-size ``tl.constexpr`` values, which autotune configs run), and
each is a small edit of the Python source once the node is found. The Triton members of
:mod:`optimize.transforms` keep the transforms' contract, ``fn(regions, **params) -> dict[str, str]``,
over the task's span texts (``<kernel>``: the decorated ``@triton.jit`` function;
``launch:<kernel>``: the call expression ``kernel[grid](...)``), so a
:class:`optimize.search.space.Space` realizes them like any other step:

- :mod:`~optimize.transforms.triton_kernel`: an autotune list pinned to one config, a constexpr's default;
- :mod:`~optimize.transforms.triton_block_size`: a block-size constexpr the launch passes (grid and block together);
- :mod:`~optimize.transforms.triton_coarsen`: several programs of a grid axis run in one;
- :mod:`~optimize.transforms.triton_launch_option`: the launch's ``num_warps`` / ``num_stages``.

Shape buckets: a launch-side edit with ``bucket`` (a name of :data:`pipeline.buckets.BUCKETS`)
and ``tokens`` (the wrapper's expression of the token count, ``x.shape[0]``) writes a
wrapper-side choice by token count, ``(8 if 511 < x.shape[0] else 4)``: the bucket's value
where the count falls in it, the baseline's value everywhere else. Edits of other buckets of
the same keyword join the same chain, so a point picks a value per bucket.

What must stay true: nodes are found and replaced with libcst, never by searching text;
everything outside the changed nodes is kept byte for byte; an edited region parses as what
it was (a module holding the function, a call of the kernel's subscript), else
:class:`~optimize.transforms.edits.TransformError` (a bug here); values outside what Triton
accepts (a block size that is not a power of two, ``num_warps`` not in :data:`NUM_WARPS`,
``num_stages`` outside :data:`NUM_STAGES`) are :class:`TransformError`; nothing to do is
:class:`~optimize.transforms.edits.NotApplicable`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import libcst as cst

from optimize.transforms.edits import NotApplicable, TransformError
from pipeline.buckets import BUCKETS

NUM_WARPS = (1, 2, 4, 8, 16)
NUM_STAGES = (1, 2, 3, 4, 5)
#: Triton's own defaults on CUDA (``CUDAOptions``): the value a launch without the keyword runs with
DEFAULTS = {"num_warps": 4, "num_stages": 3}
LAUNCH_OPTIONS = tuple(DEFAULTS)
MAX_BLOCK = 1 << 20  # triton's TRITON_MAX_TENSOR_NUMEL

#: the parameters a launch-side edit takes to choose by token count
BUCKETED = {
    "bucket": "a token bucket of pipeline.buckets.BUCKETS ('' = every token count)",
    "tokens": "the wrapper's expression of the token count (with bucket)",
}

_EMPTY = cst.Module([])


def code(node: cst.CSTNode) -> str:
    return _EMPTY.code_for_node(node)


def check_value(what: str, value: Any) -> None:
    """TransformError unless ``value`` is one Triton accepts for ``what`` (an option or a block size)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TransformError(f"{what}: {value!r} is not an integer")
    if what == "num_warps" and value not in NUM_WARPS:
        raise TransformError(f"num_warps must be one of {NUM_WARPS}, not {value}")
    if what == "num_stages" and value not in NUM_STAGES:
        raise TransformError(f"num_stages must be in {NUM_STAGES[0]}..{NUM_STAGES[-1]}, not {value}")
    if what not in LAUNCH_OPTIONS and not (0 < value <= MAX_BLOCK and value & (value - 1) == 0):
        raise TransformError(f"block size {what} must be a power of two up to {MAX_BLOCK}, not {value}")


# --------------------------------------------------------------------------- bucket chains


def bucket_test(bucket: str, tokens: str) -> str:
    """The Python test that the wrapper's token count ``tokens`` falls in ``bucket``."""
    for name, low, high in BUCKETS:
        if name == bucket:
            parts = ([f"{low - 1} <"] if low > 0 else []) + [tokens] + ([f"<= {high}"] if high < BUCKETS[-1][2] else [])
            return " ".join(parts)
    raise TransformError(f"unknown bucket {bucket!r}; buckets: {[b[0] for b in BUCKETS]}")


def bare(node: cst.BaseExpression) -> cst.BaseExpression:
    return node.with_changes(lpar=[], rpar=[]) if hasattr(node, "lpar") else node


def split_chain(node: cst.BaseExpression, tokens: str) -> tuple[dict[str, cst.BaseExpression], cst.BaseExpression]:
    """A keyword value as (bucket -> its value, the fallback): the inverse of :func:`join_chain`."""
    tests = {name: cst.parse_expression(bucket_test(name, tokens)) for name, _, _ in BUCKETS}
    chosen: dict[str, cst.BaseExpression] = {}
    while isinstance(bare(node), cst.IfExp):
        ifexp = bare(node)
        assert isinstance(ifexp, cst.IfExp)
        test = bare(ifexp.test)
        bucket = next((name for name, t in tests.items() if t.deep_equals(test)), None)
        if bucket is None or bucket in chosen:
            break
        chosen[bucket] = ifexp.body
        node = ifexp.orelse
    return chosen, node


def join_chain(chosen: Mapping[str, cst.BaseExpression], fallback: cst.BaseExpression, tokens: str) -> str:
    """``(v1 if <bucket 1> else v2 if <bucket 2> else fallback)``, buckets in :data:`BUCKETS` order."""
    if not chosen:
        return code(fallback)
    parts = [f"{code(chosen[name])} if {bucket_test(name, tokens)}" for name, _, _ in BUCKETS if name in chosen]
    return "(" + " else ".join(parts) + f" else {code(fallback)})"


def new_value(
    current: cst.BaseExpression | None, value: int, bucket: str, tokens: str, default: int | None
) -> cst.BaseExpression:
    if not bucket:
        return cst.Integer(str(value))
    if not tokens:
        raise TransformError(f"bucket {bucket!r} needs the wrapper's token-count expression (tokens)")
    if current is None:
        if default is None:
            raise TransformError("a bucketed value needs the baseline's value to fall back on")
        current = cst.Integer(str(default))
    chosen, fallback = split_chain(current, tokens)
    chosen[bucket] = cst.Integer(str(value))
    return cst.parse_expression(join_chain(chosen, fallback, tokens))


# --------------------------------------------------------------------------- the launch region


def parse_launch(text: str, span: str) -> cst.Call:
    try:
        node = cst.parse_expression(text)
    except cst.ParserSyntaxError as err:
        raise TransformError(f"{span}: the launch region does not parse: {err}") from err
    if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Subscript)):
        raise TransformError(f"{span}: the launch region is not a call kernel[grid](...)")
    return node


def keyword(call: cst.Call, name: str) -> cst.Arg | None:
    return next((a for a in call.args if a.keyword is not None and a.keyword.value == name), None)


def with_keyword(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    """``call`` with keyword ``name`` set to ``value``: replaced in place, else appended in the call's own layout."""
    found = keyword(call, name)
    if found is not None:
        return call.with_changes(args=[a.with_changes(value=value) if a is found else a for a in call.args])
    new = cst.Arg(
        value=value, keyword=cst.Name(name), equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))
    )
    args = list(call.args)
    if not args:
        return call.with_changes(args=[new])
    last = args[-1]
    between = args[-2].comma if len(args) > 1 and isinstance(args[-2].comma, cst.Comma) else None
    if between is None:
        between = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    trailing = last.comma  # a trailing comma (a call laid out one argument a line) moves to the new last argument
    # the layout after the old last argument (a newline before ")") follows the new last one
    args[-1] = last.with_changes(comma=between, whitespace_after_arg=cst.SimpleWhitespace(""))
    args.append(new.with_changes(comma=trailing, whitespace_after_arg=last.whitespace_after_arg))
    return call.with_changes(args=args)


class Replace(cst.CSTTransformer):
    """Every expression deep-equal to ``old`` (parentheses aside) becomes ``new``."""

    def __init__(self, old: cst.BaseExpression, new: cst.BaseExpression) -> None:
        self.old, self.new, self.count = bare(old), new, 0

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> Any:
        # names that are not reads keep their spelling: a keyword (BLOCK=BLOCK), an attribute, a lambda's parameter
        if isinstance(original, cst.Arg) and isinstance(updated, cst.Arg):
            return updated.with_changes(keyword=original.keyword)
        if isinstance(original, cst.Attribute) and isinstance(updated, cst.Attribute):
            return updated.with_changes(attr=original.attr)
        if isinstance(original, cst.Param) and isinstance(updated, cst.Param):
            return updated.with_changes(name=original.name)
        if isinstance(original, cst.BaseExpression) and bare(original).deep_equals(self.old):
            self.count += 1
            if getattr(original, "lpar", None):  # the original's own parentheses stay, around the bare new value
                return bare(self.new).with_changes(lpar=original.lpar, rpar=original.rpar)
            return self.new
        return updated


def edited_launch(regions: Mapping[str, str], span: str, new: cst.Call, transform: str) -> dict[str, str]:
    text = code(new)
    parse_launch(text, span)
    if text == regions[span]:
        raise NotApplicable(transform, f"{span} already has that value")
    return {**regions, span: text}


def launch_call(regions: Mapping[str, str], launch: str) -> cst.Call:
    if launch not in regions:
        raise TransformError(f"no launch region {launch!r}; regions: {sorted(regions)}")
    return parse_launch(regions[launch], launch)


# --------------------------------------------------------------------------- the kernel region


def parse_kernel(text: str, kernel: str) -> tuple[cst.Module, cst.FunctionDef]:
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError as err:
        raise TransformError(f"{kernel}: the kernel region does not parse: {err}") from err
    fn = next((s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == kernel), None)
    if fn is None:
        raise TransformError(f"{kernel}: the kernel region defines no function {kernel}")
    return module, fn


def kernel_region(regions: Mapping[str, str], kernel: str) -> tuple[cst.Module, cst.FunctionDef]:
    if kernel not in regions:
        raise TransformError(f"no kernel region {kernel!r}; regions: {sorted(regions)}")
    return parse_kernel(regions[kernel], kernel)


def kernel_edited(
    regions: Mapping[str, str],
    kernel: str,
    module: cst.Module,
    fn: cst.FunctionDef,
    new: cst.FunctionDef,
    transform: str,
) -> dict[str, str]:
    text = module.with_changes(body=[new if s is fn else s for s in module.body]).code
    parse_kernel(text, kernel)
    if text == regions[kernel]:
        raise NotApplicable(transform, f"{kernel} already has that value")
    return {**regions, kernel: text}


def autotune_call(fn: cst.FunctionDef) -> cst.Call | None:
    for d in fn.decorators:
        node = d.decorator
        if isinstance(node, cst.Call) and code(node.func).split(".")[-1] == "autotune":
            return node
    return None


def autotune_list(call: cst.Call) -> cst.List | None:
    """The literal ``configs=[...]`` list (or the first positional one) of an autotune decorator."""
    arg = keyword(call, "configs") or next((a for a in call.args if a.keyword is None), None)
    return arg.value if arg is not None and isinstance(arg.value, cst.List) else None


def literal_int(node: cst.BaseExpression | None) -> int | None:
    node = bare(node) if node is not None else None
    if isinstance(node, cst.Integer):
        return int(node.evaluated_value)
    return None


def names_of(nodes: Sequence[cst.CSTNode]) -> set[str]:
    """Every bare name the nodes read."""
    out: set[str] = set()

    class _Names(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            out.add(node.value)

    for n in nodes:
        n.visit(_Names())
    return out


__all__ = [
    "BUCKETED",
    "DEFAULTS",
    "LAUNCH_OPTIONS",
    "MAX_BLOCK",
    "NUM_STAGES",
    "NUM_WARPS",
    "Replace",
    "autotune_call",
    "autotune_list",
    "bare",
    "bucket_test",
    "check_value",
    "code",
    "edited_launch",
    "join_chain",
    "kernel_edited",
    "kernel_region",
    "keyword",
    "launch_call",
    "literal_int",
    "names_of",
    "new_value",
    "parse_kernel",
    "parse_launch",
    "split_chain",
    "with_keyword",
]
