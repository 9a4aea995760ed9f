"""A local HTTP server on 127.0.0.1 that answers in OpenAI's and Anthropic's real wire formats.

The only test double of the agent host's tests, for services the tests cannot reach. It is a
plain asyncio HTTP/1.1 server: each request is recorded (path, headers, JSON body) and answered
with the next canned answer a test queued: a provider's success body, a provider's error body
with its status, a body that is not JSON, or no answer at all (so the client's timeout fires).
The bodies follow the providers' documented response shapes field for field, tool calls
included (`openai_tool_calls`, `anthropic_tool_use`).

A server made with `checks="openai"` or `checks="anthropic"` also refuses, as the provider
does (HTTP 400, `invalid_request_error`), a request whose tool-calling conversation breaks the
provider's rules (`openai_problem`, `anthropic_problem`, after the providers' documented
rules and error texts), so a brain cannot pass by sending what only a
lenient double would accept.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import deque
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Literal

__all__ = (
    "Canned",
    "Recorded",
    "WireServer",
    "anthropic_error",
    "anthropic_message",
    "anthropic_problem",
    "anthropic_tool_use",
    "openai_completion",
    "openai_error",
    "openai_problem",
    "openai_tool_calls",
)


@dataclass(frozen=True)
class Canned:
    """One answer: status and raw body, or `hang` to never answer.

    A streamed answer (tests/support/llm_stream.py) has `events` instead of a body: each is
    written as one HTTP chunk, the first after `first_delay_s`, the next ones `gap_s` apart;
    with `stall_after`, the server stops after that many events and never ends the answer.
    """

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    hang: bool = False
    events: tuple[bytes, ...] = ()
    first_delay_s: float = 0.0
    gap_s: float = 0.0
    stall_after: int | None = None


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


def _json(status: int, value: Any) -> Canned:
    return Canned(status=status, body=json.dumps(value).encode())


def openai_completion(
    content: str | None, prompt_tokens: int = 11, completion_tokens: int = 7
) -> Canned:
    """A chat.completion object as OpenAI returns it."""
    return _json(
        200,
        {
            "id": "chatcmpl-AbC123",
            "object": "chat.completion",
            "created": 1_730_000_000,
            "model": "gpt-4o-2024-08-06",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
            "system_fingerprint": "fp_test",
        },
    )


def openai_tool_calls(
    *calls: tuple[str, str, str],
    content: str | None = None,
    prompt_tokens: int = 17,
    completion_tokens: int = 12,
) -> Canned:
    """A chat.completion whose message calls tools: each call is (id, name, arguments JSON)."""
    return _json(
        200,
        {
            "id": "chatcmpl-Tools1",
            "object": "chat.completion",
            "created": 1_730_000_000,
            "model": "gpt-4o-2024-08-06",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": content,
                        "refusal": None,
                        "tool_calls": [
                            {
                                "id": call_id,
                                "type": "function",
                                "function": {"name": name, "arguments": arguments},
                            }
                            for call_id, name, arguments in calls
                        ],
                    },
                    "logprobs": None,
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
            "system_fingerprint": "fp_test",
        },
    )


def openai_error(status: int, message: str, kind: str, code: str | None = None) -> Canned:
    """OpenAI's error object."""
    return _json(status, {"error": {"message": message, "type": kind, "param": None, "code": code}})


def anthropic_message(text: str, input_tokens: int = 13, output_tokens: int = 5) -> Canned:
    """A Messages API `message` object."""
    return _json(
        200,
        {
            "id": "msg_01Test",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-20250514",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
        },
    )


def anthropic_tool_use(
    *calls: tuple[str, str, Any],
    text: str = "",
    input_tokens: int = 19,
    output_tokens: int = 11,
) -> Canned:
    """A Messages API `message` that uses tools: each call is (id, name, input object)."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [
        {"type": "tool_use", "id": call_id, "name": name, "input": tool_input}
        for call_id, name, tool_input in calls
    ]
    return _json(
        200,
        {
            "id": "msg_01Tools",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-20250514",
            "content": content,
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
        },
    )


def anthropic_error(status: int, kind: str, message: str) -> Canned:
    """The Messages API's error object."""
    return _json(status, {"type": "error", "error": {"type": kind, "message": message}})


_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def _schema_problem(where: str, schema: Any) -> str | None:
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return f"{where}: the schema must be a JSON Schema object of type 'object'"
    return None


def _openai_tools_problem(tools: Any) -> str | None:
    if not isinstance(tools, list) or not tools:
        return "'tools' must be a non-empty array"
    names = []
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            return f"{where}: each tool must be {{'type': 'function', 'function': {{...}}}}"
        function = tool.get("function")
        if not isinstance(function, dict) or not _TOOL_NAME.match(str(function.get("name"))):
            return f"{where}.function.name must match {_TOOL_NAME.pattern}"
        if not isinstance(function.get("description", ""), str):
            return f"{where}.function.description must be a string"
        problem = _schema_problem(f"{where}.function.parameters", function.get("parameters"))
        if problem:
            return problem
        names.append(function["name"])
    if len(set(names)) != len(names):
        return f"tools: function names are not unique: {names}"
    return None


