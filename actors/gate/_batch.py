"""A batch of submissions, planned and decided in order against one ledger: pure.

The gate reads what a batch needs between the two steps (the records of the envelopes' causes
before planning, the counters the plans spend from before deciding), so the orchestration is
two functions with the reads between them: `plan_batch()`, then `counters_needed()` to know
what to read, then `decide_batch()`. The gate calls them with what it read from KV
(actors/gate/_actor.py); the policy tests call them with records held in memory
(tests/support/gatesim.py), so both run the same rules in the same order.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from msgspec import Struct

from actors.gate._decide import NOTHING_PAID, Allow, Ledger, Paid, decide, required_keys
from actors.gate._plan import Deny, Route, Submission, plan
from actors.gate._records import Position, position_key, trace_key
from actors.gate._refusals import sender_position, waiting_on
from schemas import ErrorCode, PolicyBundle

__all__ = ("Judged", "counters_needed", "decide_batch", "new_traces", "plan_batch")

NO_BUNDLE = Deny(ErrorCode.INTERNAL_ERROR, "no_route", "the gate could not route this envelope")


@dataclass(frozen=True, slots=True)
class Judged:
    """What the gate decided about one submission of a batch."""

    outcome: Allow | Deny | Position
    """Admitted, refused, or (a Position) admitted before a crash and delivered again."""
    cause: Position | None = None
    """The sender's own position, where a refusal is delivered (None: unknown, forged)."""
    refused_return: Position | None = None
    """A refused answer's sender's position, inside the call it answers: the caller waiting on
    that call is told too, or it would wait for the answer for ever."""


def plan_batch(
    subs: Sequence[Submission],
    replayed: Sequence[Position | None],
    causes: Mapping[str, Struct | None],
    bundle: PolicyBundle | None,
    problem: str,
) -> list[Route | Deny | Position]:
    """Each submission's route (or refusal), from the records of the causes the gate holds;
    one admitted before a crash (`replayed`) keeps the position it was given."""
    routes: list[Route | Deny | Position] = []
    for sub, replay in zip(subs, replayed, strict=True):
        if replay is not None:
            routes.append(replay)
            continue
        cause = causes.get(position_key(sub.causation_id)) if sub.causation_id else None
        routes.append(plan(sub, cause if isinstance(cause, Position) else None, bundle, problem))
    return routes


def new_traces(routes: Sequence[Route | Deny | Position]) -> set[str]:
    """The trace records of roots: a root's trace cannot exist yet (it is named after the
    root), so it is neither read nor compare-and-set, but written with the root's delivery."""
    return {
        trace_key(route.position.trace_id)
        for route in routes
        if isinstance(route, Route) and route.is_root
    }


def counters_needed(routes: Sequence[Route], known: Collection[str]) -> list[str]:
    """The counters deciding `routes` reads, besides those already `known`."""
    wanted = (key for route in routes for key in required_keys(route) if key not in known)
    return list(dict.fromkeys(wanted))


def decide_batch(
    subs: Sequence[Submission],
    routes: Sequence[Route | Deny | Position],
    causes: Mapping[str, Struct | None],
    ledger: Ledger,
    bundle: PolicyBundle | None,
    paid: Callable[[str], Paid] = lambda _: NOTHING_PAID,
) -> list[Judged]:
    """Decide each route in order against `ledger` (which records what each admitted one
    spends, so the next is decided against it); `paid(envelope_id)` is what an earlier round
    of an envelope committed of its charge."""
    judged: list[Judged] = []
    for sub, route in zip(subs, routes, strict=True):
        if isinstance(route, Position):
            judged.append(Judged(route))
            continue
        if isinstance(route, Route) and bundle is not None:
            outcome: Allow | Deny = decide(route, ledger, bundle, paid(sub.envelope.id))
        else:
            outcome = route if isinstance(route, Deny) else NO_BUNDLE
        cause = sender_position(sub, causes)
        refused_return: Position | None = None
        # A second answer's call was answered already: nobody waits for it.
        if isinstance(outcome, Deny) and outcome.rule != "duplicate_answer":
            refused_return = waiting_on(sub.envelope, cause)
        judged.append(Judged(outcome, cause, refused_return))
    return judged
