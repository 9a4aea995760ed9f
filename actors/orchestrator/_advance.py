"""One input applied to a stored orchestrated session: replay, ignore, or transition.

The inputs are an agent's answer, an error (an agent's, the gate's refusal of a call, or the
router's own judgement that an agent is gone), the owner's control, and the router's reminder
that `maxDurationMs` is up. Late and duplicate answers never advance a session: only the
answer to the call in flight, from the agent called, whose gate-checked causation is that
call's envelope, counts (the same rule as seed 001's turn loop, actors/router).
"""

from __future__ import annotations

from datetime import datetime

from msgspec import structs

from actors.orchestrator._controls import on_control
from actors.orchestrator._events import TransitionClock
from actors.orchestrator._loop import Result, expire, on_answer, on_failure, past_deadline
from actors.orchestrator._opening import DEADLINE_REMINDER
from actors.orchestrator._options import OrchestrationOptions
from actors.orchestrator._state import OrchestratedSession, Step
from schemas import AgentResponse, Control, Error

__all__ = ("advance_orchestration", "is_deadline_reminder")


def is_deadline_reminder(error: Error) -> bool:
    return error.details.get("reminder") == DEADLINE_REMINDER


def advance_orchestration(
    session: OrchestratedSession,
    envelope: AgentResponse | Error | Control,
    *,
    sender: str,
    now: datetime,
    options: OrchestrationOptions,
    cause: str = "",
    operator: bool = False,
    reporter: bool = False,
) -> Step:
    """Apply one input (arguments as `actors.router`'s seed 001 `advance` takes them).

    `reporter` says the input comes from the router itself or the gate about the router's
    own call: only such an error may fail a call without being its callee's, and only the
    router's reminder (`reporter` and `is_deadline_reminder`) may end a session on time.
    """
    replay = session.effects_of(envelope.id)
    if replay is not None:
        return Step(session=session, effects=replay, note="replayed")
    clock = TransitionClock(session.session_id, envelope.id, now)
    result: Result
    if isinstance(envelope, Control):
        result = on_control(session, envelope, clock, options, sender=sender, operator=operator)
    elif past_deadline(session, now):
        result = expire(session, clock)  # whatever came, the time is up
    elif isinstance(envelope, Error) and reporter and is_deadline_reminder(envelope):
        result = (session, ())  # a reminder redelivered early: the session is still in time
    elif not _answers_pending(session, envelope, sender, cause, reporter):
        result = (session, ())
    elif isinstance(envelope, AgentResponse):
        result = on_answer(session, envelope, clock, options)
    else:
        # The gate's refusal of the router's own call: reported by the gate, with its rule.
        refused = reporter and "rule" in envelope.details
        result = on_failure(session, envelope, clock, options, refused_by_gate=refused)
    session, effects = result
    if not effects:
        return Step(session=session, note=f"ignored {type(envelope).__name__}")
    recorded = structs.replace(session, applied=session.recording(envelope.id, effects))
    return Step(session=recorded, effects=effects, changed=True)


def _answers_pending(
    session: OrchestratedSession,
    envelope: AgentResponse | Error,
    sender: str,
    cause: str,
    reporter: bool,
) -> bool:
    """The input is the answer (or the failure) of exactly the call in flight."""
    pending = session.pending
    if not session.open or pending is None or cause != pending.envelope_id:
        return False
    if isinstance(envelope, AgentResponse):
        return envelope.call_id == pending.call_id and sender == pending.target
    return envelope.cause_id == pending.envelope_id and (reporter or sender == pending.target)