def _openai_calls_problem(where: str, calls: Any) -> str | None:
    if not isinstance(calls, list) or not calls:
        return f"{where}.tool_calls must be a non-empty array"
    for index, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(call, dict)
            or not isinstance(call.get("id"), str)
            or call.get("type") != "function"
            or not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not isinstance(function.get("arguments"), str)
        ):
            return (
                f"{where}.tool_calls[{index}] must be {{id, type: 'function', "
                "function: {name, arguments (a JSON string)}}"
            )
    return None


def openai_problem(body: Any) -> str | None:
    """What OpenAI's chat completions would refuse in `body`'s tools and tool messages."""
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    if "tools" in body:
        problem = _openai_tools_problem(body["tools"])
        if problem:
            return problem
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array"
    pending: list[str] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            return f"{where} must be an object"
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in pending:
                return (
                    f"Invalid parameter: {where}: messages with role 'tool' must be a response "
                    f"to a preceding message with 'tool_calls' (tool_call_id {call_id!r})."
                )
            pending.remove(call_id)
            if not isinstance(message.get("content"), str):
                return f"{where}.content must be a string"
            continue
        if pending:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(pending)}"
            )
        if role not in ("system", "developer", "user", "assistant"):
            return f"{where}: invalid role {role!r}"
        if role == "assistant" and "tool_calls" in message:
            problem = _openai_calls_problem(where, message["tool_calls"])
            if problem:
                return problem
            if not isinstance(message.get("content"), str | None):
                return f"{where}.content must be a string or null"
            pending = [call["id"] for call in message["tool_calls"]]
        elif not isinstance(message.get("content"), str):
            return f"{where}.content must be a string"
    if pending:
        return (
            "An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'. The following tool_call_ids did not have "
            f"response messages: {', '.join(pending)}"
        )
    return None


_ANTHROPIC_TOOL_KEYS = frozenset({"name", "description", "input_schema", "cache_control", "type"})


def _anthropic_tools_problem(tools: Any) -> str | None:
    if not isinstance(tools, list):
        return "tools: Input should be a valid list"
    names = []
    for index, tool in enumerate(tools):
        where = f"tools.{index}"
        if not isinstance(tool, dict):
            return f"{where}: Input should be a valid dictionary"
        extra = sorted(set(tool) - _ANTHROPIC_TOOL_KEYS)
        if extra:
            return f"{where}.{extra[0]}: Extra inputs are not permitted"
        if not _TOOL_NAME.match(str(tool.get("name"))):
            return f"{where}.name: String should match pattern '{_TOOL_NAME.pattern}'"
        problem = _schema_problem(f"{where}.input_schema", tool.get("input_schema"))
        if problem:
            return problem
        names.append(tool["name"])
    if len(set(names)) != len(names):
        return "tools: Tool names must be unique."
    return None


def _anthropic_block_problem(where: str, role: str, block: Any) -> str | None:
    if not isinstance(block, dict):
        return f"{where}: Input should be a valid dictionary"
    kind = block.get("type")
    if kind == "text":
        if not isinstance(block.get("text"), str) or not block["text"]:
            return f"{where}: text content blocks must be non-empty"
    elif kind == "tool_use":
        if role != "assistant":
            return f"{where}: `tool_use` blocks may only be in `assistant` messages"
        if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
            return f"{where}: a `tool_use` block needs `id` and `name`"
        if not isinstance(block.get("input"), dict):
            return f"{where}.input: Input should be a valid dictionary"
    elif kind == "tool_result":
        if role != "user":
            return f"{where}: `tool_result` blocks may only be in `user` messages"
        if not isinstance(block.get("tool_use_id"), str):
            return f"{where}.tool_use_id: Field required"
        if not isinstance(block.get("content", ""), str | list):
            return f"{where}.content: Input should be a valid string or list"
        if not isinstance(block.get("is_error", False), bool):
            return f"{where}.is_error: Input should be a valid boolean"
    else:
        return f"{where}.type: unexpected block type {kind!r}"
    return None


def _anthropic_results_problem(index: int, message: dict[str, Any], uses: list[str]) -> str | None:
    """The message after one with `tool_use` blocks must begin with one result for each."""
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    leading = []
    for block in blocks:
        if not isinstance(block, dict) or block.get("type") != "tool_result":
            break
        leading.append(block.get("tool_use_id"))
    later = [
        b for b in blocks[len(leading) :] if isinstance(b, dict) and b.get("type") == "tool_result"
    ]
    if message.get("role") != "user" or sorted(map(str, leading)) != sorted(uses) or later:
        return (
            f"messages.{index}: `tool_use` ids were found without `tool_result` blocks "
            f"immediately after: {', '.join(uses)}. Each `tool_use` block must have a "
            "corresponding `tool_result` block in the next message."
        )
    return None


