"""The runtime's reply inbox: every publish and ack answered, refusals at once, stalls bounded.

Against a real nats-server: a stream that stores, a compare-and-set JetStream refuses, a
subject nobody stores, and a listener that never answers.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import StreamConfig
from prometheus_client import CollectorRegistry

from bus import (
    DEAD_DETAIL,
    AckInbox,
    Actor,
    ActorMetrics,
    ActorRuntime,
    AppendRefused,
    AppendTimeout,
    Context,
    EmbeddedServer,
    MessageTooLarge,
    PublishStalled,
    load_settings,
)
from schemas import AnyEnvelope, Namespace, encode, new_id
from tests.support.wire import deliver, human


async def _stream(nc: NATS, namespace: Namespace, name: str) -> str:
    """A stream of this test's own; returns its subject prefix."""
    prefix = f"{namespace.root}.{name}"
    await nc.jetstream().add_stream(
        StreamConfig(name=f"{namespace.root}_{name}".upper(), subjects=[f"{prefix}.>"])
    )
    return prefix


async def test_a_stored_publish_answers_with_its_sequence(nc: NATS, namespace: Namespace) -> None:
    prefix = await _stream(nc, namespace, "stored")
    inbox = AckInbox(nc)
    await inbox.open()
    futures = [await inbox.publish(f"{prefix}.a", str(n).encode(), {}) for n in range(5)]
    acks = await asyncio.wait_for(asyncio.gather(*futures), 5)
    assert [ack.seq for ack in acks] == [1, 2, 3, 4, 5]
    again = await inbox.publish(f"{prefix}.a", b"x", {"Nats-Msg-Id": "one"})
    duplicate = await inbox.publish(f"{prefix}.a", b"x", {"Nats-Msg-Id": "one"})
    first, second = await asyncio.wait_for(asyncio.gather(again, duplicate), 5)
    assert (first.duplicate, second.duplicate, second.seq) == (False, True, first.seq)
    assert inbox.pending() == 0


async def test_a_refused_publish_fails_at_once_with_the_servers_reason(
    nc: NATS, namespace: Namespace
) -> None:
    """nats-py's publish_async never resolves a refused publish: the caller saw a timeout."""
    prefix = await _stream(nc, namespace, "refused")
    inbox = AckInbox(nc)
    await inbox.open()
    await asyncio.wait_for(await inbox.publish(f"{prefix}.k", b"v1", {}), 5)
    stale = await inbox.publish(f"{prefix}.k", b"v2", {"Nats-Expected-Last-Subject-Sequence": "0"})
    with pytest.raises(AppendRefused) as refused:
        await asyncio.wait_for(stale, 2)
    assert refused.value.err_code == 10071
    nobody = await inbox.publish(f"{namespace.root}.unstored.x", b"v", {})
    with pytest.raises(AppendRefused, match="no stream"):
        await asyncio.wait_for(nobody, 2)


async def test_acks_are_confirmed_by_the_server(nc: NATS, namespace: Namespace) -> None:
    prefix = await _stream(nc, namespace, "acked")
    js = nc.jetstream()
    for n in range(3):
        await js.publish(f"{prefix}.m", str(n).encode())
    stream = f"{namespace.root}_acked".upper()
    sub = await js.pull_subscribe(f"{prefix}.>", durable="reader", stream=stream)
    messages = await sub.fetch(3, timeout=5)
    inbox = AckInbox(nc)
    await inbox.open()
    await asyncio.wait_for(asyncio.gather(*[await inbox.ack(m.reply) for m in messages]), 5)
    info = await js.consumer_info(stream, "reader")
    assert (info.num_ack_pending, info.ack_floor.stream_seq) == (0, 3)


async def test_a_publish_nats_py_cannot_send_leaves_nothing_waiting(
    nc: NATS, namespace: Namespace
) -> None:
    """Too large for the server (headers counted, as the server counts them): the inbox
    refuses it before sending, and no future is left for an answer that will never come
    (enough of them would stall every later publish)."""
    prefix = await _stream(nc, namespace, "unsent")
    inbox = AckInbox(nc, max_pending=2)
    await inbox.open()
    for _ in range(3):
        with pytest.raises(MessageTooLarge):
            await inbox.publish(f"{prefix}.big", b"x" * (nc.max_payload + 1), {}, stall_s=0.2)
    assert inbox.pending() == 0
    stored = await inbox.publish(f"{prefix}.small", b"x", {}, stall_s=0.2)
    assert (await asyncio.wait_for(stored, 5)).seq == 1


