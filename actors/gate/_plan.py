"""The gate's pure core, part one: where an envelope sits, and every check that counts nothing.

No bus in here. `plan()` derives an envelope's position (trace, origin, call chain, hop count)
from its cause's record and its kind, never from the sender's headers, and applies every check
that needs no counter: the bundle, the sender's profile, forged claims, the target, self-loops,
hop and depth limits, cycles on the chain, sub-agent and shared-agent permissions, deadlines,
token budgets, tool narrowing and user isolation. The counted limits are `decide()`'s, in
actors/gate/_decide.py.

The order of checks is the order of the error a sender sees when several apply; messages name
the limit and the value, as the seeds' examples do.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from msgspec import structs

from actors.gate._records import Level, Position
from bus import HOP_COUNT, ORIGIN, TRACE_ID
from schemas import (
    PROTOCOL_VERSION,
    AgentCall,
    AgentResponse,
    AnyEnvelope,
    Control,
    DelegationRequest,
    DelegationResponse,
    ErrorCode,
    HumanMessage,
    PolicyBundle,
    ProfilePolicy,
    SubAgentCall,
    SubAgentResult,
    ToolRequest,
    call_kinds,
    return_kinds,
)

__all__ = ("Deny", "Route", "Submission", "plan")

Role = Literal["call", "return", "lateral"]

_CALLS = call_kinds()
_RETURNS = return_kinds()


@dataclass(frozen=True, slots=True)
class Submission:
    """One submitted envelope as the gate sees it: the sender is the subject's token."""

    envelope: AnyEnvelope
    sender: str
    causation_id: str
    claims: Mapping[str, str]
    now_ms: int
    redelivered: bool = False
    """Delivered to the gate before (a crash or a conflict kept it from being settled)."""


@dataclass(frozen=True, slots=True)
class Deny:
    """A refusal: the error code, the rule that refused, and the numbers it compared."""

    code: ErrorCode
    rule: str
    message: str
    limit: int | None = None
    value: int | None = None


@dataclass(frozen=True, slots=True)
class Route:
    """Where an envelope goes and where it sits, derived from the gate's own records."""

    sub: Submission
    role: Role
    cause: Position
    """The sender's position: its cause's record, or a new trace's root it holds."""
    position: Position
    target: str
    profile: ProfilePolicy
    answered: Level | None = None
    """For a return: the level it closes (the call being answered)."""
    objective: str = ""
    shared: bool = False

    @property
    def is_root(self) -> bool:
        return not self.sub.causation_id


def _role(envelope: AnyEnvelope) -> Role:
    kind = type(envelope)
    if kind in _CALLS:
        return "call"
    if kind in _RETURNS:
        return "return"
    return "lateral"


def _named_target(envelope: AnyEnvelope) -> str | None:
    match envelope:
        case AgentCall() | HumanMessage() | Control():
            return envelope.target
        case DelegationRequest():
            return envelope.target_employee
        case SubAgentCall():
            return envelope.args.agent_name
        case ToolRequest():
            return "router"  # tool requests and their approvals belong to the session owner
        case _:
            return None


def _objective(envelope: AnyEnvelope) -> str:
    match envelope:
        case DelegationRequest():
            return envelope.objective
        case SubAgentCall():
            return envelope.args.task
        case AgentCall():
            return envelope.goal
        case _:
            return ""


def _claimed_identity(envelope: AnyEnvelope) -> tuple[str, str] | None:
    """The display field that names the sender, if the kind has one: (field, value)."""
    match envelope:
        case AgentResponse():
            return "sender", envelope.sender
        case DelegationRequest():
            return "origin_employee", envelope.origin_employee
        case DelegationResponse():
            return "target_employee", envelope.target_employee
        case SubAgentCall():
            return "caller", envelope.caller
        case SubAgentResult():
            return "agent_name", envelope.agent_name
        case _:
            return None


def _user_id(envelope: AnyEnvelope) -> str:
    return str(getattr(envelope, "user_id", "") or "")


def _root(sub: Submission) -> Position:
    """The position a sender holds when it starts a new trace with this envelope."""
    envelope = sub.envelope
    return Position(
        envelope_id=envelope.id,
        trace_id=envelope.id,
        origin=sub.sender,
        sender=sub.sender,
        target=sub.sender,
        kind="root",
        levels=(Level(holder=sub.sender),),
        user_id=_user_id(envelope),
    )


