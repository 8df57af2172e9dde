"""What a command hands to ``--json``, and how the command line prints it.

Why: a script or a CI job wants a command's result as data, not a rich table to scrape. The four
commands that end in a table (``optimize``, ``bench``, ``track``, ``integrate``) hand their result
to :func:`emit`; with ``--json`` the command line prints every emitted value as one JSON document
on stdout and sends the progress lines to stderr, so stdout parses. Without ``--json`` nothing is
kept and the tables print as before.

What must stay true: stdout under ``--json`` holds the JSON document and nothing else.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

EMIT = "emitted"  # the attribute (of a stage's Options, or the parsed flags) that collects emitted values


def emit(args: Any, value: Any) -> None:
    """Hand ``value`` (a record, a dataclass or plain data) to ``--json``; a no-op without it."""
    sink = getattr(args, EMIT, None)
    if sink is not None:
        sink.append(value)


def plain(value: Any) -> Any:
    """``value`` as JSON-able data: records through pydantic, dataclasses field by field."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def document(command: str, code: int, values: list[Any]) -> str:
    """The one JSON document ``--json`` prints: the command, its exit code and what it emitted."""
    result = plain(values[0]) if len(values) == 1 else [plain(v) for v in values]
    return json.dumps({"command": command, "exit_code": code, "result": result}, indent=1, default=str)


__all__ = ["EMIT", "document", "emit", "plain"]
