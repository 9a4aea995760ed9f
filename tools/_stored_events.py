"""How a person's session stands, from what its timeline has stored (docs/cli.md).

`parley collab --follow SESSION` and `--stop SESSION` name a session that may have ended long
ago. A person's account follows its timelines live only (a read-only stream import,
tools/natsconf/_permissions.py), so a session that had ended sent nothing more, and the
commands used to wait out their whole limit before saying anything. Of what is stored a person
may read the last message of a subject of its own, by a direct get whose own subject names it
(`Grants.own_last_events`): of a timeline, and of how the session stands, the copy the router
keeps of its opening and of its end (`Namespace.standing`), since what is told on the
timeline after the end (a refusal, an approvals answer, a tool step) would hide it. That is
enough to tell at once that a session ended, and how; and, for a running one, where it stands
(the answer it waits for, due by when).

The turns before that last event stay out of reach: reading them takes the direct get whose
body names the subject, which the broker cannot limit to a person's own timelines.

Following a running session joins what is stored to what comes live without a gap or a
repeat. The live subscription is confirmed by the server before the stored event is read, so
every later event comes live; the stored event is the newest one, in the stream's order. A
live copy of it, if it was published after the subscription, nearly always reaches this
connection before the answer to the read does (the server hands a message to its subscribers
as the stream is handed it to store, and one connection's messages arrive in order); so the
stored event is shown first unless one of the live messages already read is it, and then
only that live copy, in its place. Should the copy come after the answer all the same (the
server's threads interleaving within those microseconds), the copy is dropped: an event is
shown once, by its envelope id, and nothing before it can follow it, since the router stores
each event before it publishes the next.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import nats
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from schemas import Decision, DecodeError, Error, Namespace, SessionEvent, decode_envelope

__all__ = (
    "ENDS",
    "CaughtUp",
    "StoredUnreadable",
    "caught_up",
    "ended_by",
    "ended_line",
    "joined",
    "last_event",
    "live_news",
    "read_live",
    "stored_end",
    "unopened_line",
)

ENDS: Final = {"session_completed": 0, "session_failed": 1, "session_canceled": 130}
"""The events that end a session, and the exit code of a command that saw it end so."""
_READ_S: Final = 5.0
"""How long the read of a stored event may take (one request to a local server)."""
_STANDING_READ_S: Final = 2.0
"""How long the read of a session's standing may take before the timeline is left to tell:
a broker config written before persons were granted it answers nothing, and every `--follow`
and `--stop` would wait that long."""


class StoredUnreadable(Exception):
    """The broker did not answer the read: a broker config written before persons were
    granted it, say. The command then follows live only, as it did before."""


async def last_event(
    js: JetStreamContext, ns: Namespace, person: str, session_id: str
) -> SessionEvent | None:
    """The last event stored on `person`'s own timeline of `session_id`; None when none is
    (the session has not opened yet, is another person's, or aged out of the stream), or
    when the last message there is a refusal or an answer told to the person.

    Raises:
        StoredUnreadable: the read was refused or not answered within `_READ_S`.
    """
    return await _last_stored(js, ns, ns.events(person, session_id))


async def stored_end(
    js: JetStreamContext, ns: Namespace, person: str, session_id: str
) -> SessionEvent | None:
    """How `person`'s session `session_id` ended, from what is stored; None while it runs
    (or before it opened).

    The router keeps how each session stands, a copy of its opening and then of its end, on a
    subject of its own (`Namespace.standing`), which nothing told on the timeline after the end
    hides (a refusal, an approvals answer, a tool step). Where that cannot be read (a broker
    config written before it was granted, said on standard error), the timeline's last event
    tells, as it did before.

    Raises:
        StoredUnreadable: the timeline could not be read.
    """
    last, standing = await asyncio.gather(
        last_event(js, ns, person, session_id), _standing(js, ns, person, session_id)
    )
    return ended_by(last, standing)


def ended_by(last: SessionEvent | None, standing: SessionEvent | None) -> SessionEvent | None:
    """The end of a session whose timeline's last stored event is `last` and the last copy of
    whose standing is `standing` (each None when none is stored), or None while it runs.

    Its standing decides when stored: an end, or an opening since (an id opened again after
    a refused opening, or after its ended session expired), unless the timeline's last event
    is newer than that opening (ended by a router that kept no standing, during an upgrade).
    Without it (a session opened before the router kept it, a broker that does not grant
    reading it), the timeline does.
    """
    if standing is not None and (
        standing.event_type in ENDS or last is None or last.created_at < standing.created_at
    ):
        return standing if standing.event_type in ENDS else None
    return last if last is not None and last.event_type in ENDS else None


async def _standing(
    js: JetStreamContext, ns: Namespace, person: str, session_id: str
) -> SessionEvent | None:
    """The last copy of the session's standing; None when none is stored or it cannot be
    read, which is then said on standard error."""
    try:
        return await _last_stored(js, ns, ns.standing(person, session_id), _STANDING_READ_S)
    except StoredUnreadable as exc:
        print(
            f"could not read how session {session_id} stands ({exc}): telling from its "
            "timeline alone (a broker config written before this release: regenerate it "
            "with `parley nats-config`)",
            file=sys.stderr,
        )
        return None


async def _last_stored(
    js: JetStreamContext, ns: Namespace, subject: str, within_s: float = _READ_S
) -> SessionEvent | None:
    """The last event stored on `subject` of the events stream (None: none, or no event).

    Raises:
        StoredUnreadable: the read was refused or not answered within `within_s`.
    """
    try:
        async with asyncio.timeout(within_s):
            stored = await js.get_last_msg(ns.stream("events"), subject, direct=True)
    except NotFoundError:
        return None
    except (TimeoutError, nats.errors.Error) as exc:
        raise StoredUnreadable(f"{type(exc).__name__} {exc}".strip()) from exc
    return _event(stored.data or b"")


def _event(data: bytes) -> SessionEvent | None:
    try:
        envelope = decode_envelope(data)
    except DecodeError:
        return None
    return envelope if isinstance(envelope, SessionEvent) else None


def live_news(data: bytes) -> SessionEvent | Error | None:
    """What a live message of a timeline says: an event, a refusal, or nothing to show."""
    try:
        envelope = decode_envelope(data)
    except DecodeError:
        return None  # not ours to judge; the timeline stays readable
    return envelope if isinstance(envelope, SessionEvent | Error) else None


def joined(
    stored: SessionEvent | None, live: Sequence[SessionEvent | Error]
) -> list[SessionEvent | Error]:
    """The stored last event and what came live meanwhile, each once, in the order they
    were made: the stored event is left out when its live copy is among `live` (module
    doc), and otherwise goes after the live ones made before it. Those were published
    after the subscription and before it, their copies ahead of its own: shown first, it
    would come before events older than it (its writers being several: router, gate, tool
    runtime, their clocks kept close)."""
    if stored is None or any(item.id == stored.id for item in live):
        return list(live)
    at = max(
        (i + 1 for i, item in enumerate(live) if item.created_at < stored.created_at), default=0
    )
    return [*live[:at], stored, *live[at:]]


@dataclass(frozen=True)
class CaughtUp:
    """Where a followed session stands: `ended` is its end when it had ended before the
    command subscribed; else `first` is what to show before the live part (joined)."""

    ended: SessionEvent | None
    first: list[SessionEvent | Error]
    shown: str | None = None
    """The id of the stored event when it is shown from the store: its live copy is dropped."""
    nothing_stored: bool = False
    """The timeline and the standing were read and held nothing of the session: it has not
    opened yet (a session just detached), or its id is mistyped or another person's."""
    opening: SessionEvent | None = None
    """The session's opening (`session_created`, as the router keeps it) when it runs: its
    limits say how long a call may run (tools/_session_wait.py)."""


async def caught_up(
    history: JetStreamContext | None,
    ns: Namespace,
    person: str,
    session_id: str,
    live: Subscription,
) -> CaughtUp:
    """Where a session followed by id stands; without a history to read, or when the broker
    does not answer the read, nothing: it is followed live only, as it was before."""
    if history is None:
        return CaughtUp(None, [])
    try:
        return await _catch_up(history, ns, person, session_id, live)
    except StoredUnreadable as exc:
        print(
            f"could not read how session {session_id} stands ({exc}): following it live only",
            file=sys.stderr,
        )
        return CaughtUp(None, [])


async def read_live(
    live: Subscription,
    news: asyncio.Queue[SessionEvent | Decision | Error | None],
    shown: str | None = None,
) -> None:
    """Hand each live message of a followed timeline on to `news`, in order, until cancelled;
    but the live copy of the event `shown` from the store already (module doc)."""
    async for raw in live.messages:
        item = live_news(raw.data)
        if item is not None and item.id != shown:
            news.put_nowait(item)


async def _catch_up(
    js: JetStreamContext, ns: Namespace, person: str, session_id: str, live: Subscription
) -> CaughtUp:
    """Read the session's last stored event once `live` (its timeline, no callback) is
    confirmed by the server, and join it to the live messages that came meanwhile, which are
    taken from `live` here; the caller reads the rest of `live` after.

    Raises:
        StoredUnreadable: as `last_event`; nothing has been taken from `live` then.
    """
    stored, standing = await asyncio.gather(
        last_event(js, ns, person, session_id), _standing(js, ns, person, session_id)
    )
    arrived = [await live.next_msg(timeout=None) for _ in range(live.pending_msgs)]
    news = [item for raw in arrived if (item := live_news(raw.data)) is not None]
    end = ended_by(stored, standing)
    if end is not None and all(item.id != end.id for item in news):  # else it comes live
        if not news:  # it had ended before the command subscribed
            return CaughtUp(end, [])
        return CaughtUp(None, joined(end, news), end.id)  # it ended meanwhile: in its place
    if stored is None and standing is None and not news:
        return CaughtUp(None, [], nothing_stored=True)
    first = joined(stored, news)
    opening = (
        standing if standing is not None and standing.event_type == "session_created" else None
    )
    if stored is None or first[0] is not stored:  # nothing stored, or its live copy is in
        return CaughtUp(None, first, opening=opening)
    return CaughtUp(None, first, stored.id, opening=opening)


def ended_line(session_id: str, event: SessionEvent) -> str:
    """What `--stop` says of a session that had ended already: nothing was sent."""
    how = f"{event.stop_reason} (round {event.round})"
    return f"session {session_id} had ended already: {how}; nothing to stop"


def unopened_line(session_id: str, limit_s: float) -> str:
    """What `--follow` says of a session of which nothing is stored: it waits, and why."""
    return (
        f"nothing of session {session_id} is stored yet: waiting up to {limit_s:.0f} s for it "
        "to open (a session just detached opens in a moment; an id mistyped, or another "
        "person's, never does)"
    )
