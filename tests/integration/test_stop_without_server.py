"""An actor and a server that is down for a while (being restarted by `parley up`).

An actor asked to stop while its server is gone stops cleanly: exit 0, no traceback (one that
crashed in its drain looked like a crash-looping one). An actor started while its server is
down waits for it (`server_wait_s`) instead of exiting at once, being restarted at once, and
using up its supervisor's restart intensity in a few seconds; and one whose server stays away
exits unavailable once `server_wait_s` ran out. With or without a monitoring URL: without one,
nats-py's first connect used to retry for ever, deaf to the stop and to the deadline.
"""

from __future__ import annotations

import signal

import pytest

from bus import EmbeddedServer, ExitCode
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


def _env(server: EmbeddedServer, namespace: Namespace, monitored: bool) -> dict[str, str]:
    """A child's settings, with the server's monitoring URL (the fsync check reads it first)
    or without one (the connect is the first thing to meet the outage)."""
    if monitored:
        return parley_env(server.url, namespace.root, monitor_url=server.monitor_url)
    env = parley_env(server.url, namespace.root)
    env.pop("PARLEY_MONITOR_URL", None)
    return env


MONITORED = pytest.mark.parametrize("monitored", [True, False], ids=["monitored", "unmonitored"])


@MONITORED
async def test_an_actor_started_while_its_server_is_down_waits_for_it(
    private_server: EmbeddedServer, namespace: Namespace, monitored: bool
) -> None:
    env = _env(private_server, namespace, monitored)
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


@MONITORED
async def test_an_actor_waiting_for_its_server_stops_when_asked(
    private_server: EmbeddedServer, namespace: Namespace, monitored: bool
) -> None:
    env = _env(private_server, namespace, monitored)
    private_server.kill()
    actor = start_actor("echo", "echo-a", env)
    try:
        await actor.wait_line(r'"msg":"server unreachable at start: waiting for it"')
        actor.signal(signal.SIGTERM)
        assert await actor.wait_exit(timeout=15) == 0, actor.lines[-5:]
    finally:
        actor.close()


@MONITORED
async def test_an_actor_whose_server_stays_away_exits_unavailable(
    private_server: EmbeddedServer, namespace: Namespace, monitored: bool
) -> None:
    env = {**_env(private_server, namespace, monitored), "PARLEY_SERVER_WAIT_S": "2"}
    private_server.kill()
    actor = start_actor("echo", "echo-a", env)
    try:
        await actor.wait_line(r'"msg":"server unreachable at start: waiting for it"')
        assert await actor.wait_exit(timeout=20) == ExitCode.UNAVAILABLE, actor.lines[-5:]
        await actor.wait_line(r'"msg":"bus unavailable"')
        # What cannot be checked is said once, not at every try of the connect.
        unchecked = [line for line in actor.lines if "cannot verify that nats-server" in line]
        assert len(unchecked) == (0 if monitored else 1), unchecked
    finally:
        actor.close()
