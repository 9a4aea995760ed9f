"""The router's sweep lists the running sessions every few seconds through a watch of the
sessions bucket (actors/router/_sweeper.py); each listing's consumer is deleted by the
server soon after it ends. nats-py leaves a watch's consumer to an inactivity threshold of
five minutes: about thirty idle consumers stood on the bucket for each router replica (an
operator's walk)."""

from __future__ import annotations

import asyncio
import json

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from actors.router._sweeper import SessionSweeper
from schemas import Namespace

LISTINGS = 3
GONE_WITHIN_S = 30.0
"""Well past the listings' own threshold, and far below nats-py's default of 300 s."""


async def test_each_listing_of_the_sessions_leaves_no_consumer_behind(
    nc: NATS, namespace: Namespace
) -> None:
    bucket = namespace.bucket("sessions")
    kv = await nc.jetstream().key_value(bucket)
    await kv.put("session.s1", b"{}")
    await kv.put("trace.t1", b"s1")  # not a session: not listed
    deleted: asyncio.Queue[str] = asyncio.Queue()

    async def on_deleted(msg: Msg) -> None:
        deleted.put_nowait(json.loads(msg.data)["consumer"])

    await nc.subscribe(f"$JS.EVENT.ADVISORY.CONSUMER.DELETED.KV_{bucket}.*", cb=on_deleted)
    await nc.flush()
    for _ in range(LISTINGS):
        assert await SessionSweeper._session_keys(kv) == ["session.s1"]
    gone = {await asyncio.wait_for(deleted.get(), GONE_WITHIN_S) for _ in range(LISTINGS)}
    assert len(gone) == LISTINGS
    info = await nc.jetstream().stream_info(f"KV_{bucket}")
    assert info.state.consumer_count == 0, info.state
