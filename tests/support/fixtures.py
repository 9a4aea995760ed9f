"""One valid example of every envelope kind, for round trips and the version fixtures."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from schemas import (
    AgentCall,
    AgentResponse,
    ApprovalRequest,
    Artifact,
    AuditRecord,
    ContextFilter,
    ContextMessage,
    Control,
    DelegationRequest,
    DelegationResponse,
    Error,
    ErrorCode,
    FilteredContext,
    Handoff,
    HandoffData,
    HumanMessage,
    Reference,
    Reply,
    SessionEvent,
    SourceRef,
    SubAgentArgs,
    SubAgentCall,
    SubAgentResult,
    TokenUsage,
    ToolError,
    ToolRequest,
    ToolResult,
    TranscriptItem,
)

T0 = datetime(2026, 2, 21, 15, 9, tzinfo=UTC)


def example_envelopes() -> list[Any]:
    base = {"created_at": T0}
    return [
        HumanMessage(id="0190f1c2-0000-7000-8000-000000000001", text="@gpt hello", call_id="call-1",
                     mode="collaborate", participants=("gpt", "claude"), first_speaker="claude", **base),
        AgentCall(id="e2", target="claude", call_id="call-2", session_id="s1", round=2, max_rounds=6,
                  goal="Write a fairy tale", transcript=(TranscriptItem(role="gpt", name="gpt", text="Once"),),
                  **base),
        AgentResponse(id="e3", sender="claude", text="Draft", call_id="call-2", session_id="s1",
                      reply=Reply(message="Draft", handoff=Handoff(to="gpt", task="Edit it")),
                      token_usage=TokenUsage(prompt=10, completion=5, total=15), **base),
        DelegationRequest(id="e4", request_id="r1", origin_employee="prime-boss",
                          target_employee="byte-doc", user_id="u1", parent_session_id="ps1",
                          objective="Extract receipt data", input="receipt.jpg",
                          context_hints=("receipt", "ocr"),
                          handoff_data=HandoffData(facts=("f",), references=(Reference(owner_scope="u", source_id="d"),)),
                          **base),
        DelegationResponse(id="e5", request_id="r1", target_employee="byte-doc", summary="Done",
                           result="Total 12.50", status="success",
                           artifacts=(Artifact(type="json", value={"total": 12.5}),),
                           used_sources=(SourceRef(owner_scope="u", source_id="d", relevance=0.9),),
                           confidence=90, **base),
        SubAgentCall(id="e6", call_id="call-6", caller="planner", session_id="s2",
                     args=SubAgentArgs(agent_name="coder", task="Write tests",
                                       context=ContextFilter(last_messages=5, roles=("user",))),
                     context=FilteredContext(messages=(ContextMessage(role="user", content="hi"),),
                                             total_tokens=1),
                     **base),
        SubAgentResult(id="e7", call_id="call-6", agent_name="coder", success=True, output="ok",
                       tool_calls=("File.Write",), tokens_used=42, duration_seconds=3, **base),
        Control(id="e8", action="stop", session_id="s1", **base),
        SessionEvent(id="e9", session_id="s1", event_type="session_completed", round=3,
                     stop_reason="final", payload={"speaker": "gpt"}, **base),
        Error(id="e10", code=ErrorCode.DEPTH_LIMIT_EXCEEDED,
              message="Delegation depth limit reached (2/2)", details={"limit": 2, "value": 2},
              cause_id="e4", **base),
        ToolRequest(id="e11", tool_name="git", arguments={"args": ["status"]}, session_id="s1",
                    task_id="t1", step_id="st1", capability="Shell.Exec", **base),
        ToolResult(id="e12", tool_name="git", session_id="s1", task_id="t1", step_id="st1",
                   status="failed", error=ToolError(code="TOOL_EXECUTION_FAILED", message="exit 1"),
                   **base),
        ApprovalRequest(id="e13", approval_id="a1", session_id="s1", task_id="t1",
                        title="Local command execution", action_summary="git push",
                        risk_level="high", **base),
        AuditRecord(id="e14", tenant="tenant_abc", profile="gpt", fact="decision",
                    decision_code="CYCLE_DETECTED", policy_version=3, source_stream="PARLEY_EVENTS",
                    source_seq=7, prev_hash="00", hash="11", **base),
    ]
