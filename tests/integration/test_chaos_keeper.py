"""A chaos run starts again an actor that exited on its own, and only that one.

Found in `parley chaos --cluster 3` runs on a starved machine: the gate exited (code 3, a
JetStream request timed out while the cluster elected a leader) right after a node's loss,
nothing started it again, and every session waiting on it failed with `AGENT_UNAVAILABLE`.
`parley up`'s supervisor would have restarted it; the run's own children must be kept the
same way (tools/chaos/_keeper.py), while the exits its faults cause stay the faults' own.

Real actor processes on a real nats-server; each step waits on the keeper's judgement or the
actor's ready line, never on a sleep.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bus import ChildProcess, EmbeddedServer
from schemas import Namespace
from tests.support.processes import parley_env
from tools.chaos._faults import Faults
from tools.chaos._keeper import Keeper, OwnExit
from tools.chaos._procs import actor_process, wait_ready
from tools.chaos._schedule import PlannedFault

ACTOR = "echo"
JUDGED_WAIT_S = 20.0


@dataclass
class Kept:
    keeper: Keeper
    child: ChildProcess
    log: Path
    out: io.StringIO


@pytest.fixture
async def kept(
    nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> AsyncIterator[Kept]:
    """One echo actor, ready, its exits heard by a running keeper."""
    out = io.StringIO()
    children: dict[str, ChildProcess] = {}
    keeper = Keeper(children, out)
    log = tmp_path / f"{ACTOR}.log"
    env = parley_env(nats_server.url, namespace.root)
    child = actor_process(ACTOR, "echo", env, log, on_exit=keeper.on_exit(ACTOR))
    children[ACTOR] = child
    child.start()
    keeping = asyncio.create_task(keeper.run())
    try:
        assert await wait_ready(child), log.read_text()
        yield Kept(keeper, child, log, out)
    finally:
        keeping.cancel()
        await asyncio.gather(keeping, return_exceptions=True)
        await asyncio.to_thread(child.stop, 5.0)


async def _judged(keeper: Keeper, count: int) -> None:
    """Until the keeper has judged `count` exits."""
    async with asyncio.timeout(JUDGED_WAIT_S):
        while keeper.judged < count:
            keeper.changed.clear()
            await keeper.changed.wait()


@pytest.mark.chaos
async def test_an_actor_that_exits_on_its_own_is_started_again(kept: Kept) -> None:
    first = kept.child.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)  # no fault of the run's: as the gate's own exit was
    await _judged(kept.keeper, 1)
    assert kept.keeper.exits == [OwnExit(ACTOR, -signal.SIGKILL)]
    assert await wait_ready(kept.child), kept.log.read_text()
    assert kept.child.pid != first
    assert f"{ACTOR} exited on its own (signal SIGKILL)" in kept.out.getvalue()
    assert "echo: 1" in kept.keeper.summary()


@pytest.mark.chaos
async def test_an_exit_a_fault_causes_is_left_to_the_fault(
    kept: Kept, nats_server: EmbeddedServer
) -> None:
    faults = Faults({ACTOR: kept.child}, nats_server, kept.out, keeper=kept.keeper)
    first = kept.child.pid
    # Held down for longer than the keeper's first backoff: a keeper that took the kill for
    # the actor's own exit would start it during the hold, and the fault would start a second.
    await faults.run([PlannedFault(0.0, "kill", ACTOR, 1.0)], time.monotonic())
    await _judged(kept.keeper, 1)
    assert kept.keeper.exits == []
    assert kept.child.running() and kept.child.pid != first
    assert [fault.target for fault in faults.healed] == [ACTOR]
