"""A person past their share of the sessions bucket (actors/router/_session_charges.py), with a
real router process: their new sessions are refused `RATE_LIMITED` on their timeline, and an
opening that names one of their sessions already running is refused as a duplicate, as before
(an orchestrated opening is refused on the timeline too), never for the share: that refusal's
`session_failed` would stand the running session ended for every reader of how sessions stand
(a review found it did)."""

from __future__ import annotations

import asyncio
import json

import msgspec
from msgspec import structs
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from bus import EmbeddedServer
from schemas import (
    AgentCall,
    Control,
    Error,
    ErrorCode,
    HumanMessage,
    Namespace,
    Orchestration,
    Reply,
    new_id,
    utc_now,
)
from tests.support.processes import READY, parley_env, start_actor
from tests.support.router_wire import AgentTurn, RouterWire, Timeline, collaborate

_ONE_BYTE = json.dumps({"session_bytes_per_person": 1})


async def _first_word(
    nc: NATS, namespace: Namespace, wire: RouterWire, msg: HumanMessage
) -> object:
    """What the router first says on `msg`'s session's timeline: an event or a refusal."""
    assert msg.session_id is not None
    timeline = Timeline(nc.jetstream(), namespace, msg.session_id)
    await timeline.open()
    try:
        await wire.start(msg)
        return await timeline.next()
    finally:
        await timeline.close()


async def test_past_the_share_new_sessions_are_refused_and_a_running_one_is_left_running(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    wire = RouterWire(nc.jetstream(), namespace)
    await wire.open()
    env = parley_env(nats_server.url, namespace.root, quotas=_ONE_BYTE)
    router = start_actor("router", "router", env)
    try:
        await router.wait_line(READY)
        running = collaborate("a session whose first call is never answered")
        opened = await _first_word(nc, namespace, wire, running)
        assert not isinstance(opened, Error), opened

        # The first session's charge is made beside its opening: until the router has it, an
        # opening is let through (and charged too); once it has, each is refused.
        for _ in range(50):  # each an event wait; the charge lands within a few
            said = await _first_word(nc, namespace, wire, collaborate("one more"))
            if isinstance(said, Error):
                break
        assert isinstance(said, Error) and said.code == ErrorCode.RATE_LIMITED, said
        assert "session_bytes_per_person" in said.message and "person cli" in said.message

        assert running.session_id is not None
        timeline = Timeline(nc.jetstream(), namespace, running.session_id)
        await timeline.open()
        again = structs.replace(collaborate("its id again"), session_id=running.session_id)
        await wire.start(again)
        refused = await timeline.refusal()
        await timeline.close()
        assert refused.code == ErrorCode.INVALID_REQUEST and "already in use" in refused.message
        assert not [e for e in timeline.events if e.event_type == "session_failed"]

        # An orchestrated session is refused alike, on the timeline the person follows.
        orchestrated = HumanMessage(
            id=new_id(),
            created_at=utc_now(),
            text="draft the release note",
            call_id=new_id(),
            mode="orchestrate",
            session_id=new_id(),
            orchestration=Orchestration(local_agent="gpt", shared_agent="claude"),
        )
        said = await _first_word(nc, namespace, wire, orchestrated)
        assert isinstance(said, Error) and said.code == ErrorCode.RATE_LIMITED, said
    finally:
        router.close()


async def test_an_ended_session_written_again_keeps_the_expiry_its_end_set(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    """A second review: every input recorded after a session's end (a stranger's refused
    pause among them) wrote it again with a fresh retention, charged anew each time past a
    window, so anyone could keep someone's session, and their count, up for ever."""
    js = nc.jetstream()
    wire = RouterWire(js, namespace)
    await wire.open()
    retention = json.dumps({"ended_sessions_s": 3600})
    router = start_actor(
        "router", "router", parley_env(nats_server.url, namespace.root, retention=retention)
    )
    try:
        await router.wait_line(READY)
        msg = collaborate("one round")
        assert msg.session_id is not None
        writes: asyncio.Queue[Msg] = asyncio.Queue()
        key = f"$KV.{namespace.bucket('sessions')}.session.{msg.session_id}"
        await nc.subscribe(key, cb=writes.put)
        timeline = Timeline(js, namespace, msg.session_id)
        await timeline.open()
        await wire.start(msg)
        trace, call = await wire.submitted()
        assert isinstance(call, AgentCall)
        await wire.answer(call, trace, AgentTurn(reply=Reply(message="done", final=True)))
        assert (await timeline.until_end()).event_type == "session_completed"
        ending = await _last_write(writes)
        await wire.control(
            Control(id=new_id(), created_at=utc_now(), action="pause", session_id=msg.session_id)
        )
        await timeline.refusal()  # "the session ended": recorded, so the session is written
        await timeline.close()
        again = await _last_write(writes)
        ended_at = msgspec.json.decode(ending.data)["ended_at_ms"]
        assert ended_at > 0 and msgspec.json.decode(again.data)["ended_at_ms"] == ended_at
        assert int((again.headers or {})["Nats-TTL"]) <= int((ending.headers or {})["Nats-TTL"])
        assert int((ending.headers or {})["Nats-TTL"]) <= 3600
    finally:
        router.close()


async def _last_write(writes: asyncio.Queue[Msg]) -> Msg:
    """The newest write of the session seen so far (at least one more than before)."""
    write = await asyncio.wait_for(writes.get(), 20)
    while not writes.empty():
        write = writes.get_nowait()
    return write
