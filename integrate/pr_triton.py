"""The sentences of ``PR.md`` that differ for a Triton op (:mod:`integrate.pr` renders the rest).

Why: a Triton op's patch rewrites a Python file (its ``@triton.jit`` kernels and the wrapper's
launch sites), not a CUDA source that ``load_jit`` builds; the reviewer must read which file,
which kernels, which launch settings changed, and that SGLang's check called the op through
its ``KernelSpec`` (``get_kernel``) and counted the tree's kernels' launches.

What must stay true: every sentence is read from the records (the task's facts in
:class:`integrate.evidence.OpFacts`, the check's ``via`` and ``launches``, the diff's own
lines); a fact that is absent is not claimed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from integrate.calls import ALLOCATED
from integrate.evidence import OpFacts
from integrate.records import OpCheck, Patch

#: A launch setting or block-size constexpr on a diff line: ``num_warps=8``, ``BLOCK_N=(...)``
_LAUNCH_SETTING = re.compile(r"\b(num_warps|num_stages|num_ctas|maxnreg|[A-Z][A-Z0-9_]*BLOCK[A-Z0-9_]*)\s*=")


def is_triton(facts: OpFacts) -> bool:
    return facts.language == "triton"


def kind(patch: Patch) -> str:
    """ "Triton", "JIT" or "JIT and Triton": what the patch's files are (a Python file is a Triton op's)."""
    python = {f.path.endswith(".py") for f in patch.files}
    return "JIT and Triton" if python == {True, False} else "Triton" if python == {True} else "JIT"


def summary(ops: Sequence[OpFacts], patch: Patch, where: str) -> str:
    """The summary paragraph for a patch whose ops are all Triton ops."""
    parts = []
    for facts in ops:
        kernels = ", ".join(f"`{k}`" for k in facts.kernels) or "its kernels"
        spec = f" (registered as `KernelSpec` `{facts.registered_as}`, backend triton)" if facts.registered_as else ""
        parts.append(f"{kernels} launched by `{facts.wrapper or facts.op_id}`{spec}")
    files = ", ".join(f"`{f.diff_path}`" for f in patch.files)
    return (
        f"This patch rewrites the Triton kernels {'; '.join(parts)} in SGLang's Python file(s) {files}, against "
        f"{where}. It changes only the kernels' editable regions and the wrapper's launch sites (checked byte by "
        "byte; the spliced file parses as Python), so the public function's signature and what it returns are "
        "the same; Triton compiles the patched kernel source on its first call."
    )


def launch_bullet(diff: str) -> str:
    """The **Launch** bullet: the launch settings the diff's added lines set, or that none changed."""
    added = [
        line[1:].strip()
        for line in diff.splitlines()
        if line.startswith("+") and not line.startswith("+++") and _LAUNCH_SETTING.search(line)
    ]
    if not added:
        return (
            "- **Launch.** The patch changes no launch setting (`num_warps`, `num_stages`, block sizes) of the kernel."
        )
    shown = "; ".join(f"`{line}`" for line in added[:4]) + (f" and {len(added) - 4} more" if len(added) > 4 else "")
    bucketed = any(" if " in line for line in added)
    tail = " (by token-count bucket: the baseline's value stays wherever the bucket test fails)" if bucketed else ""
    return f"- **Launch.** The launch now sets {shown}{tail}."


def check_sentence(check: OpCheck) -> str:
    """How the SGLang check called a Triton op, and the proof that the tree's kernels ran."""
    totals: dict[str, int] = {}
    for case in check.cases:
        for kernel, count in case.launches.items():
            totals[kernel] = totals.get(kernel, 0) + count
    allocated = (
        ", with the optional outputs passed and, where the inputs hold at most 256 MiB, again left to the wrapper "
        "(the `(outputs allocated)` cases)"
        if any(c.label.endswith(ALLOCATED) for c in check.cases)
        else ""
    )
    launched = ", ".join(f"`{k}` {n} times" for k, n in sorted(totals.items())) or "no launch recorded"
    return (
        f"Called through {check.via or f'`{check.function}`'} in the pristine tree and in the patched copy (each "
        "worker imports its own tree's module; Triton compiled each tree's kernels into the worker's own "
        f"`TRITON_CACHE_DIR`), on identical seeded inputs at every catalog shape of the task{allocated}; every case "
        f"counted the launches of the tree's kernels ({launched}) and a case in which none launched is an error. "
        "The patched outputs and returned tensors were judged against the pristine op's."
    )


__all__ = ["check_sentence", "is_triton", "kind", "launch_bullet", "summary"]
