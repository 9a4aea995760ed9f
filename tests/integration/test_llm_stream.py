"""Streamed model calls through the LLM gateway: the provider's server-sent events read as they
come, their text sent on core NATS to the agent that asked (`Namespace.chunks`), and one
durable `llm_response` with the whole answer.

One gateway (a real process) and one local provider server (tests/support/llm_server.py,
speaking OpenAI's and Anthropic's streaming formats) serve the whole module; the test plays
the gate, delivering each `llm_request` as the gate would, under the sender's name, and reads
the gateway's answers from its submit subject. The last test SIGKILLs the gateway mid-stream.
"""

from __future__ import annotations

import json
import signal
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
import nats
import pytest
from nats.aio.client import Client as NATS
from nats.aio.subscription import Subscription

from bus import MSG_ID, OWNER, SENDER, SESSION, EmbeddedServer, provision
from schemas import (
    LlmChunk,
    LlmPolicy,
    LlmRequest,
    LlmResponse,
    Namespace,
    encode,
    new_id,
    utc_now,
)
from tests.support.agents import Submitted
from tests.support.gate import Signer, make_bundle, publish_bundle
from tests.support.llm_server import WireServer
from tests.support.llm_stream import anthropic_stream, openai_stream, pieces_of
from tests.support.processes import READY, ProcessOutput, parley_env, start_actor

SECRET = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
TIMEOUT_S = 3.0
"""The gateway's own deadline for one call: what cuts a stream that stalls."""


@dataclass
class Streaming:
    nc: NATS
    ns: Namespace
    server: WireServer
    submitted: Submitted
    env: dict[str, str]
    processes: list[ProcessOutput]

    @property
    def gateway(self) -> ProcessOutput:
        return self.processes[-1]

    async def restart_gateway(self) -> None:
        """Start the gateway again (after it was killed), with the same settings."""
        self.processes.append(start_actor("llm", "llm", self.env))
        await self.gateway.wait_line(READY)

    async def ask(
        self,
        sender: str,
        api: Literal["openai", "anthropic"] = "openai",
        told: dict[str, str] | None = None,
    ) -> tuple[LlmRequest, Subscription]:
        """Deliver a streamed call from `sender` as the gate would (`told`: the gate's other
        headers); the chunk subscription."""
        chunks = await self.nc.subscribe(self.ns.chunks(sender))
        await self.nc.flush()
        rid = new_id()
        request = LlmRequest(
            id=rid,
            created_at=utc_now(),
            request_id=rid,
            session_id="s-1",
            task_id="t-1",
            step_id=rid,
            model="claude-x" if api == "anthropic" else "model-x",
            api=api,
            messages=({"role": "user", "content": "write it"},),
            stream=True,
        )
        await self.nc.jetstream().publish(
            self.ns.deliver("llm"),
            encode(request),
            headers={SENDER: sender, MSG_ID: rid, **(told or {})},
        )
        return request, chunks

    async def answer(self) -> LlmResponse:
        _, answer = await self.submitted.next(timeout=30)
        assert isinstance(answer, LlmResponse), answer
        return answer


async def chunks_until_done(subscription: Subscription) -> list[LlmChunk]:
    found: list[LlmChunk] = []
    while not (found and found[-1].done):
        msg = await subscription.next_msg(timeout=30)
        found.append(msgspec.json.decode(msg.data, type=LlmChunk))
    return found


@pytest.fixture(scope="module")
async def streaming(
    nats_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Streaming]:
    ns = Namespace(f"t{uuid.uuid4().hex[:12]}")
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    await provision(js, ns)
    server = WireServer()
    await server.start()
    signer = Signer.create(tmp_path_factory.mktemp("stream-keys"))
    bundle = msgspec.structs.replace(
        make_bundle(1, planner={"allowed_targets": ("llm",)}, llm={}),
        llm_policy=LlmPolicy(allowed_models=("model-x", "claude-x")),
    )
    await publish_bundle(js, ns, signer.sign(bundle))
    options: dict[str, Any] = {
        "policy_keys": [str(signer.pub_path)],
        "tenant": "test",
        "providers": {
            "local": {"api": "openai", "base_url": f"{server.url}/v1"},
            "anth": {"api": "anthropic", "base_url": server.url},
        },
        "models": {"model-x": "local", "claude-x": "anth"},
        "timeout_s": TIMEOUT_S,
    }
    env = parley_env(nats_server.url, ns.root, ack_wait_s="2", options=json.dumps(options))
    gateway = start_actor("llm", "llm", env)
    submitted = await Submitted(js, ns, "llm").open()
    system = Streaming(nc, ns, server, submitted, env, [gateway])
    try:
        await gateway.wait_line(READY)
        yield system
    finally:
        for process in system.processes:
            process.close()
        await server.close()
        await nc.close()


