"""``triton_block_size``: a block-size constexpr the launch passes by keyword, set with the grid.

When the launch passes a name (``BLOCK_H=block_h``, the grid reading ``block_h`` too), every use of
that value in the launch region (the grid's included) becomes the new value, so grid and block
agree; when it passes an integer literal, that literal in the grid (``triton.cdiv(n, 256)``)
changes with it. With a token bucket the value is chosen by token count
(:func:`optimize.transforms.triton_edits.new_value`). A transform under the contract of
:mod:`optimize.transforms`.
"""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst

from optimize.transforms import triton_edits as tt
from optimize.transforms.edits import NotApplicable
from optimize.transforms.spec import TransformSpec, no_targets


def block_size(
    regions: Mapping[str, str], *, launch: str, name: str, value: int, bucket: str = "", tokens: str = ""
) -> dict[str, str]:
    """Set constexpr ``name`` the launch passes by keyword; a value passed as a name changes at every use in the launch."""
    tt.check_value(name, value)
    call = tt.launch_call(regions, launch)
    found = tt.keyword(call, name)
    if found is None:
        raise NotApplicable("triton_block_size", f"{launch} passes no keyword {name}")
    current = found.value
    new = tt.new_value(current, value, bucket, tokens, None)
    if isinstance(tt.bare(current), cst.Integer):  # a literal: the keyword, and the same number in the grid only
        grid = call.func
        assert isinstance(grid, cst.Subscript)
        edited_grid = grid.visit(tt.Replace(current, new))
        assert isinstance(edited_grid, cst.Subscript)
        return tt.edited_launch(
            regions, launch, tt.with_keyword(call, name, new).with_changes(func=edited_grid), "triton_block_size"
        )
    replace = tt.Replace(current, new)
    edited = call.visit(replace)
    assert isinstance(edited, cst.Call)
    return tt.edited_launch(regions, launch, edited, "triton_block_size")


SPECS = (
    TransformSpec(
        "triton_block_size",
        block_size,
        {"launch": "launch region", "name": "the constexpr keyword", "value": "a power of two"} | tt.BUCKETED,
        (),
        no_targets,
        "set a block-size constexpr a Triton launch passes (grid and block together)",
        choice=("value",),
    ),
)


__all__ = ["SPECS", "block_size"]
