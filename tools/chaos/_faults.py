"""Applying a chaos run's planned faults to its actor processes and its nats-server.

Each fault is real: SIGKILL (a crash), SIGTERM (a restart), SIGSTOP/SIGCONT (a pause), or the
server killed and started again on its port, store and config; on a cluster, one node at a
time (a named one, or whichever leads PARLEY_SUBMIT at that moment), restarted and rejoined
before the next fault. The time each fault was
healed is what the checker measures recovery from.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import TextIO

from bus import ChildProcess, EmbeddedCluster, EmbeddedServer
from tools.chaos._checker import Fault
from tools.chaos._keeper import Keeper
from tools.chaos._procs import wait_ready
from tools.chaos._schedule import NODE_PREFIX, SERVER, SUBMIT_LEADER, PlannedFault

__all__ = ("EVERY_ACTOR", "Faults")

EVERY_ACTOR = "*"
"""A scenario's target meaning every actor of the topology at once."""

TERMINATE_GRACE_S = 15.0
"""How long a restarted (SIGTERM) actor may drain before it is killed."""

ELECTION_WAIT_S = 60.0
"""How long a cluster may take to elect a leader (or a node to rejoin) before the run fails."""


class Faults:
    """Applies the planned faults to the children and the server; records when each healed."""

    def __init__(
        self,
        children: dict[str, ChildProcess],
        server: EmbeddedServer | EmbeddedCluster,
        out: TextIO,
        submit_stream: str = "",
        keeper: Keeper | None = None,
        before_fault: Callable[[PlannedFault], Awaitable[None]] | None = None,
    ) -> None:
        """`submit_stream`: PARLEY_SUBMIT's name, whose leader `SUBMIT_LEADER` hits;
        `keeper`: told which actors a fault is acting on, so it leaves their exits alone;
        `before_fault`: awaited before each fault is applied, to hold it until the moment it
        is meant for (the LLM mix's kill of the gateway while a stream is written)."""
        self.children = children
        self.keeper = keeper
        self.before_fault = before_fault
        self.server = server
        self.out = out
        self.submit_stream = submit_stream
        self.healed: list[Fault] = []

    async def run(self, plan: list[PlannedFault], started: float) -> None:
        for fault in plan:
            delay = started + fault.at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)  # the schedule's own clock, not a synchronisation
            if self.before_fault is not None:
                await self.before_fault(fault)
            print(f"fault: {fault.describe()}", file=self.out, flush=True)
            await self._apply(fault)

    def _healed(self, fault: PlannedFault) -> None:
        """The fault is over: what it stopped is running again (or starting). Recovery is
        measured from here, so it includes the time actors take to start, and a start slow
        enough to outlast the run is seen as a slow recovery, not as no progress at all."""
        self.healed.append(Fault(fault.action, fault.target, time.time()))

    async def _on_node(self, cluster: EmbeddedCluster, fault: PlannedFault) -> None:
        """Kill or pause one cluster node; a killed one is restarted after `hold_s` and the
        fault is healed once it follows the metadata leader again."""
        if fault.target == SUBMIT_LEADER:
            stream = self.submit_stream
            node = await asyncio.to_thread(cluster.wait_stream_leader, stream, ELECTION_WAIT_S)
            print(f"fault: {stream} is led by {node}", file=self.out, flush=True)
        else:
            node = fault.target.removeprefix(NODE_PREFIX)
        if fault.action == "pause":
            os.kill(cluster.node(node).pid or 0, signal.SIGSTOP)
            await asyncio.sleep(fault.hold_s)  # the pause's length
            os.kill(cluster.node(node).pid or 0, signal.SIGCONT)
        else:
            await asyncio.to_thread(cluster.kill, node)
            await asyncio.sleep(fault.hold_s)  # the outage's length
            await asyncio.to_thread(cluster.restart, node, ELECTION_WAIT_S)
        self._healed(fault)

    async def _apply(self, fault: PlannedFault) -> None:
        node_fault = fault.target.startswith(NODE_PREFIX) and fault.target != SERVER
        if isinstance(self.server, EmbeddedCluster) and node_fault:
            await self._on_node(self.server, fault)
            return
        if fault.target == SERVER and isinstance(self.server, EmbeddedServer):
            if fault.action == "pause":
                os.kill(self.server.pid or 0, signal.SIGSTOP)
                await asyncio.sleep(fault.hold_s)  # the fault's length
                os.kill(self.server.pid or 0, signal.SIGCONT)
            else:
                await asyncio.to_thread(self.server.kill)
                await asyncio.sleep(fault.hold_s)  # the outage's length
                await asyncio.to_thread(self.server.start)
            self._healed(fault)
            return
        names = list(self.children) if fault.target == EVERY_ACTOR else [fault.target]
        if self.keeper is None:
            started = await self._on_actors(fault)
        else:
            with self.keeper.holding(names):  # the exits it causes are the fault's own
                started = await self._on_actors(fault)
        for child in started:  # an exit from here on is the actor's own: the keeper's
            if not await wait_ready(child):
                print(f"fault: {child.name} did not come back ready", file=self.out, flush=True)

    async def _on_actors(self, fault: PlannedFault) -> list[ChildProcess]:
        """Apply an actor fault up to its healing; return the children started again."""
        if fault.target == EVERY_ACTOR:
            return await self._all_at_once(fault)
        child = self.children[fault.target]
        if fault.action == "pause":
            child.send(signal.SIGSTOP)
            await asyncio.sleep(fault.hold_s)  # the pause's length
            child.send(signal.SIGCONT)
            self._healed(fault)
            return []
        if fault.action == "kill":
            await asyncio.to_thread(child.kill)
            await asyncio.sleep(fault.hold_s)  # how long the supervisor takes to notice
        else:
            await asyncio.to_thread(child.stop, TERMINATE_GRACE_S)
        child.start()
        self._healed(fault)
        return [child]

    async def _all_at_once(self, fault: PlannedFault) -> list[ChildProcess]:
        """Every actor at once: SIGKILL (or SIGSTOP) them all, then bring them all back."""
        children = list(self.children.values())
        if fault.action == "pause":
            for child in children:
                child.send(signal.SIGSTOP)
            await asyncio.sleep(fault.hold_s)  # the pause's length
            for child in children:
                child.send(signal.SIGCONT)
            self._healed(fault)
            return []
        for child in children:
            await asyncio.to_thread(child.kill)
        await asyncio.sleep(fault.hold_s)  # the outage's length
        for child in children:
            child.start()
        self._healed(fault)
        return children
