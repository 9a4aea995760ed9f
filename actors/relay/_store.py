"""The relay's durable state in its KV bucket: forwards, replay windows, relay-numbered frames.

Everything a relay must remember across a SIGKILL lives here, written before the effect it
makes possible:

- `in.<local call id>`: a call that came in through the gateway, so the local agent's answer
  finds its way back to the right device, session and call (and carries the caller's return
  ticket back unread);
- `win.<peer>.<session>[.d]`: the replay window (actors/relay/_window.py) of the frames a peer
  numbers by its deliveries (`.d`: every call and answer) or by its relay bucket (the
  refusals it sends on its own);
- `out.<envelope id>`: a frame the relay sends on its own (a refusal to a call that came in),
  whose number no delivery gives: it is the revision the record was created at, so the
  number is unique, grows, and a retry of the same refusal finds it and reseals under it.

What a forwarded call's answer needs is not stored: it travels inside the frame as a return
ticket (actors/relay/_tickets.py), and frames for deliveries are numbered by the delivery
(actors/relay/_outbound.py), so forwarding writes nothing here.
"""

from __future__ import annotations

import hashlib
from typing import Literal, NamedTuple, TypeVar

import msgspec
from msgspec import Struct
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from actors.relay._window import ReplayRefused, ReplayWindow, accept

__all__ = ("Forwarded", "Numbered", "Outgoing", "RelayStore", "WindowRead")

T = TypeVar("T")

_encoder = msgspec.json.Encoder()


class Outgoing(Struct, frozen=True, kw_only=True):
    """Where one frame goes and under which number.

    `seq` is stored as 0 in an `out.<id>` record: the number is the record's revision."""

    seq: int
    session: str
    peer: str
    numbered_by: Literal["relay", "deliveries"] = "relay"
    hop_count: int = 0
    ticket: bytes = b""
    """The caller's return ticket: the one a call carries, or the one its answer gives back."""
    traceparent: str = ""
    """The span the receiver continues, sealed into the frame ("": the frame holds none)."""


class Forwarded(Struct, frozen=True, kw_only=True):
    """A call that came in from `peer`, submitted here as `principal` to `agent`."""

    peer: str
    peer_kem: str
    session: str
    remote_call: str
    """The call's envelope id in the caller's deployment: what the answer names."""
    principal: str
    agent: str
    ticket: bytes = b""
    """The caller's return ticket, given back unread with the answer."""
    traced: bool = False
    """The call's frame carried a `traceparent`: its answer's frame carries one back."""


class RelayStore:
    """Typed reads and compare-and-set writes on the relay bucket."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

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
        is created at, or the one fixed before (a retry, or another replica first)."""
        key = f"out.{_key(envelope_id)}"
        record = _encoder.encode(msgspec.structs.replace(draft, seq=0, numbered_by="relay"))
        try:
            revision = await self._kv.create(key, record)
        except KeyWrongLastSequenceError:
            fixed = await self.outgoing(envelope_id)
            if fixed is None:
                raise RuntimeError(f"frame of {envelope_id} neither created nor found") from None
            return fixed
        return msgspec.structs.replace(draft, seq=revision, numbered_by="relay")

    async def forwarded(self, local_call_id: str) -> Forwarded | None:
        found, _ = await self._get(f"in.{_key(local_call_id)}", Forwarded)
        return found

    async def record_forwarded(self, local_call_id: str, forwarded: Forwarded) -> None:
        await self._kv.put(f"in.{_key(local_call_id)}", msgspec.json.encode(forwarded))

    async def check_window(self, peer: str, session: str, seq: Numbered) -> WindowRead:
        """Raise `ReplayRefused` if `seq` must be refused, changing nothing; return what was
        read, so `mark_window` can write without reading it again."""
        window, revision = await self._get(_window_key(peer, session, seq), ReplayWindow)
        accept(window or ReplayWindow(), seq.seq)
        return WindowRead(window, revision)

    async def mark_window(
        self, peer: str, session: str, seq: Numbered, read: WindowRead | None = None
    ) -> bool:
        """Record `seq` as accepted; False if another delivery of the frame marked it first.

        Called once the frame's effect is submitted under ids derived from the frame, so a
        copy that marked it first did the very same effect (the gate dropped one of the two):
        the caller acks, nothing to refuse. A replay is refused before its effect, by
        `check_window`. `read` (from `check_window`) is tried first: the write names the
        revision it was read at, so if anyone wrote the window since, it is read again.
        """
        key = _window_key(peer, session, seq)
        while True:
            window, revision = (
                (read.window, read.revision) if read else await self._get(key, ReplayWindow)
            )
            read = None
            try:
                marked = accept(window or ReplayWindow(), seq.seq)
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


class Numbered(NamedTuple):
    """A frame's number and where it comes from: each source has a replay window of its own."""

    seq: int
    numbered_by: Literal["relay", "deliveries"]


def _window_key(peer: str, session: str, seq: Numbered) -> str:
    suffix = ".d" if seq.numbered_by == "deliveries" else ""
    return f"win.{peer}.{session}{suffix}"


def _key(envelope_id: str) -> str:
    """Envelope ids are ULIDs or UUIDs; anything else is hashed into a safe key."""
    if (
        envelope_id
        and all(c.isalnum() or c in "-_" for c in envelope_id)
        and len(envelope_id) <= 128
    ):
        return envelope_id
    return "h" + hashlib.sha256(envelope_id.encode()).hexdigest()
