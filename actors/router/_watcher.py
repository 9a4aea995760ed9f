"""A reminder about a call still unanswered: is its agent gone? (the I/O around `judge`).

Shared by both kinds of session the router runs: it reads the called agent's heartbeat from
the registry, asks actors/router/_turn_watch.py's `judge`, and either re-arms the reminder
(`ctx.defer`) or returns the `AGENT_UNAVAILABLE` error that fails the call. The error's id is
derived from the reminder, so every replica and every redelivery produces the same one, and
the session applies it once.

A reminder's first delivery comes as soon as the call is stored, when nothing can be due yet:
`too_early` re-arms it from the call and the heartbeat alone, without reading the session or
the person's held approvals (two of the three reads a look costs, on every call).
"""

from __future__ import annotations

import logging
from datetime import datetime

import msgspec
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from actors.router._session import Limits
from actors.router._turn_watch import Unavailable, Wait, judge
from bus import Context, Uptime
from schemas import ActorHeartbeat, AgentCall, Error, ErrorCode, heartbeat_key, utc_now

__all__ = ("CallWatcher",)

log = logging.getLogger("parley.actors.router")
_heartbeat_decoder = msgspec.json.Decoder(ActorHeartbeat)


class CallWatcher:
    """Judges the agents of calls still unanswered, from their heartbeats."""

    def __init__(self, registry: KeyValue, uptime: Uptime, limits: Limits) -> None:
        self._registry = registry
        self._uptime = uptime
        self._limits = limits

    async def unavailable(
        self,
        call: AgentCall,
        deadline: datetime | None,
        ctx: Context,
        *,
        turn_timeout_s: float | None = None,
    ) -> Error | None:
        """The error that fails `call`, or None with the reminder deferred (still in time).

        `turn_timeout_s` replaces the router's own for the call's kind of session.
        """
        verdict = await self._judge(call, deadline, turn_timeout_s)
        if not isinstance(verdict, Unavailable):
            ctx.defer(verdict.seconds)
            return None
        log.warning(
            "agent unavailable", extra={"session_id": call.session_id, "reason": verdict.message}
        )
        return Error(
            id=ctx.derive_id("unavailable"),
            created_at=utc_now(),
            code=ErrorCode.AGENT_UNAVAILABLE,
            message=verdict.message,
            cause_id=call.id,
            details={"session_id": call.session_id, "target": call.target, **verdict.details},
        )

    async def too_early(self, call: AgentCall, ctx: Context) -> bool:
        """On a reminder's first delivery, whether no verdict but "wait" is possible yet; if so
        the reminder is re-armed for when one could be, and the caller reads nothing else.

        Judged as the full look would be, with the earliest deadline the call can have: made
        plus the shorter of the two kinds of session's turn timeouts. Everything the full look
        adds only moves a deadline later (a held approval, an outage) or settles the call (an
        answer, the session's end), so a later look decides the same or sooner; a call already
        answered is settled at that look instead of this one. A redelivery (`ctx.attempt` above
        one: a router died holding it, or a look re-armed it) always gets the full look: it
        may find an `AGENT_UNAVAILABLE` already applied whose effects must be published again.
        """
        if ctx.attempt != 1:
            return False
        shortest = min(self._limits.turn_timeout_s, self._limits.orchestration.turn_timeout_s)
        verdict = await self._judge(call, None, shortest)
        if isinstance(verdict, Unavailable):
            return False
        ctx.defer(verdict.seconds)
        return True

    async def _judge(
        self, call: AgentCall, deadline: datetime | None, turn_timeout_s: float | None
    ) -> Wait | Unavailable:
        """`judge` on `call` now, from its agent's heartbeat and this router's bus
        (`turn_timeout_s`: the call's kind of session's, None: the router's own)."""
        limits = self._limits
        if turn_timeout_s is not None:
            limits = limits.model_copy(update={"turn_timeout_s": turn_timeout_s})
        return judge(
            call.target,
            call.created_at,
            await self._heartbeat(call.target),
            now=utc_now(),
            connected_since=self._uptime.since,
            limits=limits,
            deadline=deadline,
            outages=self._uptime.deaf(),
        )

    async def _heartbeat(self, agent: str) -> ActorHeartbeat | None:
        try:
            entry = await self._registry.get(heartbeat_key(agent))
        except KeyNotFoundError:
            return None
        if not entry.value:
            return None
        try:
            return _heartbeat_decoder.decode(entry.value)
        except msgspec.DecodeError:
            log.warning("unreadable heartbeat", extra={"agent": agent})
            return None
