"""Opening a session: a person's message becomes a session and its first call (seed 001 §6).

The message names the mode (a single call or a collaboration), the participants, the first
speaker and the cap; a single call may instead name its agent with a mention (`@gpt …`), and
a collaboration may be asked for with seed 001's optional command form (`@router collaborate
gpt claude: <goal>`). A message that cannot open a session is refused with `INVALID_REQUEST`.
"""

from __future__ import annotations

import re
from datetime import datetime

from actors.router._session import EventClock, Limits, Session, Step
from actors.router._turns import call_agent, error_for, record
from schemas import (
    Error,
    ErrorCode,
    HumanMessage,
    SubjectTokenError,
    TranscriptItem,
    check_token,
    derive_id,
)

__all__ = ("open_session", "refuse_duplicate", "session_id_for")

_MENTION = re.compile(r"^\s*@([a-z0-9_-]{1,64})\b[\s:,]*(.*)$", re.DOTALL)
_COMMAND = re.compile(r"^\s*@router\s+collaborate\s+([a-z0-9_\- ]+?)\s*:\s*(.+)$", re.DOTALL)


def session_id_for(msg: HumanMessage) -> str:
    """The message's own session id, or one derived from its id (the same on redelivery)."""
    return msg.opened_session()


def _parse(msg: HumanMessage, limits: Limits) -> tuple[str, tuple[str, ...], str, str] | str:
    """(mode, participants, first speaker, goal) from a message, or why it cannot start."""
    mode: str = msg.mode
    text = msg.text
    participants = tuple(msg.participants)
    command = _COMMAND.match(text) if mode == "single" else None
    if command:  # seed 001 §6's optional `@router collaborate gpt claude: <goal>`
        mode, text = "collaborate", command.group(2)
        participants = tuple(command.group(1).split())
    elif mode == "single" and msg.first_speaker is None and len(participants) != 1:
        mention = _MENTION.match(text)
        if mention is None:
            return "a single call names its agent: `@gpt …`, first_speaker or one participant"
        participants, text = (mention.group(1),), mention.group(2)
    if mode == "single":
        target = msg.first_speaker or participants[0]
        return "single", (target,), target, text.strip() or msg.text
    participants = participants or limits.default_participants
    if len(set(participants)) != len(participants):
        return f"participants repeat a name: {', '.join(participants)}"
    first = msg.first_speaker or participants[0]
    if first not in participants:
        return f"first speaker {first!r} is not a participant ({', '.join(participants)})"
    return "collaborate", participants, first, text


def open_session(
    msg: HumanMessage, *, session_id: str, sender: str, now: datetime, limits: Limits
) -> Step:
    """Open a session from a person's message and call its first speaker (round 1).

    An unusable message (bad session id, no agent named, a first speaker who is not a
    participant) opens nothing: the sender gets an `INVALID_REQUEST` error through the gate.
    """
    clock = EventClock(session_id, msg.id, now)
    try:
        check_token(session_id, "session id")
    except SubjectTokenError as exc:
        return _refused(clock, msg, sender, str(exc))
    parsed = _parse(msg, limits)
    if isinstance(parsed, str):
        return _refused(clock, msg, sender, parsed)
    mode, participants, first, goal = parsed
    for name in participants:
        try:
            check_token(name, "participant")
        except SubjectTokenError as exc:
            return _refused(clock, msg, sender, str(exc))
    session = Session(
        session_id=session_id,
        origin_id=msg.id,
        mode="single" if mode == "single" else "collaborate",
        participants=participants,
        goal=goal,
        user_id=msg.user_id,
        opener=sender,
        thread=msg.thread,
        first_speaker=first,
        round=1,
        max_rounds=1 if mode == "single" else msg.max_rounds,
        transcript=(TranscriptItem(role="user", name=msg.sender, text=goal, created_at=now),),
        created_at=now,
    )
    created = clock.event(
        "session_created",
        round_=0,
        speaker=first,
        envelope_ids=(msg.id,),
        payload={
            "mode": session.mode,
            "goal": goal,
            "participants": list(participants),
            "max_rounds": session.max_rounds,
            "user_id": msg.user_id,
            # How long a call may run unmoved before the session ends (its turn, then the
            # sweep's margin): a command that joins a session mid-call waits as long.
            "turn_timeout_s": limits.turn_timeout_s,
            "stall_margin_s": limits.stall_margin_s,
        },
    )
    started = clock.event("session_started", round_=1, speaker=first)
    call_id = derive_id(session_id, "call-1")
    session, call_effects = call_agent(session, clock, first, call_id, attempts=1, limits=limits)
    effects = (created, started, *call_effects)
    return Step(session=record(session, msg.id, effects), effects=effects, changed=True)


def _invalid(clock: EventClock, msg: HumanMessage, sender: str, why: str) -> Error:
    return error_for(
        clock, ErrorCode.INVALID_REQUEST, f"cannot start a session: {why}", msg.id, sender
    )


def refuse_full(
    msg: HumanMessage, *, session_id: str, sender: str, now: datetime, why: str
) -> Step:
    """Refuse an opening whose opener's share of the sessions bucket is used up
    (actors/router/_session_charges.py): retryable once their oldest sessions expire."""
    clock = EventClock(session_id, msg.id, now)
    error = error_for(
        clock, ErrorCode.RATE_LIMITED, f"cannot start a session: {why}", msg.id, sender
    )
    return _refused(clock, msg, sender, why, error)


def _refused(
    clock: EventClock, msg: HumanMessage, sender: str, why: str, error: Error | None = None
) -> Step:
    """Refuse an unusable opening message: an error to its sender, and, when its session id
    can name a subject, a `session_failed` event for whoever follows that session."""
    error = error or _invalid(clock, msg, sender, why)
    try:
        check_token(clock.session_id, "session id")
    except SubjectTokenError:
        return Step(session=None, effects=(error,))
    failed = clock.event(
        "session_failed",
        round_=0,
        stop_reason="error",
        envelope_ids=(msg.id,),
        payload={"code": str(error.code), "message": error.message},
    )
    return Step(session=None, effects=(error, failed))


def refuse_duplicate(msg: HumanMessage, *, session_id: str, sender: str, now: datetime) -> Step:
    """A second, different message claims a session id that is already in use."""
    clock = EventClock(session_id, msg.id, now)
    why = f"session id {session_id!r} is already in use"
    return Step(session=None, effects=(_invalid(clock, msg, sender, why),))
