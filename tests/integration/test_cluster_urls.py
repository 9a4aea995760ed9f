"""An actor given a list of servers connects to whichever answers, and fails over to another
when its server dies."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from bus import EmbeddedServer, FsyncCheckError, Uptime, check_fsync, connect, load_settings


class _Reconnects(Uptime):
    """The connection's uptime, with an event for each time it hears again."""

    def __init__(self) -> None:
        super().__init__()
        self.reconnected = asyncio.Event()

    def mark(self) -> None:
        super().mark()
        self.reconnected.set()


def _closed_port() -> int:
    """A loopback port nothing listens on (the OS just handed it out and it was let go)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_the_first_server_that_answers_is_used(private_server: EmbeddedServer) -> None:
    dead = f"nats://127.0.0.1:{_closed_port()}"
    settings = load_settings(nats_url=f"{dead},{private_server.url}")
    nc = await connect(settings, "probe", reconnect_forever=False)
    try:
        assert nc.connected_url is not None
        assert nc.connected_url.port == private_server.port
    finally:
        await nc.close()


async def test_a_lost_server_is_replaced_by_another_of_the_list(tmp_path: Path) -> None:
    with EmbeddedServer(tmp_path / "a") as first, EmbeddedServer(tmp_path / "b") as second:
        settings = load_settings(nats_url=f"{first.url},{second.url}")
        uptime = _Reconnects()
        nc = await connect(settings, "probe", uptime=uptime)
        uptime.reconnected.clear()  # the first connection counts too
        try:
            assert nc.connected_url is not None
            gone = first if nc.connected_url.port == first.port else second
            other = second if gone is first else first
            gone.kill()
            await asyncio.wait_for(uptime.reconnected.wait(), timeout=15)
            assert nc.connected_url is not None and nc.connected_url.port == other.port
            await nc.publish("anything", b"still talking")
            await nc.flush(timeout=5)
        finally:
            await nc.close()


async def test_every_monitor_that_answers_must_fsync(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{_closed_port()}"
    with (
        EmbeddedServer(tmp_path / "sync") as sync,
        EmbeddedServer(tmp_path / "lazy", sync_always=False) as lazy,
    ):
        assert await check_fsync(load_settings(monitor_url=f"{dead},{sync.monitor_url}")) is True
        both = load_settings(monitor_url=f"{sync.monitor_url},{lazy.monitor_url}")
        with pytest.raises(FsyncCheckError, match=str(lazy.monitor_port)):
            await check_fsync(both)
        allowed = both.model_copy(update={"allow_lazy_fsync": True})
        assert await check_fsync(allowed) is False
    with pytest.raises(OSError):
        await check_fsync(load_settings(monitor_url=dead))
