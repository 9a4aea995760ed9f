"""The tools `parley mcp` offers a person's assistant: `say`, `collab`, `delegate`,
`session_status` and `stop_session`, each acting as the person (tools/_mcp_person.py).

Every argument is checked here, against the envelope's own schema, before anything is sent,
and every failure is an MCP tool error of one line (`isError`), never a traceback: a refusal
by the gate or the router in their own words, a wait that cannot start, an argument out of
bounds. A session that ran and failed is not an error of the call: its result says how it
ended. The SDK's own argument errors (a number given as text) are pydantic's several lines;
`one_line_errors` joins them into one, without the SDK's "Error executing tool NAME: ".
"""

from __future__ import annotations

import logging
import re
from typing import Annotated, Any, Final

import msgspec
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from actors.console import SessionRecord
from schemas import (
    DelegationConstraints,
    HumanMessage,
    SubjectTokenError,
    check_token,
    encode,
    new_id,
    utc_now,
)
from tools._mcp_person import ENDED, McpPerson, PersonError

__all__ = ("WAIT_LIMIT_S", "build_server", "one_line_errors")

log = logging.getLogger("parley.mcp")

WAIT_LIMIT_S: Final = 600.0
"""The longest a call waits; a session runs on past it, and `session_status` follows it."""
_WAIT_S: Final = 50.0
"""A waiting call's default: below the minute many assistants give a tool call."""
_DEFAULTS: Final = DelegationConstraints()
_SHOWN_EVENTS: Final = 20
_SDK_PREFIX: Final = re.compile(r"^Error executing tool [\w.-]+: ")

Wait = Annotated[
    float,
    Field(description="seconds to wait for the end (0: return at once); the session runs on"),
]
Agent = Annotated[str, Field(description="an agent's name, as `parley say @gpt` names it")]
SessionId = Annotated[str, Field(description="the session id a say, collab or delegate returned")]


def _agent(name: str) -> str:
    try:
        return check_token(name.strip().removeprefix("@"), "agent name")
    except SubjectTokenError as exc:
        raise PersonError(f"invalid agent name: {exc}") from None


def _wait(wait_s: float) -> float:
    if not 0 <= wait_s <= WAIT_LIMIT_S:
        raise PersonError(f"wait_s must be within 0..{WAIT_LIMIT_S:g}, got {wait_s:g}")
    return wait_s


def _checked(message: HumanMessage) -> HumanMessage:
    """`message`, or why its schema refuses it (what the gate would dead-letter)."""
    try:
        msgspec.json.decode(encode(message), type=HumanMessage)
    except msgspec.ValidationError as exc:
        raise PersonError(f"invalid arguments: {exc}") from None
    return message


def report(record: SessionRecord, waited_s: float | None = None) -> dict[str, Any]:
    """What the assistant is told of a session: how it stands, its turns (the last one is
    the answer), and, while it runs, that it runs on and how to follow it."""
    turns = [
        {
            "speaker": event["payload"].get("speaker"),
            "round": event["payload"].get("round"),
            "message": event["payload"].get("message", ""),
        }
        for event in record.events
        if event["eventType"] == "step_completed"
    ]
    shown: dict[str, Any] = {
        "session_id": record.session_id,
        "state": record.state,
        "mode": record.mode,
        "participants": list(record.participants),
        "round": record.round,
        "stop_reason": record.stop_reason,
        "answer": turns[-1]["message"] if turns else None,
        "turns": turns,
    }
    ended = [e for e in record.events if e["eventType"].startswith("session_") and e["payload"]]
    if ended and ended[-1]["payload"].get("code"):
        payload = ended[-1]["payload"]
        shown["ended_by"] = f"{payload.get('code')}: {payload.get('message', '')}"
    if record.delegations:
        shown["delegations"] = list(record.delegations.values())
    if record.error is not None:
        shown["error"] = f"{record.error['code']}: {record.error['message']}"
    if record.state not in ENDED:
        waited = f"after {waited_s:g} s " if waited_s is not None else ""
        shown["note"] = (
            f"still {record.state} {waited}and runs on: call session_status with session_id "
            f"{record.session_id} to follow it, or stop_session to stop it"
        )
    return shown


async def _waited(person: McpPerson, record: SessionRecord, wait_s: float) -> dict[str, Any]:
    """Wait up to `wait_s` for the session to end; a refusal is the call's error."""
    await person.until(lambda: record.state in ENDED, wait_s)
    if record.state == "refused" and record.error is not None:
        raise PersonError(
            f"refused by the gate: {record.error['code']}: {record.error['message']} "
            f"(session {record.session_id})"
        )
    return report(record, wait_s)


def _tool_error(exc: Exception) -> ToolError:
    """One line for the assistant; anything unforeseen is logged, as one line too."""
    if isinstance(exc, PersonError):
        return ToolError(str(exc))
    log.warning("tool call failed: %s: %s", exc.__class__.__name__, exc)
    first = (str(exc).strip().splitlines() or [""])[0]
    return ToolError(f"{exc.__class__.__name__}: {first}".rstrip(": "))


