"""`kernelsmith run`: extract -> optimize -> integrate on the default ops."""

from __future__ import annotations

from pipeline.errors import StageNotBuilt


def main(args, config) -> int:  # noqa: ARG001
    raise StageNotBuilt("`kernelsmith run` is not built yet", fix="run `kernelsmith extract` on its own for now")
