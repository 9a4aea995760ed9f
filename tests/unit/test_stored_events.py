"""How `parley collab --follow` joins a session's stored last event to what comes live
(tools/_stored_events.py): each event once, in the stream's order.

The window this covers (an event published after the follower subscribed and stored before
it read the stored one, so it is both the stored event and a live one) lasts a few
microseconds on a real bus, too short to hit on purpose; here it is given directly.
"""

from __future__ import annotations

from datetime import UTC, datetime

from schemas import Error, ErrorCode, SessionEvent
from schemas._envelopes import EventType
from tools._stored_events import joined

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def _event(event_id: str, event_type: EventType = "step_completed") -> SessionEvent:
    return SessionEvent(id=event_id, created_at=T0, session_id="s", event_type=event_type, round=1)


def test_the_stored_event_comes_first_unless_it_came_live_too() -> None:
    stored = _event("e2", "step_started")
    later = _event("e3")
    refusal = Error(id="r1", created_at=T0, code=ErrorCode.UNAUTHORIZED, message="no")
    # Stored before the follower subscribed: shown first, then what came live.
    assert joined(stored, [later, refusal]) == [stored, later, refusal]
    # Published after it subscribed: its live copy is it, in its place, never shown twice.
    earlier = _event("e1")
    assert joined(stored, [earlier, stored, later]) == [earlier, stored, later]
    # Nothing stored (not opened yet): only what comes live.
    assert joined(None, [later]) == [later]
    assert joined(stored, []) == [stored]
