"""The faults of `parley chaos --shared`: which process when, and applying them.

The schedule is the chaos schedule's (tools/chaos/_schedule.py: the same seed gives the same
times, targets and holds; every target once, shuffled, before any is hit again; one fault at
a time), over issue 16's targets, each fault a SIGKILL and a start again after its hold, as a
supervisor would: Alice's relay, Bob's relay, Alice's local agent host, Alice's router, and
the gateway's nats-server (same port and store, so the relays reconnect to it).
"""

from __future__ import annotations

import asyncio
import time
from typing import Final, TextIO

from bus import ChildProcess, EmbeddedServer
from tools.chaos._checker import Fault
from tools.chaos._procs import wait_ready
from tools.chaos._schedule import PlannedFault, plan_faults

__all__ = ("GATEWAY", "SHARED_TARGETS", "SharedFaults", "plan_shared_faults")

GATEWAY: Final = "gateway"
"""The target name of the gateway's nats-server."""
SHARED_TARGETS: Final = ("alice/relay", "bob/relay", "alice/local", "alice/router", GATEWAY)
"""What the schedule may SIGKILL: issue 16's list (actors named `<side>/<actor>`)."""


def plan_shared_faults(seed: int, duration_s: float) -> list[PlannedFault]:
    """The seed's schedule over `SHARED_TARGETS`, every fault a SIGKILL."""
    plan = plan_faults(seed, duration_s, SHARED_TARGETS, include_server=False)
    return [PlannedFault(fault.at, "kill", fault.target, fault.hold_s) for fault in plan]


class SharedFaults:
    """Applies the plan to the run's processes and the gateway; records when each healed (the
    process started again), which is what progress after a fault is measured from."""

    def __init__(
        self, children: dict[str, ChildProcess], gateway: EmbeddedServer, out: TextIO
    ) -> None:
        self.children = children
        self.gateway = gateway
        self.out = out
        self.healed: list[Fault] = []

    async def run(self, plan: list[PlannedFault], started: float) -> None:
        for fault in plan:
            delay = started + fault.at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)  # the schedule's own clock, not a synchronisation
            print(f"fault: {fault.describe()}", file=self.out, flush=True)
            await self._apply(fault)

    async def _apply(self, fault: PlannedFault) -> None:
        if fault.target == GATEWAY:
            await asyncio.to_thread(self.gateway.kill)
            await asyncio.sleep(fault.hold_s)  # the outage's length
            await asyncio.to_thread(self.gateway.start)
            self.healed.append(Fault(fault.action, fault.target, time.time()))
            return
        child = self.children[fault.target]
        await asyncio.to_thread(child.kill)
        await asyncio.sleep(fault.hold_s)  # how long a supervisor takes to notice
        child.start()
        self.healed.append(Fault(fault.action, fault.target, time.time()))
        if not await wait_ready(child):
            print(f"fault: {fault.target} did not come back ready", file=self.out, flush=True)
