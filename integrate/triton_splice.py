"""What a Triton file must still be after the splice: Python that parses, changed only inside its regions.

Why: a Triton task's regions are spans of a Python file of the SGLang tree (the kernels,
the wrapper's launch sites); :func:`integrate.patch.compose` splices them by the byte
offsets the task's ``editable`` records, as for CUDA files, and calls :func:`check_python`
on every file of a Triton task, so a patch never carries a file that would not import.

What must stay true: libcst parses the new file, else :class:`PatchError` with the parser's
line and message and the fix; the check reads bytes only (nothing imported, no torch).
"""

from __future__ import annotations

import libcst as cst

from integrate.errors import PatchError


def check_python(path: str, new: bytes) -> None:
    """PatchError unless ``new`` (the spliced file ``path``) parses as Python."""
    try:
        cst.parse_module(new)
    except cst.ParserSyntaxError as err:
        raise PatchError(
            f"{path}: the spliced file does not parse as Python: line {err.raw_line}: {err.message}",
            fix="the candidate's region is not valid Python; regenerate it (its compile check should have refused it)",
        ) from err


__all__ = ["check_python"]
