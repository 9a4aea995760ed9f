"""A frame in flight to the gateway when its server goes fails as soon as the gateway is back.

The relay's own connection to the gateway had a `Link` for its reads but not for its stores:
a frame sent to a server that then died waited out the gateway's store timeout (5 s) after
the server was back, and with it the input it carried. Its stores now fail with
`PublishLost` once the connection is back, and nats-py's own requests with its timeout
(bus/_lost_requests.py), as an actor's connection does.

Against a real nats-server, frozen (SIGSTOP) so that the frame is taken and not answered,
then killed and restarted on the same port and store; the store timeout is raised far past the
test's bound, so only the outage can end the wait.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from actors.relay import DeviceKeys, Gateway
from bus import EmbeddedServer, PublishLost
from tests.support.processes import stopped

NEVER_S = 60.0
PROMPTLY_S = 20.0
"""From the restart: the server's start and the client's reconnect, then the failure at once."""


async def test_a_frame_in_flight_when_the_gateway_dies_fails_once_it_is_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("actors.relay._gateway._STORE_TIMEOUT_S", NEVER_S)
    me, peer = DeviceKeys.generate().device_id, DeviceKeys.generate().device_id
    with EmbeddedServer(tmp_path / "nats") as server:
        gateway = Gateway(server.url, "gwoutage", me, nkey_seed_file=None, ack_wait_s=30)
        await gateway.connect()
        try:
            assert (await (await gateway.send(peer, b"before", "one"))).seq == 1
            assert server.pid is not None
            os.kill(server.pid, signal.SIGSTOP)  # takes what is sent, answers nothing
            await stopped(server.pid)  # not answering a frame sent a moment too early
            in_flight = await gateway.send(peer, b"unanswered", "two")
            connection = gateway._nc
            assert connection is not None
            # nats-py's flusher answers this once it has written the buffer to the socket.
            await connection._flush_pending(force_flush=True)
            assert connection.pending_data_size == 0  # sent: held by the frozen server
            server.kill()
            server.start()
            done, _ = await asyncio.wait({in_flight}, timeout=PROMPTLY_S)
            assert done, "the frame still waits for its store timeout after the server is back"
            assert isinstance(in_flight.exception(), PublishLost), in_flight.exception()
            # Sent again under its message id, it is stored (or found stored) once.
            again = await asyncio.wait_for(await gateway.send(peer, b"unanswered", "two"), 10)
            assert again.stream == gateway.stream
        finally:
            await gateway.close()
