"""The LLM client: any OpenAI-compatible chat endpoint, with retries, prices and a cache.

Why it is built this way:
- Retries are ours, not the ``openai`` package's (it is created with
  ``max_retries=0``): we retry 429 and 5xx responses, timeouts and dropped
  connections with exponential backoff (honouring ``Retry-After``), and the logic
  is testable by handing :class:`LlmClient` a *transport* that raises the
  ``openai`` package's own exception types. Tests never reach HTTP.
- Every reply goes through :class:`optimize.llm.cache.ReplyCache` first, so a
  rerun of a run costs nothing and sees the same replies. The key names the
  endpoint (``base_url`` + model), so a recording of one server is never served
  for another; ``llm.fresh_samples`` asks again and replaces the entries. A reply
  the agents could not use is taken out again (:meth:`LlmClient.discard`), so a
  fixed server or a new run is not handed the old garbage.
- A 200 whose body is not a chat completion (bad JSON, HTML from a proxy, no
  choices) is a :class:`optimize.errors.MalformedBody`, retried like a 5xx; the
  ``openai`` package raises a bare ``json.JSONDecodeError`` for a body that does
  not parse, or returns the text when the content type is not JSON.
- Timeout and reply length follow the endpoint (``LlmConfig.effective_timeout_s``,
  ``effective_max_tokens``): a model served on this machine gets minutes, not seconds.
- Tokens and dollars are counted per call from ``llm.prices_usd_per_mtok``; a
  model without a price is refused up front (see :mod:`optimize.llm.prices`).
- Budgets are enforced by :class:`MeteredModel`, which wraps any :class:`Model`
  (the real client or a test fake) so the same accounting runs in tests.

What must stay true:
- Failures surface as :class:`pipeline.errors.ModelError` (the round records it
  and the run goes on), :class:`pipeline.errors.ConfigError` (wrong key, model or
  URL: the user fixes the setup) or :class:`pipeline.errors.BudgetExhausted`.
- A cache hit costs 0 tokens and $0 against the budget.
"""

from __future__ import annotations

import dataclasses
import email.utils
import json
import os
import pathlib
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from optimize.errors import EndpointError, MalformedBody, MalformedReply
from optimize.llm.cache import CachedReply, Message, ReplyCache, endpoint_id, prompt_key
from optimize.llm.prices import check_priced, cost_usd
from pipeline.config import LlmConfig
from pipeline.errors import BudgetExhausted, ConfigError, ModelError
from pipeline.record_io import content_hash

BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 60.0
RETRY_AFTER_CAP_S = 120.0


# --------------------------------------------------------------------------- data


