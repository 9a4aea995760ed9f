"""The router: runs collaboration sessions (seed 001) and single calls over the bus.

A thin shell around the pure turn loop (actors/router/_turns.py): for each input it loads the
session, applies the transition, stores the result with compare-and-set, and only then hands
the effects (agent calls to the gate, events and refusals to `parley.events.<owner>.<session>`) to
the runtime, which acks the input once JetStream stored them all. So a router killed at any point
loses nothing and repeats nothing:

- killed before the store: the input is redelivered and the transition runs again from the
  same state, giving the same effects with the same ids;
- killed after the store, before the ack: the redelivered input is found among the session's
  applied inputs and its recorded effects are published again (JetStream drops the copies).

Handlers run concurrently (a turn waits on two KV round trips, and one session must not hold
up the others); a per-session lock keeps one session's inputs in arrival order inside the
process, and compare-and-set keeps replicas from both advancing one session: a session is
owned by whichever replica holds its latest revision, one transition at a time.

Every call the router sends is also put on its own reminder queue (`parley.timers.router`),
which all replicas share: until the call is answered, the reminder comes back and the router
asks actors/router/_turn_watch.py whether the agent is still there. A crashed, crash-looping or
long-stalled agent fails its session with `AGENT_UNAVAILABLE` instead of leaving it waiting.
A call's deadline is stored with it, so the router's own restarts do not push it back.

And in case a reminder is ever lost, every replica sweeps the sessions bucket every
`sweep_every_s` (actors/router/_sweep.py): a running session unmoved past its deadline plus
`stall_margin_s` is sent, through the same reminder queue, an input that ends it as `stalled`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import ClassVar

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from actors.router._opening import open_session, refuse_duplicate, session_id_for
from actors.router._session import Limits, Step
from actors.router._store import Conflict, SessionStore
from actors.router._sweep import stall, stalled
from actors.router._turn_watch import Unavailable, judge
from actors.router._turns import advance
from bus import (
    SENDER_ROLE,
    Actor,
    BusHandle,
    ConfigError,
    Context,
    DeadLetters,
    Input,
    Settings,
    TraceHeaders,
    Uptime,
)
from schemas import (
    ActorHeartbeat,
    AgentCall,
    AgentResponse,
    AnyEnvelope,
    Control,
    Error,
    ErrorCode,
    HumanMessage,
    SessionEvent,
    SubjectTokenError,
    check_token,
    encode,
    heartbeat_key,
    utc_now,
)

__all__ = ("RouterActor",)

log = logging.getLogger("parley.actors.router")

_CAS_ATTEMPTS = 5
_LIST_TIMEOUT_S = 30.0
"""Listing the sessions may take this long before the sweep gives up until next time."""
_CLOSED_KEPT = 65_536
"""Ended sessions the sweep remembers so as not to read them again (it forgets them all at
once past this many, and reads each once more)."""
_heartbeat_decoder = msgspec.json.Decoder(ActorHeartbeat)


class RouterActor(Actor):
    """Sessions: open, advance turn by turn, end on final / no handoff / cap / error / Stop."""

    kind: ClassVar[str] = "router"
    concurrent_handlers: ClassVar[bool] = True

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        try:
            self.limits = msgspec.convert(settings.options, Limits)
        except msgspec.ValidationError as exc:
            raise ConfigError(f"router options: {exc}") from None
        self._store: SessionStore | None = None
        self._dead: DeadLetters | None = None
        self._registry: KeyValue | None = None
        self._uptime = Uptime()
        self._timers = self.namespace.timers(self.actor_id)
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._js: JetStreamContext | None = None
        self._sessions_kv: KeyValue | None = None
        self._closed: set[str] = set()

    def inputs(self) -> Sequence[Input]:
        """What the gate delivers, and the reminders about calls still unanswered."""
        return (
            Input.deliver(self.namespace, self.actor_id),
            Input.timers(self.namespace, self.actor_id),
        )

    async def start(self, bus: BusHandle) -> None:
        kv = await bus.js.key_value(bus.namespace.bucket("sessions"))
        self._store = SessionStore(kv)
        self._js, self._sessions_kv = bus.js, kv
        self._registry = await bus.js.key_value(bus.namespace.bucket("registry"))
        self._uptime = bus.uptime
        self._dead = DeadLetters(
            bus.js, bus.namespace, self.actor_id, bus.settings.max_payload, bus.metrics
        )

    @property
    def store(self) -> SessionStore:
        if self._store is None:
            raise RuntimeError("router used before start()")
        return self._store

    @asynccontextmanager
    async def _session_lock(self, session_id: str) -> AsyncIterator[None]:
        """One input of a session at a time in this process, in the order they arrived."""
        lock, users = self._locks.get(session_id, (asyncio.Lock(), 0))
        self._locks[session_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[session_id]
            if users == 1:
                del self._locks[session_id]
            else:
                self._locks[session_id] = (lock, users - 1)

    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        # Effects are sent inside the session's lock, so one session's events reach the
        # timeline in the order its transitions were stored.
        if ctx.subject == self._timers:
            if isinstance(envelope, AgentCall) and ctx.sender == self.actor_id:
                await self._watch(envelope, ctx)
            elif isinstance(envelope, Error) and ctx.sender == self.actor_id:
                await self._stall(envelope, ctx)
            else:
                log.warning("ignored reminder", extra={"kind": type(envelope).__name__})
            return
        match envelope:
            case HumanMessage():
                session_id = session_id_for(envelope)
                async with self._session_lock(session_id):
                    step = await self._open(envelope, session_id, ctx)
                    await self._emit(step, ctx)
            case AgentResponse() | Error() | Control():
                found = await self._session_of(envelope, ctx)
                if found is None:
                    await self._unknown(envelope, ctx, "names no session this router knows")
                    return
                session_id = found
                async with self._session_lock(session_id):
                    step = await self._advance(envelope, session_id, ctx)
                    await self._emit(step, ctx)
            case _:
                log.info("ignored", extra={"kind": type(envelope).__name__, "id": envelope.id})
                return
        if step.note:
            log.info(step.note, extra={"session_id": session_id, "id": envelope.id})

    async def _session_of(
        self, envelope: AgentResponse | Error | Control, ctx: Context
    ) -> str | None:
        """The session an input belongs to; an error finds it through its trace.

        The trace is the gate's (derived from the error's cause, the call it answers) and the
        trace's session is the router's own record, written when it opened the session. An
        error's `details` are its sender's words: one naming another session must not reach
        that session.
        """
        if isinstance(envelope, Error):
            try:
                check_token(ctx.trace_id, "trace id")
            except SubjectTokenError:
                return None
            return await self.store.session_of_trace(ctx.trace_id)
        return envelope.session_id

    async def _open(self, msg: HumanMessage, session_id: str, ctx: Context) -> Step:
        now = utc_now()
        for _ in range(_CAS_ATTEMPTS):
            stored = await self.store.load(session_id, fresh=True) if _valid(session_id) else None
            if stored is not None:
                replay = stored.session.effects_of(msg.id)
                if replay is not None:
                    return Step(session=stored.session, effects=replay, note="replayed")
                if stored.session.origin_id == msg.id:
                    return Step(session=stored.session, note="opening message seen long ago")
                return refuse_duplicate(msg, session_id=session_id, sender=ctx.sender, now=now)
            step = open_session(
                msg, session_id=session_id, sender=ctx.sender, now=now, limits=self.limits
            )
            if step.session is None:
                return step
            await self.store.link_trace(ctx.trace_id, session_id)
            try:
                await self.store.create(step.session)
            except Conflict:
                continue
            return step
        raise RuntimeError(f"session {session_id} kept changing while being opened")

    async def _advance(
        self, envelope: AgentResponse | Error | Control, session_id: str, ctx: Context
    ) -> Step:
        fresh = False
        cause, reporter, operator = self._vouched(ctx)
        for _ in range(_CAS_ATTEMPTS):
            stored = await self.store.load(session_id, fresh=fresh) if _valid(session_id) else None
            if stored is None:
                return self._unknown_step(envelope, ctx, f"session {session_id!r} does not exist")
            step = advance(
                stored.session,
                envelope,
                sender=ctx.sender,
                now=utc_now(),
                limits=self.limits,
                cause=cause,
                operator=operator,
                reporter=reporter,
            )
            if not step.changed:
                if step.effects or stored.fresh:
                    return step  # a replay, or an input the latest state really ignores
                fresh = True  # a cached state may be behind another replica's: read again
                continue
            assert step.session is not None  # noqa: S101 - a changed step always has a state
            try:
                await self.store.update(step.session, stored.revision)
            except Conflict:
                fresh = True
                continue
            return step
        raise RuntimeError(f"session {session_id} kept changing under this router")

    def _vouched(self, ctx: Context) -> tuple[str, bool, bool]:
        """What the gate (or the router itself) vouches for about an input's sender.

        On a reminder the router judges its own call, the reminder itself. On a delivery the
        gate set the causation (an envelope it delivered to the sender) and the sender's role
        (from the signed bundle); only the gate writes deliver subjects.

        Returns:
            (cause, reporter, operator) as `actors.router._turns.advance` takes them.
        """
        if ctx.subject == self._timers:
            return ctx.envelope_id, True, False
        operator = ctx.headers.get(SENDER_ROLE) == "operator"
        return ctx.causation_id, ctx.sender == self.limits.gate_id, operator

    async def _watch(self, call: AgentCall, ctx: Context) -> None:
        """A reminder about `call`: done if it was answered, else judge the agent's silence.

        The error that fails the session has an id derived from the call, so every replica
        and every redelivery of the reminder produces the same one, and the session applies
        it once.
        """
        session_id = call.session_id
        if session_id is None or not _valid(session_id):
            return
        async with self._session_lock(session_id):
            stored = await self.store.load(session_id, fresh=True)
            if stored is None:
                return
            replay = stored.session.effects_of(ctx.derive_id("unavailable"))
            if replay is not None:
                # Applied before the router died or its events failed to publish: publish
                # the recorded effects again (JetStream drops copies), never skip them.
                await self._emit(Step(session=stored.session, effects=replay), ctx)
                return
            pending = stored.session.pending
            if not stored.session.open or pending is None:
                return
            if pending.envelope_id != call.id:
                return  # answered, or retried under a new call with its own reminder
            verdict = judge(
                call.target,
                call.created_at,
                await self._heartbeat(call.target),
                now=utc_now(),
                connected_since=self._uptime.since,
                limits=self.limits,
                deadline=pending.deadline,
                outages=self._uptime.deaf(),
            )
            if not isinstance(verdict, Unavailable):
                ctx.defer(verdict.seconds)
                return
            error = Error(
                id=ctx.derive_id("unavailable"),
                created_at=utc_now(),
                code=ErrorCode.AGENT_UNAVAILABLE,
                message=verdict.message,
                cause_id=call.id,
                details={"session_id": session_id, "target": call.target, **verdict.details},
            )
            log.warning(
                "agent unavailable", extra={"session_id": session_id, "reason": verdict.message}
            )
            step = await self._advance(error, session_id, ctx)
            await self._emit(step, ctx)

    async def background(self, stopping: asyncio.Event) -> None:
        """Sweep for stalled sessions every `sweep_every_s`, from start until stopping."""
        while True:
            await self.sweep()
            try:
                async with asyncio.timeout(self.limits.sweep_every_s):
                    await stopping.wait()
                return
            except TimeoutError:
                continue

    async def sweep(self) -> int:
        """Find running sessions unmoved past their deadline plus the margin; send each the
        input that ends it (on the reminder queue, so it is handled, stored and acked like any
        other input). Returns how many were found.

        A read that fails (JetStream away) is logged and tried again next time: the sweep is
        a safety net, and must not take the router down with it.
        """
        if self._sessions_kv is None or self._js is None:
            raise RuntimeError("router used before start()")
        try:
            keys = await self._session_keys(self._sessions_kv)
        except Exception as exc:
            log.warning("sweep could not list sessions", extra={"error": repr(exc)})
            return 0
        if len(self._closed) > _CLOSED_KEPT:
            self._closed.clear()
        found = 0
        for key in keys:
            session_id = key.removeprefix("session.")
            if session_id in self._closed or not _valid(session_id):
                continue
            try:
                stored = await self.store.load(session_id, fresh=True)
            except Exception as exc:
                log.warning("sweep could not read a session", extra={"error": repr(exc)})
                return found
            if stored is None or not stored.session.open:
                self._closed.add(session_id)
                continue
            error = stalled(
                stored.session, now=utc_now(), limits=self.limits, outages=self._uptime.deaf()
            )
            if error is None:
                continue
            found += 1
            log.warning(
                "session stalled", extra={"session_id": session_id, "reason": error.message}
            )
            # The trace of its opening message, so the ending joins the session's trace.
            headers = TraceHeaders(
                trace_id=stored.session.origin_id, origin=self.actor_id
            ).to_headers(error.id)
            try:
                await self._js.publish(self._timers, encode(error), headers=headers)
            except Exception as exc:
                log.warning("sweep could not send its input", extra={"error": repr(exc)})
                return found
        return found

    @staticmethod
    async def _session_keys(kv: KeyValue) -> list[str]:
        """Every `session.*` key (not the trace links), read with headers only.

        nats-py's `KeyValue.keys(filters=...)` matches its filters as substrings of keys
        read from the whole bucket; a watch on the subject reads only the sessions.
        """
        keys: list[str] = []
        async with asyncio.timeout(_LIST_TIMEOUT_S):
            watcher = await kv.watch("session.>", ignore_deletes=True, meta_only=True)
            try:
                async for entry in watcher:
                    if entry is None:
                        break  # the end of what was stored when the watch began
                    keys.append(entry.key)
            finally:
                await watcher.stop()  # type: ignore[no-untyped-call]  # nats-py leaves it untyped
        return keys

    async def _stall(self, error: Error, ctx: Context) -> None:
        """The sweep's input: end its session as `stalled`, if it has not moved since."""
        session_id = error.details.get("session_id")
        if not isinstance(session_id, str) or not _valid(session_id):
            return
        async with self._session_lock(session_id):
            for _ in range(_CAS_ATTEMPTS):
                stored = await self.store.load(session_id, fresh=True)
                if stored is None:
                    return
                step = stall(
                    stored.session,
                    error,
                    now=utc_now(),
                    limits=self.limits,
                    outages=self._uptime.deaf(),
                )
                if step.changed and step.session is not None:
                    try:
                        await self.store.update(step.session, stored.revision)
                    except Conflict:
                        continue
                if step.note:
                    log.info(step.note, extra={"session_id": session_id, "id": error.id})
                await self._emit(step, ctx)
                return
            raise RuntimeError(f"session {session_id} kept changing under the sweep")

    async def _heartbeat(self, agent: str) -> ActorHeartbeat | None:
        if self._registry is None:
            raise RuntimeError("router used before start()")
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

    def _unknown_step(
        self, envelope: AgentResponse | Error | Control, ctx: Context, why: str
    ) -> Step:
        if not isinstance(envelope, Control):
            return Step(session=None, note=f"ignored {type(envelope).__name__}: {why}")
        refusal = Error(
            id=ctx.derive_id("error"),
            created_at=utc_now(),
            code=ErrorCode.SESSION_NOT_FOUND,
            message=f"cannot {envelope.action}: {why}",
            cause_id=envelope.id,
            details={"session_id": envelope.session_id},
        )
        return Step(session=None, effects=(refusal,))

    async def _unknown(
        self, envelope: AgentResponse | Error | Control, ctx: Context, why: str
    ) -> None:
        step = self._unknown_step(envelope, ctx, why)
        if step.note:
            log.info(step.note, extra={"id": envelope.id})
        await self._emit(step, ctx)

    async def _emit(self, step: Step, ctx: Context) -> None:
        """Agent calls go to the gate; events go to the timeline of the session's owner, and
        refusals to the timeline of the one refused.

        A timeline is `parley.events.<owner>.<session>`, the owner being the principal that
        opened the session (or tried to: a refused opening is told on the sender's timeline;
        the router itself owns sessions stored before openers were recorded), so the broker
        lets each person follow their own sessions and no one else's. A refusal answers a
        person (a message that cannot open a session, a Stop for a session that does not
        exist or is not theirs), who follows timelines under their own name, not a deliver
        subject; the input itself is also dead-lettered with the reason.
        """
        session = step.session
        if session is None:  # nothing was opened: the step answers the input's sender
            owner = ctx.sender if _valid(ctx.sender) else self.actor_id
        else:
            owner = session.opener or self.actor_id
        for effect in step.effects:
            match effect:
                case AgentCall():
                    await ctx.submit(effect)
                    await ctx.publish(self._timers, effect)  # the reminder to check on it
                case SessionEvent():
                    await ctx.publish(self.namespace.events(owner, effect.session_id), effect)
                case Error():
                    session_id = effect.details.get("session_id")
                    if isinstance(session_id, str) and _valid(session_id) and _valid(ctx.sender):
                        refused = self.namespace.events(ctx.sender, session_id)
                        await ctx.publish(refused, effect)
                    await self._dead_letter(ctx, effect)

    async def _dead_letter(self, ctx: Context, refusal: Error) -> None:
        if self._dead is None:
            raise RuntimeError("router used before start()")
        await self._dead.publish(
            payload=ctx.payload,
            headers=ctx.headers,
            subject=ctx.subject,
            stream=ctx.stream,
            seq=ctx.stream_seq,
            attempt=ctx.attempt,
            reason=refusal.code.lower(),
            detail=refusal.message,
        )


def _valid(session_id: str) -> bool:
    try:
        check_token(session_id, "session id")
    except SubjectTokenError:
        return False
    return True
