"""The providers' wire formats, as far as the gateway reads them: the request body it sends,
and the text, tool calls, usage and finish reason of an answer. Shared with the agent's
direct-mode brains (actors/agent/brains/_http.py) for the error body and the retryable
statuses, so both read a provider the same way.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from schemas import LlmToolCall, LlmUsage

__all__ = (
    "RETRYABLE_STATUS",
    "Answer",
    "path_for",
    "provider_message",
    "provider_tool_name",
    "read_answer",
    "request_body",
)

Api = Literal["openai", "anthropic"]

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
"""Statuses a provider may answer differently later: timeouts, rate limits, overload."""

_UNSAFE_IN_TOOL_NAMES = re.compile(r"[^A-Za-z0-9_-]")

DEFAULT_ANTHROPIC_MAX_TOKENS = 1024
"""Anthropic requires `max_tokens`: used when neither the request nor the bundle sets one."""


def provider_tool_name(capability: str) -> str:
    """The name a capability's tool has in a provider's tool list: providers allow only
    `[A-Za-z0-9_-]`, so `File.Read` is `File_Read`."""
    return _UNSAFE_IN_TOOL_NAMES.sub("_", capability)[:64]


def path_for(api: Api) -> str:
    return "chat/completions" if api == "openai" else "v1/messages"


def request_body(
    api: Api, model: str, messages: list[dict[str, Any]], options: dict[str, Any], cap: int | None
) -> dict[str, Any]:
    """The body sent to the provider: the caller's options, then the fields the gateway owns."""
    body: dict[str, Any] = {**options, "model": model, "messages": messages}
    if api == "anthropic":
        body["max_tokens"] = cap or DEFAULT_ANTHROPIC_MAX_TOKENS
    elif cap is not None:
        body["max_tokens"] = cap
    return body


class Answer:
    """What the gateway reads of a provider's answer."""

    __slots__ = ("finish_reason", "text", "tool_calls", "usage")

    def __init__(
        self, text: str, tool_calls: tuple[LlmToolCall, ...], usage: LlmUsage, finish: str
    ) -> None:
        self.text, self.tool_calls, self.usage, self.finish_reason = text, tool_calls, usage, finish


def read_answer(api: Api, body: dict[str, Any]) -> Answer:
    """The answer's parts.

    Raises:
        ValueError: the body lacks what the wire format promises.
    """
    if api == "openai":
        try:
            choice = body["choices"][0]
            message = choice["message"]
        except (KeyError, IndexError, TypeError):
            raise ValueError("an answer without choices[0].message") from None
        calls = tuple(
            LlmToolCall(
                id=str(c.get("id", "")),
                name=str((c.get("function") or {}).get("name", "")),
                arguments=str((c.get("function") or {}).get("arguments", "")),
            )
            for c in message.get("tool_calls") or []
            if isinstance(c, dict)
        )
        usage = body.get("usage") or {}
        prompt = _count(usage.get("prompt_tokens"))
        completion = _count(usage.get("completion_tokens"))
        text = str(message.get("content") or message.get("refusal") or "")
        return Answer(text, calls, _usage(prompt, completion), str(choice.get("finish_reason", "")))
    content = body.get("content")
    if not isinstance(content, list):
        raise ValueError("an answer without a content list")
    text = "".join(str(b.get("text", "")) for b in content if b.get("type") == "text")
    calls = tuple(
        LlmToolCall(
            id=str(b.get("id", "")), name=str(b.get("name", "")), arguments=str(b.get("input"))
        )
        for b in content
        if b.get("type") == "tool_use"
    )
    usage = body.get("usage") or {}
    prompt, completion = _count(usage.get("input_tokens")), _count(usage.get("output_tokens"))
    return Answer(text, calls, _usage(prompt, completion), str(body.get("stop_reason", "")))


def provider_message(body: Any) -> str:
    """The error both providers put in an error body: `{"error": {"type", "message"}}`."""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            kind = error.get("type") or error.get("code") or "error"
            return f"{kind}: {error.get('message', '')}".strip()
    return ""


def _count(value: object) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def _usage(prompt: int, completion: int) -> LlmUsage:
    return LlmUsage(
        prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
    )
