"""The `gateway` brain: the OpenAI or Anthropic brain, its model calls sent through the gate
to the LLM gateway instead of to the provider, so the agent host holds no provider key.

The wire formats stay the providers' own (actors/agent/brains/_openai.py, _anthropic.py): the
brain builds the same request body, and where the direct brain POSTs it, this one sends the
messages and the rest of the body as an `llm_request` (actors/agent/_model_calls.py) and
reads the provider's answer from the `llm_response`'s `body`, with the gateway's response
guardrails applied. A model call the gate or the gateway refuses, or that fails at the
provider, becomes a `BrainError` with the code it came with.
"""

from __future__ import annotations

import asyncio
from typing import Any

from actors.agent._model_calls import current_turn
from actors.agent._profile import (
    AgentProfile,
    AnthropicBrainConfig,
    GatewayBrainConfig,
    OpenAIBrainConfig,
)
from actors.agent.brains._anthropic import AnthropicBrain
from actors.agent.brains._openai import OpenAIBrain
from actors.agent.brains._protocol import Brain, BrainError
from bus import ConfigError
from schemas import ErrorCode, LlmContext, LlmRequest, LlmResponse, utc_now

__all__ = ("gateway_brain",)


class _ViaGateway:
    """Replaces the HTTP brain's client: start, close and post go through the gate."""

    backend = "gateway"
    _gateway: GatewayBrainConfig
    _profile: AgentProfile

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Ask the gateway for what the direct brain would POST to `path`."""
        turn = current_turn()
        if turn is None:
            raise RuntimeError("a gateway brain asked a model outside a handled message")
        options = dict(payload)
        messages = options.pop("messages")
        model = options.pop("model", self._profile.model)
        cap = options.pop("max_tokens", None)
        request_id = turn.next_request_id()
        request = LlmRequest(
            id=request_id,
            created_at=utc_now(),
            request_id=request_id,
            session_id=turn.session_id,
            task_id=turn.ctx.trace_id or request_id,
            step_id=request_id,
            model=model,
            api=self._gateway.api,
            messages=tuple(messages),
            options=options,
            context_metadata=LlmContext(source_provenance=turn.sources),
            max_output_tokens=cap,
            stream=self._gateway.stream,
            target=self._gateway.target,
        )
        waiting = turn.calls.expect(request_id)
        try:
            await turn.ctx.submit(request)
            answer = await asyncio.wait_for(waiting, self._gateway.timeout_s)
        except TimeoutError:
            raise BrainError(
                ErrorCode.AGENT_UNAVAILABLE,
                f"the LLM gateway gave no answer within {self._gateway.timeout_s:g} s",
                retryable=True,
            ) from None
        finally:
            turn.calls.forget(request_id)
        if not isinstance(answer, LlmResponse):  # the gate refused the model call
            raise BrainError(answer.code, answer.message, retryable=answer.retryable)
        if answer.status != "succeeded" or answer.error is not None:
            error = answer.error
            known = {str(c) for c in ErrorCode}
            code = ErrorCode(error.code) if error and error.code in known else None
            raise BrainError(
                code or ErrorCode.AGENT_UNAVAILABLE,
                f"the LLM gateway answered {answer.status}: {error.message if error else ''}",
                retryable=bool(error and error.retryable),
            )
        return answer.body


class _GatewayOpenAI(_ViaGateway, OpenAIBrain):
    pass


class _GatewayAnthropic(_ViaGateway, AnthropicBrain):
    pass


def gateway_brain(profile: AgentProfile, config: GatewayBrainConfig) -> Brain:
    """The brain of a `backend = "gateway"` profile, speaking `config.api`'s wire format."""
    if not profile.model:
        raise ConfigError(f"agent profile {profile.name!r}: a gateway brain needs `model`")
    brain: _GatewayOpenAI | _GatewayAnthropic
    if config.api == "anthropic":
        brain = _GatewayAnthropic(
            profile, AnthropicBrainConfig(backend="anthropic", base_url="", api_key_env=None)
        )
    else:
        brain = _GatewayOpenAI(
            profile, OpenAIBrainConfig(backend="openai", base_url="", api_key_env=None)
        )
    brain._gateway = config
    return brain
