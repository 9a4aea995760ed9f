"""The fault schedule of a chaos run: which fault, to whom, when; the same for the same seed.

Pure: a `random.Random(seed)` draws the whole schedule before the run starts, so a failing
run is replayed by giving its seed again, and the schedule can be printed and tested without
starting anything. Faults fall in the first 70% of the run, leaving its tail to show that the
system recovered from the last one.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = (
    "NODE_PREFIX",
    "SERVER",
    "SUBMIT_LEADER",
    "Action",
    "PlannedFault",
    "cluster_targets",
    "plan_faults",
)

SERVER = "nats-server"
"""The target name of the broker itself."""

NODE_PREFIX = "nats-"
"""A cluster node's target name: `nats-n1`, `nats-n2`, ..."""

SUBMIT_LEADER = "nats-submit-leader"
"""Whichever cluster node leads PARLEY_SUBMIT when the fault strikes: hit on purpose, since
losing a stream's leader is what makes its clients wait for an election."""


def cluster_targets(size: int) -> tuple[str, ...]:
    """The broker targets of a run on a `size`-node cluster: each node, and the leader of
    PARLEY_SUBMIT."""
    return (*(f"{NODE_PREFIX}n{index}" for index in range(1, size + 1)), SUBMIT_LEADER)


Action = Literal["kill", "pause", "restart"]
"""kill: SIGKILL, then start again after `hold_s` (a crash and its supervisor).
pause: SIGSTOP, then SIGCONT after `hold_s` (a stalled VM, a zombie).
restart: SIGTERM (a graceful drain), then start again."""

_ACTIONS: tuple[Action, ...] = ("kill", "kill", "pause", "restart")


@dataclass(frozen=True, slots=True)
class PlannedFault:
    """One fault: at `at` seconds into the run, `action` to `target`, healed `hold_s` later."""

    at: float
    action: Action
    target: str
    hold_s: float

    def describe(self) -> str:
        return f"{self.at:6.1f} s  {self.action:<7} {self.target:<12} for {self.hold_s:.1f} s"


def plan_faults(
    seed: int,
    duration_s: float,
    targets: Sequence[str],
    *,
    mean_gap_s: float = 3.0,
    include_server: bool = True,
    servers: Sequence[str] = (SERVER,),
) -> list[PlannedFault]:
    """Draw the faults of a run of `duration_s` seconds against `targets`.

    Args:
        seed: the run's seed; equal seeds give equal schedules.
        duration_s: the run's length; faults fall within its first 70%.
        targets: the actor names that may be hit.
        mean_gap_s: the mean time between faults (one fault in flight at a time: the next
            starts after the previous one is healed).
        include_server: whether the nats-server itself may be killed or paused.
        servers: the broker's targets: the one server, or a cluster's (`cluster_targets`),
            hit one at a time like the actors.
    """
    rng = random.Random(seed)  # noqa: S311 - a replayable schedule, not a secret
    pool = sorted(targets) + (list(servers) if include_server else [])
    if not pool:
        return []
    end = duration_s * 0.7
    faults: list[PlannedFault] = []
    order: list[str] = []
    at = rng.uniform(0.1, 0.2) * duration_s
    while at < end:
        if not order:  # every target once, in a shuffled order, before any is hit again
            order = rng.sample(pool, len(pool))
        target = order.pop()
        action = rng.choice(_ACTIONS)
        if target in servers and action == "restart":
            action = "kill"
        hold = round(rng.uniform(0.5, 3.0), 2)
        faults.append(PlannedFault(round(at, 2), action, target, hold))
        at += hold + rng.expovariate(1 / mean_gap_s) + 1.0
    return faults


def router_kills(every_s: float, duration_s: float, *, down_s: float = 0.2) -> list[PlannedFault]:
    """SIGKILL the router every `every_s` seconds through the run's first 70% (down `down_s`
    each time): restarts faster than a turn's timeout, so a call's deadline must survive them
    (issue: clocks that survive restarts)."""
    if every_s <= 0:
        raise ValueError(f"the router's kill period must be positive, got {every_s}")
    count = int(duration_s * 0.7 / every_s)
    return [PlannedFault(round(every_s * k, 2), "kill", "router", down_s) for k in range(1, count)]


def merged(*plans: Sequence[PlannedFault]) -> list[PlannedFault]:
    """Several schedules as one, in time order (faults are applied one after another)."""
    return sorted((fault for plan in plans for fault in plan), key=lambda fault: fault.at)
