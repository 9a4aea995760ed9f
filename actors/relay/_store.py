"""The relay's durable state in its KV bucket: sequence numbers, forwards and replay windows.

Everything a relay must remember across a SIGKILL lives here, written before the effect it
makes possible:

- `seq.<peer>.<session>`: the last sequence number given to a frame to that device in that
  session (compare-and-set, so two replicas never give one number twice);
- `out.<envelope id>`: the frame an envelope became (its number, and, for a call, what the
  answer needs: the caller, its call id, the trace position). Created once: a redelivered
  envelope is sealed again under the same number, and the gateway's de-duplication (msg id
  from the number) and the receiver's replay window drop the copy;
- `in.<local call id>`: a call that came in through the gateway, so the local agent's answer
  finds its way back to the right device, session and call;
- `win.<peer>.<session>`: the replay window (actors/relay/_window.py).
"""

from __future__ import annotations

import hashlib
from typing import TypeVar

import msgspec
from msgspec import Struct
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from actors.relay._window import ReplayWindow, accept

__all__ = ("Forwarded", "Outgoing", "RelayStore")

T = TypeVar("T")


class Outgoing(Struct, frozen=True, kw_only=True):
    """What sending one envelope through the gateway fixed, and what its answer will need."""

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
        found, _ = await self._get(f"out.{_key(envelope_id)}", Outgoing)
        return found

    async def claim_outgoing(self, envelope_id: str, draft: Outgoing) -> Outgoing:
        """The frame `envelope_id` goes out as: the one fixed before, or `draft` numbered
        with the next sequence number of its (peer, session)."""
        existing = await self.outgoing(envelope_id)
        if existing is not None:
            return existing
        seq = await self._next_seq(draft.peer, draft.session)
        fixed = msgspec.structs.replace(draft, seq=seq)
        try:
            await self._kv.create(f"out.{_key(envelope_id)}", msgspec.json.encode(fixed))
        except KeyWrongLastSequenceError:
            won = await self.outgoing(envelope_id)  # another replica fixed it first
            if won is None:
                raise RuntimeError(f"frame of {envelope_id} neither created nor found") from None
            return won
        return fixed

    async def _next_seq(self, peer: str, session: str) -> int:
        key = f"seq.{peer}.{session}"
        while True:
            current, revision = await self._get(key, int)
            value = (current or 0) + 1
            try:
                if revision:
                    await self._kv.update(key, msgspec.json.encode(value), last=revision)
                else:
                    await self._kv.create(key, msgspec.json.encode(value))
            except KeyWrongLastSequenceError:
                continue
            return value

    async def forwarded(self, local_call_id: str) -> Forwarded | None:
        found, _ = await self._get(f"in.{_key(local_call_id)}", Forwarded)
        return found

    async def record_forwarded(self, local_call_id: str, forwarded: Forwarded) -> None:
        await self._kv.put(f"in.{_key(local_call_id)}", msgspec.json.encode(forwarded))

    async def check_window(self, peer: str, session: str, seq: int) -> None:
        """Raise `ReplayRefused` if `seq` must be refused, changing nothing."""
        window, _ = await self._get(f"win.{peer}.{session}", ReplayWindow)
        accept(window or ReplayWindow(), seq)

    async def mark_window(self, peer: str, session: str, seq: int) -> None:
        """Record `seq` as accepted; a replay racing this one loses with `ReplayRefused`."""
        key = f"win.{peer}.{session}"
        while True:
            window, revision = await self._get(key, ReplayWindow)
            marked = accept(window or ReplayWindow(), seq)
            try:
                if revision:
                    await self._kv.update(key, msgspec.json.encode(marked), last=revision)
                else:
                    await self._kv.create(key, msgspec.json.encode(marked))
            except KeyWrongLastSequenceError:
                continue
            return


def _key(envelope_id: str) -> str:
    """Envelope ids are ULIDs or UUIDs; anything else is hashed into a safe key."""
    if (
        envelope_id
        and all(c.isalnum() or c in "-_" for c in envelope_id)
        and len(envelope_id) <= 128
    ):
        return envelope_id
    return "h" + hashlib.sha256(envelope_id.encode()).hexdigest()
