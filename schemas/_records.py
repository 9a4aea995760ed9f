"""Seed 002's tool requests, tool results and approvals, the audit record, and the gate's
decision record."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from schemas._base import Envelope, Id, Name, NonNegative, UserId, UtcTime
from schemas._errors import ErrorCode

__all__ = ("ApprovalRequest", "AuditRecord", "Decision", "ToolError", "ToolRequest", "ToolResult")


class ToolRequest(Envelope, frozen=True, kw_only=True, tag="tool_request"):
    """An agent asks to run a tool (seed 002 §13.2): a call to the tool runtime.

    `tool_name` is the capability it uses (`File.Read`, `Mcp.<server>.<tool>`); `capability`,
    when given, must name the same. A step runs at most once: a request naming a step the
    runtime ran already gets that run's result again. `target` is the runtime's principal.
    """

    tool_name: str
    arguments: dict[str, Any] = {}
    session_id: Id
    task_id: Id
    step_id: Id
    capability: str | None = None
    target: Name = "tools"
    user_id: UserId = ""


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
    truncated: bool = False
    """`output_text` was cut at the scope's `max_output_bytes`."""
    details: dict[str, Any] = {}
    """Facts of the run: an exit code, a byte count, a commit id, an HTTP status."""
    provenance: dict[str, str] = {}
    """Where the output came from (`source`, `locator`, `trust`), so a model is shown it as
    data, never as an instruction (seed 002 §19.4)."""


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
    outcome: str = ""
    """An answer's own verdict (seed 003's status: success, partial, failed; or timeout)."""
    tokens: NonNegative | None = None
    """Tokens an answer reports spent (seed 003 `token_usage.total`, seed 004 `tokens_used`)."""
    tools: tuple[str, ...] | None = None
    """Tools the gate let the callee of an admitted call use (narrowed along the chain)."""
    tools_used: tuple[str, ...] = ()
    """Tools a sub-agent's answer says it used (seed 004 `tool_calls`)."""
    deadline_at: UtcTime | None = None
    """When the gate's deadline for an admitted call ran out."""
    traceparent: str = ""
    """The W3C trace context the recorded fact was published in, so a record leads to its
    span in an OpenTelemetry backend; empty in records written before it was kept."""
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
    outcome: str = ""
    """For an answer: how it says the call went, as seed 003 reports it (`success`,
    `partial`, `failed`; an `error` answer is `failed`, or `timeout` for DEADLINE_EXCEEDED)."""
    reason: Annotated[str, Meta(max_length=200)] = ""
    """For an answer that is no success: the error it gives, unredacted like `preview`."""
    tokens: NonNegative | None = None
    """For an answer: the tokens it reports spent (`token_usage.total`, `tokens_used`)."""
    duration_ms: NonNegative | None = None
    """For an answer: how long it reports the work took (`duration_ms`, `duration_seconds`)."""
    tools: tuple[str, ...] | None = None
    """For an admitted call: the tools the callee may use there, as the gate narrowed them
    along the chain (what the delivery's allowed-tools header says)."""
    tools_used: Annotated[tuple[Annotated[str, Meta(max_length=64)], ...], Meta(max_length=32)] = ()
    """For a sub-agent's answer: the tools it says it used (seed 004 `tool_calls`), cut to
    the first 32 names of at most 64 characters: what a brain says is bounded here."""
    deadline_at: UtcTime | None = None
    """For an admitted call: when the gate's deadline for it runs out. An answer may still
    come later (the caller has given up on it by then): `parley calls` shows it as a timeout."""
