"""The sweep's judgement of a session that stopped moving (actors/router/_sweep.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from msgspec import structs

from actors.router._session import Limits, PendingCall, Session
from actors.router._sweep import stall, stalled
from schemas import ErrorCode

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
LIMITS = Limits(turn_timeout_s=60.0, stall_margin_s=45.0)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def waiting(pending: PendingCall | None) -> Session:
    return Session(
        session_id="s1",
        origin_id="m1",
        mode="collaborate",
        participants=("gpt", "claude"),
        goal="g",
        first_speaker="gpt",
        pending=pending,
        created_at=T0,
    )


CALL = PendingCall(call_id="c1", envelope_id="e1", speaker="gpt", deadline=at(60.0))


def test_a_session_is_stalled_only_past_its_deadline_plus_the_margin() -> None:
    assert stalled(waiting(CALL), now=at(104.9), limits=LIMITS) is None
    error = stalled(waiting(CALL), now=at(105.0), limits=LIMITS)
    assert error is not None and error.code == ErrorCode.DEADLINE_EXCEEDED
    assert error.cause_id == "e1" and "waiting for gpt's answer" in error.message


def test_outages_move_the_sweep_too() -> None:
    outages = ((at(10.0), at(40.0)),)
    assert stalled(waiting(CALL), now=at(130.0), limits=LIMITS, outages=outages) is None
    assert stalled(waiting(CALL), now=at(135.0), limits=LIMITS, outages=outages) is not None


def test_a_running_session_waiting_on_nothing_is_stalled_after_a_turn_timeout() -> None:
    assert stalled(waiting(None), now=at(104.0), limits=LIMITS) is None
    assert stalled(waiting(None), now=at(105.0), limits=LIMITS) is not None


def test_every_replica_makes_the_same_input_and_it_ends_the_session_once() -> None:
    first = stalled(waiting(CALL), now=at(110.0), limits=LIMITS)
    second = stalled(waiting(CALL), now=at(200.0), limits=LIMITS)
    assert first is not None and second is not None and first.id == second.id
    step = stall(waiting(CALL), first, now=at(111.0), limits=LIMITS)
    assert step.changed and step.session is not None
    assert step.session.status == "failed" and step.session.stop_reason == "stalled"
    (event,) = step.effects
    assert event.event_type == "session_failed" and event.stop_reason == "stalled"  # type: ignore[union-attr]
    again = stall(step.session, first, now=at(112.0), limits=LIMITS)
    assert not again.changed and again.effects == step.effects  # a redelivery replays


def test_a_session_that_moved_since_the_sweep_looked_is_left_alone() -> None:
    error = stalled(waiting(CALL), now=at(110.0), limits=LIMITS)
    assert error is not None
    moved = waiting(structs.replace(CALL, envelope_id="e2", deadline=at(170.0)))
    assert not stall(moved, error, now=at(111.0), limits=LIMITS).changed


def test_an_ended_session_is_never_stalled() -> None:
    ended = structs.replace(waiting(CALL), status="completed", stop_reason="final")
    assert stalled(ended, now=at(1000.0), limits=LIMITS) is None
