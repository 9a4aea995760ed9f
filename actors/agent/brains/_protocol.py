"""The one contract every brain backend speaks: a call in, a text and its token usage out.

A brain only produces text; checking that text against seed 001's reply contract is the agent
host's job (actors/agent/_reply.py), done the same way for every backend, so no backend can be more
lenient than another. A brain that cannot answer raises `BrainError` with the error code and
whether trying again may help; the host turns it into an `error` envelope for the caller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from actors.agent._prompt import BrainCall
from actors.delegation import AgentRequest
from schemas import ErrorCode, TokenUsage

__all__ = ("Brain", "BrainAnswer", "BrainError", "estimate_tokens", "usage_of")


@dataclass(frozen=True, slots=True)
class BrainAnswer:
    """A brain's raw answer: the text, checked by the host against the reply contract, or
    requests to other agents (then `text` is only what the brain said beside them, and the
    host asks again once the results are in: actors/delegation/)."""

    text: str
    usage: TokenUsage
    requests: tuple[AgentRequest, ...] = ()


class BrainError(Exception):
    """The brain could not answer; `retryable` says whether the same call may succeed later."""

    def __init__(self, code: ErrorCode, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable


class Brain(Protocol):
    """What the agent host needs from a backend."""

    @property
    def backend(self) -> str:
        """The backend's name, for logs, errors and the registry."""
        ...

    async def start(self) -> None:
        """Open what the brain needs (an HTTP client, a child process); called once."""
        ...

    async def reply(self, call: BrainCall) -> BrainAnswer:
        """Answer one call.

        Raises:
            BrainError: the brain cannot answer this call now.
        """
        ...

    async def close(self) -> None:
        """Release what `start()` opened; safe to call more than once."""
        ...


def estimate_tokens(*texts: str) -> int:
    """About four characters a token: for backends that report no usage of their own."""
    return sum(math.ceil(len(text) / 4) for text in texts)


def usage_of(prompt: int, completion: int) -> TokenUsage:
    """A usage record whose total is the sum of its parts."""
    return TokenUsage(prompt=prompt, completion=completion, total=prompt + completion)
