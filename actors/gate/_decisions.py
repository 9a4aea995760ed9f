"""The record of one decision, as the gate publishes it on `parley.decisions.<sender>`: pure.

A decision names the envelope, where it sits (trace, hop, origin, chain, user), the rule that
decided it and the bundle in force, and a short preview; the auditor turns it into audit
records (actors/auditor/), and `parley trace` and `parley calls` draw them.

A decision is also the interaction record of agents calling agents (seed 004's "record the
interaction, not the context"): a call's decision says what was asked, which tools the gate
granted and until when; an answer's says what seed 003 and 004 report of it (status, tokens,
duration, tools used, the error). Only those figures and a 200-character preview are copied:
a sub-agent call's filtered context stays in the envelope, referenced by its id.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from actors.gate._plan import Deny
from actors.gate._records import Position
from actors.gate._routes import objective_of, session_of
from bus import BundleStore
from schemas import (
    AnyEnvelope,
    Control,
    Decision,
    DelegationResponse,
    Error,
    ErrorCode,
    LlmRequest,
    LlmResponse,
    SubAgentCall,
    SubAgentResult,
    ToolRequest,
    ToolResult,
    derive_id,
    utc_now,
)

__all__ = ("decision_for", "tag")

_TOOLS_SHOWN = 32
_TOOL_NAME_MAX = 64
_REASON_MAX = 200


@dataclass(frozen=True, slots=True)
class _Figures:
    """What an answer reports of the call it answers (seed 003 response, seed 004 result)."""

    outcome: str = ""
    reason: str = ""
    tokens: int | None = None
    duration_ms: int | None = None
    tools_used: tuple[str, ...] = ()


def decision_for(
    sender: str,
    causation_id: str,
    envelope: AnyEnvelope,
    position: Position,
    rule: str,
    deny: Deny | None,
    *,
    basis: str,
    bundles: BundleStore,
    decided_by: str,
) -> Decision:
    """The decision about `envelope` from `sender`: admitted at `position` when `deny` is
    None, else refused by `rule`; its id derives from `basis` (the envelope's id unless set)."""
    bundle = bundles.bundle
    figures = _answer_figures(envelope)
    granted = position.levels[-1] if deny is None and position.levels else None
    if granted is not None and granted.call_id != envelope.id:
        granted = None  # not a call: the level is its cause's
    now = utc_now()
    return Decision(
        id=derive_id(basis or envelope.id, "decision"),
        created_at=now,
        allowed=deny is None,
        code=deny.code if deny else None,
        rule=rule,
        message=deny.message if deny else "",
        limit=deny.limit if deny else None,
        value=deny.value if deny else None,
        sender=sender,
        target=position.target if deny is None else named(envelope),
        envelope_id=envelope.id,
        envelope_kind=tag(envelope),
        causation_id=causation_id,
        trace_id=position.trace_id,
        hop_count=position.hop if position.levels else 0,
        origin=position.origin,
        chain=position.chain,
        user_id=position.user_id,
        session_id=session_of(envelope) or None,
        request_id=text_field(envelope, "request_id") or None,
        objective=objective(envelope)[:500],
        preview=preview(envelope),
        bundle_version=bundle.version if bundle else None,
        bundle_hash=bundles.bundle_hash,
        decided_at=now,
        decided_by=decided_by,
        outcome=figures.outcome,
        reason=figures.reason[:_REASON_MAX],
        tokens=figures.tokens,
        duration_ms=figures.duration_ms,
        tools_used=tuple(name[:_TOOL_NAME_MAX] for name in figures.tools_used[:_TOOLS_SHOWN]),
        tools=granted.tools if granted is not None else None,
        deadline_at=(
            datetime.fromtimestamp(granted.deadline_ms / 1000, UTC)
            if granted is not None and granted.deadline_ms is not None
            else None
        ),
    )


def _answer_figures(envelope: AnyEnvelope) -> _Figures:
    """What an answer says of its call; nothing for any other kind."""
    match envelope:
        case DelegationResponse():
            return _Figures(
                outcome=envelope.status,
                reason=envelope.error or "",
                tokens=envelope.token_usage.total,
                duration_ms=envelope.duration_ms,
            )
        case SubAgentResult():
            return _Figures(
                outcome="success" if envelope.success else "failed",
                reason="; ".join(envelope.errors),
                tokens=envelope.tokens_used,
                duration_ms=envelope.duration_seconds * 1000,
                tools_used=envelope.tool_calls,
            )
        case ToolResult():
            failure = envelope.error
            return _Figures(
                outcome=envelope.status,
                reason=f"{failure.code}: {failure.message}" if failure else "",
                tools_used=(envelope.tool_name,),
            )
        case LlmResponse():
            error = envelope.error
            return _Figures(
                outcome="success" if envelope.status == "succeeded" else envelope.status,
                reason=f"{error.code}: {error.message}" if error else "",
                tokens=envelope.usage.total_tokens,
                duration_ms=envelope.latency_ms,
            )
        case Error():
            late = envelope.code == ErrorCode.DEADLINE_EXCEEDED
            return _Figures(
                outcome="timeout" if late else "failed",
                reason=f"{envelope.code.value}: {envelope.message}",
            )
        case _:
            return _Figures()


def objective(envelope: AnyEnvelope) -> str:
    """What a call asks for (a sub-agent call's is its `task`); its context is never copied.

    A person's control says what it decides (`approve <approval id>`, `reject <approval id>:
    <reason>`, `stop: <reason>`), so the audit history tells who approved which held step
    (seed 002 §3.6). A model call says which model, through which API, with how many
    messages and at most how many tokens, and its answer how many tokens it took each way:
    the request's and response's metadata (seed 002 §18), never their words.
    """
    match envelope:
        case SubAgentCall():
            return envelope.args.task
        case ToolRequest():
            return objective_of(envelope)  # the tool and its arguments
        case Control():
            decided = f"{envelope.action} {envelope.approval_id or ''}".rstrip()
            return f"{decided}: {envelope.reason}" if envelope.reason else decided
        case LlmRequest():
            cap = envelope.max_output_tokens
            asked = f"model {envelope.model} ({envelope.api}), {len(envelope.messages)} messages"
            sources = envelope.context_metadata.source_provenance
            untrusted = sum(1 for s in sources if s.trust_level == "untrusted")
            return (
                asked
                + (f", at most {cap} output tokens" if cap else "")
                + (
                    f", context from {len(sources)} sources by its word ({untrusted} untrusted)"
                    if sources
                    else ""
                )
            )
        case LlmResponse():
            usage = envelope.usage
            return (
                f"model {envelope.model} ({envelope.provider or 'no provider'}): "
                f"{usage.prompt_tokens} prompt + {usage.completion_tokens} completion tokens"
                + (f", finished: {envelope.finish_reason}" if envelope.finish_reason else "")
            )
    return text_field(envelope, "objective")


def tag(envelope: AnyEnvelope) -> str:
    return str(envelope.__struct_config__.tag)


def named(envelope: AnyEnvelope) -> str:
    """The agent a refused envelope named as its target (a sub-agent call names it in its
    arguments): the record of a refusal still says whom the call was for."""
    if isinstance(envelope, SubAgentCall):
        return envelope.args.agent_name
    for field in ("target", "target_employee"):
        value = getattr(envelope, field, None)
        if isinstance(value, str):
            return value
    return ""


def text_field(envelope: AnyEnvelope, name: str) -> str:
    value = getattr(envelope, name, None)
    return value if isinstance(value, str) else ""


def preview(envelope: AnyEnvelope) -> str:
    for field in ("text", "input", "output", "result", "message", "output_text"):
        value = getattr(envelope, field, None)
        if isinstance(value, str) and value:
            return value[:200]
    return ""
