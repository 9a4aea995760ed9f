"""What the HTTP brains share: one httpx client each, keys, and provider errors as BrainErrors.

httpx is the one async HTTP client of the project: HTTP/1.1 keep-alive pools, strict
timeouts and typed transport errors, with no framework attached. A provider's answer maps
onto the agent host's error model one way for every backend: no answer in time, no
connection, rate limiting, overload and server errors are `AGENT_UNAVAILABLE` and retryable;
a request the provider refuses (bad key, unknown model, invalid request) is `INTERNAL_ERROR`
and not retryable, since sending it again cannot help. A body that is not the provider's JSON
(a proxy's HTML error page) is treated as unavailable.
"""

from __future__ import annotations

import os
from typing import Any

import httpx

from actors.agent._profile import AnthropicBrainConfig, OpenAIBrainConfig
from actors.agent.brains._protocol import BrainError
from schemas import ErrorCode

__all__ = ("api_key", "make_client", "post_json")

_RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})


def api_key(config: OpenAIBrainConfig | AnthropicBrainConfig) -> str | None:
    """The key from the profile, else from the environment variable it names, else none.

    Local OpenAI-compatible servers (vLLM, Ollama, llama.cpp) need no key.
    """
    if config.api_key:
        return config.api_key
    if config.api_key_env:
        return os.environ.get(config.api_key_env) or None
    return None


def make_client(
    config: OpenAIBrainConfig | AnthropicBrainConfig, headers: dict[str, str]
) -> httpx.AsyncClient:
    """A client for one provider; the timeout bounds every phase of a request."""
    return httpx.AsyncClient(
        base_url=config.base_url.rstrip("/") + "/",
        headers=headers,
        timeout=httpx.Timeout(config.timeout_s),
    )


def _provider_message(body: Any) -> str:
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            kind = error.get("type") or error.get("code") or "error"
            return f"{kind}: {error.get('message', '')}".strip()
    return ""


async def post_json(
    client: httpx.AsyncClient, path: str, payload: dict[str, Any], provider: str
) -> dict[str, Any]:
    """POST `payload` and return the provider's JSON object.

    Raises:
        BrainError: timeout, transport failure, an error status, or a body that is not JSON.
    """
    try:
        response = await client.post(path, json=payload)
    except httpx.TimeoutException:
        timeout = client.timeout.read
        raise BrainError(
            ErrorCode.AGENT_UNAVAILABLE,
            f"{provider} gave no answer within {timeout:g} s",
            retryable=True,
        ) from None
    except httpx.TransportError as exc:
        raise BrainError(
            ErrorCode.AGENT_UNAVAILABLE, f"{provider} unreachable: {exc!r}", retryable=True
        ) from None
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code >= 400:
        detail = _provider_message(body) or response.text[:200]
        retryable = response.status_code in _RETRYABLE_STATUS
        code = ErrorCode.AGENT_UNAVAILABLE if retryable else ErrorCode.INTERNAL_ERROR
        raise BrainError(
            code, f"{provider} answered HTTP {response.status_code}: {detail}", retryable=retryable
        )
    if not isinstance(body, dict):
        raise BrainError(
            ErrorCode.AGENT_UNAVAILABLE,
            f"{provider} answered HTTP {response.status_code} with a body that is not a JSON "
            f"object: {response.text[:120]!r}",
            retryable=True,
        )
    return body
