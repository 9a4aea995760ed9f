"""What every envelope shares: the base Struct with its `kind` tag, the field types the seeds
use (ids, names, UTC times, counts) and token usage. The kinds themselves are in
schemas/_envelopes.py (seed 001's collaboration, controls, events and errors),
schemas/_delegation.py (seeds 003 and 004) and schemas/_records.py (tools, approvals, audit
records and the gate's decisions).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from msgspec import Meta, Struct

__all__ = (
    "PROTOCOL_VERSION",
    "Envelope",
    "Id",
    "Name",
    "NonNegative",
    "TokenUsage",
    "UserId",
    "UtcTime",
)

PROTOCOL_VERSION = 1

Id = Annotated[str, Meta(min_length=1, max_length=128)]
Name = Annotated[str, Meta(pattern=r"^[a-z0-9_-]{1,64}$")]
UtcTime = Annotated[datetime, Meta(tz=True)]
NonNegative = Annotated[int, Meta(ge=0)]
UserId = Annotated[str, Meta(max_length=256)]
"""The end user an envelope is for (seed 003's `user_id`): a label, copied by the gate and the
router into what they keep (positions, sessions, early Stops, reminders, audit records), so
bounded: a 300 KB one was kept a dozen times over (a review of what one principal can fill)."""


class Envelope(Struct, frozen=True, kw_only=True, tag_field="kind"):
    """Fields every envelope has: a unique id, the protocol version and the creation time."""

    id: Id
    created_at: UtcTime
    v: int = PROTOCOL_VERSION


# -- seed 001: the room and the collaboration reply contract ----------------------------


class TokenUsage(Struct, frozen=True, kw_only=True):
    """Tokens a brain spent on one answer (seed 003 `token_usage`; seed 004 `tokens_used`)."""

    prompt: NonNegative = 0
    completion: NonNegative = 0
    total: NonNegative = 0
