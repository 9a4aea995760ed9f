"""The Anthropic brain: the Messages API, JSON only by instruction, validated and repaired once.

The Messages API has no schema-constrained output mode we rely on, so seed 001 §9 asks for
"JSON only" by instruction: the system prompt carries the shared rules and the schema. When
the answer does not pass the reply contract, the model is asked once more, shown its own
answer and the reason it failed; whatever that second answer is goes on to the host's check
(a second failure becomes a malformed plain message there). Usage adds up both requests.
"""

from __future__ import annotations

import json
from typing import Any

from actors.agent._profile import AgentProfile, AnthropicBrainConfig
from actors.agent._prompt import JSON_ONLY, BrainCall, user_prompt
from actors.agent._reply import interpret_reply, reply_json_schema
from actors.agent.brains._http import HttpBrain
from actors.agent.brains._protocol import BrainAnswer, usage_of

__all__ = ("AnthropicBrain",)


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

    def payload(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        """The request body for a conversation so far."""
        return {
            "model": self._profile.model,
            "max_tokens": self._profile.max_output_tokens,
            "system": self._system,
            "messages": messages,
        }

    async def _ask(self, messages: list[dict[str, str]]) -> tuple[str, int, int]:
        body = await self.post("v1/messages", self.payload(messages))
        content = body.get("content")
        if not isinstance(content, list):
            raise self.answered_without("content")
        text = "".join(
            block.get("text", "")
            for block in content
            if isinstance(block, dict) and block.get("type") == "text"
        )
        usage = body.get("usage") or {}
        return text, int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)

    async def reply(self, call: BrainCall) -> BrainAnswer:
        messages = [{"role": "user", "content": user_prompt(call, self._profile)}]
        text, prompt, completion = await self._ask(messages)
        check = interpret_reply(text, self._profile.peers)
        if check.malformed:
            messages += [
                {"role": "assistant", "content": text or "(empty)"},
                {
                    "role": "user",
                    "content": f"That reply does not match the schema ({check.problem[:300]}). "
                    f"Answer again with the JSON object alone. {JSON_ONLY}",
                },
            ]
            text, more_prompt, more_completion = await self._ask(messages)
            prompt, completion = prompt + more_prompt, completion + more_completion
        return BrainAnswer(text=text, usage=usage_of(prompt, completion))
