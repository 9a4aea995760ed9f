"""Idle pull loops do not stall: no answer meant for one pull request is taken by another.

The stall (3.4-5.5 s on an idle system): nats-py's `fetch` shares one reply inbox between
all fetches of a subscription, so the 408 of a request the client had already given up on,
arriving late, was taken by the next fetch as its own answer. That fetch then sent a second,
lingering request for 64 messages beside its first; the next message but one went to that
orphan, and the fetch it landed in waited for the rest of the batch until the orphan
expired: a whole fetch timeout. These tests deliver such a late status on purpose (the
server's exact bytes, published to the reply subject of a request that has ended) and watch
the server's pull requests, with a fetch timeout of 30 s so a stall cannot hide in the
bounds. Against a real nats-server; the loop is the runtime's own `ConsumerLoop`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from prometheus_client import CollectorRegistry

from bus import ActorMetrics, ConsumerLoop, Input, consumer_config, load_settings
from bus._puller import Puller
from schemas import Namespace

LONG_FETCH_S = 30.0
WELL_BEFORE_EXPIRY_S = 10.0  # a third of the fetch timeout: a stall cannot pass for latency


@dataclass
class _Requests:
    """Every pull request sent to the consumer, seen from a listener on its subject."""

    seen: list[tuple[str, dict[str, object]]] = field(default_factory=list)
    lingering: asyncio.Event = field(default_factory=asyncio.Event)

    async def note(self, msg: Msg) -> None:
        request = json.loads(msg.data or b"{}")
        self.seen.append((msg.reply, request))
        if "expires" in request:
            self.lingering.set()


@dataclass
class _Handled:
    """A `process` callback: acks each message and tells who waits for it."""

    events: dict[bytes, asyncio.Event] = field(default_factory=dict)

    def awaiting(self, data: bytes) -> asyncio.Event:
        return self.events.setdefault(data, asyncio.Event())

    async def __call__(self, messages: list[Msg], handled: asyncio.Event) -> None:
        for msg in messages:
            await msg.ack()
            self.awaiting(msg.data).set()
        handled.set()


def _spec(ns: Namespace) -> Input:
    return Input(ns.stream("submit"), ns.wildcard("submit"), "probe", "subject")


def _next_subject(spec: Input) -> str:
    return f"$JS.API.CONSUMER.MSG.NEXT.{spec.stream}.{spec.durable}"


@asynccontextmanager
async def _idle_loop(nc: NATS, ns: Namespace, handled: _Handled) -> AsyncIterator[_Requests]:
    """A consumer loop with a long fetch timeout, returned once it waits on an empty stream."""
    spec = _spec(ns)
    requests = _Requests()
    await nc.subscribe(_next_subject(spec), cb=requests.note)
    settings = load_settings(namespace=ns.root, actor_id="probe", fetch_timeout_s=LONG_FETCH_S)
    loop = ConsumerLoop(
        nc.jetstream(), spec, settings, ActorMetrics(CollectorRegistry(), "t"), handled
    )
    stopping, ready = asyncio.Event(), asyncio.Event()
    running = asyncio.create_task(loop.run(stopping, ready))
    try:
        await asyncio.wait_for(requests.lingering.wait(), 10)
        yield requests
    finally:
        stopping.set()
        await asyncio.wait_for(running, 15)


async def _waiting_requests(nc: NATS, spec: Input) -> int:
    info = await nc.jetstream().consumer_info(spec.stream, spec.durable)
    return int(info.num_waiting or 0)


async def test_a_late_timeout_of_an_ended_request_does_not_hold_back_later_messages(
    nc: NATS, namespace: Namespace
) -> None:
    handled = _Handled()
    async with _idle_loop(nc, namespace, handled) as requests:
        ended_reply = requests.seen[0][0]
        # The 408 the server sends when a request expires, arriving after its fetch ended.
        await nc.publish(ended_reply, headers={"Status": "408", "Description": "Request Timeout"})
        await nc.flush()  # delivered to the loop before anything else is stored
        for data in (b"first", b"second", b"third"):
            await nc.jetstream().publish(namespace.submit("probe"), data)
            await asyncio.wait_for(handled.awaiting(data).wait(), WELL_BEFORE_EXPIRY_S)
            # No request of the loop is left behind to capture a later message.
            assert await _waiting_requests(nc, _spec(namespace)) <= 1


async def test_messages_stored_while_the_loop_idles_are_handled_as_they_arrive(
    nc: NATS, namespace: Namespace
) -> None:
    handled = _Handled()
    async with _idle_loop(nc, namespace, handled) as requests:
        for n in range(5):
            data = f"call {n}".encode()
            await nc.jetstream().publish(namespace.submit("probe"), data)
            await asyncio.wait_for(handled.awaiting(data).wait(), WELL_BEFORE_EXPIRY_S)
        for _, request in requests.seen:
            # Lingering requests are for one message and carry a heartbeat; the others do
            # not linger, so each ends as soon as the server has nothing more.
            if "expires" in request:
                assert request["batch"] == 1
                assert "idle_heartbeat" in request
            else:
                assert request.get("no_wait") is True


async def test_a_message_sent_to_an_abandoned_request_is_given_back_at_once(
    nc: NATS, namespace: Namespace
) -> None:
    """A fetch cancelled while its request lingers on the server (a stop, a lost
    connection) leaves the request there; what it still receives while no request is open
    is nak'ed, redelivered now rather than after the 30 s ack wait."""
    spec = _spec(namespace)
    settings = load_settings(namespace=namespace.root, actor_id="probe")
    await nc.jetstream().add_consumer(spec.stream, consumer_config(spec, settings))
    requests = _Requests()
    await nc.subscribe(_next_subject(spec), cb=requests.note)
    given_back = asyncio.Event()

    async def acked(msg: Msg) -> None:
        if msg.data == b"-NAK":
            given_back.set()

    await nc.subscribe(f"$JS.ACK.{spec.stream}.{spec.durable}.>", cb=acked)
    puller = Puller(nc, _next_subject(spec), expires_s=LONG_FETCH_S, heartbeat_s=1.0)
    await puller.start()
    try:
        abandoned = asyncio.create_task(puller.fetch(4))
        await asyncio.wait_for(requests.lingering.wait(), 10)
        while await _waiting_requests(nc, spec) != 1:
            await nc.flush()  # the server registers the request on its own time
        abandoned.cancel()
        await asyncio.gather(abandoned, return_exceptions=True)
        await nc.jetstream().publish(namespace.submit("probe"), b"late")
        await asyncio.wait_for(given_back.wait(), WELL_BEFORE_EXPIRY_S)
        messages = await asyncio.wait_for(puller.fetch(4), WELL_BEFORE_EXPIRY_S)
        assert [msg.data for msg in messages] == [b"late"]
        assert messages[0].metadata.num_delivered == 2
    finally:
        await puller.close()


