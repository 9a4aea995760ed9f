"""Seed 003's delegation envelopes and seed 004's sub-agent call, with their parts."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from schemas._base import Envelope, Id, Name, NonNegative, TokenUsage, UserId, UtcTime

__all__ = (
    "Artifact",
    "ContextFilter",
    "ContextMessage",
    "DelegateReply",
    "DelegationConstraints",
    "DelegationRequest",
    "DelegationResponse",
    "FilteredContext",
    "HandoffData",
    "Reference",
    "SourceRef",
    "SubAgentArgs",
    "SubAgentCall",
    "SubAgentResult",
)


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
    user_id: UserId
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


class DelegateReply(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a brain answering a delegation may reply: seed 001's `message` (and `final`,
    which a brain used to sessions may add and which means nothing here) with seed 003's
    response fields beside it. The host builds the `DelegationResponse` from it: the
    message is its `result`, the first line of the message its `summary` unless one is given.

    Unknown fields are refused as in seed 001's contract; a handoff is not a delegate's to
    make (it calls agents with `delegate_to_agent` instead).
    """

    message: Annotated[str, Meta(min_length=1)]
    summary: Annotated[str, Meta(min_length=1, max_length=200)] | None = None
    artifacts: Annotated[tuple[Artifact, ...], Meta(max_length=32)] = ()
    new_facts: Annotated[tuple[Annotated[str, Meta(max_length=500)], ...], Meta(max_length=32)] = ()
    used_sources: Annotated[tuple[SourceRef, ...], Meta(max_length=32)] = ()
    confidence: Annotated[int, Meta(ge=0, le=100)] | None = None
    requires_followup: bool = False
    final: bool = False


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
    user_id: UserId = ""


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
