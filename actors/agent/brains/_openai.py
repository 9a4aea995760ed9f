"""The OpenAI-compatible brain: chat completions with Structured Outputs (seed 001 §9) and tools.

Works with OpenAI and with servers that speak the same API (vLLM, Ollama, llama.cpp server):
`POST {base_url}/chat/completions` with the system prompt and the call's context as two
messages and `response_format` set to seed 001's JSON Schema. The schema is sent with
`strict: false`: OpenAI's strict mode requires every property to be required, and the seed's
`handoff` and `final` are optional. Usage comes from the response's `usage`, or is estimated
when a server leaves it out.

When the call offers other agents, they are `tools` in the API's function-calling format
(actors/agent/brains/_tools.py). The functions are not strict either: strict functions need
every argument required, and they rule out parallel calls, which are seed 003's fan-out. A
reply with `tool_calls` becomes the answer's requests; the next call's earlier rounds are
re-sent as the API expects them: the assistant message with its `tool_calls`, then one `tool`
message per call, answered by `tool_call_id`. Malformed tool calls are answered the same way,
with what was wrong, and the model is asked once more within the same `reply()`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from actors.agent._profile import OpenAIBrainConfig
from actors.agent._prompt import BrainCall, user_prompt
from actors.agent._reply import reply_schema_for
from actors.agent.brains._http import HttpBrain
from actors.agent.brains._protocol import BrainAnswer, estimate_tokens, usage_of
from actors.agent.brains._tools import (
    ToolCall,
    offered_tools,
    parse_tool_calls,
    result_text,
    tool_arguments,
    tool_conversation,
)

__all__ = ("OpenAIBrain",)


class OpenAIBrain(HttpBrain[OpenAIBrainConfig]):
    """Answers through an OpenAI-compatible chat-completions endpoint."""

    backend = "openai"
    provider = "the OpenAI endpoint"

    def wire_headers(self, key: str | None) -> dict[str, str]:
        """A bearer token, when there is a key: local servers need none."""
        return {"Authorization": f"Bearer {key}"} if key else {}

    def payload(self, call: BrainCall, repair: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
        """The request body for one call, with this `reply()`'s repair exchange, if any."""
        prompt_call, rounds = tool_conversation(call)
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": self._system},
            {"role": "user", "content": user_prompt(prompt_call, self._profile)},
        ]
        for done in rounds:
            calls = [ToolCall(r.request_id, *tool_arguments(r)) for r in done.requests]
            messages.append(_assistant_calls(done.text, calls))
            messages += [
                _tool_message(request.request_id, result_text(result))
                for request, result in zip(done.requests, done.results, strict=True)
            ]
        messages += repair
        body: dict[str, Any] = {
            "model": self._profile.model,
            "messages": messages,
            "max_tokens": self._profile.max_output_tokens,
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "reply",
                    "schema": reply_schema_for(call.kind, self._profile.peers),
                    "strict": False,
                },
            },
        }
        tools = offered_tools(call)
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                        "strict": False,
                    },
                }
                for tool in tools
            ]
        return body

    async def reply(self, call: BrainCall) -> BrainAnswer:
        repair: list[dict[str, Any]] = []
        prompt = completion = 0
        while True:
            payload = self.payload(call, repair)
            body = await self.post("chat/completions", payload)
            try:
                message = body["choices"][0]["message"]
            except (KeyError, IndexError, TypeError):
                raise self.answered_without("choices[0].message") from None
            # A refusal comes instead of content; it is still the model's answer, so it
            # reaches the room as a (malformed) plain message rather than vanishing.
            text = str(message.get("content") or message.get("refusal") or "")
            tool_calls = self._tool_calls(message)
            asked, answered = _usage(body, payload, text, tool_calls)
            prompt, completion = prompt + asked, completion + answered
            if not tool_calls:
                return BrainAnswer(text=text, usage=usage_of(prompt, completion))
            parsed = parse_tool_calls(tool_calls, call)
            if not parsed.malformed:
                return BrainAnswer(text, usage_of(prompt, completion), parsed.requests)
            if repair:
                raise self.still_malformed(parsed)
            repair.append(_assistant_calls(text, tool_calls))
            repair += [_tool_message(c.id, parsed.answers[c.id]) for c in tool_calls]

    def _tool_calls(self, message: dict[str, Any]) -> list[ToolCall]:
        """The message's tool calls; one the model cannot be answered about is the API's fault.

        Each call needs its `id` to be answered; the name and arguments are the model's and
        are checked later, so a missing one is a malformed call the model is told about.
        """
        raw = message.get("tool_calls") or []
        if not isinstance(raw, list):
            raise self.answered_without("a list of tool_calls")
        calls = []
        for item in raw:
            if not isinstance(item, dict) or not isinstance(item.get("id"), str) or not item["id"]:
                raise self.answered_without("an id for each of its tool_calls")
            function = item.get("function")
            function = function if isinstance(function, dict) else {}
            name = function.get("name")
            calls.append(
                ToolCall(
                    item["id"], name if isinstance(name, str) else "", function.get("arguments")
                )
            )
        return calls


def _assistant_calls(text: str, calls: Sequence[ToolCall]) -> dict[str, Any]:
    """The assistant message that made `calls`, as the API wants it re-sent."""
    return {
        "role": "assistant",
        "content": text or None,
        "tool_calls": [
            {
                "id": c.id,
                "type": "function",
                "function": {
                    "name": c.name,
                    "arguments": (
                        c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments)
                    ),
                },
            }
            for c in calls
        ],
    }


def _tool_message(tool_call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": tool_call_id, "content": content}


def _usage(
    body: dict[str, Any], payload: dict[str, Any], text: str, tool_calls: Sequence[ToolCall]
) -> tuple[int, int]:
    """The request's prompt and completion tokens: the server's count, else an estimate."""
    usage = body.get("usage") or {}
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens")
    if isinstance(prompt, int) and isinstance(completion, int):
        return prompt, completion
    sent = [str(m.get("content") or "") for m in payload["messages"]]
    sent += [json.dumps(m["tool_calls"]) for m in payload["messages"] if m.get("tool_calls")]
    made = [text] + [f"{c.name}{c.arguments}" for c in tool_calls]
    return estimate_tokens(*sent), estimate_tokens(*made)
