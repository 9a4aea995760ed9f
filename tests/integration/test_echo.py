"""The echo actor answers calls through its submit subject, and never answers answers."""

from __future__ import annotations

from nats.aio.client import Client as NATS

from bus import EmbeddedServer
from schemas import AgentCall, Namespace, encode, new_id, utc_now
from tests.support.processes import READY, parley_env, start_actor
from tests.support.wire import Effects, deliver


async def test_echo_answers_a_call_and_ignores_the_answer(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    js = nc.jetstream()
    answers = Effects(js, namespace, "echo")
    await answers.open()
    echo = start_actor("echo", "echo", parley_env(nats_server.url, namespace.root))
    try:
        await echo.wait_line(READY)
        call = AgentCall(
            id=new_id(),
            created_at=utc_now(),
            target="echo",
            call_id="c-1",
            session_id="s-1",
            goal="g",
            text="ping",
        )
        await deliver(js, namespace, "echo", encode(call), call.id)
        headers, answer = await answers.next()
        assert (answer.text, answer.call_id, answer.session_id) == ("ping", "c-1", "s-1")
        assert answer.reply.final and answer.sender == "echo" and answer.target == "router"
        assert headers["Parley-Causation-Id"] == call.id
        # Its own answer delivered back must not start a conversation with itself: echo
        # handles in order, so the next thing it submits answers the call sent after it.
        await deliver(js, namespace, "echo", encode(answer), answer.id)
        second = AgentCall(
            id=new_id(), created_at=utc_now(), target="echo", call_id="c-2", goal="g", text="two"
        )
        await deliver(js, namespace, "echo", encode(second), second.id)
        _, next_answer = await answers.next()
        assert next_answer.call_id == "c-2"
    finally:
        echo.close()
