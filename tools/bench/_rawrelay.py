"""The relay row's reference: a relay written with raw nats-py, doing the same sealing work.

It reads the calls delivered to the shared agent (a durable pull consumer on the same kind of
stream, provisioned by Parley so storage settings match), seals each exactly as Parley's
relay does (`seal_frame`: Ed25519 signature, then HPKE to the owner's device key), stores the
frame on the same gateway with a `Nats-Msg-Id`, waits for the gateway's ack and then acks its
input. What it leaves out is what Parley's relay adds: the sequence number fixed in a KV
bucket before sealing (so a redelivery reseals under the same number), the envelope's
decoding and checks, dead letters and the runtime's bookkeeping. Its sequence numbers live
in memory: a crash would reuse them. Like Parley's runtime it has up to 64 messages in hand
at once: 64 workers each pull one message at a time (a `fetch` of several can hold one back
until its timeout, which would slow the one-at-a-time latency run). It logs in to the gateway
with its device's seed there, as Parley's relay does, and finds the stream the gateway's
operator created. It prints `ready` once its consumer is bound.
"""

from __future__ import annotations

import asyncio
import json
import time
from itertools import count
from pathlib import Path

import nats
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from actors.relay import DeviceKeys, frame_msg_id, gateway_stream, seal_frame
from schemas import FrameBody, Namespace

__all__ = ("DURABLE", "SESSION", "run_raw_relay")

DURABLE = "rawrelay"
SESSION = "Bench-Session"
_WORKERS = 64


async def run_raw_relay(url: str, root: str, gateway_url: str, settings: str) -> None:
    """Forward every call on `deliver.<shared>` of namespace `root` to the gateway, for ever.

    `settings` (JSON): `device_dir`, `gateway_root`, `gateway_seed` (the device's seed on the
    gateway), `shared` (the local name), `agent`, `peer` (the owner's device id) and
    `peer_kem` (its X25519 key)."""
    options = json.loads(settings)
    keys = DeviceKeys.load(Path(options["device_dir"]))
    ns = Namespace(root)
    nc = await nats.connect(url)
    gateway = await nats.connect(
        gateway_url,
        nkeys_seed=options["gateway_seed"],
        inbox_prefix=f"_INBOX_{keys.device_id[:16]}".encode(),
    )
    js, gw = nc.jetstream(), gateway.jetstream()
    stream = gateway_stream(options["gateway_root"])
    subject = f"{options['gateway_root']}.{options['peer']}.{keys.device_id}"
    first = await js.pull_subscribe(
        ns.deliver(options["shared"]), durable=DURABLE, stream=ns.stream("deliver")
    )
    # One subscription (and inbox) per worker, all bound to the one durable.
    subs = [first] + [
        await js.pull_subscribe_bind(durable=DURABLE, stream=ns.stream("deliver"))
        for _ in range(_WORKERS - 1)
    ]
    numbers = count(1)
    print("ready", flush=True)

    async def forward(msg: Msg) -> None:
        session, seq = (msg.headers or {}).get(SESSION, "bench"), next(numbers)
        body = FrameBody(
            sender_device=keys.device_id,
            recipient_device=options["peer"],
            session=session,
            seq=seq,
            kind="call",
            agent=options["agent"],
            sent_at_ms=int(time.time() * 1000),
            envelope=msg.data,
        )
        frame = seal_frame(body, keys, options["peer_kem"])
        msg_id = frame_msg_id(keys.device_id, session, seq)
        await _store(gw, subject, frame, msg_id, stream.name or "")
        await msg.ack()

    async def worker(sub: JetStreamContext.PullSubscription) -> None:
        while True:
            try:
                (msg,) = await sub.fetch(1, timeout=5)
            except TimeoutError:
                continue
            await forward(msg)

    await asyncio.gather(*(worker(sub) for sub in subs))


async def _store(gw: JetStreamContext, subject: str, frame: bytes, msg_id: str, name: str) -> None:
    await gw.publish(subject, frame, stream=name, headers={"Nats-Msg-Id": msg_id})
