"""Envelope ids the gate has decided: each id is decided once, for as long as it matters.

Ids are chosen by senders, yet the gate keys an envelope's position (and a root's trace) by
its id, and JetStream's de-duplication keys on `Nats-Msg-Id`, a header the sender also
chooses, and lasts only the stream's duplicate window. With nothing else, an envelope
submitted again under its old id would be admitted again (delivered twice, its trace and rate
counters charged twice), and a new envelope carrying another envelope's id would overwrite
that envelope's position, breaking the answer to it.

So before the gate decides a submission it looks up `id.<id>` in the idempotency bucket. The
record, when it exists, holds the stream sequence and a digest of the exact bytes of the
submission that claimed the id, and it is either

- this very JetStream message, redelivered after a gate crash or a failed round (same
  sequence, same bytes): decided again as before, so the gate stays crash-safe; or
- a different message re-using the id: refused as `DUPLICATE_ENVELOPE`.

The digest alone could not tell the two apart (a replay carries the same bytes); the sequence
alone could, but the digest keeps a re-created stream, whose sequences start again, from
passing a stranger's message off as the original.

When no record exists, the submission claims the id create-only
(`Nats-Expected-Last-Subject-Sequence: 0`, what `kv.create` sends), published with its other
effects, and it is acked only once JetStream stored the claim with them. The look-up is a read
(no fsync) and the claim's fsync overlaps the effects', so deciding each id once adds no round
trip of its own to an envelope's path; claiming before deciding did (an fsynced write
awaited before anything else, 0.6x the raw relay's throughput).

The look-up leaves one race: the same id submitted twice at the same moment, both copies
looked up before either claim is stored (on two gate replicas; within one batch the first copy
holds the id for the others). Both are decided; one claim is refused, so that message's
effects do not all settle, it is redelivered and then refused as a duplicate. Its delivery
carries the same `Nats-Msg-Id` as the first copy's (derived from the envelope id), so the
deliver stream drops it: what the race can cost is counters charged twice, to the sender's own
rate and its own trace.

Ids the gate makes itself and records positions for (the errors it delivers in a trace) are
claimed too, with a plain put: the gate's own record wins, and a sender that guesses such an
id later is refused like any other repeat.

The bucket keeps claims longer than the traces bucket keeps positions (bus/_provision.py), so
no position outlives the claim that protects it.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import Sequence

import msgspec
from msgspec import Struct
from nats.js.api import PubAck

from actors.gate._records import id_key
from bus import Context, LastValues, Outbox

__all__ = ("Claim", "IdClaims", "claim_of")

_EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"

_encoder = msgspec.json.Encoder()


class Claim(Struct, frozen=True, kw_only=True):
    """Which submission holds an envelope id: its sender, stream sequence and bytes' digest.

    The gate's own ids carry its actor id, sequence 0 and no digest.
    """

    sender: str
    seq: int
    digest: str = ""


_claim_decoder = msgspec.json.Decoder(Claim)
_UNREADABLE = Claim(sender="an unreadable claim", seq=-1)


def claim_of(ctx: Context) -> Claim:
    """The claim a submission makes on its envelope's id."""
    digest = hashlib.sha256(ctx.payload).hexdigest()[:32]
    return Claim(sender=ctx.sender, seq=ctx.stream_seq, digest=digest)


class IdClaims:
    """Look-ups and create-only claims of envelope ids, with a cache of the ones this process
    has seen.

    A claim never changes once made (create-only), so a cached claim stays true and a batch
    decided again after a conflict, or a message redelivered to this process, costs no round
    trip.
    """

    def __init__(self, last: LastValues, bucket: str, capacity: int) -> None:
        self._last = last
        self._stream = f"KV_{bucket}"
        self._prefix = f"$KV.{bucket}."
        self._capacity = capacity
        self._cache: OrderedDict[str, Claim] = OrderedDict()

    def _remember(self, key: str, claim: Claim) -> None:
        self._cache[key] = claim
        self._cache.move_to_end(key)
        if len(self._cache) > self._capacity:
            self._cache.popitem(last=False)

    async def holders(self, envelope_ids: Sequence[str]) -> list[Claim | None]:
        """Who holds each id: its claim, or None when nobody does yet. Ids this process has
        not seen are read in one batched round trip (bus/_last_values.py).

        Raises:
            Exception: the look-up failed (the batch is then retried).
        """
        missing = [
            self._prefix + id_key(envelope_id)
            for envelope_id in envelope_ids
            if id_key(envelope_id) not in self._cache
        ]
        if missing:
            for subject, stored in (await self._last.read(self._stream, missing)).items():
                try:
                    held = _claim_decoder.decode(stored.data)
                except msgspec.DecodeError:
                    # Only the gate writes `id.>`; a record it cannot read still holds the id.
                    held = _UNREADABLE
                self._remember(subject[len(self._prefix) :], held)
        return [self._cache.get(id_key(envelope_id)) for envelope_id in envelope_ids]

    async def create(self, outbox: Outbox, envelope_id: str, claim: Claim) -> None:
        """Claim an id nobody held when it was looked up, create-only, pipelined with the
        message's effects: if another submission stored its claim first, the write is refused
        and the message is retried (and then refused as a duplicate)."""
        key = id_key(envelope_id)
        stored = await outbox.publish(
            self._prefix + key, _encoder.encode(claim), {_EXPECTED_LAST_SUBJECT_SEQ: "0"}
        )

        def claimed(future: asyncio.Future[PubAck]) -> None:
            if not future.cancelled() and future.exception() is None:
                self._remember(key, claim)

        stored.add_done_callback(claimed)

    async def mark(self, outbox: Outbox, envelope_id: str, gate: str) -> asyncio.Future[PubAck]:
        """Claim an id the gate made itself, pipelined with the message's other effects.

        A plain put: the gate's record wins over a sender that claimed the id first (that
        sender only ever harms its own envelope), and a sender that tries it later is refused.
        """
        claim = Claim(sender=gate, seq=0)
        key = id_key(envelope_id)
        self._remember(key, claim)
        return await outbox.publish(self._prefix + key, _encoder.encode(claim), {})