def build_server(person: McpPerson) -> MCPServer:
    """The MCP server of `person`'s tools."""
    server: MCPServer = MCPServer(
        "parley",
        instructions=(
            f"Parley's agents, reached as {person.principal} through the gate (its policy, "
            "rate limits and audit apply). Waiting tools return the session id; a session "
            "still running when the wait ends runs on: follow it with session_status."
        ),
        log_level="WARNING",
        middleware=[one_line_errors],
    )

    @server.tool(description="One call to one agent (`parley say`): its answer.")
    async def say(agent: Agent, text: str, wait_s: Wait = _WAIT_S) -> dict[str, Any]:
        try:
            target = _agent(agent)
            message = HumanMessage(
                id=new_id(),
                created_at=utc_now(),
                text=text,
                call_id=new_id(),
                mode="single",
                participants=(target,),
                first_speaker=target,
                max_rounds=1,
                session_id=new_id(),
            )
            record = await person.open_session(_checked(message))
            return await _waited(person, record, _wait(wait_s))
        except Exception as exc:
            raise _tool_error(exc) from None

    @server.tool(description="A collaboration of several agents on a goal (`parley collab`).")
    async def collab(
        goal: str,
        agents: Annotated[list[str], Field(description="the participants, in speaking order")],
        max_rounds: Annotated[int, Field(description="the round cap")] = 6,
        first: Annotated[str | None, Field(description="who speaks first")] = None,
        wait_s: Wait = _WAIT_S,
    ) -> dict[str, Any]:
        try:
            names = tuple(_agent(name) for name in agents)
            if not names:
                raise PersonError("invalid arguments: agents names no agent")
            message = HumanMessage(
                id=new_id(),
                created_at=utc_now(),
                text=goal,
                call_id=new_id(),
                mode="collaborate",
                participants=names,
                first_speaker=_agent(first) if first else names[0],
                max_rounds=max_rounds,
                session_id=new_id(),
            )
            record = await person.open_session(_checked(message))
            return await _waited(person, record, _wait(wait_s))
        except Exception as exc:
            raise _tool_error(exc) from None

    @server.tool(description="Hand a task to agents, each at once (`parley delegate`).")
    async def delegate(
        agents: Annotated[list[str], Field(description="the agents, each asked at once")],
        objective: str,
        input: Annotated[str, Field(description="the full message for the agents")] = "",
        deadline_ms: int = _DEFAULTS.deadline_ms,
        max_tokens: int = _DEFAULTS.max_tokens,
        wait_s: Wait = _WAIT_S,
    ) -> dict[str, Any]:
        try:
            names = tuple(dict.fromkeys(_agent(name) for name in agents))
            if not names or not objective.strip():
                raise PersonError("invalid arguments: name at least one agent and an objective")
            if deadline_ms < 1 or max_tokens < 1:
                raise PersonError("invalid arguments: deadline_ms and max_tokens must be >= 1")
            wait = _wait(wait_s)
            record = await person.delegate(names, objective, input, max_tokens, deadline_ms)
            return await _waited(person, record, wait)
        except Exception as exc:
            raise _tool_error(exc) from None

    @server.tool(description="How one of your sessions stands: state, turns, latest events.")
    async def session_status(session_id: SessionId) -> dict[str, Any]:
        try:
            record = person.sessions.get(_session(session_id))
            if record is None:
                raise PersonError(
                    f"no session {session_id} seen here: this server follows "
                    f"{person.principal}'s own sessions, live, since it started"
                )
            shown = report(record)
            shown["events"] = [
                {"type": event["eventType"], "at": event["timestamp"]}
                for event in record.events[-_SHOWN_EVENTS:]
            ]
            return shown
        except Exception as exc:
            raise _tool_error(exc) from None

    @server.tool(description="Stop one of your sessions (the router checks it is yours).")
    async def stop_session(session_id: SessionId, wait_s: Wait = 10.0) -> str:
        try:
            return await person.stop(_session(session_id), _wait(wait_s))
        except Exception as exc:
            raise _tool_error(exc) from None

    return server


def _session(session_id: str) -> str:
    try:
        return check_token(session_id, "session id")
    except SubjectTokenError as exc:
        raise PersonError(f"invalid session id: {exc}") from None


async def one_line_errors(
    ctx: ServerRequestContext[Any, Any], call_next: CallNext
) -> HandlerResult:
    """A tool error's text in one line: the SDK's argument errors are pydantic's several."""
    result = await call_next(ctx)
    if ctx.method != "tools/call" or not isinstance(result, dict) or not result.get("isError"):
        return result
    content = [
        {**item, "text": _joined(item["text"])} if item.get("type") == "text" else item
        for item in result.get("content", [])
    ]
    return {**result, "content": content}


def _joined(text: str) -> str:
    """One line, without the SDK's `Error executing tool NAME: ` (the caller knows which)."""
    lines = [line.strip() for line in _SDK_PREFIX.sub("", text).splitlines()]
    return "; ".join(line for line in lines if line and not line.startswith("For further"))
