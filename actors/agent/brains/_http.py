"""What the HTTP brains share: the client's lifecycle, keys, and provider errors as BrainErrors.

A hosted provider's brain is two things: a wire format (the request body, the headers that
carry its key and version, where the text and usage sit in the answer) and everything around
it, which is the same for every provider. `HttpBrain` is the second, written once: it opens
one httpx client in `start()` and closes it in `close()`, finds the key, POSTs and maps every
way a request can fail onto the agent host's error model; a provider's module subclasses it
and says only its wire format.

httpx is the one async HTTP client of the project: HTTP/1.1 keep-alive pools, strict
timeouts and typed transport errors, with no framework attached. A provider's answer maps
onto the agent host's error model one way for every backend: no answer in time, no
connection, rate limiting, overload and server errors are `AGENT_UNAVAILABLE` and retryable
(the host's caller may send the call again); a request the provider refuses (bad key,
unknown model, invalid request) is `INTERNAL_ERROR` and not retryable, since sending it again
cannot help. A body that is not the provider's JSON (a proxy's HTML error page), or JSON
without the fields the wire format promises, is treated as unavailable. Tool calls the model
still gets wrong after being told what was wrong (actors/agent/brains/_tools.py) are
`INVALID_REQUEST` and not retryable: the fault is the model's answer, not the service.
"""

from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Generic, TypeVar

import httpx

from actors.agent._profile import AgentProfile, AnthropicBrainConfig, OpenAIBrainConfig
from actors.agent._prompt import system_prompt
from actors.agent.brains._protocol import BrainError
from actors.agent.brains._tools import ParsedToolCalls
from actors.llm import RETRYABLE_STATUS, provider_message
from schemas import ErrorCode

log = logging.getLogger("parley.actors.agent")

__all__ = ("HttpBrain",)

_Config = TypeVar("_Config", bound=OpenAIBrainConfig | AnthropicBrainConfig)


class HttpBrain(ABC, Generic[_Config]):
    """A brain behind a hosted provider's HTTP API; subclasses give the wire format.

    A subclass names its `backend` and its `provider` (as error messages call it), says which
    headers carry the key (`wire_headers`), may add to the system prompt (`system_text`), and
    builds its requests and reads its answers in `reply()`, sending them with `post()`.
    """

    backend: ClassVar[str]
    provider: ClassVar[str]
    """How error messages name the service: "the OpenAI endpoint", "the Anthropic API"."""

    def __init__(self, profile: AgentProfile, config: _Config) -> None:
        self._profile = profile
        self._config = config
        self._system = self.system_text(profile)
        self._client: httpx.AsyncClient | None = None

    def system_text(self, profile: AgentProfile) -> str:
        """The system prompt every request carries: seed 001's rules and the profile's own."""
        return system_prompt(profile)

    @abstractmethod
    def wire_headers(self, key: str | None) -> dict[str, str]:
        """The provider's own headers: the key (when there is one) and any API version."""

    def api_key(self) -> str | None:
        """The key from the profile, else from the environment variable it names, else none.

        Local OpenAI-compatible servers (vLLM, Ollama, llama.cpp) need no key.
        """
        if self._config.api_key:
            return self._config.api_key
        if self._config.api_key_env:
            return os.environ.get(self._config.api_key_env) or None
        return None

    async def start(self) -> None:
        """Open the client; its timeout bounds every phase of a request. A key named by a
        variable this host does not have is said once: `parley up` gives provider keys to
        the LLM gateway alone, and a profile copied from a comment sent every request
        without one, each refused by the provider, with nothing said at start."""
        env = self._config.api_key_env
        if not self._config.api_key and env and not os.environ.get(env):
            log.warning(
                f"{env} is not set in this agent host's environment: its model requests go "
                "without a key, which a hosted provider refuses. Under `parley up` provider "
                'keys reach the LLM gateway alone: use `backend = "gateway"` (README, "A real '
                'model"); a local server that needs no key: `api_key_env = ""`',
                extra={"api_key_env": env, "base_url": self._config.base_url},
            )
        self._client = httpx.AsyncClient(
            base_url=self._config.base_url.rstrip("/") + "/",
            headers={"Accept": "application/json", **self.wire_headers(self.api_key())},
            timeout=httpx.Timeout(self._config.timeout_s),
        )

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        """POST `payload` to `path` (below the base URL) and return the provider's JSON object.

        Raises:
            BrainError: timeout, transport failure, an error status, or a body that is not a
                JSON object.
        """
        if self._client is None:
            raise RuntimeError(f"{type(self).__name__}.reply() before start()")
        try:
            response = await self._client.post(path, json=payload)
        except httpx.TimeoutException:
            raise BrainError(
                ErrorCode.AGENT_UNAVAILABLE,
                f"{self.provider} gave no answer within {self._client.timeout.read:g} s",
                retryable=True,
            ) from None
        except httpx.TransportError as exc:
            raise BrainError(
                ErrorCode.AGENT_UNAVAILABLE, f"{self.provider} unreachable: {exc!r}", retryable=True
            ) from None
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code >= 400:
            detail = provider_message(body) or response.text[:200]
            retryable = response.status_code in RETRYABLE_STATUS
            code = ErrorCode.AGENT_UNAVAILABLE if retryable else ErrorCode.INTERNAL_ERROR
            raise BrainError(
                code,
                f"{self.provider} answered HTTP {response.status_code}: {detail}",
                retryable=retryable,
            )
        if not isinstance(body, dict):
            raise BrainError(
                ErrorCode.AGENT_UNAVAILABLE,
                f"{self.provider} answered HTTP {response.status_code} with a body that is not "
                f"a JSON object: {response.text[:120]!r}",
                retryable=True,
            )
        return body

    def answered_without(self, what: str) -> BrainError:
        """The error for a JSON answer that lacks what the wire format promises."""
        return BrainError(
            ErrorCode.AGENT_UNAVAILABLE, f"{self.provider} answered without {what}", retryable=True
        )

    def still_malformed(self, parsed: ParsedToolCalls) -> BrainError:
        """The error for tool calls still malformed after the model was told what was wrong.

        A model is told once (like the Anthropic brain's one repair of its JSON); calls that
        are still wrong are the model's, not the service's, so asking the same again cannot
        help: the error is not retryable.
        """
        return BrainError(
            ErrorCode.INVALID_REQUEST,
            f"the model behind {self.provider} made malformed tool calls again after being "
            f"told what was wrong: {parsed.summary()[:300]}",
            retryable=False,
        )
