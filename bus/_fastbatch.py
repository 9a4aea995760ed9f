"""Effects stored as JetStream fast batches: one answer per stream per handled batch.

An actor handling a fetched batch of inputs stores effects of the same kind (the gate's
deliveries, its decisions) one answer each: a `PubAck` back for every message, which with
lazy fsync is about half of what a store costs the actor (`parley bench --only publish`).
A fast batch (nats-server 2.12+, on a stream that allows batched publishes) carries its id,
sequence and operation in each message's reply subject (`<inbox>.<batch id>.<flow>.fail.
<sequence>.<operation>.$FI`) and is answered once, when it is committed: a `PubAck` whose
`count` says how many of its messages the stream has (duplicates of a `Nats-Msg-Id` count as
stored: the earlier copy is). With gap mode `fail`, a message the stream refuses ends the
batch there: the answer's count stops before it, so the messages up to the count are stored
and those after it are not. Each message's future is resolved from that count. A refusal
that comes as a plain error instead (a message over the stream's size limit) confirms
nothing: every message of the batch counts as not stored.

`FastBatches` is one handled batch's set, one fast batch per stream. Each stream's newest
message is held back until the next one comes or the handlers have run: the last goes as the
commit, and a stream with a single message gets it as a plain publish with its own `PubAck`
(bus/_ackinbox.py), since a batch of one would cost a flow-control ack more.

Nothing here waits: the caller settles the futures with its deadline, and an input whose
effect was not confirmed is retried like any other (bus/_outbox.py); its effects, sent again
with the same `Nats-Msg-Id`, are dropped as duplicates. Messages are not atomic: a batch cut
short leaves what it stored, as single publishes would.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import uuid
from dataclasses import dataclass, field

import msgspec
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import PubAck

from bus._ackinbox import AckInbox, AppendRefused, MessageTooLarge, wire_size

__all__ = ("FastBatcher", "FastBatches")

log = logging.getLogger("parley.bus.fastbatch")

_FLOW = 500
"""Messages between the server's flow-control acks (its maximum); they are not waited for."""
_START, _APPEND, _COMMIT = 0, 1, 2
_BATCHES_DISABLED = 10205
"""JetStream's error code for a fast batch sent to a stream without `allow_batched`."""
_SWEEP_AT = 256
"""Open batches beyond which those no longer awaited (their answer lost) are forgotten."""


class _ApiError(msgspec.Struct):
    code: int = 0
    err_code: int = 0
    description: str = ""


class _Answer(msgspec.Struct):
    """A flow-control ack, gap or error report (`type`), or the commit's `PubAck`."""

    type: str = ""
    seq: int = 0
    count: int | None = None
    batch: str = ""
    """Set in a commit's `PubAck`; a `PubAck` without it comes from a server that stored the
    message as a plain publish: it takes no fast batches."""
    error: _ApiError | None = None


_decode = msgspec.json.Decoder(_Answer).decode


@dataclass(slots=True)
class _Held:
    """A stream's newest message, not sent yet: the commit, if no other follows."""

    subject: str
    data: bytes
    headers: dict[str, str]
    future: asyncio.Future[None]


@dataclass(slots=True)
class _Batch:
    """One stream's fast batch: the futures of its messages, by batch sequence - 1."""

    id: str
    stream: str
    futures: list[asyncio.Future[None]] = field(default_factory=list)
    refused: str = ""
    """Why the stream refused a message, when it said (the batch ended before it)."""


