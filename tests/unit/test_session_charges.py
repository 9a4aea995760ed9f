"""What a session write charges its opener (actors/router/_session_charges.py): its size in
whole steps, once, as it grows; nothing for a session stored before openers were."""

from __future__ import annotations

import msgspec

from actors.router._session import Session
from actors.router._session_charges import STEP, SessionCharges
from schemas import TranscriptItem, encode, utc_now


def _session(goal: str, opener: str = "cli") -> Session:
    now = utc_now()
    return Session(
        session_id="s1",
        origin_id="m1",
        mode="collaborate",
        participants=("gpt", "claude"),
        goal=goal,
        opener=opener,
        first_speaker="gpt",
        transcript=(TranscriptItem(role="user", name="cli", text=goal, created_at=now),),
        created_at=now,
    )


def test_a_session_is_charged_in_whole_steps_as_it_grows_and_never_twice() -> None:
    opened = _session("a short goal")
    session, value, grown = SessionCharges.stamped(opened, encode(opened))
    assert grown == STEP == session.charged_bytes >= len(value)
    assert value == encode(session)

    same, same_value, again = SessionCharges.stamped(session, value)
    assert again == 0 and same is session and same_value is value  # within what was charged

    reply = TranscriptItem(role="gpt", name="gpt", text="x" * 3000, created_at=utc_now())
    longer = msgspec.structs.replace(session, transcript=(*session.transcript, reply))
    longer, value, grown = SessionCharges.stamped(longer, encode(longer))
    assert longer.charged_bytes % STEP == 0 and longer.charged_bytes >= len(value)
    assert grown == longer.charged_bytes - STEP > 0
    assert msgspec.json.decode(value)["charged_bytes"] == longer.charged_bytes  # stored so


def test_a_session_without_an_opener_charges_nobody() -> None:
    old = _session("stored before openers were recorded", opener="")
    session, _, grown = SessionCharges.stamped(old, encode(old))
    assert grown == 0 and session.charged_bytes == 0
