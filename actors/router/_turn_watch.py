"""Is the agent a session waits on still there? The router's judgement, without the bus.

Seed 000: "If channel is unavailable (agent restarting/crashed), orchestration transitions to
`error` and requires user action", and a request times out (60 s by default). Over the bus a
dead agent is silent: its calls sit in its work queue, and nothing ever answers. So the router
keeps a reminder per call it sends (a copy of the call on its own `parley.timers.router`) and,
each time the reminder comes round, asks `judge()`:

- answered, or the session moved on: nothing to do (the router checks that, not this module);
- waited longer than the turn timeout: the agent is unavailable, whatever its heartbeat says;
- the agent's heartbeat (registry KV, written every `period_s` by every actor) has been silent
  for `missed_beats` periods since the later of its last beat, the call, and the router's own
  (re)connection: the agent is not running (crashed, crash-looping, given up on by its
  supervisor). An agent never seen gets `start_grace_s` from the call instead;
- otherwise look again when the first of those limits would pass.

Counting from the router's own (re)connection, or from its own heartbeat being written again
(JetStream can come back after the connection does), keeps an outage from failing every
session at once: while the registry could not be written nobody could beat, and nobody is dead
for that.

The turn timeout is different: a call's deadline is fixed when it is made and stored with it
(`PendingCall.deadline`), and only the time the router's bus observed it could not hear (its
outages, `bus.Uptime.deaf()`) extends it, so an answer stuck behind an outage still has its
whole time. The router's own restart is not an outage: a router killed every 2 s must still
end a call to a silent agent. The bound on that end is the deadline plus, at worst, one ack
wait (the router died holding the due reminder, which comes back when its ack wait expires);
the sweep (actors/router/_sweep.py) ends anything still open `stall_margin_s` later. Outages seen by
a router process that died are forgotten with it: a call whose answer was stuck behind one
may be judged that much early. Heartbeat
times are the agent's clock, the rest the router's: hosts are assumed to keep their clocks
within a heartbeat period of each other (NTP does far better).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from msgspec import Struct

from actors.router._session import Limits
from schemas import ActorHeartbeat

__all__ = ("Outages", "Unavailable", "Wait", "deaf_s", "due", "judge")

Outages = Sequence[tuple[datetime, datetime | None]]
"""Intervals in which the bus could not hear, as `bus.Uptime.deaf()` gives them (an end of
None: still going on)."""

_MIN_WAIT_S = 0.05
"""Never re-arm a reminder for less than this: a clock a hair behind must not spin it."""


class Wait(Struct, frozen=True):
    """Nothing wrong yet: look again in `seconds`."""

    seconds: float


class Unavailable(Struct, frozen=True):
    """Give up on the call: the message for the person, and the figures behind it."""

    message: str
    details: dict[str, object]


def deaf_s(outages: Outages, start: datetime, now: datetime) -> float:
    """Seconds of `outages` that fall between `start` and `now` (overlaps counted once)."""
    spans = sorted((max(a, start), min(b or now, now)) for a, b in outages)
    total, reached = 0.0, start
    for begin, end in spans:
        begin = max(begin, reached)
        if end > begin:
            total += (end - begin).total_seconds()
            reached = end
    return total


def due(
    sent_at: datetime,
    deadline: datetime | None,
    *,
    now: datetime,
    limits: Limits,
    outages: Outages = (),
) -> datetime:
    """When a call is given up on: its stored deadline, moved by the outages since it was
    made (a call stored without a deadline gets `turn_timeout_s` from when it was sent)."""
    fixed = deadline or sent_at + timedelta(seconds=limits.turn_timeout_s)
    return fixed + timedelta(seconds=deaf_s(outages, sent_at, now))


def judge(
    agent: str,
    sent_at: datetime,
    heartbeat: ActorHeartbeat | None,
    *,
    now: datetime,
    connected_since: datetime,
    limits: Limits,
    deadline: datetime | None = None,
    outages: Outages = (),
) -> Wait | Unavailable:
    """Decide about one call still unanswered at `now`.

    Args:
        agent: who was called.
        sent_at: when the call was made (its `created_at`).
        heartbeat: the agent's latest heartbeat, or None if it never wrote one.
        now: the router's clock.
        connected_since: when the router could last start hearing again (bus `Uptime`): only
            for judging the agent's heartbeat, never the call's deadline.
        limits: the router's knobs (`turn_timeout_s`, `missed_beats`, `start_grace_s`).
        deadline: the call's stored deadline (None: `sent_at` + `turn_timeout_s`).
        outages: when the router's bus could not hear; their time extends the deadline.
    """
    # Only an outage stops the clock; a restart of the router does not.
    given_up_at = due(sent_at, deadline, now=now, limits=limits, outages=outages)
    timeout_in = (given_up_at - now).total_seconds()
    if timeout_in <= 0:
        waited = (now - sent_at).total_seconds()
        deaf = deaf_s(outages, sent_at, now)
        return Unavailable(
            f"{agent} did not answer within {limits.turn_timeout_s:g} s "
            f"(turn timeout {limits.turn_timeout_s:g} s)",
            {
                "agent": agent,
                "waited_s": round(waited - deaf, 3),
                "outages_s": round(deaf, 3),
                "limit_s": limits.turn_timeout_s,
            },
        )
    if heartbeat is None:
        allowed = limits.start_grace_s
        heard_from = max(sent_at, connected_since)
    else:
        allowed = limits.missed_beats * heartbeat.period_s
        heard_from = max(heartbeat.beat_at, sent_at, connected_since)
    silent = (now - heard_from).total_seconds()
    if silent >= allowed:
        if heartbeat is None:
            message = f"{agent} is not running: no heartbeat in the {silent:.1f} s since the call "
        else:
            since = (now - heartbeat.beat_at).total_seconds()
            message = f"{agent} is not running: last heartbeat {since:.1f} s ago "
        return Unavailable(
            message + f"(limit {allowed:g} s); start it and try again",
            {
                "agent": agent,
                "silent_s": round(silent, 3),
                "limit_s": allowed,
                "last_heartbeat": heartbeat.beat_at.isoformat() if heartbeat else None,
            },
        )
    return Wait(max(min(allowed - silent, timeout_in), _MIN_WAIT_S))
