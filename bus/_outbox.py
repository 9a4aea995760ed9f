"""Effects a handler publishes, pipelined, and settled before its input is acknowledged.

A handler's publishes go out at once (`publish_async`) and their acknowledgements are awaited
together once the handler returns. Only when JetStream has stored every effect is the input
acked, so a crash at any point either redelivers the input (and the effects, re-published with
the same `Nats-Msg-Id`, are dropped as duplicates) or finds the work complete.
"""

from __future__ import annotations

import asyncio

from nats.js import JetStreamContext
from nats.js.api import PubAck

__all__ = ("EffectError", "Outbox")


class EffectError(RuntimeError):
    """JetStream did not store an effect (refused it, or did not answer in time)."""


class Outbox:
    """The pending publishes of one message being handled."""

    __slots__ = ("_js", "_pending")

    def __init__(self, js: JetStreamContext) -> None:
        self._js = js
        self._pending: list[asyncio.Future[PubAck]] = []

    async def publish(self, subject: str, payload: bytes, headers: dict[str, str]) -> None:
        """Send one effect now; its acknowledgement is awaited by `settle()`."""
        future = await self._js.publish_async(subject, payload, headers=headers)
        self._pending.append(future)

    def __len__(self) -> int:
        return len(self._pending)

    async def settle(self, timeout: float) -> int:
        """Wait until JetStream stored every effect; return how many there were.

        Raises:
            EffectError: an effect was refused or not acknowledged within `timeout`.
        """
        pending, self._pending = self._pending, []
        if not pending:
            return 0
        try:
            async with asyncio.timeout(timeout):
                results = await asyncio.gather(*pending, return_exceptions=True)
        except TimeoutError:
            for future in pending:
                future.cancel()
            raise EffectError(
                f"{len(pending)} effect(s) not acknowledged within {timeout}s"
            ) from None
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            raise EffectError(f"{len(failures)} effect(s) refused: {failures[0]!r}")
        return len(pending)
