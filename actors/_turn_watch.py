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
for that. The turn timeout also counts from then, so an answer stuck behind an outage still
has its whole time. Heartbeat
times are the agent's clock, the rest the router's: hosts are assumed to keep their clocks
within a heartbeat period of each other (NTP does far better).
"""

from __future__ import annotations

from datetime import datetime

from msgspec import Struct

from actors._session import Limits
from schemas import ActorHeartbeat

__all__ = ("Unavailable", "Wait", "judge")

_MIN_WAIT_S = 0.05
"""Never re-arm a reminder for less than this: a clock a hair behind must not spin it."""


class Wait(Struct, frozen=True):
    """Nothing wrong yet: look again in `seconds`."""

    seconds: float


class Unavailable(Struct, frozen=True):
    """Give up on the call: the message for the person, and the figures behind it."""

    message: str
    details: dict[str, object]


def judge(
    agent: str,
    sent_at: datetime,
    heartbeat: ActorHeartbeat | None,
    *,
    now: datetime,
    connected_since: datetime,
    limits: Limits,
) -> Wait | Unavailable:
    """Decide about one call still unanswered at `now`.

    Args:
        agent: who was called.
        sent_at: when the call was made (its `created_at`).
        heartbeat: the agent's latest heartbeat, or None if it never wrote one.
        now: the router's clock.
        connected_since: when the router could last start hearing again (bus `Uptime`).
        limits: the router's knobs (`turn_timeout_s`, `missed_beats`, `start_grace_s`).
    """
    # An outage stops the clock: a call is given its whole timeout once the router can hear.
    waited = (now - max(sent_at, connected_since)).total_seconds()
    if waited >= limits.turn_timeout_s:
        return Unavailable(
            f"{agent} did not answer within {limits.turn_timeout_s:g} s "
            f"(turn timeout {limits.turn_timeout_s:g} s)",
            {"agent": agent, "waited_s": round(waited, 3), "limit_s": limits.turn_timeout_s},
        )
    timeout_in = limits.turn_timeout_s - waited
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
