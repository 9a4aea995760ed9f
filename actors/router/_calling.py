"""Making a collaboration's call: the context, the call, the wait (seed 001 §4-6).

Shared by the turn loop (actors/router/_turns.py), the opening (actors/router/_opening.py)
and the owner's steering (actors/router/_steering.py); ids come from the transition's clock,
so a re-run after a crash makes the same call.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from msgspec import structs

from actors.router._session import Effect, EventClock, Limits, PendingCall, Session
from schemas import AgentCall, Error, ErrorCode, transcript_window

__all__ = ("call_agent", "error_for", "record", "replace")


def error_for(
    clock: EventClock, code: ErrorCode, message: str, cause_id: str, target: str
) -> Error:
    return Error(
        id=clock.id("error"),
        created_at=clock.now,
        code=code,
        message=message,
        cause_id=cause_id,
        details={"session_id": clock.session_id, "target": target},
    )


def call_agent(
    session: Session,
    clock: EventClock,
    speaker: str,
    call_id: str,
    *,
    attempts: int,
    limits: Limits,
) -> tuple[Session, tuple[Effect, ...]]:
    """Build the context, call `speaker` for the session's round, and wait for it.

    The context is the call's fields (seed 001 §4): the goal verbatim, the transcript window,
    the round and cap, and whether this is the final round; the agent host turns them into
    its model's prompt. `text` is this turn's task: the handoff's task addressed to the
    speaker, or the goal itself on the first turn.
    """
    final_round = session.round >= session.max_rounds and session.mode == "collaborate"
    window = transcript_window(
        session.transcript, max_items=limits.window_items, max_chars=limits.window_chars
    )
    last = session.transcript[-1] if session.transcript else None
    task = last.text if last and last.role == "router" and last.name == speaker else session.goal
    call = AgentCall(
        id=clock.id("call"),
        created_at=clock.now,
        target=speaker,
        thread=session.thread,
        text=task,
        call_id=call_id,
        session_id=session.session_id,
        round=session.round,
        max_rounds=session.max_rounds,
        goal=session.goal,
        transcript=window,
        final_round=final_round,
        user_id=session.user_id,
    )
    deadline = clock.now + timedelta(seconds=limits.turn_timeout_s)
    step = clock.event(
        "step_started",
        round_=session.round,
        speaker=speaker,
        envelope_ids=(call.id,),
        payload={
            "call_id": call_id,
            "final_round": final_round,
            "attempt": attempts,
            "deadline": deadline.isoformat(),
            # When the sweep ends the session at the latest (barring outages): what a person
            # waiting on it may wait for (tools/collab.py).
            "ends_by": (deadline + timedelta(seconds=limits.stall_margin_s)).isoformat(),
        },
    )
    pending = PendingCall(
        call_id=call_id,
        envelope_id=call.id,
        speaker=speaker,
        attempts=attempts,
        deadline=deadline,
    )
    return replace(session, pending=pending), (step, call)


def replace(session: Session, **changes: Any) -> Session:
    return structs.replace(session, **changes)


def record(session: Session, input_id: str, effects: tuple[Effect, ...]) -> Session:
    return replace(session, applied=session.recording(input_id, effects))
