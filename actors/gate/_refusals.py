"""Where a refusal goes and what it says: pure functions over the gate's records.

A refused envelope's sender is told with an `error` at its own level of the trace; a refused
answer's caller, who waits on the call it answered, is told as well (issue 21). Which of them
applies is decided from the gate's records (the sender's position), never from the sender's
own headers.
"""

from __future__ import annotations

from collections.abc import Mapping

from actors.gate._plan import Deny, Submission
from actors.gate._records import Position, position_key
from schemas import AnyEnvelope, Error, derive_id, return_kinds, utc_now

__all__ = ("error_for", "error_position", "in_call", "sender_position", "waiting_on")

_RETURN_KINDS = return_kinds()


def waiting_on(envelope: AnyEnvelope, position: Position | None) -> Position | None:
    """The sender's position if `envelope` answers the call it sits in (someone waits on
    that call), else None; the same test as `answers_call()`, for a refusal with no route."""
    within = in_call(position)
    if within is None or type(envelope) not in _RETURN_KINDS:
        return None
    if isinstance(envelope, Error) and envelope.cause_id != within.levels[-1].call_id:
        return None
    return within


def in_call(position: Position | None) -> Position | None:
    """The sender's position if it sits inside a call someone waits on, else None."""
    if position is None or len(position.levels) < 2 or not position.levels[-1].call_id:
        return None
    return position


def error_for(envelope: AnyEnvelope, deny: Deny, purpose: str, basis: str = "") -> Error:
    details: dict[str, object] = {"rule": deny.rule}
    if deny.limit is not None:
        details["limit"] = deny.limit
    if deny.value is not None:
        details["value"] = deny.value
    return Error(
        id=derive_id(basis or envelope.id, purpose),
        created_at=utc_now(),
        code=deny.code,
        message=deny.message,
        retryable=deny.rule in {"rate_per_minute", "max_concurrent_calls", "no_bundle"},
        details=details,
        cause_id=envelope.id,
    )


def error_position(envelope: AnyEnvelope, sender: str, cause: Position) -> Position:
    """Where the refusal of `envelope` sits: with its sender, at the sender's own level."""
    return Position(
        envelope_id=derive_id(envelope.id, "refused"),
        trace_id=cause.trace_id,
        origin=cause.origin,
        sender="gate",
        target=sender,
        kind="error",
        levels=cause.levels,
        user_id=cause.user_id,
        session_id=cause.session_id,
        hop_floor=cause.hop_floor,
    )


def sender_position(sub: Submission, causes: Mapping[str, object]) -> Position | None:
    """The sender's own position: the record of its cause, if the gate delivered that cause to
    this sender (the causation header is the sender's claim; the record is the gate's)."""
    if not sub.causation_id:
        return None
    cause = causes.get(position_key(sub.causation_id))
    if isinstance(cause, Position) and cause.target == sub.sender:
        return cause
    return None
