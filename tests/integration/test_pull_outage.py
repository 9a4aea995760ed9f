"""An idle consumer loop sends no pull request while its connection is down.

nats-py keeps what is published during an outage in a buffer and sends it all on reconnect.
An idle loop gives up on a silent pull request every few heartbeats and makes another, so a
loop that kept publishing through an outage left a request on the server for each of those
tries once it came back, each lingering for a fetch timeout while the client waited on one
only. A message handed to one of the orphans arrives while no request is open and is given
back (nak), to the next orphan, until its deliveries run out unseen: an actor deaf after an
outage (tests/chaos/test_long_outage.py failed that way now and then).

Against a real nats-server killed and restarted on the same port and store; the loop is the
runtime's own `ConsumerLoop` on a connection made by `bus.connect`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from nats.aio.msg import Msg
from prometheus_client import CollectorRegistry

from bus import ActorMetrics, ConsumerLoop, EmbeddedServer, Input, Link, connect, load_settings
from bus import provision as provision_streams
from schemas import Namespace

HEARTBEAT_S = 0.5  # a silent request is given up after three of these (1.5 s)
"""Long enough that a loaded machine's stall between the reconnect and the count below does not
give up the one live request (0.2 s did: a 0.6 s stall left two waiting, both honest)."""
FETCH_TIMEOUT_S = 30.0  # an orphan would linger on the server through the whole test
OUTAGE_S = 4.0  # the fault itself: two silent requests long and more (not a synchronisation)


async def test_no_pull_request_waits_out_an_outage_in_the_client_buffer(
    tmp_path: Path,
) -> None:
    namespace = Namespace("outage")
    spec = Input(namespace.stream("submit"), namespace.wildcard("submit"), "probe", "subject")
    settings = load_settings(
        namespace=namespace.root,
        actor_id="probe",
        fetch_timeout_s=FETCH_TIMEOUT_S,
        fetch_heartbeat_s=HEARTBEAT_S,
        watchdog_idle_fetches=1000,  # this test watches the requests, not the watchdog
    )
    handled: dict[bytes, int] = {}
    arrived = asyncio.Event()

    async def process(messages: list[Msg], done: asyncio.Event) -> None:
        for msg in messages:
            handled[msg.data] = msg.metadata.num_delivered
            await msg.ack()
        done.set()
        arrived.set()

    with EmbeddedServer(tmp_path / "nats") as server:
        link = Link()
        nc = await connect(load_settings(nats_url=server.url), "probe", link=link)
        js = nc.jetstream()
        await provision_streams(js, namespace)
        loop = ConsumerLoop(
            js, spec, settings, ActorMetrics(CollectorRegistry(), "t"), process, link=link
        )
        stopping, ready = asyncio.Event(), asyncio.Event()
        running = asyncio.create_task(loop.run(stopping, ready))
        try:
            await asyncio.wait_for(ready.wait(), 10)
            server.kill()
            await asyncio.sleep(OUTAGE_S)
            server.start()
            await asyncio.wait_for(link.wait_up(nc), 20)
            # Asked on the same connection, after whatever it had buffered was sent: every
            # request still on the server is counted.
            info = await js.consumer_info(spec.stream, spec.durable)
            assert (info.num_waiting or 0) <= 1, (
                f"{info.num_waiting} pull requests reached the server together after the "
                "outage: all but one are orphans that give messages back until they die"
            )
            await js.publish(namespace.submit("probe"), b"after the outage")
            await asyncio.wait_for(arrived.wait(), 10)
            assert handled == {b"after the outage": 1}
        finally:
            stopping.set()
            await asyncio.wait_for(running, 15)
            await nc.close()
