"""An idle input's first message waits `gathers_s` for others, and they go as one batch.

Why: an actor on no request's path (the auditor) pays a pull, a flush of its effects and a
flush of its acks per batch; facts that trickle in one at a time paid that once each (about
two thirds of the auditor's CPU per `say`, docs/benchmarks.md). Against a real nats-server,
with the runtime's own `ConsumerLoop`: once the loop idles, its first message is seen
arriving on its inbox (a listener beside it), then more are stored, and the batches handed
over are compared with and without the window.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from prometheus_client import CollectorRegistry

from bus import ActorMetrics, ConsumerLoop, Input, load_settings
from schemas import Namespace

WINDOW_S = 3.0  # far longer than storing four messages takes, and waited for only once


@dataclass
class _Batches:
    """A `process` callback: acks and keeps each batch it is handed."""

    seen: list[list[bytes]] = field(default_factory=list)
    count: int = 0
    reached: asyncio.Event = field(default_factory=asyncio.Event)
    want: int = 0

    async def __call__(self, messages: list[Msg], handled: asyncio.Event) -> None:
        self.seen.append([msg.data for msg in messages])
        for msg in messages:
            await msg.ack()
        handled.set()
        self.count += len(messages)
        if self.count >= self.want:
            self.reached.set()


async def _batches_after_idling(nc: NATS, ns: Namespace, gathers_s: float) -> list[list[bytes]]:
    """Start an idle loop; store one message, and once it reached the loop four more."""
    spec = Input(ns.stream("submit"), ns.wildcard("submit"), "probe", "subject")
    settings = load_settings(namespace=ns.root, actor_id="probe")
    batches = _Batches(want=5)
    loop = ConsumerLoop(
        nc.jetstream(),
        spec,
        settings,
        ActorMetrics(CollectorRegistry(), "t"),
        batches,
        gathers_s=gathers_s,
    )
    first_arrived, lingering = asyncio.Event(), asyncio.Event()

    async def requested(msg: Msg) -> None:  # the loop idles once it asks and lingers
        if b"expires" in msg.data:
            lingering.set()

    watch = await nc.subscribe(
        f"$JS.API.CONSUMER.MSG.NEXT.{spec.stream}.{spec.durable}", cb=requested
    )

    async def arriving(msg: Msg) -> None:  # a copy of what the server sends the loop's inbox
        if msg.data == b"m0":
            first_arrived.set()

    listener = await nc.subscribe("_INBOX.>", cb=arriving)
    stopping, ready = asyncio.Event(), asyncio.Event()
    running = asyncio.create_task(loop.run(stopping, ready))
    try:
        await asyncio.wait_for(lingering.wait(), 10)
        js = nc.jetstream()
        await js.publish(ns.submit("probe"), b"m0")
        await asyncio.wait_for(first_arrived.wait(), 10)
        for n in range(1, 5):
            await js.publish(ns.submit("probe"), f"m{n}".encode())
        await asyncio.wait_for(batches.reached.wait(), WINDOW_S + 10)
        return batches.seen
    finally:
        await listener.unsubscribe()
        await watch.unsubscribe()
        stopping.set()
        await asyncio.wait_for(running, 15)


async def test_messages_stored_within_the_window_join_the_first_ones_batch(
    nc: NATS, namespace: Namespace
) -> None:
    batches = await _batches_after_idling(nc, namespace, WINDOW_S)
    assert batches == [[b"m0", b"m1", b"m2", b"m3", b"m4"]]


async def test_without_a_window_the_first_message_goes_alone(
    nc: NATS, namespace: Namespace
) -> None:
    batches = await _batches_after_idling(nc, namespace, 0.0)
    assert batches[0] == [b"m0"]
    assert [data for batch in batches for data in batch] == [f"m{n}".encode() for n in range(5)]
