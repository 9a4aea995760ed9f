"""Effects stored as fast batches (bus/_fastbatch.py) on a real server: stored, answered once.

Each test publishes through `FastBatches` into a stream of its own and reads back what the
stream holds, and what came back to the batcher's reply inbox.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from bus import AckInbox, AppendRefused
from bus._fastbatch import FastBatcher


@pytest.fixture
async def batcher(nc: NATS) -> AsyncIterator[FastBatcher]:
    inbox = AckInbox(nc)
    await inbox.open()
    fast = FastBatcher(nc, inbox)
    await fast.open()
    yield fast


async def _stream(nc: NATS, **config: object) -> str:
    name = f"FB{uuid.uuid4().hex[:10]}"
    wanted = {"name": name, "subjects": [f"{name}.>"], "allow_batched": True, **config}
    answer = await nc.request(f"$JS.API.STREAM.CREATE.{name}", json.dumps(wanted).encode())
    assert b'"error"' not in answer.data, answer.data
    return name


async def _stored(nc: NATS, stream: str) -> list[bytes]:
    js = nc.jetstream()
    info = await js.stream_info(stream)
    return [
        (await js.get_msg(stream, seq)).data or b"" for seq in range(1, info.state.messages + 1)
    ]


async def _answers(nc: NATS, batcher: FastBatcher) -> list[Msg]:
    heard: list[Msg] = []

    async def on_answer(msg: Msg) -> None:
        heard.append(msg)

    await nc.subscribe(f"{batcher.reply_prefix}>", cb=on_answer)
    return heard


async def _publish(
    batcher: FastBatcher,
    stream: str,
    datas: list[bytes],
    ids: list[str],
    extra: dict[int, dict[str, str]] | None = None,
) -> list[asyncio.Future[None]]:
    """Publish `datas` as one handled batch's messages (`extra`: more headers, by index)."""
    batches = batcher.begin()
    futures = []
    for index, (data, msg_id) in enumerate(zip(datas, ids, strict=True)):
        headers = {"Nats-Msg-Id": msg_id, **(extra or {}).get(index, {})}
        futures.append(await batches.publish(stream, f"{stream}.m", data, headers))
    await batches.commit()
    await asyncio.wait_for(asyncio.wait(futures), 10)
    return futures


async def test_a_batch_is_stored_in_order_and_answered_once(nc: NATS, batcher: FastBatcher) -> None:
    stream = await _stream(nc)
    heard = await _answers(nc, batcher)
    datas = [b"m%d" % i for i in range(20)]
    futures = await _publish(batcher, stream, datas, [f"id{i}" for i in range(20)])
    assert [f.exception() for f in futures] == [None] * 20
    assert await _stored(nc, stream) == datas
    await nc.flush()
    # The first message's flow-control ack and the commit's PubAck: two answers for twenty.
    assert len(heard) == 2
    assert json.loads(heard[-1].data)["count"] == 20


async def test_a_streams_only_message_goes_as_a_plain_publish(
    nc: NATS, batcher: FastBatcher
) -> None:
    stream = await _stream(nc)
    heard = await _answers(nc, batcher)
    [future] = await _publish(batcher, stream, [b"alone"], ["one"])
    assert future.exception() is None
    assert await _stored(nc, stream) == [b"alone"]
    await nc.flush()
    assert heard == []  # answered on the AckInbox, not as a batch


async def test_a_batch_sent_again_stores_nothing_twice(nc: NATS, batcher: FastBatcher) -> None:
    stream = await _stream(nc)
    datas = [b"m%d" % i for i in range(5)]
    ids = [f"id{i}" for i in range(5)]
    await _publish(batcher, stream, datas, ids)
    again = await _publish(batcher, stream, [*datas, b"new"], [*ids, "id5"])
    assert [f.exception() for f in again] == [None] * 6  # a duplicate is stored already
    assert await _stored(nc, stream) == [*datas, b"new"]


