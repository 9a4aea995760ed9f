"""The relay's outgoing frames: numbered by their deliveries, sent pipelined, still in order.

A frame's number is its delivery's stream sequence in the deliver stream (nothing is written
before it goes), and the relay handles the next delivery while the gateway stores the last
frame (`settles_behind`). Pipelining must not cost what waiting guaranteed: the frames of one
session reach the gateway in the order of their numbers, so the receiver's replay window
never sees a later frame before an earlier one. Real nats-servers: the deployment's and a
gateway of the test's own.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from prometheus_client import CollectorRegistry

from actors.relay import DeviceKeys, RelayActor, gateway_stream, open_frame, save_shared_agent
from bus import (
    MSG_ID,
    SENDER,
    ActorMetrics,
    ActorRuntime,
    EmbeddedServer,
    TraceHeaders,
    load_settings,
)
from schemas import AgentCall, Namespace, SharedAgent, decode_envelope, encode, new_id, utc_now

SHARED = "bob-byte-doc"


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


async def test_a_backlog_goes_out_numbered_by_its_deliveries_and_in_their_order(
    nats_server: EmbeddedServer,
    private_server: EmbeddedServer,
    nc: NATS,
    namespace: Namespace,
    tmp_path: Path,
) -> None:
    """Sixty calls of one session, stored before the relay starts, so it takes them in full
    batches: each reaches the gateway once, numbered by its delivery, in that order, and
    opens for Bob as the call it was."""
    alice, bob = DeviceKeys.generate(), DeviceKeys.generate()
    alice.save(tmp_path / "device")
    save_shared_agent(
        tmp_path / "relay", SharedAgent(name=SHARED, agent="byte-doc", device=bob.public)
    )
    js = nc.jetstream()
    sent = []
    delivered = []
    for number in range(60):
        data, headers = _call("one-session", number)
        sent.append(decode_envelope(data).id)
        delivered.append((await js.publish(namespace.deliver(SHARED), data, headers=headers)).seq)

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
    assert [body.seq for body in bodies] == delivered
    assert {body.numbered_by for body in bodies} == {"deliveries"}
    assert [decode_envelope(body.envelope).id for body in bodies] == sent
    pending = await js.consumer_info(namespace.stream("deliver"), SHARED)
    assert pending.num_ack_pending == 0 and pending.num_pending == 0