@dataclasses.dataclass(frozen=True)
class Completion:
    """What a transport returns for one request."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None = None


@dataclasses.dataclass(frozen=True)
class Reply:
    """One answered prompt, as the agents see it."""

    text: str
    agent: str
    model: str
    key: str  # cache key (model + settings + messages)
    prompt_hash: str  # hash of the messages alone (what replays match on)
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float  # charged for this call: 0 on a cache hit
    cached: bool
    seconds: float = 0.0
    finish_reason: str | None = None

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclasses.dataclass
class Usage:
    calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, reply: Reply) -> None:
        self.calls += 1
        if reply.cached:
            self.cached_calls += 1
            return
        self.prompt_tokens += reply.prompt_tokens
        self.completion_tokens += reply.completion_tokens
        self.cost_usd += reply.cost_usd


class Model(Protocol):
    """What agents call. Implemented by LlmClient, MeteredModel and the fakes."""

    name: str

    def complete(self, agent: str, messages: Sequence[Message]) -> Reply: ...

    def discard(self, reply: Reply) -> None:
        """``reply`` was unusable (an agent could not parse it): never hand it out again."""


class Transport(Protocol):
    def __call__(
        self, *, model: str, messages: Sequence[Message], temperature: float, max_tokens: int, timeout_s: float
    ) -> Completion: ...


def prompt_hash(messages: Sequence[Message]) -> str:
    """Hash of the messages alone; replays match on it whatever model answered."""
    payload = json.dumps([{"role": m["role"], "content": m["content"]} for m in messages], ensure_ascii=False)
    return content_hash("kernelsmith-prompt/1", payload)


def estimate_tokens(text: str) -> int:
    """Rough token count (4 characters a token) for endpoints that omit usage."""
    return max(1, len(text) // 4)


# --------------------------------------------------------------------------- openai transport


def completion_from_response(response: Any) -> Completion:
    """Turn an ``openai`` ChatCompletion into a :class:`Completion`.

    A body that is not a chat completion (the ``openai`` package hands back the
    text of a non-JSON body, or an object without choices) is a
    :class:`MalformedBody` (retried); an empty or refused reply is a
    :class:`MalformedReply`. When the endpoint reports no usage the counts are
    estimated from the text length.
    """
    if isinstance(response, (str, bytes, list, dict)) or response is None:
        raise MalformedBody(
            "the endpoint answered with a body that is not a chat completion",
            fix="check that llm.base_url is the OpenAI-compatible API (it usually ends in /v1)",
            detail=str(response)[:400],
        )
    choices = getattr(response, "choices", None) or []
    if not choices:
        raise MalformedBody(
            "the endpoint returned no choices",
            fix="check the model name and that llm.base_url is the OpenAI-compatible API",
            detail=str(response)[:400],
        )
    choice = choices[0]
    message = getattr(choice, "message", None)
    content = getattr(message, "content", None) if message is not None else None
    finish = getattr(choice, "finish_reason", None)
    if not content or not str(content).strip():
        refusal = getattr(message, "refusal", None) if message is not None else None
        raise MalformedReply(
            f"the endpoint returned an empty reply (finish_reason={finish})",
            fix="raise llm.max_tokens if the reasoning used them all, or use another model",
            detail=str(refusal or ""),
        )
    usage = getattr(response, "usage", None)
    prompt_tokens = getattr(usage, "prompt_tokens", None) if usage is not None else None
    completion_tokens = getattr(usage, "completion_tokens", None) if usage is not None else None
    return Completion(
        text=str(content),
        prompt_tokens=int(prompt_tokens) if prompt_tokens is not None else 0,
        completion_tokens=int(completion_tokens) if completion_tokens is not None else estimate_tokens(str(content)),
        finish_reason=finish,
    )


class OpenAITransport:
    """Chat completions through the ``openai`` package, with its retries off.

    OpenAI's reasoning models take ``max_completion_tokens`` and only the default
    temperature, while many compatible servers still want ``max_tokens``. The
    transport starts with ``max_completion_tokens`` and, when the endpoint rejects
    a parameter by name (HTTP 400), switches spelling or drops the temperature and
    remembers that for the rest of the run.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout_s: float,
        http_client: Any = None,
        client: Any = None,
    ) -> None:
        if client is None:
            import openai

            client = openai.OpenAI(
                base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=0, http_client=http_client
            )
        self.client = client
        self.tokens_param = "max_completion_tokens"
        self.send_temperature = True

    def __call__(
        self, *, model: str, messages: Sequence[Message], temperature: float, max_tokens: int, timeout_s: float
    ) -> Completion:
        import openai

        for _ in range(3):
            kwargs: dict[str, Any] = {
                "model": model,
                "messages": [dict(m) for m in messages],
                self.tokens_param: max_tokens,
                "timeout": timeout_s,
            }
            if self.send_temperature:
                kwargs["temperature"] = temperature
            try:
                response = self.client.chat.completions.create(**kwargs)
            except (json.JSONDecodeError, openai.APIResponseValidationError) as err:
                raise MalformedBody(
                    "the endpoint answered 200 with a body that is not valid chat-completion JSON",
                    fix="check the server behind llm.base_url (a proxy or a server mid-restart sends these)",
                    detail=str(err),
                ) from err
            except openai.BadRequestError as err:
                text = str(err).lower()
                if self.tokens_param in text and self.tokens_param == "max_completion_tokens":
                    self.tokens_param = "max_tokens"
                    continue
                if "temperature" in text and self.send_temperature:
                    self.send_temperature = False
                    continue
                raise
            return completion_from_response(response)
        raise ModelError("the endpoint rejected every parameter spelling", fix="check llm.model and llm.base_url")


# --------------------------------------------------------------------------- client


def _retry_after_s(err: Exception) -> float | None:
    response = getattr(err, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def backoff_s(attempt: int, retry_after: float | None = None) -> float:
    """Delay before retry ``attempt`` (0-based): 1, 2, 4, ... s capped, or Retry-After if longer."""
    delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * (2**attempt))
    if retry_after is not None:
        delay = max(delay, min(retry_after, RETRY_AFTER_CAP_S))
    return delay


def _refused(err: BaseException) -> bool:
    """Whether a connection error is a refused connection (nothing listens at the address): its cause chain
    holds ``ConnectionRefusedError`` or says so. Retrying that only waits (about 30 s by default)."""
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, ConnectionRefusedError) or "connection refused" in str(cause).lower():
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def _classify(err: Exception) -> str:
    """'retry', 'refused', 'config', 'model' or 'raise' for an exception raised by a transport."""
    import openai

    if isinstance(err, (MalformedBody, json.JSONDecodeError)):
        return "retry"
    if isinstance(err, ModelError):
        return "raise"
    if isinstance(err, openai.APIConnectionError) and _refused(err):
        return "refused"
    if isinstance(err, (openai.APITimeoutError, openai.APIConnectionError, openai.RateLimitError)):
        return "retry"
    if isinstance(err, openai.APIStatusError):
        if err.status_code == 429 or err.status_code >= 500:
            return "retry"
        if err.status_code in (401, 403, 404):
            return "config"
        return "model"
    return "raise"


