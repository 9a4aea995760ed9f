"""The gate's records in the traces KV bucket: a read-through cache and batched commits.

One gate process is usually the only writer of its records, so what it wrote last is what KV
holds and a cache answers almost every read. Every write still names the revision it read
(`Nats-Expected-Last-Subject-Sequence`; 0 to create), so when a second replica wrote the same
counter first, JetStream refuses the stale write and the messages that relied on it are
retried with fresh values: two replicas never both spend the last unit of a limit.

Writes of a whole batch are pipelined and awaited together (one round trip per batch, not
one per message), and a batch's updates to one key are coalesced into one write.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

import msgspec
from msgspec import Struct
from nats.js import JetStreamContext
from nats.js.api import PubAck
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from actors._gate_records import Counter, Inflight, Position, RateBucket, TraceState

__all__ = ("CommitResult", "GateStore")

_EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"

_DECODERS: dict[str, msgspec.json.Decoder[Struct]] = {
    "pos": msgspec.json.Decoder(Position),
    "trace": msgspec.json.Decoder(TraceState),
    "rate": msgspec.json.Decoder(RateBucket),
    "inflight": msgspec.json.Decoder(Inflight),
    "fanout": msgspec.json.Decoder(Counter),
}
_encoder = msgspec.json.Encoder()


def _decode(key: str, data: bytes) -> Struct:
    return _DECODERS[key.split(".", 1)[0]].decode(data)


@dataclass(frozen=True, slots=True)
class CommitResult:
    """Which keys of a commit were stored, and which were refused as stale."""

    stale: frozenset[str]
    existed: frozenset[str]
    """Create-only keys that already existed (a position written by an earlier attempt)."""


class GateStore:
    """Cached, revision-checked access to the gate's records."""

    def __init__(self, js: JetStreamContext, kv: KeyValue, bucket: str, capacity: int) -> None:
        self._js = js
        self._kv = kv
        self._prefix = f"$KV.{bucket}."
        self._capacity = capacity
        self._cache: OrderedDict[str, tuple[Struct | None, int]] = OrderedDict()

    def _remember(self, key: str, value: Struct | None, revision: int) -> None:
        self._cache[key] = (value, revision)
        self._cache.move_to_end(key)
        if len(self._cache) > self._capacity:
            self._cache.popitem(last=False)

    def cached(self, key: str) -> Struct | None:
        hit = self._cache.get(key)
        return hit[0] if hit is not None else None

    def forget(self, keys: Iterable[str]) -> None:
        for key in keys:
            self._cache.pop(key, None)

    async def _read(self, key: str) -> None:
        try:
            entry = await self._kv.get(key)
        except KeyNotFoundError:
            self._remember(key, None, 0)
            return
        value = _decode(key, entry.value) if entry.value else None
        self._remember(key, value, int(entry.revision or 0))

    async def load(self, keys: Iterable[str]) -> dict[str, Struct | None]:
        """The current value of each key (None when absent), reading misses concurrently."""
        wanted = list(dict.fromkeys(keys))
        missing = [key for key in wanted if key not in self._cache]
        if missing:
            await asyncio.gather(*(self._read(key) for key in missing))
        return {key: self._cache[key][0] for key in wanted if key in self._cache}

    async def position(self, key: str) -> Position | None:
        found = (await self.load((key,))).get(key)
        return found if isinstance(found, Position) else None

    async def commit(
        self, updates: dict[str, Struct], creates: dict[str, Struct], timeout: float
    ) -> CommitResult:
        """Write `updates` (compare-and-set on the cached revision) and `creates` (only if
        absent), pipelined, and wait for all of them.

        Raises:
            Exception: JetStream failed to answer for a reason other than a stale revision
                (the caller's messages are then retried).
        """
        keys: list[str] = []
        futures: list[asyncio.Future[PubAck]] = []
        for key, value in updates.items():
            revision = self._cache[key][1] if key in self._cache else 0
            keys.append(key)
            futures.append(await self._write(key, value, revision))
        for key, value in creates.items():
            keys.append(key)
            futures.append(await self._write(key, value, 0))
        if not futures:
            return CommitResult(frozenset(), frozenset())
        results = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), timeout)
        stale: set[str] = set()
        existed: set[str] = set()
        for key, result in zip(keys, results, strict=True):
            if isinstance(result, BaseException):
                if _is_stale(result):
                    self.forget((key,))
                    (existed if key in creates else stale).add(key)
                    continue
                self.forget(keys)
                raise result
            value = updates.get(key) or creates[key]
            self._remember(key, value, int(result.seq))
        return CommitResult(frozenset(stale), frozenset(existed))

    async def _write(self, key: str, value: Struct, revision: int) -> asyncio.Future[PubAck]:
        future: asyncio.Future[PubAck] = await self._js.publish_async(
            self._prefix + key,
            _encoder.encode(value),
            headers={_EXPECTED_LAST_SUBJECT_SEQ: str(revision)},
        )
        return future


def _is_stale(error: BaseException) -> bool:
    # JetStream's "wrong last sequence" (10071): another writer got there first.
    return getattr(error, "err_code", None) == 10071
