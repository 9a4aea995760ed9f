"""Opening an orchestrated session: a person's objective becomes the first draft request.

A `human_message` with `mode = "orchestrate"` names the local agent, the shared agent, the
mode and the limits (`orchestration`); its text is the objective. The session passes through
`idle` and `planning` to `waiting_local` at once, and a reminder is put on the router's own
queue for the moment `maxDurationMs` is up. A message that cannot open one is refused with
`INVALID_REQUEST`, as seed 001's are.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from msgspec import structs

from actors.orchestrator._calls import ask_local
from actors.orchestrator._events import TransitionClock
from actors.orchestrator._options import OrchestrationOptions
from actors.orchestrator._state import OrchestratedSession, Reminder, Step
from schemas import (
    Error,
    ErrorCode,
    HumanMessage,
    SessionEvent,
    SubjectTokenError,
    check_token,
    valid_token,
)

__all__ = ("DEADLINE_REMINDER", "open_orchestration")

DEADLINE_REMINDER = "max_duration"
"""`details["reminder"]` of the error a session's deadline reminder carries."""


def _problem(msg: HumanMessage, session_id: str) -> str | None:
    spec = msg.orchestration
    if spec is None:
        return "an orchestrated session names its agents (orchestration)"
    try:
        check_token(session_id, "session id")
        check_token(spec.local_agent, "local agent")
        check_token(spec.shared_agent, "shared agent")
    except SubjectTokenError as exc:
        return str(exc)
    if spec.local_agent == spec.shared_agent:
        return f"the local agent cannot talk to itself ({spec.local_agent})"
    if not msg.text.strip():
        return "the objective is empty"
    return None


def _refused(clock: TransitionClock, msg: HumanMessage, sender: str, why: str) -> Step:
    """An error to the sender and, when the session id can name a subject, a
    `session_failed` event for whoever follows that session (as seed 001's refusals)."""
    message = f"cannot start an orchestrated session: {why}"
    error = clock.refusal(ErrorCode.INVALID_REQUEST, message, msg.id, sender)
    if not valid_token(clock.session_id):
        return Step(session=None, effects=(error,))
    failed = SessionEvent(
        id=clock.id("failed"),
        created_at=clock.now,
        session_id=clock.session_id,
        event_type="session_failed",
        round=0,
        stop_reason="error",
        envelope_ids=(msg.id,),
        payload={
            "orchestrated": True,
            "state": "error",
            "code": str(error.code),
            "reason": message,
        },
    )
    return Step(session=None, effects=(error, failed))


def open_orchestration(
    msg: HumanMessage,
    *,
    session_id: str,
    sender: str,
    now: datetime,
    options: OrchestrationOptions,
    shared_device_id: str = "",
) -> Step:
    """Open the session and ask the local agent for its first draft (turn 1).

    `shared_device_id` is the device the shared agent lives on, if the caller knows it."""
    clock = TransitionClock(session_id, msg.id, now)
    problem = _problem(msg, session_id)
    spec = msg.orchestration
    if problem is not None or spec is None:
        return _refused(clock, msg, sender, problem or "no orchestration")
    deadline = now + timedelta(milliseconds=spec.max_duration_ms)
    session = OrchestratedSession(
        session_id=session_id,
        origin_id=msg.id,
        opener=sender,
        user_id=msg.user_id,
        thread=msg.thread,
        objective=msg.text.strip(),
        local_agent=spec.local_agent,
        shared_agent=spec.shared_agent,
        shared_device_id=shared_device_id,
        mode=spec.mode,
        max_turns=spec.max_turns,
        max_duration_ms=spec.max_duration_ms,
        max_failures=spec.max_failures,
        max_tokens_budget=spec.max_tokens_budget,
        created_at=now,
        deadline=deadline,
    )
    created = clock.event(
        session,
        "session_created",
        speaker=spec.local_agent,
        envelope_ids=(msg.id,),
        kind="orchestrate",
        orchestration_mode=spec.mode,
        objective=session.objective,
        local_agent=spec.local_agent,
        shared_agent=spec.shared_agent,
        participants=[spec.local_agent, spec.shared_agent],
        max_rounds=spec.max_turns,
        max_turns=spec.max_turns,
        max_duration_ms=spec.max_duration_ms,
        max_failures=spec.max_failures,
        max_tokens_budget=spec.max_tokens_budget,
        deadline=deadline.isoformat(),
        user_id=msg.user_id,
    )
    reminder = Reminder(
        error=Error(
            id=clock.id("deadline"),
            created_at=now,
            code=ErrorCode.DEADLINE_EXCEEDED,
            message=f"maxDurationMs ({spec.max_duration_ms}) is up",
            details={
                "session_id": session_id,
                "reminder": DEADLINE_REMINDER,
                "deadline": deadline.isoformat(),
            },
        )
    )
    started = clock.event(session, "session_started", speaker=spec.local_agent)
    session, asked = ask_local(session, clock, options)
    effects = (created, started, reminder, *asked)
    session = structs.replace(session, applied=session.recording(msg.id, effects))
    return Step(session=session, effects=effects, changed=True)
