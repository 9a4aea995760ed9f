"""The Anthropic brain: the Messages API, JSON only by instruction, validated and repaired once.

The Messages API has no schema-constrained output mode we rely on, so seed 001 §9 asks for
"JSON only" by instruction: the system prompt carries the shared rules and the schema. When
the answer does not pass the reply contract, the model is asked once more, shown its own
answer and the reason it failed; whatever that second answer is goes on to the host's check
(a second failure becomes a malformed plain message there). Usage adds up every request.

When the call offers other agents, they are `tools` (name, description, `input_schema`:
actors/agent/brains/_tools.py). An answer with `tool_use` blocks becomes the answer's
requests; the next call's earlier rounds are re-sent as the API expects them: the
assistant's text and `tool_use` blocks, then one user message whose `tool_result` blocks
answer them by `tool_use_id` (`is_error` when the call failed). Malformed tool calls are
answered the same way, with what was wrong, and the model is asked once more.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from actors.agent._profile import AgentProfile, AnthropicBrainConfig
from actors.agent._prompt import JSON_ONLY, BrainCall, user_prompt
from actors.agent._reply import interpret_reply, reply_json_schema, reply_schema_for
from actors.agent.brains._http import HttpBrain
from actors.agent.brains._protocol import BrainAnswer, usage_of
from actors.agent.brains._tools import (
    ToolCall,
    offered_tools,
    parse_tool_calls,
    result_text,
    tool_arguments,
    tool_conversation,
)

__all__ = ("AnthropicBrain",)


@dataclass(frozen=True, slots=True)
class _Turn:
    """One answer of the API: its text, its tool calls, and its token counts."""

    text: str
    tool_calls: list[ToolCall]
    prompt: int
    completion: int


class AnthropicBrain(HttpBrain[AnthropicBrainConfig]):
    """Answers through Anthropic's Messages API."""

    backend = "anthropic"
    provider = "the Anthropic API"

    def system_text(self, profile: AgentProfile) -> str:
        """The shared system prompt and the reply's JSON Schema: JSON only by instruction."""
        schema = json.dumps(reply_json_schema(profile.peers), separators=(",", ":"))
        return f"{super().system_text(profile)}\n\nThe JSON Schema of your reply: {schema}"

    def wire_headers(self, key: str | None) -> dict[str, str]:
        """The API version every request names, and the key in `x-api-key`."""
        headers = {"anthropic-version": self._config.anthropic_version}
        if key:
            headers["x-api-key"] = key
        return headers

    def payload(self, call: BrainCall, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """The request body for a conversation so far, with the tools the call offers."""
        body: dict[str, Any] = {
            "model": self._profile.model,
            "max_tokens": self._profile.max_output_tokens,
            "system": self._system,
            "messages": messages,
        }
        if call.kind == "delegation_request":  # seed 003's fields may come with the message
            schema = json.dumps(reply_schema_for(call.kind), separators=(",", ":"))
            body["system"] = f"{self._system}\n\nAnswering a delegation, reply per: {schema}"
        tools = offered_tools(call)
        if tools:
            body["tools"] = [
                {
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": tool.parameters,
                }
                for tool in tools
            ]
        return body

    def conversation(self, call: BrainCall) -> list[dict[str, Any]]:
        """The call's prompt, then its earlier rounds as tool calls and their results."""
        prompt_call, rounds = tool_conversation(call)
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": user_prompt(prompt_call, self._profile)}
        ]
        for done in rounds:
            calls = [ToolCall(r.request_id, *tool_arguments(r)) for r in done.requests]
            messages.append(_assistant_calls(done.text, calls))
            messages.append(
                {
                    "role": "user",
                    "content": [
                        _tool_result(request.request_id, result_text(result), not result.ok)
                        for request, result in zip(done.requests, done.results, strict=True)
                    ],
                }
            )
        return messages

    async def _ask(self, call: BrainCall, messages: list[dict[str, Any]]) -> _Turn:
        body = await self.post("v1/messages", self.payload(call, messages))
        content = body.get("content")
        if not isinstance(content, list):
            raise self.answered_without("content")
        blocks = [block for block in content if isinstance(block, dict)]
        text = "".join(block.get("text", "") for block in blocks if block.get("type") == "text")
        tool_calls = []
        for block in blocks:
            if block.get("type") != "tool_use":
                continue
            if not isinstance(block.get("id"), str) or not block["id"]:
                raise self.answered_without("an id for each tool_use block")
            name = block.get("name")
            tool_calls.append(
                ToolCall(block["id"], name if isinstance(name, str) else "", block.get("input"))
            )
        usage = body.get("usage") or {}
        prompt, completion = (
            int(usage.get("input_tokens") or 0),
            int(usage.get("output_tokens") or 0),
        )
        return _Turn(text, tool_calls, prompt, completion)

    async def reply(self, call: BrainCall) -> BrainAnswer:
        messages = self.conversation(call)
        prompt = completion = 0
        tools_repaired = json_repaired = False
        while True:
            turn = await self._ask(call, messages)
            prompt, completion = prompt + turn.prompt, completion + turn.completion
            if turn.tool_calls:
                parsed = parse_tool_calls(turn.tool_calls, call)
                if not parsed.malformed:
                    return BrainAnswer(turn.text, usage_of(prompt, completion), parsed.requests)
                if tools_repaired:
                    raise self.still_malformed(parsed)
                tools_repaired = True
                answers = [_tool_result(c.id, parsed.answers[c.id], True) for c in turn.tool_calls]
                messages += [
                    _assistant_calls(turn.text, turn.tool_calls),
                    {"role": "user", "content": answers},
                ]
                continue
            check = interpret_reply(
                turn.text, self._profile.peers, delegate=call.kind == "delegation_request"
            )
            if not check.malformed or json_repaired:
                return BrainAnswer(text=turn.text, usage=usage_of(prompt, completion))
            json_repaired = True
            messages += [
                {"role": "assistant", "content": turn.text or "(empty)"},
                {
                    "role": "user",
                    "content": f"That reply does not match the schema ({check.problem[:300]}). "
                    f"Answer again with the JSON object alone. {JSON_ONLY}",
                },
            ]


def _assistant_calls(text: str, calls: Sequence[ToolCall]) -> dict[str, Any]:
    """The assistant message that made `calls`, as the API wants it re-sent.

    A text block may not be empty, and a `tool_use` block's input must be an object: a call
    whose input was not one is re-sent with none (its answer says what was wrong).
    """
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    blocks += [
        {
            "type": "tool_use",
            "id": c.id,
            "name": c.name,
            "input": c.arguments if isinstance(c.arguments, dict) else {},
        }
        for c in calls
    ]
    return {"role": "assistant", "content": blocks}


def _tool_result(tool_use_id: str, content: str, is_error: bool) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}
    if is_error:
        block["is_error"] = True
    return block
