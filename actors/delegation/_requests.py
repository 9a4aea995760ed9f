"""What a brain may ask for in the middle of an answer: calls to other agents and tools, and
their results.

A brain answers a call either with its final text or with requests: delegations (seed 003's
`delegate_to_agent`), sub-agent calls (seed 004's `call_sub_agent`) and tool runs (seed 002's
tool requests). Several requests in
one answer are a parallel fan-out. The host sends them through the gate, waits for every
answer (or its deadline) durably, and asks the brain again with the rounds so far: each
round holds the requests the brain made and one result per request, in the same order. A
brain continues from those rounds exactly as a model continues after its tool calls.

These are msgspec Structs because the rounds are stored with the host's wait (a host killed
while waiting resumes from them) and each provider's wire format re-sends them.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from msgspec import Meta, Struct

from schemas import APPROVAL_TIMEOUT_S, SubAgentArgs

__all__ = (
    "DELEGATE_TOOL",
    "SUB_AGENT_TOOL",
    "USE_TOOL_DEADLINE_MS",
    "AgentRequest",
    "CallSubAgent",
    "Delegate",
    "RequestResult",
    "ToolRound",
    "UseTool",
)

DELEGATE_TOOL = "delegate_to_agent"
"""Seed 003's tool name."""
SUB_AGENT_TOOL = "call_sub_agent"
"""Seed 004's tool name."""


class Delegate(Struct, frozen=True, kw_only=True, tag="delegate_to_agent"):
    """Seed 003's `delegate_to_agent` arguments, with the id the brain gave this request.

    `intermediate_results` carries a chain's previous result to the next agent (seed 003's
    sequential mode: `handoff_data.intermediate_results`).
    """

    request_id: str
    target_employee: str
    objective: str
    input: str = ""
    context_hints: tuple[str, ...] = ()
    facts: tuple[str, ...] = ()
    intermediate_results: Any = None
    max_tokens: Annotated[int, Meta(ge=1)] = 1200
    deadline_ms: Annotated[int, Meta(ge=1)] = 15000


class CallSubAgent(Struct, frozen=True, kw_only=True, tag="call_sub_agent"):
    """Seed 004's `call_sub_agent` arguments, with the id the brain gave this request.

    `deadline_ms` is seed 004's 300 s default for a sub-agent to finish.
    """

    request_id: str
    args: SubAgentArgs
    deadline_ms: Annotated[int, Meta(ge=1)] = 300_000


USE_TOOL_DEADLINE_MS: Final = (APPROVAL_TIMEOUT_S + 60) * 1000
"""How long an agent host waits for a tool request's result unless its brain says otherwise."""


class UseTool(Struct, frozen=True, kw_only=True, tag="use_tool"):
    """A tool the brain asks to run (seed 002 §13.2), by its capability's name (`File.Read`,
    `Mcp.<server>.<tool>`), with the id the brain gave this request. It goes to the tool
    runtime as a `tool_request`; the gate checks the capability and its scope first.

    `deadline_ms`, how long the host waits for its result, is by default an approval rule's
    default wait and a minute to run: a request held for its person's approval under the
    defaults could be approved and then never run, the host having given up at 120 s (a
    newcomer's walk)."""

    request_id: str
    capability: Annotated[str, Meta(min_length=1, max_length=200)]
    arguments: dict[str, Any] = {}
    deadline_ms: Annotated[int, Meta(ge=1)] = USE_TOOL_DEADLINE_MS


AgentRequest = Delegate | CallSubAgent | UseTool


class RequestResult(Struct, frozen=True, kw_only=True):
    """What came back for one request: the answer's fields as JSON-able data, or why none.

    `status` is seed 003's success/partial/failed, and `timeout` when the deadline passed
    first; `content` is what the brain is shown (the callee's result, or the error text).
    """

    request_id: str
    status: Literal["success", "partial", "failed", "timeout"]
    content: str
    data: dict[str, Any] = {}
    tokens: int = 0
    duration_ms: int = 0

    @property
    def ok(self) -> bool:
        return self.status in ("success", "partial")

    @property
    def session_ended(self) -> bool:
        """The request was refused because its session had ended (`SESSION_EXPIRED` from the
        tool runtime, the LLM gateway or an agent): nothing more will be done in it, so the
        brain is not asked to go on (actors/agent/_host.py)."""
        if self.status != "failed":
            return False
        error = self.data.get("error")
        code = error.get("code") if isinstance(error, dict) else self.data.get("code")
        return code == "SESSION_EXPIRED"

    @property
    def readable(self) -> str:
        """The answer in words, for a report a person reads: a delegation response's result
        (else its summary), its new facts and its error. `content` is that response as the
        JSON a model is shown, which printed inside another answer reads as JSON in JSON."""
        if self.data.get("kind") != "delegation_response":
            return self.content  # a sub-agent's output or an error: words already
        lines = [str(self.data.get("result") or self.data.get("summary") or "")]
        if facts := self.data.get("new_facts"):
            lines.append("  new facts: " + "; ".join(str(fact) for fact in facts))
        if error := self.data.get("error"):
            lines.append(f"  error: {error}")
        return "\n".join(line for line in lines if line)


class ToolRound(Struct, frozen=True, kw_only=True):
    """One earlier round of an answer: what the brain said and asked, and what came back."""

    text: str = ""
    requests: tuple[AgentRequest, ...]
    results: tuple[RequestResult, ...]
