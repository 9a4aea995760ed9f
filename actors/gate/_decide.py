"""The gate's pure core, part two: the counted limits, against a ledger of records.

No bus in here. The shell (actors/gate/_actor.py) reads the cause's `Position` and the counters a
decision needs from KV, calls `plan()` (actors/gate/_plan.py) and then `decide()`, and commits what
`decide()` wrote to the `Ledger` with compare-and-set before anything is delivered. `decide()`
applies the trace budget, session tokens, fan-out, calls in flight, objectives in progress and
the rate per (profile, target), and records what an admission spends.

An answer is charged with its call: the call passed the rate and concurrency limits and
opened a slot, and its answer (agent_response, an error, delegation_response,
sub_agent_result) only closes that slot. Refusing the answer for the pair's rate would leave
its caller waiting for an answer that was given. It is admitted once per open call, so this
cannot become a flood: a second answer to a call is refused as `DUPLICATE_ENVELOPE`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from msgspec import Struct

from actors.gate._llm_checks import (
    charge_tokens,
    session_key,
    spent_call_budget,
    spent_session_tokens,
    tokens_spent,
)
from actors.gate._plan import Deny, Route
from actors.gate._records import (
    CallAnswer,
    Children,
    Inflight,
    LiveCall,
    RateBucket,
    SessionTokens,
    TraceState,
    answer_key,
    fanout_key,
    inflight_key,
    rate_key,
    trace_key,
)
from actors.gate._trace_calls import ANSWER_GRACE_MS, Closing, closing_of, trace_calls
from schemas import (
    AnyEnvelope,
    DelegationRequest,
    Error,
    ErrorCode,
    PolicyBundle,
)

__all__ = (
    "ANSWER_GRACE_MS",
    "NOTHING_PAID",
    "Allow",
    "Ledger",
    "Paid",
    "answers_call",
    "decide",
    "implied_root_trace",
    "required_keys",
    "session_key_charged",
    "spends_rate",
)

S = TypeVar("S", bound=Struct)


@dataclass(frozen=True, slots=True)
class Paid:
    """What an earlier round of the same submission committed before another of its
    counters lost a compare-and-set (actors/gate/_paid.py): those counters are neither
    checked nor charged again."""

    keys: frozenset[str] = frozenset()
    session_charge: int = 0
    """That round's charge for the session, owed still when its session record is not
    among `keys` (its trace no longer holds the call the charge was computed from)."""


NOTHING_PAID = Paid()


@dataclass(frozen=True, slots=True)
class Allow:
    """Admitted: deliver `envelope` (possibly a redacted copy) to `route.target`."""

    route: Route
    envelope: AnyEnvelope
    session_charge: int = 0
    """The tokens it charges its session (`session_key_charged`): kept with what an
    earlier round committed, since the trace's record it was computed from changes once
    that round's trace write lands."""

    def unborn_keys(self) -> tuple[str, ...]:
        """Records this admission makes certain do not exist yet: the count of the envelope's
        children (written when its first child is admitted, after its delivery), for a call
        the record of its answer, and, for a root whose trace record is left implied, its
        trace. The gate caches them as absent, so its first child or answer is decided
        without reading them (actors/gate/_store.py, `known_absent`)."""
        own = self.envelope.id
        keys = [fanout_key(own)]
        if self.route.role == "call":
            keys.append(answer_key(own))
        if self.route.is_root:
            keys.append(trace_key(self.route.position.trace_id))
        return tuple(keys)


class Ledger:
    """The records a batch of decisions reads, and which of them those decisions changed."""

    __slots__ = ("dirty", "values")

    def __init__(self, values: dict[str, Struct | None] | None = None) -> None:
        self.values: dict[str, Struct | None] = values if values is not None else {}
        self.dirty: set[str] = set()

    def get(self, key: str, kind: type[S]) -> S | None:
        value = self.values.get(key)
        if value is None:
            return None
        if not isinstance(value, kind):
            raise TypeError(f"{key} holds a {type(value).__name__}, not a {kind.__name__}")
        return value

    def put(self, key: str, value: Struct) -> None:
        self.values[key] = value
        self.dirty.add(key)


def required_keys(route: Route) -> tuple[str, ...]:
    """The counters `decide()` reads for this route (load them into the ledger first)."""
    sub = route.sub
    keys = [trace_key(route.position.trace_id)]
    if spends_rate(route):
        keys.append(rate_key(sub.sender, route.target))
    if route.role == "call":
        keys.append(inflight_key(sub.sender))
        if sub.causation_id:
            keys.append(fanout_key(sub.causation_id))
    elif route.role == "return":
        keys.append(inflight_key(route.target))
        if answers_call(route) and route.answered is not None:
            keys.append(answer_key(route.answered.call_id))
    session_k = session_key(route)
    if session_k and (route.role == "call" or session_key_charged(route)):
        keys.append(session_k)
    return tuple(keys)


