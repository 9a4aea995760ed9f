"""Model calls, told on the timeline of the person a trace works for (seed 002 §18). Pure.

Like the calls agents make to each other (actors/gate/_timeline.py), an agent's model calls
are seen by the gate alone, so the gate tells them from the decision it has just made:
`llm_request_started` when it admits (or refuses) an `llm_request`, with the model and where
the calling agent says what it is shown came from (its `context_metadata`: a file's path, a
URL, an agent; the agent's word, bounded, never checked);
`llm_request_completed` when the gateway's answer comes, with its status, the tokens in and
out as the provider reported them, the latency, and every guardrail decision by rule id.
Never a message's contents: a person's timeline shows what happened, not what was said.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from schemas import TOLD_FROM_DECISION, AnyEnvelope, Decision, LlmRequest, LlmResponse, SessionEvent
from schemas import derive_id as _derive_id

__all__ = ("llm_event",)

_REASON_MAX: Final = 300
_SOURCES_MAX: Final = 16
"""Sources an event names at most, each field cut at `_FIELD_MAX` characters: an event the
person reads stays small whatever the calling agent reported."""
_FIELD_MAX: Final = 256


def llm_event(decision: Decision, envelope: AnyEnvelope, session_id: str) -> SessionEvent | None:
    """The timeline event for a decision about a model call or its answer, else None."""
    if not session_id:
        return None
    refused = not decision.allowed
    event_type: Literal["llm_request_started", "llm_request_completed"]
    payload: dict[str, Any]
    if isinstance(envelope, LlmRequest):
        event_type = "llm_request_started"
        payload = {
            "request_id": envelope.request_id,
            "caller": decision.sender,
            "model": envelope.model,
            "status": "refused" if refused else "requested",
            # As the caller reports them (nobody checks them), each field cut for the person.
            "sources": [
                {
                    "source_type": s.source_type[:_FIELD_MAX],
                    "path": s.path[:_FIELD_MAX],
                    "trust_level": s.trust_level[:_FIELD_MAX],
                }
                for s in envelope.context_metadata.source_provenance[:_SOURCES_MAX]
            ],
        }
    elif isinstance(envelope, LlmResponse):
        event_type = "llm_request_completed"
        payload = {
            "request_id": envelope.request_id,
            "model": envelope.model,
            "provider": envelope.provider,
            "status": "refused" if refused else envelope.status,
            "tokens_in": envelope.usage.prompt_tokens,
            "tokens_out": envelope.usage.completion_tokens,
            "latency_ms": envelope.latency_ms,
            "guardrails": [
                {"rule_id": g.rule_id, "stage": g.stage, "action": g.action, "count": g.count}
                for g in envelope.guardrails
            ],
        }
        if envelope.error is not None:
            payload["reason"] = f"{envelope.error.code}: {envelope.error.message}"[:_REASON_MAX]
    else:
        return None
    payload[TOLD_FROM_DECISION] = decision.id
    if refused:
        code = decision.code.value if decision.code else "REFUSED"
        payload["reason"] = f"{code}: {decision.message}"[:_REASON_MAX]
    return SessionEvent(
        id=_derive_id(decision.id, "timeline"),
        created_at=decision.decided_at or decision.created_at,
        session_id=session_id,
        event_type=event_type,
        speaker=decision.sender,
        payload=payload,
    )
