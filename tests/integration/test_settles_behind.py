"""Settling behind: an in-order actor handles the next batch while the last one settles.

The consumer loop against a real nats-server, with a `process` callback that holds a batch
after its handlers ran (as a batch whose effects are still being stored is held), and the
gate's record cache reading a record whose write is still in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import PubAck
from prometheus_client import CollectorRegistry

from actors.gate._records import Position, position_key
from actors.gate._store import GateStore
from bus import AckInbox, ActorMetrics, ConsumerLoop, Input, load_settings
from schemas import Namespace


class _Batches:
    """A `process` callback: records each batch, sets `handled` when told, settles when told."""

    def __init__(self, count: int = 2) -> None:
        self.seen: list[bytes] = []
        self.arrived = [asyncio.Event() for _ in range(count)]
        self.let_handle = [asyncio.Event() for _ in range(count)]
        self.let_settle = [asyncio.Event() for _ in range(count)]

    async def __call__(self, messages: list[Msg], handled: asyncio.Event) -> None:
        index = len(self.seen)
        self.seen.extend(msg.data for msg in messages)
        self.arrived[index].set()
        await self.let_handle[index].wait()
        handled.set()
        await self.let_settle[index].wait()
        for msg in messages:
            await msg.ack()


@asynccontextmanager
async def _loop(
    nc: NATS, ns: Namespace, batches: _Batches, *, settles_behind: bool, max_in_flight: int = 1
) -> AsyncIterator[None]:
    js = nc.jetstream()
    for n in range(len(batches.arrived)):
        await js.publish(ns.submit("probe"), [b"first", b"second", b"third"][n])
    settings = load_settings(
        namespace=ns.root, actor_id="probe", fetch_batch=1, max_in_flight=max_in_flight
    )
    spec = Input(ns.stream("submit"), ns.wildcard("submit"), "probe", "subject")
    loop = ConsumerLoop(
        js,
        spec,
        settings,
        ActorMetrics(CollectorRegistry(), "t"),
        batches,
        sequential=True,
        settles_behind=settles_behind,
    )
    stopping, ready = asyncio.Event(), asyncio.Event()
    running = asyncio.create_task(loop.run(stopping, ready))
    try:
        yield
    finally:
        for event in (*batches.let_handle, *batches.let_settle):
            event.set()
        stopping.set()
        await asyncio.wait_for(running, 10)


async def test_the_next_batch_is_handled_while_the_last_one_settles(
    nc: NATS, namespace: Namespace
) -> None:
    batches = _Batches()
    async with _loop(nc, namespace, batches, settles_behind=True):
        await asyncio.wait_for(batches.arrived[0].wait(), 5)
        # Still handling the first batch: the second must wait, handling stays in order.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(batches.arrived[1].wait(), 0.5)
        batches.let_handle[0].set()
        # The first batch is handled but not settled: the second is fetched and handled.
        await asyncio.wait_for(batches.arrived[1].wait(), 5)
        assert batches.seen == [b"first", b"second"]
        assert not batches.let_settle[0].is_set()


async def test_without_settling_behind_the_next_batch_waits_for_the_last_to_settle(
    nc: NATS, namespace: Namespace
) -> None:
    batches = _Batches()
    async with _loop(nc, namespace, batches, settles_behind=False):
        await asyncio.wait_for(batches.arrived[0].wait(), 5)
        batches.let_handle[0].set()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(batches.arrived[1].wait(), 0.5)
        batches.let_settle[0].set()
        await asyncio.wait_for(batches.arrived[1].wait(), 5)


async def test_at_most_one_batch_settles_behind_the_one_being_handled(
    nc: NATS, namespace: Namespace
) -> None:
    """One batch settles while the next is handled, never more, even when the room for
    messages in flight would hold more batches (here four of one message each)."""
    batches = _Batches(3)
    async with _loop(nc, namespace, batches, settles_behind=True, max_in_flight=2):
        for index in (0, 1):
            batches.let_handle[index].set()
            await asyncio.wait_for(batches.arrived[index].wait(), 5)
        batches.let_handle[2].set()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(batches.arrived[2].wait(), 0.5)
        batches.let_settle[0].set()
        await asyncio.wait_for(batches.arrived[2].wait(), 5)
        assert batches.seen == [b"first", b"second", b"third"]


async def test_a_record_being_written_is_read_from_its_write_not_from_kv(
    nc: NATS, namespace: Namespace
) -> None:
    """A reply can reach the gate before the position of its call is acknowledged: the cache
    waits for the write in flight, where KV would answer that the position does not exist."""
    bucket = namespace.bucket("traces")
    acks = AckInbox(nc)
    await acks.open()
    store = GateStore(acks, await nc.jetstream().key_value(bucket), bucket, 100)
    key = position_key("call-1")
    position = Position(
        envelope_id="call-1", trace_id="t", origin="cli", sender="router", target="gpt",
        kind="agent_call", levels=(),
    )  # fmt: skip
    write: asyncio.Future[PubAck] = asyncio.get_running_loop().create_future()
    store.remember(key, position, write)
    reading = asyncio.create_task(store.load([key]))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(asyncio.shield(reading), 0.3)
    # Still unacknowledged past the wait: answered from what was written, not from KV.
    assert await store.load([key], wait_s=0.1) == {key: position}
    # No revision to name yet: a compare-and-set is put off, not sent.
    assert await store.commit({key: position}, timeout=5) == frozenset({key})
    write.set_result(PubAck(stream="KV", seq=41))
    assert await asyncio.wait_for(reading, 5) == {key: position}
    # The acknowledged revision is what the next compare-and-set names (KV has no such
    # record, so naming 41 is refused: a write naming "create" would have gone through).
    assert await store.commit({key: position}, timeout=5) == frozenset({key})
    assert await store.load([key]) == {key: None}
