"""OpenAI's streamed chat completions as Parley's local provider servers write them.

The llm bench row (tools/bench/_llmserver.py) and the chaos run's LLM mix
(tools/chaos/_llm_provider.py) each play a provider on loopback, at their own pace and with
their own answer; what goes on the wire is the same: one POST read whole, a
`text/event-stream` answered in HTTP/1.1 chunks, each holding one `data:` event of a
`chat.completion.chunk` (the role on the first), then the finish reason, the usage
(`stream_options.include_usage`) and `data: [DONE]`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Final

__all__ = ("STREAM_HEAD", "read_request", "stream_end", "text_event")

STREAM_HEAD: Final = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
"""The response's status line and headers: an event stream in HTTP/1.1 chunks."""


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """The next request's body (its head read and dropped).

    Raises:
        asyncio.IncompleteReadError: the client went away.
    """
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.decode("latin-1").split("\r\n"):
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    return await reader.readexactly(length)


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _event(name: str, delta: dict[str, object], finish: str | None, usage: object) -> bytes:
    head = {"id": name, "object": "chat.completion.chunk", "created": 0, "model": "m"}
    choices = [{"index": 0, "delta": delta, "finish_reason": finish}] if delta or finish else []
    return _chunk(
        b"data: " + json.dumps({**head, "choices": choices, "usage": usage}).encode() + b"\n\n"
    )


def text_event(name: str, index: int, text: str) -> bytes:
    """The `index`th piece of the answer's text (the first also says the role), as one
    chunk; `name` is the completion's id."""
    delta: dict[str, object] = {"content": text}
    if index == 0:
        delta["role"] = "assistant"
    return _event(name, delta, None, None)


def stream_end(name: str, usage: dict[str, Any]) -> bytes:
    """The stream's end: the finish reason, the usage, `data: [DONE]` and the last chunk."""
    return (
        _event(name, {}, "stop", None)
        + _event(name, {}, None, usage)
        + _chunk(b"data: [DONE]\n\n")
        + b"0\r\n\r\n"
    )
