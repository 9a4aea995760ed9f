"""The relay reads the gateway without nats-py's fetch stalls.

nats-py's `fetch` shares one reply inbox between fetches, so a late `408` of a request that
had ended was taken by the next fetch, which then sent a lingering request for a whole batch
and held the next frame until it expired (turns over the relay stalled up to a second, the
p99 of `parley bench --only relay`'s turn rows). The relay now pulls like the runtime
(bus/_puller.py): each request has its own reply subject, a lingering one asks for one
frame. A late status is delivered here on purpose, and the requests are watched on the
gateway itself. Real nats-server.
"""

from __future__ import annotations

import asyncio
import json

import nats
from nats.aio.msg import Msg

from actors.relay import DeviceKeys, Gateway
from bus import EmbeddedServer


async def test_frames_are_handed_over_as_they_arrive_even_after_a_late_timeout(
    private_server: EmbeddedServer,
) -> None:
    me, sender = DeviceKeys.generate().device_id, DeviceKeys.generate().device_id
    gateway = Gateway(private_server.url, "gwtest", me, nkey_seed_file=None, ack_wait_s=30)
    await gateway.connect()
    watcher = await nats.connect(private_server.url)
    requests: list[tuple[str, dict[str, object]]] = []
    lingering = asyncio.Event()

    async def note(msg: Msg) -> None:
        request = json.loads(msg.data or b"{}")
        requests.append((msg.reply, request))
        if "expires" in request:
            lingering.set()

    await watcher.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{gateway.stream}.>", cb=note)
    await watcher.flush()
    handled: dict[bytes, asyncio.Event] = {}

    async def handle(msg: Msg) -> None:
        await msg.ack()
        handled.setdefault(msg.data, asyncio.Event()).set()

    stopping = asyncio.Event()
    reading = asyncio.create_task(gateway.read(handle, lambda: not stopping.is_set()))
    try:
        await asyncio.wait_for(lingering.wait(), 10)
        ended = requests[0][0]
        await watcher.publish(ended, headers={"Status": "408", "Description": "Request Timeout"})
        await watcher.flush()
        for n in range(5):
            frame = f"frame {n}".encode()
            await watcher.publish(gateway.subject(me, sender), frame)
            await asyncio.wait_for(handled.setdefault(frame, asyncio.Event()).wait(), 10)
    finally:
        stopping.set()
        await asyncio.wait_for(reading, 10)
        await watcher.close()
        await gateway.close()
    for _, request in requests:
        # Lingering requests are for one frame and carry a heartbeat; the others do not
        # linger, so none is left on the server to capture a later frame.
        if "expires" in request:
            assert request["batch"] == 1 and "idle_heartbeat" in request, request
        else:
            assert request.get("no_wait") is True, request
