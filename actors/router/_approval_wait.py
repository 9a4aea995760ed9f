"""A call whose agent waits on a person's approval: the wait does not count against the turn.

A task's agent asks for a tool whose scope requires approval; the tool runtime holds the
request until the session's owner decides it or the approval rule's `timeout_s` passes
(actors/tools/_approvals.py). The agent's call to it waits all that time, so judged by the
turn timeout alone the session would fail as stalled while its request still waited to be
approved, and could then be approved and run for a session that had already failed.

The router learns of the wait where a person does: the runtime keeps each owner's list of
what waits for them at `pending.<owner>` in its `tool_runs` bucket (actors/tools/_pending.py),
each entry with its session and expiry. Each time the reminder about a call comes round (at
the latest at the call's deadline, and at least once per heartbeat window), the router reads
its session owner's list by a direct get of that one key (the broker grants it no other part
of the bucket, tools/natsconf) and, when a request of this session is held, moves the call's
stored deadline to a whole turn after the latest such request's expiry: the agent still has
its turn to finish once the request is decided or expired, and no longer. The moved deadline
is stored with the call (`PendingCall.deadline`), so the sweep and a restarted router judge
by it too.

What it does not see: a request held and decided between two looks (within one heartbeat
window) leaves the deadline where it was, so such a short wait does count against the turn.
An unreadable list (the broker down, a garbled record) moves nothing: the call is judged as
before.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Final

import msgspec
from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from actors.router._calling import replace
from actors.router._session import Limits, Session
from actors.router._store import Conflict, SessionStore, Stored
from actors.tools import decode_pending, pending_key
from schemas import Namespace

__all__ = ("HeldApprovals", "extended_deadline")

log = logging.getLogger("parley.actors.router")

_READ_S: Final = 2.0


def extended_deadline(
    deadline: datetime | None, held_until: datetime, limits: Limits
) -> datetime | None:
    """A call's deadline moved to a whole turn after `held_until`, or None when it is that
    late already (a deadline only ever moves later)."""
    wanted = held_until + timedelta(seconds=limits.turn_timeout_s)
    return None if deadline is not None and deadline >= wanted else wanted


class HeldApprovals:
    """Reads an owner's list of held tool requests, to move the deadline of a call that
    waits on one of them."""

    def __init__(self, nc: NATS, api_prefix: str, ns: Namespace, limits: Limits) -> None:
        runs = ns.bucket("tool_runs")
        self._subject = f"{api_prefix}.DIRECT.GET.KV_{runs}.$KV.{runs}."
        self._nc = nc
        self._limits = limits

    async def held_until(self, owner: str, session_id: str) -> datetime | None:
        """When the last of the requests held for `owner` in `session_id` expires, or None
        when none is held (or the list cannot be read)."""
        key = pending_key(owner)
        if key is None:
            return None
        try:
            answer = await self._nc.request(self._subject + key, b"", timeout=_READ_S)
        except NoRespondersError:
            return None  # no tool runtime's bucket on this deployment: nothing can be held
        except (NatsTimeoutError, TimeoutError) as exc:
            log.warning("the held approvals could not be read", extra={"error": repr(exc)})
            return None
        headers = answer.headers or {}
        if headers.get("Status") or headers.get("KV-Operation") in ("DEL", "PURGE"):
            return None  # no list (404), or nothing left in it
        try:
            items = decode_pending(answer.data)
        except msgspec.DecodeError:
            log.warning("an unreadable list of held approvals", extra={"owner": owner})
            return None
        now_ms = int(datetime.now(UTC).timestamp() * 1000)
        expiries = [
            item.expires_ms
            for item in items
            if item.session_id == session_id and item.expires_ms > now_ms
        ]
        return datetime.fromtimestamp(max(expiries) / 1000, UTC) if expiries else None

    async def deadline_of(
        self, store: SessionStore[Session], stored: Stored[Session]
    ) -> datetime | None:
        """The deadline to judge the session's pending call by: its own, or, while a request
        of the session waits for approval, a whole turn after that request's expiry (stored,
        so the sweep and other replicas judge by it too)."""
        session, pending = stored.session, stored.session.pending
        if pending is None:
            return None
        held_until = await self.held_until(session.opener, session.session_id)
        moved = (
            None
            if held_until is None
            else extended_deadline(pending.deadline, held_until, self._limits)
        )
        if moved is None:
            return pending.deadline
        waiting = replace(session, pending=msgspec.structs.replace(pending, deadline=moved))
        try:
            await store.update(waiting, stored.revision)
        except Conflict:
            pass  # it moved meanwhile (answered?): judged by this deadline now, stored next look
        log.info(
            "a call waits on a held approval: its deadline moved",
            extra={"session_id": session.session_id, "deadline": moved.isoformat()},
        )
        return moved
