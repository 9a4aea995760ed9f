"""Reading a run's history back from what JetStream stored, for the chaos checker.

No actor records anything for the checker: every fact is derived from the durable streams.

- The gate's decisions (`parley.decisions.>` on PARLEY_EVENTS): a decision on envelope E says
  the gate applied the submission of E; an allowed one says JetStream stored E on its
  receiver's deliver subject (the gate acks only then), so the receiver owes an effect; and a
  decision on an envelope caused by C, submitted by S, is S's effect of C. A person's
  `delegation_request` is a delegation, answered by the decision on an answer caused by it
  towards the person (or by the gate refusing the request: the person gets its error).
- A decision refusing an id already decided (`DUPLICATE_ENVELOPE`, rule `duplicate_id`) is
  the gate catching a repeat: a message sent again under its id after JetStream's window
  (a crashed host re-sending its requests). The first decision on the id stands; the repeat
  is counted, and is neither another effect nor a record stored twice.
- The router's session events (`parley.events.>`): each names the inputs it consumed in
  `envelope_ids`, and the session's start and end. When the stream stored one (or a decision
  on an answer to a person) is when the system made end-to-end progress, which the checker's
  recovery is measured by.
- The dead letters (PARLEY_DEAD): counted by actor and typed reason.

`history_from()` is pure (decoded records in, checker facts out) so it is unit-tested; the
reads from the server are tools/chaos/_reads.py's.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from actors.delegation import request_id
from schemas import (
    TOLD_FROM_DECISION,
    Decision,
    ErrorCode,
    SessionEvent,
    call_kinds,
)
from tools.chaos._checker import Applied, DelegationOutcome, Published, SessionOutcome
from tools.chaos._llm_check import model_call_purpose
from tools.chaos._reads import Stored

__all__ = ("History", "history_from")

ROUTER = "router"
_CALL_TAGS = frozenset(str(kind.__struct_config__.tag) for kind in call_kinds()) | {
    "human_message"  # a person's message to an agent asks for an answer as a call does
}
_ANSWERS = frozenset({"delegation_response", "error"})
_FANNED = frozenset({"delegation_request", "sub_agent_call", "tool_request"})
"""The kinds an agent sends several of for one call: a fan-out, a chain's rounds, its tools."""
_ROUNDS = 9
_REQUESTS_PER_ROUND = 16
"""How many of an agent host's request ids `_request_slots` tells apart: the host's rounds
(MAX_TOOL_ROUNDS, 8, and the answer's) by requests per round (any fan-out a policy allows
in practice; a wider one's extra requests are told apart by target only)."""
_ENDS = {
    "session_completed": "completed",
    "session_failed": "failed",
    "session_canceled": "failed",
}


@dataclass
class History:
    """The checker's facts, and what could not be read."""

    published: list[Published] = field(default_factory=list)
    applied: list[Applied] = field(default_factory=list)
    sessions: list[SessionOutcome] = field(default_factory=list)
    stored_ids: list[str] = field(default_factory=list)
    end_to_end: list[float] = field(default_factory=list)
    delegations: list[DelegationOutcome] = field(default_factory=list)
    repeats_refused: int = 0
    undecodable: int = 0


def _owes_effect(decision: Decision, answering: frozenset[str]) -> bool:
    """Whether the receiver of an allowed envelope leaves a trace we can see when it handles it.

    Calls (and human messages) are answered by the agents in `answering`; the router records
    every input it consumes in a session event. Anything else (an answer to the CLI) is the
    receiver's own business.
    """
    if decision.target == ROUTER:
        return True
    return decision.target in answering and decision.envelope_kind in _CALL_TAGS


def history_from(
    records: Iterable[Stored],
    roots: Sequence[Published] = (),
    *,
    answering: Iterable[str] = (),
    people: Iterable[str] = (),
    delegation_bound_s: float | None = None,
) -> History:
    """Turn the stored decisions and session events into checker facts.

    Args:
        records: PARLEY_EVENTS in stream order.
        roots: what the load generator published and JetStream acknowledged (received by
            the gate).
        answering: the agents whose calls must be answered (their call deliveries count).
        people: the persons whose delegations must be answered (the load's CLI).
        delegation_bound_s: how long after the gate admitted a delegation its answer is due.
    """
    history = History(published=list(roots))
    who_answers = frozenset(answering)
    persons = frozenset(people)
    ends: dict[str, SessionOutcome] = {}
    records = list(records)
    delivered = {
        (r.envelope.target, r.envelope.envelope_id)
        for r in records
        if isinstance(r.envelope, Decision) and r.envelope.allowed
    }
    for record in records:
        envelope = record.envelope
        match envelope:
            case Decision() if _repeat(envelope):
                history.repeats_refused += 1
            case Decision():
                _decision(history, record.seq, envelope, who_answers, delivered)
                if envelope.target in persons and envelope.envelope_kind in _ANSWERS:
                    # An answer reaching a person is the system moving end to end, as a
                    # session's transition is (a run may delegate only).
                    at = _decided_at(envelope)
                    stored = at if record.stored_at is None else max(at, record.stored_at)
                    history.end_to_end.append(stored)
            case SessionEvent() if TOLD_FROM_DECISION in envelope.payload:
                # A call between agents told to a person: a decision's copy, stored once
                # like any effect, but no transition of any session.
                history.stored_ids.append(f"event:{envelope.id}")
            case SessionEvent():
                _session_event(history, envelope, ends, record.stored_at)
            case None:
                history.undecodable += 1
            case _:
                pass
    history.sessions = list(ends.values())
    history.delegations = _delegations(records, persons, delegation_bound_s)
    return history


