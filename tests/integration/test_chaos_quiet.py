"""A chaos run's verdict is read once the actors hold no input in flight.

An actor that failed to store an input's effects (a stream electing its leader) holds the
input unacknowledged until its retry: work still in flight, which the run must wait for, or
its verdict would call acknowledged work lost. `wait_for_quiet` asks the server until no
actor's consumer holds a message pending or unacknowledged; a person's consumer (the load's
own, left unread once the load is done) does not count.
"""

from __future__ import annotations

import io

from nats.aio.client import Client as NATS
from nats.js.api import AckPolicy, ConsumerConfig

from schemas import Namespace
from tools.chaos._reads import wait_for_quiet


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
