"""How `parley collab --follow` joins a session's stored last event to what comes live
(tools/_stored_events.py): each event once, in the stream's order.

The windows this covers (an event published after the follower subscribed and stored before
it read the stored one, so it is both the stored event and a live one, its live copy arriving
before or after the answer to the read) last microseconds on a real bus, too short to hit on
purpose; here they are given directly: to the join, and to the live reader on a real server.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from nats.aio.client import Client as NATS

from schemas import Decision, Error, ErrorCode, Namespace, SessionEvent, encode
from schemas._envelopes import EventType
from tools._stored_events import ended_by, joined, read_live

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def _event(
    event_id: str, event_type: EventType = "step_completed", *, second: int = 0
) -> SessionEvent:
    made = T0 + timedelta(seconds=second)
    return SessionEvent(
        id=event_id, created_at=made, session_id="s", event_type=event_type, round=1
    )


def test_the_stored_event_comes_in_its_place_unless_it_came_live_too() -> None:
    earlier, stored, later = (
        _event("e1"),
        _event("e2", "step_started", second=1),
        _event("e3", second=2),
    )
    refusal = Error(
        id="r1", created_at=T0 + timedelta(seconds=3), code=ErrorCode.UNAUTHORIZED, message="no"
    )
    # Stored before the follower subscribed: shown first, then what came live.
    assert joined(stored, [later, refusal]) == [stored, later, refusal]
    # Published after it subscribed: its live copy is it, in its place, never shown twice.
    assert joined(stored, [earlier, stored, later]) == [earlier, stored, later]
    # Published after it subscribed, its copy not come yet, an older one's come: after it.
    assert joined(stored, [earlier]) == [earlier, stored]
    assert joined(stored, [earlier, later]) == [earlier, stored, later]
    # Nothing stored (not opened yet): only what comes live.
    assert joined(None, [later]) == [later]
    assert joined(stored, []) == [stored]


def test_how_a_session_stands_decides_whether_it_ended_and_else_its_timeline() -> None:
    opened, turn = _event("e0", "session_created"), _event("e1", second=1)
    end = _event("e2", "session_completed", second=2)
    told_after = _event("e3", "tool_completed", second=3)  # the gate's, after a Stop
    # Its standing is its end: ended, whatever the timeline's last message is (an event told
    # after the end, or a refusal or an answer, which reads as no event).
    assert ended_by(told_after, end) == end
    assert ended_by(None, end) == end
    # Its standing is an opening: it runs, even on an id whose earlier session ended.
    assert ended_by(turn, opened) is None
    assert ended_by(end, _event("e4", "session_created", second=4)) is None
    # Opened by a router that kept its standing, ended by one that did not (an upgrade).
    assert ended_by(end, opened) == end
    # No standing stored (opened before the router kept it, or unreadable): the timeline.
    assert ended_by(end, None) == end
    assert ended_by(turn, None) is None
    assert ended_by(None, None) is None


async def test_a_live_copy_of_the_event_shown_from_the_store_is_dropped(
    nc: NATS, namespace: Namespace
) -> None:
    """Its live copy arriving after the answer to the read: the event is not shown twice."""
    subject = namespace.events("cli", "s")
    live = await nc.subscribe(subject)
    news: asyncio.Queue[SessionEvent | Decision | Error | None] = asyncio.Queue()
    reader = asyncio.create_task(read_live(live, news, shown="e2"))
    try:
        for event in (_event("e2", "step_started"), _event("e3"), _event("e4")):
            await nc.publish(subject, encode(event))
        got = [await asyncio.wait_for(news.get(), 5) for _ in range(2)]
        assert [item.id for item in got if item is not None] == ["e3", "e4"]
        assert news.empty()
    finally:
        reader.cancel()
        await live.unsubscribe()
