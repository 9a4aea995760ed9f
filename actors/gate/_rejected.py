"""What the gate tells the sender of a submission that will not be handled, and the caller
waiting on it when it was an answer: a submission that does not decode or validate, or one
quarantined after killing a gate (bus/_failures.py dead-letters it after this).

Past its sender's refusal budget (actors/gate/_refusal_budget.py) nothing is told: the sender
was told when the budget ran out, and an error per bad submission is the very record the
budget bounds (the runtime's dead letter, bounded per sender, still keeps it).
"""

from __future__ import annotations

from actors.gate._effects import GateEffects
from actors.gate._plan import Deny
from actors.gate._records import Position, position_key
from actors.gate._refusals import in_call
from actors.gate._store import GateStore
from bus import SENDER, Outbox, Rejection, TraceHeaders
from schemas import Error, ErrorCode, derive_id, encode, return_kinds, utc_now

__all__ = ("tell_rejected",)

_RETURN_TAGS = frozenset(str(kind.__struct_config__.tag) for kind in return_kinds())


async def tell_rejected(
    effects: GateEffects, store: GateStore, rejection: Rejection, outbox: Outbox
) -> bool:
    """Tell the sender of a submission that will not be handled why, on its own deliver
    subject (the sender is the subject's token: known even when nothing decoded).

    The error's id derives from the input's stream sequence, so a redelivery of the same
    bad input is de-duplicated instead of told twice. It counts as a refusal of the sender's.
    False: the sender is past its refusal budget, and nothing was told.
    """
    namespace = effects.namespace
    if rejection.stream != namespace.stream("submit") or not rejection.sender:
        return True  # not a submission: nobody to tell
    if rejection.attempt == 1 and effects.refusals.quiet(rejection.sender):
        return False  # a later attempt may follow one that told it: told again, the same
    notice = effects.refusals.spend(rejection.sender)
    input_id = f"{rejection.stream}:{rejection.seq}"
    cause = rejection.envelope_id
    details: dict[str, object] = {
        "field": rejection.field,
        "reason": rejection.problem,
        "rule": rejection.reason,
        "stream_seq": rejection.seq,
    }
    if rejection.value is not None:
        details["value"] = rejection.value
    said = f"submission refused ({rejection.reason}): {rejection.field}: {rejection.problem}"
    error = Error(
        id=derive_id(input_id, rejection.reason),
        created_at=utc_now(),
        code=ErrorCode.INVALID_REQUEST,
        message=said[: 1000 - len(notice)] + notice,
        details=details,
        cause_id=cause or None,
    )
    headers = TraceHeaders(
        trace_id=error.id, causation_id=cause, origin=rejection.sender
    ).to_headers(error.id)
    headers[SENDER] = effects.actor_id
    await outbox.publish(namespace.deliver(rejection.sender), encode(error), headers)
    if rejection.kind in _RETURN_TAGS and rejection.causation_id:
        # An answer that does not decode is still an answer its caller waits for. The
        # causation is a claim: it counts only if the gate delivered it to this sender.
        causes = await store.load([position_key(rejection.causation_id)])
        cause_of = causes.get(position_key(rejection.causation_id))
        within = in_call(
            cause_of
            if isinstance(cause_of, Position) and cause_of.target == rejection.sender
            else None
        )
        if within is not None:
            deny = Deny(ErrorCode.INVALID_REQUEST, rejection.reason, error.message)
            await effects.tell_caller(
                store,
                outbox,
                rejection.sender,
                cause or error.id,
                deny,
                within,
                answering=None,  # a rejection keeps no payload to match its claim by
                basis=error.id,
            )
    return True
