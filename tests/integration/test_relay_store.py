"""The relay's replay windows in its bucket: one read per frame, still compare-and-set.

`check_window` hands what it read to `mark_window`, which writes naming that revision
instead of reading the window again; a window someone wrote in between (another replica,
another frame of the session) makes the write fail and is read again. Real nats-server.
"""

from __future__ import annotations

import msgspec
from nats.aio.client import Client as NATS

from actors.relay import ReplayWindow
from actors.relay._store import RelayStore
from bus import AckInbox
from schemas import Namespace


async def _store(nc: NATS, ns: Namespace) -> RelayStore:
    bucket = ns.bucket("relay")
    acks = AckInbox(nc, timeout=5.0)
    await acks.open()
    return RelayStore(await nc.jetstream().key_value(bucket), acks, bucket)


async def _window(nc: NATS, ns: Namespace, session: str) -> ReplayWindow:
    entry = await (await nc.jetstream().key_value(ns.bucket("relay"))).get(f"win.alice.{session}")
    assert entry.value is not None
    return msgspec.json.decode(entry.value, type=ReplayWindow)


async def test_a_window_is_marked_from_its_check_and_read_again_when_written_since(
    nc: NATS, namespace: Namespace
) -> None:
    store = await _store(nc, namespace)
    first = await store.check_window("alice", "s", 1)
    assert await store.mark_window("alice", "s", 1, first)

    # Two frames checked against the same window; the second is marked after the first was.
    two = await store.check_window("alice", "s", 2)
    three = await store.check_window("alice", "s", 3)
    assert await store.mark_window("alice", "s", 3, three)
    assert await store.mark_window("alice", "s", 2, two)  # stale read: read again, both kept
    assert await _window(nc, namespace, "s") == ReplayWindow(highest=3, seen=0b111)

    # A copy of frame 3 checked before the original was marked: handled already, not marked.
    again = await store.check_window("alice", "t", 3)
    assert await store.mark_window("alice", "t", 3, again)
    assert not await store.mark_window("alice", "t", 3, again)
