"""The router's orchestrated sessions (seed 000): load, apply, compare-and-set, publish.

The transitions are actors/orchestrator's; this is their I/O, in the same pattern as seed
001's sessions (actors/router/_actor.py): each input loads the session (`orch.<id>` in the
sessions bucket), applies the pure transition, stores the result with compare-and-set, and
only then are its effects published, so a router SIGKILLed at any point repeats the same
effects under the same ids or finds them recorded, and never advances a session twice.

Two reminders keep a session from waiting for ever: every call it makes comes back on the
router's reminder queue until answered, and is judged like a collaboration's (a killed local
agent ends the session in `error`, seed 000 #9); and the reminder its opening put there for
`maxDurationMs` ends it when the time is up, whatever it waits on (an approval, a pause).
"""

from __future__ import annotations

from typing import Final

import msgspec
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from actors.orchestrator import (
    OrchestratedSession,
    OrchestrationOptions,
    Step,
    advance_orchestration,
    open_orchestration,
)
from actors.router._session import Session
from actors.router._store import Conflict, SessionStore
from actors.router._watcher import CallWatcher
from bus import Context
from schemas import (
    AgentCall,
    AgentResponse,
    Control,
    Error,
    ErrorCode,
    HumanMessage,
    ProfileSummary,
    profile_key,
    utc_now,
    valid_token,
)

__all__ = ("OrchestratedSessions",)

_CAS_ATTEMPTS: Final = 5
_profile_decoder = msgspec.json.Decoder(ProfileSummary)


class OrchestratedSessions:
    """Opens and advances orchestrated sessions for the router."""

    def __init__(
        self,
        store: SessionStore[OrchestratedSession],
        sessions: SessionStore[Session],
        options: OrchestrationOptions,
        watcher: CallWatcher,
        registry: KeyValue,
    ) -> None:
        self._store = store
        self._sessions = sessions
        self._options = options
        self._watcher = watcher
        self._registry = registry

    async def open(self, msg: HumanMessage, session_id: str, ctx: Context) -> Step:
        """Open a session for `msg` (or replay its opening), refusing a session id in use."""
        now = utc_now()
        for _ in range(_CAS_ATTEMPTS):
            usable = valid_token(session_id)
            stored = await self._store.load(session_id, fresh=True) if usable else None
            if stored is not None:
                replay = stored.session.effects_of(msg.id)
                if replay is not None:
                    return Step(session=stored.session, effects=replay, note="replayed")
                if stored.session.origin_id == msg.id:
                    return Step(session=stored.session, note="opening message seen long ago")
                return _in_use(msg, session_id, ctx)
            if usable and await self._sessions.load(session_id) is not None:
                return _in_use(msg, session_id, ctx)
            step = open_orchestration(
                msg,
                session_id=session_id,
                sender=ctx.sender,
                now=now,
                options=self._options,
                shared_device_id=await self._shared_device(msg),
            )
            if step.session is None:
                return step
            charges = self._store.charges
            full = await charges.refusal(ctx.sender) if charges else None
            if full is not None:
                return _refused(msg, ctx, ErrorCode.RATE_LIMITED, full, session_id=session_id)
            await self._store.link_trace(ctx.trace_id, session_id)
            try:
                await self._store.create(step.session)
            except Conflict:
                continue
            return step
        raise RuntimeError(f"session {session_id} kept changing while being opened")

    async def _shared_device(self, msg: HumanMessage) -> str:
        """The device the session's shared agent lives on, from the profile the relay hosting
        it wrote (actors/relay/_presence.py); empty for an agent of this deployment."""
        name = msg.orchestration.shared_agent if msg.orchestration else ""
        if not valid_token(name):
            return ""
        try:
            entry = await self._registry.get(profile_key(name))
        except KeyNotFoundError:
            return ""
        try:
            summary = _profile_decoder.decode(entry.value or b"")
        except msgspec.DecodeError:
            return ""
        return summary.device_id if summary.kind == "shared_agent" else ""

    async def advance(
        self,
        envelope: AgentResponse | Error | Control,
        session_id: str,
        ctx: Context,
        *,
        cause: str,
        reporter: bool,
        operator: bool,
    ) -> Step | None:
        """Apply one input to the session, or None if there is no such orchestrated session."""
        fresh = False
        for _ in range(_CAS_ATTEMPTS):
            stored = await self._store.load(session_id, fresh=fresh)
            if stored is None:
                return None
            step = advance_orchestration(
                stored.session,
                envelope,
                sender=ctx.sender,
                now=utc_now(),
                options=self._options,
                cause=cause,
                operator=operator,
                reporter=reporter,
            )
            if not step.changed:
                if step.effects and not stored.session.open:  # a replayed input of an end
                    await self._store.expire_link(ctx.trace_id, stored.session, ctx.outbox)
                if step.effects or stored.fresh:
                    return step
                fresh = True  # a cached state may be behind another replica's
                continue
            assert step.session is not None  # noqa: S101 - a changed step always has a state
            try:
                await self._store.update(
                    step.session, stored.revision, trace_id=ctx.trace_id, outbox=ctx.outbox
                )
            except Conflict:
                fresh = True
                continue
            return step
        raise RuntimeError(f"session {session_id} kept changing under this router")

    async def watch(self, call: AgentCall, session_id: str, ctx: Context) -> Step | None:
        """A reminder about one of a session's calls: fail it if its agent is gone."""
        stored = await self._store.load(session_id, fresh=True)
        if stored is None:
            return None
        replay = stored.session.effects_of(ctx.derive_id("unavailable"))
        if replay is not None:
            return Step(session=stored.session, effects=replay)
        pending = stored.session.pending
        if not stored.session.open or pending is None or pending.envelope_id != call.id:
            return None  # answered, retried under a new envelope, or the session moved on
        error = await self._watcher.unavailable(
            call, pending.deadline, ctx, turn_timeout_s=self._options.turn_timeout_s
        )
        if error is None:
            return None
        return await self.advance(
            error, session_id, ctx, cause=call.id, reporter=True, operator=False
        )

    async def remind(self, error: Error, session_id: str, ctx: Context) -> Step | None:
        """The `maxDurationMs` reminder: deferred until the deadline, then it ends the session."""
        stored = await self._store.load(session_id, fresh=True)
        if stored is None or not stored.session.open:
            return None
        left = (stored.session.deadline - utc_now()).total_seconds()
        if left > 0:
            ctx.defer(left)
            return None
        return await self.advance(
            error, session_id, ctx, cause=error.id, reporter=True, operator=False
        )


def _in_use(msg: HumanMessage, session_id: str, ctx: Context) -> Step:
    why = f"session id {session_id!r} is already in use"
    return _refused(msg, ctx, ErrorCode.INVALID_REQUEST, why, session_id=session_id)


def _refused(
    msg: HumanMessage, ctx: Context, code: ErrorCode, why: str, *, session_id: str = ""
) -> Step:
    details = {"session_id": session_id} if session_id else {}
    refusal = Error(
        id=ctx.derive_id("error"),
        created_at=utc_now(),
        code=code,
        message=f"cannot start a session: {why}",
        cause_id=msg.id,
        details={**details, "target": ctx.sender},
    )
    return Step(session=None, effects=(refusal,))
