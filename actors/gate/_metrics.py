"""What the gate tells an operator through Prometheus: its decisions, by kind and code.

A decision is counted once its effects are stored and its input acked (`Outbox.when_acked`),
so a message retried after a failed publish is counted when it finally goes through. An
envelope delivered again as recorded after a crash (the gate finds its position already
written) is not counted again: it was decided before. A refusal redelivered after a crash
between storing its effects and its ack is decided, and counted, again: nothing stored tells
the gate it was refused before.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from bus import Context
from schemas import Decision

__all__ = ("DecisionCounter",)


class DecisionCounter:
    """`parley_gate_decisions_total{actor, kind, decision, code}`."""

    def __init__(self, registry: CollectorRegistry, actor_id: str) -> None:
        self._actor_id = actor_id
        self._counter = Counter(
            "parley_gate_decisions",
            "Envelopes the gate decided, by envelope kind, decision (allow, deny) and error "
            "code (none when allowed); counted once the decision is stored.",
            ["actor", "kind", "decision", "code"],
            registry=registry,
        )

    def count(self, ctx: Context, decision: Decision) -> None:
        """Count `decision` once the input it decides is acked."""
        allowed = "allow" if decision.allowed else "deny"
        code = str(decision.code) if decision.code is not None else "none"
        labels = self._counter.labels(self._actor_id, decision.envelope_kind, allowed, code)
        ctx.outbox.when_acked(labels.inc)
