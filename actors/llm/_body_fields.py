"""Which fields of a provider's request body a model call's `options` may set. Pure.

`options` is the rest of the provider's body (a response format, tools, Anthropic's
`system`), passed on as the caller wrote it. A field the caller chooses freely can spend what
the bundle's limits were meant to bound: OpenAI's `n` asks for that many answers, each up to
the output cap (128 answers of 4,000 tokens from one call the gate admitted as one), and a
provider's own server tools (web search, code execution, remote MCP servers) run, and bill,
outside any token count. So the caller may set only the fields listed here, which shape one
answer and cost nothing beyond it, and only function tools, which Parley's own tool calls
are; everything else is refused before any provider is called, by the gate and again by the
gateway. The gateway sets `model`, `messages`, `max_tokens` and `stream` itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

__all__ = ("CALLER_FIELDS", "refused_fields")

Api = Literal["openai", "anthropic"]

CALLER_FIELDS: Final[Mapping[Api, frozenset[str]]] = {
    "openai": frozenset(
        {
            "response_format",
            "tools",
            "tool_choice",
            "parallel_tool_calls",
            "temperature",
            "top_p",
            "stop",
            "seed",
            "presence_penalty",
            "frequency_penalty",
            "user",
        }
    ),
    "anthropic": frozenset(
        {
            "system",
            "tools",
            "tool_choice",
            "temperature",
            "top_p",
            "top_k",
            "stop_sequences",
            "metadata",
        }
    ),
}
"""Per API, the body fields a caller may set: each shapes the one answer asked for."""


def _server_tools(api: Api, tools: object) -> list[str]:
    """The tools in `tools` that are not a function the caller runs itself (a provider's own
    search, code execution or computer use), by their type."""
    if not isinstance(tools, list):
        return ["(tools is not a list)"]
    kinds: list[str] = []
    for tool in tools:
        kind: Any = tool.get("type") if isinstance(tool, dict) else "(not an object)"
        if api == "openai" and kind != "function":
            kinds.append(str(kind))
        elif api == "anthropic" and kind not in (None, "custom"):
            kinds.append(str(kind))
    return kinds


def refused_fields(api: Api, options: Mapping[str, Any]) -> str | None:
    """Why `options` may not go to a provider of `api`, or None when it may."""
    allowed = CALLER_FIELDS[api]
    others = sorted(set(options) - allowed)
    if others:
        return (
            f"options may not set {others}: a caller sets only {sorted(allowed)} (the gateway "
            "sets the model, messages, output cap and streaming; other fields could ask for "
            "more than the one answer the bundle's limits bound)"
        )
    server_tools = _server_tools(api, options["tools"]) if "tools" in options else []
    if server_tools:
        return (
            f"options may offer only function tools, not {server_tools}: a provider's own tools "
            "run and bill outside the call's token limits"
        )
    return None
