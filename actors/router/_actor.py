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

Handlers run concurrently; a per-session lock keeps one session's inputs in arrival order in
the process, and compare-and-set keeps replicas from both advancing one session.

Every call the router sends is also put on its own reminder queue (`parley.timers.router`),
which all replicas share: until the call is answered, the reminder comes back and the router
asks actors/router/_turn_watch.py whether the agent is still there. A crashed, crash-looping or
long-stalled agent fails its session with `AGENT_UNAVAILABLE` instead of leaving it waiting.
A call's deadline is stored with it, so the router's own restarts do not push it back; a wait
on a person's approval moves it (actors/router/_approval_wait.py).

And in case a reminder is ever lost, every replica sweeps the sessions bucket every
`sweep_every_s` (actors/router/_sweep.py): a running session unmoved past its deadline plus
`stall_margin_s` is sent, through the same reminder queue, an input that ends it as `stalled`.

A person's Stop that reaches the router before the session it names is open is kept, and
applied once the session's opener opens it (actors/router/_early_stops.py).

Orchestrated sessions (seed 000, a message with `mode = "orchestrate"`) are the router's too,
stored beside these and run by actors/router/_orchestrated.py with actors/orchestrator's
transitions: an input whose session is not a collaboration is offered to them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import ClassVar

from actors.orchestrator import OrchestratedSession
from actors.router._approval_wait import HeldApprovals
from actors.router._early_stops import EarlyStops, kept_if_early
from actors.router._effects import Emitted, RouterEffects
from actors.router._opener import open_or_replay
from actors.router._opening import session_id_for
from actors.router._orchestrated import OrchestratedSessions
from actors.router._session import Limits, Session, Step
from actors.router._session_charges import session_charges
from actors.router._store import Conflict, SessionStore
from actors.router._sweep import stall
from actors.router._sweeper import SessionSweeper
from actors.router._turns import advance, unknown_session
from actors.router._watcher import CallWatcher
from bus import (
    SENDER_ROLE,
    Actor,
    BusHandle,
    Context,
    Input,
    SessionLocks,
    Settings,
    Uptime,
    dead_letters_for,
    validated_options,
)
from schemas import (
    AgentCall,
    AgentResponse,
    AnyEnvelope,
    Control,
    Error,
    HumanMessage,
    utc_now,
    valid_token,
)

__all__ = ("RouterActor",)

log = logging.getLogger("parley.actors.router")

_CAS_ATTEMPTS = 5


