"""A heartbeat that could not be written is tried again within a second, not a period later.

An actor whose server died, or whose registry bucket was electing a leader, must be seen
beating again soon after the registry can be written: others judge it dead after a few silent
periods. Here the registry does not exist at first (the beat fails at once), then is created;
the next beat must land long before the 60 s period would bring it.
"""

from __future__ import annotations

import asyncio

import nats

from bus import EmbeddedServer, provision
from bus._heartbeat import RETRY_S, Heartbeat
from schemas import Namespace, heartbeat_key

PERIOD_S = 60.0


async def test_a_failed_beat_is_tried_again_within_the_retry_not_the_period(
    nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    nc = await nats.connect(nats_server.url)  # the namespace not provisioned yet
    js = nc.jetstream()
    heartbeat = Heartbeat(js, namespace, "a1", "agent", PERIOD_S, ())
    await heartbeat.beat()  # no registry bucket yet: not written
    stopping = asyncio.Event()
    beating = asyncio.create_task(heartbeat.run(stopping))
    try:
        await provision(js, namespace)
        registry = await js.key_value(namespace.bucket("registry"))
        watcher = await registry.watch(heartbeat_key("a1"))

        async def written() -> None:
            while True:
                entry = await watcher.updates(timeout=PERIOD_S)  # type: ignore[no-untyped-call]
                if entry is not None and entry.value:
                    return

        await asyncio.wait_for(written(), timeout=RETRY_S + 9)
        await watcher.stop()  # type: ignore[no-untyped-call]
    finally:
        stopping.set()
        await beating
        await nc.close()
