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
(`Nats-Expected-Last-Subject-Sequence: 0`, what `kv.create` sends) while its batch is decided
and its counters committed, and nothing of it is published before the claim is stored. The
look-up is a read (no fsync), one per batch, and the claim's fsync overlaps the commit's, so
deciding each id once costs a batch one read and no round trip of its own but for a root;
claiming before deciding cost a full fsynced round first (0.57-0.65x the raw relay's
throughput, against 0.61-0.72x now). A first delivery whose id this process knows no claim
of is claimed as the look-up is sent, not once it is answered (`claim_early`): create-only,
that claim stores nothing when the id turns out to be held (JetStream refuses it), and a free
id's claim is stored a round trip sooner. The look-up still decides: a message whose id
another submission holds is refused before anything is planned or charged for it.

When two submissions with one id are looked up before either claim is stored (on two gate
replicas; within one batch the first copy holds the id for the others, and one replica's
next batch is looked up only after this one's claims are stored), both are decided, but only
the one whose claim is stored first is published: the other is refused as a duplicate. The
counters it was charged stay charged: its own sender's rate and its own cause's trace.

Ids the gate makes itself and records positions for (the errors it delivers in a trace) are
claimed too, with a plain put: the gate's own record wins, and a sender that guesses such an
id later is refused like any other repeat.

The bucket keeps claims longer than the traces bucket keeps positions (bus/_provision.py), so
no position outlives the claim that protects it.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping, Sequence

import msgspec
from msgspec import Struct
from nats.js.api import PubAck

from actors.gate._records import id_key
from bus import AckInbox, AppendRefused, ConfigError, Context, LastValues, Outbox
from schemas import AnyEnvelope

__all__ = ("WRONG_LAST_SEQUENCE", "Claim", "IdClaims", "claim_of", "claim_of_bytes")

_EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"

_encoder = msgspec.json.Encoder()


class Claim(Struct, frozen=True, kw_only=True):
    """Which submission holds an envelope id: its sender, stream sequence and bytes' digest.

    The gate's own ids (the errors it sends) carry its actor id and the sequence and digest
    of the submission they answer, still on PARLEY_SUBMIT until every effect of that answer
    is stored (actors/gate/_unfinished_causes.py reads it so); sequence 0 and no digest when
    they answer none the gate keeps.
    """

    sender: str
    seq: int
    digest: str = ""


WRONG_LAST_SEQUENCE = 10071
"""JetStream's answer to a create-only write of a key that exists."""

_claim_decoder = msgspec.json.Decoder(Claim)
_UNREADABLE = Claim(sender="an unreadable claim", seq=-1)


def claim_of(ctx: Context) -> Claim:
    """The claim a submission makes on its envelope's id."""
    return claim_of_bytes(ctx.sender, ctx.stream_seq, ctx.payload)


def claim_of_bytes(sender: str, seq: int, payload: bytes) -> Claim:
    """The claim the submission of `payload` by `sender`, at `seq`, makes on its id."""
    digest = hashlib.sha256(payload).hexdigest()[:32]
    return Claim(sender=sender, seq=seq, digest=digest)


class IdClaims:
    """Look-ups and create-only claims of envelope ids, with a cache of the ones this process
    has seen.

    A claim never changes once made (create-only), so a cached claim stays true and a batch
    decided again after a conflict, or a message redelivered to this process, costs no round
    trip.
    """

    def __init__(
        self, acks: AckInbox, last: LastValues, bucket: str, capacity: int, wait_s: float
    ) -> None:
        """`wait_s`: how long a look-up or a claim may wait for the server (a lost answer,
        a server restart) before the message is retried instead of holding the gate."""
        self._acks = acks
        self._last = last
        self._wait_s = wait_s
        self._stream = f"KV_{bucket}"
        self._prefix = f"$KV.{bucket}."
        self._capacity = capacity
        self._cache: OrderedDict[str, Claim] = OrderedDict()

    def _remember(self, key: str, claim: Claim) -> None:
        self._cache[key] = claim
        self._cache.move_to_end(key)
        if len(self._cache) > self._capacity:
            self._cache.popitem(last=False)

    async def claim_early(
        self,
        batch: Sequence[tuple[AnyEnvelope, Context]],
        mine_of: Mapping[int, Claim],
        later: Collection[int] = (),
    ) -> dict[int, asyncio.Future[PubAck]]:
        """Claim, before their look-up, the ids of first deliveries this process knows no
        claim of (the first message of the batch to carry each id); `create`'s futures, by
        `id(ctx)`. A message in `later` (by `id(ctx)`: claimed once admitted) claims nothing
        now, but its id is still its own against the messages after it.

        Create-only, so a claim of an id that turns out to be held stores nothing and is
        refused; sent beside the look-up rather than after it, a free id's claim is stored
        one round trip sooner, and with it everything its message waits for.
        """
        early: dict[int, asyncio.Future[PubAck]] = {}
        named: set[str] = set()
        for envelope, ctx in batch:
            if envelope.id in named:
                continue
            named.add(envelope.id)
            if id(ctx) in later:
                continue
            if ctx.attempt == 1 and id_key(envelope.id) not in self._cache:
                early[id(ctx)] = await self.create(envelope.id, mine_of[id(ctx)])
        return early

    async def holders(self, envelope_ids: Sequence[str]) -> list[Claim | None]:
        """Who holds each id: its claim, or None when nobody does yet. Ids this process has
        not seen are read in one batched round trip (bus/_last_values.py).

        Raises:
            Exception: the look-up failed (the batch is then retried).
        """
        keys = [id_key(envelope_id) for envelope_id in envelope_ids]
        held: dict[str, Claim] = {}
        missing: list[str] = []
        for key in keys:
            cached = self._cache.get(key)
            if cached is not None:
                held[key] = cached
            else:
                missing.append(self._prefix + key)
        if missing:
            found = await self._last.read(self._stream, missing, timeout=self._wait_s)
            for subject, stored in found.items():
                key = subject[len(self._prefix) :]
                held[key] = self._decoded(stored.data)
                self._remember(key, held[key])
        return [held.get(key) for key in keys]

    async def check_server(self) -> None:
        """Fail at start, not on every message, when the server cannot answer batched direct
        gets (nats-server 2.11 or later).

        Raises:
            ConfigError: the server answered the look-up with an error.
            TimeoutError: it did not answer (an election, or a grant missing: the caller,
                `asked_at_start`, tells the two apart).
        """
        try:
            await self._last.read(self._stream, [self._prefix + id_key("start-probe")])
        except TimeoutError:
            raise
        except Exception as exc:
            raise ConfigError(
                "the gate looks envelope ids up with batched direct gets, which need "
                f"nats-server 2.11 or later and the idempotency bucket: {exc!r}"
            ) from None

    async def holder(self, envelope_id: str) -> Claim | None:
        """Who holds `envelope_id` now, read from KV (after a claim of it was refused)."""
        (held,) = await self.holders([envelope_id])
        return held

    @staticmethod
    def _decoded(data: bytes) -> Claim:
        try:
            return _claim_decoder.decode(data)
        except msgspec.DecodeError:
            return _UNREADABLE  # only the gate writes `id.>`; one it cannot read still holds

    async def create(self, envelope_id: str, claim: Claim) -> asyncio.Future[PubAck]:
        """Claim an id nobody held when it was looked up, create-only, now; the future
        resolves once the claim is stored (and cached), or fails with

        - `AppendRefused`: another submission's claim was stored first (`err_code` 10071);
        - `AppendTimeout`: no answer within `wait_s` (the message is retried; a claim that
          was stored after all is found to be its own on the redelivery);
        - any other exception: JetStream failed, or the claim could not be sent (the
          message is retried).

        One future and one timer per claim: a task and `asyncio.wait_for` around each were
        about a twentieth of the gate's CPU per envelope.
        """
        key = id_key(envelope_id)
        try:
            stored = await self._acks.publish(
                self._prefix + key,
                _encoder.encode(claim),
                {_EXPECTED_LAST_SUBJECT_SEQ: "0"},
                timeout=self._wait_s,  # unanswered is not unstored: retried
            )
        except Exception as exc:
            failed: asyncio.Future[PubAck] = asyncio.get_running_loop().create_future()
            failed.set_exception(exc)
            return failed
        stored.add_done_callback(functools.partial(self._stored, key, claim))
        return stored

    def _stored(self, key: str, claim: Claim, stored: asyncio.Future[PubAck]) -> None:
        if not stored.cancelled() and stored.exception() is None:
            self._remember(key, claim)

    async def settled(
        self, claim: asyncio.Future[PubAck], envelope_id: str, ctx: Context
    ) -> Claim | Exception | None:
        """How a message's claim (`create`'s future) ended: None once stored (or found
        stored by an earlier attempt of this very message, `ctx`), the claim of the submission that
        stored one first, or the error that kept it from being settled (the message is then
        retried)."""
        if not claim.done():
            await asyncio.wait((claim,))  # never cancels the claim itself
        if claim.cancelled():
            return RuntimeError(f"the claim of envelope id {envelope_id[:80]!r} was cancelled")
        exc = claim.exception()
        if exc is None:
            return None
        if not isinstance(exc, AppendRefused) or exc.err_code != WRONG_LAST_SEQUENCE:
            return exc if isinstance(exc, Exception) else RuntimeError(repr(exc))
        try:
            held = await self.holder(envelope_id)
        except Exception as error:
            return error
        return None if held is None or held == claim_of(ctx) else held

    @staticmethod
    async def all_settled(claims: Iterable[asyncio.Future[PubAck]]) -> None:
        """Wait until every claim of a batch ended (each ends within `wait_s`)."""
        unsettled = [claim for claim in claims if not claim.done()]
        if unsettled:
            await asyncio.wait(unsettled)

    async def mark(
        self, outbox: Outbox, envelope_id: str, gate: str, answering: Claim | None
    ) -> asyncio.Future[PubAck]:
        """Claim an id the gate made itself, pipelined with the message's other effects;
        `answering`: the claim of the submission it answers, if any.

        A plain put: the gate's record wins over a sender that claimed the id first (that
        sender only ever harms its own envelope), and a sender that tries it later is refused.
        Written again by a redelivery of the same submission, it writes the same value.
        """
        claim = (
            Claim(sender=gate, seq=0)
            if answering is None
            else Claim(sender=gate, seq=answering.seq, digest=answering.digest)
        )
        key = id_key(envelope_id)
        self._remember(key, claim)
        return await outbox.publish(self._prefix + key, _encoder.encode(claim), {})
