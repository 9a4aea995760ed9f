"""The envelopes: every kind of message that crosses the bus.

Rules that keep the wire stable (see docs/envelopes.md):

- Each kind is a frozen, keyword-only Struct with an explicit tag on `kind`, so renaming a
  class never changes the wire.
- New fields only with defaults; a field's type never changes; decoders skip unknown fields,
  so an old actor reads a newer envelope.
- Field names are the seeds' own (seed 001's room events, seed 003's delegation envelopes,
  seed 004's sub-agent call, seed 002's session events, tools, approvals and errors). Seed
  002's camelCase names are written in snake_case like the rest of the wire.
- Identity, trace, hop count and causation travel in NATS headers (bus/_headers.py), and the
  gate trusts the subject and its own records over any of them. `sender` fields are the
  seeds' display fields, never an authority.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

from schemas._errors import ErrorCode

__all__ = (
    "PROTOCOL_VERSION",
    "AgentCall",
    "AgentResponse",
    "AnyEnvelope",
    "ApprovalRequest",
    "Artifact",
    "AuditRecord",
    "ContextFilter",
    "ContextMessage",
    "Control",
    "Decision",
    "DelegationConstraints",
    "DelegationRequest",
    "DelegationResponse",
    "Envelope",
    "Error",
    "FilteredContext",
    "Handoff",
    "HandoffData",
    "HumanMessage",
    "Reference",
    "Reply",
    "SessionEvent",
    "SourceRef",
    "SubAgentArgs",
    "SubAgentCall",
    "SubAgentResult",
    "TokenUsage",
    "ToolError",
    "ToolRequest",
    "ToolResult",
    "TranscriptItem",
    "call_kinds",
    "hop_delta_for",
    "return_kinds",
)

PROTOCOL_VERSION = 1

Id = Annotated[str, Meta(min_length=1, max_length=128)]
Name = Annotated[str, Meta(pattern=r"^[a-z0-9_-]{1,64}$")]
UtcTime = Annotated[datetime, Meta(tz=True)]
NonNegative = Annotated[int, Meta(ge=0)]


class Envelope(Struct, frozen=True, kw_only=True, tag_field="kind"):
    """Fields every envelope has: a unique id, the protocol version and the creation time."""

    id: Id
    created_at: UtcTime
    v: int = PROTOCOL_VERSION


# -- seed 001: the room and the collaboration reply contract ----------------------------


class Handoff(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Who speaks next and what they should do (seed 001 §3)."""

    to: Name
    task: Annotated[str, Meta(min_length=1, max_length=500)]


