"""A batch of submissions as the gate decided it, between deciding and publishing
(actors/gate/_actor.py): what was judged of each, the ledger the batch spent from, and what
committing it involves."""

from __future__ import annotations

from dataclasses import dataclass

from actors.gate._batch import Judged
from actors.gate._decide import Allow, Ledger
from actors.gate._plan import Deny, Route
from actors.gate._records import Position
from bus import Context
from schemas import AnyEnvelope

__all__ = ("Decided", "Verdict")


@dataclass(frozen=True, slots=True)
class Verdict:
    """A submission of the batch and what was decided about it (actors/gate/_batch.py)."""

    envelope: AnyEnvelope
    ctx: Context
    judged: Judged

    @property
    def outcome(self) -> Allow | Deny | Position:
        return self.judged.outcome


@dataclass(frozen=True, slots=True)
class Decided:
    """A decided batch: its verdicts, the ledger they spent from, and what that involves."""

    verdicts: list[Verdict]
    ledger: Ledger
    new_traces: set[str]
    """Root trace records: written with their root's delivery, never compare-and-set."""
    local: frozenset[str]
    """Rate keys decided against this replica's own leases: nothing to commit."""
    planned: list[Route]
    now_ms: int
    returned: dict[str, tuple[float, int]]
    """Leases given back to their shared buckets before deciding (actors/gate/_rate_leases.py)."""
