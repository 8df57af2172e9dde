"""Two edits of a Triton kernel region: its ``@triton.autotune`` list pinned to one config (no
autotuning at run time, the config the search picked), and the default of a constexpr parameter the
launches leave out.

Transforms under the contract of :mod:`optimize.transforms`; the machinery is
:mod:`optimize.transforms.triton_edits`. The kernel's edits apply before the launch's.
"""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst

from optimize.transforms import triton_edits as tt
from optimize.transforms.edits import NotApplicable, TransformError
from optimize.transforms.spec import TransformSpec, no_targets


def autotune_pin(regions: Mapping[str, str], *, kernel: str, index: int) -> dict[str, str]:
    """Keep config ``index`` of ``kernel``'s autotune list, alone (its text kept as written)."""
    module, fn = tt.kernel_region(regions, kernel)
    call = tt.autotune_call(fn)
    configs = tt.autotune_list(call) if call is not None else None
    if configs is None:
        raise NotApplicable("triton_autotune_pin", f"{kernel} has no literal @triton.autotune config list")
    if len(configs.elements) < 2:
        raise NotApplicable("triton_autotune_pin", f"{kernel}'s autotune list has one config already")
    if not 0 <= index < len(configs.elements):
        raise TransformError(f"{kernel}: autotune config {index} of {len(configs.elements)}")
    kept = configs.elements[index].with_changes(comma=configs.elements[-1].comma)
    new = fn.deep_replace(configs, configs.with_changes(elements=[kept]))
    assert isinstance(new, cst.FunctionDef)
    return tt.kernel_edited(regions, kernel, module, fn, new, "triton_autotune_pin")


def constexpr_default(regions: Mapping[str, str], *, kernel: str, name: str, value: int) -> dict[str, str]:
    """Set the default of ``kernel``'s constexpr parameter ``name`` (one the launches do not pass)."""
    tt.check_value(name, value)
    module, fn = tt.kernel_region(regions, kernel)
    param = next((p for p in (*fn.params.params, *fn.params.kwonly_params) if p.name.value == name), None)
    if param is None or param.default is None:
        raise NotApplicable("triton_constexpr_default", f"{kernel} has no parameter {name} with a default")
    if not isinstance(tt.bare(param.default), cst.Integer):
        raise NotApplicable("triton_constexpr_default", f"{kernel}.{name}'s default is not an integer literal")
    new = fn.deep_replace(param, param.with_changes(default=cst.Integer(str(value))))
    assert isinstance(new, cst.FunctionDef)
    return tt.kernel_edited(regions, kernel, module, fn, new, "triton_constexpr_default")


SPECS = (
    TransformSpec(
        "triton_autotune_pin",
        autotune_pin,
        {"kernel": "kernel region", "index": "the config kept"},
        (),
        no_targets,
        "keep one config of a Triton kernel's autotune list",
        choice=("index",),
    ),
    TransformSpec(
        "triton_constexpr_default",
        constexpr_default,
        {"kernel": "kernel region", "name": "the constexpr parameter", "value": "a power of two"},
        (),
        no_targets,
        "set the default of a Triton kernel's block-size constexpr",
        choice=("value",),
    ),
)


__all__ = ["SPECS", "autotune_pin", "constexpr_default"]
