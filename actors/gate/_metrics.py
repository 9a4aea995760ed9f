"""What the gate tells an operator through Prometheus: its decisions, by kind and code.

A decision is counted when the input it decides is acked (`Outbox.when_acked`), and an input
is acked once: a message whose handler failed, or whose effects or ack were lost, is counted
by the attempt that goes through, never by the ones before it. So an envelope admitted before
a crash and delivered again as recorded after it is counted by that redelivery, once, and a
decision whose ack the server recorded is never redelivered to be counted twice.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter

from bus import Context
from schemas import Decision, ErrorCode

__all__ = ("DecisionCounter", "QuietRefusals")


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
        self._increments: dict[tuple[str, bool, ErrorCode | None], Callable[[], None]] = {}

    def count(self, ctx: Context, decision: Decision) -> None:
        """Count `decision` once the input it decides is acked."""
        key = (decision.envelope_kind, decision.allowed, decision.code)
        increment = self._increments.get(key)
        if increment is None:  # a few dozen kinds and codes: each child looked up once
            allowed = "allow" if decision.allowed else "deny"
            code = str(decision.code) if decision.code is not None else "none"
            labels = self._counter.labels(self._actor_id, decision.envelope_kind, allowed, code)
            increment = self._increments[key] = labels.inc
        ctx.outbox.when_acked(increment)


class QuietRefusals:
    """`parley_gate_quiet_refusals_total{actor}`: refusals that recorded nothing, their
    senders being past their refusal budgets (actors/gate/_refusal_budget.py, which logs
    each sender whose budget runs out). Counted as decided: such a refusal has no effect to
    wait for. Not by sender: under an open broker any subject token is a sender."""

    def __init__(self, registry: CollectorRegistry | None, actor_id: str) -> None:
        counter = Counter(
            "parley_gate_quiet_refusals",
            "Submissions refused without an error, a decision or an id claim, their sender "
            "being past its refusals_per_minute.",
            ["actor"],
            registry=registry,
        )
        self._increment = counter.labels(actor_id).inc

    def count(self, sender: str) -> None:
        self._increment()