def anthropic_problem(body: Any) -> str | None:
    """What Anthropic's Messages API would refuse in `body`'s tools and tool blocks."""
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    if "tools" in body:
        problem = _anthropic_tools_problem(body["tools"])
        if problem:
            return problem
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    uses: list[str] = []
    tool_blocks = False
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return f"messages.{index}.role: Input should be 'user' or 'assistant'"
        role, content = message["role"], message.get("content")
        if index == 0 and role != "user":
            return "messages: the first message must use the `user` role"
        if uses:
            problem = _anthropic_results_problem(index, message, uses)
            if problem:
                return problem
        elif isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content
        ):
            return (
                f"messages.{index}: unexpected `tool_use_id` found in `tool_result` blocks. "
                "Each `tool_result` block must have a corresponding `tool_use` block in the "
                "previous message."
            )
        if isinstance(content, str):
            if not content:
                return f"messages.{index}: content must be non-empty"
            uses = []
            continue
        if not isinstance(content, list) or not content:
            return f"messages.{index}.content: a non-empty string or list of blocks is required"
        for position, block in enumerate(content):
            problem = _anthropic_block_problem(f"messages.{index}.content.{position}", role, block)
            if problem:
                return problem
        uses = [b["id"] for b in content if b.get("type") == "tool_use"]
        tool_blocks = tool_blocks or any(b.get("type") != "text" for b in content)
    if uses:
        return (
            f"messages.{len(messages) - 1}: `tool_use` ids were found without `tool_result` "
            "blocks immediately after. Each `tool_use` block must have a corresponding "
            "`tool_result` block in the next message."
        )
    if tool_blocks and not body.get("tools"):
        return "Requests which include `tool_use` or `tool_result` blocks must define tools."
    return None


@dataclass
class WireServer:
    """Serve queued answers on a loopback port; `url` is valid after `start()`.

    With `checks`, a request that breaks that provider's rules is answered with the
    provider's HTTP 400 instead of the next queued answer, and its problem is kept in
    `refused`.
    """

    checks: Literal["openai", "anthropic"] | None = None
    refused: list[str] = field(default_factory=list)
    answers: deque[Canned] = field(default_factory=deque)
    requests: list[Recorded] = field(default_factory=list)
    received: asyncio.Event = field(default_factory=asyncio.Event)
    _server: asyncio.Server | None = None
    _release: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def close(self) -> None:
        self._release.set()  # let hanging handlers finish
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def queue(self, *answers: Canned) -> None:
        self.answers.extend(answers)

    def _problem(self, body: Any) -> str | None:
        if self.checks == "openai":
            return openai_problem(body)
        if self.checks == "anthropic":
            return anthropic_problem(body)
        return None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        method, path, _ = request_line.split(" ", 2)
        headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in header_lines if line)
        }
        raw = await reader.readexactly(int(headers.get("content-length", "0")))
        body = json.loads(raw) if raw else None
        self.requests.append(Recorded(method, path, headers, body))
        self.received.set()
        problem = self._problem(body)
        if problem:
            self.refused.append(problem)
            answer = (
                openai_error(400, problem, "invalid_request_error")
                if self.checks == "openai"
                else anthropic_error(400, "invalid_request_error", problem)
            )
        elif self.answers:
            answer = self.answers.popleft()
        else:
            answer = openai_error(500, "nothing queued", "test")
        if answer.hang:
            await self._release.wait()
            return False
        try:
            reason = HTTPStatus(answer.status).phrase
        except ValueError:  # 529, Anthropic's "overloaded", is not a standard status
            reason = "Overloaded"
        if answer.events:
            return await self._stream(writer, answer, reason)
        writer.write(
            f"HTTP/1.1 {answer.status} {reason}\r\n"
            f"Content-Type: {answer.content_type}\r\n"
            f"Content-Length: {len(answer.body)}\r\n\r\n".encode()
            + answer.body
        )
        await writer.drain()
        return True

    async def _stream(self, writer: asyncio.StreamWriter, answer: Canned, reason: str) -> bool:
        """Write a server-sent-event answer as HTTP/1.1 chunks, paced as the answer says (the
        pauses are the provider's timing being played, not a wait for anything)."""
        writer.write(
            f"HTTP/1.1 {answer.status} {reason}\r\n"
            f"Content-Type: {answer.content_type}\r\n"
            "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        )
        await writer.drain()
        for index, event in enumerate(answer.events):
            if index == answer.stall_after:
                await self._release.wait()
                return False
            await asyncio.sleep(answer.first_delay_s if index == 0 else answer.gap_s)
            writer.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True