def _repeat(decision: Decision) -> bool:
    """The gate refused a submission because its id was decided before: a repeat."""
    return decision.code == ErrorCode.DUPLICATE_ENVELOPE and decision.rule == "duplicate_id"


def _delegations(
    records: Sequence[Stored], people: frozenset[str], bound_s: float | None
) -> list[DelegationOutcome]:
    """Each person's delegation, with its first answer (or the gate's refusal of it)."""
    asked: dict[str, DelegationOutcome] = {}
    answers: dict[str, tuple[str, float]] = {}
    for record in records:
        decision = record.envelope
        if not isinstance(decision, Decision) or _repeat(decision):
            continue
        at = _decided_at(decision)
        if decision.sender in people and decision.envelope_kind == "delegation_request":
            if decision.envelope_id in asked:
                continue  # decided again after a gate crash: the first decision stands
            asked[decision.envelope_id] = DelegationOutcome(
                decision.envelope_id,
                decision.target,
                at,
                None if decision.allowed else "refused",
                None if decision.allowed else at,
                None if bound_s is None else at + bound_s,
            )
        elif decision.target in people and decision.envelope_kind in _ANSWERS:
            # A refused answer reaches the person too, as the gate's error about the request.
            answers.setdefault(decision.causation_id, (decision.envelope_kind, at))
    return [
        outcome
        if outcome.answer is not None or request not in answers
        else DelegationOutcome(
            request,
            outcome.target,
            outcome.asked_at,
            answers[request][0],
            answers[request][1],
            outcome.ends_by,
        )
        for request, outcome in asked.items()
    ]


def _decided_at(decision: Decision) -> float:
    return (decision.decided_at or decision.created_at).timestamp()


def _purpose(decision: Decision) -> str:
    """What an effect is for, so that legitimately different effects of one input differ.

    Mostly its kind (two answers to one call are a duplicate). A delegating agent, though,
    sends several requests for one call: one per target of a fan-out, and a chain's later
    rounds, perhaps to a target it called before. Its host derives each request's id from
    the call's and the request's place (`actors.delegation.request_id`),
    so the place, read back from the id, tells the requests apart; a request sent again
    after a crash takes the same place and id (JetStream drops it, or the gate refuses the
    repeat), and a request under any other id is told apart by its target only.
    """
    kind = decision.envelope_kind
    if kind == "llm_request":
        return model_call_purpose(decision)
    if kind not in _FANNED:
        return kind
    place = _request_slots(decision.causation_id).get(decision.envelope_id)
    return f"{kind} to {decision.target}" + (f" ({place})" if place else "")


@functools.lru_cache(maxsize=4096)
def _request_slots(call_id: str) -> dict[str, str]:
    """The ids an agent host gives the requests it makes for call `call_id`, by place."""
    return {
        request_id(call_id, r, n): f"round {r}, request {n}"
        for r in range(_ROUNDS)
        for n in range(_REQUESTS_PER_ROUND)
    }


def _decision(
    history: History,
    seq: int,
    decision: Decision,
    answering: frozenset[str],
    delivered: set[tuple[str, str]],
) -> None:
    at = _decided_at(decision)
    history.stored_ids.append(f"decision-on:{decision.envelope_id}")
    history.applied.append(Applied("gate", decision.envelope_id, decision.id, "decision", at=at))
    if (decision.sender, decision.causation_id) in delivered:
        # Only a cause the gate delivered to this sender: any other is a claim (a forged
        # header), not an effect of that cause.
        history.applied.append(
            Applied(
                decision.sender,
                decision.causation_id,
                decision.envelope_id,
                _purpose(decision),
                at=at,
            )
        )
    if decision.allowed and _owes_effect(decision, answering):
        history.published.append(
            Published(decision.envelope_id, seq, decision.target, decision.envelope_kind, at)
        )


def _session_event(
    history: History,
    event: SessionEvent,
    ends: dict[str, SessionOutcome],
    stored_at: float | None,
) -> None:
    at = event.created_at.timestamp()
    history.stored_ids.append(f"event:{event.id}")
    # Progress is when the transition reached the stream: a router that built an event just
    # before an outage stores it (with its original created_at) only once it is back, and
    # that store is the system moving again.
    history.end_to_end.append(at if stored_at is None else max(at, stored_at))
    for input_id in event.envelope_ids:
        history.applied.append(Applied(ROUTER, input_id, event.id, event.event_type, at=at))
    known = ends.get(event.session_id) or SessionOutcome(event.session_id)
    started = known.started_at if known.started_at is not None else at
    ends_by = _ends_by(event, known.ends_by)
    ended = _ENDS.get(event.event_type)
    if ended is not None:
        code = str(event.payload.get("code") or "")
        reason = ": ".join(part for part in (event.stop_reason or "", code) if part) or None
        stored = at if stored_at is None else max(at, stored_at)
        ends[event.session_id] = SessionOutcome(
            event.session_id, ended, reason, started, stored, ends_by
        )
    elif known.ended is None:
        ends[event.session_id] = SessionOutcome(
            event.session_id, None, None, started, None, ends_by
        )


def _ends_by(event: SessionEvent, before: float | None) -> float | None:
    """The bound a step states (`ends_by` on `step_started`), else the one known before."""
    stated = event.payload.get("ends_by") if event.event_type == "step_started" else None
    if not isinstance(stated, str):
        return before
    try:
        return datetime.fromisoformat(stated).timestamp()
    except ValueError:
        return before
