"""The turn loop of seed 001 §6 as transitions: answer, error, stop (and the owner's pause,
resume and take over, actors/router/_steering.py).

Each function takes the stored session and one input and returns a `Step`: the next state and
the effects, built with ids derived from the input's id. See actors/router/_session.py for why that
makes a re-run after a crash exact, and actors/router/_opening.py for how a session starts.
"""

from __future__ import annotations

from datetime import datetime

from actors.router._calling import call_agent, error_for, record, replace
from actors.router._session import (
    CANCEL_NOTICE,
    SINGLE_CANCEL_NOTICE,
    Effect,
    EventClock,
    Limits,
    Session,
    SessionInput,
    Step,
    StopReason,
)
from actors.router._steering import STEERING, steer
from schemas import (
    AgentResponse,
    Control,
    Error,
    ErrorCode,
    Handoff,
    TranscriptItem,
    derive_id,
)

__all__ = ("advance", "call_agent", "error_for", "record", "unknown_session")


def _end(
    session: Session,
    clock: EventClock,
    reason: StopReason,
    *,
    envelope_ids: tuple[str, ...] = (),
    warning: str | None = None,
    error: Error | None = None,
    why: str = "",
) -> tuple[Session, tuple[Effect, ...]]:
    status = {"canceled": "canceled", "error": "failed", "stalled": "failed"}.get(
        reason, "completed"
    )
    event_type = {
        "canceled": "session_canceled",
        "error": "session_failed",
        "stalled": "session_failed",
    }.get(reason, "session_completed")
    payload: dict[str, object] = {
        "turns": sum(1 for item in session.transcript if item.role in session.participants)
    }
    if warning:
        payload["warning"] = warning
    if reason == "canceled":
        payload["message"] = _cancel_notice(session)
        if why:  # the Stop's own reason: Ctrl-C, or a command that gave up waiting
            payload["reason"] = why
    if error is not None:
        payload.update(code=str(error.code), message=error.message)
    event = clock.event(
        event_type,  # type: ignore[arg-type]  # one of the three names above
        round_=session.round,
        speaker=session.pending.speaker if session.pending else None,
        stop_reason=reason,
        envelope_ids=envelope_ids,
        payload=payload,
    )
    ended = replace(
        session,
        status=status,
        stop_reason=reason,
        warning=warning,
        pending=None,
    )
    return ended, (event,)


def advance(
    session: Session,
    envelope: SessionInput,
    *,
    sender: str,
    now: datetime,
    limits: Limits,
    cause: str = "",
    operator: bool = False,
    reporter: bool = False,
) -> Step:
    """Apply one input to a stored session: replay, ignore, or transition.

    Args:
        session: the stored state.
        envelope: an agent's turn, an error, or a person's control.
        sender: who sent it, from the gate's header (never the envelope's own field).
        now: the time stamped on new effects.
        limits: the router's knobs.
        cause: the envelope this one answers, as the gate delivered it (`Parley-Causation-Id`,
            checked by the gate to name an envelope delivered to `sender`); an answer or an
            error counts only if it is the pending call's envelope id.
        operator: the gate says `sender`'s profile is an operator role: it may steer any
            session, not only the ones it opened.
        reporter: the input reports on the router's own call without being its callee (the
            gate refusing the call, or the router judging its agent gone).

    Returns:
        The step; `changed` is False when nothing must be stored.
    """
    replay = session.effects_of(envelope.id)
    if replay is not None:
        return Step(session=session, effects=replay, note="replayed")
    clock = EventClock(session.session_id, envelope.id, now)
    match envelope:
        case Control():
            session, effects = _on_control(session, envelope, clock, sender, operator, limits)
        case AgentResponse():
            session, effects = _on_response(session, envelope, sender, cause, clock, limits)
        case Error():
            from_call = reporter or (
                session.pending is not None and sender == session.pending.speaker
            )
            session, effects = _on_error(session, envelope, cause, from_call, clock, limits)
    if not effects:
        return Step(session=session, note=f"ignored {type(envelope).__name__}")
    return Step(session=record(session, envelope.id, effects), effects=effects, changed=True)


def _on_control(
    session: Session,
    control: Control,
    clock: EventClock,
    sender: str,
    operator: bool,
    limits: Limits,
) -> tuple[Session, tuple[Effect, ...]]:
    """A person steers the session: only the principal that opened it, or an operator.

    The principal is the gate's word (its sender header); the envelope's `user_id` is the
    sender's own claim, so it only narrows further, it never grants.
    """
    if not operator and (not session.opener or sender != session.opener):
        # Who opened it is not told: a stranger who learned a session's id learns no more.
        why = f"{sender} cannot {control.action} a session it did not open"
        return session, (error_for(clock, ErrorCode.UNAUTHORIZED, why, control.id, "router"),)
    if not operator and session.user_id and control.user_id != session.user_id:
        why = f"user {control.user_id!r} cannot {control.action} another user's session"
        return session, (error_for(clock, ErrorCode.USER_MISMATCH, why, control.id, "router"),)
    if control.action in STEERING:
        return steer(session, control, clock, limits)
    if control.action != "stop":
        why = f"control {control.action!r} is not supported by collaboration sessions"
        return session, (error_for(clock, ErrorCode.INVALID_REQUEST, why, control.id, "router"),)
    if not session.open:
        return session, ()
    notice = TranscriptItem(
        role="router", name="all", text=_cancel_notice(session), created_at=clock.now
    )
    session = replace(session, transcript=(*session.transcript, notice))
    return _end(session, clock, "canceled", envelope_ids=(control.id,), why=control.reason)


