"""``triton_launch_option``: a Triton launch's ``num_warps`` / ``num_stages``, set or added, in every
token bucket or in one (:func:`optimize.transforms.triton_edits.new_value`).

A transform under the contract of :mod:`optimize.transforms`. It applies last of the Triton
members: program coarsening rewrites the same launch first.
"""

from __future__ import annotations

from collections.abc import Mapping

from optimize.transforms import triton_edits as tt
from optimize.transforms.edits import TransformError
from optimize.transforms.spec import TransformSpec, no_targets


def launch_option(
    regions: Mapping[str, str], *, launch: str, option: str, value: int, bucket: str = "", tokens: str = ""
) -> dict[str, str]:
    """Set ``option`` (num_warps or num_stages) at launch site ``launch``, in every bucket or in ``bucket`` only."""
    if option not in tt.LAUNCH_OPTIONS:
        raise TransformError(f"launch option must be one of {tt.LAUNCH_OPTIONS}, not {option!r}")
    tt.check_value(option, value)
    call = tt.launch_call(regions, launch)
    found = tt.keyword(call, option)
    current = found.value if found is not None else None
    return tt.edited_launch(
        regions,
        launch,
        tt.with_keyword(call, option, tt.new_value(current, value, bucket, tokens, tt.DEFAULTS[option])),
        "triton_launch_option",
    )


SPECS = (
    TransformSpec(
        "triton_launch_option",
        launch_option,
        {"launch": "launch region", "option": "num_warps or num_stages", "value": "the new value"} | tt.BUCKETED,
        (),
        no_targets,
        "set a Triton launch's num_warps / num_stages (in every bucket or one)",
        choice=("value",),
    ),
)


__all__ = ["SPECS", "launch_option"]
