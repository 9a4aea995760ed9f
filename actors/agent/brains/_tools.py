"""The two tools a hosted brain is offered to call other agents, whatever the provider.

OpenAI and Anthropic both let a model call tools, each in its own wire format; what the tools
are is the same for both, so it is written once here: seed 003's `delegate_to_agent` and seed
004's `call_sub_agent` as JSON Schemas (`offered_tools`), the check that turns a model's tool
call into a request the host can send (`parse_tool_calls`), and the text each side of a round
is re-sent as (`tool_arguments`, `result_text`). A provider's module only moves these in and
out of its own messages.

A model's tool call is a claim, checked like any other input: an unknown tool, arguments that
are not a JSON object, a missing or mistyped field, or a target the call does not offer makes
the call malformed, and a malformed call is never sent. The target list is this agent's
(`BrainCall.delegates_to` / `sub_agents`); whether the gate lets the call through is not the
brain's business: a refused call comes back as a failed result in the next round.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from actors.agent._prompt import BrainCall
from actors.agent.brains._capability_tools import (
    capability_named,
    capability_specs,
    provider_name,
)
from actors.agent.brains._toolspec import ToolSpec
from actors.delegation import (
    DELEGATE_TOOL,
    SUB_AGENT_TOOL,
    AgentRequest,
    CallSubAgent,
    Delegate,
    RequestResult,
    ToolRound,
    UseTool,
)
from schemas import ContextFilter, SubAgentArgs

__all__ = (
    "MalformedToolCall",
    "ParsedToolCalls",
    "ToolCall",
    "ToolSpec",
    "offered_tools",
    "parse_tool_call",
    "parse_tool_calls",
    "result_text",
    "tool_arguments",
    "tool_conversation",
)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call as a provider returned it.

    `arguments` is what the provider carries them as: a JSON text (OpenAI) or an already
    decoded object (Anthropic); both are checked the same way.
    """

    id: str
    name: str
    arguments: Any


class MalformedToolCall(ValueError):
    """A tool call that cannot be sent; `reason` is what the model is told was wrong."""

    def __init__(self, tool_call_id: str, reason: str) -> None:
        super().__init__(f"tool call {tool_call_id!r}: {reason}")
        self.tool_call_id = tool_call_id
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ParsedToolCalls:
    """One reply's tool calls, checked: the requests when all are sound, else the problems.

    A reply is sent whole or not at all: its calls are one fan-out the model planned
    together, so when any is malformed none goes out, and every call of the reply is
    answered (a provider wants an answer to each) with what the model should do about it.
    """

    requests: tuple[AgentRequest, ...]
    problems: dict[str, str] = field(default_factory=dict)
    """What was wrong, by tool call id; empty when every call is sound."""
    answers: dict[str, str] = field(default_factory=dict)
    """The text each tool call is answered with when the reply is refused, by tool call id."""

    @property
    def malformed(self) -> bool:
        return bool(self.problems)

    def summary(self) -> str:
        """The problems in one line, for the error raised when a repair did not help."""
        return "; ".join(f"{call_id}: {reason}" for call_id, reason in self.problems.items())


_NOT_SENT_WITH_OTHERS = (
    "Not sent: another tool call in the same reply was malformed, so none of them was sent. "
    "Call the tools again, every call you need, with corrected arguments."
)


def _default(struct: type[msgspec.Struct], name: str) -> Any:
    """A field's default, so the schema the model sees cannot drift from the request types."""
    (found,) = (f for f in msgspec.structs.fields(struct) if f.name == name)
    return found.default


def _strings(description: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}, "description": description}


def _text(description: str) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "description": description}


def _named(names: tuple[str, ...], description: str) -> dict[str, Any]:
    return {"type": "string", "enum": list(names), "description": description}


