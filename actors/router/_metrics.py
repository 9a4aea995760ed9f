"""What the router tells an operator through Prometheus: sessions ended, by stop reason.

A session's end is counted once its ending event (`session_completed`, `session_failed`,
`session_canceled`) is stored and the input that ended it acked (`Outbox.when_acked`), and
only when JetStream stored that event for the first time: the event's id derives from the
input, so an input redelivered after a crash publishes it again as a duplicate, which
JetStream drops and says so (`PubAck.duplicate`) within the stream's duplicate window.
"""

from __future__ import annotations

import asyncio

from nats.js.api import PubAck
from prometheus_client import CollectorRegistry, Counter

from bus import Context
from schemas import SessionEvent

__all__ = ("ENDING_EVENTS", "SessionEnds")

ENDING_EVENTS = frozenset({"session_completed", "session_failed", "session_canceled"})


class SessionEnds:
    """`parley_sessions_ended_total{actor, flow, stop_reason}`."""

    def __init__(self, registry: CollectorRegistry, actor_id: str) -> None:
        self._actor_id = actor_id
        self._counter = Counter(
            "parley_sessions_ended",
            "Sessions ended, by flow (collaboration, orchestrated) and stop reason; counted "
            "once the ending event is stored for the first time.",
            ["actor", "flow", "stop_reason"],
            registry=registry,
        )

    def count(self, ctx: Context, event: SessionEvent, stored: asyncio.Future[PubAck]) -> None:
        """Count `event` if it ends a session, once its input is acked and if `stored` was
        not a duplicate of an earlier delivery's."""
        if event.event_type not in ENDING_EVENTS or event.stop_reason is None:
            return
        flow = "orchestrated" if event.payload.get("orchestrated") else "collaboration"
        labels = self._counter.labels(self._actor_id, flow, event.stop_reason)

        def acked() -> None:
            if stored.done() and not stored.cancelled() and stored.exception() is None:
                if not stored.result().duplicate:
                    labels.inc()

        ctx.outbox.when_acked(acked)
