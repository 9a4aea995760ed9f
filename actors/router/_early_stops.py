"""A Stop for a session the router has not opened yet: kept, and applied when it opens.

A person's command that gives up waiting (tools/_waiting.py) submits a Stop right behind the
message that opens its session, in the same durable queue. Both wait there while the gate is
stalled; once it resumes, the Stop can still reach the router first (a redelivery overtakes,
and the router's handlers run concurrently). Refused then as naming no session, it would be
lost, and the session would open a moment later and run every round with nobody watching.

So a Stop for a session id no session has yet is kept in a bucket of its own, `early_stops`
(`early-stop.<session id>.<sender>`: the Stop and the principal the gate vouched for), and
opening the session applies it as if it had come right after: the session opens and ends as
canceled, with the Stop's reason, before any agent answers. Only the principal who then opens the
session can have stopped it early: a kept Stop from anyone else is never applied (it would
answer the opener with another principal's refusal).

The record is kept after it is applied: a redelivered opening replays its effects and applies
the same Stop again, which replays the Stop's recorded effects instead of losing them. The
bucket forgets a record after a day and is bounded by its own quota: a person may name
sessions that never open (each Stop is charged by the gate's rate), and filling the sessions
bucket with such records would have stopped every session from being stored.
"""

from __future__ import annotations

import msgspec
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from schemas import AgentResponse, Control, Error, encode, valid_token

__all__ = ("REASON_CHARS", "EarlyStop", "EarlyStops", "kept_if_early")

REASON_CHARS = 500
"""The longest reason a kept Stop keeps: what the canceled session's event says."""


def kept_if_early(envelope: AgentResponse | Error | Control, session_id: str) -> bool:
    """Whether `envelope`, naming no open session, is kept for when `session_id` opens: a
    Stop is, with a session id a key can hold; an answer or an error is not."""
    return isinstance(envelope, Control) and envelope.action == "stop" and valid_token(session_id)


class EarlyStop(msgspec.Struct, frozen=True):
    """A Stop kept for a session not open yet, and who sent it (the gate's word)."""

    control: Control
    sender: str


class EarlyStops:
    """Stops kept for sessions not open yet, in the `early_stops` bucket."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv
        self._decoder = msgspec.json.Decoder(EarlyStop)

    @staticmethod
    def _key(session_id: str, sender: str) -> str:
        """One key per session and sender: a Stop someone else kept first for a session id
        they guessed can never take the place of the opener's own."""
        return f"early-stop.{session_id}.{sender}"

    async def keep(self, session_id: str, control: Control, sender: str) -> None:
        """Keep `sender`'s first Stop for `session_id` (a second one is its redelivery, or
        adds nothing: one Stop ends a session), small: its reason cut to `REASON_CHARS` and
        no text, so a Stop of a megabyte costs the bucket what any Stop does."""
        kept = msgspec.structs.replace(control, reason=control.reason[:REASON_CHARS], text="")
        try:
            await self._kv.create(self._key(session_id, sender), encode(EarlyStop(kept, sender)))
        except KeyWrongLastSequenceError:
            pass

    async def find(self, session_id: str, opener: str) -> Control | None:
        """The Stop kept for `session_id` if `opener` sent it, else None."""
        try:
            entry = await self._kv.get(self._key(session_id, opener))
        except KeyNotFoundError:
            return None
        try:
            early = self._decoder.decode(entry.value or b"")
        except msgspec.DecodeError:
            return None
        return early.control if early.sender == opener else None
