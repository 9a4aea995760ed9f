"""The gate's pure core, part one: where an envelope sits, and every check that counts nothing.

No bus in here. `plan()` derives an envelope's position (trace, origin, call chain, hop count)
from its cause's record and its kind, never from the sender's headers (but for a root's
claimed hop count, which only ever raises it: `claimed_hop_floor`), and applies every check
that needs no counter: the bundle, the sender's profile, forged claims, the target, self-loops,
hop and depth limits, cycles on the chain, sub-agent and shared-agent permissions, deadlines,
token budgets, tool narrowing and user isolation. The counted limits are `decide()`'s, in
actors/gate/_decide.py.

The order of checks is the order of the error a sender sees when several apply; messages name
the limit and the value, as the seeds' examples do.
"""

from __future__ import annotations

from msgspec import structs

from actors.gate._checks import (
    call_checks,
    cause_of,
    check_answer_names_its_call,
    check_claims,
    check_speaks_for_person,
)
from actors.gate._llm_checks import check_llm_request
from actors.gate._records import Level, Position
from actors.gate._routes import (
    Deny,
    Route,
    Submission,
    envelope_role,
    named_target,
    objective_key,
    objective_of,
    user_id_of,
)
from actors.gate._tool_checks import check_tool_request
from schemas import (
    PROTOCOL_VERSION,
    AgentResponse,
    ErrorCode,
    LlmRequest,
    PolicyBundle,
    ToolRequest,
    call_kinds,
    return_kinds,
)

__all__ = ("Deny", "Route", "Submission", "plan")

_CALLS = call_kinds()
_RETURNS = return_kinds()


def plan(
    sub: Submission, cause: Position | None, bundle: PolicyBundle | None, bundle_problem: str
) -> Route | Deny:
    """Derive the envelope's route and position, and apply every check that needs no counter.

    Args:
        sub: the submitted envelope and what the subject and headers say about it.
        cause: the gate's record of `sub.causation_id` (None if it has none, or no cause).
        bundle: the policy in force; None when no bundle is trusted.
        bundle_problem: why there is no bundle, for the refusal's message.
    """
    if bundle is None:
        return Deny(ErrorCode.POLICY_BUNDLE_INVALID, "no_bundle", bundle_problem)
    if bundle.expires_at.timestamp() * 1000 <= sub.now_ms:
        return Deny(
            ErrorCode.POLICY_EXPIRED,
            "expired",
            f"policy bundle version {bundle.version} expired at {bundle.expires_at.isoformat()}",
        )
    envelope = sub.envelope
    if envelope.v != PROTOCOL_VERSION:
        return Deny(
            ErrorCode.INVALID_REQUEST,
            "protocol_version",
            f"protocol version {envelope.v} is not supported (this gate speaks {PROTOCOL_VERSION})",
            limit=PROTOCOL_VERSION,
            value=envelope.v,
        )
    profile = bundle.profiles.get(sub.sender)
    if profile is None:
        return Deny(
            ErrorCode.UNAUTHORIZED,
            "no_profile",
            f"policy bundle version {bundle.version} has no profile for {sub.sender!r}",
        )
    person = check_speaks_for_person(sub, profile)
    if person is not None:
        return person
    found = cause_of(sub, cause, profile)
    if isinstance(found, Deny):
        return found
    cause = found
    role = envelope_role(envelope)
    answered: Level | None = None
    if role == "return":
        if len(cause.levels) < 2:
            return Deny(
                ErrorCode.INVALID_REQUEST,
                "nothing_to_answer",
                f"{envelope.__struct_config__.tag} from {sub.sender} answers no call: "
                f"{sub.sender} holds the root of trace {cause.trace_id}",
            )
        levels = cause.levels[:-1]
        answered = cause.levels[-1]
        target = levels[-1].holder
    else:
        named = named_target(envelope)
        if named is None:
            return Deny(
                ErrorCode.INVALID_REQUEST,
                "not_routable",
                f"{envelope.__struct_config__.tag} envelopes are not submitted to the gate",
            )
        target = named
        levels = cause.levels
    hop = cause.hop + (1 if role == "call" else -1 if role == "return" else 0)
    forged = check_claims(sub, cause, hop)
    if forged is not None:
        return forged
    if isinstance(envelope, ToolRequest):
        refused = check_tool_request(sub, envelope, bundle, profile, levels[-1])
        if refused is not None:
            return refused
    if isinstance(envelope, LlmRequest):
        refused = check_llm_request(sub, envelope, bundle)
        if refused is not None:
            return refused
    if role == "return":
        claimed_target = getattr(envelope, "target", None)
        if isinstance(envelope, AgentResponse) and claimed_target not in (None, target):
            return Deny(
                ErrorCode.TARGET_NOT_ALLOWED,
                "return_target",
                f"agent_response is addressed to {claimed_target!r}, but the call it answers "
                f"came from {target!r}",
            )
        if answered is not None:
            misnamed = check_answer_names_its_call(sub, answered)
            if misnamed is not None:
                return misnamed
    else:
        if target == sub.sender:
            return Deny(ErrorCode.SELF_LOOP, "self_loop", f"{sub.sender} may not send to itself")
        if target not in profile.allowed_targets:
            allowed = ", ".join(profile.allowed_targets) or "nobody"
            return Deny(
                ErrorCode.TARGET_NOT_ALLOWED,
                "allowed_targets",
                f"{sub.sender} may not send to {target} (allowed: {allowed})",
            )
    user = user_id_of(envelope)
    if not (cause.kind == "root" and cause.envelope_id == envelope.id) and user:
        if user != cause.user_id:
            return Deny(
                ErrorCode.USER_MISMATCH,
                "user_isolation",
                f"User ID mismatch - security violation: trace {cause.trace_id} belongs to "
                f"{cause.user_id or 'no user'!r}, the envelope names {user!r}",
            )
    objective = ""
    shared = False
    if role == "call":
        opened = call_checks(sub, bundle, profile, cause, target)
        if isinstance(opened, Deny):
            return opened
        levels = (*levels, opened)
        objective = objective_key(sub.sender, target, objective_of(envelope))
        shared = target in bundle.shared_agents
    elif role == "lateral":
        last = levels[-1]
        levels = (*levels[:-1], structs.replace(last, holder=target))
    position = Position(
        envelope_id=envelope.id,
        trace_id=cause.trace_id,
        origin=cause.origin,
        sender=sub.sender,
        target=target,
        kind=str(envelope.__struct_config__.tag),
        levels=levels,
        user_id=cause.user_id,
        session_id=cause.session_id,
        hop_floor=cause.hop_floor,
    )
    return Route(
        sub=sub,
        role=role,
        cause=cause,
        position=position,
        target=target,
        profile=profile,
        answered=answered,
        objective=objective,
        shared=shared,
        counts_session_tokens=bundle.llm_policy.max_session_tokens is not None,
    )
