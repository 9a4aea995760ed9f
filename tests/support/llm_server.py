"""A local HTTP server on 127.0.0.1 that answers in OpenAI's and Anthropic's real wire formats.

The only test double of the agent host's tests, for services the tests cannot reach. It is a
plain asyncio HTTP/1.1 server: each request is recorded (path, headers, JSON body) and answered
with the next canned answer a test queued: a provider's success body, a provider's error body
with its status, a body that is not JSON, or no answer at all (so the client's timeout fires).
The bodies follow the providers' documented response shapes field for field.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

__all__ = (
    "Canned",
    "Recorded",
    "WireServer",
    "anthropic_error",
    "anthropic_message",
    "openai_completion",
    "openai_error",
)


@dataclass(frozen=True)
class Canned:
    """One answer: status and raw body, or `hang` to never answer."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    hang: bool = False


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


def anthropic_error(status: int, kind: str, message: str) -> Canned:
    """The Messages API's error object."""
    return _json(status, {"type": "error", "error": {"type": kind, "message": message}})


@dataclass
class WireServer:
    """Serve queued answers on a loopback port; `url` is valid after `start()`."""

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
        answer = (
            self.answers.popleft() if self.answers else openai_error(500, "nothing queued", "test")
        )
        if answer.hang:
            await self._release.wait()
            return False
        try:
            reason = HTTPStatus(answer.status).phrase
        except ValueError:  # 529, Anthropic's "overloaded", is not a standard status
            reason = "Overloaded"
        writer.write(
            f"HTTP/1.1 {answer.status} {reason}\r\n"
            f"Content-Type: {answer.content_type}\r\n"
            f"Content-Length: {len(answer.body)}\r\n\r\n".encode()
            + answer.body
        )
        await writer.drain()
        return True
