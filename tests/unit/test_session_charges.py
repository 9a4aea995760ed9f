"""What a session write charges its opener (actors/router/_session_charges.py): its size in
whole steps, once, as it grows; its whole size once more when it ends long after its last
charge; nothing for a session stored before openers were."""

from __future__ import annotations

from unittest.mock import sentinel

import msgspec

from actors.router._session import Session
from actors.router._session_charges import STEP, SessionCharges
from schemas import TranscriptItem, encode, utc_now


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _charges(clock: _Clock) -> SessionCharges:
    return SessionCharges(sentinel.shares, limit=1 << 20, renew_after_s=3600, clock=clock)


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
    clock = _Clock()
    charges = _charges(clock)
    opened = _session("a short goal")
    session, value, grown = charges.stamped(opened, encode(opened))
    assert grown == STEP == session.charged_bytes >= len(value)
    assert value == encode(session)

    same, same_value, again = charges.stamped(session, value)
    assert again == 0 and same is session and same_value is value  # within what was charged

    reply = TranscriptItem(role="gpt", name="gpt", text="x" * 3000, created_at=utc_now())
    longer = msgspec.structs.replace(session, transcript=(*session.transcript, reply))
    longer, value, grown = charges.stamped(longer, encode(longer))
    assert longer.charged_bytes % STEP == 0 and longer.charged_bytes >= len(value)
    assert grown == longer.charged_bytes - STEP > 0
    assert msgspec.json.decode(value)["charged_bytes"] == longer.charged_bytes  # stored so


def test_a_session_that_ends_long_after_its_last_charge_is_charged_whole_once_more() -> None:
    """It is kept a retention from its end, past what its charges count for; its later writes
    keep that expiry (actors/router/_store.py), so they charge nothing more, whoever sends
    the input they record."""
    clock = _Clock()
    charges = _charges(clock)
    opened = _session("a goal")
    session, _, _ = charges.stamped(opened, encode(opened))
    charged_ms = session.charged_at_ms

    soon = msgspec.structs.replace(session, status="completed", ended_at_ms=charged_ms + 3_599_000)
    assert charges.stamped(soon, encode(soon))[2] == 0  # what was charged covers it

    late = msgspec.structs.replace(session, status="completed", ended_at_ms=charged_ms + 3_600_000)
    clock.now += 3600
    again, value, grown = charges.stamped(late, encode(late))
    assert grown == again.charged_bytes == STEP and again.charged_at_ms >= late.ended_at_ms
    clock.now += 30 * 24 * 3600  # written again much later (a stranger's refused pause)
    assert charges.stamped(again, value)[2] == 0


def test_a_session_without_an_opener_charges_nobody() -> None:
    old = _session("stored before openers were recorded", opener="")
    session, _, grown = _charges(_Clock()).stamped(old, encode(old))
    assert grown == 0 and session.charged_bytes == 0
