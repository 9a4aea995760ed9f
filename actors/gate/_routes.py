"""What the gate plans with: a submission, a route or a refusal, and what an envelope says
about itself (its role in a call, its target, objective, user and claimed identity). Pure.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import msgspec

from actors.gate._records import Level, Position
from bus import HOP_COUNT
from schemas import (
    AgentCall,
    AgentResponse,
    AnyEnvelope,
    Control,
    DelegationRequest,
    DelegationResponse,
    ErrorCode,
    HumanMessage,
    LlmRequest,
    LlmResponse,
    ProfilePolicy,
    SubAgentCall,
    SubAgentResult,
    ToolRequest,
    ToolResult,
    call_kinds,
    return_kinds,
)

__all__ = (
    "CallNames",
    "Deny",
    "Role",
    "Route",
    "Submission",
    "answer_names",
    "call_names",
    "claimed_hop_floor",
    "claimed_identity",
    "envelope_role",
    "named_target",
    "objective_key",
    "objective_of",
    "root_position",
    "session_of",
    "user_id_of",
)

Role = Literal["call", "return", "lateral"]

CallNames = tuple[str, str]
"""How a call and its answer name the call in their bodies: (call id, session id or "")."""

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
    counts_session_tokens: bool = False
    """The bundle sets `max_session_tokens`: its session's tokens are read and charged (no
    record is kept, and no key contended for, while no limit asks for it)."""

    @property
    def is_root(self) -> bool:
        return not self.sub.causation_id


def envelope_role(envelope: AnyEnvelope) -> Role:
    kind = type(envelope)
    if kind in _CALLS:
        return "call"
    if kind in _RETURNS:
        return "return"
    return "lateral"


def named_target(envelope: AnyEnvelope) -> str | None:
    match envelope:
        case AgentCall() | HumanMessage() | Control():
            return envelope.target
        case DelegationRequest():
            return envelope.target_employee
        case SubAgentCall():
            return envelope.args.agent_name
        case ToolRequest() | LlmRequest():
            return envelope.target
        case _:
            return None


def objective_of(envelope: AnyEnvelope) -> str:
    match envelope:
        case DelegationRequest():
            return envelope.objective
        case SubAgentCall():
            return envelope.args.task
        case AgentCall():
            return envelope.goal
        case ToolRequest():
            # The same tool with the same arguments, twice at once, is one request repeated.
            return envelope.tool_name + " " + msgspec.json.encode(envelope.arguments).decode()
        case LlmRequest():
            return envelope.request_id  # one model call is never another's cycle
        case _:
            return ""


def call_names(envelope: AnyEnvelope) -> CallNames:
    """What an answer to this call must name: its call id (a delegation's `request_id`) and
    its session ("" for none; a sub-agent's result names no session)."""
    match envelope:
        case AgentCall():
            return envelope.call_id, envelope.session_id or ""
        case DelegationRequest():
            return envelope.request_id, envelope.child_session_id or ""
        case SubAgentCall():
            return envelope.call_id, ""
        case ToolRequest():
            return envelope.step_id, envelope.session_id
        case LlmRequest():
            return envelope.request_id, envelope.session_id
        case _:
            return "", ""


def answer_names(envelope: AnyEnvelope) -> CallNames | None:
    """The call an answer names in its body, in `call_names`' terms (None: not an answer
    that names one; an `error` names its cause in `cause_id`, judged apart)."""
    match envelope:
        case AgentResponse():
            return envelope.call_id, envelope.session_id or ""
        case DelegationResponse():
            return envelope.request_id, envelope.child_session_id or ""
        case SubAgentResult():
            return envelope.call_id, ""
        case ToolResult():
            return envelope.step_id, envelope.session_id
        case LlmResponse():
            return envelope.request_id, envelope.session_id
        case _:
            return None


def claimed_identity(envelope: AnyEnvelope) -> tuple[str, str] | None:
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


def user_id_of(envelope: AnyEnvelope) -> str:
    return str(getattr(envelope, "user_id", "") or "")


def session_of(envelope: AnyEnvelope) -> str:
    """The session an envelope was made in (a delegation names it `parent_session_id`; a
    person's message naming none is in the one the router opens for it)."""
    if isinstance(envelope, DelegationRequest):
        return envelope.parent_session_id
    if isinstance(envelope, HumanMessage):
        return envelope.opened_session()
    value = getattr(envelope, "session_id", None)
    return value if isinstance(value, str) else ""


def root_position(sub: Submission) -> Position:
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
        user_id=user_id_of(envelope),
        session_id=session_of(envelope),
        hop_floor=claimed_hop_floor(sub),
    )


_MAX_CLAIMED_HOP = 1000


def claimed_hop_floor(sub: Submission) -> int:
    """The hops a root's sender says its trace made before it: a relay carrying another
    deployment's call names that side's count in `Parley-Hop-Count` (the call's own hop).

    Taken as a floor, never as the truth: a root's own record is hop 0, so a claim can only
    make its chain stricter (max(own record, claim)), and a claim on anything but a root is
    checked against the gate's record as before (`check_claims`). A claim that is not a
    plain count is no floor; `check_claims` then refuses it as a forgery.
    """
    claimed = sub.claims.get(HOP_COUNT, "")
    if not (claimed.isascii() and claimed.isdigit()) or int(claimed) > _MAX_CLAIMED_HOP:
        return 0
    below = 1 if envelope_role(sub.envelope) == "call" else 0
    return max(0, int(claimed) - below)


def objective_key(sender: str, target: str, objective: str) -> str:
    digest = hashlib.sha256(objective.encode()).hexdigest()[:8]
    return f"{sender}>{target}:{digest}"
