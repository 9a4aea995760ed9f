"""The owner's pause, resume and take over in a collaboration session (seed 000's controls,
given to seed 001's sessions too).

Pause is immediate: no call is made after it. A call already in flight is answered and the
answer recorded as usual, but the handoff's call is held (`Session.held`) until the owner
resumes, when it is made. Take over is the owner typing the next turn themselves: allowed
while a paused session holds its next call back (no call is in flight), the owner's words are
recorded as theirs and become the task of the held speaker, who is called at once, and the
session runs on. Who may steer is checked before (actors/router/_turns.py): the opener or an
operator.
"""

from __future__ import annotations

from typing import Final

from actors.router._calling import call_agent, error_for, replace
from actors.router._session import Effect, EventClock, Limits, Session
from schemas import Control, ErrorCode, TranscriptItem, derive_id

__all__ = ("STEERING", "steer")

STEERING: Final = frozenset({"pause", "resume", "take_over"})


def _refuse(
    session: Session, clock: EventClock, control: Control, why: str
) -> tuple[Session, tuple[Effect, ...]]:
    return session, (error_for(clock, ErrorCode.INVALID_REQUEST, why, control.id, "router"),)


def _call_held(
    session: Session, clock: EventClock, limits: Limits
) -> tuple[Session, tuple[Effect, ...]]:
    speaker = session.held
    session = replace(session, paused=False, held=None)
    if speaker is None:
        return session, ()  # the call in flight still stands
    call_id = derive_id(session.session_id, f"call-{session.round}")
    return call_agent(session, clock, speaker, call_id, attempts=1, limits=limits)


def steer(
    session: Session, control: Control, clock: EventClock, limits: Limits
) -> tuple[Session, tuple[Effect, ...]]:
    """Apply the owner's pause, resume or take over (already checked to be the owner's)."""
    if not session.open:
        return _refuse(session, clock, control, f"cannot {control.action}: the session ended")
    ids = (control.id,)
    match control.action:
        case "pause":
            if session.paused:
                return session, ()
            session = replace(session, paused=True)
            return session, (clock.event("session_paused", round_=session.round, envelope_ids=ids),)
        case "resume":
            if not session.paused:
                return _refuse(session, clock, control, "cannot resume: the session is not paused")
            told = clock.event("session_resumed", round_=session.round, envelope_ids=ids)
            session, effects = _call_held(session, clock, limits)
            return session, (told, *effects)
    text = control.text.strip()
    if not text:
        return _refuse(session, clock, control, "take over needs the message to send (text)")
    if session.held is None:
        why = "take over waits for a turn boundary: pause, and take over once the answer is in"
        return _refuse(session, clock, control, why)
    when = clock.now
    mine = TranscriptItem(role="user", name=session.opener or "you", text=text, created_at=when)
    task = TranscriptItem(role="router", name=session.held, text=text, created_at=when)
    session = replace(session, transcript=(*session.transcript, mine, task))
    told = clock.event(
        "session_resumed",
        round_=session.round,
        speaker=session.held,
        envelope_ids=ids,
        payload={"taken_over": True, "message": text},
    )
    session, effects = _call_held(session, clock, limits)
    return session, (told, *effects)
