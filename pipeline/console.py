"""The rich console every command prints its tables with.

Why: rich sizes a table to the terminal, and with no terminal (a log file, ``| tee``, a
scheduler) it assumes 80 columns and cuts every cell to a few letters: the H200 logs of
2026-12-02 showed ``layern… improv… pdl_ena…``. Without a terminal the width is
``COLUMNS`` when set, else wide enough for op names and skill lists.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console

#: Columns a table gets when no terminal sets them.
LOG_COLUMNS = 200


def console(*, stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=int(os.environ.get("COLUMNS") or LOG_COLUMNS))


__all__ = ["LOG_COLUMNS", "console"]
