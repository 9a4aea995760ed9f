"""`waited`: what a command awaits ends with its result, its timeout, or the lost connection,
whichever comes first (tools/_waiting.py)."""

from __future__ import annotations

import asyncio

import pytest

from tools._waiting import ConnectionLost, Watch, lost_line, waited

URL = "nats://127.0.0.1:4222"


async def test_the_result_comes_back_while_the_connection_holds() -> None:
    ready: asyncio.Queue[str] = asyncio.Queue()
    ready.put_nowait("news")
    assert await waited(ready.get(), 1.0, Watch(URL)) == "news"


async def test_silence_past_the_timeout_is_a_timeout() -> None:
    never: asyncio.Queue[str] = asyncio.Queue()
    with pytest.raises(TimeoutError):
        await waited(never.get(), 0.05, Watch(URL))


async def test_a_lost_connection_ends_a_wait_that_has_no_limit() -> None:
    watch, never = Watch(URL), asyncio.Queue[str]()
    waiting = asyncio.create_task(waited(never.get(), None, watch))
    await watch.on_closed()  # nats-py's closed callback, the command not closing
    with pytest.raises(ConnectionLost) as lost:
        await asyncio.wait_for(waiting, 1.0)
    assert lost.value.url == URL


async def test_a_wait_begun_after_the_loss_ends_at_once() -> None:
    watch = Watch(URL)
    await watch.on_closed()
    with pytest.raises(ConnectionLost):
        await waited(asyncio.Queue[str]().get(), None, watch)


async def test_the_commands_own_close_is_no_loss() -> None:
    watch = Watch(URL)
    watch.closing = True
    await watch.on_closed()
    assert not watch.lost.is_set()


def test_the_lost_line_names_the_session_and_its_stop_command() -> None:
    assert lost_line(URL, None) == (
        f"lost the connection to nats at {URL}: is `parley up` still running?"
    )
    line = lost_line(URL, "s-1")
    assert "the session s-1 may still be running" in line
    assert line.endswith("stop it with `parley collab --stop s-1`")