class LlmClient:
    """A :class:`Model` backed by an OpenAI-compatible endpoint (see module docstring)."""

    def __init__(
        self,
        config: LlmConfig,
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        transport: Transport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        environ: dict[str, str] | None = None,
    ) -> None:
        self.config = config
        self.name = config.model
        for agent in ("testing", "profiling", "planning", "coding", "repair", "single"):
            check_priced(self.settings(agent)[0], config.prices_usd_per_mtok)
        self.cache = ReplyCache(cache_dir) if (config.cache and cache_dir is not None) else None
        self.endpoint = endpoint_id(config.base_url)
        self.sleep = sleep
        self.usage = Usage()
        if transport is None:
            if not config.base_url:
                raise ConfigError(
                    "no LLM endpoint configured",
                    fix="set llm.base_url in kernelsmith.toml (or KERNELSMITH_LLM__BASE_URL), or use --coder offline",
                )
            env = os.environ if environ is None else environ
            key = env.get(config.api_key_env, "")
            if not key:
                raise ConfigError(
                    f"the API key variable {config.api_key_env} is not set",
                    fix=f"export {config.api_key_env}=<key> (any non-empty value for a keyless local server), "
                    "or set llm.api_key_env to the variable that holds it",
                )
            transport = OpenAITransport(config.base_url, key, timeout_s=config.effective_timeout_s)
        self.transport = transport

    def settings(self, agent: str) -> tuple[str, float, int]:
        """(model, temperature, max_tokens) for one agent, per-agent overrides applied."""
        over = self.config.agents.get(agent)  # type: ignore[call-overload]
        model = (over.model if over and over.model else None) or self.config.model
        temperature = over.temperature if over and over.temperature is not None else self.config.temperature
        max_tokens = over.max_tokens if over and over.max_tokens is not None else self.config.effective_max_tokens
        return model, float(temperature), int(max_tokens)

    def discard(self, reply: Reply) -> None:
        """Take ``reply`` out of the cache: an agent could not use it (see the module docstring)."""
        if self.cache is not None:
            self.cache.remove(reply.key)

    def complete(self, agent: str, messages: Sequence[Message]) -> Reply:
        model, temperature, max_tokens = self.settings(agent)
        key = prompt_key(model, messages, temperature=temperature, max_tokens=max_tokens, endpoint=self.endpoint)
        phash = prompt_hash(messages)
        if self.cache is not None and not self.config.fresh_samples:
            hit = self.cache.get(key)
            if hit is not None:
                reply = Reply(
                    text=hit.text,
                    agent=agent,
                    model=model,
                    key=key,
                    prompt_hash=phash,
                    prompt_tokens=hit.prompt_tokens,
                    completion_tokens=hit.completion_tokens,
                    cost_usd=0.0,
                    cached=True,
                    seconds=0.0,
                    finish_reason=hit.finish_reason,
                )
                self.usage.add(reply)
                return reply
        start = time.monotonic()
        completion = self._call_with_retries(model, messages, temperature, max_tokens)
        seconds = time.monotonic() - start
        prompt_tokens = completion.prompt_tokens or estimate_tokens("".join(m["content"] for m in messages))
        cost = cost_usd(model, prompt_tokens, completion.completion_tokens, self.config.prices_usd_per_mtok)
        reply = Reply(
            text=completion.text,
            agent=agent,
            model=model,
            key=key,
            prompt_hash=phash,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion.completion_tokens,
            cost_usd=cost,
            cached=False,
            seconds=seconds,
            finish_reason=completion.finish_reason,
        )
        if self.cache is not None:
            self.cache.put(
                CachedReply(
                    key=key,
                    agent=agent,
                    model=model,
                    endpoint=self.endpoint,
                    temperature=temperature,
                    max_tokens=max_tokens,
                    messages=[{"role": m["role"], "content": m["content"]} for m in messages],
                    text=completion.text,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=completion.completion_tokens,
                    cost_usd=cost,
                    finish_reason=completion.finish_reason,
                    seconds=seconds,
                )
            )
        self.usage.add(reply)
        return reply

    def _call_with_retries(
        self, model: str, messages: Sequence[Message], temperature: float, max_tokens: int
    ) -> Completion:
        attempts = self.config.max_retries + 1
        last: Exception | None = None
        for attempt in range(attempts):
            try:
                return self.transport(
                    model=model,
                    messages=messages,
                    temperature=temperature,
                    max_tokens=max_tokens,
                    timeout_s=self.config.effective_timeout_s,
                )
            except Exception as err:  # noqa: BLE001 - classified below, unknown kinds re-raised
                kind = _classify(err)
                if kind == "raise":
                    raise
                if kind == "refused":
                    raise EndpointError(
                        f"the LLM endpoint {self.config.base_url or '(transport)'} refused the connection: "
                        "nothing listens at that address",
                        fix="start the server, or correct llm.base_url (host and port)",
                        detail=str(err),
                    ) from err
                if kind == "config":
                    raise ConfigError(
                        f"the LLM endpoint refused the request ({getattr(err, 'status_code', '?')}): {err}",
                        fix=f"check llm.base_url ({self.config.base_url}), llm.model ({model}) "
                        f"and the key in {self.config.api_key_env}",
                    ) from err
                if kind == "model":
                    raise ModelError(
                        f"the LLM endpoint rejected the request ({getattr(err, 'status_code', '?')})",
                        fix="shorten the prompt or raise the model's context; see the detail",
                        detail=str(err),
                    ) from err
                last = err
                if attempt + 1 < attempts:
                    self.sleep(backoff_s(attempt, _retry_after_s(err)))
        import openai

        if isinstance(last, openai.APITimeoutError):
            what = "timed out"
        elif isinstance(last, (MalformedBody, json.JSONDecodeError)):
            what = "answered with a malformed body"
        else:
            what = "failed"
        raise EndpointError(
            f"the LLM endpoint {self.config.base_url or '(transport)'} {what} {attempts} times "
            f"(model {model}, timeout {self.config.effective_timeout_s:g}s)",
            fix="retry later, raise llm.timeout_s / llm.max_retries, or check the endpoint",
            detail=str(last),
        ) from last