def _check_claims(sub: Submission, cause: Position, hop: int) -> Deny | None:
    """Headers are claims: present and different from the gate's records is a forgery."""
    expected = {TRACE_ID: cause.trace_id, HOP_COUNT: str(hop), ORIGIN: cause.origin}
    for header, value in expected.items():
        claimed = sub.claims.get(header)
        if claimed and claimed != value:
            return Deny(
                ErrorCode.FORGED_HEADER,
                "forged_header",
                f"{header} claims {claimed[:80]!r}, the gate's record says {value!r}",
            )
    identity = _claimed_identity(sub.envelope)
    if identity is not None and identity[1] != sub.sender:
        field, value = identity
        return Deny(
            ErrorCode.FORGED_HEADER,
            "forged_identity",
            f"{field} claims {value!r}, but the envelope was submitted by {sub.sender!r}",
        )
    return None


def _speaks_for_person(sub: Submission, profile: ProfilePolicy) -> Deny | None:
    """Kinds that speak for a person come only from a principal that acts for one.

    A `human_message` opens a session with its sender's goal, participants and cap, and a
    `control` steers one; from an agent they would let it act as a person (start work the
    person never asked for, stop someone's session). Operators may send `control` only.
    """
    envelope = sub.envelope
    if not isinstance(envelope, HumanMessage | Control) or profile.speaks_for_person:
        return None
    if isinstance(envelope, Control) and profile.operator:
        return None
    return Deny(
        ErrorCode.UNAUTHORIZED,
        "speaks_for_person",
        f"{sub.sender} may not send {envelope.__struct_config__.tag}: only a principal that "
        "speaks for a person may (its profile lacks speaks_for_person)",
    )


def _cause_of(sub: Submission, cause: Position | None, profile: ProfilePolicy) -> Position | Deny:
    if not sub.causation_id:
        if not profile.start_traces:
            return Deny(
                ErrorCode.UNAUTHORIZED,
                "start_traces",
                f"{sub.sender} may not start a new trace: an envelope from it must name its "
                "cause in Parley-Causation-Id",
            )
        return _root(sub)
    if cause is None:
        return Deny(
            ErrorCode.FORGED_HEADER,
            "unknown_cause",
            f"Parley-Causation-Id {sub.causation_id[:80]!r} names no envelope the gate delivered",
        )
    if cause.target != sub.sender:
        return Deny(
            ErrorCode.FORGED_HEADER,
            "foreign_cause",
            f"envelope {sub.causation_id!r} was delivered to {cause.target!r}, not {sub.sender!r}",
        )
    return cause


def _hop_limit(
    sub: Submission, profile: ProfilePolicy, hop: int, shared: bool
) -> tuple[ErrorCode, str, int, str] | None:
    envelope = sub.envelope
    if isinstance(envelope, DelegationRequest):
        limit = min(profile.max_depth, envelope.constraints.max_depth)
        depth = hop - 1  # the delegating agent's own depth, as seed 003 counts it
        if depth >= limit:
            return (
                ErrorCode.DEPTH_LIMIT_EXCEEDED,
                "max_depth",
                limit,
                f"Delegation depth limit reached ({depth}/{limit}). Cannot delegate further. "
                "Return results to parent.",
            )
        return None
    if isinstance(envelope, SubAgentCall) and not shared:
        limit = profile.max_sub_agent_depth
        if hop > limit:
            return (
                ErrorCode.DEPTH_LIMIT_EXCEEDED,
                "max_sub_agent_depth",
                limit,
                f"Recursive sub-agent calls detected: depth {hop} exceeds the limit of {limit}",
            )
        return None
    limit = profile.max_hop_count
    if hop > limit:
        return (
            ErrorCode.HOP_LIMIT_EXCEEDED,
            "max_hop_count",
            limit,
            f"Hop count {hop} exceeds maxHopCount {limit}",
        )
    return None


def _narrow_tools(
    sub: Submission, bundle: PolicyBundle, target: str, caller: Level
) -> tuple[str, ...] | Deny:
    target_profile = bundle.profiles.get(target)
    own = target_profile.tools_allowed if target_profile else ()
    allowed = own if caller.tools is None else tuple(t for t in own if t in caller.tools)
    envelope = sub.envelope
    if isinstance(envelope, SubAgentCall) and envelope.args.allowed_tools is not None:
        for tool in envelope.args.allowed_tools:
            if tool not in allowed:
                return Deny(
                    ErrorCode.TOOL_NOT_ALLOWED,
                    "allowed_tools",
                    f"{target} may not be given tool {tool!r}: its tools_allowed narrowed along "
                    f"the call chain are {list(allowed)}",
                )
        return tuple(envelope.args.allowed_tools)
    return allowed


