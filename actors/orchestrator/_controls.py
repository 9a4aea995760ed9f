"""The owner's controls (seed 000): pause, resume, stop, take over, approve, reject, and
edit-and-approve (`approve` with `text`).

Only the principal that opened the session (the gate's sender) or an operator may steer it;
a control's `user_id` is its sender's own claim, so it only narrows, never grants. Pause is
immediate: nothing is sent after it, a draft or answer that arrives while paused waits for
resume. Approvals are kept in the session with who decided, when and what was sent, and told
on the timeline as `approval_resolved` (the auditor records every session event).
"""

from __future__ import annotations

from typing import Literal

from msgspec import structs

from actors.orchestrator._calls import ask_local, send_remote
from actors.orchestrator._events import TransitionClock
from actors.orchestrator._loop import Result, end, next_turn, resend, take_draft
from actors.orchestrator._options import OrchestrationOptions
from actors.orchestrator._state import Approval, Effect, OrchestratedSession
from schemas import Control, ErrorCode

__all__ = ("on_control",)


def _refuse(
    session: OrchestratedSession,
    clock: TransitionClock,
    control: Control,
    why: str,
    code: ErrorCode = ErrorCode.INVALID_REQUEST,
) -> Result:
    return session, (clock.refusal(code, why, control.id, "router"),)


def on_control(
    session: OrchestratedSession,
    control: Control,
    clock: TransitionClock,
    options: OrchestrationOptions,
    *,
    sender: str,
    operator: bool,
) -> Result:
    if not operator and sender != session.opener:
        # Who opened it is not told: a stranger who learned a session's id learns no more.
        why = f"{sender} cannot {control.action} a session it did not open"
        return _refuse(session, clock, control, why, ErrorCode.UNAUTHORIZED)
    if not operator and session.user_id and control.user_id != session.user_id:
        why = f"user {control.user_id!r} cannot steer another user's session"
        return _refuse(session, clock, control, why, ErrorCode.USER_MISMATCH)
    if not session.open:
        if control.action == "stop":
            return session, ()  # stopping what already ended: nothing to do
        why = f"cannot {control.action}: the session has ended ({session.stop_reason})"
        return _refuse(session, clock, control, why)
    match control.action:
        case "stop":
            why = f"stopped by {sender}" + (f": {control.reason}" if control.reason else "")
            ids = (control.id,)
            return end(
                session,
                clock,
                "stopped",
                "stopped",
                why,
                envelope_ids=ids,
                by=sender,
                note=control.reason,
            )
        case "pause":
            return _pause(session, clock, control, sender)
        case "resume":
            return _resume(session, clock, control, options, sender)
        case "take_over":
            return _take_over(session, clock, control, options, sender)
        case "approve" | "reject":
            return _decide(session, clock, control, options, sender)


def _pause(
    session: OrchestratedSession, clock: TransitionClock, control: Control, sender: str
) -> Result:
    if session.state == "paused":
        return session, ()
    paused = structs.replace(session, state="paused", resume_to=session.state)
    event = clock.event(
        paused, "session_paused", envelope_ids=(control.id,), resume_to=session.state, by=sender
    )
    return paused, (event,)


def _resume(
    session: OrchestratedSession,
    clock: TransitionClock,
    control: Control,
    options: OrchestrationOptions,
    sender: str,
) -> Result:
    if session.state != "paused" or session.resume_to is None:
        return _refuse(session, clock, control, f"cannot resume: the session is {session.state}")
    back = session.resume_to
    session = structs.replace(session, state=back, resume_to=None)
    told = clock.event(session, "session_resumed", envelope_ids=(control.id,), by=sender)
    if back == "ready_to_send" and session.waiting_approval is None:
        session, after = take_draft(session, clock, options)
    elif back == "processing_remote":
        session, after = next_turn(session, clock, options)
    elif back == "waiting_remote" and session.pending is None:
        session, after = resend(session, clock, options)
    else:
        after = ()  # the call in flight, or the approval asked for, still stands
    return session, (told, *after)


def _resolve(
    session: OrchestratedSession,
    clock: TransitionClock,
    approval: Approval,
    decision: Literal["approved", "edited", "rejected", "taken_over"],
    sender: str,
    text: str,
    control: Control,
) -> Result:
    resolved = structs.replace(
        approval, decision=decision, resolved_by=sender, resolved_at=clock.now, text=text
    )
    session = structs.replace(session, approvals=(*session.approvals[:-1], resolved))
    event = clock.event(
        session,
        "approval_resolved",
        speaker=sender,
        envelope_ids=(control.id,),
        approval_id=approval.approval_id,
        decision=decision,
        resolved_by=sender,
        user_id=control.user_id,
        resolved_at=clock.now.isoformat(),
        draft=approval.draft,
        text=text,
        task=f"{decision}: {text}",
        duration_ms=int((clock.now - approval.requested_at).total_seconds() * 1000),
    )
    return session, (event,)


def _decide(
    session: OrchestratedSession,
    clock: TransitionClock,
    control: Control,
    options: OrchestrationOptions,
    sender: str,
) -> Result:
    approval = session.waiting_approval
    if session.state != "ready_to_send" or approval is None:
        why = f"cannot {control.action}: no draft awaits approval (the session is {session.state})"
        return _refuse(session, clock, control, why)
    if control.approval_id is not None and control.approval_id != approval.approval_id:
        why = f"approval {control.approval_id} is not the one awaited ({approval.approval_id})"
        return _refuse(session, clock, control, why)
    if control.action == "reject":
        session, told = _resolve(
            session, clock, approval, "rejected", sender, control.reason, control
        )
        session = structs.replace(session, feedback=control.reason or "no reason given")
        session, after = ask_local(session, clock, options)
        return session, (*told, *after)
    edited = bool(control.text.strip()) and control.text != approval.draft
    text = control.text if edited else approval.draft
    decision: Literal["approved", "edited"] = "edited" if edited else "approved"
    session, told = _resolve(session, clock, approval, decision, sender, text, control)
    session, after = send_remote(session, clock, options, text, decision)
    return session, (*told, *after)


def _take_over(
    session: OrchestratedSession,
    clock: TransitionClock,
    control: Control,
    options: OrchestrationOptions,
    sender: str,
) -> Result:
    """The owner types the next outbound message; later drafts wait for them (`manual`)."""
    text = control.text.strip()
    if not text:
        return _refuse(session, clock, control, "take over needs the message to send (text)")
    if session.state == "paused":
        return _refuse(session, clock, control, "the session is paused: resume it first")
    if session.state == "waiting_remote":
        why = "the shared agent has not answered yet: one turn at a time"
        return _refuse(session, clock, control, why)
    told: tuple[Effect, ...] = ()
    approval = session.waiting_approval
    if approval is not None:
        session, told = _resolve(session, clock, approval, "taken_over", sender, text, control)
    # A draft being written is abandoned: its answer no longer matches a pending call.
    session = structs.replace(session, mode="manual", pending=None)
    session, after = send_remote(session, clock, options, text, "you")
    return session, (*told, *after)