async def test_an_openai_stream_reaches_the_caller_chunk_by_chunk_and_answers_whole(
    streaming: Streaming,
) -> None:
    words = ["The ", "parser ", "is ", "written ", "and ", "tested."]
    streaming.server.queue(openai_stream(words, prompt_tokens=21, completion_tokens=6))
    request, subscription = await streaming.ask("planner")
    chunks = await chunks_until_done(subscription)
    answer = await streaming.answer()
    assert answer.request_id == request.request_id and answer.status == "succeeded", answer
    assert answer.text == "".join(words)
    assert "".join(c.text for c in chunks) == answer.text
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert len([c for c in chunks if c.text]) >= 4  # word by word, not all at once
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (21, 6)
    assert answer.body["choices"][0]["message"]["content"] == answer.text
    asked = streaming.server.requests[-1].body
    assert asked["stream"] is True and asked["stream_options"] == {"include_usage": True}


async def test_an_anthropic_stream_reaches_the_caller_and_answers_whole(
    streaming: Streaming,
) -> None:
    words = ["Claude ", "wrote ", "this ", "answer."]
    streaming.server.queue(anthropic_stream(words, input_tokens=30, output_tokens=4))
    request, subscription = await streaming.ask("planner", api="anthropic")
    chunks = await chunks_until_done(subscription)
    answer = await streaming.answer()
    assert answer.request_id == request.request_id and answer.status == "succeeded", answer
    assert "".join(c.text for c in chunks) == answer.text == "".join(words)
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (30, 4)
    assert answer.finish_reason == "end_turn"
    assert streaming.server.requests[-1].path == "/v1/messages"


async def test_the_person_whose_session_it_is_sees_the_agents_message_as_it_is_written(
    streaming: Streaming,
) -> None:
    """The gate named the session's person on the delivery: the gateway sends them the
    reply's `message` as it is written, on their typing subject, and nothing else of the JSON."""
    message = 'Step one: "bread".\nStep two: go. Step three: eat.'
    reply = json.dumps({"message": message, "handoff": {"to": "claude"}, "final": False})
    typing = await streaming.nc.subscribe(streaming.ns.typing("ana", "s-9"))
    streaming.server.queue(openai_stream(pieces_of(reply, 12)))
    request, subscription = await streaming.ask("planner", told={OWNER: "ana", SESSION: "s-9"})
    shown = await chunks_until_done(typing)
    raw = await chunks_until_done(subscription)
    answer = await streaming.answer()
    assert "".join(c.text for c in raw) == answer.text == reply  # the agent's own: whole JSON
    assert "".join(c.text for c in shown) == message, shown
    assert len([c for c in shown if c.text]) >= 3  # piece by piece, not all at once
    assert {(c.agent, c.request_id) for c in shown} == {("planner", request.request_id)}
    assert [c.index for c in shown] == list(range(len(shown)))


async def test_a_secret_written_over_several_chunks_never_leaves_the_gateway(
    streaming: Streaming,
) -> None:
    pieces = ["Your ", "token ", "is ", SECRET[:10], SECRET[10:25], SECRET[25:], " keep ", "it."]
    streaming.server.queue(openai_stream(pieces))
    _, subscription = await streaming.ask("planner")
    chunks = await chunks_until_done(subscription)
    answer = await streaming.answer()
    sent = "".join(c.text for c in chunks)
    assert SECRET[:10] not in sent and SECRET[10:25] not in sent, sent
    assert sent == answer.text and "[REDACTED:" in sent
    assert any(g.rule_id == "redact_secrets" for g in answer.guardrails)


