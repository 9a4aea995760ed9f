"""What the router publishes for a stored transition: calls, reminders, events, refusals.

The router stores a session's new state first and hands its effects to the runtime after
(actors/router/_actor.py), so an input redelivered after a crash publishes the recorded effects
again under the same ids, and JetStream drops the copies. The events of the session's earlier
inputs whose effects are not yet all stored go first (actors/router/_unsettled.py), so a
refused event is not stored after the ones that follow it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from msgspec import structs
from prometheus_client import CollectorRegistry

from actors.orchestrator import Reminder
from actors.router._metrics import ENDING_EVENTS, SessionEnds
from actors.router._session import Session
from actors.router._unsettled import UnsettledInputs
from bus import CAUSATION_ID, MSG_ID, Context, DeadLetters
from schemas import AgentCall, Error, Namespace, SessionEvent, derive_id, valid_token

__all__ = ("Emitted", "RouterEffects", "reminder_of")


class _Owned(Protocol):
    @property
    def opener(self) -> str: ...

    @property
    def open(self) -> bool: ...


class Emitted(Protocol):
    """A stored transition of either kind of session: its state and its effects."""

    @property
    def session(self) -> _Owned | None: ...

    @property
    def effects(self) -> Sequence[AgentCall | Error | SessionEvent | Reminder]: ...

    @property
    def note(self) -> str: ...


def _changes_standing(event: SessionEvent, session: _Owned | None) -> bool:
    """Whether `event` is how its session now stands: its end, or its opening while it is
    still open (a replay of the opening after the end, past JetStream's duplicate window,
    must not stand it opened again)."""
    if event.event_type in ENDING_EVENTS:
        return True
    return event.event_type == "session_created" and (session is None or session.open)


def reminder_of(call: AgentCall) -> AgentCall:
    """The reminder to check on `call`: the call without its words (text, goal, transcript).
    A reminder is judged by the call's id, session, target and time alone; a copy of the whole
    call, goal twice, let a person's large goals fill the reminders stream every session's
    calls are watched through (a review of what one principal can fill)."""
    return structs.replace(call, text="", goal="", transcript=())


class RouterEffects:
    """Publishes a router's effects, as the router (`actor_id`)."""

    def __init__(
        self,
        namespace: Namespace,
        actor_id: str,
        timers: str,
        dead: DeadLetters,
        registry: CollectorRegistry,
    ) -> None:
        self.namespace = namespace
        self.actor_id = actor_id
        self._timers = timers
        self._dead = dead
        self._ends = SessionEnds(registry, actor_id)
        self._unsettled = UnsettledInputs()

    async def emit(self, step: Emitted, ctx: Context) -> None:
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
            owner = ctx.sender if valid_token(ctx.sender) else self.actor_id
        else:
            owner = session.opener or self.actor_id
        if isinstance(session, Session) and step.effects:
            await self._earlier_first(session, step.effects, owner, ctx)
        for effect in step.effects:
            match effect:
                case AgentCall():
                    await ctx.submit(effect)
                    await ctx.publish(self._timers, reminder_of(effect))  # to check on it
                case SessionEvent():
                    await ctx.publish(self.namespace.events(owner, effect.session_id), effect)
                    if _changes_standing(effect, session):
                        await self._keep_standing(ctx, owner, effect)
                    self._ends.count(ctx, effect)
                case Reminder():  # an orchestrated session's maxDurationMs
                    await ctx.publish(self._timers, effect.error)
                case Error():
                    session_id = effect.details.get("session_id")
                    if (
                        isinstance(session_id, str)
                        and valid_token(session_id)
                        and valid_token(ctx.sender)
                    ):
                        refused = self.namespace.events(ctx.sender, session_id)
                        await ctx.publish(refused, effect)
                    await self._dead_letter(ctx, effect)

    async def _earlier_first(
        self, session: Session, effects: Sequence[object], owner: str, ctx: Context
    ) -> None:
        """Send again the events of the session's inputs recorded before this transition's and
        not yet all stored, each under its own input as its cause; then remember this one's
        until its input is acked. A transition is known by the input its record names (a
        reminder's is the error it made, an early stop's the stop), not the message in hand."""
        input_id = _recorded_input(session, effects)
        if input_id is None:
            return  # effects no record holds (a refusal): nothing to send again later
        for earlier in self._unsettled.before(session.session_id, input_id):
            cause = {CAUSATION_ID: earlier}
            for event in session.effects_of(earlier) or ():
                if isinstance(event, SessionEvent):
                    subject = self.namespace.events(owner, event.session_id)
                    await ctx.publish(subject, event, extra_headers=cause)
                    if _changes_standing(event, session):
                        await self._keep_standing(ctx, owner, event, cause)
        self._unsettled.sent(session.session_id, input_id, ctx.outbox)

    async def _keep_standing(
        self, ctx: Context, owner: str, event: SessionEvent, cause: dict[str, str] | None = None
    ) -> None:
        """Store a copy of the event that opened or ended a session on
        `parley.standing.<owner>.<session>`, which only the router writes, so its last message
        tells how the session stands: a person may read just the last message of a subject,
        and what is told on the timeline after the end (a refusal, an approvals answer, a tool
        step) would hide the end (`parley collab --follow` and `--stop`,
        tools/_stored_events.py). The opening's copy tells an id opened again after a refused
        opening or an expired session from the end before. Its own message id, derived from the
        event's, keeps JetStream from dropping it as the event's duplicate."""
        await ctx.publish(
            self.namespace.standing(owner, event.session_id),
            event,
            extra_headers={MSG_ID: derive_id(event.id, "standing"), **(cause or {})},
        )

    async def _dead_letter(self, ctx: Context, refusal: Error) -> None:
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


def _recorded_input(session: Session, effects: Sequence[object]) -> str | None:
    """The input whose record in `session` holds exactly `effects`, latest first."""
    for applied in reversed(session.applied):
        if applied.effects == tuple(effects):
            return applied.input_id
    return None
