"""The gate's records in the traces KV bucket: a read-through cache and batched commits.

One gate process is usually the only writer of its records, so what it wrote last is what KV
holds and a cache answers almost every read. Every write still names the revision it read
(`Nats-Expected-Last-Subject-Sequence`; 0 to create), so when a second replica wrote the same
counter first, JetStream refuses the stale write and the messages that relied on it are
retried with fresh values: two replicas never both spend the last unit of a limit.

Counter writes of a whole batch are sent together and awaited together (one round trip per
batch, not one per message), and a batch's updates to one key are coalesced into one write.
Positions are written only once the counters they depend on are committed, pipelined with the
deliveries: a recorded position therefore always means "admitted and paid for".

The gate handles the next batch while the previous one's records may still be in flight
(`Actor.settles_behind`). A read of a key whose write is in flight waits for that write
instead of asking KV, which may not have stored it yet: a reply can reach the gate before
the position of the call it answers is acknowledged.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterable, Sequence

import msgspec
from msgspec import Struct
from nats.js.api import PubAck
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from actors.gate._records import (
    CallAnswer,
    Children,
    Inflight,
    Position,
    RateBucket,
    SessionTokens,
    TraceState,
    position_key,
)
from bus import AckInbox, Context
from schemas import AnyEnvelope

__all__ = ("GateStore",)

_EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
_UNKNOWN = -1
"""The revision of a cached record whose write JetStream has not acknowledged yet."""

_DECODERS: dict[str, msgspec.json.Decoder[Struct]] = {
    "pos": msgspec.json.Decoder(Position),
    "trace": msgspec.json.Decoder(TraceState),
    "rate": msgspec.json.Decoder(RateBucket),
    "inflight": msgspec.json.Decoder(Inflight),
    "fanout": msgspec.json.Decoder(Children),
    "answer": msgspec.json.Decoder(CallAnswer),
    "stokens": msgspec.json.Decoder(SessionTokens),
}
_encoder = msgspec.json.Encoder()


def _decode(key: str, data: bytes) -> Struct:
    return _DECODERS[key.split(".", 1)[0]].decode(data)


class GateStore:
    """Cached, revision-checked access to the gate's records."""

    def __init__(self, acks: AckInbox, kv: KeyValue, bucket: str, capacity: int) -> None:
        self._acks = acks
        self._kv = kv
        self._prefix = f"$KV.{bucket}."
        self._capacity = capacity
        self._cache: OrderedDict[str, tuple[Struct | None, int]] = OrderedDict()
        self._in_flight: dict[str, asyncio.Future[PubAck]] = {}

    def _remember(self, key: str, value: Struct | None, revision: int) -> None:
        self._cache[key] = (value, revision)
        self._cache.move_to_end(key)
        if len(self._cache) > self._capacity:
            self._cache.popitem(last=False)

    def forget(self, keys: Iterable[str]) -> None:
        for key in keys:
            self._cache.pop(key, None)

    async def _read(self, key: str) -> None:
        before = self._cache.get(key)
        try:
            entry = await self._kv.get(key)
        except KeyNotFoundError:
            value, revision = None, 0
        else:
            value = _decode(key, entry.value) if entry.value else None
            revision = int(entry.revision or 0)
        if key in self._in_flight or self._cache.get(key) is not before:
            return  # this process wrote the key meanwhile: its own record is newer
        self._remember(key, value, revision)

    async def load(self, keys: Iterable[str], wait_s: float = 5.0) -> dict[str, Struct | None]:
        """The current value of each key (None when absent), reading misses concurrently.

        A key this process is still writing is answered once its write is acknowledged, or
        after `wait_s` from what it wrote (KV may not hold it yet); a write that failed
        leaves the key to be read from KV.
        """
        wanted = list(dict.fromkeys(keys))
        writing = [self._in_flight[key] for key in wanted if key in self._in_flight]
        if writing:
            await asyncio.wait(writing, timeout=wait_s)
        missing = [
            key
            for key in wanted
            if key not in self._cache
            or (self._cache[key][1] == _UNKNOWN and key not in self._in_flight)
        ]
        if missing:
            await asyncio.gather(*(self._read(key) for key in missing))
        return {key: self._cache[key][0] for key in wanted if key in self._cache}

    async def recorded(self, again: Sequence[tuple[AnyEnvelope, Context]]) -> dict[int, Position]:
        """Positions already recorded for envelopes handed to a gate before (admitted before
        a crash), by `id(ctx)`."""
        if not again:
            return {}
        found = await self.load(position_key(env.id) for env, _ in again)
        out: dict[int, Position] = {}
        for env, ctx in again:
            value = found.get(position_key(env.id))
            if isinstance(value, Position) and value.sender == ctx.sender:
                out[id(ctx)] = value
        return out

    def known_absent(self, keys: Iterable[str]) -> None:
        """Cache `keys` as absent (revision 0) where this process holds nothing for them.

        For records that cannot exist yet because they are named after an envelope this
        process has just admitted (its children's count, a root's unwritten trace): the
        next envelope that needs one is decided without a read, and its write creates the
        key only if no other writer did first (compare-and-set on revision 0), so a replica
        that got there first still wins and the envelope is decided again.
        """
        for key in keys:
            if key not in self._cache and key not in self._in_flight:
                self._remember(key, None, 0)

    def subject(self, key: str) -> str:
        """The KV subject a record is written on (for writes pipelined with other effects)."""
        return self._prefix + key

    def encode(self, value: Struct) -> bytes:
        return _encoder.encode(value)

    def remember(self, key: str, value: Struct, stored: asyncio.Future[PubAck]) -> None:
        """Cache a record whose write `stored` is in flight.

        Until JetStream acknowledges it the record's revision is unknown: a read of the key
        waits for the acknowledgement (see `load`), which gives the revision the next
        compare-and-set names; a failed write uncaches the key.
        """
        self._remember(key, value, _UNKNOWN)
        self._in_flight[key] = stored

        def stored_at(future: asyncio.Future[PubAck]) -> None:
            if self._in_flight.get(key) is future:
                del self._in_flight[key]
            hit = self._cache.get(key)
            if hit is None or hit[0] is not value:
                return  # replaced or evicted meanwhile
            if future.cancelled() or future.exception() is not None:
                self._cache.pop(key, None)
            else:
                self._cache[key] = (value, int(future.result().seq))

        stored.add_done_callback(stored_at)

    async def commit(self, updates: dict[str, Struct], timeout: float) -> frozenset[str]:
        """Write `updates`, each only if its key is still at the revision this process last
        saw, concurrently; return the keys not written: changed by another writer first (now
        uncached), or still being written by this process (no revision to name yet).

        Each write is a JetStream publish through the gate's own reply inbox, awaited with
        the others (nats-py's `publish_async` never completes a future whose publish
        JetStream refused, and its `publish` costs a request of its own per write).

        Raises:
            Exception: JetStream failed for a reason other than a stale revision (the
                caller's messages are then retried).
        """
        # A record still being written has no revision to name yet: decided again later.
        unknown = {key for key in updates if self._revision(key) == _UNKNOWN}
        keys = [key for key in updates if key not in unknown]
        if not keys:
            return frozenset(unknown)
        async with asyncio.timeout(timeout):
            results = await asyncio.gather(
                *(self._write(key, updates[key]) for key in keys), return_exceptions=True
            )
        stale: set[str] = set(unknown)
        failure: BaseException | None = None
        for key, result in zip(keys, results, strict=True):
            if isinstance(result, BaseException):
                self.forget((key,))
                if _is_stale(result):
                    stale.add(key)
                else:
                    failure = result
                continue
            self._remember(key, updates[key], int(result.seq))
        if failure is not None:
            raise failure
        return frozenset(stale)

    def _revision(self, key: str) -> int:
        return self._cache[key][1] if key in self._cache else 0

    async def _write(self, key: str, value: Struct) -> PubAck:
        revision = self._revision(key)
        stored = await self._acks.publish(
            self._prefix + key,
            _encoder.encode(value),
            {_EXPECTED_LAST_SUBJECT_SEQ: str(revision)},
        )
        return await stored


def _is_stale(error: BaseException) -> bool:
    # JetStream's "wrong last sequence" (10071): another writer got there first.
    return getattr(error, "err_code", None) == 10071
