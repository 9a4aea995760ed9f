"""No session waits for ever: the sweep's judgement, without the bus.

A call's reminder (actors/router/_turn_watch.py) ends a session whose agent never answers. But a
reminder can be lost (deleted from its stream by hand, a bug, a stream restored from an old
backup), and a running session could lose its pending call the same way. Then nothing would
ever move it again, and the person waiting on it would wait for ever. So each router replica
periodically looks at every running session and ends, with stop reason `stalled`, any that
has not moved for its deadline plus `stall_margin_s`, whatever the cause:

- a session waiting on a call: the call's stored deadline (`PendingCall.deadline`);
- a running session waiting on nothing (which no transition leaves behind but a pause, whose
  session waits on its owner and is never swept): the moment of its last transition plus
  `turn_timeout_s`;

in both cases moved later by the time the router's bus could not hear (as a call's deadline
is). The margin is longer than an ack wait, so a reminder redelivered after a router died
holding it ends the session first, with the truer `AGENT_UNAVAILABLE`.

The sweep's input is an `Error` (`DEADLINE_EXCEEDED`) whose id derives from the session and
the deadline it missed: every replica that finds the same stalled session makes the same
input, and the session applies it once.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from actors.router._session import EventClock, Limits, Session, Step
from actors.router._turn_watch import Outages, deaf_s
from actors.router._turns import _end, record  # the one way a session ends, shared with the turns
from schemas import Error, ErrorCode, derive_id

__all__ = ("last_moved", "stall", "stalled")


def last_moved(session: Session) -> datetime | None:
    """When the session last changed: its last transition's effects, else its creation."""
    if session.applied:
        stamps = [effect.created_at for effect in session.applied[-1].effects]
        if stamps:
            return max(stamps)
    return session.created_at


def _deadline(session: Session, limits: Limits) -> tuple[datetime, datetime] | None:
    """(since when the session has been waiting, when its wait should have ended)."""
    moved = last_moved(session)
    pending = session.pending
    if session.paused and pending is None:
        return None  # waiting on its owner, who paused it: only they (or stop) move it
    if pending is not None and pending.deadline is not None:
        return moved or pending.deadline, pending.deadline
    if moved is None:
        return None  # nothing to measure from: an old record, left to its reminder
    return moved, moved + timedelta(seconds=limits.turn_timeout_s)


def stalled(
    session: Session, *, now: datetime, limits: Limits, outages: Outages = ()
) -> Error | None:
    """The input that ends `session` as stalled at `now`, or None if it may still move."""
    if not session.open:
        return None
    found = _deadline(session, limits)
    if found is None:
        return None
    since, deadline = found
    deaf = deaf_s(outages, since, now)
    end_by = deadline + timedelta(seconds=limits.stall_margin_s + deaf)
    if now < end_by:
        return None
    waiting = (now - since).total_seconds() - deaf
    pending = session.pending
    what = f"{pending.speaker}'s answer" if pending is not None else "a next step"
    return Error(
        id=derive_id(session.session_id, f"stalled-{deadline.isoformat()}"),
        created_at=now,
        code=ErrorCode.DEADLINE_EXCEEDED,
        message=(
            f"the session did not move for {waiting:.0f} s waiting for {what} (deadline "
            f"{deadline.isoformat(timespec='seconds')} + margin {limits.stall_margin_s:g} s); "
            "ended by the router's sweep"
        ),
        cause_id=pending.envelope_id if pending is not None else session.origin_id,
        details={
            "session_id": session.session_id,
            "deadline": deadline.isoformat(),
            "margin_s": limits.stall_margin_s,
            "outages_s": round(deaf, 3),
        },
    )


def stall(
    session: Session, error: Error, *, now: datetime, limits: Limits, outages: Outages = ()
) -> Step:
    """Apply the sweep's input: end the session as `stalled` if it still is, else nothing.

    Re-judged on the state in hand (the sweep looked at an older one): a session that moved
    since gives a different input id, or none, and is left alone.
    """
    replay = session.effects_of(error.id)
    if replay is not None:
        return Step(session=session, effects=replay, note="replayed")
    still = stalled(session, now=now, limits=limits, outages=outages)
    if still is None or still.id != error.id:
        return Step(session=session, note="moved since the sweep looked")
    clock = EventClock(session.session_id, error.id, now)
    ended, effects = _end(session, clock, "stalled", envelope_ids=(error.id,), error=error)
    return Step(session=record(ended, error.id, effects), effects=effects, changed=True)
