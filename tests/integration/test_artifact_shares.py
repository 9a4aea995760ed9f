"""Each person's and agent's share of the artifact store (bus/_shares.py),
counted in the runtime's `tool_runs` bucket on a real nats-server.

Time is the shares' own clock, moved on by the test instead of waited for; the store's
retention itself (the object store's age limit) is in tests/integration/test_retention.py,
the runtime refusing a step's upload past a share in test_tool_runtime_artifacts.py.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client as NATS

from actors.tools import (
    ArtifactShareExceeded,
    ArtifactStore,
    ArtifactStoreError,
    ArtifactUri,
    stored_bytes,
)
from bus import Payer, ShareExceeded, Shares, usage_key
from schemas import Namespace

ALICE, BOB, AGENT = Payer("person", "alice"), Payer("person", "bob"), Payer("agent", "gpt")


class Clock:
    """Seconds since the epoch, moved on by the test."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


async def _shares(
    nc: NATS,
    namespace: Namespace,
    clock: Clock,
    *,
    per_person: int = 1000,
    per_agent: int = 10_000,
    retention_s: float = 64.0,
) -> Shares:
    kv = await nc.jetstream().key_value(namespace.bucket("tool_runs"))
    return Shares(
        kv,
        per_person=per_person,
        per_agent=per_agent,
        retention_s=retention_s,
        clock=clock,
    )


async def test_concurrent_charges_of_one_person_never_pass_the_share(
    nc: NATS, namespace: Namespace
) -> None:
    shares = await _shares(nc, namespace, Clock())
    outcomes = await asyncio.gather(
        *(shares.charge([ALICE, AGENT], 100) for _ in range(16)), return_exceptions=True
    )
    refused = [o for o in outcomes if isinstance(o, ShareExceeded)]
    assert len(refused) == 6, outcomes  # ten of 100 bytes fit 1000, whatever the order
    assert await shares.used(ALICE) == 1000
    assert await shares.used(AGENT) == 1000  # the refused ones were given back
    assert await shares.used(BOB) == 0


async def test_a_refusal_says_whose_share_and_when_it_comes_back(
    nc: NATS, namespace: Namespace
) -> None:
    clock = Clock()
    shares = await _shares(nc, namespace, clock, per_agent=1500)
    await shares.charge([ALICE, AGENT], 900)
    with pytest.raises(ShareExceeded, match=r"person alice.*share is 1000.*expire by"):
        await shares.charge([ALICE, AGENT], 200)
    await shares.charge([BOB, AGENT], 500)
    with pytest.raises(ShareExceeded, match=r"agent gpt.*artifact_bytes_per_agent"):
        await shares.charge([BOB, AGENT], 200)
    assert await shares.used(BOB) == 500  # charged first, given back when the agent refused


async def test_bytes_count_until_what_they_stored_has_expired(
    nc: NATS, namespace: Namespace
) -> None:
    clock = Clock()
    shares = await _shares(nc, namespace, clock, retention_s=64.0)  # windows of one second
    await shares.charge([ALICE], 800)
    clock.now += 30
    await shares.charge([ALICE], 150)
    clock.now += 35.5  # the first object may live until its window's end plus 64 s: a
    assert await shares.used(ALICE) == 950  # window more is counted, for late chunks
    clock.now += 1
    assert await shares.used(ALICE) == 150
    await shares.charge([ALICE], 800)


async def test_a_changed_retention_keeps_what_was_counted(nc: NATS, namespace: Namespace) -> None:
    clock = Clock()
    before = await _shares(nc, namespace, clock, retention_s=64.0)
    await before.charge([ALICE], 900)
    after = await _shares(nc, namespace, clock, retention_s=6400.0)  # windows of 100 s
    assert await after.used(ALICE) == 900
    with pytest.raises(ShareExceeded):
        await after.charge([ALICE], 200)
    clock.now += 6500
    assert await after.used(ALICE) == 0