def _call_checks(
    sub: Submission, bundle: PolicyBundle, profile: ProfilePolicy, cause: Position, target: str
) -> Level | Deny:
    """Checks of a call, and the level it opens for the target."""
    envelope = sub.envelope
    caller = cause.levels[-1]
    hop = cause.hop + 1
    shared = target in bundle.shared_agents
    if shared:
        if not profile.allow_shared_agent_calls:
            return Deny(
                ErrorCode.CAPABILITY_DENIED,
                "allow_shared_agent_calls",
                f"{sub.sender} may not call shared agents (allowSharedAgentCalls is false)",
            )
        if target not in profile.allowed_shared_device_ids:
            return Deny(
                ErrorCode.TARGET_NOT_ALLOWED,
                "allowed_shared_device_ids",
                f"shared agent {target!r} is not in {sub.sender}'s allowedSharedDeviceIds",
            )
    if target in cause.chain:
        path = " -> ".join((*cause.chain, target))
        return Deny(
            ErrorCode.CYCLE_DETECTED,
            "call_chain",
            f"Cycle detected: {target} is already on the call chain ({path})",
        )
    limit = _hop_limit(sub, profile, hop, shared)
    if limit is not None:
        code, rule, value_limit, message = limit
        return Deny(code, rule, message, limit=value_limit, value=hop)
    if isinstance(envelope, SubAgentCall):
        if not profile.allow_sub_agent_calls:
            return Deny(
                ErrorCode.CAPABILITY_DENIED,
                "allow_sub_agent_calls",
                f"{sub.sender} may not call sub-agents (allow_sub_agent_calls is false)",
            )
        if not caller.nested_ok:
            return Deny(
                ErrorCode.CAPABILITY_DENIED,
                "allow_nested_calls",
                f"{sub.sender} was called as a sub-agent without allow_nested_calls",
            )
    if caller.deadline_ms is not None and caller.deadline_ms <= sub.now_ms:
        late = sub.now_ms - caller.deadline_ms
        return Deny(
            ErrorCode.DEADLINE_EXCEEDED,
            "deadline",
            f"the call chain's deadline passed {late} ms ago",
            value=late,
        )
    deadline = caller.deadline_ms
    if isinstance(envelope, DelegationRequest):
        budget = envelope.constraints.max_tokens
        if budget > profile.max_tokens:
            return Deny(
                ErrorCode.BUDGET_EXCEEDED,
                "max_tokens",
                f"Estimated tokens ({budget}) exceeds budget ({profile.max_tokens}). "
                "Simplify task or increase budget.",
                limit=profile.max_tokens,
                value=budget,
            )
        own = sub.now_ms + min(profile.deadline_ms, envelope.constraints.deadline_ms)
        deadline = own if deadline is None else min(deadline, own)
    tools = _narrow_tools(sub, bundle, target, caller)
    if isinstance(tools, Deny):
        return tools
    nested = envelope.args.allow_nested_calls if isinstance(envelope, SubAgentCall) else True
    return Level(
        holder=target,
        call_id=envelope.id,
        tools=tools,
        nested_ok=nested and caller.nested_ok,
        deadline_ms=deadline,
    )


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
    person = _speaks_for_person(sub, profile)
    if person is not None:
        return person
    found = _cause_of(sub, cause, profile)
    if isinstance(found, Deny):
        return found
    cause = found
    role = _role(envelope)
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
        named = _named_target(envelope)
        if named is None:
            return Deny(
                ErrorCode.INVALID_REQUEST,
                "not_routable",
                f"{envelope.__struct_config__.tag} envelopes are not submitted to the gate",
            )
        target = named
        levels = cause.levels
    hop = cause.hop + (1 if role == "call" else -1 if role == "return" else 0)
    forged = _check_claims(sub, cause, hop)
    if forged is not None:
        return forged
    if isinstance(envelope, ToolRequest):
        tools = levels[-1].tools
        allowed_tools = profile.tools_allowed if tools is None else tools
        if envelope.tool_name not in allowed_tools:
            return Deny(
                ErrorCode.TOOL_NOT_ALLOWED,
                "tools_allowed",
                f"Employee {sub.sender} not authorized to use tool {envelope.tool_name} "
                f"(allowed here: {list(allowed_tools)})",
            )
    if role == "return":
        claimed_target = getattr(envelope, "target", None)
        if isinstance(envelope, AgentResponse) and claimed_target not in (None, target):
            return Deny(
                ErrorCode.TARGET_NOT_ALLOWED,
                "return_target",
                f"agent_response is addressed to {claimed_target!r}, but the call it answers "
                f"came from {target!r}",
            )
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
    user = _user_id(envelope)
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
        opened = _call_checks(sub, bundle, profile, cause, target)
        if isinstance(opened, Deny):
            return opened
        levels = (*levels, opened)
        objective = _objective_key(sub.sender, target, _objective(envelope))
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
    )


def _objective_key(sender: str, target: str, objective: str) -> str:
    digest = hashlib.sha256(objective.encode()).hexdigest()[:8]
    return f"{sender}>{target}:{digest}"
