"""Envelope ids the gate has decided: each id is decided once, for as long as it matters.

Ids are chosen by senders, yet the gate keys an envelope's position (and a root's trace) by
its id, and JetStream's de-duplication keys on `Nats-Msg-Id`, a header the sender also
chooses, and lasts only the stream's duplicate window. With nothing else, an envelope
submitted again under its old id would be admitted again (delivered twice, its trace and rate
counters charged twice), and a new envelope carrying another envelope's id would overwrite
that envelope's position, breaking the answer to it.

So before the gate decides a submission it claims the envelope's id: it creates `id.<id>` in
the idempotency bucket create-only (`Nats-Expected-Last-Subject-Sequence: 0`, what `kv.create`
sends), holding the submission's stream sequence and a digest of its exact bytes. When the
record already exists it is either

- this very JetStream message, redelivered after a gate crash or a failed round (same
  sequence, same bytes): decided again as before, so the gate stays crash-safe; or
- a different message re-using the id: refused as `DUPLICATE_ENVELOPE`.

The digest alone could not tell the two apart (a replay carries the same bytes); the sequence
alone could, but the digest keeps a re-created stream, whose sequences start again, from
passing a stranger's message off as the original.

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
from nats.js.kv import KeyValue

from actors._gate_records import id_key
from bus import AckInbox, AppendRefused, Context, Outbox

__all__ = ("Claim", "IdClaims", "claim_of")

_EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
_WRONG_LAST_SEQUENCE = 10071
"""JetStream's answer to a create-only write of a key that exists."""

_encoder = msgspec.json.Encoder()


class Claim(Struct, frozen=True, kw_only=True):
    """Which submission holds an envelope id: its sender, stream sequence and bytes' digest.

    The gate's own ids carry its actor id, sequence 0 and no digest.
    """

    sender: str
    seq: int
    digest: str = ""


_claim_decoder = msgspec.json.Decoder(Claim)


def claim_of(ctx: Context) -> Claim:
    """The claim a submission makes on its envelope's id."""
    digest = hashlib.sha256(ctx.payload).hexdigest()[:32]
    return Claim(sender=ctx.sender, seq=ctx.stream_seq, digest=digest)


class IdClaims:
    """Create-only claims of envelope ids, with a cache of the ones this process has seen.

    A claim never changes once made (create-only), so a cached claim stays true and a batch
    decided again after a conflict, or a message redelivered to this process, costs no round
    trip.
    """

    def __init__(self, acks: AckInbox, kv: KeyValue, bucket: str, capacity: int) -> None:
        self._acks = acks
        self._kv = kv
        self._prefix = f"$KV.{bucket}."
        self._capacity = capacity
        self._cache: OrderedDict[str, Claim] = OrderedDict()

    def _remember(self, key: str, claim: Claim) -> None:
        self._cache[key] = claim
        self._cache.move_to_end(key)
        if len(self._cache) > self._capacity:
            self._cache.popitem(last=False)

    async def claim(
        self, wanted: Sequence[tuple[str, Claim]]
    ) -> list[Claim | BaseException | None]:
        """Claim each (envelope id, claim), concurrently.

        Returns, per id: None when the submission holds the id (claimed now, or by this same
        message before), the claim of the other submission that holds it, or the exception
        that kept it from being settled (the message is then retried).
        """
        return await asyncio.gather(
            *(self._claim_one(envelope_id, claim) for envelope_id, claim in wanted),
            return_exceptions=True,
        )

    async def _claim_one(self, envelope_id: str, claim: Claim) -> Claim | None:
        key = id_key(envelope_id)
        held = self._cache.get(key)
        if held is None:
            try:
                stored = await self._acks.publish(
                    self._prefix + key, _encoder.encode(claim), {_EXPECTED_LAST_SUBJECT_SEQ: "0"}
                )
                await stored
            except AppendRefused as exc:
                if exc.err_code != _WRONG_LAST_SEQUENCE:
                    raise
                entry = await self._kv.get(key)
                held = _claim_decoder.decode(entry.value or b"")
            else:
                held = claim
            self._remember(key, held)
        return None if held == claim else held

    async def mark(self, outbox: Outbox, envelope_id: str, gate: str) -> asyncio.Future[PubAck]:
        """Claim an id the gate made itself, pipelined with the message's other effects.

        A plain put: the gate's record wins over a sender that claimed the id first (that
        sender only ever harms its own envelope), and a sender that tries it later is refused.
        """
        claim = Claim(sender=gate, seq=0)
        key = id_key(envelope_id)
        self._remember(key, claim)
        return await outbox.publish(self._prefix + key, _encoder.encode(claim), {})
