"""Agent hosts with HTTP brains, as real processes, against the local wire-format server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS

from bus import EmbeddedServer
from schemas import AgentResponse, Error, ErrorCode, Namespace
from tests.support.agents import Submitted, agent_call, send, start_agent, write_profile
from tests.support.llm_server import (
    WireServer,
    anthropic_error,
    anthropic_message,
    openai_completion,
)
from tests.support.processes import READY, parley_env

PROSE = "Happy to help! In prose: the trail looks great."
GOOD = json.dumps({"message": "Refined plan.", "handoff": {"to": "claude", "task": "Finish it."}})


@pytest.fixture
async def server() -> AsyncIterator[WireServer]:
    wire = WireServer()
    await wire.start()
    yield wire
    await wire.close()


async def test_openai_and_anthropic_hosts_answer_and_flag_malformed_output(
    nc: NATS,
    nats_server: EmbeddedServer,
    namespace: Namespace,
    server: WireServer,
    tmp_path: Path,
) -> None:
    js = nc.jetstream()
    env = parley_env(nats_server.url, namespace.root, ack_wait_s="2", fetch_timeout_s="1")
    env["TEST_LLM_KEY"] = "sk-from-env"
    gpt = write_profile(
        tmp_path,
        "gpt",
        f'backend = "openai"\nbase_url = "{server.url}/v1"\napi_key_env = "TEST_LLM_KEY"',
        extra='model = "gpt-test"\npeers = ["claude"]',
    )
    claude = write_profile(
        tmp_path,
        "claude",
        f'backend = "anthropic"\nbase_url = "{server.url}"\napi_key_env = "TEST_LLM_KEY"',
        extra='model = "claude-test"\npeers = ["gpt"]',
    )
    outs = {name: await Submitted(js, namespace, name).open() for name in ("gpt", "claude")}
    hosts = [start_agent(str(gpt), env), start_agent(str(claude), env)]
    try:
        for host in hosts:
            await host.wait_line(READY)

        server.queue(openai_completion(PROSE, prompt_tokens=21, completion_tokens=9))
        await send(js, namespace, "gpt", agent_call("gpt", "Plan a hike"))
        _, answer = await outs["gpt"].next()
        assert isinstance(answer, AgentResponse) and answer.malformed
        assert answer.reply.message == PROSE and not answer.reply.handoff
        assert (answer.token_usage.prompt, answer.token_usage.total) == (21, 30)
        await hosts[0].wait_line(r'"level":"warning".*malformed reply')
        assert server.requests[-1].headers["authorization"] == "Bearer sk-from-env"

        server.queue(openai_completion(GOOD))
        await send(js, namespace, "gpt", agent_call("gpt", "Plan a hike", round=2))
        _, answer = await outs["gpt"].next()
        assert isinstance(answer, AgentResponse) and not answer.malformed
        assert answer.reply.handoff and answer.reply.handoff.to == "claude"

        # Anthropic: prose, then prose again after the one repair: a plain malformed message.
        server.queue(anthropic_message(PROSE, 10, 4), anthropic_message(PROSE, 12, 4))
        await send(js, namespace, "claude", agent_call("claude", "Plan a hike"))
        _, answer = await outs["claude"].next()
        assert isinstance(answer, AgentResponse) and answer.malformed
        assert (answer.token_usage.prompt, answer.token_usage.completion) == (22, 8)
        assert server.requests[-1].headers["x-api-key"] == "sk-from-env"

        server.queue(anthropic_error(529, "overloaded_error", "Overloaded"))
        failing = agent_call("claude", "Plan a hike", round=3)
        await send(js, namespace, "claude", failing)
        _, error = await outs["claude"].next()
        assert isinstance(error, Error) and error.cause_id == failing.id
        assert error.code == ErrorCode.AGENT_UNAVAILABLE and error.retryable
        assert "HTTP 529" in error.message
    finally:
        for host in hosts:
            host.close()
