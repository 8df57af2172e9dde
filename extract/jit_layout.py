"""Where a release keeps its JIT kernels: ``kernels/jit`` + ``kernels/ops`` (sglang 0.5.17 on), or the
older ``jit_kernel/`` (up to 0.5.16), whose op modules sit flat beside ``csrc/`` and ``include/``.

Why: the census reaches back past that move (issue 46), and everything extract derives (the op
modules it scans, the folder a load_jit call's files are under, ``KERNEL_PATH``, the include folder a
task carries) is the same in both layouts but for these folders. An op of the older layout is named
as the first newer release names the same public function (``norm.rmsnorm`` -> ``layernorm.rmsnorm``,
``jit_layout_ids.json``, made by ``tools/old-layout-ids.py``), so one op's series runs across the move.

What must stay true: a tree in the current layout is read exactly as before (its ids are never renamed).
"""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass, field


@dataclass(frozen=True)
class JitLayout:
    """One layout's folders, relative to the sglang package root."""

    name: str
    jit_dir: str  # holds csrc/ and include/
    ops_dir: str  # the op modules (those that call load_jit)
    not_ops: tuple[str, ...] = ()  # folders under ops_dir that hold no op module
    renamed: dict[str, str] = field(default_factory=dict)  # this layout's op id -> the newer layout's

    @property
    def csrc_dir(self) -> str:
        return f"{self.jit_dir}/csrc"

    @property
    def include_dir(self) -> str:
        return f"{self.jit_dir}/include"

    @property
    def ops_package(self) -> str:
        """The dotted package of the op modules: ``sglang.kernels.ops``."""
        return ".".join(["sglang", *self.ops_dir.split("/")])

    def is_op_module(self, rel: str) -> bool:
        return rel.startswith(f"{self.ops_dir}/") and not rel.startswith(self.not_ops)

    def group_and_sub(self, rel: str) -> tuple[str, str]:
        """An op module's group and its module path under the group: ``kernels/ops/layernorm/norm.py``
        -> ("layernorm", "norm"); a flat module of the older layout, ``jit_kernel/norm.py`` -> ("norm", "norm")."""
        parts = pathlib.PurePosixPath(rel).with_suffix("").parts[len(self.ops_dir.split("/")) :]
        if len(parts) > 1:
            return parts[0], ".".join(parts[1:])
        return parts[0], "__init__" if self.jit_dir != self.ops_dir else parts[0]

    def op_id(self, own: str) -> str:
        return self.renamed.get(own, own)


CURRENT = JitLayout(name="kernels/jit (sglang 0.5.17 on)", jit_dir="kernels/jit", ops_dir="kernels/ops")


def _older_ids() -> dict[str, str]:
    return dict(json.loads((pathlib.Path(__file__).parent / "jit_layout_ids.json").read_text(encoding="utf-8")))


OLDER = JitLayout(
    name="jit_kernel (sglang up to 0.5.16)",
    jit_dir="jit_kernel",
    ops_dir="jit_kernel",
    not_ops=("jit_kernel/utils/", "jit_kernel/tests/", "jit_kernel/benchmark/"),
    renamed=_older_ids(),
)
LAYOUTS = (CURRENT, OLDER)


def layout_of(root: pathlib.Path) -> JitLayout:
    """The layout of the package at ``root``: the first whose ``csrc/`` is there (else the current one)."""
    return next((layout for layout in LAYOUTS if (pathlib.Path(root) / layout.csrc_dir).is_dir()), CURRENT)


def layout_of_module(rel: str) -> JitLayout:
    """The layout a package-relative module path belongs to (by its folder)."""
    return next((layout for layout in LAYOUTS if rel.startswith(f"{layout.jit_dir}/")), CURRENT)


__all__ = ["CURRENT", "LAYOUTS", "OLDER", "JitLayout", "layout_of", "layout_of_module"]
