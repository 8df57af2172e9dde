"""On-disk cache of LLM replies, keyed by a hash of everything that shapes them.

Why: a rerun of the same run (after a crash, or to reproduce a result) must cost
nothing and see the same replies, and a finished run must be replayable in a
test. So every reply is stored as ``<root>/<key>.json`` where ``key`` covers the
model, temperature, max tokens and the exact messages.

What must stay true:
- The key covers every input that changes the reply; the endpoint URL is left out
  on purpose so a recording replays against any endpoint (or none).
- Entries are written with :func:`pipeline.records.write_record` (staging file +
  rename): a reader never sees half an entry. An unreadable entry is a miss and
  is replaced, never patched.
- Each entry keeps the prompt it answered, so a cache folder is also a readable
  log of what the agents were asked.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from pipeline.records import VersionedRecord, content_hash, write_record

Message = dict[str, str]


def prompt_key(model: str, messages: Sequence[Message], *, temperature: float, max_tokens: int) -> str:
    """The cache key of one request (sha256 hex)."""
    payload = json.dumps(
        {
            "model": model,
            "temperature": round(float(temperature), 6),
            "max_tokens": int(max_tokens),
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
        },
        sort_keys=True,
        ensure_ascii=False,
    )
    return content_hash("kernelsmith-llm/1", payload)


class CachedReply(VersionedRecord):
    key: str
    agent: str
    model: str
    temperature: float
    max_tokens: int
    messages: list[dict[str, str]]
    text: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float  # what the original call cost; a cache hit costs 0
    finish_reason: str | None = None
    seconds: float = 0.0


class ReplyCache:
    """``<root>/<key>.json`` entries; see the module docstring."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = pathlib.Path(root)

    def path(self, key: str) -> pathlib.Path:
        return self.root / f"{key}.json"

    def get(self, key: str) -> CachedReply | None:
        path = self.path(key)
        try:
            data: Any = json.loads(path.read_text(encoding="utf-8"))
            entry = CachedReply.model_validate(data)
        except (OSError, ValueError, ValidationError):
            return None
        return entry if entry.key == key else None

    def put(self, entry: CachedReply) -> pathlib.Path:
        return write_record(entry, self.path(entry.key))

    def entries(self) -> list[CachedReply]:
        out = []
        for path in sorted(self.root.glob("*.json")):
            entry = self.get(path.stem)
            if entry is not None:
                out.append(entry)
        return out