async def test_a_secret_written_after_50_kb_never_leaves_the_gateway(streaming: Streaming) -> None:
    """Past 4 KB the gateway guards the text only as it grows (actors/llm/_chunks.py): a
    secret written over several pieces after 50 KB still goes out redacted, or not at all."""
    head = "".join(f"line {i} of the report. " for i in range(2200))[:50_000]
    pieces = [head[i : i + 16] for i in range(0, len(head), 16)]
    pieces += [" token ", SECRET[:7], SECRET[7:19], SECRET[19:], " keep ", "it."]
    streaming.server.queue(openai_stream(pieces))
    _, subscription = await streaming.ask("planner")
    chunks = await chunks_until_done(subscription)
    answer = await streaming.answer()
    sent = "".join(c.text for c in chunks)
    assert "ghp_" not in sent, sent[-120:]
    assert sent == answer.text and answer.text.startswith(head) and "[REDACTED:" in sent
    assert len([c for c in chunks if c.text]) >= 20  # shown as it was written, not at the end


async def test_a_slow_long_answer_is_still_shown_as_it_is_written(streaming: Streaming) -> None:
    """20 KB at once, then a word every 50 ms: the text grows by far less than the sixteenth
    that spaces the guards, yet its words go out before the answer ends (a quarter second
    after the last guard)."""
    tail = [f"slow{i} " for i in range(30)]
    streaming.server.queue(openai_stream(["fast " * 4000, *tail], gap_s=0.05))
    _, subscription = await streaming.ask("planner")
    chunks = await chunks_until_done(subscription)
    answer = await streaming.answer()
    assert "".join(c.text for c in chunks) == answer.text
    before_the_end = "".join(c.text for c in chunks[:-1] if not c.done)
    assert "slow1 " in before_the_end, before_the_end[-80:]


async def test_a_stream_that_stalls_is_cut_at_the_deadline_after_its_first_chunks(
    streaming: Streaming,
) -> None:
    streaming.server.queue(openai_stream(["Half ", "an ", "answer ", "then"], stall_after=3))
    _, subscription = await streaming.ask("planner")
    first = msgspec.json.decode((await subscription.next_msg(timeout=30)).data, type=LlmChunk)
    assert first.text == "Half " and not first.done  # sent while the provider still writes
    answer = await streaming.answer()
    assert answer.status == "failed" and answer.error is not None, answer
    assert answer.error.code == "DEADLINE_EXCEEDED" and "cut" in answer.error.message
    assert TIMEOUT_S * 1000 <= answer.latency_ms < TIMEOUT_S * 1000 + 2000
    rest = await chunks_until_done(subscription)
    assert rest[-1].done and not rest[-1].text


async def test_the_gateway_killed_mid_stream_answers_the_call_once(streaming: Streaming) -> None:
    """SIGKILLed after the first chunk, nothing stored: the redelivered request streams again
    from a new gateway process, and exactly one llm_response is published."""
    streaming.server.queue(
        openai_stream(["First ", "try ", "never ", "ends"], stall_after=3),
        openai_stream(["Second ", "try ", "ends."]),
    )
    asked_before = len(streaming.server.requests)
    request, subscription = await streaming.ask("planner")
    first = msgspec.json.decode((await subscription.next_msg(timeout=30)).data, type=LlmChunk)
    assert first.text == "First "
    assert streaming.gateway.kill() == -signal.SIGKILL
    await streaming.restart_gateway()
    answer = await streaming.answer()
    assert answer.request_id == request.request_id and answer.status == "succeeded", answer
    assert answer.text == "Second try ends."
    assert len(streaming.server.requests) == asked_before + 2
    assert await streaming.submitted.none_left(timeout=3.0)  # never answered twice
    seen = [first, *await chunks_until_done(subscription)]
    second = max(i for i, chunk in enumerate(seen) if chunk.index == 0)
    assert second > 0  # the second try streamed again, from its own first chunk
    assert "".join(c.text for c in seen[second:]) == answer.text
