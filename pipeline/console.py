"""The rich console every command prints its tables with.

Why: rich sizes a table to the terminal, and with no terminal (a log file, ``| tee``, a
scheduler) it assumes 80 columns and cuts every cell to a few letters: the H200 logs of
2026-12-02 showed ``layern… improv… pdl_ena…``. Without a terminal the width is
``COLUMNS`` when set, else wide enough for op names and skill lists.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

T = TypeVar("T")

#: Columns a table gets when no terminal sets them.
LOG_COLUMNS = 200


def console(*, stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=int(os.environ.get("COLUMNS") or LOG_COLUMNS))


@contextlib.contextmanager
def working(description: str) -> Iterator[None]:
    """A step that may take a while: a spinner on a terminal's stderr, else one line saying what it is
    doing before it starts, so a log never sits silent (the first Triton scan took 98 s without a word)."""
    if not sys.stderr.isatty():
        print(f"{description} ...", file=sys.stderr, flush=True)
        yield
        return
    with Console(stderr=True).status(f"{description} ..."):
        yield


def progress(items: Iterable[T], description: str, total: int) -> Iterator[T]:
    """``items`` with a progress bar on a terminal's stderr (transient); on a log, the items alone."""
    if not sys.stderr.isatty():
        yield from items
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        for item in items:
            yield item
            bar.advance(task)


__all__ = ["LOG_COLUMNS", "console", "progress", "working"]
