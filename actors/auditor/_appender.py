"""The single writer of the audit chain: pipelined appends at predicted sequences.

Waiting for each append's acknowledgement before hashing the next one would cap the auditor
at one round trip per record. It need not wait: it is the only writer, so the sequence each
append will get is the stream's last sequence plus one, known in advance, and the hash it
chains to is the one it just computed. Every append is published at once with
`Nats-Expected-Last-Sequence` set to the sequence before it, and the acknowledgements settle
later, in bulk (the runtime acks a fact only once its records are stored).

`Nats-Expected-Last-Sequence` (the stream's last sequence), not `...-Last-Subject-Sequence`
(one subject's): the chain runs through the whole stream, across every tenant and profile
subject, so any other write anywhere in it (a second auditor, an operator publishing by
hand) breaks the expectation of the next append, and the server refuses it instead of
letting the chain fork. A per-subject expectation would let a write on another subject pass.

Each append after the first since the head was read also carries `Nats-Expected-Last-Msg-Id`:
the message id of the append before it, which carries this writer's epoch (`<record id>@<epoch>`,
the token of its lease: actors/auditor/_lease.py). An append is stored only right behind its
own predecessor, so once one append of a pipeline is refused, every later one is refused too,
and a writer whose lease was taken over (paused, then resumed with appends still in its
socket) cannot slip any of them in after its successor's first append: its first pending
append expects a last sequence from before the takeover, the others a predecessor of an epoch
that is over. Nothing it sends can land between two records of another epoch.

When the prediction fails (an append refused, unanswered, or answered as a duplicate), the
writer is marked dirty: the next append first waits for every append still in flight, then
re-reads the head from the stream and carries on from there. The facts whose appends failed
are nacked by the runtime and come back. Messages found in the stream that this writer never
sent are reported to `on_foreign`, which records an alert in the chain itself.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import msgspec
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import PubAck
from nats.js.errors import NotFoundError

from actors.auditor._chain import CHECKPOINT_PROFILE, GENESIS, Checkpoint, seal
from bus import (
    MSG_ID,
    AckInbox,
    AppendRefused,
    Link,
    StoredMessage,
    read_history,
    through_elections,
)
from schemas import AuditRecord, encode, utc_now

__all__ = ("EXPECTED_LAST_MSG_ID", "EXPECTED_LAST_SEQ", "ChainAppender", "ForeignWrite")

log = logging.getLogger("parley.actors.auditor")

EXPECTED_LAST_SEQ = "Nats-Expected-Last-Sequence"
EXPECTED_LAST_MSG_ID = "Nats-Expected-Last-Msg-Id"
_LOST_RACE = frozenset({10071, 10070})
"""Wrong expected last sequence, wrong expected last message id: someone else wrote first."""
_record_decoder = msgspec.json.Decoder(AuditRecord)


class ForeignWrite(msgspec.Struct, frozen=True):
    """Messages in the audit stream that this writer did not publish."""

    first_seq: int
    last_seq: int
    subjects: tuple[str, ...]


class ChainAppender:
    """Appends sealed records and signed checkpoints to one audit stream, as its only writer.

    Args:
        nc: The auditor's connection (appends are published on it).
        js: JetStream context of the same connection (for reading the head).
        stream: The audit stream.
        settle_s: How long a re-sync waits for appends still in flight.
        window: How many of the newest messages are read at start to learn which facts are
            already recorded (a restarted auditor gets its unacked facts again).
        on_foreign: Builds the alert record (subject, record) appended when messages this
            writer did not publish are found in the stream.
        on_unvouched: Builds the record appended at start about records (first, last index)
            that no checkpoint pinned before this start.
        epoch: This writer's lease token, appended to every message id it sends.
        may_append: Called right before each append is sent; raises (`LeaseLost`) when this
            writer no longer holds the lease.
    """

    def __init__(
        self,
        nc: NATS,
        js: JetStreamContext,
        stream: str,
        *,
        settle_s: float = 10.0,
        window: int = 4096,
        on_foreign: Callable[[ForeignWrite], tuple[str, AuditRecord]] | None = None,
        on_unvouched: Callable[[int, int], tuple[str, AuditRecord]] | None = None,
        epoch: str = "",
        may_append: Callable[[], None] | None = None,
        link: Link | None = None,
    ) -> None:
        self._js = js
        self._epoch = epoch
        self._may_append = may_append
        self._previous_id: str | None = None
        """Message id of this writer's last append since the head was read."""
        self._stream = stream
        self._settle_s = settle_s
        self._window = window
        self._on_foreign = on_foreign
        self._on_unvouched = on_unvouched
        self._lock = asyncio.Lock()
        # Given the connection's link, an append in flight when it dropped fails once it is
        # back (bus/_ackinbox.py) instead of after `settle_s`: re-synced from the head then.
        self._acks = AckInbox(nc, timeout=settle_s, link=link)
        self._dirty = True
        self._started = False
        self._head = GENESIS
        self._index = 0
        self._head_seq = 0
        self._last_seq = 0
        self._acked_seq = 0
        self._rescan_from = 1
        self.checkpointed = 0
        """Record count of the newest checkpoint known to be stored."""
        self._inflight: set[asyncio.Future[PubAck]] = set()
        self._recorded: OrderedDict[str, asyncio.Future[PubAck] | None] = OrderedDict()
        self._sent: OrderedDict[str, None] = OrderedDict()
        self.resyncs = 0

    async def open(self) -> None:
        """Read the head of the chain and the facts already recorded."""
        await self._acks.open()
        async with self._lock:
            if self._dirty:  # read through an election: starting, nothing waits on the lock
                await through_elections(self._resync, "the audit chain's head")

    @property
    def unpinned(self) -> int:
        """Records appended since the newest checkpoint sent."""
        return self._index - max(self._checkpoint_sent, self.checkpointed)

    @property
    def index(self) -> int:
        """Records in the chain, counting appends not yet acknowledged."""
        return self._index

    def recorded(self, msg_id: str) -> tuple[bool, asyncio.Future[PubAck] | None]:
        """Whether a record with this id is stored (None) or being stored (its future)."""
        if msg_id in self._recorded:
            return True, self._recorded[msg_id]
        return False, None

    def _remember(self, table: OrderedDict[str, Any], key: str, value: object) -> None:
        table[key] = value
        table.move_to_end(key)
        while len(table) > self._window * 2:
            table.popitem(last=False)

    async def append_record(
        self, subject: str, record: AuditRecord, headers: dict[str, str]
    ) -> asyncio.Future[PubAck]:
        """Chain `record` after the head and publish it; return its acknowledgement future."""
        async with self._lock:
            if self._dirty:
                await self._resync()
            return await self._append_locked(subject, record, headers)

    async def _append_locked(
        self, subject: str, record: AuditRecord, headers: dict[str, str]
    ) -> asyncio.Future[PubAck]:
        index = self._index + 1
        chained = msgspec.structs.replace(record, chain_index=index, prev_hash=self._head)
        stored, digest = seal(encode(chained))
        future = await self._publish(subject, stored, record.id, headers)
        self._index, self._head, self._head_seq = index, digest, self._last_seq
        self._remember(self._recorded, record.id, future)
        return future

    async def append_checkpoint(
        self, subject: str, sign: Callable[[Checkpoint], bytes]
    ) -> tuple[asyncio.Future[PubAck], bytes, int] | None:
        """Sign and publish a checkpoint of the chain as it stands, unless nothing is new.

        Returns the acknowledgement future, the signed bytes (for the log) and the record
        count it pins, or None.
        """
        async with self._lock:
            if self._dirty:
                await self._resync()
            if self._index == 0 or self._index <= self._checkpoint_sent:
                return None
            checkpoint = Checkpoint(
                tenant=subject.split(".")[2],
                count=self._index,
                last_seq=self._head_seq,
                head_hash=self._head,
                at=utc_now(),
            )
            signed = sign(checkpoint)
            future = await self._publish(subject, signed, f"checkpoint:{checkpoint.count}", {})
            self._checkpoint_sent = checkpoint.count
            future.add_done_callback(functools.partial(self._checkpoint_stored, checkpoint.count))
            return future, signed, checkpoint.count

    _checkpoint_sent = 0

    def _checkpoint_stored(self, count: int, future: asyncio.Future[PubAck]) -> None:
        if not future.cancelled() and future.exception() is None:
            self.checkpointed = max(self.checkpointed, count)
        else:
            self._checkpoint_sent = min(self._checkpoint_sent, self.checkpointed)

    async def _publish(
        self, subject: str, data: bytes, msg_id: str, headers: dict[str, str]
    ) -> asyncio.Future[PubAck]:
        if self._may_append is not None:
            self._may_append()
        expected = self._last_seq
        stored_id = f"{msg_id}@{self._epoch}" if self._epoch else msg_id
        out = {**headers, MSG_ID: stored_id, EXPECTED_LAST_SEQ: str(expected)}
        if self._previous_id is not None:
            out[EXPECTED_LAST_MSG_ID] = self._previous_id
        future = await self._acks.publish(subject, data, out)
        self._previous_id = stored_id
        self._last_seq = expected + 1
        self._remember(self._sent, stored_id, None)
        self._inflight.add(future)
        future.add_done_callback(functools.partial(self._settled, msg_id, expected + 1))
        return future

    def _settled(self, msg_id: str, predicted: int, future: asyncio.Future[PubAck]) -> None:
        self._inflight.discard(future)
        if future.cancelled() or future.exception() is not None:
            error = future.exception() if not future.cancelled() else None
            if isinstance(error, AppendRefused) and error.err_code not in _LOST_RACE:
                # Not a lost race but the stream refusing (full, with discard new): an alert.
                log.error("audit stream refused an append", extra={"error": str(error)})
            elif not self._dirty:
                shown = "cancelled" if error is None else repr(error)
                log.warning("audit append failed; re-reading the head", extra={"error": shown})
            self._dirty = True
            # Unanswered is not unstored: the re-sync reads from here to find out.
            self._rescan_from = min(self._rescan_from, predicted)
            if self._recorded.get(msg_id) is future:
                del self._recorded[msg_id]
            return
        ack = future.result()
        if ack.duplicate or ack.seq != predicted:
            self._dirty = True  # stored earlier, or elsewhere: the sequence moved unexpectedly
        else:
            self._acked_seq = max(self._acked_seq, ack.seq)
        if self._recorded.get(msg_id) is future:
            self._recorded[msg_id] = None

    async def _resync(self) -> None:
        """Wait for appends in flight, then re-read the head (and spot foreign writes)."""
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=self._settle_s)
        info = await self._js.stream_info(self._stream)
        last = int(info.state.last_seq or 0)
        first_time = not self._started
        if first_time:
            start = max(1, last - self._window + 1)
        else:
            start = min(self._acked_seq + 1, self._rescan_from)
        found_record = False
        foreign: list[StoredMessage] = []
        if last >= start:
            async for message in read_history(self._js, self._stream, start_seq=start):
                if message.seq > last:
                    break
                found_record |= self._learn(message)
                msg_id = message.headers.get(MSG_ID, "")
                if not first_time and msg_id not in self._sent:
                    foreign.append(message)
        if not found_record and start > 1:
            found_record = await self._walk_back(start - 1)
        if not found_record:
            # No record stored at all (refused or unanswered appends of an empty stream, as
            # while it elects a leader): what was predicted for them is forgotten.
            self._head, self._index, self._head_seq = GENESIS, 0, 0
        unvouched = (self.checkpointed + 1, self._index) if first_time else None
        self._last_seq = self._acked_seq = last
        self._previous_id = None
        self._rescan_from = last + 1
        self._started, self._dirty = True, False
        self._checkpoint_sent = max(self._checkpoint_sent, self.checkpointed)
        self.resyncs += 1
        log.info("audit chain head", extra={"index": self._index, "last_seq": last})
        if unvouched is not None and unvouched[0] <= unvouched[1]:
            # Normal after a crash; but a forged tail appended while the auditor was down
            # would look the same, so the chain itself says which records nobody vouched for.
            log.warning(
                "pinning records written before this start",
                extra={"first_index": unvouched[0], "last_index": unvouched[1]},
            )
            if self._on_unvouched is not None:
                subject, note = self._on_unvouched(*unvouched)
                await self._append_locked(subject, note, {})
        if foreign and self._on_foreign is not None:
            event = ForeignWrite(
                foreign[0].seq, foreign[-1].seq, tuple(sorted({m.subject for m in foreign}))
            )
            log.error(
                "foreign writes in the audit stream", extra={"seqs": [m.seq for m in foreign]}
            )
            subject, alert = self._on_foreign(event)
            await self._append_locked(subject, alert, {})

    def _learn(self, message: StoredMessage) -> bool:
        """Take the head from a stored record (or the count from a checkpoint)."""
        if message.subject.endswith("." + CHECKPOINT_PROFILE):
            count = _checkpoint_count(message.data)
            self.checkpointed = max(self.checkpointed, count)
            return False
        try:
            record = _record_decoder.decode(message.data)
        except msgspec.DecodeError:
            log.error("unreadable message in the audit stream", extra={"seq": message.seq})
            return False
        self._head, self._index, self._head_seq = record.hash, record.chain_index, message.seq
        self._remember(self._recorded, record.id, None)
        return True

    async def _walk_back(self, seq: int) -> bool:
        """The newest record lies before the window (only checkpoints in it): step back.
        False if there is none."""
        while seq >= 1:
            try:
                stored = await self._js.get_msg(self._stream, seq)
            except NotFoundError:
                seq -= 1
                continue
            message = StoredMessage(seq, stored.subject or "", stored.data or b"", {})
            if self._learn(message):
                return True
            seq -= 1
        return False


def _checkpoint_count(data: bytes) -> int:
    """The count a stored checkpoint claims (its signature is `parley audit verify`'s job)."""
    try:
        payload = json.loads(base64.b64decode(json.loads(data)["payload"]))
        return int(payload["count"])
    except (ValueError, KeyError, TypeError):
        return 0
