"""Each person's pending approvals, in one record a person may read and nobody else.

The tool runtime keeps every held request in its step's record (actors/tools/_approvals.py),
under keys that are digests: nothing there can be granted to one person alone. So it also
keeps, per owner, the list of what waits for that owner, at `pending.<owner>` in the same
`tool_runs` bucket, which the broker lets that owner read by direct get of that one key and
no other (tools/natsconf): `parley approvals list|show` reads it as the person.

An entry is added before its request is held (an entry left without its hold is removed when
its request's expiry or a decision finds it settled) and removed once the request is decided
or expired. Both are compare-and-set on the record, retried on conflict, and idempotent: a
redelivery adding or removing again changes nothing. The list says what waits; the step's
record decides: a decision on an entry just decided decides nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

import msgspec
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

__all__ = ("MAX_PENDING", "PendingApproval", "PendingBook", "decode_pending", "pending_key")

MAX_PENDING: Final = 200
"""Entries kept per owner (the oldest dropped past it): a record stays far below a message's
size, and an agent that floods one person with held requests cannot grow it without bound."""
_OWNER: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
_RETRIES: Final = 32


class PendingApproval(msgspec.Struct, frozen=True, kw_only=True):
    """What a person is shown of a request held for them (seed 002 §13.4's fields)."""

    approval_id: str
    session_id: str
    task_id: str = ""
    title: str
    action_summary: str
    risk_level: str
    capability: str
    agent: str
    digest: str
    expires_ms: int


_Change = Callable[[list[PendingApproval]], list[PendingApproval]]
_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(list[PendingApproval])


def decode_pending(data: bytes) -> list[PendingApproval]:
    return _decoder.decode(data) if data else []


def pending_key(owner: str) -> str | None:
    """The key of `owner`'s list, or None for an owner no key may name."""
    return f"pending.{owner}" if _OWNER.fullmatch(owner) else None


class PendingBook:
    """Owners' lists of held requests, in the runtime's bucket."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    async def add(self, owner: str, entry: PendingApproval) -> None:
        await self._change(owner, lambda items: [*_without(items, entry.approval_id), entry])

    async def remove(self, owner: str, approval_id: str) -> None:
        await self._change(owner, lambda items: _without(items, approval_id))

    async def of(self, owner: str) -> list[PendingApproval]:
        """`owner`'s list as stored now ([] for none, and for an owner no key may name)."""
        key = pending_key(owner)
        if key is None:
            return []
        try:
            entry = await self._kv.get(key)
        except KeyNotFoundError:
            return []
        return decode_pending(entry.value or b"")

    async def _change(self, owner: str, change: _Change) -> None:
        key = pending_key(owner)
        if key is None:
            return
        for _ in range(_RETRIES):
            try:
                entry = await self._kv.get(key)
                items, revision = decode_pending(entry.value or b""), entry.revision
            except KeyNotFoundError:
                items, revision = [], None
            changed = change(items)[-MAX_PENDING:]
            if changed == items:
                return
            try:
                if revision is None:
                    await self._kv.create(key, _encoder.encode(changed))
                else:
                    await self._kv.update(key, _encoder.encode(changed), last=revision)
                return
            except KeyWrongLastSequenceError:
                continue  # another step of this owner's changed it first: read it again
        raise RuntimeError(f"the pending approvals of {owner} kept changing under us")


def _without(items: list[PendingApproval], approval_id: str) -> list[PendingApproval]:
    return [item for item in items if item.approval_id != approval_id]
