"""On-disk cache of LLM replies, keyed by a hash of everything that shapes them.

Why: a rerun of the same run (after a crash, or to reproduce a result) must cost
nothing and see the same replies, and a finished run must be replayable in a
test. So every reply is stored as ``<root>/<key>.json`` where ``key`` covers the
endpoint (``base_url``), the model, temperature, max tokens and the exact messages.

What must stay true:
- The key covers every input that changes the reply, the endpoint included: the
  same model name on another server is another model (a local test server, a fixed
  one, a hosted one). Replays do not need the key: :class:`optimize.llm.fakes.ReplayModel`
  matches on the messages alone, whatever endpoint answered.
- Only replies an agent could use stay: the client never stores a body it could not
  read, and an agent that cannot parse a reply removes its entry (:meth:`ReplyCache.remove`).
- Entries are written with :func:`pipeline.record_io.write_record` (staging file +
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

from pipeline.record_io import VersionedRecord, content_hash, write_record

Message = dict[str, str]


def endpoint_id(base_url: str | None) -> str:
    """The endpoint as the cache key spells it: ``base_url`` without a trailing slash ("" for none)."""
    return (base_url or "").strip().rstrip("/")


def prompt_key(
    model: str, messages: Sequence[Message], *, temperature: float, max_tokens: int, endpoint: str = ""
) -> str:
    """The cache key of one request (sha256 hex); ``endpoint`` is :func:`endpoint_id` of ``base_url``."""
    payload = json.dumps(
        {
            "endpoint": endpoint_id(endpoint),
            "model": model,
            "temperature": round(float(temperature), 6),
            "max_tokens": int(max_tokens),
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
        },
        sort_keys=True,
        ensure_ascii=False,
    )
    return content_hash("kernelsmith-llm/2", payload)


class CachedReply(VersionedRecord):
    key: str
    agent: str
    model: str
    endpoint: str = ""  # endpoint_id(base_url) of the server that answered
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

    def remove(self, key: str) -> None:
        """Forget the entry for ``key`` (a reply an agent could not use); a missing one is fine."""
        self.path(key).unlink(missing_ok=True)

    def entries(self) -> list[CachedReply]:
        out = []
        for path in sorted(self.root.glob("*.json")):
            entry = self.get(path.stem)
            if entry is not None:
                out.append(entry)
        return out
