"""A Stop that reaches the router before the session it names is opened still ends it.

A command that gives up waiting submits its Stop behind its opening message; a stalled gate
can hand the two over in either order. The router keeps a Stop for a session it does not have
yet and applies it when its opener opens the session: the session ends as canceled with the
Stop's reason before any agent answer moves it. A Stop kept from another principal is never
applied to someone else's session. The test plays the gate around a real router process.
"""

from __future__ import annotations

import asyncio

from msgspec import structs
from nats.aio.client import Client as NATS
from nats.js.kv import KeyValue

from bus import EmbeddedServer, TraceHeaders
from schemas import AgentCall, Control, Namespace
from tests.support.kv import stored_keys
from tests.support.processes import READY, parley_env, start_actor
from tests.support.router_wire import (
    RouterWire,
    Timeline,
    collaborate,
    handoff,
    stop,
    stored_session,
)

GAVE_UP = "the command gave up waiting for the router to open the session"


async def _kept(kv: KeyValue, session_id: str, sender: str = "*") -> None:
    """Wait until the router has kept a Stop for `session_id` (it handled the Stop), from
    `sender` when named."""
    watcher = await kv.watch(f"early-stop.{session_id}.{sender}")
    try:
        async with asyncio.timeout(20):
            async for entry in watcher:
                if entry is not None and entry.value:
                    return
    finally:
        await watcher.stop()  # type: ignore[no-untyped-call]  # nats-py leaves it untyped


async def test_a_stop_before_the_opening_ends_the_session_when_it_opens(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    js = nc.jetstream()
    kv = await js.key_value(namespace.bucket("early_stops"))
    wire = RouterWire(js, namespace)
    await wire.open()
    router = start_actor("router", "router", parley_env(nats_server.url, namespace.root))
    try:
        await router.wait_line(READY)
        msg = collaborate("plan a hike")
        assert msg.session_id is not None
        early: Control = structs.replace(stop(msg.session_id), reason=GAVE_UP)
        timeline = Timeline(js, namespace, msg.session_id)
        await timeline.open()
        await wire.control(early)
        await _kept(kv, msg.session_id)
        # Kept apart from the sessions, bounded and forgotten after a day: Stops naming
        # sessions that never open cannot fill the bucket every session is stored in.
        status = await kv.status()
        assert status.ttl == 24 * 3600 and (status.stream_info.config.max_bytes or 0) > 0
        assert await stored_keys(js, namespace.bucket("sessions"), "early-stop.>") == []
        await wire.start(msg)
        end = await timeline.until_end()
        assert (end.event_type, end.stop_reason) == ("session_canceled", "canceled")
        assert end.payload["reason"] == GAVE_UP
        assert timeline.refusals == []  # kept, not refused as naming no session
        # The first call may already be on its way; its answer moves nothing.
        trace, call = await wire.submitted()
        assert isinstance(call, AgentCall) and call.session_id == msg.session_id
        await wire.answer(call, trace, handoff("too late", "gpt", "go on"))
        late = structs.replace(stop(msg.session_id), action="pause")
        await wire.control(late)  # handled after the answer: marks when the router got there
        await timeline.refusal()
        session = await stored_session(js, namespace, msg.session_id)
        assert session.status == "canceled" and session.round == 1
        assert [e.event_type for e in timeline.events].count("step_completed") == 0
        assert all(item.role not in ("gpt", "claude") for item in session.transcript)
        await timeline.close()
    finally:
        router.close()


async def test_a_stop_kept_from_another_principal_never_stops_the_session(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    js = nc.jetstream()
    kv = await js.key_value(namespace.bucket("early_stops"))
    wire = RouterWire(js, namespace)
    await wire.open()
    router = start_actor("router", "router", parley_env(nats_server.url, namespace.root))
    try:
        await router.wait_line(READY)
        msg = collaborate("plan a hike")
        assert msg.session_id is not None
        foreign = stop(msg.session_id)
        await wire.deliver(foreign, "mallory", TraceHeaders(trace_id=foreign.id, origin="mallory"))
        await _kept(kv, msg.session_id)
        timeline = Timeline(js, namespace, msg.session_id)
        await timeline.open()
        await wire.start(msg)
        _, call = await wire.submitted()
        assert isinstance(call, AgentCall) and call.session_id == msg.session_id
        own = stop(msg.session_id)  # the opener's own Stop, after the opening, marks the end
        await wire.control(own)
        end = await timeline.until_end()
        assert end.envelope_ids == (own.id,), "only the opener's Stop ended it"
        assert timeline.refusals == []  # nobody else's refusal reaches the opener
        await timeline.close()
    finally:
        router.close()


async def test_a_strangers_stop_kept_first_does_not_take_the_place_of_the_openers(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    """Kept under one key per session, a Stop from someone who guessed the session id first
    made the opener's own early Stop a no-op (create-only), and the session ran unwatched.
    Kept per session and sender, the opener's own still ends it when it opens, and a
    megabyte reason is kept cut short (the bucket is shared)."""
    js = nc.jetstream()
    kv = await js.key_value(namespace.bucket("early_stops"))
    wire = RouterWire(js, namespace)
    await wire.open()
    router = start_actor("router", "router", parley_env(nats_server.url, namespace.root))
    try:
        await router.wait_line(READY)
        msg = collaborate("plan a hike")
        assert msg.session_id is not None
        foreign = structs.replace(stop(msg.session_id), reason="x" * 100_000)
        await wire.deliver(foreign, "mallory", TraceHeaders(trace_id=foreign.id, origin="mallory"))
        await _kept(kv, msg.session_id)
        early: Control = structs.replace(stop(msg.session_id), reason=GAVE_UP)
        timeline = Timeline(js, namespace, msg.session_id)
        await timeline.open()
        await wire.control(early)
        await _kept(kv, msg.session_id, "cli")  # kept beside the stranger's, before opening
        await wire.start(msg)
        end = await timeline.until_end()
        assert (end.event_type, end.stop_reason) == ("session_canceled", "canceled")
        assert end.payload["reason"] == GAVE_UP
        kept = await kv.get(f"early-stop.{msg.session_id}.mallory")
        assert kept.value is not None and len(kept.value) < 2_000
        await timeline.close()
    finally:
        router.close()
