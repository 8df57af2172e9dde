"""The LLM client: retries with backoff, caching, prices, budgets; and the fakes.

HTTP is exercised through the real ``openai`` client with an ``httpx2``
MockTransport (no socket is opened, so the conftest guard never trips); retry
classification is also checked on the ``openai`` package's own exception types.
"""

from __future__ import annotations

import json

import httpx2
import openai
import pytest

from optimize.errors import EndpointError, MalformedReply, ReplayError, ScriptExhausted
from optimize.llm.cache import ReplyCache, prompt_key
from optimize.llm.client import (
    Completion,
    LlmClient,
    MeteredModel,
    OpenAITransport,
    backoff_s,
    prompt_hash,
)
from optimize.llm.fakes import ReplayModel, ScriptedModel
from pipeline.config import AgentModel, LlmConfig
from pipeline.errors import BudgetExhausted, ConfigError, ModelError

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "make it fast"}]
URL = "http://llm.invalid/v1"


def config(**over) -> LlmConfig:
    base = {
        "base_url": URL,
        "model": "m1",
        "max_retries": 3,
        "prices_usd_per_mtok": {"m1": {"input": 2.0, "output": 8.0}, "m2": {"input": 1.0, "output": 1.0}},
    }
    base.update(over)
    return LlmConfig.model_validate(base)


