"""How long a command following a session waits (tools/_session_wait.py): the turn's
`ends_by`, moved as the router moves the call's deadline while a tool request waits for the
person's approval, and back to a turn once the request is decided."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from schemas import SessionEvent, new_id, utc_now
from tools._session_wait import OPENING_S, SLACK_S, SessionWait

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
"""A fixed clock: only `wait_s` reads the real one, and its test starts from it."""
TURN = timedelta(seconds=120)


def _event(event_type: str, at: datetime, **payload: Any) -> SessionEvent:
    return SessionEvent(
        id=new_id(),
        created_at=at,
        session_id=new_id(),
        event_type=event_type,  # type: ignore[arg-type]  # one of the names the test means
        round=1,
        speaker="gpt",
        payload=payload,
    )


def _started(start: datetime = START) -> SessionWait:
    wait = SessionWait("the router to open the session")
    wait.on_event(_event("step_started", start, ends_by=(start + TURN).isoformat()))
    return wait


def test_before_a_call_the_opening_waits_and_a_call_names_its_answer() -> None:
    wait = SessionWait("the router to open the session")
    assert (wait.waiting_for, wait.wait_s()) == ("the router to open the session", OPENING_S)
    wait = _started()
    assert wait.ends_by == START + TURN
    assert wait.waiting_for == f"gpt's answer in round 1, due by {START + TURN:%H:%M:%S} UTC"


def test_a_held_request_moves_the_wait_a_turn_past_its_expiry_and_its_answer_a_turn_on() -> None:
    now = utc_now()  # `wait_s` reads the real clock
    wait = _started(now)
    asked = now + timedelta(seconds=5)
    held = _event("approval_requested", asked, approval_id="a1", expires_in_s=600)
    wait.on_event(held)
    expires = asked + timedelta(seconds=600)
    assert wait.ends_by == expires + TURN
    assert wait.waiting_for == f"your decision on a1 (it waits until {expires:%H:%M:%S} UTC)"
    assert wait.wait_s() > 600 + SLACK_S

    decided = asked + timedelta(seconds=30)
    wait.on_event(_event("tool_completed", decided, call_id="a1", status="succeeded"))
    assert wait.ends_by == expires + TURN  # never earlier than it was
    assert wait.waiting_for.startswith("gpt's answer in round 1, due by ")

    other = _event("tool_completed", decided, call_id="not-held", status="succeeded")
    wait.on_event(other)
    assert wait.ends_by == expires + TURN


def test_an_answer_after_the_expiry_still_gives_the_agent_a_turn() -> None:
    wait = _started()
    wait.on_event(_event("approval_requested", START, approval_id="a1", expires_in_s=1))
    late = START + timedelta(hours=1)
    wait.on_event(_event("tool_completed", late, call_id="a1", status="denied"))
    assert wait.ends_by == late + TURN


def test_a_request_whose_gate_names_no_expiry_leaves_the_turn_alone() -> None:
    for said in (None, "600", True, 1.5):
        wait = _started()
        wait.on_event(_event("approval_requested", START, approval_id="a1", expires_in_s=said))
        assert wait.ends_by == START + TURN, said
        assert wait.waiting_for.startswith("gpt's answer"), said


def test_a_request_still_held_holds_the_next_call_too() -> None:
    """The router moves a call's deadline for any request of the session still held, not only
    its own call's (actors/router/_approval_wait.py); so does the command, until it is
    answered (a review: a new call forgot it, and the command could stop the session early)."""
    wait = _started()
    wait.on_event(_event("approval_requested", START, approval_id="a1", expires_in_s=600))
    later = START + timedelta(seconds=60)
    wait.on_event(_event("step_started", later, ends_by=(later + TURN).isoformat()))
    assert wait.ends_by == START + timedelta(seconds=600) + TURN
    assert wait.waiting_for.startswith("your decision on a1")
    answered = later + timedelta(seconds=5)
    wait.on_event(_event("tool_completed", answered, call_id="a1", status="denied"))
    assert wait.waiting_for.startswith("gpt's answer")


def test_a_command_joining_at_a_held_request_waits_the_sessions_own_turn_past_it() -> None:
    """`parley collab --follow` joined at a stored `approval_requested` has seen no call start,
    and took a turn to be 60 s: under a longer `turn_timeout_s` (and the sweep's margin) it
    gave up before the router did. The session's opening names both (a review)."""
    wait = SessionWait("the session's next event")
    opening = _event("session_created", START, max_rounds=1, turn_timeout_s=200, stall_margin_s=45)
    wait.on_event(opening)
    asked = START + timedelta(seconds=3)
    wait.on_event(_event("approval_requested", asked, approval_id="a1", expires_in_s=300))
    assert wait.ends_by == asked + timedelta(seconds=300 + 200 + 45)


def test_an_opening_that_names_no_limits_leaves_the_opening_wait() -> None:
    """A session opened by a router before its opening named its limits: 60 s, as before."""
    for limits in ({}, {"turn_timeout_s": "200", "stall_margin_s": 45}, {"turn_timeout_s": 200}):
        wait = SessionWait("the session's next event")
        wait.on_event(_event("session_created", START, **limits))
        wait.on_event(_event("approval_requested", START, approval_id="a1", expires_in_s=300))
        assert wait.ends_by == START + timedelta(seconds=300 + OPENING_S), limits
