"""Effects a handler publishes, pipelined, and settled before its input is acknowledged.

A handler's publishes go out at once, answered on the runtime's reply inbox
(bus/_ackinbox.py); the acknowledgements of a whole batch's effects are awaited together once
its handlers have run. Only when JetStream has
stored every effect of a message is that message acked, so a crash at any point either
redelivers the input (and the effects, re-published with the same `Nats-Msg-Id`, are dropped
as duplicates) or finds the work complete.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from nats.js.api import PubAck
from opentelemetry.trace import Span

from bus import _tracing
from bus._ackinbox import AckInbox
from bus._fastbatch import FastBatches
from bus._headers import TRACEPARENT

__all__ = ("EffectError", "Outbox", "settle", "wait_all")


class EffectError(RuntimeError):
    """JetStream did not store an effect (refused it, or did not answer in time)."""


class Outbox:
    """The pending publishes of one message being handled."""

    __slots__ = ("_acked", "_inbox", "_stall_s", "batches", "pending", "span")

    def __init__(self, inbox: AckInbox, stall_s: float = 5.0) -> None:
        self._inbox = inbox
        self._stall_s = stall_s
        self.pending: list[asyncio.Future[Any]] = []
        self.batches: FastBatches | None = None
        """The fast batches of the handled batch this message is in, when the runtime
        opened them (bus/_fastbatch.py)."""
        self._acked: list[Callable[[], None]] = []
        self.span: Span | None = None
        """The span of the message being handled while tracing is on (bus/_tracing.py):
        each envelope published here is a child of it."""

    def when_acked(self, callback: Callable[[], None]) -> None:
        """Call `callback` once this message's effects are stored and its ack recorded.

        For counting a fact (a decision, a session's end) once it happened for good: a
        handler that fails, or whose effects or ack are lost, is retried and counts then.
        """
        self._acked.append(callback)

    def acked(self) -> None:
        """The runtime's word that this message is acked: run the `when_acked` callbacks."""
        callbacks, self._acked = self._acked, []
        for callback in callbacks:
            callback()

    async def publish(
        self, subject: str, payload: bytes, headers: dict[str, str]
    ) -> asyncio.Future[PubAck]:
        """Send one effect now; its acknowledgement is awaited by `settle()`.

        Returns the acknowledgement's future, for a caller that needs the stored sequence.

        Raises:
            PublishStalled: too many publishes await their acks for longer than `stall_s`
                (the server is down or overloaded): the handler fails and its message is
                retried later instead of blocking for ever.
        """
        if _tracing.tracer is not None and TRACEPARENT in headers:
            _tracing.publish_span(self.span, subject, payload, headers)
        future = await self._inbox.publish(subject, payload, headers, stall_s=self._stall_s)
        self.pending.append(future)
        return future

    async def publish_batched(
        self, stream: str, subject: str, payload: bytes, headers: dict[str, str]
    ) -> None:
        """Send one effect of `stream` in the handled batch's fast batch for that stream,
        answered once for the whole batch; as `publish` when no fast batches are open.

        For effects whose stored sequence nobody reads (deliveries, decisions): a fast
        batch's answer gives a count, not each message's sequence. Settled like the rest.

        Raises:
            MessageTooLarge, Exception: as `publish` (nothing is left waiting).
        """
        if self.batches is None:
            await self.publish(subject, payload, headers)
            return
        if _tracing.tracer is not None and TRACEPARENT in headers:
            _tracing.publish_span(self.span, subject, payload, headers)
        self.pending.append(await self.batches.publish(stream, subject, payload, headers))

    def include(self, future: asyncio.Future[PubAck]) -> None:
        """Settle this message only once `future`, an effect published elsewhere, is stored.

        For an effect another component owns (the auditor's chain appender, whose state
        follows the server's answer): it counts as one of this message's effects, but the
        outbox waits on it through a shield, so giving up on it at the settle deadline
        never cancels the publish itself.
        """
        self.pending.append(asyncio.shield(future))

    def __len__(self) -> int:
        return len(self.pending)

    def outcome(self) -> EffectError | None:
        """After `settle()`: None if every effect was stored, else why not (the first failure).

        Every failed effect's exception is read, not only the first: asyncio logs an unread
        one as "Future exception was never retrieved", which during a cluster election (every
        publish refused with a 503) buried the real log lines.
        """
        failure: EffectError | None = None
        for future in self.pending:
            if not future.done():
                failure = failure or EffectError(
                    f"{len(self.pending)} effect(s) not acknowledged in time"
                )
            elif future.cancelled():
                failure = failure or EffectError("effect publish cancelled")
            elif (exc := future.exception()) is not None:
                failure = failure or EffectError(f"effect refused: {exc!r}")
        return failure

    async def settle(self, timeout: float) -> int:
        """Wait until this outbox's effects are stored; return how many there were.

        Raises:
            EffectError: an effect was refused or not acknowledged within `timeout`.
        """
        await settle((self,), timeout)
        failure = self.outcome()
        if failure is not None:
            raise failure
        count = len(self.pending)
        self.pending = []
        return count


async def settle(outboxes: Sequence[Outbox], timeout: float) -> None:
    """Wait, up to `timeout`, for every effect of `outboxes`; read results with `outcome()`.

    Unanswered publishes are cancelled at the deadline, so `outcome()` reports them.
    """
    futures = [future for outbox in outboxes for future in outbox.pending if not future.done()]
    for future in await wait_all(futures, timeout):
        future.cancel()


async def wait_all(
    futures: Sequence[asyncio.Future[Any]], timeout: float
) -> list[asyncio.Future[Any]]:
    """Wait until every one of `futures` is done or `timeout` passed; return those not done.

    As `asyncio.wait(futures, timeout=timeout)` (nothing raised, nothing cancelled), one
    future at a time: the answers to a batch's effects come in bursts, so most are done by
    the time the one before them is, and this wakes once per burst. `asyncio.wait` adds and
    removes a callback on every future and runs each: for the gate's five futures per
    envelope that cost about 10 µs per envelope more.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    for index, future in enumerate(futures):
        if future.done():
            continue
        left = deadline - loop.time()
        if left > 0:
            await asyncio.wait((future,), timeout=left)
        if not future.done():
            return [late for late in futures[index:] if not late.done()]
    return []
