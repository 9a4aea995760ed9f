"""An actor and a server that is down for a while (being restarted by `parley up`).

An actor asked to stop while its server is gone stops cleanly: exit 0, no traceback (one that
crashed in its drain looked like a crash-looping one). An actor started while its server is
down waits for it (`server_wait_s`) instead of exiting at once, being restarted at once, and
using up its supervisor's restart intensity in a few seconds.
"""

from __future__ import annotations

import signal

from bus import EmbeddedServer
from schemas import Namespace
from tests.support.processes import READY, parley_env, start_actor

REFUSED = r'"msg":"nats error","error":".*Connection refused'
OUTAGE_ATTEMPTS = 8
"""Reconnect attempts (0.5 s apart) before the stop: long enough for the actor to have written
to the connection during the outage (pull requests, a heartbeat), which nats-py keeps to send
once it reconnects."""


async def test_an_actor_stopped_while_its_server_is_down_exits_cleanly(
    private_server: EmbeddedServer, namespace: Namespace
) -> None:
    env = parley_env(private_server.url, namespace.root, monitor_url=private_server.monitor_url)
    actor = start_actor("echo", "echo-a", env)
    try:
        await actor.wait_line(READY)
        private_server.kill()
        index = 0
        for _ in range(OUTAGE_ATTEMPTS):
            index, _ = await actor.wait_line(REFUSED, start=index + 1)
        actor.signal(signal.SIGTERM)
        assert await actor.wait_exit(timeout=15) == 0, actor.lines[-5:]
        assert not [line for line in actor.lines if "Traceback" in line or "crashed" in line]
        await actor.wait_line(r'"msg":"stopped","exit_code":0')
    finally:
        actor.close()


async def test_an_actor_started_while_its_server_is_down_waits_for_it(
    private_server: EmbeddedServer, namespace: Namespace
) -> None:
    env = parley_env(private_server.url, namespace.root, monitor_url=private_server.monitor_url)
    private_server.kill()
    actor = start_actor("echo", "echo-a", env)
    try:
        await actor.wait_line(r'"msg":"server unreachable at start: waiting for it"')
        private_server.start()  # same ports and store, as `parley up` restarts it
        await actor.wait_line(READY)
        actor.signal(signal.SIGTERM)
        assert await actor.wait_exit(timeout=15) == 0, actor.lines[-5:]
    finally:
        actor.close()


async def test_an_actor_waiting_for_its_server_stops_when_asked(
    private_server: EmbeddedServer, namespace: Namespace
) -> None:
    env = parley_env(private_server.url, namespace.root, monitor_url=private_server.monitor_url)
    private_server.kill()
    actor = start_actor("echo", "echo-a", env)
    try:
        await actor.wait_line(r'"msg":"server unreachable at start: waiting for it"')
        actor.signal(signal.SIGTERM)
        assert await actor.wait_exit(timeout=15) == 0, actor.lines[-5:]
    finally:
        actor.close()
