"""Agents that call agents: delegation (seed 003) and sub-agent calls (seed 004).

A brain answering a call may ask other agents first (`AgentRequest`); its host keeps a
durable `Wait` for their answers (`WaitStore`) and asks the brain again with the results.
"""

from actors.delegation._context import SUMMARY_HEADING, WorkspacePathError, build_filtered_context
from actors.delegation._messages import (
    answered_request,
    request_envelope,
    request_id,
    result_of,
    target_of,
)
from actors.delegation._requests import (
    DELEGATE_TOOL,
    SUB_AGENT_TOOL,
    USE_TOOL_DEADLINE_MS,
    AgentRequest,
    CallSubAgent,
    Delegate,
    RequestResult,
    ToolRound,
    UseTool,
)
from actors.delegation._store import WaitConflict, WaitStore, open_wait_store
from actors.delegation._wait import (
    Wait,
    aggregate_status,
    answered,
    expire,
    finish_round,
    next_deadline,
    record_result,
    restart_deadlines,
    start_round,
)

__all__ = (
    "DELEGATE_TOOL",
    "SUB_AGENT_TOOL",
    "SUMMARY_HEADING",
    "USE_TOOL_DEADLINE_MS",
    "AgentRequest",
    "CallSubAgent",
    "Delegate",
    "RequestResult",
    "ToolRound",
    "UseTool",
    "Wait",
    "WaitConflict",
    "WaitStore",
    "WorkspacePathError",
    "aggregate_status",
    "answered",
    "answered_request",
    "build_filtered_context",
    "expire",
    "finish_round",
    "next_deadline",
    "open_wait_store",
    "record_result",
    "request_envelope",
    "request_id",
    "restart_deadlines",
    "result_of",
    "start_round",
    "target_of",
)
