"""The OpenAI-compatible brain: chat completions with Structured Outputs (seed 001 §9).

Works with OpenAI and with servers that speak the same API (vLLM, Ollama, llama.cpp server):
`POST {base_url}/chat/completions` with the system prompt and the call's context as two
messages and `response_format` set to seed 001's JSON Schema. The schema is sent with
`strict: false`: OpenAI's strict mode requires every property to be required, and the seed's
`handoff` and `final` are optional. Usage comes from the response's `usage`, or is estimated
when a server leaves it out.
"""

from __future__ import annotations

from typing import Any

from actors.agent._profile import OpenAIBrainConfig
from actors.agent._prompt import BrainCall, user_prompt
from actors.agent._reply import reply_json_schema
from actors.agent.brains._http import HttpBrain
from actors.agent.brains._protocol import BrainAnswer, estimate_tokens, usage_of

__all__ = ("OpenAIBrain",)


class OpenAIBrain(HttpBrain[OpenAIBrainConfig]):
    """Answers through an OpenAI-compatible chat-completions endpoint."""

    backend = "openai"
    provider = "the OpenAI endpoint"

    def wire_headers(self, key: str | None) -> dict[str, str]:
        """A bearer token, when there is a key: local servers need none."""
        return {"Authorization": f"Bearer {key}"} if key else {}

    def payload(self, call: BrainCall) -> dict[str, Any]:
        """The request body for one call."""
        return {
            "model": self._profile.model,
            "messages": [
                {"role": "system", "content": self._system},
                {"role": "user", "content": user_prompt(call, self._profile)},
            ],
            "max_tokens": self._profile.max_output_tokens,
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "reply",
                    "schema": reply_json_schema(self._profile.peers),
                    "strict": False,
                },
            },
        }

    async def reply(self, call: BrainCall) -> BrainAnswer:
        payload = self.payload(call)
        body = await self.post("chat/completions", payload)
        try:
            message = body["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            raise self.answered_without("choices[0].message") from None
        # A refusal comes instead of content; it is still the model's answer, so it reaches
        # the room as a (malformed) plain message rather than vanishing.
        text = message.get("content") or message.get("refusal") or ""
        usage = body.get("usage") or {}
        prompt = usage.get("prompt_tokens")
        completion = usage.get("completion_tokens")
        if not isinstance(prompt, int) or not isinstance(completion, int):
            prompt = estimate_tokens(*(m["content"] for m in payload["messages"]))
            completion = estimate_tokens(text)
        return BrainAnswer(text=str(text), usage=usage_of(prompt, completion))
