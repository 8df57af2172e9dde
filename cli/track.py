"""``kernelsmith track``: the store's history and regressions, the census that adds to it, and the release A/B.

``show``, ``export`` and ``rebuild`` read and write the store (:func:`pipeline.track.show`); ``run``
(the census, :mod:`bench.census`) and ``ab`` (two releases' kernels in one worker,
:mod:`bench.release_ab`) measure on the GPU, on the floor above the optimizer's harness.
"""

from __future__ import annotations

import argparse

from cli.parser import ops_of
from pipeline.config import Config
from pipeline.errors import ConfigError
from pipeline.output import EMIT


def main(args: argparse.Namespace, config: Config) -> int:
    """The parsed flags turned into the action's typed options, and the action run."""
    action = getattr(args, "action", "show")
    ops = ops_of(args)
    if action == "run":
        from bench import census

        return census.run(census.CensusOptions(tasks=getattr(args, "tasks", None), ops=ops), config)
    if action == "ab":
        if not getattr(args, "old", None):
            raise ConfigError("track ab needs --old TASKS (the older release's tasks)", fix="add --old DIR_OR_TARBALL")
        from bench import release_ab

        ab = release_ab.ReleaseABOptions(
            old=args.old, new=getattr(args, "new", None), ops=ops, plant=int(getattr(args, "plant", None) or 1)
        )
        return release_ab.run(ab, config)
    from pipeline.track import TrackOptions, show

    options = TrackOptions(
        action="export" if action == "export" else "rebuild" if action == "rebuild" else "show",
        op=getattr(args, "op", None),
        fail_on_regression=bool(getattr(args, "fail_on_regression", False)),
        max_age_h=getattr(args, "max_age_h", None),
        html=getattr(args, "html", None),
        history=getattr(args, "history", None),
        emitted=getattr(args, EMIT, None),
    )
    return show(options, config)


__all__ = ["main"]
