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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from actors.llm._options import ProviderSettings
from actors.llm._stream import StreamError, StreamReader, sse_data, stream_body
from actors.llm._wire import RETRYABLE_STATUS, path_for, provider_message
from schemas import ErrorCode, redact

__all__ = ("OnText", "ProviderClient", "ProviderFailure")

OnText = Callable[[str], Awaitable[None]]
"""Called with each piece of a streamed answer's text as the provider writes it."""


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
        key = self._key = settings.key()
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

    def _scrub(self, text: str) -> str:
        """`text` without this client's own key (before any cut could leave half of it)."""
        return text.replace(self._key, "[REDACTED:api_key]") if self._key else text

    async def close(self) -> None:
        await self._client.aclose()

    async def complete(
        self, body: dict[str, Any], deadline: float, on_text: OnText | None = None
    ) -> dict[str, Any]:
        """POST `body` and return the provider's JSON answer, trying again within `deadline`
        (a `time.monotonic()` instant).

        With `on_text`, the answer is asked for as a stream and each piece of its text is
        handed to `on_text` as it comes; the answer returned is still the whole one, in the
        provider's non-streamed shape. A stream that already gave text is never tried again
        (its text would come twice): its failure is the answer. The deadline cuts a stream
        that stalls.

        Raises:
            ProviderFailure: no usable answer before the deadline.
        """
        wait = self._backoff_s
        for attempt in range(self._retries + 1):
            gave_text = [False]
            try:
                if on_text is None:
                    return await self._once(body, deadline)
                return await self._streamed(body, deadline, on_text, gave_text)
            except ProviderFailure as failure:
                # Its text reaches the agent and its person: a provider that echoes the
                # request's Authorization header (an attack review's did) shows no key. Its
                # own key first, whatever its shape; then anything shaped like a secret.
                failure.message = redact(self._scrub(failure.message))
                pause = failure.retry_after_s if failure.retry_after_s is not None else wait
                last = attempt == self._retries
                late = time.monotonic() + pause >= deadline
                if not failure.retryable or last or late or gave_text[0]:
                    raise
                await asyncio.sleep(pause)  # a backoff the provider asked for, not a sync
                wait *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    async def _streamed(
        self, body: dict[str, Any], deadline: float, on_text: OnText, gave_text: list[bool]
    ) -> dict[str, Any]:
        left = self._left(deadline)
        api = self.settings.api
        try:
            async with asyncio.timeout(left):
                async with self._client.stream(
                    "POST", path_for(api), json=stream_body(api, body), timeout=httpx.Timeout(left)
                ) as response:
                    if "text/event-stream" not in response.headers.get("content-type", ""):
                        await response.aread()  # an error, or a server that does not stream
                        return self._read(response)
                    reader = StreamReader(api)
                    async for data in sse_data(response.aiter_lines()):
                        piece = _read_event(reader, data)
                        if piece:
                            gave_text[0] = True
                            await on_text(piece)
                    return _read_answer(reader)
        except (TimeoutError, httpx.TimeoutException):
            raise ProviderFailure(
                ErrorCode.DEADLINE_EXCEEDED,
                f"provider {self.name}'s stream was not done within {left:.1f} s: cut",
                False,
            ) from None
        except httpx.TransportError as exc:
            raise ProviderFailure(
                ErrorCode.AGENT_UNAVAILABLE, f"provider {self.name} unreachable: {exc!r}", True
            ) from None
        except StreamError as exc:
            raise ProviderFailure(
                ErrorCode.AGENT_UNAVAILABLE, f"provider {self.name}'s stream: {exc}", True
            ) from None

    def _left(self, deadline: float) -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ProviderFailure(
                ErrorCode.DEADLINE_EXCEEDED, f"no time left to ask {self.name}", False
            )
        return left

    async def _once(self, body: dict[str, Any], deadline: float) -> dict[str, Any]:
        left = self._left(deadline)
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
        return self._read(response)

    def _read(self, response: httpx.Response) -> dict[str, Any]:
        """A whole (read) answer's JSON object, or its failure."""
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if response.status_code >= 400:
            detail = provider_message(answer) or self._scrub(response.text)[:200]
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


_ODD_EVENT = (KeyError, TypeError, ValueError, AttributeError, IndexError)
"""What reading an event of an unexpected shape raises: a provider's stream is untrusted input,
and an exception of its own would leave the call before its answer was kept (its request
redelivered, the provider called and billed again)."""


def _read_event(reader: StreamReader, data: str) -> str:
    try:
        return reader.feed(data)
    except _ODD_EVENT as exc:
        raise StreamError(f"an event it could not read: {exc!r}") from None


def _read_answer(reader: StreamReader) -> dict[str, Any]:
    try:
        return reader.answer()
    except _ODD_EVENT as exc:
        raise StreamError(f"an answer it could not read: {exc!r}") from None
