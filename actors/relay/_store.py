"""The relay's durable state in its KV bucket: sequence numbers, forwards and replay windows.

Everything a relay must remember across a SIGKILL lives here, written before the effect it
makes possible:

- `out.<envelope id>`: the frame an envelope became (for a call, what the answer needs: the
  caller, its call id, the trace position). Created once, and its sequence number is the
  revision it was created at: the bucket's stream sequence, so every frame's number is
  unique (two replicas can never be given one revision) and a session's numbers grow, with
  gaps, in the order its frames were claimed. One write per frame, no counter to read and
  compare-and-set, and the writes of a whole fetched batch go out together on the relay's
  reply inbox (bus/_ackinbox.py) and are awaited together: one round trip per batch, and the
  numbers follow the batch's order. A redelivered envelope finds its record and is sealed
  again under the same number, and the gateway's de-duplication (msg id from the number) and
  the receiver's replay window drop the copy;
- `in.<local call id>`: a call that came in through the gateway, so the local agent's answer
  finds its way back to the right device, session and call;
- `win.<peer>.<session>`: the replay window (actors/relay/_window.py).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import NamedTuple, TypeVar

import msgspec
from msgspec import Struct
from nats.js.api import PubAck
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from actors.relay._window import ReplayRefused, ReplayWindow, accept
from bus import AckInbox, AppendRefused

__all__ = ("Forwarded", "Outgoing", "RelayStore", "WindowRead")

T = TypeVar("T")

_EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
_WRONG_LAST_SEQUENCE = 10071
"""JetStream's refusal of a create whose key exists: the frame was numbered before."""
_encoder = msgspec.json.Encoder()


class Outgoing(Struct, frozen=True, kw_only=True):
    """What sending one envelope through the gateway fixed, and what its answer will need.

    `seq` is stored as 0: the number is the record's revision, filled in when it is read."""

    seq: int
    session: str
    peer: str
    shared: str = ""
    caller: str = ""
    call_id: str = ""
    session_id: str | None = None
    round: int = 1
    max_rounds: int = 1
    trace_id: str = ""
    hop_count: int = 0
    origin: str = ""
    deadline_ms: int | None = None


class Forwarded(Struct, frozen=True, kw_only=True):
    """A call that came in from `peer`, submitted here as `principal` to `agent`."""

    peer: str
    peer_kem: str
    session: str
    remote_call: str
    """The call's envelope id in the caller's deployment: what the answer names."""
    principal: str
    agent: str


class RelayStore:
    """Typed reads and compare-and-set writes on the relay bucket."""

    def __init__(self, kv: KeyValue, acks: AckInbox, bucket: str) -> None:
        self._kv = kv
        self._acks = acks
        self._prefix = f"$KV.{bucket}."

    async def _get(self, key: str, kind: type[T]) -> tuple[T | None, int]:
        try:
            entry = await self._kv.get(key)
        except KeyNotFoundError:
            return None, 0
        if entry.value is None:
            return None, entry.revision or 0
        return msgspec.json.decode(entry.value, type=kind), entry.revision or 0

    async def outgoing(self, envelope_id: str) -> Outgoing | None:
        found, revision = await self._get(f"out.{_key(envelope_id)}", Outgoing)
        return None if found is None else msgspec.structs.replace(found, seq=revision)

    async def claim_outgoing(self, envelope_id: str, draft: Outgoing) -> Outgoing:
        """The frame `envelope_id` goes out as: `draft`, numbered with the revision its record
        is created at, or the one fixed before (a redelivery, or another replica first)."""
        (claimed,) = await self.claim_all([(envelope_id, draft)])
        if isinstance(claimed, Exception):
            raise claimed
        return claimed

    async def claim_all(self, claims: Sequence[tuple[str, Outgoing]]) -> list[Outgoing | Exception]:
        """`claim_outgoing` for each (envelope id, draft), in order, in one round trip.

        The creates are sent one after another on one connection, so JetStream stores them,
        and numbers them, in this order; a frame numbered before is read back. Each entry is
        the claimed frame, or why it could not be claimed (that envelope is retried).
        """
        sent: list[asyncio.Future[PubAck] | Exception] = []
        for envelope_id, draft in claims:
            record = _encoder.encode(msgspec.structs.replace(draft, seq=0))
            subject = f"{self._prefix}out.{_key(envelope_id)}"
            try:
                future = await self._acks.publish(
                    subject, record, {_EXPECTED_LAST_SUBJECT_SEQ: "0"}
                )
            except Exception as exc:
                sent.append(exc)
            else:
                sent.append(future)
        results: list[Outgoing | Exception] = []
        for (envelope_id, draft), item in zip(claims, sent, strict=True):
            results.append(await self._claimed(envelope_id, draft, item))
        return results

    async def _claimed(
        self, envelope_id: str, draft: Outgoing, item: asyncio.Future[PubAck] | Exception
    ) -> Outgoing | Exception:
        if isinstance(item, Exception):
            return item
        try:
            ack = await item
        except AppendRefused as exc:
            if exc.err_code != _WRONG_LAST_SEQUENCE:
                return exc
            fixed = await self.outgoing(envelope_id)
            if fixed is None:
                return RuntimeError(f"frame of {envelope_id} neither created nor found")
            return fixed
        except Exception as exc:
            return exc
        return msgspec.structs.replace(draft, seq=int(ack.seq))

    async def forwarded(self, local_call_id: str) -> Forwarded | None:
        found, _ = await self._get(f"in.{_key(local_call_id)}", Forwarded)
        return found

    async def record_forwarded(self, local_call_id: str, forwarded: Forwarded) -> None:
        await self._kv.put(f"in.{_key(local_call_id)}", msgspec.json.encode(forwarded))

    async def check_window(self, peer: str, session: str, seq: int) -> WindowRead:
        """Raise `ReplayRefused` if `seq` must be refused, changing nothing; return what was
        read, so `mark_window` can write without reading it again."""
        window, revision = await self._get(f"win.{peer}.{session}", ReplayWindow)
        accept(window or ReplayWindow(), seq)
        return WindowRead(window, revision)

    async def mark_window(
        self, peer: str, session: str, seq: int, read: WindowRead | None = None
    ) -> bool:
        """Record `seq` as accepted; False if another delivery of the frame marked it first.

        Called once the frame's effect is submitted under ids derived from the frame, so a
        copy that marked it first did the very same effect (the gate dropped one of the two):
        the caller acks, nothing to refuse. A replay is refused before its effect, by
        `check_window`. `read` (from `check_window`) is tried first: the write names the
        revision it was read at, so if anyone wrote the window since, it is read again.
        """
        key = f"win.{peer}.{session}"
        while True:
            window, revision = (
                (read.window, read.revision) if read else await self._get(key, ReplayWindow)
            )
            read = None
            try:
                marked = accept(window or ReplayWindow(), seq)
            except ReplayRefused:
                return False
            try:
                if revision:
                    await self._kv.update(key, msgspec.json.encode(marked), last=revision)
                else:
                    await self._kv.create(key, msgspec.json.encode(marked))
            except KeyWrongLastSequenceError:
                continue
            return True


class WindowRead(NamedTuple):
    """A replay window as `check_window` read it, and the revision it was read at."""

    window: ReplayWindow | None
    revision: int


def _key(envelope_id: str) -> str:
    """Envelope ids are ULIDs or UUIDs; anything else is hashed into a safe key."""
    if (
        envelope_id
        and all(c.isalnum() or c in "-_" for c in envelope_id)
        and len(envelope_id) <= 128
    ):
        return envelope_id
    return "h" + hashlib.sha256(envelope_id.encode()).hexdigest()