def session_key_charged(route: Route) -> str:
    """The session tokens record admitting `route` charges, "" if none: an answer that
    reports tokens, in a trace of a session."""
    if not answers_call(route) or tokens_spent(route.sub.envelope) <= 0:
        return ""
    return session_key(route)


def answers_call(route: Route) -> bool:
    """Whether `route` answers the call its sender is in: a return, and if an `error`, one
    about that call (an error naming another envelope in `cause_id` is no answer: the caller
    ignores it, so it neither closes the call nor rides on its charge)."""
    if route.role != "return" or route.answered is None:
        return False
    envelope = route.sub.envelope
    return not isinstance(envelope, Error) or envelope.cause_id == route.answered.call_id


def spends_rate(route: Route) -> bool:
    """Whether admitting `route` spends a token of its (sender, target) rate: an answer does
    not, its call paid for it."""
    return not answers_call(route)


def _live(calls: dict[str, int], now_ms: int, but: str = "") -> dict[str, int]:
    """The calls still counting at `now_ms`, leaving out `but`."""
    return {call: expires for call, expires in calls.items() if expires > now_ms and call != but}


def decide(
    route: Route, ledger: Ledger, bundle: PolicyBundle, earlier: Paid = NOTHING_PAID
) -> Allow | Deny:
    """Apply the counted limits to a planned route; on admission, record what it spends.

    Args:
        earlier: what an earlier round of the same submission committed before another
            counter of it lost its compare-and-set (`Paid`): those counters are neither
            checked nor charged again, so an envelope is charged once however often it
            is decided.
    """
    paid = earlier.keys
    session_charge = 0
    sub, profile = route.sub, route.profile
    now = sub.now_ms
    trace_k = trace_key(route.position.trace_id)
    # No record yet: this is the root, or the trace's root was counted but never written
    # (a root that opens no call spends only its own count; see `implied_root_trace`).
    trace = ledger.get(trace_k, TraceState) or implied_root_trace(
        route.position.user_id, counted=not route.is_root
    )
    own = sub.envelope.id
    in_trace = trace_calls(trace, now)
    answered = route.answered.call_id if route.answered is not None else ""
    is_answer = answers_call(route)
    answer_k = answer_key(answered) if is_answer else ""
    # This very answer closed its call before (a crash or a server restart kept it from
    # being delivered or acked): it is decided again, charged nothing twice
    # (actors/gate/_trace_calls.py).
    closing = (
        closing_of(
            in_trace,
            ledger.get(answer_k, CallAnswer),
            answered,
            own,
            route.answered.deadline_ms if route.answered is not None else None,
            now,
        )
        if is_answer
        else Closing(admit=True, charge_trace=True)
    )
    trace_paid = trace_k in paid or not closing.charge_trace
    budget = profile.trace_message_budget
    if not trace_paid and trace.count + 1 > budget:
        return Deny(
            ErrorCode.BUDGET_EXCEEDED,
            "trace_message_budget",
            f"trace {route.position.trace_id} has used its budget of {budget} messages",
            limit=budget,
            value=trace.count + 1,
        )
    # A call the gate admitted before a crash but never delivered comes back as a
    # redelivery: its own earlier marks (open call, slot, child) must not count against it.
    tokens = trace.tokens
    inflight_k = inflight_key(sub.sender if route.role == "call" else route.target)
    inflight = ledger.get(inflight_k, Inflight) or Inflight()
    fanout_k = fanout_key(sub.causation_id) if sub.causation_id else ""
    fanout = ledger.get(fanout_k, Children) if fanout_k else None
    # A fan-out counts the cause's calls still at work: one answered, or past its deadline,
    # makes room, so a chain of steps under one call is never taken for a fan-out.
    siblings = (
        tuple(child for child in fanout.ids if child != own and in_trace.in_progress(child, now))
        if fanout
        else ()
    )
    if route.role == "call":
        over = spent_call_budget(in_trace.live, route)
        if over is not None:
            return over
        session_k = session_key(route)
        session = ledger.get(session_k, SessionTokens) if session_k else None
        over_tokens = spent_session_tokens(route, bundle, tokens, session)
        if over_tokens is not None:
            return over_tokens
        children = len(siblings) + 1
        person_fan_out = not fanout_k and isinstance(sub.envelope, DelegationRequest)
        if person_fan_out:
            # A person's delegations each start a trace of their own: their fan-out is the
            # ones still in flight at once.
            children = len(_live(inflight.calls, now, own)) + 1
        if (fanout_k or person_fan_out) and children > profile.max_fan_out:
            return Deny(
                ErrorCode.FAN_OUT_EXCEEDED,
                "max_fan_out",
                f"Too many concurrent delegates ({children}/{profile.max_fan_out}). "
                f"Choose top {profile.max_fan_out} most relevant employees.",
                limit=profile.max_fan_out,
                value=children,
            )
        calls = _live(inflight.calls, now, own)
        if len(calls) + 1 > profile.max_concurrent_calls:
            return Deny(
                ErrorCode.RATE_LIMITED,
                "max_concurrent_calls",
                f"{sub.sender} has {len(calls)} calls awaiting answers, the limit is "
                f"{profile.max_concurrent_calls}",
                limit=profile.max_concurrent_calls,
                value=len(calls) + 1,
            )
        shared_calls = _live(inflight.shared, now, own)
        if route.shared and len(shared_calls) + 1 > profile.max_concurrent_shared_calls:
            return Deny(
                ErrorCode.RATE_LIMITED,
                "max_concurrent_shared_calls",
                f"{sub.sender} has {len(shared_calls)} shared-agent calls in flight, "
                f"maxConcurrentSharedCalls is {profile.max_concurrent_shared_calls}",
                limit=profile.max_concurrent_shared_calls,
                value=len(shared_calls) + 1,
            )
        if in_trace.objective_in_progress(route.objective, now, but=own):
            return Deny(
                ErrorCode.CYCLE_DETECTED,
                "objective_in_progress",
                f"Cycle detected: {sub.sender} -> {route.target} with same objective already "
                "in progress.",
            )
    if not closing.admit:
        # Its call was answered already, by another answer (or is long past its deadline).
        return Deny(
            ErrorCode.DUPLICATE_ENVELOPE,
            "duplicate_answer",
            f"{sub.sender} already answered call {answered[:80]!r} (or it is more "
            f"than {ANSWER_GRACE_MS // 60_000} minutes past its deadline): the gate admits one "
            "answer per call",
        )
    rate_k = rate_key(sub.sender, route.target)
    if (
        spends_rate(route)
        and rate_k not in paid
        and not _rate_allows(ledger, rate_k, profile.rate_per_minute, now)
    ):
        return Deny(
            ErrorCode.RATE_LIMITED,
            "rate_per_minute",
            f"{sub.sender} -> {route.target} exceeds {profile.rate_per_minute} messages per minute",
            limit=profile.rate_per_minute,
        )
    # Admitted: spend what it costs.
    if route.role == "call":
        level = route.position.levels[-1]
        expires = level.deadline_ms or now + profile.deadline_ms
        in_trace.live[own] = LiveCall(objective=route.objective, expires_ms=expires)
        calls = {**_live(inflight.calls, now), own: expires}
        shared_calls = _live(inflight.shared, now)
        if route.shared:
            shared_calls[own] = expires
        ledger.put(inflight_k, Inflight(calls=calls, shared=shared_calls))
        if fanout_k:
            ledger.put(fanout_k, Children(ids=(*siblings, own)))
    elif is_answer:
        # Before its call leaves `live`: what its model calls measured. A trace already
        # charged by an earlier round is not charged again, yet its session may still be
        # owed that round's charge; an answer decided again after a crash charges neither.
        if not trace_paid:
            session_charge = charge_tokens(in_trace.live, route, tokens_spent(sub.envelope))
            tokens += session_charge
        elif trace_k in paid:  # charged by an earlier round: what it computed then
            session_charge = earlier.session_charge
        session_k = session_key_charged(route)
        if session_k and session_k not in paid and session_charge:
            session = ledger.get(session_k, SessionTokens) or SessionTokens()
            ledger.put(session_k, SessionTokens(tokens=session.tokens + session_charge))
        in_trace.live.pop(answered, None)
        if closing.create_record:
            ledger.put(answer_k, CallAnswer(answer_id=own))
        if answered in inflight.calls or answered in inflight.shared:
            ledger.put(
                inflight_k,
                Inflight(
                    calls={k: v for k, v in _live(inflight.calls, now).items() if k != answered},
                    shared={k: v for k, v in _live(inflight.shared, now).items() if k != answered},
                ),
            )
    ledger.put(
        trace_k,
        TraceState(
            count=trace.count + (0 if trace_paid else 1),
            user_id=trace.user_id,
            tokens=tokens,
            live=in_trace.live,
            open_calls=in_trace.answered_before,
        ),
    )
    return Allow(route=route, envelope=sub.envelope, session_charge=session_charge)


def _rate_allows(ledger: Ledger, key: str, rate_per_minute: int, now: int) -> bool:
    """Whether the token bucket `key` holds a token at `now`; if so, spend it in the ledger."""
    bucket = ledger.get(key, RateBucket)
    capacity = float(rate_per_minute)
    leases = bucket.live_leases(now) if bucket is not None else {}
    ceiling = capacity - sum(lease.tokens for lease in leases.values())
    available = (
        capacity
        if bucket is None
        else min(ceiling, bucket.tokens + (now - bucket.at_ms) * capacity / 60_000)
    )
    if available < 1.0:
        return False
    ledger.put(key, RateBucket(tokens=available - 1.0, at_ms=now, leases=leases))
    return True


def implied_root_trace(user_id: str, *, counted: bool = True) -> TraceState:
    """The trace record a root leaves when it opens no call: its own count and user, nothing
    else. The gate does not write it (one write fewer per conversation started); whoever
    finds no record for a trace that has a root reads this instead."""
    return TraceState(count=1 if counted else 0, user_id=user_id)
