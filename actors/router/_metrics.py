"""What the router tells an operator through Prometheus: sessions ended, by stop reason.

A session's end is counted when the input that ended it is acked (`Outbox.when_acked`), once
its ending event (`session_completed`, `session_failed`, `session_canceled`) is stored. An
input is acked once, so an end is counted once: an input redelivered after a crash, whose
event the first attempt stored but did not ack, is counted by the redelivery (which JetStream
answers as a duplicate of the stored event), and the first attempt counted nothing.
"""

from __future__ import annotations

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
            "once the input that ended the session is acked.",
            ["actor", "flow", "stop_reason"],
            registry=registry,
        )

    def count(self, ctx: Context, event: SessionEvent) -> None:
        """Count `event` if it ends a session, once its input is acked."""
        if event.event_type not in ENDING_EVENTS or event.stop_reason is None:
            return
        flow = "orchestrated" if event.payload.get("orchestrated") else "collaboration"
        ctx.outbox.when_acked(self._counter.labels(self._actor_id, flow, event.stop_reason).inc)