def _on_response(
    session: Session,
    response: AgentResponse,
    sender: str,
    cause: str,
    clock: EventClock,
    limits: Limits,
) -> tuple[Session, tuple[Effect, ...]]:
    pending = session.pending
    if not session.open or pending is None or response.call_id != pending.call_id:
        return session, ()  # late, duplicate, or for a session already ended
    if sender != pending.speaker or cause != pending.envelope_id:
        return session, ()  # only the agent called may answer, and only the call it got
    reply = response.reply
    item = TranscriptItem(
        role=pending.speaker, name=pending.speaker, text=reply.message, created_at=clock.now
    )
    session = replace(session, transcript=(*session.transcript, item))
    handoff = (
        reply.handoff if isinstance(reply.handoff, Handoff) and not response.malformed else None
    )
    completed = clock.event(
        "step_completed",
        round_=session.round,
        speaker=pending.speaker,
        envelope_ids=(response.id,),
        payload={
            "message": reply.message,
            "handoff": {"to": handoff.to, "task": handoff.task} if handoff else None,
            "final": reply.final and not response.malformed,
            "malformed": response.malformed,
        },
    )
    ids = (response.id,)
    if response.malformed:
        warning = (
            f"{pending.speaker} did not answer with the JSON reply envelope; its text was "
            "shown as a plain message and any handoff ignored"
        )
        session, end = _end(session, clock, "malformed", envelope_ids=ids, warning=warning)
    elif reply.final:
        session, end = _end(session, clock, "final", envelope_ids=ids)
    elif session.mode == "single":
        session, end = _end(session, clock, "answered", envelope_ids=ids)
    elif handoff is None:
        session, end = _end(session, clock, "no_handoff", envelope_ids=ids)
    elif handoff.to not in (allowed := _peers_of(session, response.peers)):
        warning = (
            f"{pending.speaker} handed off to {handoff.to!r}, who is not one of its peers in "
            f"this session ({', '.join(allowed) or 'none'}): the handoff was not followed"
        )
        session, end = _end(session, clock, "unknown_peer", envelope_ids=ids, warning=warning)
    elif session.round >= session.max_rounds:
        session, end = _end(session, clock, "cap_reached", envelope_ids=ids)
    else:
        task = TranscriptItem(
            role="router", name=handoff.to, text=handoff.task, created_at=clock.now
        )
        session = replace(session, transcript=(*session.transcript, task), round=session.round + 1)
        if session.paused:  # no call after a pause: it waits for resume
            session, end = replace(session, held=handoff.to, pending=None), ()
        else:
            call_id = derive_id(session.session_id, f"call-{session.round}")
            session, end = call_agent(
                session, clock, handoff.to, call_id, attempts=1, limits=limits
            )
    return session, (completed, *end)


def _cancel_notice(session: Session) -> str:
    return CANCEL_NOTICE if session.mode == "collaborate" else SINGLE_CANCEL_NOTICE


def _peers_of(session: Session, peers: tuple[str, ...]) -> tuple[str, ...]:
    """Whom the speaker may hand off to: the session's participants, narrowed to its profile's
    `peers` when it names any (an answer without them, from a host that does not send them,
    is held to the participants alone, as before peers were sent)."""
    return tuple(p for p in session.participants if not peers or p in peers)


def _on_error(
    session: Session,
    error: Error,
    cause: str,
    from_call: bool,
    clock: EventClock,
    limits: Limits,
) -> tuple[Session, tuple[Effect, ...]]:
    """A call failed: retry it or fail the session, if the error really is about it.

    `from_call` says the sender may speak for the pending call (its callee, the gate that
    refused it, the router that judged it); `cause` is the gate's causation, which must be the
    call itself. An error naming the call in its own `cause_id` proves nothing by itself: call
    ids derive from earlier ids a participant has seen.
    """
    pending = session.pending
    if not session.open or pending is None or error.cause_id != pending.envelope_id:
        return session, ()  # about a call this session is no longer waiting on
    if not from_call or cause != pending.envelope_id:
        return session, ()  # from someone the call never went to, or about another call
    if error.retryable and pending.attempts <= limits.agent_retries:
        return call_agent(
            session,
            clock,
            pending.speaker,
            pending.call_id,
            attempts=pending.attempts + 1,
            limits=limits,
        )
    return _end(session, clock, "error", envelope_ids=(error.id,), error=error)


def unknown_session(
    envelope: AgentResponse | Error | Control, error_id: str, why: str, *, now: datetime
) -> Step:
    """An input for a session this router does not have: a person's control is refused (the
    person follows their timelines for the answer), anything else is only noted. (A Stop
    naming a valid session id never gets here: it is kept for when the session opens.)"""
    if not isinstance(envelope, Control):
        return Step(session=None, note=f"ignored {type(envelope).__name__}: {why}")
    refusal = Error(
        id=error_id,
        created_at=now,
        code=ErrorCode.SESSION_NOT_FOUND,
        message=f"cannot {envelope.action}: {why}",
        cause_id=envelope.id,
        details={"session_id": envelope.session_id},
    )
    return Step(session=None, effects=(refusal,))
