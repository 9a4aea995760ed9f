"""What the auditor tells an operator through Prometheus: how far behind it is, and how long
since it last pinned the chain with a signed checkpoint.

- `parley_audit_lag_messages{actor, stream}`: facts stored in an input stream that the
  auditor has not yet recorded (its durable consumer's pending plus unacknowledged
  messages), read from the server every `LAG_POLL_S` seconds by the writer. A fact is acked
  only once its records are stored, so this is exactly what the audit history still lacks;
  it grows when the auditor stalls, however stale its own view.
- `parley_audit_checkpoint_age_seconds{actor}`: seconds since this auditor last stored a
  signed checkpoint (counted from when it opened the chain until its first).
- `parley_audit_unpinned_records{actor}`: records appended since the newest checkpoint, so an
  old checkpoint on an idle system (nothing to pin, none written) is told from a stuck one.

Gauges read at scrape time are read on the metrics server's thread: they only read numbers
the event loop wrote, never call into it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from nats.js.api import PubAck
from prometheus_client import Gauge

from bus import BusHandle, Input

__all__ = ("LAG_POLL_S", "AuditMetrics")

log = logging.getLogger("parley.actors.auditor")

LAG_POLL_S = 5.0
"""How often the writer asks the server how many facts wait for it."""


class _Pinned(Protocol):
    @property
    def unpinned(self) -> int: ...


class AuditMetrics:
    """The auditor's gauges, registered on its process's registry in `open()`."""

    def __init__(self, actor_id: str) -> None:
        self._actor_id = actor_id
        self._checkpoint_at = time.time()
        self._bus: BusHandle | None = None
        self._inputs: Sequence[Input] = ()
        self._lag: Gauge | None = None

    def open(
        self, bus: BusHandle, inputs: Sequence[Input], chain: Callable[[], _Pinned | None]
    ) -> None:
        """Register the gauges; `chain` gives the appender once the lease is held."""
        registry, actor = bus.metrics.registry, self._actor_id
        self._bus, self._inputs = bus, inputs
        self._lag = Gauge(
            "parley_audit_lag_messages",
            "Facts stored in an input stream and not yet recorded in the audit history.",
            ["actor", "stream"],
            registry=registry,
        )
        age = Gauge(
            "parley_audit_checkpoint_age_seconds",
            "Seconds since this auditor last stored a signed checkpoint.",
            ["actor"],
            registry=registry,
        )
        age.labels(actor).set_function(lambda: time.time() - self._checkpoint_at)
        unpinned = Gauge(
            "parley_audit_unpinned_records",
            "Records appended to the audit chain since its newest signed checkpoint.",
            ["actor"],
            registry=registry,
        )

        def count_unpinned() -> float:
            appender = chain()
            return float(appender.unpinned) if appender is not None else 0.0

        unpinned.labels(actor).set_function(count_unpinned)

    def checkpoint_stored(self, future: asyncio.Future[PubAck]) -> None:
        """A checkpoint's done-callback: restart the age once it is stored."""
        if not future.cancelled() and future.exception() is None:
            self._checkpoint_at = time.time()

    async def watch(self, stopping: asyncio.Event) -> None:
        """Read the lag of every input now and every `LAG_POLL_S` seconds until `stopping`."""
        while not stopping.is_set():
            await self._poll()
            try:
                async with asyncio.timeout(LAG_POLL_S):
                    await stopping.wait()
            except TimeoutError:
                continue

    async def _poll(self) -> None:
        if self._bus is None or self._lag is None:
            return
        for spec in self._inputs:
            try:
                info = await self._bus.js.consumer_info(spec.stream, spec.durable)
            except Exception as exc:  # the next poll tries again; the gauge keeps its value
                log.debug("audit lag not read", extra={"error": repr(exc)})
                continue
            waiting = (info.num_pending or 0) + (info.num_ack_pending or 0)
            self._lag.labels(self._actor_id, spec.stream).set(waiting)
