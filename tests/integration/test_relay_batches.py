"""The relay's outgoing batches: numbered in one round trip, sent pipelined, still in order.

The relay numbers a whole fetched batch's frames with one round of creates in its bucket and
sends the frames together (actors/relay/_actor.py `handle_batch`). Pipelining must not cost
what sequential handling guaranteed: a redelivered envelope keeps its number, and the frames
of one session reach the gateway in the order of their numbers, so the receiver's replay
window never sees a later frame before an earlier one. Real nats-servers: the deployment's
and a gateway of the test's own.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from prometheus_client import CollectorRegistry

from actors.relay import DeviceKeys, RelayActor, gateway_stream, open_frame, save_shared_agent
from actors.relay._store import Outgoing, RelayStore
from bus import (
    MSG_ID,
    SENDER,
    AckInbox,
    ActorMetrics,
    ActorRuntime,
    EmbeddedServer,
    TraceHeaders,
    load_settings,
)
from schemas import AgentCall, Namespace, SharedAgent, decode_envelope, encode, new_id, utc_now

SHARED = "bob-byte-doc"


async def _store(nc: NATS, ns: Namespace) -> RelayStore:
    bucket = ns.bucket("relay")
    acks = AckInbox(nc, timeout=5.0)
    await acks.open()
    return RelayStore(await nc.jetstream().key_value(bucket), acks, bucket)


async def test_a_batch_is_numbered_in_its_order_and_a_redelivery_keeps_its_number(
    nc: NATS, namespace: Namespace
) -> None:
    store = await _store(nc, namespace)
    ids = [new_id() for _ in range(5)]
    drafts = [Outgoing(seq=0, session=f"s{n % 2}", peer="bob") for n in range(5)]
    first = await store.claim_all(list(zip(ids, drafts, strict=True)))
    numbers = [out.seq for out in first if isinstance(out, Outgoing)]
    assert len(numbers) == 5 and numbers == sorted(set(numbers)), first

    # A batch mixing redeliveries and a new envelope: the old keep theirs, the new comes after.
    fresh = new_id()
    again = await store.claim_all([(ids[3], drafts[3]), (fresh, drafts[0]), (ids[0], drafts[0])])
    assert [out.seq for out in again if isinstance(out, Outgoing)][::2] == [
        numbers[3],
        numbers[0],
    ]
    assert isinstance(again[1], Outgoing) and again[1].seq > numbers[-1]
    assert await store.claim_outgoing(ids[1], drafts[1]) == msgspec.structs.replace(
        drafts[1], seq=numbers[1]
    )


def _call(session: str, number: int) -> tuple[bytes, dict[str, str]]:
    call = AgentCall(
        id=new_id(),
        created_at=utc_now(),
        target=SHARED,
        call_id=new_id(),
        session_id=session,
        goal=f"question {number}",
        text=f"question {number}",
    )
    trace = TraceHeaders(trace_id=call.id, origin="test").to_headers(call.id)
    return encode(call), {**trace, MSG_ID: call.id, SENDER: "router"}


async def test_a_backlog_goes_out_in_batches_in_the_order_of_its_numbers(
    nats_server: EmbeddedServer,
    private_server: EmbeddedServer,
    nc: NATS,
    namespace: Namespace,
    tmp_path: Path,
) -> None:
    """Sixty calls of one session, stored before the relay starts, so it takes them in full
    batches: each reaches the gateway once, in the order of its number, and opens for Bob
    as the call it was."""
    alice, bob = DeviceKeys.generate(), DeviceKeys.generate()
    alice.save(tmp_path / "device")
    save_shared_agent(
        tmp_path / "relay", SharedAgent(name=SHARED, agent="byte-doc", device=bob.public)
    )
    js = nc.jetstream()
    sent = []
    for number in range(60):
        data, headers = _call("one-session", number)
        sent.append(decode_envelope(data).id)
        await js.publish(namespace.deliver(SHARED), data, headers=headers)

    root = f"gw{namespace.root}"
    settings = load_settings(
        nats_url=nats_server.url,
        namespace=namespace.root,
        actor_id="relay",
        fetch_batch=16,
        log_level="WARNING",
        options={
            "device_dir": str(tmp_path / "device"),
            "relay_dir": str(tmp_path / "relay"),
            "gateway_url": private_server.url,
            "gateway_root": root,
        },
    )
    runtime = ActorRuntime(RelayActor(settings), ActorMetrics(CollectorRegistry(), "t"))
    stop = asyncio.Event()
    running = asyncio.create_task(runtime.run(stop))
    gateway = await nats.connect(private_server.url)
    try:
        await asyncio.wait_for(runtime.ready.wait(), 20)
        gw = gateway.jetstream()
        stream = gateway_stream(root).name or ""
        subject = f"{root}.{bob.device_id}.{alice.device_id}"
        reader = await gw.pull_subscribe(subject, durable="check", stream=stream)
        frames: list[Msg] = []
        async with asyncio.timeout(60):
            while len(frames) < len(sent):
                try:
                    frames += await reader.fetch(len(sent) - len(frames), timeout=2)
                except TimeoutError:
                    continue
        assert (await gw.stream_info(stream)).state.messages == len(sent)
    finally:
        stop.set()
        await asyncio.wait_for(running, 20)
        await gateway.close()

    bodies = [open_frame(msg.data, bob, frozenset({alice.device_id})) for msg in frames]
    numbers = [body.seq for body in bodies]
    assert numbers == sorted(set(numbers))
    assert [decode_envelope(body.envelope).id for body in bodies] == sent
    pending = await js.consumer_info(namespace.stream("deliver"), SHARED)
    assert pending.num_ack_pending == 0 and pending.num_pending == 0