class FastBatcher:
    """One runtime's fast batches: the reply inbox their answers come to."""

    def __init__(self, nc: NATS, inbox: AckInbox) -> None:
        self._nc = nc
        self.inbox = inbox
        """Where a stream's only message goes, as a plain publish."""
        self._prefix = ""
        self._open: dict[str, _Batch] = {}
        self._sub: Subscription | None = None
        self._ids = itertools.count(1)
        self._run = uuid.uuid4().hex[:12]
        self.unbatched: set[str] = set()
        """Streams that refused a fast batch (no `allow_batched`, or a server without them):
        their messages go as plain publishes from then on."""

    async def open(self) -> None:
        """Subscribe the reply inbox (idempotent)."""
        if self._sub is None:
            self._prefix = self._nc.new_inbox() + "."
            self._sub = await self._nc.subscribe(f"{self._prefix}>", cb=self._on_answer)

    def begin(self) -> FastBatches:
        """The fast batches of one handled batch of inputs."""
        if self._sub is None:
            raise RuntimeError("FastBatcher.begin before open()")
        return FastBatches(self)

    @property
    def max_payload(self) -> int:
        return self._nc.max_payload

    @property
    def reply_prefix(self) -> str:
        """The subject prefix every answer to a fast batch comes under."""
        return self._prefix

    def is_open(self, batch: _Batch) -> bool:
        """Whether `batch` still takes messages (not answered, failed or given up)."""
        return batch.id in self._open

    def new_batch(self, stream: str) -> _Batch:
        if len(self._open) >= _SWEEP_AT:  # forget batches whose caller gave up waiting
            for done in [b for b in self._open.values() if all(f.done() for f in b.futures)]:
                del self._open[done.id]
        batch = _Batch(f"{self._run}{next(self._ids)}", stream)
        self._open[batch.id] = batch
        return batch

    async def send(self, batch: _Batch, held: _Held, operation: int) -> None:
        """Send `held` as the batch's next message (`_COMMIT`: its last)."""
        batch.futures.append(held.future)
        sequence = len(batch.futures)
        if operation != _COMMIT:
            operation = _START if sequence == 1 else _APPEND
        reply = f"{self._prefix}{batch.id}.{_FLOW}.fail.{sequence}.{operation}.$FI"
        await self._nc.publish(held.subject, held.data, reply=reply, headers=held.headers)

    def fail(self, batch: _Batch, reason: str) -> None:
        """Give up on `batch`: every message not yet confirmed counts as not stored."""
        self._open.pop(batch.id, None)
        for future in batch.futures:
            if not future.done():
                future.set_exception(AppendRefused(0, 0, reason))

    async def _on_answer(self, msg: Msg) -> None:
        batch = self._open.get(msg.subject[len(self._prefix) :].split(".", 1)[0])
        if batch is None:
            return  # answered already, or a batch this process gave up on
        if msg.headers is not None and msg.headers.get("Status") == "503":
            self.fail(batch, "no stream listens on this subject")
            return
        try:
            answer = _decode(msg.data)
        except msgspec.DecodeError:
            self.fail(batch, f"unreadable answer {msg.data[:100]!r}")
            return
        if answer.type == "err" and answer.error is not None:
            batch.refused = f"message {answer.seq}: {answer.error.description}"
        elif answer.type:
            return  # flow control, or a gap (gap mode `fail` commits at it: the count says)
        elif answer.error is not None:
            if answer.error.err_code == _BATCHES_DISABLED:
                self.unbatched.add(batch.stream)
            self.fail(
                batch, f"{answer.error.code}/{answer.error.err_code}: {answer.error.description}"
            )
        elif not answer.batch:  # stored as a plain publish: confirmed again by the retry
            self.unbatched.add(batch.stream)
            self.fail(batch, "the server takes no fast batches")
        else:
            self._settle(batch, answer.count or 0)

    def _settle(self, batch: _Batch, count: int) -> None:
        """The commit's answer: the first `count` messages are stored, the rest are not."""
        self._open.pop(batch.id, None)
        for index, future in enumerate(batch.futures):
            if future.done():
                continue
            if index < count:
                future.set_result(None)
            else:
                why = batch.refused or "the stream ended the batch before it"
                future.set_exception(AppendRefused(0, 0, f"not stored: {why}"))


class FastBatches:
    """The effects of one handled batch of inputs, one fast batch per stream."""

    __slots__ = ("_batcher", "_by_stream", "_held")

    def __init__(self, batcher: FastBatcher) -> None:
        self._batcher = batcher
        self._by_stream: dict[str, _Batch] = {}
        self._held: dict[str, _Held] = {}

    async def publish(
        self, stream: str, subject: str, data: bytes, headers: dict[str, str]
    ) -> asyncio.Future[None]:
        """Queue one message of `stream`; its future resolves once the stream answers the
        commit (or, for a stream's only message, its own publish).

        Raises:
            MessageTooLarge: payload and headers exceed the server's `max_payload`.
            Exception: nats-py could not send the message held before this one; that
                batch is given up (its futures fail) and this message is not queued.
        """
        size = wire_size(data, headers)
        if size > self._batcher.max_payload:
            raise MessageTooLarge(size, self._batcher.max_payload)
        # Everything up to the send is synchronous, so handlers publishing concurrently
        # still give each message one place in its batch, in the order they are sent.
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        held = _Held(subject, data, headers, future)
        if stream in self._batcher.unbatched:
            await self._plain(held)
            return future
        previous, self._held[stream] = self._held.get(stream), held
        if previous is None:
            return future
        batch = self._by_stream.get(stream)
        if batch is None or not self._batcher.is_open(batch):  # a new one after an answer
            batch = self._by_stream[stream] = self._batcher.new_batch(stream)
        try:
            await self._batcher.send(batch, previous, _APPEND)
        except BaseException:
            if self._by_stream.get(stream) is batch:
                del self._by_stream[stream]
            if self._held.get(stream) is held:
                del self._held[stream]
            self._batcher.fail(batch, "not sent")
            future.cancel()
            raise
        return future

    async def _plain(self, held: _Held) -> None:
        """Send `held` as a single publish; its future follows the `PubAck`."""
        answer = await self._batcher.inbox.publish(held.subject, held.data, held.headers)
        answer.add_done_callback(functools.partial(_follow, held.future))

    async def commit(self) -> None:
        """Send each stream's last message: the commit of its batch, or a plain publish."""
        held, self._held = self._held, {}
        batches, self._by_stream = self._by_stream, {}
        for stream, last in held.items():
            batch = batches.get(stream)
            if batch is not None and not self._batcher.is_open(batch):
                batch = None  # answered early (a refusal ended it): the last goes alone
            try:
                if batch is None:
                    await self._plain(last)
                else:
                    await self._batcher.send(batch, last, _COMMIT)
            except Exception as exc:  # the inputs are retried: their effects were not confirmed
                log.warning("could not commit a fast batch", extra={"error": repr(exc)})
                if batch is not None:
                    self._batcher.fail(batch, f"commit not sent: {exc!r}")
                if not last.future.done():
                    last.future.set_exception(exc)


def _follow(future: asyncio.Future[None], answer: asyncio.Future[PubAck]) -> None:
    """Resolve `future` as the plain publish's `answer` was."""
    if future.done():
        return
    if answer.cancelled():
        future.cancel()
    elif (exc := answer.exception()) is not None:
        future.set_exception(exc)
    else:
        future.set_result(None)
