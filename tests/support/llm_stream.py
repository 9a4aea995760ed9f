"""Streamed answers in the providers' server-sent-event formats, for tests/support/llm_server.py.

OpenAI's chat completions with `stream: true`: one `data: {chat.completion.chunk}` event per
delta (the first carries the role, the last the finish reason), then, when the request set
`stream_options.include_usage`, a chunk with no choices and the usage (every earlier chunk
has `"usage": null`), then `data: [DONE]`.

Anthropic's Messages with `stream: true`: `message_start` (the message with empty content
and the input tokens), `content_block_start`, a `ping`, one `content_block_delta` of type
`text_delta` per piece, `content_block_stop`, `message_delta` (the stop reason and the output
tokens), `message_stop`; each as `event: <type>` and `data: {...}`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tests.support.llm_server import Canned

__all__ = ("anthropic_stream", "openai_stream", "pieces_of")


def pieces_of(text: str, count: int) -> list[str]:
    """`text` cut into `count` pieces (the last takes what is left)."""
    size = max(1, len(text) // count)
    pieces = [text[i * size : (i + 1) * size] for i in range(count - 1)]
    return [*pieces, text[(count - 1) * size :]]


def _data(value: Any) -> bytes:
    return f"data: {json.dumps(value)}\n\n".encode()


def openai_stream(
    pieces: Sequence[str],
    prompt_tokens: int = 11,
    completion_tokens: int | None = None,
    *,
    usage: bool = True,
    first_delay_s: float = 0.0,
    gap_s: float = 0.0,
    stall_after: int | None = None,
) -> Canned:
    """A streamed chat completion whose content is `pieces`, one chunk each."""
    head = {
        "id": "chatcmpl-Stream1",
        "object": "chat.completion.chunk",
        "created": 1_730_000_000,
        "model": "gpt-4o-2024-08-06",
        "system_fingerprint": "fp_test",
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        extra = {"usage": None} if usage else {}
        return _data({**head, "choices": [choice], **extra})

    events = [chunk({"role": "assistant", "content": "", "refusal": None})]
    events += [chunk({"content": piece}) for piece in pieces]
    events.append(chunk({}, "stop"))
    if usage:
        completion = len(pieces) if completion_tokens is None else completion_tokens
        counted = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
        }
        events.append(_data({**head, "choices": [], "usage": counted}))
    events.append(b"data: [DONE]\n\n")
    return Canned(
        content_type="text/event-stream",
        events=tuple(events),
        first_delay_s=first_delay_s,
        gap_s=gap_s,
        stall_after=stall_after,
    )


def _event(kind: str, value: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **value})}\n\n".encode()


def anthropic_stream(
    pieces: Sequence[str],
    input_tokens: int = 13,
    output_tokens: int | None = None,
    *,
    first_delay_s: float = 0.0,
    gap_s: float = 0.0,
    stall_after: int | None = None,
) -> Canned:
    """A streamed Messages answer whose one text block is `pieces`, one delta each."""
    message: dict[str, Any] = {
        "id": "msg_01Stream",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-20250514",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1},
    }
    events = [
        _event("message_start", {"message": message}),
        _event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        _event("ping", {}),
    ]
    events += [
        _event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": p}})
        for p in pieces
    ]
    out = len(pieces) if output_tokens is None else output_tokens
    events += [
        _event("content_block_stop", {"index": 0}),
        _event(
            "message_delta",
            {
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": out},
            },
        ),
        _event("message_stop", {}),
    ]
    return Canned(
        content_type="text/event-stream",
        events=tuple(events),
        first_delay_s=first_delay_s,
        gap_s=gap_s,
        stall_after=stall_after,
    )
