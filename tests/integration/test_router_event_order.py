"""A session's events are stored in the order of its transitions, even when some were refused.

The router stores a session's state before it sends the transition's effects. Here the
opening's call goes out but its events are refused (no stream listens on the timeline for a
while, as while the events stream elects a leader), so the opening is retried, 30 s later.
Meanwhile the agent answers and the session ends. The answer's handling sends the opening's
events first, under their ids, so a person following the timeline to its end reads it whole
and in order; before, the end was stored first and the opening only at the retry. And when
the answer's events are refused too, the opening's retry comes first and sends its own events
only, not the answer's: those come with the answer's own retry, after.
"""

from __future__ import annotations

import dataclasses

import pytest
from nats.aio.client import Client as NATS

from bus import EmbeddedServer
from schemas import AgentCall, Namespace, Reply
from tests.support.processes import READY, parley_env, start_actor
from tests.support.router_wire import AgentTurn, RouterWire, Timeline, collaborate


async def _refused_then_answered(
    nc: NATS, server: EmbeddedServer, ns: Namespace, *, answer_while_refused: bool
) -> list[str]:
    """The event types of a session whose opening's events were refused, in stored order."""
    js = nc.jetstream()
    events = await js.stream_info(ns.stream("events"))
    subjects = list(events.config.subjects or ())
    timeline_only = [s for s in subjects if ".events." in s or ".standing." in s]
    assert timeline_only, subjects
    refusing = dataclasses.replace(
        events.config, subjects=[s for s in subjects if s not in timeline_only]
    )
    wire = RouterWire(js, ns)
    await wire.open()
    backoff = "[3]" if answer_while_refused else "[30]"
    router = start_actor("router", "router", parley_env(server.url, ns.root, backoff_s=backoff))
    try:
        await router.wait_line(READY)
        await js.update_stream(refusing)
        msg = collaborate("plan a hike", max_rounds=2)
        await wire.start(msg)
        trace, call = await wire.submitted()  # the call went out
        assert isinstance(call, AgentCall)
        await router.wait_line(r'"msg":"handler failed".*"seq":1\b')  # its events did not
        if not answer_while_refused:
            await js.update_stream(dataclasses.replace(events.config, subjects=subjects))
        await wire.answer(call, trace, AgentTurn(reply=Reply(message="done", final=True)))
        if answer_while_refused:
            await router.wait_line(r'"msg":"handler failed".*"seq":2\b')
            await js.update_stream(dataclasses.replace(events.config, subjects=subjects))
        assert msg.session_id is not None
        timeline = Timeline(js, ns, msg.session_id)
        await timeline.open()
        await timeline.until_end()
        await timeline.close()
        return [event.event_type for event in timeline.events]
    finally:
        router.close()


@pytest.mark.parametrize("answer_while_refused", [False, True])
async def test_events_refused_for_a_while_are_stored_in_the_order_of_their_transitions(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, answer_while_refused: bool
) -> None:
    told = await _refused_then_answered(
        nc, nats_server, namespace, answer_while_refused=answer_while_refused
    )
    assert told[0] == "session_created", told
    assert told.index("step_started") < told.index("step_completed"), told
    assert told[-1] == "session_completed", told
