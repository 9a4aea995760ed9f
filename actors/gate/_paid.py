"""What an admitted envelope has paid before it was delivered, so it is not charged twice.

An envelope whose counters were committed in part (another of them lost a compare-and-set to
another gate replica) is decided again; the counters of its that were committed hold its
charge, and deciding it again must not charge them twice. Remembered until it is delivered.
Kept per process (bounded): a redelivery to another replica, or after a crash between the
commit and the delivery, is charged again (a gap: counters do not remember who paid them).
"""

from __future__ import annotations

from collections import OrderedDict

from actors.gate._decide import NOTHING_PAID, Allow, Paid, session_key_charged, spends_rate
from actors.gate._plan import Deny
from actors.gate._records import Position, rate_key, trace_key

__all__ = ("PaidCharges",)


class PaidCharges:
    """Per envelope id, the counters its charge is committed to though it is not delivered."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._paid: OrderedDict[str, Paid] = OrderedDict()

    def of(self, envelope_id: str) -> Paid:
        """The counters that already hold `envelope_id`'s charge, and its session's charge."""
        return self._paid.get(envelope_id, NOTHING_PAID)

    def note(
        self,
        envelope_id: str,
        outcome: Allow | Deny | Position,
        failure: Exception | None,
        committed: set[str],
    ) -> None:
        """After a round: forget a delivered envelope; remember what a failed admitted one
        has paid (the `committed` counters among those it was charged)."""
        if failure is None:
            self._paid.pop(envelope_id, None)
            return
        if not isinstance(outcome, Allow):
            return
        route = outcome.route
        charged = {trace_key(route.position.trace_id)}
        if spends_rate(route):
            charged.add(rate_key(route.sub.sender, route.target))
        session_k = session_key_charged(route)
        if session_k:
            charged.add(session_k)
        paid = self.of(envelope_id).keys | (charged & committed)
        if paid:
            self._paid[envelope_id] = Paid(paid, outcome.session_charge)
            self._paid.move_to_end(envelope_id)
            if len(self._paid) > self._capacity:
                self._paid.popitem(last=False)
