"""What guarding a streamed answer's chunks costs, and what it still guarantees
(actors/llm/_chunks.py).

The chunk sender runs on a real client of the session's nats-server, and a subscriber reads
the chunks as the principal that asked would. The guardrails read the whole text so far each
time they run; the sender counts the characters they read (`guarded_chars`), so a long answer's
cost is a number: within a small multiple of the answer's length, not its square.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import nats
import pytest
from nats.aio.client import Client as NATS
from nats.aio.subscription import Subscription

from actors.llm._chunks import GUARD_GROWTH, ChunkSender
from actors.llm._guardrails import guard
from bus import EmbeddedServer
from schemas import Guardrails, LlmChunk, new_id

SECRET = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
COST_BOUND = 40
"""The characters guarded for a long answer's chunks, at most this many times its length."""


def words(length: int, start: int = 0) -> str:
    """Text of `length` characters, words of varying length each ending in a space."""
    text = "".join(f"w{i} {'x' * (i % 7)} " for i in range(start, start + length // 4 + 1))
    return text[:length]


@pytest.fixture
async def client(nats_server: EmbeddedServer) -> AsyncIterator[NATS]:
    connection = await nats.connect(nats_server.url)
    try:
        yield connection
    finally:
        await connection.close()


async def sender_and_reader(client: NATS) -> tuple[ChunkSender, Subscription]:
    subject = f"chunks.t{new_id()}"
    subscription = await client.subscribe(subject)
    await client.flush()
    return ChunkSender(client, subject, new_id(), Guardrails(), "openai"), subscription


async def chunks_until_done(subscription: Subscription) -> list[LlmChunk]:
    found: list[LlmChunk] = []
    while not (found and found[-1].done):
        msg = await subscription.next_msg(timeout=30)
        found.append(msgspec.json.decode(msg.data, type=LlmChunk))
    return found


def answered(text: str) -> str:
    """The answer's text as the gateway guards it whole before `finish`."""
    value = guard(Guardrails(), "response", text).value
    assert isinstance(value, str)
    return value


async def test_guarding_a_long_streamed_answer_reads_it_a_bounded_number_of_times(
    client: NATS,
) -> None:
    """200 KB in 4-character pieces (50,000 pieces): guarded at every piece, the guardrails
    read about 5 GB; guarded as the text grows, a few MB, and the chunks keep pace."""
    text = words(200_000)
    pieces = [text[i : i + 4] for i in range(0, len(text), 4)]
    chunks, subscription = await sender_and_reader(client)
    for count, piece in enumerate(pieces, 1):
        await chunks.text(piece)
        if count % 1000 == 0:  # checked on the way: the old pace passes the bound early
            assert chunks.guarded_chars <= COST_BOUND * len(text), (count, chunks.guarded_chars)
    assert chunks.guarded_chars <= COST_BOUND * len(text), chunks.guarded_chars
    await chunks.finish(answered(text))
    sent = await chunks_until_done(subscription)
    assert "".join(c.text for c in sent) == text
    assert [c.index for c in sent] == list(range(len(sent)))
    while_written = sum(len(c.text) for c in sent if not c.done)
    assert while_written >= len(text) * GUARD_GROWTH // (GUARD_GROWTH + 1) - 16, while_written


async def test_a_short_answer_is_still_sent_piece_by_piece(client: NATS) -> None:
    """A few KB, a word a piece: each word goes out as its own chunk as it is written."""
    pieces = [f"{word} " for word in words(3500).split()]
    chunks, subscription = await sender_and_reader(client)
    for piece in pieces:
        await chunks.text(piece)
    await chunks.finish(answered("".join(pieces)))
    sent = await chunks_until_done(subscription)
    assert [c.text for c in sent[:-1]] == pieces
    assert sent[-1].done and not sent[-1].text


async def test_a_secret_written_after_50_kb_is_never_sent_wherever_a_guard_falls(
    client: NATS,
) -> None:
    """Past 4 KB the text is guarded only as it grows by a sixteenth: the secret, written a
    character at a time, is placed so that the guard falls after each of its characters."""
    head = words(50_000)
    due = len(head) + len(head) // GUARD_GROWTH  # where the next guard falls
    for written_of_secret in range(1, len(SECRET) + 1):
        before = words(due - written_of_secret - len(head) - len("token "), start=20_000)
        text = f"{head}{before}token {SECRET} is the key, keep it."
        assert text.index(SECRET) + written_of_secret == due
        chunks, subscription = await sender_and_reader(client)
        await chunks.text(head)
        for i in range(0, len(before), 8):
            await chunks.text(before[i : i + 8])
        for piece in ["token ", *SECRET, " is ", "the ", "key, ", "keep ", "it."]:
            await chunks.text(piece)
        whole = answered(text)
        await chunks.finish(whole)
        sent = "".join(c.text for c in await chunks_until_done(subscription))
        assert "ghp_" not in sent, (written_of_secret, sent[-80:])
        assert whole.startswith(sent) and "[REDACTED:" in whole
        await subscription.unsubscribe()
