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

import httpx

from actors.agent._profile import AgentProfile, OpenAIBrainConfig
from actors.agent._prompt import BrainCall, system_prompt, user_prompt
from actors.agent._reply import reply_json_schema
from actors.agent.brains._http import api_key, make_client, post_json
from actors.agent.brains._protocol import BrainAnswer, BrainError, estimate_tokens, usage_of
from schemas import ErrorCode

__all__ = ("OpenAIBrain",)


class OpenAIBrain:
    """Answers through an OpenAI-compatible chat-completions endpoint."""

    backend = "openai"

    def __init__(self, profile: AgentProfile, config: OpenAIBrainConfig) -> None:
        self._profile = profile
        self._config = config
        self._system = system_prompt(profile)
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        headers = {"Accept": "application/json"}
        key = api_key(self._config)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._client = make_client(self._config, headers)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

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
        if self._client is None:
            raise RuntimeError("OpenAIBrain.reply() before start()")
        payload = self.payload(call)
        body = await post_json(self._client, "chat/completions", payload, "the OpenAI endpoint")
        try:
            message = body["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            raise BrainError(
                ErrorCode.AGENT_UNAVAILABLE,
                "the OpenAI endpoint answered without choices[0].message",
                retryable=True,
            ) from None
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