async def test_a_refused_message_ends_the_batch_and_fails_it_and_those_after(
    nc: NATS, batcher: FastBatcher
) -> None:
    stream = await _stream(nc)
    datas = [b"a", b"b", b"c", b"d", b"e"]
    stale = {2: {"Nats-Expected-Last-Subject-Sequence": "99"}}  # a compare-and-set that fails
    futures = await _publish(batcher, stream, datas, [f"id{i}" for i in range(5)], stale)
    assert [f.exception() is None for f in futures] == [True, True, False, False, False]
    refused = futures[2].exception()
    assert isinstance(refused, AppendRefused) and "message 3" in str(refused)
    assert await _stored(nc, stream) == [b"a", b"b"]


async def test_a_message_refused_before_the_batch_counts_fails_the_whole_batch(
    nc: NATS, batcher: FastBatcher
) -> None:
    """Some refusals (a message over the stream's size limit) come as a plain error with no
    count: nothing of the batch is confirmed, and the inputs are retried (their effects that
    were stored are duplicates the second time)."""
    stream = await _stream(nc, max_msg_size=100)
    datas = [b"a", b"b", b"x" * 500, b"d", b"e"]
    futures = await _publish(batcher, stream, datas, [f"id{i}" for i in range(5)])
    assert all(isinstance(f.exception(), AppendRefused) for f in futures)
    assert await _stored(nc, stream) == [b"a", b"b"]  # and nothing after the refused one


async def test_a_stream_that_takes_no_batches_fails_every_message(
    nc: NATS, batcher: FastBatcher
) -> None:
    stream = await _stream(nc, allow_batched=False)
    futures = await _publish(batcher, stream, [b"a", b"b", b"c"], ["a", "b", "c"])
    assert all(isinstance(f.exception(), AppendRefused) for f in futures)
    assert await _stored(nc, stream) == []
    # Refused once, the stream gets plain publishes: the retried effects are stored.
    again = await _publish(batcher, stream, [b"a", b"b", b"c"], ["a", "b", "c"])
    assert [f.exception() for f in again] == [None] * 3
    assert await _stored(nc, stream) == [b"a", b"b", b"c"]


async def test_messages_after_a_batch_ended_early_go_in_a_new_one(
    nc: NATS, batcher: FastBatcher
) -> None:
    """A refusal ends the batch at once (its answer comes before the commit): what the
    handlers publish after that is neither lost nor left waiting."""
    stream = await _stream(nc)
    batches = batcher.begin()

    async def publish(data: bytes, **headers: str) -> asyncio.Future[None]:
        headers["Nats-Msg-Id"] = data.decode()
        return await batches.publish(stream, f"{stream}.m", data, headers)

    futures = [await publish(b"a"), await publish(b"b")]
    stale = {"Nats-Expected-Last-Subject-Sequence": "99"}
    futures += [await publish(b"c", **stale), await publish(b"d")]  # "c" is sent with "d"
    await asyncio.wait_for(asyncio.wait([futures[2]]), 10)  # the refusal ended the batch
    futures += [await publish(b"e"), await publish(b"f"), await publish(b"g")]
    await batches.commit()
    await asyncio.wait_for(asyncio.wait(futures), 10)
    ok = [f.exception() is None for f in futures]
    assert ok[:3] == [True, True, False]
    stored = await _stored(nc, stream)
    datas = [b"a", b"b", b"c", b"d", b"e", b"f", b"g"]
    assert stored == [data for data, fine in zip(datas, ok, strict=True) if fine]
    assert stored[-3:] == [b"e", b"f", b"g"]


async def test_handlers_publishing_at_once_each_get_their_message_stored(
    nc: NATS, batcher: FastBatcher
) -> None:
    stream = await _stream(nc)
    batches = batcher.begin()
    datas = [b"m%d" % i for i in range(30)]
    futures = await asyncio.gather(
        *(
            batches.publish(stream, f"{stream}.m", data, {"Nats-Msg-Id": data.decode()})
            for data in datas
        )
    )
    await batches.commit()
    await asyncio.wait_for(asyncio.wait(futures), 10)
    assert [f.exception() for f in futures] == [None] * 30
    assert sorted(await _stored(nc, stream)) == sorted(datas)