async def test_an_ack_nobody_takes_fails_as_ack_sync_would(nc: NATS, namespace: Namespace) -> None:
    """The consumer was deleted (an operator, or the watchdog re-creating it): the ack is
    not recorded, and the message will be delivered again."""
    prefix = await _stream(nc, namespace, "orphan")
    js = nc.jetstream()
    await js.publish(f"{prefix}.m", b"m")
    stream = f"{namespace.root}_orphan".upper()
    sub = await js.pull_subscribe(f"{prefix}.>", durable="gone", stream=stream)
    (message,) = await sub.fetch(1, timeout=5)
    await js.delete_consumer(stream, "gone")
    inbox = AckInbox(nc)
    await inbox.open()
    with pytest.raises(AppendRefused, match="no consumer"):
        await asyncio.wait_for(await inbox.ack(message.reply), 5)


async def test_unanswered_requests_stall_publishing_until_room_is_made(
    nc: NATS, namespace: Namespace
) -> None:
    """A listener that never answers stands in for a server that stopped answering."""
    heard = asyncio.Queue[Msg]()
    await nc.subscribe(f"{namespace.root}.silent", cb=heard.put)
    inbox = AckInbox(nc, max_pending=2)
    await inbox.open()
    first = await inbox.publish(f"{namespace.root}.silent", b"1", {})
    second = await inbox.publish(f"{namespace.root}.silent", b"2", {})
    await asyncio.wait_for(heard.get(), 5)
    with pytest.raises(PublishStalled):
        await inbox.publish(f"{namespace.root}.silent", b"3", {}, stall_s=0.2)
    # A caller that gave up on its publishes (a deadline cancelled them) makes room again.
    first.cancel()
    second.cancel()
    third = await inbox.publish(f"{namespace.root}.silent", b"3", {}, stall_s=0.2)
    assert inbox.pending() == 1
    third.cancel()


async def test_a_publish_with_its_own_timeout_fails_when_unanswered(
    nc: NATS, namespace: Namespace
) -> None:
    """The gate's id claims are bounded this way, on an inbox shared with writes that are
    not: the timeout is the one publish's, and its token is forgotten."""
    heard = asyncio.Queue[Msg]()
    await nc.subscribe(f"{namespace.root}.silent", cb=heard.put)
    inbox = AckInbox(nc)
    await inbox.open()
    bounded = await inbox.publish(f"{namespace.root}.silent", b"1", {}, timeout=0.2)
    unbounded = await inbox.publish(f"{namespace.root}.silent", b"2", {})
    with pytest.raises(AppendTimeout, match=r"in 0\.2s"):
        await asyncio.wait_for(bounded, 5)
    assert not unbounded.done()
    assert inbox.pending() == 1
    unbounded.cancel()


class _RefusedEffect(Actor):
    """Publishes one effect JetStream refuses: a compare-and-set naming a revision that is
    not the subject's last."""

    kind: ClassVar[str] = "refused-effect"

    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        await ctx.publish(
            self.namespace.events("router", "refused"),
            envelope,
            extra_headers={"Nats-Expected-Last-Subject-Sequence": "999"},
        )


async def test_a_handler_whose_effect_is_refused_fails_at_once_with_the_reason(
    nats_server: EmbeddedServer, nc: NATS, namespace: Namespace
) -> None:
    """The message is dead-lettered on its only delivery with JetStream's reason, long before
    the settle deadline (ack_wait / 2 = 15 s) that a never-answered publish would run into."""
    settings = load_settings(
        nats_url=nats_server.url,
        namespace=namespace.root,
        actor_id="refused",
        max_deliver=1,
        ack_wait_s=30.0,
        log_level="WARNING",
    )
    js = nc.jetstream()
    dead = await js.pull_subscribe(
        namespace.wildcard("dead"), durable="watch", stream=namespace.stream("dead")
    )
    runtime = ActorRuntime(_RefusedEffect(settings), ActorMetrics(CollectorRegistry(), "t"))
    stop = asyncio.Event()
    running = asyncio.create_task(runtime.run(stop))
    try:
        await asyncio.wait_for(runtime.ready.wait(), 10)
        await deliver(js, namespace, "refused", encode(human("hello")), new_id())
        letters = await dead.fetch(1, timeout=5)
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)
    detail = (letters[0].headers or {}).get(DEAD_DETAIL, "")
    assert "effect refused" in detail and "10071" in detail, detail
