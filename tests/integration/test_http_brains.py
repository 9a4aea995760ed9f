"""The OpenAI-compatible and Anthropic brains against a local server speaking their wire formats."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from actors.agent._profile import AgentProfile, AnthropicBrainConfig, OpenAIBrainConfig
from actors.agent._prompt import SHARED_RULES, BrainCall
from actors.agent._reply import interpret_reply
from actors.agent.brains._anthropic import AnthropicBrain
from actors.agent.brains._openai import OpenAIBrain
from actors.agent.brains._protocol import BrainError
from schemas import ErrorCode, TranscriptItem
from tests.support.llm_server import (
    Canned,
    WireServer,
    anthropic_error,
    anthropic_message,
    openai_completion,
    openai_error,
)

GOOD = json.dumps({"message": "Draft one.", "handoff": {"to": "gpt", "task": "Edit it."}})
PROSE = "Sure! Here is the plan in prose, no JSON."
CALL = BrainCall(
    kind="agent_call",
    envelope_id="e-1",
    call_id="c-1",
    session_id="s-1",
    goal="Plan a hike",
    transcript=(TranscriptItem(role="gpt", name="gpt", text="Step one: pick a trail."),),
    round=2,
    max_rounds=6,
)


@pytest.fixture
async def server() -> AsyncIterator[WireServer]:
    wire = WireServer()
    await wire.start()
    yield wire
    await wire.close()


def profile_for(brain: OpenAIBrainConfig | AnthropicBrainConfig) -> AgentProfile:
    return AgentProfile(
        name="claude", model="model-x", peers=("gpt",), brain=brain, max_output_tokens=321
    )


@pytest.fixture
async def openai(server: WireServer) -> AsyncIterator[OpenAIBrain]:
    config = OpenAIBrainConfig(
        backend="openai", base_url=f"{server.url}/v1", api_key="sk-test", timeout_s=0.5
    )
    brain = OpenAIBrain(profile_for(config), config)
    await brain.start()
    yield brain
    await brain.close()


@pytest.fixture
async def anthropic(server: WireServer) -> AsyncIterator[AnthropicBrain]:
    config = AnthropicBrainConfig(
        backend="anthropic", base_url=server.url, api_key="ak-test", timeout_s=0.5
    )
    brain = AnthropicBrain(profile_for(config), config)
    await brain.start()
    yield brain
    await brain.close()


async def test_openai_request_and_reply(openai: OpenAIBrain, server: WireServer) -> None:
    server.queue(openai_completion(GOOD, prompt_tokens=40, completion_tokens=9))
    answer = await openai.reply(CALL)
    assert answer.text == GOOD
    assert (answer.usage.prompt, answer.usage.completion, answer.usage.total) == (40, 9, 49)
    (request,) = server.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == "Bearer sk-test"
    body = request.body
    assert (body["model"], body["max_tokens"]) == ("model-x", 321)
    system, user = body["messages"]
    assert system["role"] == "system" and SHARED_RULES in system["content"]
    assert "Your name is `claude`." in system["content"]
    assert user["role"] == "user" and user["content"].startswith("Goal: Plan a hike")
    assert "[gpt] Step one: pick a trail." in user["content"]
    assert "Round 2 of 6." in user["content"]
    assert user["content"].endswith("Return JSON only per schema\u2014no extra text.")
    form = body["response_format"]
    assert form["type"] == "json_schema" and form["json_schema"]["name"] == "reply"
    schema = form["json_schema"]["schema"]
    assert schema["required"] == ["message"] and schema["additionalProperties"] is False
    assert schema["properties"]["handoff"]["properties"]["to"]["enum"] == ["gpt"]


async def test_openai_non_json_content_is_a_malformed_plain_message(
    openai: OpenAIBrain, server: WireServer
) -> None:
    server.queue(openai_completion(PROSE))
    answer = await openai.reply(CALL)
    interpreted = interpret_reply(answer.text, ("gpt",))
    assert interpreted.malformed and interpreted.reply.message == PROSE
    assert not interpreted.reply.handoff and not interpreted.reply.final


@pytest.mark.parametrize(
    ("canned", "code", "retryable", "words"),
    [
        (
            openai_error(429, "Rate limit reached", "requests", "rate_limit_exceeded"),
            ErrorCode.AGENT_UNAVAILABLE,
            True,
            "HTTP 429: requests: Rate limit reached",
        ),
        (
            openai_error(500, "The server had an error", "server_error"),
            ErrorCode.AGENT_UNAVAILABLE,
            True,
            "HTTP 500",
        ),
        (
            openai_error(
                401, "Incorrect API key provided", "invalid_request_error", "invalid_api_key"
            ),
            ErrorCode.INTERNAL_ERROR,
            False,
            "Incorrect API key",
        ),
        (
            Canned(status=502, body=b"<html>Bad Gateway</html>", content_type="text/html"),
            ErrorCode.AGENT_UNAVAILABLE,
            True,
            "HTTP 502",
        ),
        (
            Canned(status=200, body=b"<html>captive portal</html>", content_type="text/html"),
            ErrorCode.AGENT_UNAVAILABLE,
            True,
            "not a JSON object",
        ),
        (Canned(hang=True), ErrorCode.AGENT_UNAVAILABLE, True, "no answer within 0.5 s"),
    ],
    ids=["rate-limited", "server-error", "bad-key", "html-error", "html-ok", "timeout"],
)
async def test_openai_failures(
    openai: OpenAIBrain,
    server: WireServer,
    canned: Canned,
    code: ErrorCode,
    retryable: bool,
    words: str,
) -> None:
    server.queue(canned)
    with pytest.raises(BrainError) as caught:
        await openai.reply(CALL)
    assert (caught.value.code, caught.value.retryable) == (code, retryable)
    assert words in caught.value.message


async def test_anthropic_request_and_reply(anthropic: AnthropicBrain, server: WireServer) -> None:
    server.queue(anthropic_message(GOOD, input_tokens=50, output_tokens=8))
    answer = await anthropic.reply(CALL)
    assert answer.text == GOOD and (answer.usage.prompt, answer.usage.total) == (50, 58)
    (request,) = server.requests
    assert (request.method, request.path) == ("POST", "/v1/messages")
    assert request.headers["x-api-key"] == "ak-test"
    assert request.headers["anthropic-version"] == "2023-06-01"
    body = request.body
    assert (body["model"], body["max_tokens"]) == ("model-x", 321)
    assert SHARED_RULES in body["system"] and '"additionalProperties":false' in body["system"]
    (message,) = body["messages"]
    assert message["role"] == "user" and "Round 2 of 6." in message["content"]


async def test_anthropic_repairs_once(anthropic: AnthropicBrain, server: WireServer) -> None:
    server.queue(anthropic_message(PROSE, 20, 6), anthropic_message(GOOD, 30, 8))
    answer = await anthropic.reply(CALL)
    assert answer.text == GOOD and not interpret_reply(answer.text, ("gpt",)).malformed
    assert (answer.usage.prompt, answer.usage.completion) == (50, 14)
    first, repair = server.requests
    user, bad, ask = repair.body["messages"]
    assert user == first.body["messages"][0]
    assert bad == {"role": "assistant", "content": PROSE}
    assert ask["role"] == "user" and "does not match the schema" in ask["content"]


async def test_anthropic_still_malformed_after_the_repair(
    anthropic: AnthropicBrain, server: WireServer
) -> None:
    handoff_to_stranger = json.dumps({"message": "Go.", "handoff": {"to": "bard", "task": "Sing."}})
    server.queue(anthropic_message(PROSE), anthropic_message(handoff_to_stranger))
    answer = await anthropic.reply(CALL)
    interpreted = interpret_reply(answer.text, ("gpt",))
    assert interpreted.malformed and "not one of the peers" in interpreted.problem
    assert len(server.requests) == 2, "repaired once, not more"


@pytest.mark.parametrize(
    ("canned", "code", "retryable"),
    [
        (anthropic_error(529, "overloaded_error", "Overloaded"), ErrorCode.AGENT_UNAVAILABLE, True),
        (
            anthropic_error(400, "invalid_request_error", "max_tokens: too large"),
            ErrorCode.INTERNAL_ERROR,
            False,
        ),
        (Canned(hang=True), ErrorCode.AGENT_UNAVAILABLE, True),
    ],
    ids=["overloaded", "invalid-request", "timeout"],
)
async def test_anthropic_failures(
    anthropic: AnthropicBrain,
    server: WireServer,
    canned: Canned,
    code: ErrorCode,
    retryable: bool,
) -> None:
    server.queue(canned)
    with pytest.raises(BrainError) as caught:
        await anthropic.reply(CALL)
    assert (caught.value.code, caught.value.retryable) == (code, retryable)


@pytest.mark.parametrize("backend", ["openai", "anthropic"])
async def test_a_key_variable_the_host_lacks_is_said_at_start(
    backend: str,
    server: WireServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A profile copied from the shipped comments named `OPENAI_API_KEY`, which `parley up`
    gives its agent hosts no more: every request went without a key, and nothing said so."""
    monkeypatch.delenv("PARLEY_TEST_PROVIDER_KEY", raising=False)
    said = []
    for key_env, value in [
        ("PARLEY_TEST_PROVIDER_KEY", None),
        ("PARLEY_TEST_PROVIDER_KEY", "k"),
        ("", None),
    ]:
        if value is not None:
            monkeypatch.setenv("PARLEY_TEST_PROVIDER_KEY", value)
        caplog.clear()
        config: OpenAIBrainConfig | AnthropicBrainConfig
        if backend == "openai":
            config = OpenAIBrainConfig(backend="openai", base_url=server.url, api_key_env=key_env)
            brain: OpenAIBrain | AnthropicBrain = OpenAIBrain(profile_for(config), config)
        else:
            config = AnthropicBrainConfig(
                backend="anthropic", base_url=server.url, api_key_env=key_env
            )
            brain = AnthropicBrain(profile_for(config), config)
        await brain.start()
        await brain.close()
        said.append([r.getMessage() for r in caplog.records if r.levelname == "WARNING"])
    missing, present, none_named = said
    assert len(missing) == 1 and missing[0].startswith(
        "PARLEY_TEST_PROVIDER_KEY is not set in this agent host's environment"
    ), missing
    assert 'backend = "gateway"' in missing[0]
    assert present == [] and none_named == [], said
