"""The router's judgement of a silent agent (actors/router/_turn_watch.py), figure by figure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from actors.router._session import Limits
from actors.router._turn_watch import Outages, Unavailable, Wait, deaf_s, due, judge
from schemas import ActorHeartbeat

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
LIMITS = Limits(turn_timeout_s=60.0, missed_beats=3, start_grace_s=15.0)
LONG_AGO = T0 - timedelta(hours=1)


def beat(at: datetime, period_s: float = 5.0) -> ActorHeartbeat:
    return ActorHeartbeat(
        actor_id="gpt", kind="agent", pid=1, started_at=at, beat_at=at, period_s=period_s
    )


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def verdict(
    now_s: float, heartbeat: ActorHeartbeat | None, connected: datetime = LONG_AGO
) -> Wait | Unavailable:
    return judge("gpt", T0, heartbeat, now=at(now_s), connected_since=connected, limits=LIMITS)


def test_a_live_agent_is_waited_for_until_its_beats_would_be_missed() -> None:
    assert verdict(1.0, beat(at(0.5))) == Wait(14.5)  # 3 beats of 5 s after its last one


def test_an_agent_silent_for_three_periods_is_unavailable() -> None:
    result = verdict(16.0, beat(at(0.5)))
    assert isinstance(result, Unavailable)
    assert result.message == (
        "gpt is not running: last heartbeat 15.5 s ago (limit 15 s); start it and try again"
    )
    assert result.details["silent_s"] == 15.5 and result.details["limit_s"] == 15.0


def test_a_beat_long_before_the_call_counts_from_the_call() -> None:
    # An agent stopped yesterday is given the same 15 s from the call as one restarting now.
    assert verdict(2.0, beat(LONG_AGO)) == Wait(13.0)
    result = verdict(15.0, beat(LONG_AGO))
    assert isinstance(result, Unavailable)
    assert result.message.startswith("gpt is not running: last heartbeat 3615.0 s ago")


def test_an_agent_never_seen_gets_the_start_grace() -> None:
    assert verdict(10.0, None) == Wait(5.0)
    result = verdict(15.0, None)
    assert isinstance(result, Unavailable)
    assert result.message == (
        "gpt is not running: no heartbeat in the 15.0 s since the call (limit 15 s); "
        "start it and try again"
    )
    assert result.details["last_heartbeat"] is None


def test_silence_counts_from_the_routers_reconnection_after_an_outage() -> None:
    # The broker was down from 1 s to 40 s: nobody could beat, nobody is dead for that.
    assert verdict(41.0, beat(at(0.5)), connected=at(40.0)) == Wait(14.0)
    assert isinstance(verdict(55.0, beat(at(0.5)), connected=at(40.0)), Unavailable)


def test_an_outage_stops_the_turn_clock() -> None:
    # Called at 0, the broker away from 10 s to 40 s: the call still has 60 s from 40 s.
    outage: Outages = ((at(10.0), at(40.0)),)

    def judged(now_s: float) -> Wait | Unavailable:
        return judge(
            "gpt",
            T0,
            beat(at(now_s - 1.0)),
            now=at(now_s),
            connected_since=at(40.0),
            limits=LIMITS,
            outages=outage,
        )

    assert judged(70.0) == Wait(14.0)
    assert judged(89.0) == Wait(1.0)
    result = judged(90.0)
    assert isinstance(result, Unavailable)
    assert result.details["waited_s"] == 60.0 and result.details["outages_s"] == 30.0


def test_a_router_restart_does_not_restart_the_turn_clock() -> None:
    # The router (re)connected 1 s ago, as it does after each of its restarts: the call made
    # at 0 is still given up on at its deadline, 60 s after it was made.
    result = verdict(60.0, beat(at(59.5)), connected=at(59.0))
    assert isinstance(result, Unavailable)
    assert result.message == "gpt did not answer within 60 s (turn timeout 60 s)"
    assert verdict(30.0, beat(at(29.5)), connected=at(29.0)) == Wait(14.5)  # beats judged anew


def test_the_stored_deadline_wins_over_the_limits_of_the_day() -> None:
    # Made under a 10 s timeout and stored with its deadline; the router now runs with 60 s.
    result = judge(
        "gpt",
        T0,
        beat(at(9.5)),
        now=at(10.0),
        connected_since=LONG_AGO,
        limits=LIMITS,
        deadline=at(10.0),
    )
    assert isinstance(result, Unavailable)


def test_an_ongoing_outage_keeps_moving_the_deadline() -> None:
    outage: Outages = ((at(50.0), None),)
    assert due(T0, at(60.0), now=at(70.0), limits=LIMITS, outages=outage) == at(80.0)
    assert due(T0, at(60.0), now=at(90.0), limits=LIMITS, outages=outage) == at(100.0)


def test_outages_count_once_and_only_after_the_call() -> None:
    outages: Outages = (
        (at(-30.0), at(5.0)),  # began before the call: only its last 5 s count
        (at(20.0), at(30.0)),
        (at(25.0), at(35.0)),  # overlaps the one before: 20..35 is 15 s, not 20
        (at(90.0), at(99.0)),  # after now
    )
    assert deaf_s(outages, T0, at(80.0)) == 20.0
    assert deaf_s((), T0, at(80.0)) == 0.0


def test_a_beating_agent_that_never_answers_times_out() -> None:
    assert verdict(58.0, beat(at(57.0))) == Wait(2.0)  # the turn timeout comes first
    result = verdict(60.0, beat(at(59.5)))
    assert isinstance(result, Unavailable)
    assert result.message == "gpt did not answer within 60 s (turn timeout 60 s)"


def test_the_period_comes_from_the_agents_own_heartbeat() -> None:
    assert verdict(1.0, beat(at(0.0), period_s=0.5)) == Wait(0.5)


@pytest.mark.parametrize("late_by", [0.0, 1e-6])
def test_a_reminder_is_never_rearmed_for_nothing(late_by: float) -> None:
    result = verdict(14.999 + late_by, None)
    assert isinstance(result, Wait) and result.seconds >= 0.05
