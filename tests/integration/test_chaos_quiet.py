"""A chaos run's verdict is read once the actors hold no input in flight, and what it left
unfinished is told.

An actor that failed to store an input's effects (a stream electing its leader) holds the
input unacknowledged until its retry: work still in flight, which the run must wait for, or
its verdict would call acknowledged work lost. `wait_for_quiet` asks the server until no
actor's consumer holds a message pending or unacknowledged; a person's consumer (the load's
own, left unread once the load is done) does not count.
"""

from __future__ import annotations

import io
from datetime import UTC, datetime

from nats.aio.client import Client as NATS
from nats.js.api import AckPolicy, ConsumerConfig

from actors.gate import id_key
from bus import EmbeddedServer
from schemas import Namespace, SessionEvent, encode
from tools.chaos._reads import tell_unfinished, wait_for_quiet


async def test_the_end_of_a_run_waits_for_an_input_held_unacknowledged(
    nc: NATS, namespace: Namespace
) -> None:
    js = nc.jetstream()
    deliver = namespace.stream("deliver")
    for durable in ("router", "cli"):
        await js.add_consumer(
            deliver,
            ConsumerConfig(
                durable_name=durable,
                filter_subject=namespace.deliver(durable),
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=30,
            ),
        )
    await js.publish(namespace.deliver("cli"), b"an answer nobody reads any more")
    await js.publish(namespace.deliver("router"), b"an input")
    inbox = await js.pull_subscribe_bind("router", stream=deliver)
    (held,) = await inbox.fetch(1, timeout=5)  # handled, its effects not stored: unacked

    out = io.StringIO()
    await wait_for_quiet(nc, namespace, ["router"], timeout=0.5, out=out)
    assert f"{deliver}/router: pending 0, unacked 1" in out.getvalue()
    assert "cli" not in out.getvalue()

    await held.ack_sync()
    out = io.StringIO()
    await wait_for_quiet(nc, namespace, ["router"], timeout=10, out=out)
    assert out.getvalue() == ""


async def test_an_unended_session_tells_whether_the_gate_took_its_last_call_in(
    nats_server: EmbeddedServer, nc: NATS, namespace: Namespace
) -> None:
    """A session stopped at a step: its report names the step's call and whether the gate
    ever claimed the call's id (so took it in from PARLEY_SUBMIT) or never saw it."""
    js = nc.jetstream()
    for session_id, call_id in (("taken", "call-taken"), ("missed", "call-missed")):
        step = SessionEvent(
            id=f"step-{session_id}",
            created_at=datetime.now(UTC),
            session_id=session_id,
            event_type="step_started",
            round=4,
            speaker="gpt",
            envelope_ids=(call_id,),
        )
        await js.publish(namespace.events("cli", session_id), encode(step))
    claims = await js.key_value(namespace.bucket("idempotency"))
    await claims.put(id_key("call-taken"), b'{"sender":"router","seq":41,"digest":"d"}')

    out = io.StringIO()
    await tell_unfinished(nats_server.url, None, namespace, [], [], out)
    told = out.getvalue()
    assert f"{namespace.stream('submit')}: 0 messages" in told, told
    assert "unended taken: step_started(4gpt)" in told, told
    assert 'last call call-taken: claimed: {"sender":"router","seq":41' in told, told
    assert "last call call-missed: no claim: the gate never took it in" in told, told
