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

This module holds seed 001's kinds (human messages, agent calls and responses), controls,
session events and errors, and the union of every kind (`AnyEnvelope`); the others are in
schemas/_delegation.py and schemas/_records.py, over the base in schemas/_base.py, and are
re-exported here.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

from schemas._base import (
    PROTOCOL_VERSION,
    Envelope,
    Id,
    Name,
    NonNegative,
    TokenUsage,
    UserId,
    UtcTime,
)
from schemas._delegation import (
    Artifact,
    ContextFilter,
    ContextMessage,
    DelegateReply,
    DelegationConstraints,
    DelegationRequest,
    DelegationResponse,
    FilteredContext,
    HandoffData,
    Reference,
    SourceRef,
    SubAgentArgs,
    SubAgentCall,
    SubAgentResult,
)
from schemas._errors import ErrorCode
from schemas._ids import derive_id
from schemas._llm import (
    GuardrailOutcome,
    LlmChunk,
    LlmContext,
    LlmError,
    LlmRequest,
    LlmResponse,
    LlmToolCall,
    LlmUsage,
    SourceProvenance,
)
from schemas._records import (
    ApprovalRequest,
    AuditRecord,
    Decision,
    ToolError,
    ToolRequest,
    ToolResult,
)

__all__ = (
    "PROTOCOL_VERSION",
    "TOLD_FROM_DECISION",
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
    "DelegateReply",
    "DelegationConstraints",
    "DelegationRequest",
    "DelegationResponse",
    "Envelope",
    "Error",
    "FilteredContext",
    "GuardrailOutcome",
    "Handoff",
    "HandoffData",
    "HumanMessage",
    "LlmChunk",
    "LlmContext",
    "LlmError",
    "LlmRequest",
    "LlmResponse",
    "LlmToolCall",
    "LlmUsage",
    "Orchestration",
    "Reference",
    "Reply",
    "SessionEvent",
    "SourceProvenance",
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


ToolName = Annotated[str, Meta(min_length=1, max_length=200)]
"""A tool an answer used: an agent-calling tool (`delegate_to_agent`) or a capability
(`File.Read`, `Mcp.<server>.<tool>`)."""


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
    created_at: UtcTime | None = None
    """When the router added it to the session, so a sub-agent's context can be cut by age
    (seed 004's `max_age_seconds`); None for items written before it was kept."""


HISTORY_SUMMARY: Final = "history_summary"
"""The name of the transcript item (role `router`) that summarises the turns the router dropped
from a bounded history (seed 000): a host bounding the history again folds it into its own
summary, ahead of what it drops itself, instead of taking it for a turn and cutting it short."""


class Orchestration(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Seed 000: a person's local agent talks to a shared agent under the person's control.

    `local_agent` drafts each outbound message; `shared_agent` is the target it goes to (any
    agent name: the gate decides whether it is a shared agent and whether it may be called).
    The limits are seed 000's mandatory hard limits, with its defaults.
    """

    local_agent: Name
    shared_agent: Name
    mode: Literal["manual", "semi_auto", "full_auto"] = "manual"
    max_turns: Annotated[int, Meta(ge=1, le=100)] = 8
    max_duration_ms: Annotated[int, Meta(ge=1000, le=86_400_000)] = 600_000
    max_failures: Annotated[int, Meta(ge=1, le=100)] = 3
    max_tokens_budget: Annotated[int, Meta(ge=1)] | None = None


class HumanMessage(Envelope, frozen=True, kw_only=True, tag="human_message"):
    """A person's message to the router: a single call (`@gpt …`), a collaboration goal, or
    an orchestrated session's objective (`mode = "orchestrate"` with `orchestration`)."""

    sender: str = "you"
    target: str = "router"
    thread: str = "default"
    text: str
    call_id: Id
    user_id: UserId = ""
    mode: Literal["single", "collaborate", "orchestrate"] = "single"
    participants: tuple[Name, ...] = ()
    first_speaker: Name | None = None
    max_rounds: Annotated[int, Meta(ge=1, le=100)] = 6
    session_id: Id | None = None
    orchestration: Orchestration | None = None

    def opened_session(self) -> str:
        """The session this message is in: its own `session_id`, or one derived from the
        message's id (the same on redelivery). The router opens that session; the gate
        counts the session's tokens under it; both read it here."""
        return self.session_id or derive_id(self.id, "session")


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
    user_id: UserId = ""


class AgentResponse(Envelope, frozen=True, kw_only=True, tag="agent_response"):
    """An agent's turn: the validated reply, or its raw text flagged `malformed`.

    `attempt` is the delivery number of the call that produced it: a late answer from a paused
    ("zombie") host loses to the answer of its redelivered twin. `tools_used` names the tools
    the agent's brain called on its way to this answer (first use first, each once; a
    capability by its name, `File.Read`), so a caller can treat a tool-using turn differently
    (seed 000's `semi_auto` review). `peers`
    are the agents its profile lets it hand off to (empty: any participant): the router, which
    knows the session's participants, judges a handoff against both and names what it allows.
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
    tools_used: Annotated[tuple[ToolName, ...], Meta(max_length=32)] = ()
    peers: Annotated[tuple[Name, ...], Meta(max_length=64)] = ()


# -- seed 003: delegation -------------------------------------------------------------


# -- seed 004: sub-agent calls with filtered context ----------------------------------


# -- human control, session timeline, errors (seeds 000, 001, 002) --------------------


class Control(Envelope, frozen=True, kw_only=True, tag="control"):
    """A person steers a running session (Stop in seed 001; pause … take over in seed 000).

    `text` is the person's own words: with `approve`, the edited draft to send instead of the
    agent's (edit-and-approve); with `take_over`, the next outbound message they typed.
    """

    action: Literal["pause", "resume", "stop", "take_over", "approve", "reject"]
    session_id: Id
    target: Name = "router"
    approval_id: Id | None = None
    reason: str = ""
    user_id: UserId = ""
    text: str = ""


EventType = Literal[
    "session_created",
    "session_started",
    "session_paused",
    "session_resumed",
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


TOLD_FROM_DECISION: Final = "decision_id"
"""The payload key of a session event that tells a person what a gate decision says (a call
between agents, actors/gate/_timeline.py): the decision is the audited fact, its copy on the
timeline is not audited again."""


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
    | LlmRequest
    | LlmResponse
    | ApprovalRequest
    | AuditRecord
    | Decision
)

_CALL_KINDS: frozenset[type[Envelope]] = frozenset(
    {AgentCall, DelegationRequest, SubAgentCall, ToolRequest, LlmRequest}
)
_RETURN_KINDS: frozenset[type[Envelope]] = frozenset(
    {AgentResponse, DelegationResponse, SubAgentResult, ToolResult, LlmResponse, Error}
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
