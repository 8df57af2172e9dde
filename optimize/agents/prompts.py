"""Prompt templates: ``<agent>.md`` files beside the agent modules.

A template holds the system message, a line ``=== user ===``, then the user
message. Placeholders are ``$name`` (``string.Template``); a literal dollar sign
is ``$$``. Filling is strict: a missing value is a KeyError at once, so a prompt
never goes out with a hole in it.
"""

from __future__ import annotations

import functools
import pathlib
import string

from optimize.llm.cache import Message

HERE = pathlib.Path(__file__).resolve().parent
SPLIT = "=== user ==="


@functools.cache
def template(name: str) -> tuple[string.Template, string.Template]:
    text = (HERE / f"{name}.md").read_text(encoding="utf-8")
    if SPLIT not in text:
        raise ValueError(f"prompt template {name}.md lacks the '{SPLIT}' line")
    system, user = text.split(SPLIT, 1)
    return string.Template(system.strip() + "\n"), string.Template(user.strip() + "\n")


def render(name: str, **values: object) -> list[Message]:
    """The [system, user] messages of template ``name`` filled with ``values``."""
    system, user = template(name)
    text_values = {k: str(v) for k, v in values.items()}
    return [
        {"role": "system", "content": system.substitute(text_values)},
        {"role": "user", "content": user.substitute(text_values)},
    ]


def placeholders(name: str) -> set[str]:
    """The $names a template uses (tests check every one is filled)."""
    found: set[str] = set()
    for tmpl in template(name):
        for match in tmpl.pattern.finditer(tmpl.template):
            named = match.group("named") or match.group("braced")
            if named:
                found.add(named)
    return found
