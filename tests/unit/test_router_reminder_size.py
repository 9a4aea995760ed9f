"""The router's reminder to check on a call carries the call's identity, not its words
(actors/router/_effects.py `reminder_of`): a copy of the whole call, the goal twice, let one
person's large goals fill the reminders stream every session's calls are watched through."""

from __future__ import annotations

from actors.router._effects import reminder_of
from schemas import AgentCall, TranscriptItem, encode, new_id, utc_now


def test_a_reminder_keeps_what_the_watch_reads_and_drops_the_words() -> None:
    now = utc_now()
    goal = "g" * 200_000
    call = AgentCall(
        id=new_id(),
        created_at=now,
        target="gpt",
        text=goal,
        call_id="c1",
        session_id="s1",
        round=2,
        max_rounds=6,
        goal=goal,
        transcript=(TranscriptItem(role="user", name="cli", text=goal, created_at=now),),
        user_id="alice",
    )
    reminder = reminder_of(call)
    watched = ("id", "created_at", "target", "call_id", "session_id", "round", "user_id")
    assert {f: getattr(reminder, f) for f in watched} == {f: getattr(call, f) for f in watched}
    assert (reminder.text, reminder.goal, reminder.transcript) == ("", "", ())
    assert len(encode(reminder)) < 1_000 < 600_000 < len(encode(call))