async def test_a_fetch_asks_for_a_batch_only_when_one_may_be_waiting(
    nc: NATS, namespace: Namespace
) -> None:
    """The message a fetch brings says how many were pending behind it: a batch is asked for
    (no-wait, as many as there is room for) while some were, and once none were the next
    fetch lingers at once, without a no-wait request whose only answer would be `404`."""
    spec = _spec(namespace)
    settings = load_settings(namespace=namespace.root, actor_id="probe")
    await nc.jetstream().add_consumer(spec.stream, consumer_config(spec, settings))
    requests = _Requests()
    await nc.subscribe(_next_subject(spec), cb=requests.note)
    puller = Puller(nc, _next_subject(spec), expires_s=LONG_FETCH_S, heartbeat_s=1.0)
    await puller.start()
    try:
        for data in (b"m1", b"m2", b"m3"):
            await nc.jetstream().publish(namespace.submit("probe"), data)
        # The consumer counts what is pending behind its deliveries on its own time after
        # the stores (one of two test workers saw m1 delivered with fewer behind it).
        while (await nc.jetstream().consumer_info(spec.stream, spec.durable)).num_pending != 3:
            await nc.flush()
        first = await asyncio.wait_for(puller.fetch(1), WELL_BEFORE_EXPIRY_S)
        assert [msg.data for msg in first] == [b"m1"]
        assert first[0].metadata.num_pending == 2
        await nc.flush()
        requests.seen.clear()
        rest = await asyncio.wait_for(puller.fetch(4), WELL_BEFORE_EXPIRY_S)
        assert [msg.data for msg in rest] == [b"m2", b"m3"]
        await nc.flush()
        assert [request for _, request in requests.seen] == [{"batch": 4, "no_wait": True}]
        for msg in first + rest:
            await msg.ack()
        requests.seen.clear()
        requests.lingering.clear()
        waiting = asyncio.create_task(puller.fetch(4))
        await asyncio.wait_for(requests.lingering.wait(), 10)
        assert ["no_wait" in request for _, request in requests.seen] == [False]
        await nc.jetstream().publish(namespace.submit("probe"), b"m4")
        later = await asyncio.wait_for(waiting, WELL_BEFORE_EXPIRY_S)
        assert [msg.data for msg in later] == [b"m4"]
    finally:
        await puller.close()
