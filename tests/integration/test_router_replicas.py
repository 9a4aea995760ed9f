"""Two router replicas share the work: each session is advanced by one replica at a time.

Both replicas read the same durable consumer and write the same sessions with compare-and-set.
Ten sessions run at once while one replica is SIGKILLed half-way; the survivor takes over its
unacked inputs and every session ends with four turns, each round exactly once.
"""

from __future__ import annotations

import pytest
from nats.aio.client import Client as NATS

from bus import EmbeddedServer
from schemas import AgentCall, Namespace, Reply
from tests.support.processes import READY, parley_env, start_actor
from tests.support.router_wire import (
    AgentTurn,
    RouterWire,
    Timeline,
    collaborate,
    handoff,
    stored_session,
)

SESSIONS = 10
ROUNDS = 4


def turn(call: AgentCall) -> AgentTurn:
    message = f"{call.goal} · {call.target} r{call.round}"
    if call.round == ROUNDS:
        return AgentTurn(reply=Reply(message=message, final=True))
    return handoff(message, "gpt" if call.target == "claude" else "claude", "go on")


@pytest.mark.chaos
async def test_two_replicas_and_one_killed_midway_finish_every_session_exactly(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    js = nc.jetstream()
    wire = RouterWire(js, namespace)
    await wire.open()
    env = parley_env(nats_server.url, namespace.root, ack_wait_s="1")
    replicas = [start_actor("router", "router", env) for _ in range(2)]
    try:
        for replica in replicas:
            await replica.wait_line(READY)
        messages = [collaborate(f"task-{n}", max_rounds=ROUNDS) for n in range(SESSIONS)]
        timelines = [Timeline(js, namespace, m.session_id or "") for m in messages]
        for timeline in timelines:
            await timeline.open()
        for msg in messages:
            await wire.start(msg)
        answered = 0
        while answered < SESSIONS * ROUNDS:
            trace, call = await wire.submitted(timeout=30)
            if not isinstance(call, AgentCall) or call.id in wire.seen_calls:
                continue
            wire.seen_calls.add(call.id)
            await wire.answer(call, trace, turn(call))
            answered += 1
            if answered == SESSIONS * ROUNDS // 2:
                replicas[0].kill()
        for msg, timeline in zip(messages, timelines, strict=True):
            end = await timeline.until_end()
            assert end.stop_reason == "final"
            rounds = [e.round for e in timeline.events if e.event_type == "step_completed"]
            assert rounds == list(range(1, ROUNDS + 1))
            session = await stored_session(js, namespace, msg.session_id or "")
            said = [i.text for i in session.transcript if i.role in ("gpt", "claude")]
            assert said == [
                f"{msg.text} · {speaker} r{r}"
                for r, speaker in zip(range(1, ROUNDS + 1), ("claude", "gpt") * 2, strict=True)
            ]
            await timeline.close()
        assert len(wire.seen_calls) == SESSIONS * ROUNDS, "no call issued twice under two ids"
    finally:
        for replica in replicas:
            replica.close()
