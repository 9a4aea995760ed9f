"""A session's events are stored in the order of its transitions, even when some were refused.

The router stores a session's state before it sends the transition's effects. Here the
opening's call goes out but its events are refused (no stream listens on the timeline for a
while, as while the events stream elects a leader), so the opening is retried, 30 s later.
Meanwhile the agent answers and the session ends. The answer's handling sends the opening's
events first, under their ids, so a person following the timeline to its end reads it whole
and in order; before, the end was stored first and the opening only at the retry.
"""

from __future__ import annotations

import dataclasses

from nats.aio.client import Client as NATS

from bus import EmbeddedServer
from schemas import AgentCall, Namespace, Reply
from tests.support.processes import READY, parley_env, start_actor
from tests.support.router_wire import AgentTurn, RouterWire, Timeline, collaborate


async def test_events_refused_for_a_while_are_stored_before_the_next_inputs(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    js = nc.jetstream()
    events = await js.stream_info(namespace.stream("events"))
    subjects = list(events.config.subjects or ())
    wire = RouterWire(js, namespace)
    await wire.open()
    router = start_actor(
        "router", "router", parley_env(nats_server.url, namespace.root, backoff_s="[30]")
    )
    try:
        await router.wait_line(READY)
        timeline_only = [s for s in subjects if ".events." in s or ".standing." in s]
        assert timeline_only, subjects
        kept = [s for s in subjects if s not in timeline_only]
        await js.update_stream(dataclasses.replace(events.config, subjects=kept))
        msg = collaborate("plan a hike", max_rounds=2)
        await wire.start(msg)
        trace, call = await wire.submitted()  # the call went out
        assert isinstance(call, AgentCall)
        await router.wait_line(r'"msg":"handler failed"')  # its events did not
        await js.update_stream(dataclasses.replace(events.config, subjects=subjects))

        await wire.answer(call, trace, AgentTurn(reply=Reply(message="done", final=True)))
        assert msg.session_id is not None
        timeline = Timeline(js, namespace, msg.session_id)
        await timeline.open()
        await timeline.until_end()
        told = [event.event_type for event in timeline.events]
        assert told[0] == "session_created", told
        assert told.index("step_started") < told.index("step_completed"), told
        assert told[-1] == "session_completed", told
        await timeline.close()
    finally:
        router.close()
