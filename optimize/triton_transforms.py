"""Mechanical edits of a Triton task's regions, made with libcst: launch options, block sizes, autotune lists.

Why: a Triton kernel's speed turns on a few compile-time choices (``num_warps``,
``num_stages``, the block-size ``tl.constexpr`` values, which autotune configs run), and
each is a small edit of the Python source once the node is found. These are the Triton
variant of :mod:`optimize.transforms`'s contract: ``fn(regions, **params) -> dict[str, str]``
over the task's span texts (``<kernel>``: the decorated ``@triton.jit`` function;
``launch:<kernel>``: the call expression ``kernel[grid](...)``), registered in
:data:`optimize.transforms.TRANSFORMS` so a :class:`optimize.search.space.Space` realizes
them like any other step.

The edits:

- :func:`launch_option`: set (or add) the launch site's ``num_warps`` / ``num_stages`` keyword;
- :func:`block_size`: set a block-size constexpr the launch passes by keyword. When it passes
  a name (``BLOCK_H=block_h``, the grid reading ``block_h`` too), every use of that value in
  the launch region (the grid's included) becomes the new value, so grid and block agree; when it
  passes an integer literal, that literal in the grid (``triton.cdiv(n, 256)``) changes with it;
- :func:`constexpr_default`: set the default of a constexpr parameter the launch leaves out;
- :func:`autotune_pin`: keep one config of the kernel's ``@triton.autotune`` list (no
  autotuning at run time, the config the search picked).

Shape buckets: a launch-side edit with ``bucket`` (a name of :data:`pipeline.buckets.BUCKETS`)
and ``tokens`` (the wrapper's expression of the token count, ``x.shape[0]``) writes a
wrapper-side choice by token count, ``(8 if 511 < x.shape[0] else 4)``: the bucket's value
where the count falls in it, the baseline's value everywhere else. Edits of other buckets of
the same keyword join the same chain, so a point picks a value per bucket.

What must stay true: nodes are found and replaced with libcst, never by searching text;
everything outside the changed nodes is kept byte for byte; an edited region parses as what
it was (a module holding the function, a call of the kernel's subscript), else
:class:`~optimize.transform_edits.TransformError` (a bug here); values outside what Triton
accepts (a block size that is not a power of two, ``num_warps`` not in :data:`NUM_WARPS`,
``num_stages`` outside :data:`NUM_STAGES`) are :class:`TransformError`; nothing to do is
:class:`~optimize.transform_edits.NotApplicable`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import libcst as cst

from optimize.transform_edits import NotApplicable, TransformError
from pipeline.buckets import BUCKETS

NUM_WARPS = (1, 2, 4, 8, 16)
NUM_STAGES = (1, 2, 3, 4, 5)
#: Triton's own defaults on CUDA (``CUDAOptions``): the value a launch without the keyword runs with
DEFAULTS = {"num_warps": 4, "num_stages": 3}
LAUNCH_OPTIONS = tuple(DEFAULTS)
MAX_BLOCK = 1 << 20  # triton's TRITON_MAX_TENSOR_NUMEL

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


class _Replace(cst.CSTTransformer):
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


def launch_option(
    regions: Mapping[str, str], *, launch: str, option: str, value: int, bucket: str = "", tokens: str = ""
) -> dict[str, str]:
    """Set ``option`` (num_warps or num_stages) at launch site ``launch``, in every bucket or in ``bucket`` only."""
    if option not in LAUNCH_OPTIONS:
        raise TransformError(f"launch option must be one of {LAUNCH_OPTIONS}, not {option!r}")
    check_value(option, value)
    call = launch_call(regions, launch)
    found = keyword(call, option)
    current = found.value if found is not None else None
    return edited_launch(
        regions,
        launch,
        with_keyword(call, option, new_value(current, value, bucket, tokens, DEFAULTS[option])),
        "triton_launch_option",
    )


def block_size(
    regions: Mapping[str, str], *, launch: str, name: str, value: int, bucket: str = "", tokens: str = ""
) -> dict[str, str]:
    """Set constexpr ``name`` the launch passes by keyword; a value passed as a name changes at every use in the launch."""
    check_value(name, value)
    call = launch_call(regions, launch)
    found = keyword(call, name)
    if found is None:
        raise NotApplicable("triton_block_size", f"{launch} passes no keyword {name}")
    current = found.value
    new = new_value(current, value, bucket, tokens, None)
    if isinstance(bare(current), cst.Integer):  # a literal: the keyword, and the same number in the grid only
        grid = call.func
        assert isinstance(grid, cst.Subscript)
        edited_grid = grid.visit(_Replace(current, new))
        assert isinstance(edited_grid, cst.Subscript)
        return edited_launch(
            regions, launch, with_keyword(call, name, new).with_changes(func=edited_grid), "triton_block_size"
        )
    replace = _Replace(current, new)
    edited = call.visit(replace)
    assert isinstance(edited, cst.Call)
    return edited_launch(regions, launch, edited, "triton_block_size")


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


def constexpr_default(regions: Mapping[str, str], *, kernel: str, name: str, value: int) -> dict[str, str]:
    """Set the default of ``kernel``'s constexpr parameter ``name`` (one the launches do not pass)."""
    check_value(name, value)
    module, fn = kernel_region(regions, kernel)
    param = next((p for p in (*fn.params.params, *fn.params.kwonly_params) if p.name.value == name), None)
    if param is None or param.default is None:
        raise NotApplicable("triton_constexpr_default", f"{kernel} has no parameter {name} with a default")
    if not isinstance(bare(param.default), cst.Integer):
        raise NotApplicable("triton_constexpr_default", f"{kernel}.{name}'s default is not an integer literal")
    new = fn.deep_replace(param, param.with_changes(default=cst.Integer(str(value))))
    assert isinstance(new, cst.FunctionDef)
    return kernel_edited(regions, kernel, module, fn, new, "triton_constexpr_default")


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


def autotune_pin(regions: Mapping[str, str], *, kernel: str, index: int) -> dict[str, str]:
    """Keep config ``index`` of ``kernel``'s autotune list, alone (its text kept as written)."""
    module, fn = kernel_region(regions, kernel)
    call = autotune_call(fn)
    configs = autotune_list(call) if call is not None else None
    if configs is None:
        raise NotApplicable("triton_autotune_pin", f"{kernel} has no literal @triton.autotune config list")
    if len(configs.elements) < 2:
        raise NotApplicable("triton_autotune_pin", f"{kernel}'s autotune list has one config already")
    if not 0 <= index < len(configs.elements):
        raise TransformError(f"{kernel}: autotune config {index} of {len(configs.elements)}")
    kept = configs.elements[index].with_changes(comma=configs.elements[-1].comma)
    new = fn.deep_replace(configs, configs.with_changes(elements=[kept]))
    assert isinstance(new, cst.FunctionDef)
    return kernel_edited(regions, kernel, module, fn, new, "triton_autotune_pin")


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
    "DEFAULTS",
    "LAUNCH_OPTIONS",
    "NUM_STAGES",
    "NUM_WARPS",
    "autotune_call",
    "autotune_list",
    "autotune_pin",
    "bare",
    "block_size",
    "bucket_test",
    "check_value",
    "constexpr_default",
    "edited_launch",
    "join_chain",
    "kernel_edited",
    "kernel_region",
    "keyword",
    "launch_call",
    "launch_option",
    "new_value",
    "parse_kernel",
    "parse_launch",
    "split_chain",
    "with_keyword",
]