class Reply(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """The JSON an agent must answer with: `{message, handoff?, final?}` (seed 001 §3).

    Unknown fields are refused (the seed's `additionalProperties: false`); a reply that does
    not decode becomes a plain message flagged malformed, never a crash.
    """

    message: Annotated[str, Meta(min_length=1)]
    handoff: Handoff | UnsetType = UNSET
    final: bool = False


class TranscriptItem(Struct, frozen=True, kw_only=True):
    """One item of a session's rolling transcript (seed 001 §2)."""

    role: str  # "user" | "router" | an agent name
    name: str
    text: str


class TokenUsage(Struct, frozen=True, kw_only=True):
    """Tokens a brain spent on one answer (seed 003 `token_usage`; seed 004 `tokens_used`)."""

    prompt: NonNegative = 0
    completion: NonNegative = 0
    total: NonNegative = 0


class HumanMessage(Envelope, frozen=True, kw_only=True, tag="human_message"):
    """A person's message to the router: a single call (`@gpt …`) or a collaboration goal."""

    sender: str = "you"
    target: str = "router"
    thread: str = "default"
    text: str
    call_id: Id
    user_id: str = ""
    mode: Literal["single", "collaborate"] = "single"
    participants: tuple[Name, ...] = ()
    first_speaker: Name | None = None
    max_rounds: Annotated[int, Meta(ge=1, le=100)] = 6
    session_id: Id | None = None


class AgentCall(Envelope, frozen=True, kw_only=True, tag="agent_call"):
    """The router asks one agent for its turn (seed 001 §4-5: goal, window, round)."""

    sender: str = "router"
    target: Name
    thread: str = "default"
    text: str = ""
    call_id: Id
    session_id: Id | None = None
    round: Annotated[int, Meta(ge=1)] = 1
    max_rounds: Annotated[int, Meta(ge=1)] = 1
    goal: str
    transcript: tuple[TranscriptItem, ...] = ()
    final_round: bool = False
    user_id: str = ""


class AgentResponse(Envelope, frozen=True, kw_only=True, tag="agent_response"):
    """An agent's turn: the validated reply, or its raw text flagged `malformed`.

    `attempt` is the delivery number of the call that produced it: a late answer from a paused
    ("zombie") host loses to the answer of its redelivered twin.
    """

    sender: Name
    target: str = "router"
    thread: str = "default"
    text: str
    call_id: Id
    session_id: Id | None = None
    round: Annotated[int, Meta(ge=1)] = 1
    max_rounds: Annotated[int, Meta(ge=1)] = 1
    reply: Reply
    malformed: bool = False
    token_usage: TokenUsage = TokenUsage()
    attempt: Annotated[int, Meta(ge=1)] = 1


# -- seed 003: delegation -------------------------------------------------------------


class DelegationConstraints(Struct, frozen=True, kw_only=True):
    """Per-request safety limits (seed 003 defaults)."""

    max_tokens: Annotated[int, Meta(ge=1)] = 1200
    max_depth: Annotated[int, Meta(ge=0)] = 2
    deadline_ms: Annotated[int, Meta(ge=1)] = 15000


class Reference(Struct, frozen=True, kw_only=True):
    owner_scope: str
    source_id: str


class SourceRef(Struct, frozen=True, kw_only=True):
    owner_scope: str
    source_id: str
    relevance: float | None = None


class HandoffData(Struct, frozen=True, kw_only=True):
    facts: tuple[str, ...] = ()
    references: tuple[Reference, ...] = ()
    intermediate_results: Any = None


class DelegationRequest(Envelope, frozen=True, kw_only=True, tag="delegation_request"):
    """One agent delegates a task to another (seed 003 request envelope)."""

    request_id: Id
    origin_employee: Name
    target_employee: Name
    user_id: str
    parent_session_id: Id
    child_session_id: Id | None = None
    objective: str
    input: str
    constraints: DelegationConstraints = DelegationConstraints()
    context_hints: tuple[str, ...] = ()
    handoff_data: HandoffData = HandoffData()
    current_depth: NonNegative = 0


class Artifact(Struct, frozen=True, kw_only=True):
    type: Literal["table", "json", "url", "id", "file"]
    value: Any
    label: str | None = None


class DelegationResponse(Envelope, frozen=True, kw_only=True, tag="delegation_response"):
    """The delegate's answer (seed 003 response envelope)."""

    request_id: Id
    target_employee: Name
    summary: str
    result: str
    artifacts: tuple[Artifact, ...] = ()
    new_facts: tuple[str, ...] = ()
    used_sources: tuple[SourceRef, ...] = ()
    token_usage: TokenUsage = TokenUsage()
    duration_ms: NonNegative | None = None
    child_session_id: Id | None = None
    confidence: Annotated[int, Meta(ge=0, le=100)] | None = None
    requires_followup: bool = False
    status: Literal["success", "partial", "failed"]
    error: str | None = None


# -- seed 004: sub-agent calls with filtered context ----------------------------------


class ContextFilter(Struct, frozen=True, kw_only=True):
    """What part of the caller's session the sub-agent may see (seed 004)."""

    last_messages: NonNegative | None = None
    roles: tuple[str, ...] | None = None
    keywords: tuple[str, ...] | None = None
    include_summary: bool = False
    include_workspace: bool = False
    workspace_files: tuple[str, ...] | None = None
    max_age_seconds: NonNegative | None = None


class SubAgentArgs(Struct, frozen=True, kw_only=True):
    """The sub-agent tool's arguments (seed 004 defaults: 4000 tokens, no nested calls)."""

    agent_name: Name
    task: str
    context: ContextFilter | None = None
    input: Any = None
    max_context_tokens: Annotated[int, Meta(ge=1)] = 4000
    allowed_tools: tuple[str, ...] | None = None
    allow_nested_calls: bool = False


class ContextMessage(Struct, frozen=True, kw_only=True):
    role: str
    content: str
    created_at: UtcTime | None = None


class FilteredContext(Struct, frozen=True, kw_only=True):
    """The context actually passed, after filtering and fitting (seed 004 FilteredContext)."""

    messages: tuple[ContextMessage, ...] = ()
    summary: str | None = None
    workspace: str | None = None
    total_tokens: NonNegative = 0


class SubAgentCall(Envelope, frozen=True, kw_only=True, tag="sub_agent_call"):
    """A caller agent invokes a sub-agent with filtered context."""

    call_id: Id
    caller: Name
    session_id: Id
    args: SubAgentArgs
    context: FilteredContext = FilteredContext()
    user_id: str = ""


class SubAgentResult(Envelope, frozen=True, kw_only=True, tag="sub_agent_result"):
    """The sub-agent's result (seed 004 SubAgentResult)."""

    call_id: Id
    agent_name: Name
    success: bool
    output: str
    tool_calls: tuple[str, ...] = ()
    tokens_used: NonNegative = 0
    duration_seconds: NonNegative = 0
    errors: tuple[str, ...] = ()


# -- human control, session timeline, errors (seeds 000, 001, 002) --------------------


class Control(Envelope, frozen=True, kw_only=True, tag="control"):
    """A person steers a running session (Stop in seed 001; pause … take over in seed 000)."""

    action: Literal["pause", "resume", "stop", "take_over", "approve", "reject"]
    session_id: Id
    target: Name = "router"
    approval_id: Id | None = None
    reason: str = ""
    user_id: str = ""


EventType = Literal[
    "session_created",
    "session_started",
    "step_started",
    "step_completed",
    "llm_request_started",
    "llm_request_completed",
    "tool_requested",
    "tool_completed",
    "approval_requested",
    "approval_resolved",
    "session_completed",
    "session_failed",
    "session_canceled",
]


class SessionEvent(Envelope, frozen=True, kw_only=True, tag="session_event"):
    """One transition of a session (seed 002 §13.1; its `eventId` is the envelope id)."""

    session_id: Id
    task_id: Id | None = None
    event_type: EventType
    round: NonNegative | None = None
    speaker: str | None = None
    stop_reason: str | None = None
    envelope_ids: tuple[Id, ...] = ()
    payload: dict[str, Any] = {}


class Error(Envelope, frozen=True, kw_only=True, tag="error"):
    """Why something was refused or failed (seed 002 §15), caused by `cause_id`."""

    code: ErrorCode
    message: str
    retryable: bool = False
    details: dict[str, Any] = {}
    cause_id: Id | None = None


class ToolRequest(Envelope, frozen=True, kw_only=True, tag="tool_request"):
    """An agent asks to run a tool (seed 002 §13.2)."""

    tool_name: str
    arguments: dict[str, Any] = {}
    session_id: Id
    task_id: Id
    step_id: Id
    capability: str | None = None


class ToolError(Struct, frozen=True, kw_only=True):
    code: str
    message: str


class ToolResult(Envelope, frozen=True, kw_only=True, tag="tool_result"):
    """What a tool run produced (seed 002 §13.3)."""

    tool_name: str
    session_id: Id
    task_id: Id
    step_id: Id
    status: Literal["succeeded", "failed", "denied"]
    output_text: str | None = None
    artifact_uris: tuple[str, ...] = ()
    error: ToolError | None = None


class ApprovalRequest(Envelope, frozen=True, kw_only=True, tag="approval_request"):
    """A person must approve an action first (seed 002 §13.4)."""

    approval_id: Id
    session_id: Id
    task_id: Id
    title: str
    action_summary: str
    risk_level: Literal["low", "medium", "high"] | None = None
    details: dict[str, Any] = {}


class AuditRecord(Envelope, frozen=True, kw_only=True, tag="audit_record"):
    """One audited fact: the union of seed 000, 003 and 004's audit fields plus our own.

    `prev_hash` and `hash` chain the records; `source_stream` and `source_seq` name the fact
    it records, which is also its de-duplication key.
    """

    tenant: Name
    profile: Name
    fact: str
    trace_id: str = ""
    hop_count: NonNegative = 0
    envelope_id: str = ""
    decision_code: str | None = None
    policy_version: int | None = None
    requester: str = ""
    target: str = ""
    target_device_id: str | None = None
    turn_index: NonNegative | None = None
    mode: str | None = None
    status: str = ""
    failure_reason: str | None = None
    duration_ms: NonNegative | None = None
    request_id: str | None = None
    origin: str = ""
    user_id: str = ""
    objective: str = ""
    task: str = ""
    output_preview: Annotated[str, Meta(max_length=200)] = ""
    success: bool | None = None
    source_stream: str = ""
    source_seq: NonNegative = 0
    session_id: str | None = None
    causation_id: str = ""
    source_subject: str = ""
    """The subject the source message was published on (a dead letter's original subject)."""
    attempt: NonNegative | None = None
    """The delivery on which the source message was given up (a dead letter)."""
    payload_bytes: NonNegative | None = None
    payload_sha256: str = ""
    """Size and SHA-256 of a dead letter's payload as stored: the payload itself may hold
    secrets and is never copied into the audit history."""
    chain_index: NonNegative = 0
    """Position in the audit chain, from 1; a checkpoint's `count` names one of these."""
    prev_hash: str = ""
    hash: str = ""
    """SHA-256 of the record's stored bytes with this value empty; kept last on purpose."""


class Decision(Envelope, frozen=True, kw_only=True, tag="decision"):
    """The gate's verdict on one submitted envelope, published on `parley.decisions.<sender>`.

    Everything here is what the gate derived from the subject and its own records, never the
    sender's claims: `sender` is the submit subject's token, `trace_id`, `hop_count`, `origin`
    and `chain` come from the cause's record. `rule` names the check that decided (`allow`
    when every check passed), `limit` and `value` the numbers it compared. `preview` is the
    first 200 characters of the envelope's text, unredacted: the auditor redacts it.
    """

    allowed: bool
    code: ErrorCode | None = None
    rule: str = "allow"
    message: str = ""
    limit: int | None = None
    value: int | None = None
    sender: Name
    target: str = ""
    envelope_id: Id
    envelope_kind: str
    causation_id: str = ""
    trace_id: str
    hop_count: NonNegative = 0
    origin: str = ""
    chain: tuple[str, ...] = ()
    user_id: str = ""
    session_id: str | None = None
    request_id: str | None = None
    objective: str = ""
    preview: Annotated[str, Meta(max_length=200)] = ""
    bundle_version: int | None = None
    bundle_hash: str = ""
    decided_at: UtcTime | None = None
    decided_by: str = ""
    """Which gate process decided (`<actor id>/<pid>`): replicas share one consumer."""


AnyEnvelope = (
    HumanMessage
    | AgentCall
    | AgentResponse
    | DelegationRequest
    | DelegationResponse
    | SubAgentCall
    | SubAgentResult
    | Control
    | SessionEvent
    | Error
    | ToolRequest
    | ToolResult
    | ApprovalRequest
    | AuditRecord
    | Decision
)

_CALL_KINDS: frozenset[type[Envelope]] = frozenset({AgentCall, DelegationRequest, SubAgentCall})
_RETURN_KINDS: frozenset[type[Envelope]] = frozenset(
    {AgentResponse, DelegationResponse, SubAgentResult, Error}
)


def call_kinds() -> frozenset[type[Envelope]]:
    """Kinds that ask another agent to act: each sits one hop deeper than its cause."""
    return _CALL_KINDS


def return_kinds() -> frozenset[type[Envelope]]:
    """Kinds that answer a call: each goes back to the caller, one hop shallower than its cause."""
    return _RETURN_KINDS


def hop_delta_for(envelope: Envelope) -> int:
    """How many hops deeper than its cause an envelope of this kind sits (DESIGN.md headers).

    A call is its cause's hop + 1, a return is back at its caller's level (- 1), anything
    else (a human message, a control, an event) stays at its cause's level. The gate derives
    the same number from its own records and refuses a sender that claims another.
    """
    kind = type(envelope)
    if kind in _CALL_KINDS:
        return 1
    if kind in _RETURN_KINDS:
        return -1
    return 0
