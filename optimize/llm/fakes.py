"""LLM fakes for tests: scripted replies and replays of recorded runs.

These are the only fakes the project allows, and only tests use them. Both
implement :class:`optimize.llm.client.Model`, so the loop, the budget meter and
the call log run unchanged around them.

- :class:`ScriptedModel` answers with a fixed list of replies, in order, and
  records every prompt it was sent (so a test can assert what an agent asked).
  A reply may be a string, an exception to raise (e.g. a ModelError), or a
  function of the messages. Running out of script raises
  :class:`optimize.errors.ScriptExhausted`, which is not a ModelError, so a short
  script fails the test instead of being recorded as a round outcome.
- :class:`ReplayModel` answers from what a real run stored: a reply-cache folder
  (``work/cache/llm/*.json``), a call log (``<run>/<op>/llm.jsonl``) or a run
  folder (every ``llm.jsonl`` under it). It matches on the prompt hash (the
  messages alone), or plays the log back in order.

Token counts of scripted replies are estimated (4 characters a token) so budget
tests exercise the same arithmetic as real calls.
"""

from __future__ import annotations

import json
import pathlib
from collections import defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from optimize.errors import ReplayError, ScriptExhausted
from optimize.llm.cache import Message, ReplyCache, prompt_key
from optimize.llm.client import Reply, estimate_tokens, prompt_hash

ScriptItem = str | BaseException | Callable[[Sequence[Message]], str]


class ScriptedModel:
    """Replies from a script, in order; see module docstring."""

    def __init__(
        self,
        replies: Sequence[ScriptItem],
        *,
        name: str = "scripted",
        price_usd_per_mtok: Mapping[str, float] | None = None,
    ) -> None:
        self.name = name
        self.replies = list(replies)
        self.prompts: list[tuple[str, list[Message]]] = []
        self.discarded: list[Reply] = []  # replies an agent could not use (see Model.discard)
        self.price = dict(price_usd_per_mtok or {"input": 0.0, "output": 0.0})

    @property
    def remaining(self) -> int:
        return len(self.replies) - len(self.prompts)

    def complete(self, agent: str, messages: Sequence[Message]) -> Reply:
        index = len(self.prompts)
        self.prompts.append((agent, [dict(m) for m in messages]))
        if index >= len(self.replies):
            raise ScriptExhausted(
                f"scripted model has {len(self.replies)} replies; call {index + 1} came from agent {agent!r}"
            )
        item = self.replies[index]
        if isinstance(item, BaseException):
            raise item
        text = item(messages) if callable(item) else item
        prompt_tokens = estimate_tokens("".join(m["content"] for m in messages))
        completion_tokens = estimate_tokens(text)
        cost = (prompt_tokens * self.price["input"] + completion_tokens * self.price["output"]) / 1e6
        return Reply(
            text=text,
            agent=agent,
            model=self.name,
            key=prompt_key(self.name, messages, temperature=0.0, max_tokens=0),
            prompt_hash=prompt_hash(messages),
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=cost,
            cached=False,
        )

    def discard(self, reply: Reply) -> None:
        self.discarded.append(reply)

    def agents(self) -> list[str]:
        """Which agent sent each prompt, in order."""
        return [agent for agent, _ in self.prompts]


class ReplayModel:
    """Replies recorded by a real run; see module docstring.

    ``match="hash"``: the reply recorded for the same messages (several recorded
    replies to one prompt are handed out in their order, the last one repeats).
    ``match="order"``: the n-th call gets the n-th recorded reply (needs a log).
    A prompt with no recording raises :class:`ReplayError` naming the agent and
    hash, since a silent default would make the replay lie.
    """

    def __init__(self, source: str | pathlib.Path, *, match: Literal["hash", "order"] = "hash", name: str = "replay"):
        self.name = name
        self.match = match
        self.source = pathlib.Path(source)
        self.prompts: list[tuple[str, list[Message]]] = []
        self.discarded: list[Reply] = []  # the recording stays as it was: a replay shows what happened
        self._by_hash: dict[str, deque[dict]] = defaultdict(deque)
        self._last: dict[str, dict] = {}
        self._ordered: list[dict] = []
        self._load()

    def _load(self) -> None:
        src = self.source
        if not src.exists():
            raise ReplayError(
                f"replay source {src} does not exist", fix="pass a reply-cache folder, an llm.jsonl or a run folder"
            )
        logs: list[pathlib.Path] = []
        if src.is_file():
            logs = [src]
        else:
            logs = sorted(src.rglob("llm.jsonl"))
            if not logs:
                for entry in ReplyCache(src).entries():
                    entry_hash = prompt_hash(entry.messages)
                    self._by_hash[entry_hash].append(
                        {
                            "agent": entry.agent,
                            "model": entry.model,
                            "text": entry.text,
                            "prompt_hash": entry_hash,
                            "prompt_tokens": entry.prompt_tokens,
                            "completion_tokens": entry.completion_tokens,
                        }
                    )
                if self.match == "order":
                    raise ReplayError(
                        f"{src} is a reply cache, which keeps no call order",
                        fix="replay in order from a run's llm.jsonl, or use match='hash'",
                    )
        for log in logs:
            for number, line in enumerate(log.read_text(encoding="utf-8").splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                    rec["prompt_hash"], rec["text"]  # noqa: B018 - both keys are required
                except (ValueError, KeyError, TypeError) as err:
                    raise ReplayError(
                        f"{log}:{number}: not an LLM call record ({err})",
                        fix="pass an llm.jsonl written by kernelsmith",
                    ) from err
                self._ordered.append(rec)
                self._by_hash[rec["prompt_hash"]].append(rec)
        if not self._ordered and not self._by_hash:
            raise ReplayError(f"no recorded LLM replies under {src}", fix="point at a run that used an LLM coder")

    def complete(self, agent: str, messages: Sequence[Message]) -> Reply:
        index = len(self.prompts)
        self.prompts.append((agent, [dict(m) for m in messages]))
        phash = prompt_hash(messages)
        if self.match == "order":
            if index >= len(self._ordered):
                raise ReplayError(
                    f"the recording has {len(self._ordered)} calls; call {index + 1} ({agent}) is beyond it"
                )
            rec = self._ordered[index]
        else:
            queue = self._by_hash.get(phash)
            if queue:
                rec = queue.popleft()
                self._last[phash] = rec
            elif phash in self._last:
                rec = self._last[phash]
            else:
                raise ReplayError(
                    f"no recorded reply for the {agent} prompt with hash {phash[:12]}",
                    fix="the prompt changed since the recording; re-record, or replay with match='order'",
                )
        return Reply(
            text=rec["text"],
            agent=agent,
            model=rec.get("model", self.name),
            key=rec.get("key", phash),
            prompt_hash=phash,
            prompt_tokens=int(rec.get("prompt_tokens", 0)),
            completion_tokens=int(rec.get("completion_tokens", 0)),
            cost_usd=0.0,
            cached=True,
        )

    def discard(self, reply: Reply) -> None:
        self.discarded.append(reply)
