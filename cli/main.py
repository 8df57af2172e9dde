"""The `kernelsmith` command line's entry point.

It parses the flags (:mod:`cli.parser`), layers them over the config and calls the subcommand's
handler (:mod:`cli.stages`), which hands the stage its typed options. Errors from the
:mod:`pipeline.errors` families print as one line of cause, one line of fix, then any tool output,
and set the family's exit code; an interruption keeps what was written; any other exception is a
bug report with its traceback saved to a file.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Sequence
from typing import Any

from cli.parser import FLAGS, build_parser, overrides
from cli.stages import HANDLERS
from pipeline.config import load_config
from pipeline.errors import BudgetExhausted, ConfigError, KernelsmithError, not_writable
from pipeline.output import EMIT, document


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM (a ``timeout``, a scheduler, a closed session) unwinds like Ctrl-C, so the ``with``
    blocks close their workers and every record written so far stays, instead of orphaning them.

    Once only: a second SIGTERM during the unwinding would land in a ``finally`` or a lock's
    restore and break it (seen on the H200, 2026-12-02: "release unlocked lock" in a queue wait).
    A no-op handler, not SIG_IGN: an ignored signal stays ignored in the workers started later.
    """
    signal.signal(signal.SIGTERM, _unwinding)
    raise KeyboardInterrupt


def _unwinding(signum: int, frame: object) -> None:
    """SIGTERM while the first one unwinds: already stopping."""


def _interrupted(err: BaseException) -> bool:
    """Whether ``err`` was raised while an interrupt unwound (its cause or context chain holds
    one): an interrupt landing inside a lock's wait can surface as the lock's RuntimeError."""
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        return _main(args)
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        return _main(args)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(args: argparse.Namespace) -> int:
    config = None
    try:
        config = load_config(args.config, overrides=overrides(args), flags=FLAGS)
        return _run(HANDLERS[args.command], args, config)
    except BudgetExhausted as err:
        print(f"stopped: {err}", file=sys.stderr)
        return err.exit_code
    except KernelsmithError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    except OSError as err:
        readonly = not_writable(err, pathlib.Path(err.filename).parent if err.filename else "a folder it needs")
        typed: KernelsmithError = readonly or path_error(err)
        print(f"error: {typed}", file=sys.stderr)  # one line naming the path and the fix, no traceback
        return typed.exit_code
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return 130
    except Exception as err:
        if _interrupted(err):
            print(INTERRUPTED, file=sys.stderr)  # the interrupt, surfaced as what it broke on the way out
            return 130
        if os.environ.get("KERNELSMITH_TRACEBACK") or getattr(args, "verbose", False):
            raise
        print(f"internal error: {_crash_report(err, args.command, config)}", file=sys.stderr)
        return INTERNAL_ERROR


def path_error(err: OSError) -> KernelsmithError:
    """An operating-system error about a path the user gave or the machine holds, as one typed error.

    Why: a ``--work-dir`` or ``track --html`` that names an existing file raised ``FileExistsError``
    from ``mkdir``, and the user saw a traceback; the path is theirs to fix, so they get the path,
    what is wrong with it and the fix (exit 2), as for every other input error."""
    path = err.filename or "a path"
    if isinstance(err, (FileExistsError, NotADirectoryError)):
        return ConfigError(f"{path} is a file where a folder is needed", fix="pass a folder's path, or move the file")
    if isinstance(err, IsADirectoryError):
        return ConfigError(f"{path} is a folder where a file is needed", fix="pass a file's path")
    if isinstance(err, FileNotFoundError):
        return ConfigError(f"{path} does not exist", fix="check the path")
    return ConfigError(f"{path}: {err.strerror or err}", fix="check the path, the disk and its permissions")


def _run(handler: Any, args: argparse.Namespace, config: Any) -> int:
    """The handler, with ``--quiet`` (progress lines dropped) and ``--json`` (progress lines on stderr,
    the emitted result as one JSON document on stdout: :mod:`pipeline.output`)."""
    as_json = bool(getattr(args, "json", False))
    if as_json:
        setattr(args, EMIT, [])
    if not (as_json or getattr(args, "quiet", False)):
        return int(handler(args, config) or 0)
    sink = sys.stderr if as_json else open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - closed below
    try:
        with contextlib.redirect_stdout(sink):
            code = int(handler(args, config) or 0)
    finally:
        if sink is not sys.stderr:
            sink.close()
    if as_json:
        print(document(args.command, code, getattr(args, EMIT)))
    return code


INTERRUPTED = "interrupted: results written so far are kept; re-run the same command to resume"
INTERNAL_ERROR = 70  # EX_SOFTWARE: a Kernelsmith bug, not the user's input


def _crash_report(err: Exception, command: str, config: Any) -> str:
    """One line for a Kernelsmith bug (an exception no stage types): what and where, with the
    traceback saved to a file rather than printed, since the records written so far stay valid
    and a rerun resumes from them (as the H200 sweep of 2026-12-05 showed, a bug in one op's
    round came after another op's accepted candidate)."""
    frames = traceback.extract_tb(err.__traceback__)
    where = f" at {pathlib.Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    text = "".join(traceback.format_exception(err))
    stamp = time.strftime("%Y%m%dT%H%M%S")
    saved = "not saved (no writable folder)"
    folders = ([config.work / "crashes"] if config is not None else []) + [pathlib.Path(tempfile.gettempdir())]
    for folder in folders:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"kernelsmith-{stamp}-{command}.txt"
            path.write_text(text)
        except OSError:
            continue
        saved = f"saved in {path}"
        break
    first = (str(err).splitlines() or [""])[0]  # one line, whatever the message holds
    return (
        f"{type(err).__name__}: {first}{where}. This is a Kernelsmith bug, not your input. The results written "
        f"so far are kept and rerunning the same command resumes. The traceback is {saved}: please report "
        "it with that file (KERNELSMITH_TRACEBACK=1 prints it instead)"
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
