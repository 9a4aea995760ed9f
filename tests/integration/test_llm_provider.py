"""The gateway's provider client against the local wire-format server: retries with backoff
for 429 and 5xx inside the deadline, typed failures, and the key in the provider's own header.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from actors.llm import ProviderSettings
from actors.llm._provider import ProviderClient, ProviderFailure
from schemas import ErrorCode
from tests.support.llm_server import (
    Canned,
    WireServer,
    anthropic_message,
    openai_completion,
    openai_error,
)

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
async def server() -> AsyncIterator[WireServer]:
    wire = WireServer()
    await wire.start()
    yield wire
    await wire.close()


def _client(server: WireServer, *, retries: int = 2, backoff_s: float = 0.05) -> ProviderClient:
    settings = ProviderSettings(api="openai", base_url=f"{server.url}/v1", api_key="k-1")
    return ProviderClient("local", settings, retries, backoff_s)


async def test_a_429_and_a_503_are_tried_again_then_answered(server: WireServer) -> None:
    server.queue(
        openai_error(429, "slow down", "rate_limit_exceeded"),
        openai_error(503, "overloaded", "server_error"),
        openai_completion("fine"),
    )
    client = _client(server)
    try:
        body = await client.complete(BODY, time.monotonic() + 10)
    finally:
        await client.close()
    assert body["choices"][0]["message"]["content"] == "fine"
    assert len(server.requests) == 3
    assert {r.headers["authorization"] for r in server.requests} == {"Bearer k-1"}
    assert {r.path for r in server.requests} == {"/v1/chat/completions"}


async def test_retries_stop_at_their_count_with_the_last_failure_typed(server: WireServer) -> None:
    server.queue(*(openai_error(500, "boom", "server_error") for _ in range(3)))
    client = _client(server, retries=2)
    try:
        with pytest.raises(ProviderFailure) as failed:
            await client.complete(BODY, time.monotonic() + 10)
    finally:
        await client.close()
    assert (failed.value.code, failed.value.retryable) == (ErrorCode.AGENT_UNAVAILABLE, True)
    assert "HTTP 500: server_error: boom" in str(failed.value)
    assert len(server.requests) == 3


async def test_a_rate_limit_past_the_deadline_is_not_waited_out(server: WireServer) -> None:
    server.queue(openai_error(429, "slow down", "rate_limit_exceeded"), openai_completion("late"))
    client = _client(server, backoff_s=30)
    try:
        with pytest.raises(ProviderFailure) as failed:
            await client.complete(BODY, time.monotonic() + 2)
    finally:
        await client.close()
    assert failed.value.code == ErrorCode.RATE_LIMITED
    assert len(server.requests) == 1


async def test_a_refused_request_is_never_tried_again(server: WireServer) -> None:
    server.queue(openai_error(400, "bad model", "invalid_request_error"), openai_completion("x"))
    client = _client(server)
    try:
        with pytest.raises(ProviderFailure) as failed:
            await client.complete(BODY, time.monotonic() + 10)
    finally:
        await client.close()
    assert (failed.value.code, failed.value.retryable) == (ErrorCode.INVALID_REQUEST, False)
    assert len(server.requests) == 1


async def test_a_provider_that_never_answers_is_cut_at_the_deadline(server: WireServer) -> None:
    server.queue(Canned(hang=True))
    client = _client(server)
    started = time.monotonic()
    try:
        with pytest.raises(ProviderFailure) as failed:
            await client.complete(BODY, started + 0.5)
    finally:
        await client.close()
    assert failed.value.code == ErrorCode.DEADLINE_EXCEEDED
    assert time.monotonic() - started < 5


async def test_anthropic_gets_its_key_and_version_in_its_own_headers(server: WireServer) -> None:
    server.queue(anthropic_message("hello"))
    settings = ProviderSettings(api="anthropic", base_url=server.url, api_key="ak-2")
    client = ProviderClient("claude", settings, 0, 0.05)
    try:
        body = await client.complete({**BODY, "max_tokens": 10}, time.monotonic() + 10)
    finally:
        await client.close()
    assert body["content"][0]["text"] == "hello"
    (request,) = server.requests
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == "ak-2" and "authorization" not in request.headers
    assert request.headers["anthropic-version"] == "2023-06-01"


async def test_a_stream_event_of_an_odd_shape_fails_the_call_typed(server: WireServer) -> None:
    """A provider's stream is untrusted input: an event whose delta is not an object ends the
    call with a typed failure. Raised as an AttributeError, it left the gateway's handler
    before the answer was kept, and the redelivered request called the provider again."""
    odd = b'data: {"id": "c", "choices": [{"index": 0, "delta": "not an object"}]}\n\n'
    server.queue(*(Canned(content_type="text/event-stream", events=(odd,)) for _ in range(3)))
    pieces: list[str] = []

    async def on_text(piece: str) -> None:
        pieces.append(piece)

    client = _client(server, retries=0)
    try:
        with pytest.raises(ProviderFailure) as failed:
            await client.complete({**BODY, "stream": True}, time.monotonic() + 10, on_text)
    finally:
        await client.close()
    assert failed.value.code == ErrorCode.AGENT_UNAVAILABLE
    assert "could not read" in str(failed.value) and not pieces
    assert len(server.requests) == 1


async def test_a_provider_that_echoes_the_key_in_its_error_tells_no_key(server: WireServer) -> None:
    """An attack review's provider echoed the request's Authorization header in a 401: the
    failure, which reaches the agent and its person, carried the key whole. Its own key is
    cut whatever its shape, and any text shaped like a secret is redacted."""
    key = "sk-proj-" + "Zq81Lm" * 8
    settings = ProviderSettings(api="openai", base_url=f"{server.url}/v1", api_key=key)
    server.queue(openai_error(401, f"bad header: Bearer {key}", "invalid_api_key"))
    client = ProviderClient("p", settings, retries=0, backoff_s=0.05)
    odd_key = "abcd1234efgh5678!tailSECRET99"  # a pattern would take its head, and leave the tail
    odd = ProviderSettings(api="openai", base_url=f"{server.url}/v1", api_key=odd_key)
    server.queue(openai_error(401, f"bad header: Bearer {odd_key}", "invalid_api_key"))
    odd_client = ProviderClient("p", odd, retries=0, backoff_s=0.05)
    try:
        with pytest.raises(ProviderFailure) as failed:
            await client.complete(BODY, time.monotonic() + 10)
        with pytest.raises(ProviderFailure) as odd_failed:
            await odd_client.complete(BODY, time.monotonic() + 10)
    finally:
        await client.close()
        await odd_client.close()
    assert "answered HTTP 401" in failed.value.message
    assert key not in failed.value.message, failed.value.message
    assert "tailSECRET99" not in odd_failed.value.message, odd_failed.value.message
