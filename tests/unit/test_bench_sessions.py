"""The thousand-sessions figure's pure parts: the agents' think times it takes out, the
script that makes them think, and a verdict that fails."""

from __future__ import annotations

import tomllib
from typing import Any

from actors.agent.brains._scripted import Script
from schemas import Namespace
from tools.bench._scale_sessions import AIM_RATIO, ROUNDS, _script, judged, think_s
from tools.bench._store_floor import _fresh, moved, sessions_per_s_asked


def _wave(sessions: int, completed: int, added_ms: float, rss_kb: int) -> dict[str, Any]:
    peaks = dict.fromkeys(("gate", "router", "gpt", "claude"), rss_kb)
    return {
        "sessions": sessions,
        "completed": completed,
        "added_ms_per_turn_p50": added_ms,
        "added_ms_per_turn_p99": added_ms,
        "peak_rss_kb": peaks,
    }


def test_every_turn_thinks_between_one_and_three_seconds_as_the_script_says() -> None:
    for agent in ("gpt", "claude"):
        script = Script.model_validate(tomllib.loads(_script(agent)))
        delays = {(turn.goal, turn.round): turn.delay_s for turn in script.turn}
        assert len(delays) == 5 * ROUNDS
        for (goal, round_), delay in delays.items():
            assert round_ is not None and delay == think_s(int(goal[5]), round_)
            assert 1.0 <= delay <= 3.0
        assert {turn.handoff.to for turn in script.turn if turn.handoff} == (
            {"claude"} if agent == "gpt" else {"gpt"}
        )


def test_the_verdict_passes_within_the_aim_and_fails_past_it() -> None:
    within = judged(_wave(10, 10, 100.0, 80_000), _wave(1000, 1000, 100.0 * AIM_RATIO, 179_000))
    assert within["pass"]["added_ratio"] and within["all_completed"]
    assert within["rss_kb_per_session"]["router"] == 99_000 / 990
    past = judged(_wave(10, 10, 100.0, 80_000), _wave(1000, 1000, 201.0 * AIM_RATIO, 80_000))
    assert not past["pass"]["added_ratio"]


def test_a_session_that_did_not_complete_fails_the_figure_whatever_its_times() -> None:
    run = judged(_wave(10, 10, 100.0, 80_000), _wave(1000, 999, 50.0, 80_000))
    assert not run["all_completed"] and not run["pass"]["added_ratio"]


def test_the_rate_asked_is_that_of_the_half_that_thinks_most_each_by_its_deadline() -> None:
    # Four sessions: the two thinking most (6 s and 7 s) must end within their thinking and
    # three turns of twice 100 ms: one by 6.6 s, both by 7.6 s; the later asks more.
    asked = sessions_per_s_asked(4, [7.0, 4.0, 6.0, 5.0], 3, 100.0, 2.0)
    assert asked == 2 / 7.6
    # An early deadline can ask most: one session due at 1.6 s, the other at 9.6 s.
    assert sessions_per_s_asked(4, [1.0, 0.5, 9.0, 0.2], 3, 100.0, 2.0) == 1 / 1.6
    # An odd count takes the larger half; more time allowed asks less.
    assert sessions_per_s_asked(3, [4.0, 5.0, 6.0], 3, 100.0, 2.0) == 2 / 6.6
    assert sessions_per_s_asked(4, [7.0, 4.0, 6.0, 5.0], 3, 500.0, 2.0) < asked


def test_the_floor_stores_into_its_own_namespace_each_on_a_subject_of_its_own() -> None:
    source, target = Namespace("benchsessions"), Namespace("benchfloor")
    assert moved("benchsessions.submit.*", source, target) == "benchfloor.submit.*"
    assert moved("$KV.benchsessions_traces.>", source, target) == "$KV.benchfloor_traces.>"
    assert moved("BENCHSESSIONS_EVENTS", source, target) == "BENCHFLOOR_EVENTS"
    assert moved("$KV.benchsessionsx_traces.>", source, target) == "$KV.benchsessionsx_traces.>"
    assert _fresh("benchfloor.audit.*.*", "p1x7") == "benchfloor.audit.p1x7.p1x7"
    assert _fresh("$KV.benchfloor_traces.>", "p1x7") == "$KV.benchfloor_traces.p1x7"
