"""The fault schedule: the same seed gives the same faults; every target is hit in turn."""

from __future__ import annotations

import itertools

import pytest

from tools.chaos._schedule import SERVER, merged, plan_faults, router_kills

ACTORS = ["gate", "router", "auditor", "gpt", "claude"]


def test_the_same_seed_gives_the_same_schedule() -> None:
    assert plan_faults(1, 60, ACTORS) == plan_faults(1, 60, list(reversed(ACTORS)))
    assert plan_faults(1, 60, ACTORS) != plan_faults(2, 60, ACTORS)


def test_faults_leave_the_last_30_percent_of_the_run_quiet() -> None:
    for seed in range(50):
        faults = plan_faults(seed, 100, ACTORS)
        assert faults, seed
        assert all(10 <= f.at < 70 for f in faults)
        assert all(a.at + a.hold_s < b.at for a, b in itertools.pairwise(faults))


def test_every_target_is_hit_before_any_is_hit_twice() -> None:
    faults = plan_faults(3, 200, ACTORS)
    first = [f.target for f in faults[: len(ACTORS) + 1]]
    assert sorted(first) == sorted([*ACTORS, SERVER])
    assert all(f.action in {"kill", "pause"} for f in faults if f.target == SERVER)


def test_without_server_faults_the_server_is_left_alone() -> None:
    assert all(f.target != SERVER for f in plan_faults(1, 300, ACTORS, include_server=False))


def test_router_kills_come_faster_than_a_turn_timeout_and_merge_in_time_order() -> None:
    kills = router_kills(2.0, 20.0)
    assert [fault.at for fault in kills] == [2.0, 4.0, 6.0, 8.0, 10.0, 12.0]
    assert {(fault.action, fault.target) for fault in kills} == {("kill", "router")}
    seeded = plan_faults(1, 20.0, ["gate", "router", "gpt"])
    both = merged(seeded, kills)
    assert len(both) == len(seeded) + len(kills)
    assert [fault.at for fault in both] == sorted(fault.at for fault in both)
    with pytest.raises(ValueError, match="positive"):
        router_kills(0, 20.0)
