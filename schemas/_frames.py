"""Seed 000's local agent bridge frames: NDJSON over a local agent process's stdin/stdout.

These never cross the bus; they are the contract between an agent host and the agent program
it runs as a child. The tag field is the seed's `type`.

Parley adds one optional frame pair so a local agent can call other agents (seeds 003/004)
the way a hosted model calls tools: a request offers the agents it may call (`agents`), the
child may answer with `parley.agent_calls.request` instead of a response, and the host's next
request carries the results (`tool_results`). Both new request fields are absent (not empty)
when unused, so a profile that calls no agents sends seed 000's frame byte for byte, and a
child that never sends the new frame is unaffected. docs/envelopes.md shows an exchange.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

__all__ = (
    "AgentCallsRequest",
    "AgentToolCall",
    "AgentToolResult",
    "AgentToolRound",
    "AgentsOffered",
    "AnyFrame",
    "HistoryTurn",
    "LocalPromptConstraints",
    "LocalPromptMetrics",
    "LocalPromptRequest",
    "LocalPromptResponse",
)


class HistoryTurn(Struct, frozen=True, kw_only=True):
    role: Literal["local_agent", "remote_agent", "user"]
    text: str


class LocalPromptConstraints(Struct, frozen=True, kw_only=True):
    """Seed 000 defaults; the timeout is 60 s without tool use and up to 120 s with it."""

    max_output_chars: Annotated[int, Meta(ge=1)] = 12000
    allow_tool_use: bool = False
    max_history_turns: Annotated[int, Meta(ge=0)] = 6
    max_history_chars: Annotated[int, Meta(ge=0)] = 24000
    max_tool_rounds: Annotated[int, Meta(ge=0)] = 3
    local_turn_timeout_ms: Annotated[int, Meta(ge=1)] = 60000


class AgentsOffered(Struct, frozen=True, kw_only=True):
    """The agents a child may call while answering this request, by tool.

    `delegates_to` are the targets of seed 003's `delegate_to_agent`, `sub_agents` those of
    seed 004's `call_sub_agent`; a tool whose list is empty is not offered.
    """

    delegates_to: tuple[str, ...] = ()
    sub_agents: tuple[str, ...] = ()


class AgentToolCall(Struct, frozen=True, kw_only=True):
    """One call a child asks for: the tool's name and its seed 003/004 arguments.

    `id` is the child's own, unique within its frame; the result comes back under it. Only
    `id` is required to read the frame, so that a wrong name or wrong arguments reach the
    host's check, which refuses the request saying what was wrong, rather than being a line
    the channel cannot read.
    """

    id: str
    name: str = ""
    """`delegate_to_agent` or `call_sub_agent`."""
    arguments: Any = None
    """A JSON object of the tool's fields (seed 003's DelegationRequest for a delegation:
    `target_employee`, `objective`, ...; seed 004's SubAgentArgs for a sub-agent call)."""


class AgentToolResult(Struct, frozen=True, kw_only=True):
    """What came back for one call: seed 003's status (or `timeout`) and what to read."""

    id: str
    status: Literal["success", "partial", "failed", "timeout"]
    content: str


class AgentToolRound(Struct, frozen=True, kw_only=True):
    """One earlier round: what the child said and asked, and one result per call, in order."""

    text: str = ""
    calls: tuple[AgentToolCall, ...]
    results: tuple[AgentToolResult, ...]


class LocalPromptRequest(
    Struct, frozen=True, kw_only=True, tag_field="type", tag="desktop.local_prompt.request"
):
    request_id: str
    profile_id: str
    session_id: str
    turn_index: Annotated[int, Meta(ge=0)]
    mode: Literal["manual", "semi_auto", "full_auto"] = "manual"
    objective: str
    remote_message: str = ""
    history: tuple[HistoryTurn, ...] = ()
    history_summary: str | None = None
    constraints: LocalPromptConstraints = LocalPromptConstraints()
    agents: AgentsOffered | UnsetType = UNSET
    """Parley: who the child may call instead of answering; absent when no one."""
    tool_results: tuple[AgentToolRound, ...] | UnsetType = UNSET
    """Parley: the calls the child made for this answer so far and their results, oldest
    round first; absent before the first."""


class LocalPromptMetrics(Struct, frozen=True, kw_only=True):
    latency_ms: Annotated[int, Meta(ge=0)] = 0


class LocalPromptResponse(
    Struct, frozen=True, kw_only=True, tag_field="type", tag="desktop.local_prompt.response"
):
    request_id: str
    status: Literal["ok", "error"]
    draft_message: str = ""
    reason: str = ""
    metrics: LocalPromptMetrics = LocalPromptMetrics()


class AgentCallsRequest(
    Struct, frozen=True, kw_only=True, tag_field="type", tag="parley.agent_calls.request"
):
    """Parley: a child's terminal frame for a request that offered agents: call these first.

    It answers the request in flight as a response would. The host sends every call (several
    are a parallel fan-out), waits for their answers, and asks again with a new request whose
    `tool_results` hold them.
    """

    request_id: str
    text: str = ""
    """What the child says beside its calls, if anything; it comes back in `tool_results`."""
    calls: Annotated[tuple[AgentToolCall, ...], Meta(min_length=1)]


AnyFrame = LocalPromptRequest | LocalPromptResponse | AgentCallsRequest
