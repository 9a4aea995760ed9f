"""The relay's replay windows in its bucket: one read per frame, still compare-and-set.

`check_window` hands what it read to `mark_window`, which writes naming that revision
instead of reading the window again; a window someone wrote in between (another replica,
another frame of the session) makes the write fail and is read again. Real nats-server.
"""

from __future__ import annotations

import msgspec
from nats.aio.client import Client as NATS

from actors.relay import ReplayWindow
from actors.relay._store import Numbered, RelayStore
from schemas import Namespace


async def _store(nc: NATS, ns: Namespace) -> RelayStore:
    return RelayStore(await nc.jetstream().key_value(ns.bucket("relay")))


async def _window(nc: NATS, ns: Namespace, key: str) -> ReplayWindow:
    entry = await (await nc.jetstream().key_value(ns.bucket("relay"))).get(key)
    assert entry.value is not None
    return msgspec.json.decode(entry.value, type=ReplayWindow)


def _d(seq: int) -> Numbered:
    return Numbered(seq, "deliveries")


async def test_a_window_is_marked_from_its_check_and_read_again_when_written_since(
    nc: NATS, namespace: Namespace
) -> None:
    store = await _store(nc, namespace)
    first = await store.check_window("alice", "s", _d(1))
    assert await store.mark_window("alice", "s", _d(1), first)

    # Two frames checked against the same window; the second is marked after the first was.
    two = await store.check_window("alice", "s", _d(2))
    three = await store.check_window("alice", "s", _d(3))
    assert await store.mark_window("alice", "s", _d(3), three)
    assert await store.mark_window("alice", "s", _d(2), two)  # stale read: read again, both kept
    assert await _window(nc, namespace, "win.alice.s.d") == ReplayWindow(highest=3, seen=0b111)

    # A copy of frame 3 checked before the original was marked: handled already, not marked.
    again = await store.check_window("alice", "t", _d(3))
    assert await store.mark_window("alice", "t", _d(3), again)
    assert not await store.mark_window("alice", "t", _d(3), again)


async def test_each_numbering_has_its_own_window(nc: NATS, namespace: Namespace) -> None:
    """A peer numbers its deliveries' frames by its deliver stream and its own refusals by its
    relay bucket: two unrelated counters, so one session keeps a window for each. In one
    window, refusal 3 after delivery 900 would be refused as too old."""
    store = await _store(nc, namespace)
    assert await store.mark_window("alice", "s", _d(900))
    by_relay = Numbered(3, "relay")
    assert await store.mark_window(
        "alice", "s", by_relay, await store.check_window("alice", "s", by_relay)
    )
    assert await _window(nc, namespace, "win.alice.s") == ReplayWindow(highest=3, seen=1)
    assert await _window(nc, namespace, "win.alice.s.d") == ReplayWindow(highest=900, seen=1)
