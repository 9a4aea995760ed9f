"""The gate's checks that count nothing, one function each, in the order `plan()` applies
them (actors/gate/_plan.py): forged claims, speaking for a person, the cause's record, hop and
depth limits, tool narrowing, and the checks of a call (target, self-loops, cycles, sub-agent
and shared-agent permissions, deadlines, token budgets, user isolation). Pure.
"""

from __future__ import annotations

from actors.gate._records import Level, Position
from actors.gate._routes import (
    Deny,
    Submission,
    answer_names,
    call_names,
    claimed_identity,
    root_position,
)
from bus import DEADLINE, HOP_COUNT, ORIGIN, TRACE_ID
from schemas import (
    Control,
    DelegationRequest,
    ErrorCode,
    HumanMessage,
    LlmRequest,
    PolicyBundle,
    ProfilePolicy,
    SubAgentCall,
    ToolRequest,
    call_kinds,
    return_kinds,
)

__all__ = (
    "call_checks",
    "cause_of",
    "check_answer_names_its_call",
    "check_claims",
    "check_speaks_for_person",
    "hop_limit",
    "narrow_tools",
)

_CALLS = call_kinds()
_RETURNS = return_kinds()


def check_claims(sub: Submission, cause: Position, hop: int) -> Deny | None:
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
    identity = claimed_identity(sub.envelope)
    if identity is not None and identity[1] != sub.sender:
        field, value = identity
        return Deny(
            ErrorCode.FORGED_HEADER,
            "forged_identity",
            f"{field} claims {value!r}, but the envelope was submitted by {sub.sender!r}",
        )
    return None


def check_answer_names_its_call(sub: Submission, answered: Level) -> Deny | None:
    """An answer's body names the call it answers, and that must be the call the gate
    delivered to its sender: the call on the level it closes, as the gate recorded it.

    A caller matches answers by those ids, so an answer caused by its sender's own call but
    naming another call (another agent's, copied from a transcript) would pass for that other
    agent's answer wherever the caller trusts the ids more than its own records.
    """
    named = answer_names(sub.envelope)
    expected = (answered.answer_call_id, answered.answer_session_id)
    if named is None or not answered.answer_call_id or named == expected:
        return None
    call_id, session_id = named
    field, claimed, recorded = (
        ("call id", call_id, expected[0])
        if call_id != expected[0]
        else ("session id", session_id, expected[1])
    )
    return Deny(
        ErrorCode.FORGED_HEADER,
        "answer_names_another_call",
        f"{sub.envelope.__struct_config__.tag} from {sub.sender} names {field} "
        f"{claimed[:80]!r}, but the call it answers ({answered.call_id}) has {recorded!r}",
    )


def check_speaks_for_person(sub: Submission, profile: ProfilePolicy) -> Deny | None:
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


def cause_of(sub: Submission, cause: Position | None, profile: ProfilePolicy) -> Position | Deny:
    if not sub.causation_id:
        if not profile.start_traces:
            return Deny(
                ErrorCode.UNAUTHORIZED,
                "start_traces",
                f"{sub.sender} may not start a new trace: an envelope from it must name its "
                "cause in Parley-Causation-Id",
            )
        return root_position(sub)
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


def hop_limit(
    sub: Submission, profile: ProfilePolicy, hop: int, shared: bool
) -> tuple[ErrorCode, str, int, str] | None:
    envelope = sub.envelope
    if isinstance(envelope, ToolRequest):
        # A leaf: the tool runtime calls no one, so a tool adds no hop a loop could repeat.
        # An agent deep in a chain may still use the tools its chain grants it.
        return None
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
    if isinstance(envelope, LlmRequest):
        return None  # a model call is a leaf: it opens no hop anyone could go on from
    limit = profile.max_hop_count
    if hop > limit:
        return (
            ErrorCode.HOP_LIMIT_EXCEEDED,
            "max_hop_count",
            limit,
            f"Hop count {hop} exceeds maxHopCount {limit}",
        )
    return None


def narrow_tools(
    sub: Submission, bundle: PolicyBundle, target: str, caller: Level
) -> tuple[str, ...] | Deny:
    target_profile = bundle.profiles.get(target)
    # Seed 004's tool names and seed 002's capabilities: a caller's allowed_tools narrows both.
    own = target_profile.tools_allowed + target_profile.capabilities if target_profile else ()
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


def call_checks(
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
        allowed = profile.allowed_shared_device_ids
        device = bundle.shared_agent_devices.get(target)
        if target not in allowed and (device is None or device not in allowed):
            on = f" on device {device[:16]}…" if device else ""
            return Deny(
                ErrorCode.TARGET_NOT_ALLOWED,
                "allowed_shared_device_ids",
                f"shared agent {target!r}{on} is not in {sub.sender}'s allowedSharedDeviceIds",
            )
    if target in cause.chain:
        path = " -> ".join((*cause.chain, target))
        return Deny(
            ErrorCode.CYCLE_DETECTED,
            "call_chain",
            f"Cycle detected: {target} is already on the call chain ({path})",
        )
    limit = hop_limit(sub, profile, hop, shared)
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
    if isinstance(envelope, ToolRequest) and (claimed := _claimed_deadline(sub)) is not None:
        # How long the sender waits for the result (its host's wait, actors/delegation): a
        # claim, so it may only shorten the chain's. The runtime starts no step past it.
        deadline = claimed if deadline is None else min(deadline, claimed)
    tools = narrow_tools(sub, bundle, target, caller)
    if isinstance(tools, Deny):
        return tools
    nested = envelope.args.allow_nested_calls if isinstance(envelope, SubAgentCall) else True
    answer_call_id, answer_session_id = call_names(envelope)
    # An agent's callee works within the agent's own powers; a trace starter's works for a
    # person, within its own profile alone.
    bound_by = () if profile.start_traces else (*caller.bound_by, sub.sender)
    return Level(
        holder=target,
        call_id=envelope.id,
        answer_call_id=answer_call_id,
        answer_session_id=answer_session_id,
        tools=tools,
        bound_by=bound_by,
        nested_ok=nested and caller.nested_ok,
        deadline_ms=deadline,
        token_budget=(
            envelope.constraints.max_tokens if isinstance(envelope, DelegationRequest) else None
        ),
    )


def _claimed_deadline(sub: Submission) -> int | None:
    """The `Parley-Deadline` its sender claims, if it is a plain count of milliseconds."""
    raw = sub.claims.get(DEADLINE, "")
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 15 else None
