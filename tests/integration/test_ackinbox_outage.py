"""A request in flight when the connection drops fails as soon as it is back (`PublishLost`;
nats-py's own requests, key-value reads among them, with its `TimeoutError`).

Its answer, or the request itself, went with the connection: a server killed and started
again knows nothing of it. Each such request used to wait out its timeout (the runtime's and
the gate's: half an ack wait, 15 s), so every actor that had a store or a read in flight when
`parley up`'s server was killed stood still that long after the server was back; one session
in tests/integration/test_up_owns.py ran out its 60 s turn timeout behind such stalls.

Against a real nats-server, frozen (SIGSTOP) so that nothing sent to it is answered, then
killed and restarted on the same port and store; the connection is made by `bus.connect` with
the `Link` the runtime gives its inbox and the gate its reads, and which fails nats-py's own
requests (bus/_lost_requests.py).
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import PubAck, StreamConfig

from bus import (
    AckInbox,
    EmbeddedServer,
    Link,
    PublishLost,
    connect,
    load_settings,
)
from bus._last_values import LastValues

NEVER_S = 60.0
"""The requests' own timeouts: far past the test's bound, so only the outage can end a wait."""
PROMPTLY_S = 10.0
"""How long after the connection is back a lost request may take to fail (in practice at once)."""


async def test_what_was_in_flight_fails_once_back_and_what_was_buffered_is_stored(
    tmp_path: Path,
) -> None:
    with EmbeddedServer(tmp_path / "nats") as server:
        link = Link()
        dropped = asyncio.Event()
        link.watch(dropped.set)
        nc = await connect(load_settings(nats_url=server.url), "probe", link=link)
        try:
            js = nc.jetstream()
            await js.add_stream(StreamConfig(name="PROBE", subjects=["probe.>"], allow_direct=True))
            inbox = AckInbox(nc, timeout=NEVER_S, link=link)
            await inbox.open()
            last = LastValues(nc, link=link)
            await last.open()
            kv = await nc.jetstream(timeout=NEVER_S).create_key_value(bucket="probe")
            assert server.pid is not None
            os.kill(server.pid, signal.SIGSTOP)  # takes what is sent, answers nothing
            stored = await inbox.publish("probe.one", b"unanswered", {"Nats-Msg-Id": "one"})
            acked = await inbox.ack("probe.ack")
            read = asyncio.create_task(last.read("PROBE", ["probe.one"], timeout=NEVER_S))
            asked = asyncio.create_task(kv.get("session"))
            info = asyncio.create_task(nc.jetstream(timeout=NEVER_S).stream_info("PROBE"))
            await asyncio.sleep(0)  # one turn of the loop: each task's first step sends it
            assert last.pending() == 1
            assert len(nc._resp_map) == 2  # nats-py's own requests, both in flight
            server.kill()
            await asyncio.wait_for(dropped.wait(), PROMPTLY_S)
            buffered = await inbox.publish("probe.two", b"sent while down", {"Nats-Msg-Id": "two"})
            server.start()
            await asyncio.wait_for(link.wait_up(nc), 20)
            for lost, failure in ((stored, PublishLost), (acked, PublishLost), (read, PublishLost),
                                  (asked, NatsTimeout), (info, NatsTimeout)):  # fmt: skip
                done, _ = await asyncio.wait({lost}, timeout=PROMPTLY_S)
                assert done, f"{lost} still waits for its timeout after the connection is back"
                assert isinstance(lost.exception(), failure), lost.exception()
            answer = await asyncio.wait_for(buffered, PROMPTLY_S)
            assert isinstance(answer, PubAck) and answer.stream == "PROBE"
            assert inbox.pending() == 0
        finally:
            await nc.close()
