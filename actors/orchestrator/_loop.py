"""The turn loop: answers, failures, limits and the decision to send (seed 000).

`on_answer` takes an agent's answer to the call in flight: a local draft goes to review or
straight out (by mode), a remote answer goes back to the local agent as the next turn's
context. `on_failure` retries a failed call while `maxFailures` allows, and ends the session
in `error` otherwise. `end` is every ending, with a reason a person reads.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from msgspec import structs

from actors.orchestrator._calls import ask_local, send_remote
from actors.orchestrator._events import TransitionClock
from actors.orchestrator._options import OrchestrationOptions
from actors.orchestrator._risk import review_reasons
from actors.orchestrator._state import Approval, Effect, OrchestratedSession, State, Turn
from schemas import AgentResponse, Error

__all__ = (
    "end",
    "expire",
    "next_turn",
    "on_answer",
    "on_failure",
    "past_deadline",
    "resend",
    "take_draft",
)

_END_EVENTS = {
    "completed": "session_completed",
    "error": "session_failed",
    "stopped": "session_canceled",
}

Result = tuple[OrchestratedSession, tuple[Effect, ...]]


def end(
    session: OrchestratedSession,
    clock: TransitionClock,
    state: State,
    stop_reason: str,
    reason: str,
    *,
    envelope_ids: tuple[str, ...] = (),
    **payload: Any,
) -> Result:
    """End the session in `state` (completed, error or stopped), saying why."""
    session = structs.replace(
        session, state=state, stop_reason=stop_reason, reason=reason, pending=None, resume_to=None
    )
    event = clock.event(
        session,
        _END_EVENTS[state],  # type: ignore[arg-type]  # one of the three ending events
        stop_reason=stop_reason,
        envelope_ids=envelope_ids,
        reason=reason,
        turns=session.turn_index if session.turns else 0,
        tokens_used=session.tokens_used,
        **payload,
    )
    return session, (event,)


def _over_budget(session: OrchestratedSession) -> bool:
    budget = session.max_tokens_budget
    return budget is not None and session.tokens_used >= budget


def _budget_end(
    session: OrchestratedSession, clock: TransitionClock, ids: tuple[str, ...]
) -> Result:
    why = (
        f"the token budget is spent: {session.tokens_used} tokens used, "
        f"maxTokensBudget is {session.max_tokens_budget}"
    )
    return end(session, clock, "completed", "max_tokens", why, envelope_ids=ids)


def expire(session: OrchestratedSession, clock: TransitionClock) -> Result:
    """`maxDurationMs` is up: the session ends however far it got."""
    minutes = session.max_duration_ms / 60_000
    why = (
        f"the time limit was reached: maxDurationMs is {session.max_duration_ms} ({minutes:g} min)"
    )
    return end(session, clock, "completed", "max_duration", why)


def past_deadline(session: OrchestratedSession, now: datetime) -> bool:
    return session.open and now >= session.deadline


def take_draft(
    session: OrchestratedSession, clock: TransitionClock, options: OrchestrationOptions
) -> Result:
    """The draft in hand (`ready_to_send`): send it, or put it to the owner by mode."""
    draft = session.draft
    if session.mode == "full_auto":
        return send_remote(session, clock, options, draft, "auto")
    semi_auto = session.mode == "semi_auto"
    reasons = review_reasons(draft, options, session.draft_tools) if semi_auto else ()
    if session.mode == "semi_auto" and not reasons:
        return send_remote(session, clock, options, draft, "auto")
    reasons = reasons or ("manual mode: every draft waits for its owner",)
    approval = Approval(
        approval_id=clock.id("approval"),
        turn_index=session.turn_index,
        draft=draft,
        requested_at=clock.now,
        reasons=reasons,
    )
    session = structs.replace(
        session, state="ready_to_send", approvals=(*session.approvals, approval)
    )
    event = clock.event(
        session,
        "approval_requested",
        speaker=session.local_agent,
        approval_id=approval.approval_id,
        draft=draft,
        reasons=list(reasons),
        requested_at=clock.now.isoformat(),
        mode=session.mode,
    )
    return session, (event,)


def next_turn(
    session: OrchestratedSession, clock: TransitionClock, options: OrchestrationOptions
) -> Result:
    """After a remote answer (`processing_remote`): the turn limit, or the next turn."""
    if session.turn_index >= session.max_turns:
        why = f"the turn limit was reached: maxTurns is {session.max_turns}"
        return end(session, clock, "completed", "max_turns", why)
    session = structs.replace(session, turn_index=session.turn_index + 1)
    return ask_local(session, clock, options)


def on_answer(
    session: OrchestratedSession,
    answer: AgentResponse,
    clock: TransitionClock,
    options: OrchestrationOptions,
) -> Result:
    """The answer to the call in flight (checked by the caller to be exactly that)."""
    pending = session.pending
    assert pending is not None  # noqa: S101 - the caller matched it
    text = answer.reply.message
    ids = (answer.id,)
    took = (clock.now - pending.sent_at) if pending.sent_at is not None else None
    duration_ms = int(took.total_seconds() * 1000) if took is not None else None
    paused = session.state == "paused"
    session = structs.replace(
        session,
        pending=None,
        failures=0,
        tokens_used=session.tokens_used + answer.token_usage.total,
    )
    if pending.phase == "local":
        text = text[: options.max_output_chars]
        session = structs.replace(session, draft=text, draft_tools=answer.tools_used)
        if not paused:
            session = structs.replace(session, state="ready_to_send")
        done = answer.reply.final and not answer.malformed
        drafted = clock.event(
            session,
            "step_completed",
            speaker=pending.target,
            envelope_ids=ids,
            role="local_agent",
            message=text,
            final=done,
            malformed=answer.malformed,
            tools_used=list(answer.tools_used),
            duration_ms=duration_ms,
            success=True,
        )
        if done:
            why = f"{session.local_agent} said the objective is met"
            session, ending = end(session, clock, "completed", "objective_met", why)
            return session, (drafted, *ending)
        if _over_budget(session):
            session, ending = _budget_end(session, clock, ids)
            return session, (drafted, *ending)
        if paused:  # pause is immediate: the draft waits, unsent, for resume
            return structs.replace(session, resume_to="ready_to_send"), (drafted,)
        session, after = take_draft(session, clock, options)
        return session, (drafted, *after)
    inbound = Turn(
        role="remote_agent", name=pending.target, text=text, turn_index=session.turn_index
    )
    session = structs.replace(session, turns=(*session.turns, inbound))
    if not paused:
        session = structs.replace(session, state="processing_remote")
    answered = clock.event(
        session,
        "step_completed",
        speaker=pending.target,
        envelope_ids=ids,
        role="remote_agent",
        message=text,
        malformed=answer.malformed,
        duration_ms=duration_ms,
        success=True,
    )
    if _over_budget(session):
        session, ending = _budget_end(session, clock, ids)
        return session, (answered, *ending)
    if paused:
        return structs.replace(session, resume_to="processing_remote"), (answered,)
    session, after = next_turn(session, clock, options)
    return session, (answered, *after)


def on_failure(
    session: OrchestratedSession,
    error: Error,
    clock: TransitionClock,
    options: OrchestrationOptions,
    *,
    refused_by_gate: bool = False,
) -> Result:
    """The call in flight failed: retry it while `maxFailures` allows, else end in `error`.
    `refused_by_gate`: the gate refused to deliver the call, so nothing reached the agent
    (told as `refused_by: gate` with the gate's rule, for the person's timeline).

    An error that is not retryable (the local agent killed and judged gone, a refusal by the
    gate) ends the session at once: seed 000 sends a transport or local-agent hard failure
    to `error`, and the person decides what next.
    """
    pending = session.pending
    assert pending is not None  # noqa: S101 - the caller matched it
    failures = session.failures + 1
    paused = session.state == "paused"
    session = structs.replace(session, failures=failures, pending=None)
    who = "local agent" if pending.phase == "local" else "shared agent"
    failed = f"the {who} {pending.target} failed: {error.code}: {error.message}"
    refusal: dict[str, Any] = {}
    if refused_by_gate:
        failed = f"the gate refused the call to the {who} {pending.target}: {error.message}"
        refusal = {"refused_by": "gate", "rule": str(error.details.get("rule", ""))}
    told = clock.event(
        session,
        "step_completed",
        speaker=pending.target,
        envelope_ids=(error.id,),
        role="failure",
        phase=pending.phase,
        code=str(error.code),
        message=error.message,
        retryable=error.retryable,
        failures=failures,
        success=False,
        **refusal,
    )
    if not error.retryable or failures >= session.max_failures:
        stop_reason = f"{pending.phase}_failed"
        if error.retryable:
            stop_reason = "max_failures"
            failed = (
                f"{failures} consecutive failures (maxFailures is {session.max_failures}); {failed}"
            )
        session, ending = end(
            session,
            clock,
            "error",
            stop_reason,
            failed,
            envelope_ids=(error.id,),
            code=str(error.code),
        )
        return session, (told, *ending)
    attempts = pending.attempts + 1
    if pending.phase == "local":  # asking again is no send: a pause lets it happen
        session, effects = ask_local(session, clock, options, attempts=attempts)
        if paused:
            session = structs.replace(session, state="paused", resume_to="waiting_local")
        return session, (told, *effects)
    if paused:  # no send after a pause: the resend waits for resume
        return structs.replace(session, resume_to="waiting_remote"), (told,)
    last = session.turns[-1]
    session, effects = send_remote(
        session, clock, options, last.text, last.sent_by or "auto", attempts=attempts
    )
    return session, (told, *effects)


def resend(
    session: OrchestratedSession, clock: TransitionClock, options: OrchestrationOptions
) -> Result:
    """Send the last outbound message again (a retry held back by a pause)."""
    last = session.turns[-1]
    return send_remote(
        session, clock, options, last.text, last.sent_by or "auto", attempts=session.failures + 1
    )