class RouterActor(Actor):
    """Sessions: open, advance turn by turn, end on final / no handoff / cap / error / Stop."""

    kind: ClassVar[str] = "router"
    files_by_sender: ClassVar[bool] = True
    concurrent_handlers: ClassVar[bool] = True

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.limits = validated_options(Limits, settings.options, "router")
        self._store: SessionStore[Session] | None = None
        self._orchestrated: OrchestratedSessions | None = None
        self._watcher: CallWatcher | None = None
        self._held: HeldApprovals | None = None
        self._uptime = Uptime()
        self._timers = self.namespace.timers(self.actor_id)
        self._locks = SessionLocks()
        self._early: EarlyStops | None = None
        self._sweeper: SessionSweeper | None = None
        self._effects: RouterEffects | None = None

    def inputs(self) -> Sequence[Input]:
        """What the gate delivers, and the reminders about calls still unanswered."""
        return (
            Input.deliver(self.namespace, self.actor_id),
            Input.timers(self.namespace, self.actor_id),
        )

    async def start(self, bus: BusHandle) -> None:
        kv = await bus.js.key_value(bus.namespace.bucket("sessions"))
        ended_ttl_s = bus.settings.retention.ended_session_ttl_s
        charges = session_charges(kv, bus.settings)
        self._store = SessionStore(kv, Session, "session", ended_ttl_s=ended_ttl_s, charges=charges)
        self._early = EarlyStops(await bus.js.key_value(bus.namespace.bucket("early_stops")))
        registry = await bus.js.key_value(bus.namespace.bucket("registry"))
        self._uptime = bus.uptime
        self._watcher = CallWatcher(registry, bus.uptime, self.limits)
        self._held = HeldApprovals(bus.nc, bus.settings.js_api_prefix, bus.namespace, self.limits)
        self._orchestrated = OrchestratedSessions(
            SessionStore(kv, OrchestratedSession, "orch", ended_ttl_s=ended_ttl_s, charges=charges),
            self._store,
            self.limits.orchestration,
            self._watcher,
            registry,
        )
        dead = dead_letters_for(
            bus.js, bus.namespace, self.actor_id, bus.settings, bus.metrics, by_sender=True
        )
        self._effects = RouterEffects(
            self.namespace, self.actor_id, self._timers, dead, bus.metrics.registry
        )
        self._sweeper = SessionSweeper(
            bus.js, kv, self._store, self._timers, self.actor_id, self.limits, bus.uptime
        )

    @property
    def store(self) -> SessionStore[Session]:
        if self._store is None:
            raise RuntimeError("router used before start()")
        return self._store

    @property
    def orchestrated(self) -> OrchestratedSessions:
        if self._orchestrated is None:
            raise RuntimeError("router used before start()")
        return self._orchestrated

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
        step: Emitted
        match envelope:
            case HumanMessage():
                session_id = session_id_for(envelope)
                async with self._locks.hold(session_id):
                    if envelope.mode == "orchestrate":
                        step = await self.orchestrated.open(envelope, session_id, ctx)
                    else:
                        step = await self._open(envelope, session_id, ctx)
                    await self._emit(step, ctx)
                    if step.session is not None:
                        await self._stop_early(session_id, ctx)
            case AgentResponse() | Error() | Control():
                found = await self._session_of(envelope, ctx)
                if found is None:
                    await self._unknown(envelope, ctx, "names no session this router knows")
                    return
                session_id = found
                async with self._locks.hold(session_id):
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
            if not valid_token(ctx.trace_id):
                return None
            return await self.store.session_of_trace(ctx.trace_id)
        return envelope.session_id

    async def _open(self, msg: HumanMessage, session_id: str, ctx: Context) -> Step:
        return await open_or_replay(self.store, msg, session_id, ctx, self.limits)

    async def _advance(
        self, envelope: AgentResponse | Error | Control, session_id: str, ctx: Context
    ) -> Emitted:
        fresh = kept = False
        cause, reporter, operator = self._vouched(ctx)
        for _ in range(_CAS_ATTEMPTS):
            stored = (
                await self.store.load(session_id, fresh=fresh) if valid_token(session_id) else None
            )
            if stored is None:
                found = await self.orchestrated.advance(
                    envelope, session_id, ctx, cause=cause, reporter=reporter, operator=operator
                )
                if found is None and not kept and kept_if_early(envelope, session_id):
                    assert isinstance(envelope, Control) and self._early  # noqa: S101
                    await self._early.keep(session_id, envelope, ctx.sender)
                    kept = fresh = True  # opened meanwhile elsewhere? then it applies now
                    continue
                if found is None and kept:
                    return Step(session=None, note="stop kept until its session opens")
                why = f"session {session_id!r} does not exist"
                return found or unknown_session(
                    envelope, ctx.derive_id("error"), why, now=utc_now()
                )
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
                if step.effects and not stored.session.open:  # a replayed input of an end
                    await self.store.expire_link(ctx.trace_id, stored.session, ctx.outbox)
                if step.effects or stored.fresh:
                    return step  # a replay, or an input the latest state really ignores
                fresh = True  # a cached state may be behind another replica's: read again
                continue
            assert step.session is not None  # noqa: S101 - a changed step always has a state
            try:
                await self.store.update(
                    step.session, stored.revision, trace_id=ctx.trace_id, outbox=ctx.outbox
                )
            except Conflict:
                fresh = True
                continue
            return step
        raise RuntimeError(f"session {session_id} kept changing under this router")

    async def _stop_early(self, session_id: str, ctx: Context) -> None:
        """Apply the Stop its opener sent before the session opened, if any."""
        assert self._early is not None  # noqa: S101 - set with the store
        control = await self._early.find(session_id, ctx.sender)
        if control is not None:
            await self._emit(await self._advance(control, session_id, ctx), ctx)

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
        if session_id is None or not valid_token(session_id):
            return
        assert self._watcher is not None and self._held  # noqa: S101 - set with the store
        if await self._watcher.too_early(call, ctx):
            return  # re-armed from the call alone: nothing can be due yet
        async with self._locks.hold(session_id):
            stored = await self.store.load(session_id, fresh=True)
            if stored is None:
                found = await self.orchestrated.watch(call, session_id, ctx)
                if found is not None:
                    await self._emit(found, ctx)
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
            deadline = await self._held.deadline_of(self.store, stored)
            error = await self._watcher.unavailable(call, deadline, ctx)
            if error is not None:
                await self._emit(await self._advance(error, session_id, ctx), ctx)

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
        """One pass of the stall sweep (actors/router/_sweeper.py); how many it found."""
        if self._sweeper is None:
            raise RuntimeError("router used before start()")
        return await self._sweeper.sweep()

    async def _stall(self, error: Error, ctx: Context) -> None:
        """The sweep's input: end its session as `stalled`, if it has not moved since."""
        session_id = error.details.get("session_id")
        if not isinstance(session_id, str) or not valid_token(session_id):
            return
        async with self._locks.hold(session_id):
            for _ in range(_CAS_ATTEMPTS):
                stored = await self.store.load(session_id, fresh=True)
                if stored is None:  # an orchestrated session's maxDurationMs, perhaps
                    found = await self.orchestrated.remind(error, session_id, ctx)
                    if found is not None:
                        await self._emit(found, ctx)
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
                        await self.store.update(
                            step.session, stored.revision, trace_id=ctx.trace_id
                        )
                    except Conflict:
                        continue
                if step.note:
                    log.info(step.note, extra={"session_id": session_id, "id": error.id})
                await self._emit(step, ctx)
                return
            raise RuntimeError(f"session {session_id} kept changing under the sweep")

    async def _unknown(
        self, envelope: AgentResponse | Error | Control, ctx: Context, why: str
    ) -> None:
        step = unknown_session(envelope, ctx.derive_id("error"), why, now=utc_now())
        if step.note:
            log.info(step.note, extra={"id": envelope.id})
        await self._emit(step, ctx)

    async def _emit(self, step: Emitted, ctx: Context) -> None:
        if self._effects is None:
            raise RuntimeError("router used before start()")
        await self._effects.emit(step, ctx)