def completion_json(text: str, prompt_tokens: int = 100, completion_tokens: int = 50) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "m1",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class Server:
    """A MockTransport handler answering from a list of (status, body, headers)."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.requests: list[dict] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(json.loads(request.content))
        status, body, headers = self.answers.pop(0)
        if isinstance(body, bytes):  # a raw body, sent as JSON whatever it holds
            return httpx2.Response(
                status, content=body, headers={"content-type": "application/json", **(headers or {})}
            )
        return httpx2.Response(status, json=body, headers=headers or {})


def http_client(server: Server) -> httpx2.Client:
    return httpx2.Client(transport=httpx2.MockTransport(server))


def make_client(tmp_path, server: Server, **over):
    sleeps: list[float] = []
    transport = OpenAITransport(URL, "test-key", timeout_s=5.0, http_client=http_client(server))
    client = LlmClient(config(**over), cache_dir=tmp_path / "llm", transport=transport, sleep=sleeps.append)
    return client, sleeps


def test_retries_429_and_5xx_with_exponential_backoff_then_succeeds(tmp_path):
    server = Server(
        [
            (429, {"error": {"message": "slow down"}}, None),
            (500, {"error": {"message": "oops"}}, None),
            (503, {"error": {"message": "busy"}}, None),
            (200, completion_json("done"), None),
        ]
    )
    client, sleeps = make_client(tmp_path, server)
    reply = client.complete("coding", MESSAGES)
    assert reply.text == "done"
    assert len(server.requests) == 4
    assert sleeps == [1.0, 2.0, 4.0]
    # retries are ours: the openai client itself must not retry (or the count above would differ)
    assert server.requests[0]["model"] == "m1"
    assert server.requests[0]["max_completion_tokens"] == 8192


def test_retry_after_header_lengthens_the_wait(tmp_path):
    server = Server([(429, {"error": {"message": "slow"}}, {"retry-after": "7"}), (200, completion_json("ok"), None)])
    client, sleeps = make_client(tmp_path, server)
    assert client.complete("coding", MESSAGES).text == "ok"
    assert sleeps == [7.0]


def test_gives_up_after_max_retries_with_model_error(tmp_path):
    server = Server([(502, {"error": {"message": "bad gateway"}}, None)] * 3)
    client, sleeps = make_client(tmp_path, server, max_retries=2)
    with pytest.raises(EndpointError) as info:
        client.complete("coding", MESSAGES)
    assert isinstance(info.value, ModelError)
    assert "failed 3 times" in str(info.value)
    assert sleeps == [1.0, 2.0]


def test_bad_request_is_not_retried_and_is_a_model_error(tmp_path):
    server = Server([(400, {"error": {"message": "context length exceeded"}}, None)])
    client, sleeps = make_client(tmp_path, server)
    with pytest.raises(ModelError) as info:
        client.complete("coding", MESSAGES)
    assert "context length" in str(info.value)
    assert sleeps == [] and len(server.requests) == 1


def test_auth_failure_is_a_config_error(tmp_path):
    server = Server([(401, {"error": {"message": "bad key"}}, None)])
    client, _ = make_client(tmp_path, server)
    with pytest.raises(ConfigError) as info:
        client.complete("coding", MESSAGES)
    assert "OPENAI_API_KEY" in str(info.value)


def test_unsupported_parameter_spelling_is_adapted_once(tmp_path):
    server = Server(
        [
            (400, {"error": {"message": "Unrecognized request argument supplied: max_completion_tokens"}}, None),
            (200, completion_json("fine"), None),
            (200, completion_json("again"), None),
        ]
    )
    client, _ = make_client(tmp_path, server, cache=False)
    assert client.complete("coding", MESSAGES).text == "fine"
    assert "max_tokens" in server.requests[1] and "max_completion_tokens" not in server.requests[1]
    client.complete("coding", MESSAGES + [{"role": "user", "content": "more"}])
    assert "max_tokens" in server.requests[2]


def test_timeouts_are_retried_and_reported_as_timed_out():
    request = httpx2.Request("POST", URL + "/chat/completions")
    calls = []

    def transport(**kwargs):
        calls.append(kwargs)
        raise openai.APITimeoutError(request=request)

    sleeps: list[float] = []
    client = LlmClient(config(max_retries=1, cache=False), transport=transport, sleep=sleeps.append)
    with pytest.raises(EndpointError, match="timed out 2 times"):
        client.complete("planning", MESSAGES)
    assert len(calls) == 2 and sleeps == [1.0]
    assert calls[0]["timeout_s"] == 120.0


def test_backoff_is_capped():
    assert backoff_s(0) == 1.0 and backoff_s(3) == 8.0
    assert backoff_s(20) == 60.0
    assert backoff_s(0, retry_after=1000) == 120.0


def test_cache_makes_a_rerun_free_and_is_keyed_by_everything(tmp_path):
    server = Server([(200, completion_json("first", 1000, 500), None), (200, completion_json("other model"), None)])
    client, _ = make_client(tmp_path, server)
    first = client.complete("coding", MESSAGES)
    assert not first.cached
    assert first.cost_usd == pytest.approx((1000 * 2.0 + 500 * 8.0) / 1e6)
    entry = tmp_path / "llm" / f"{first.key}.json"
    assert entry.is_file()
    assert json.loads(entry.read_text())["messages"] == MESSAGES

    # a second client (a rerun) over the same cache: no HTTP, no cost
    rerun, _ = make_client(tmp_path, Server([]))
    again = rerun.complete("coding", MESSAGES)
    assert again.cached and again.text == "first" and again.cost_usd == 0.0
    assert rerun.usage.tokens == 0 and rerun.usage.cached_calls == 1

    # a per-agent model override changes the key, so it is a miss
    client.config.agents["planning"] = AgentModel(model="m2")
    other = client.complete("planning", MESSAGES)
    assert other.text == "other model" and other.model == "m2"
    assert server.requests[-1]["model"] == "m2"
    assert other.key == prompt_key("m2", MESSAGES, temperature=0.2, max_tokens=8192, endpoint=URL)


def test_a_corrupt_cache_entry_is_a_miss(tmp_path):
    server = Server([(200, completion_json("fresh"), None)])
    client, _ = make_client(tmp_path, server)
    key = prompt_key("m1", MESSAGES, temperature=0.2, max_tokens=8192, endpoint=URL)
    (tmp_path / "llm").mkdir()
    (tmp_path / "llm" / f"{key}.json").write_text("{not json")
    assert client.complete("coding", MESSAGES).text == "fresh"
    assert ReplyCache(tmp_path / "llm").get(key).text == "fresh"


def test_empty_reply_is_malformed_and_not_cached(tmp_path):
    server = Server([(200, completion_json(""), None)])
    client, _ = make_client(tmp_path, server)
    with pytest.raises(MalformedReply):
        client.complete("coding", MESSAGES)
    assert list(tmp_path.rglob("*.json")) == []  # a malformed reply is never cached


def test_unpriced_model_is_refused_up_front():
    with pytest.raises(ConfigError, match="no price for LLM model 'mystery'"):
        LlmClient(config(model="mystery"), transport=lambda **_: Completion("x", 1, 1))
    cfg = config()
    cfg.agents["coding"] = AgentModel(model="unpriced")
    with pytest.raises(ConfigError, match="unpriced"):
        LlmClient(cfg, transport=lambda **_: Completion("x", 1, 1))


def test_missing_key_or_endpoint_is_a_config_error():
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        LlmClient(config(), environ={})
    with pytest.raises(ConfigError, match="no LLM endpoint"):
        LlmClient(config(base_url=None), environ={"OPENAI_API_KEY": "k"})


class Gate:
    def __init__(self, tokens: int):
        self.limit = tokens
        self.spent = 0
        self.dollars = 0.0

    def before_model_call(self):
        if self.spent >= self.limit:
            raise BudgetExhausted(f"token budget {self.limit} spent", fix="raise budget.tokens")

    def charge_model(self, tokens, cost_usd):
        self.spent += tokens
        self.dollars += cost_usd


def test_metered_model_stops_on_budget_and_logs_calls(tmp_path):
    scripted = ScriptedModel(["a" * 400, "b" * 400, "c"], price_usd_per_mtok={"input": 1.0, "output": 1.0})
    gate = Gate(tokens=150)
    metered = MeteredModel(scripted, gate, log_path=tmp_path / "llm.jsonl")
    metered.complete("coding", MESSAGES)
    assert gate.spent > 100
    metered.complete("coding", MESSAGES)
    with pytest.raises(BudgetExhausted, match="token budget"):
        metered.complete("coding", MESSAGES)
    lines = [json.loads(x) for x in (tmp_path / "llm.jsonl").read_text().splitlines()]
    assert [x["text"][:1] for x in lines] == ["a", "b"]
    assert lines[0]["prompt_hash"] == prompt_hash(MESSAGES)


def test_scripted_model_records_prompts_raises_scripted_errors_and_runs_out():
    scripted = ScriptedModel(["one", ModelError("scripted failure"), lambda msgs: msgs[-1]["content"].upper()])
    assert scripted.complete("planning", MESSAGES).text == "one"
    with pytest.raises(ModelError, match="scripted failure"):
        scripted.complete("coding", MESSAGES)
    assert scripted.complete("repair", MESSAGES).text == "MAKE IT FAST"
    assert scripted.agents() == ["planning", "coding", "repair"]
    with pytest.raises(ScriptExhausted):
        scripted.complete("coding", MESSAGES)


def test_replay_model_from_a_cache_folder_and_from_a_call_log(tmp_path):
    server = Server([(200, completion_json("recorded A"), None), (200, completion_json("recorded B"), None)])
    client, _ = make_client(tmp_path, server)
    log = tmp_path / "run" / "op" / "llm.jsonl"
    metered = MeteredModel(client, None, log_path=log)
    other = [{"role": "user", "content": "second prompt"}]
    metered.complete("coding", MESSAGES)
    metered.complete("repair", other)

    by_hash = ReplayModel(tmp_path / "llm")
    assert by_hash.complete("repair", other).text == "recorded B"
    assert by_hash.complete("coding", MESSAGES).text == "recorded A"
    with pytest.raises(ReplayError, match="no recorded reply"):
        by_hash.complete("coding", [{"role": "user", "content": "never asked"}])

    in_order = ReplayModel(tmp_path / "run", match="order")
    assert in_order.complete("x", [{"role": "user", "content": "anything"}]).text == "recorded A"
    assert in_order.complete("x", [{"role": "user", "content": "else"}]).text == "recorded B"
    with pytest.raises(ReplayError, match="beyond"):
        in_order.complete("x", MESSAGES)

    with pytest.raises(ReplayError, match="keeps no call order"):
        ReplayModel(tmp_path / "llm", match="order")


# --------------------------------------------------------------------------- faults (issues 15, 16)


def test_a_200_with_a_malformed_json_body_is_retried_like_a_5xx(tmp_path):
    # the openai package raises a bare json.JSONDecodeError for this body; it crashed `optimize`
    server = Server(
        [
            (200, b'{"id": "chatcmpl-1", "choices": [', None),
            (200, b"<html>502 from the proxy</html>", {"content-type": "text/html"}),
            (200, {"unexpected": True}, None),
            (200, completion_json("done"), None),
        ]
    )
    client, sleeps = make_client(tmp_path, server)
    reply = client.complete("coding", MESSAGES)
    assert reply.text == "done" and len(server.requests) == 4
    assert sleeps == [1.0, 2.0, 4.0]


def test_a_body_that_stays_malformed_is_a_model_error_and_never_cached(tmp_path):
    server = Server([(200, b"{not json", None)] * 3)
    client, sleeps = make_client(tmp_path, server, max_retries=2)
    with pytest.raises(EndpointError, match="malformed body 3 times") as info:
        client.complete("coding", MESSAGES)
    assert isinstance(info.value, ModelError) and URL in str(info.value)
    assert "Expecting" in info.value.detail  # the decoder's own message
    assert sleeps == [1.0, 2.0]
    assert list(tmp_path.rglob("*.json")) == []


def test_the_cache_key_names_the_endpoint(tmp_path):
    first, _ = make_client(tmp_path, Server([(200, completion_json("from server A"), None)]))
    assert first.complete("coding", MESSAGES).text == "from server A"
    # the same model name behind another endpoint: a miss, answered by that endpoint
    other = Server([(200, completion_json("from server B"), None)])
    transport = OpenAITransport("http://other.invalid/v1", "k", timeout_s=5.0, http_client=http_client(other))
    second = LlmClient(
        config(base_url="http://other.invalid/v1"),
        cache_dir=tmp_path / "llm",
        transport=transport,
        sleep=lambda _: None,
    )
    reply = second.complete("coding", MESSAGES)
    assert reply.text == "from server B" and not reply.cached and len(other.requests) == 1
    entry = json.loads((tmp_path / "llm" / f"{reply.key}.json").read_text())
    assert entry["endpoint"] == "http://other.invalid/v1"
    # a trailing slash is the same endpoint
    assert prompt_key("m1", MESSAGES, temperature=0.2, max_tokens=1, endpoint=URL + "/") == prompt_key(
        "m1", MESSAGES, temperature=0.2, max_tokens=1, endpoint=URL
    )


def test_a_reply_an_agent_discards_is_asked_again(tmp_path):
    from optimize.agents import coding
    from optimize.agents.planning import Plan

    regions = {"k": "__global__ void k(float* x) {\n  x[0] = 1.0f;\n}\n"}
    fixed = "```cuda region=k\n__global__ void k(float* x) {\n  x[0] = 2.0f;\n}\n```"
    server = Server([(200, completion_json("garbage, no code"), None), (200, completion_json(fixed), None)])
    client, _ = make_client(tmp_path, server)
    metered = MeteredModel(client)
    plan = Plan(skill="s", params={}, text="t", reason="r", source="llm", option=1)
    args = dict(op_id="demo", profile_text="p", trajectory_text="t", model=metered)
    assert coding.code(plan, None, regions, **args).status == "malformed_reply"
    assert list((tmp_path / "llm").glob("*.json")) == []  # the garbage is not kept
    result = coding.code(plan, None, regions, **args)  # a fixed server (or a new run) is asked again
    assert result.status == "edited" and "2.0f" in result.regions["k"] and len(server.requests) == 2
    assert len(list((tmp_path / "llm").glob("*.json"))) == 1  # a usable reply is kept


def test_fresh_samples_ask_again_and_replace_the_entry(tmp_path):
    first, _ = make_client(tmp_path, Server([(200, completion_json("old sample"), None)]))
    old = first.complete("coding", MESSAGES)
    server = Server([(200, completion_json("new sample"), None)])
    fresh, _ = make_client(tmp_path, server, fresh_samples=True)
    new = fresh.complete("coding", MESSAGES)
    assert new.text == "new sample" and not new.cached and len(server.requests) == 1
    assert new.key == old.key and ReplyCache(tmp_path / "llm").get(old.key).text == "new sample"
    again, _ = make_client(tmp_path, Server([]))  # the default reads the cache again
    assert again.complete("coding", MESSAGES).text == "new sample"


@pytest.mark.parametrize(
    ("base_url", "timeout_s", "max_tokens"),
    [
        ("http://127.0.0.1:8080/v1", 900.0, 2048),
        ("http://localhost:30000/v1", 900.0, 2048),
        ("http://[::1]:8080/v1", 900.0, 2048),
        ("https://api.openai.com/v1", 120.0, 8192),
        (None, 120.0, 8192),
    ],
)
def test_timeout_and_reply_length_follow_the_endpoint(base_url, timeout_s, max_tokens):
    cfg = config(base_url=base_url)
    assert (cfg.local, cfg.effective_timeout_s, cfg.effective_max_tokens) == (
        timeout_s == 900.0,
        timeout_s,
        max_tokens,
    )
    calls = []

    def transport(**kwargs):
        calls.append(kwargs)
        return Completion("ok", 1, 1)

    LlmClient(cfg, transport=transport).complete("coding", MESSAGES)
    assert (calls[0]["timeout_s"], calls[0]["max_tokens"]) == (timeout_s, max_tokens)


def test_a_local_endpoint_s_defaults_reach_the_openai_client_and_settings_still_win():
    local = LlmClient(config(base_url="http://127.0.0.1:8080/v1"), environ={"OPENAI_API_KEY": "k"})
    assert local.transport.client.timeout == 900.0
    chosen = config(base_url="http://127.0.0.1:8080/v1", timeout_s=30, max_tokens=512)
    assert (chosen.effective_timeout_s, chosen.effective_max_tokens) == (30.0, 512)
    assert LlmClient(chosen, environ={"OPENAI_API_KEY": "k"}).transport.client.timeout == 30.0
    with pytest.raises(ValueError):
        config(timeout_s=0)


def test_a_refused_connection_says_so_at_once_and_is_not_retried(tmp_path):
    """Nothing listens on the port (a real socket on 127.0.0.1, no server): one attempt, no backoff,
    and the error says "refused the connection" with the fix, not "raise llm.timeout_s"."""
    import socket

    with socket.socket() as probe:  # a port that was free a moment ago and has no listener now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    sleeps: list[float] = []
    transport = OpenAITransport(url, "test-key", timeout_s=5.0)
    client = LlmClient(config(base_url=url, cache=False), transport=transport, sleep=sleeps.append)
    with pytest.raises(ModelError) as err:
        client.complete("coding", MESSAGES)
    assert "refused the connection" in err.value.message and str(port) in err.value.message
    assert "start the server" in (err.value.fix or "") and "timeout_s" not in (err.value.fix or "")
    assert sleeps == [], "a refused connection is not retried"