# --------------------------------------------------------------------------- budget + log


class SpendGate(Protocol):
    """What :class:`MeteredModel` asks before and tells after each call."""

    def before_model_call(self) -> None:
        """Raise BudgetExhausted when the token or dollar budget is spent."""

    def charge_model(self, tokens: int, cost_usd: float) -> None: ...


class MeteredModel:
    """Wraps a :class:`Model`: enforces the token/dollar budget and logs each call.

    The log (one JSON line per call: agent, model, key, prompt hash, reply text,
    tokens, cost, cached) makes a run's conversation replayable by
    :class:`optimize.llm.fakes.ReplayModel` in the order it happened. One call may
    overshoot a budget by its own size: the budget is checked before a call, when
    its size is not known yet.

    ``failures`` counts the calls that ended in a :class:`ModelError` (after the
    client's retries) and ``last_error`` keeps the latest, so the loop can tell a
    run whose every call failed from one whose replies found nothing faster.
    """

    def __init__(self, inner: Model, gate: SpendGate | None = None, log_path: str | os.PathLike[str] | None = None):
        self.inner = inner
        self.name = inner.name
        self.gate = gate
        self.log_path = pathlib.Path(log_path) if log_path is not None else None
        self.usage = Usage()
        self.failures = 0
        self.last_error: ModelError | None = None

    def discard(self, reply: Reply) -> None:
        discard = getattr(self.inner, "discard", None)
        if discard is not None:
            discard(reply)

    def complete(self, agent: str, messages: Sequence[Message]) -> Reply:
        if self.gate is not None:
            self.gate.before_model_call()
        try:
            reply = self.inner.complete(agent, messages)
        except ModelError as err:
            self.failures += 1
            self.last_error = err
            raise
        self.usage.add(reply)
        if self.gate is not None and not reply.cached:
            self.gate.charge_model(reply.tokens, reply.cost_usd)
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            line = json.dumps(
                {
                    "agent": reply.agent,
                    "model": reply.model,
                    "key": reply.key,
                    "prompt_hash": reply.prompt_hash,
                    "text": reply.text,
                    "prompt_tokens": reply.prompt_tokens,
                    "completion_tokens": reply.completion_tokens,
                    "cost_usd": reply.cost_usd,
                    "cached": reply.cached,
                    "seconds": round(reply.seconds, 3),
                },
                ensure_ascii=False,
            )
            with self.log_path.open("a", encoding="utf-8") as handle:
                handle.write(line + "\n")
        return reply


__all__ = [
    "BudgetExhausted",
    "Completion",
    "LlmClient",
    "MeteredModel",
    "Model",
    "OpenAITransport",
    "Reply",
    "SpendGate",
    "Usage",
    "backoff_s",
    "completion_from_response",
    "estimate_tokens",
    "prompt_hash",
]
