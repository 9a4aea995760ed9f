"""Pause, resume and take over in seed 001's collaboration sessions (actors/router/_steering.py)."""

from __future__ import annotations

from datetime import timedelta

from actors.router._session import Session, Step
from actors.router._sweep import stalled
from schemas import Control, Error, ErrorCode
from tests.unit.test_turns import LIMITS, T0, answer, calls, events, started, step


def control(session: Session, action: str, text: str = "", sender: str = "cli") -> Step:
    envelope = Control(
        id=f"{action}-{session.round}-{len(session.applied)}",
        created_at=T0,
        action=action,  # type: ignore[arg-type]
        session_id=session.session_id,
        text=text,
    )
    return step(session, envelope, sender=sender)


def state(result: Step) -> Session:
    assert result.session is not None
    return result.session


def test_pause_holds_the_next_call_and_resume_makes_it() -> None:
    session, call = started()
    paused = state(control(session, "pause"))
    assert paused.paused and paused.pending is not None  # the call in flight stands
    answered = step(paused, answer(call, "Paragraph one.", to="gpt"))
    assert calls(answered) == [] and state(answered).held == "gpt"
    assert state(answered).pending is None  # the answered call no longer waits
    assert [e.event_type for e in events(answered)] == ["step_completed"]
    resumed = control(state(answered), "resume")
    assert [e.event_type for e in events(resumed)] == ["session_resumed", "step_started"]
    (next_call,) = calls(resumed)
    assert next_call.target == "gpt" and next_call.round == 2
    assert next_call.text == "gpt, your turn"
    assert not state(resumed).paused and state(resumed).held is None


def test_resume_without_a_held_call_leaves_the_call_in_flight() -> None:
    session, _ = started()
    resumed = control(state(control(session, "pause")), "resume")
    assert calls(resumed) == [] and not state(resumed).paused


def test_take_over_sends_the_owners_words_to_the_held_speaker() -> None:
    session, call = started()
    answered = step(state(control(session, "pause")), answer(call, "Paragraph one.", to="gpt"))
    taken = control(state(answered), "take_over", text="Make the fox talk.")
    (next_call,) = calls(taken)
    assert next_call.target == "gpt" and next_call.text == "Make the fox talk."
    mine = state(taken).transcript[-2]
    assert (mine.role, mine.name, mine.text) == ("user", "cli", "Make the fox talk.")
    assert events(taken)[0].payload == {"taken_over": True, "message": "Make the fox talk."}


def test_take_over_pause_and_resume_out_of_place_are_refused() -> None:
    session, _ = started()
    for result in (
        control(session, "take_over", text="now"),  # a call is in flight
        control(session, "resume"),  # not paused
        control(state(control(session, "pause")), "take_over"),  # no text
    ):
        (error,) = result.effects
        assert isinstance(error, Error) and error.code is ErrorCode.INVALID_REQUEST
    (error,) = control(session, "pause", sender="mallory").effects
    assert isinstance(error, Error) and error.code is ErrorCode.UNAUTHORIZED
    assert not control(state(control(session, "pause")), "pause").changed


def test_a_paused_session_waiting_on_its_owner_is_not_swept() -> None:
    session, call = started()
    held = state(step(state(control(session, "pause")), answer(call, "One.", to="gpt")))
    much_later = T0 + timedelta(hours=5)
    assert stalled(held, now=much_later, limits=LIMITS) is None
    assert stalled(session, now=much_later, limits=LIMITS) is not None
