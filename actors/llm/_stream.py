"""Reading a provider's streamed answer (server-sent events) as it is written. Pure.

OpenAI's chat completions stream `data: {chat.completion.chunk}` events, each with a
`delta` (content, or pieces of tool calls by index), the finish reason in the last one with
choices, the usage in a final chunk with no choices (asked for with
`stream_options.include_usage`), then `data: [DONE]`. Anthropic's Messages stream
`message_start` (the input tokens), `content_block_start`, `content_block_delta` (`text_delta`,
or `input_json_delta` pieces of a tool's input), `content_block_stop`, `message_delta` (the stop
reason and the output tokens), `message_stop`, and `error` when the provider fails mid-way.

`StreamReader` gives each event's new text, and at the end the answer in the same shape the
provider gives when not streaming, so everything after the call (the usage cap, the response
guardrails, the stored answer) reads one shape.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, Literal

__all__ = ("StreamError", "StreamReader", "sse_data", "stream_body")

Api = Literal["openai", "anthropic"]


class StreamError(ValueError):
    """The provider reported an error in its stream, or sent what its format does not allow."""


def stream_body(api: Api, body: dict[str, Any]) -> dict[str, Any]:
    """`body` asking for a streamed answer (OpenAI: with the usage in the last chunk)."""
    streamed = {**body, "stream": True}
    if api == "openai":
        streamed["stream_options"] = {"include_usage": True}
    return streamed


async def sse_data(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """The `data` of each server-sent event (multi-line data joined by newlines)."""
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield "\n".join(data)


class StreamReader:
    """One streamed answer, read event by event."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.done = False
        self._head: dict[str, Any] = {}
        self._text: list[str] = []
        self._finish = ""
        self._usage: dict[str, Any] = {}
        self._calls: dict[int, dict[str, Any]] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._partial: dict[int, list[str]] = {}

    def feed(self, data: str) -> str:
        """Read one event's data; return the text it adds (often none).

        Raises:
            StreamError: an error event, or data that is not a JSON object.
        """
        if self.api == "openai" and data.strip() == "[DONE]":
            self.done = True
            return ""
        try:
            event = json.loads(data)
        except ValueError:
            raise StreamError(f"a stream event that is not JSON: {data[:80]!r}") from None
        if not isinstance(event, dict):
            raise StreamError("a stream event that is not a JSON object")
        if "error" in event and (self.api == "openai" or event.get("type") == "error"):
            error = event["error"] if isinstance(event["error"], dict) else {}
            kind = error.get("type") or error.get("code") or "error"
            raise StreamError(f"{kind}: {error.get('message', '')}")
        return self._openai(event) if self.api == "openai" else self._anthropic(event)

    def _openai(self, event: dict[str, Any]) -> str:
        if not self._head:
            self._head = {k: event.get(k) for k in ("id", "created", "model")}
        if isinstance(event.get("usage"), dict):
            self._usage = event["usage"]
        added = ""
        for choice in event.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if choice.get("finish_reason"):
                self._finish = str(choice["finish_reason"])
            piece = delta.get("content")
            if isinstance(piece, str) and piece:
                self._text.append(piece)
                added += piece
            for call in delta.get("tool_calls") or []:
                kept = self._calls.setdefault(
                    int(call.get("index", 0)),
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                if call.get("id"):
                    kept["id"] = call["id"]
                function = call.get("function") or {}
                kept["function"]["name"] += function.get("name") or ""
                kept["function"]["arguments"] += function.get("arguments") or ""
        return added

    def _anthropic(self, event: dict[str, Any]) -> str:
        kind = event.get("type")
        index = int(event.get("index", 0) or 0)
        if kind == "message_start":
            self._head = dict(event.get("message") or {})
            self._usage = dict(self._head.get("usage") or {})
        elif kind == "content_block_start":
            self._blocks[index] = dict(event.get("content_block") or {})
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            block = self._blocks.setdefault(index, {"type": "text", "text": ""})
            if delta.get("type") == "text_delta":
                piece = str(delta.get("text", ""))
                block["text"] = str(block.get("text", "")) + piece
                return piece
            if delta.get("type") == "input_json_delta":
                self._partial.setdefault(index, []).append(str(delta.get("partial_json", "")))
        elif kind == "content_block_stop" and index in self._partial:
            try:
                self._blocks[index]["input"] = json.loads("".join(self._partial.pop(index)) or "{}")
            except ValueError:
                raise StreamError("a tool's input that is not JSON") from None
        elif kind == "message_delta":
            self._finish = str((event.get("delta") or {}).get("stop_reason") or "")
            self._usage.update(event.get("usage") or {})
        elif kind == "message_stop":
            self.done = True
        return ""

    def answer(self) -> dict[str, Any]:
        """The whole answer, shaped as the provider's answer when not streaming.

        Raises:
            StreamError: the stream ended before its format's last event.
        """
        if not self.done:
            raise StreamError("the stream ended before the answer did")
        if self.api == "anthropic":
            content = [self._blocks[i] for i in sorted(self._blocks)]
            return {
                **self._head,
                "content": content,
                "stop_reason": self._finish,
                "usage": self._usage,
            }
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text) or None}
        if self._calls:
            message["tool_calls"] = [self._calls[i] for i in sorted(self._calls)]
        choice = {"index": 0, "message": message, "finish_reason": self._finish}
        return {
            **self._head,
            "object": "chat.completion",
            "choices": [choice],
            "usage": self._usage,
        }