async def test_the_store_charges_new_objects_only_and_gives_back_what_it_did_not_store(
    nc: NATS, namespace: Namespace
) -> None:
    shares = await _shares(nc, namespace, Clock(), per_person=1 << 20, per_agent=1 << 20)
    store = ArtifactStore(nc.jetstream(), namespace, "demo", shares=shares)
    stream = f"OBJ_{namespace.bucket('artifacts')}"
    data = os.urandom(300 * 1024)
    await store.put_bytes("s1", data, name="a.bin", step_id="1", payers=[ALICE, AGENT])
    await store.put_bytes("s1", data, name="again.bin", step_id="2", payers=[ALICE, AGENT])
    charged = stored_bytes(len(data), store.chunk_bytes)  # its bytes and its records'
    assert len(data) < charged < len(data) + 2048
    assert await shares.used(ALICE) == charged  # the same object is not charged twice

    before = (await nc.jetstream().stream_info(stream)).state.messages
    with pytest.raises(ArtifactShareExceeded, match="person alice"):
        await store.put_bytes(
            "s1", os.urandom(800 * 1024), name="big", step_id="3", payers=[ALICE, AGENT]
        )
    uri = store.uri("s1", b"what the uri names")

    async def other_bytes() -> AsyncIterator[bytes]:
        yield b"not what the uri names"

    with pytest.raises(ArtifactStoreError):
        await store.put(ArtifactUri.parse(str(uri)), other_bytes(), step_id="4", payers=[BOB])
    assert await shares.used(BOB) == 0  # a write that failed is given back
    assert (await nc.jetstream().stream_info(stream)).state.messages == before
    with pytest.raises(ArtifactStoreError, match="stored for nobody"):
        await store.put_bytes("s1", b"anonymous", name="x", step_id="5")


async def test_a_write_cancelled_midway_leaves_no_chunk_and_no_charge(
    nc: NATS, namespace: Namespace
) -> None:
    """A step cut short by its timeout while its file is being stored: the chunks already
    published are deleted and the charge given back, neither left without the other."""
    shares = await _shares(nc, namespace, Clock(), per_person=1 << 20, per_agent=1 << 20)
    store = ArtifactStore(nc.jetstream(), namespace, "demo", shares=shares)
    stream = f"OBJ_{namespace.bucket('artifacts')}"
    before = (await nc.jetstream().stream_info(stream)).state.messages
    data = os.urandom(3 * store.chunk_bytes)
    first_published, never = asyncio.Event(), asyncio.Event()

    async def stalling() -> AsyncIterator[bytes]:
        yield data[: store.chunk_bytes]
        yield data[store.chunk_bytes : 2 * store.chunk_bytes]
        first_published.set()  # asked for the third: the first two were published
        await never.wait()

    uri = store.uri("s1", data)
    writing = asyncio.create_task(store.put(uri, stalling(), step_id="1", payers=[ALICE]))
    await first_published.wait()
    assert (await nc.jetstream().stream_info(stream)).state.messages > before
    writing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await writing
    assert (await nc.jetstream().stream_info(stream)).state.messages == before
    assert await shares.used(ALICE) == 0


async def test_an_unreadable_count_refuses_the_write_rather_than_free_the_share(
    nc: NATS, namespace: Namespace
) -> None:
    shares = await _shares(nc, namespace, Clock())
    kv = await nc.jetstream().key_value(namespace.bucket("tool_runs"))
    await shares.charge([ALICE], 900)
    await kv.put(usage_key(ALICE), b"not a count")
    with pytest.raises(RuntimeError, match="cannot be read"):
        await shares.charge([ALICE], 900)
    assert usage_key(Payer("person", "alice@example.com")).startswith("usage.person.h.")


async def test_content_stored_half_its_age_ago_is_stored_again_not_reused(
    nc: NATS, namespace: Namespace
) -> None:
    """A URI handed out must not name bytes about to expire: an object that has lived half
    the store's age limit is stored anew (and charged) rather than reused."""
    shares = await _shares(nc, namespace, Clock(), per_person=1 << 20, per_agent=1 << 20)
    store = ArtifactStore(nc.jetstream(), namespace, "demo", shares=shares)
    assert await store.check() == 7 * 24 * 3600  # the default retention, as provisioned
    stream = f"OBJ_{namespace.bucket('artifacts')}"
    await store.put_bytes("s1", b"log line\n", name="log", step_id="1", payers=[ALICE])
    stored = (await nc.jetstream().stream_info(stream)).state.messages
    await store.put_bytes("s1", b"log line\n", name="log", step_id="2", payers=[ALICE])
    assert (await nc.jetstream().stream_info(stream)).state.messages == stored  # reused
    store.kept_s = 0.001  # as if it had been stored long ago under this age limit
    text = await store.put_bytes("s1", b"log line\n", name="log", step_id="3", payers=[ALICE])
    assert (await nc.jetstream().stream_info(stream)).state.messages > stored
    assert await shares.used(ALICE) == 2 * stored_bytes(9, store.chunk_bytes)
    assert await store.get(ArtifactUri.parse(text)) == b"log line\n"
