"""``kernelsmith track``: the store's history and regressions, the census that adds to it, and the release A/B.

``show``, ``export`` and ``rebuild`` read and write the store (:func:`pipeline.track.show`); ``run``
(the census, :mod:`bench.census`) and ``ab`` (two releases' kernels in one worker,
:mod:`bench.release_ab`) measure on the GPU, on the floor above the optimizer's harness.
"""

from __future__ import annotations

import argparse

from pipeline.config import Config
from pipeline.errors import ConfigError


def main(args: argparse.Namespace, config: Config) -> int:
    action = getattr(args, "action", "show")
    if action == "run":
        from bench import census

        return int(census.main(args, config) or 0)
    if action == "ab":
        if not getattr(args, "old", None):
            raise ConfigError("track ab needs --old TASKS (the older release's tasks)", fix="add --old DIR_OR_TARBALL")
        from bench import release_ab

        return int(release_ab.main(args, config) or 0)
    from pipeline.track import show

    return show(args, config)


__all__ = ["main"]
