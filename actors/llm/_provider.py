"""Calling one provider: one httpx client per provider, its key in the client's headers, and
every way a call can fail as a typed `ProviderFailure`.

A 429 or 5xx answer, or no connection, is tried again after a backoff (the provider's
`Retry-After` when it gives one, else doubling from `backoff_s`), as long as the wait and
another try fit before the call's deadline; past it the last failure is the answer. A 4xx
other than those is the request's fault and is never tried again. The key is sent to the
provider only: it is in no envelope, no log line and no error message.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import httpx

from actors.llm._options import ProviderSettings
from actors.llm._wire import RETRYABLE_STATUS, path_for, provider_message
from schemas import ErrorCode

__all__ = ("ProviderClient", "ProviderFailure")


@dataclass
class ProviderFailure(Exception):
    """The provider gave no usable answer: a typed code, and whether later may help."""

    code: ErrorCode
    message: str
    retryable: bool
    status: int | None = None
    retry_after_s: float | None = None
    """How long the provider asked to wait before trying again (`Retry-After`)."""

    def __str__(self) -> str:
        return self.message


class ProviderClient:
    """One provider's HTTP client."""

    def __init__(self, name: str, settings: ProviderSettings, retries: int, backoff_s: float):
        self.name, self.settings = name, settings
        self._retries, self._backoff_s = retries, backoff_s
        key = settings.key()
        headers = {"Accept": "application/json"}
        if settings.api == "anthropic":
            headers["anthropic-version"] = settings.anthropic_version
            if key:
                headers["x-api-key"] = key
        elif key:
            headers["Authorization"] = f"Bearer {key}"
        # Each request gets the time left before its deadline as its timeout.
        self._client = httpx.AsyncClient(
            base_url=settings.base_url.rstrip("/") + "/",
            headers=headers,
            timeout=None,  # noqa: S113
        )

    async def close(self) -> None:
        await self._client.aclose()

    async def complete(self, body: dict[str, Any], deadline: float) -> dict[str, Any]:
        """POST `body` and return the provider's JSON answer, trying again within `deadline`
        (a `time.monotonic()` instant).

        Raises:
            ProviderFailure: no usable answer before the deadline.
        """
        wait = self._backoff_s
        for attempt in range(self._retries + 1):
            try:
                return await self._once(body, deadline)
            except ProviderFailure as failure:
                pause = failure.retry_after_s if failure.retry_after_s is not None else wait
                last = attempt == self._retries
                if not failure.retryable or last or time.monotonic() + pause >= deadline:
                    raise
                await asyncio.sleep(pause)  # a backoff the provider asked for, not a sync
                wait *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    async def _once(self, body: dict[str, Any], deadline: float) -> dict[str, Any]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ProviderFailure(
                ErrorCode.DEADLINE_EXCEEDED, f"no time left to ask {self.name}", False
            )
        try:
            response = await self._client.post(
                path_for(self.settings.api), json=body, timeout=httpx.Timeout(left)
            )
        except httpx.TimeoutException:
            raise ProviderFailure(
                ErrorCode.DEADLINE_EXCEEDED,
                f"provider {self.name} gave no answer within {left:.1f} s",
                False,
            ) from None
        except httpx.TransportError as exc:
            raise ProviderFailure(
                ErrorCode.AGENT_UNAVAILABLE, f"provider {self.name} unreachable: {exc!r}", True
            ) from None
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if response.status_code >= 400:
            detail = provider_message(answer) or response.text[:200]
            raise ProviderFailure(
                ErrorCode.RATE_LIMITED
                if response.status_code == 429
                else ErrorCode.AGENT_UNAVAILABLE
                if response.status_code in RETRYABLE_STATUS
                else ErrorCode.INVALID_REQUEST,
                f"provider {self.name} answered HTTP {response.status_code}: {detail}",
                response.status_code in RETRYABLE_STATUS,
                response.status_code,
                _seconds(response.headers.get("retry-after")),
            )
        if not isinstance(answer, dict):
            raise ProviderFailure(
                ErrorCode.AGENT_UNAVAILABLE,
                f"provider {self.name} answered with a body that is not a JSON object",
                True,
                response.status_code,
            )
        return answer


def _seconds(value: str | None) -> float | None:
    try:
        return min(max(float(value), 0.0), 60.0) if value else None
    except ValueError:
        return None