def _number(minimum: int, description: str, default: int | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer", "minimum": minimum, "description": description}
    return schema if default is None else schema | {"default": default}


def _flag(description: str, default: bool | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "boolean", "description": description}
    return schema if default is None else schema | {"default": default}


def _delegate_spec(targets: tuple[str, ...]) -> ToolSpec:
    """Seed 003's `delegate_to_agent`: who, what for, and the request's limits."""
    return ToolSpec(
        name=DELEGATE_TOOL,
        description=(
            "Delegate a task to another agent and continue with its answer. Several calls in "
            "one reply run in parallel; every result comes back before you answer."
        ),
        parameters={
            "type": "object",
            "properties": {
                "target_employee": _named(targets, "The agent to delegate to."),
                "objective": _text('The short goal, e.g. "Extract receipt data".'),
                "input": {"type": "string", "description": "The full message for the agent."},
                "context_hints": _strings("Keywords that help the agent, e.g. 'receipt'."),
                "max_tokens": _number(
                    1, "The agent's token budget.", _default(Delegate, "max_tokens")
                ),
                "deadline_ms": _number(
                    1,
                    "How long to wait for the answer, in milliseconds.",
                    _default(Delegate, "deadline_ms"),
                ),
            },
            "required": ["target_employee", "objective"],
            "additionalProperties": False,
        },
    )


def _context_schema() -> dict[str, Any]:
    """Seed 004's `ContextFilter`: which part of this conversation the sub-agent sees."""
    return {
        "type": "object",
        "description": "Which part of this conversation the sub-agent may see (none if omitted).",
        "properties": {
            "last_messages": _number(0, "Only the last N messages."),
            "roles": _strings("Only messages of these roles (user, assistant, tool, system)."),
            "keywords": _strings("Only messages containing one of these keywords."),
            "include_summary": _flag("Include the conversation's summary."),
            "include_workspace": _flag("Include the workspace's structure."),
            "workspace_files": _strings("Workspace files to include, relative paths."),
            "max_age_seconds": _number(0, "Only messages at most this old."),
        },
        "additionalProperties": False,
    }


def _sub_agent_spec(agents: tuple[str, ...]) -> ToolSpec:
    """Seed 004's `call_sub_agent`: who, the task, its context and its narrowed powers."""
    return ToolSpec(
        name=SUB_AGENT_TOOL,
        description=(
            "Call a sub-agent with a task and only the part of this conversation you choose "
            "as its context. Several calls in one reply run in parallel."
        ),
        parameters={
            "type": "object",
            "properties": {
                "agent_name": _named(agents, "The sub-agent to call."),
                "task": _text("A clear description of what the sub-agent should do."),
                "context": _context_schema(),
                "input": {"description": "Optional input data for the task (any JSON)."},
                "max_context_tokens": _number(
                    1,
                    "The most tokens of context the sub-agent is given.",
                    _default(SubAgentArgs, "max_context_tokens"),
                ),
                "allowed_tools": _strings("Narrow the sub-agent's tools to these."),
                "allow_nested_calls": _flag(
                    "Whether the sub-agent may call agents in turn.",
                    _default(SubAgentArgs, "allow_nested_calls"),
                ),
            },
            "required": ["agent_name", "task"],
            "additionalProperties": False,
        },
    )


def offered_tools(call: BrainCall) -> tuple[ToolSpec, ...]:
    """The tools this call offers: each only when its list of agents is non-empty, then one
    per capability the tool runtime runs for this agent (brains/_capability_tools.py)."""
    tools = []
    if call.delegates_to:
        tools.append(_delegate_spec(call.delegates_to))
    if call.sub_agents:
        tools.append(_sub_agent_spec(call.sub_agents))
    tools.extend(capability_specs(call.tools))
    return tuple(tools)


class _DelegateArguments(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """`delegate_to_agent`'s arguments as the model may give them, checked by msgspec."""

    target_employee: str
    objective: Annotated[str, Meta(min_length=1)]
    input: str = ""
    context_hints: tuple[str, ...] = ()
    max_tokens: Annotated[int, Meta(ge=1)] = _default(Delegate, "max_tokens")
    deadline_ms: Annotated[int, Meta(ge=1)] = _default(Delegate, "deadline_ms")


_SUB_AGENT_FIELDS = frozenset(f.name for f in msgspec.structs.fields(SubAgentArgs))
_CONTEXT_FIELDS = frozenset(f.name for f in msgspec.structs.fields(ContextFilter))
_JSON_KINDS = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "missing",
}


def _arguments_object(tool_call: ToolCall) -> dict[str, Any]:
    """The arguments as a JSON object, a `null` field read as an absent one."""
    arguments = tool_call.arguments
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError as exc:
            raise MalformedToolCall(tool_call.id, f"the arguments are not JSON ({exc})") from None
    if not isinstance(arguments, dict):
        kind = _JSON_KINDS.get(type(arguments), type(arguments).__name__)
        raise MalformedToolCall(tool_call.id, f"the arguments are {kind}, not a JSON object")
    return {key: value for key, value in arguments.items() if value is not None}


def _unknown(given: dict[str, Any], known: frozenset[str], where: str) -> list[str]:
    return [f"{where}{key}" for key in sorted(set(given) - known)]


def parse_tool_call(tool_call: ToolCall, call: BrainCall) -> AgentRequest:
    """The request a tool call asks for; its `request_id` is the provider's tool call id.

    Raises:
        MalformedToolCall: an unknown or unoffered tool, arguments that are not a JSON object
            of the tool's fields, or a target that is not one of the call's offered agents.
    """
    arguments = _arguments_object(tool_call)
    capability = capability_named(tool_call.name, call.tools)
    if capability is not None:
        return UseTool(request_id=tool_call.id, capability=capability, arguments=arguments)
    try:
        if tool_call.name == DELEGATE_TOOL and call.delegates_to:
            given = msgspec.convert(arguments, _DelegateArguments)
            _check_target(tool_call, "target_employee", given.target_employee, call.delegates_to)
            return Delegate(request_id=tool_call.id, **msgspec.structs.asdict(given))
        if tool_call.name == SUB_AGENT_TOOL and call.sub_agents:
            context = arguments.get("context")
            unknown = _unknown(arguments, _SUB_AGENT_FIELDS, "")
            if isinstance(context, dict):
                unknown += _unknown(context, _CONTEXT_FIELDS, "context.")
            if unknown:
                raise MalformedToolCall(tool_call.id, f"unknown fields {', '.join(unknown)}")
            args = msgspec.convert(arguments, SubAgentArgs)
            if not args.task.strip():
                raise MalformedToolCall(tool_call.id, "the task is empty")
            _check_target(tool_call, "agent_name", args.agent_name, call.sub_agents)
            return CallSubAgent(request_id=tool_call.id, args=args)
    except msgspec.ValidationError as exc:
        raise MalformedToolCall(tool_call.id, f"invalid arguments: {exc}") from None
    offered = [spec.name for spec in offered_tools(call)]
    raise MalformedToolCall(
        tool_call.id, f"unknown tool {tool_call.name!r}; the tools offered are {offered}"
    )


def _check_target(tool_call: ToolCall, field_name: str, name: str, offered: Sequence[str]) -> None:
    if name not in offered:
        raise MalformedToolCall(
            tool_call.id, f"{field_name} {name!r} is not one of the agents offered: {list(offered)}"
        )


def parse_tool_calls(tool_calls: Sequence[ToolCall], call: BrainCall) -> ParsedToolCalls:
    """Check every tool call of one reply; the requests, in the reply's order, or why not."""
    requests: list[AgentRequest] = []
    problems: dict[str, str] = {}
    seen: set[str] = set()
    for tool_call in tool_calls:
        if tool_call.id in seen:
            problems[tool_call.id] = "the same tool call id twice in one reply"
            continue
        seen.add(tool_call.id)
        try:
            requests.append(parse_tool_call(tool_call, call))
        except MalformedToolCall as exc:
            problems[tool_call.id] = exc.reason
    if not problems:
        return ParsedToolCalls(requests=tuple(requests))
    answers = {
        tool_call.id: (
            f"Not sent: {problems[tool_call.id]}. Correct the call and make it again."
            if tool_call.id in problems
            else _NOT_SENT_WITH_OTHERS
        )
        for tool_call in tool_calls
    }
    return ParsedToolCalls(requests=(), problems=problems, answers=answers)


def tool_conversation(call: BrainCall) -> tuple[BrainCall, tuple[ToolRound, ...]]:
    """The call to write the prompt from, and the earlier rounds to re-send as tool calls.

    While tools are offered, earlier rounds go back to the model as its own tool calls and
    their results, in the provider's format, and not a second time as prompt text. Past the
    host's limit of rounds no tool is offered, and a provider refuses tool calls in a
    conversation that defines no tools, so then the rounds stay in the prompt's text
    (`user_prompt` writes them there) and nothing is re-sent as tool calls.
    """
    if not offered_tools(call):
        return call, ()
    return dataclasses.replace(call, rounds=()), call.rounds


def tool_arguments(request: AgentRequest) -> tuple[str, dict[str, Any]]:
    """The tool name and arguments a request was made with, to re-send an earlier round.

    Only the tool's own fields: what the host adds (a chain's intermediate results, facts)
    never came from the model, so it is not put in the model's mouth.
    """
    if isinstance(request, UseTool):
        return provider_name(request.capability), dict(request.arguments)
    if isinstance(request, Delegate):
        return DELEGATE_TOOL, {
            "target_employee": request.target_employee,
            "objective": request.objective,
            "input": request.input,
            "context_hints": list(request.context_hints),
            "max_tokens": request.max_tokens,
            "deadline_ms": request.deadline_ms,
        }
    arguments: dict[str, Any] = msgspec.to_builtins(request.args)
    if isinstance(arguments.get("context"), dict):
        arguments["context"] = {k: v for k, v in arguments["context"].items() if v is not None}
    return SUB_AGENT_TOOL, {k: v for k, v in arguments.items() if v is not None}


def result_text(result: RequestResult) -> str:
    """What the model is shown for one request: its status, then the result or the error."""
    return f"status: {result.status}\n{result.content}"
