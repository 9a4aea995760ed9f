"""Every wait ends (issue 21, items 3 and 4): real processes, real signals, a locked-down broker.

1. A call's deadline is stored with it, so a router SIGKILLed every 2 s still ends a call to
   an agent that beats but never answers with `AGENT_UNAVAILABLE`, within `turn_timeout_s`
   plus the documented bound (one ack wait, for a reminder the router died holding, and a
   router start). Before, each restart gave the call its whole timeout again: it never ended.
2. A session whose reminder is deleted from the store by hand is still ended, by the router's
   sweep, with stop reason `stalled` once it is `stall_margin_s` past its deadline. Before,
   nothing ever moved it again.

The person's side is `parley collab`, whose wait now follows the session's own deadline.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from tests.support.agents import write_profile
from tests.support.lockdown import LockedDown
from tests.support.processes import ProcessOutput
from tests.support.system import System, finished, parley_cli, running_locked_system

pytestmark = pytest.mark.chaos

GOAL = "Collaborate on a two-line poem about tides."
TURN_TIMEOUT_S = 6.0
ACK_WAIT_S = 1.0
KILL_EVERY_S = 2.0
MIN_LIFE_S = 1.0
"""How long each restarted router lives at least, from its ready line."""
ROUTER_START_S = 5.0
"""Slack for one router start (a Python process, its connection and its consumers) under a
loaded machine: the reminder may come due while the router is down."""


def silent_agent(tmp_path: Path) -> Path:
    """A profile whose local program reads its requests and never answers: it beats, so only
    the turn timeout can end a call to it."""
    return write_profile(
        tmp_path / "agents",
        "gpt",
        f'backend = "subprocess"\ncommand = ["{sys.executable}", "-c", "import sys; '
        f'sys.stdin.read()"]\nturn_timeout_s = 3600',
    )


def collab(system: System, locked: LockedDown) -> ProcessOutput:
    config = ("--config", str(locked.settings_file("cli")))
    return parley_cli(system.env, "collab", *config, "--first", "gpt", "--max-rounds", "4", GOAL)


async def test_a_router_killed_every_two_seconds_still_ends_a_silent_call_in_time(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    # The router's reminders come back 1 s after a router died holding one.
    locked_down.tune("router", ack_wait_s=str(ACK_WAIT_S))
    async with running_locked_system(
        locked_down,
        tmp_path / "keys",
        agents={"gpt": str(silent_agent(tmp_path)), "claude": "claude"},
        heartbeat_s="0.5",
        # Six missed beats (3 s): a beat delayed by the router restarts on two cores must not
        # make the silent agent look gone; its silence is what the test times.
        router_options={
            "turn_timeout_s": TURN_TIMEOUT_S,
            "stall_margin_s": 600.0,
            "missed_beats": 6,
        },
    ) as system:
        started = time.monotonic()
        cli = collab(system, locked_down)
        done = asyncio.Event()
        kills = 0

        async def kill_schedule() -> None:
            # The schedule, not synchronisation: a kill every 2 s until the session ended, but
            # never less than 1 s after the router's ready line (a start slower than 2 s on a
            # loaded machine was otherwise killed as soon as it was ready: nothing could move).
            nonlocal kills
            next_kill = time.monotonic() + KILL_EVERY_S
            while not done.is_set():
                try:
                    await asyncio.wait_for(done.wait(), max(next_kill - time.monotonic(), 0))
                except TimeoutError:
                    killed_at = time.monotonic()
                    await system.kill_and_restart("router")
                    kills += 1
                    next_kill = max(killed_at + KILL_EVERY_S, time.monotonic() + MIN_LIFE_S)

        async def person() -> tuple[int, list[str]]:
            try:
                return await finished(cli, 60)
            finally:
                done.set()

        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(kill_schedule())
            waited = tasks.create_task(person())
        code, lines = waited.result()
        took = time.monotonic() - started
        said = "\n".join(lines)
        assert code == 1, said
        assert "stopped: error (round 1)" in lines, said
        assert (
            f"    error: AGENT_UNAVAILABLE: gpt did not answer within {TURN_TIMEOUT_S:g} s "
            f"(turn timeout {TURN_TIMEOUT_S:g} s)"
        ) in lines, said
        # Two kills at least (a slow start leaves room for no more within the timeout). The
        # kills go on until the call ends, so a restart that gave the call its whole timeout
        # again would keep it from ever ending: `finished` and the bound catch that.
        assert kills >= 2, f"the router was killed {kills} times while the call waited"
        bound = TURN_TIMEOUT_S + ACK_WAIT_S + ROUTER_START_S
        assert took < bound, f"ended after {took:.1f} s, bound {bound:g} s ({kills} kills)"


async def test_a_session_whose_reminder_was_deleted_is_ended_by_the_sweep(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    locked = locked_down
    margin_s = 1.0
    async with running_locked_system(
        locked,
        tmp_path / "keys",
        agents={"gpt": str(silent_agent(tmp_path)), "claude": "claude"},
        heartbeat_s="0.5",
        router_options={
            "turn_timeout_s": TURN_TIMEOUT_S,
            "stall_margin_s": margin_s,
            "sweep_every_s": 0.5,
            "missed_beats": 6,  # a delayed beat must not make the silent agent look gone
        },
    ) as system:
        cli = collab(system, locked)
        await cli.wait_line(r"^session \S+: gpt, claude, up to 4 rounds")
        # The call's reminder went out with the session's first events: delete it by hand.
        admin = await locked.connect("provisioner")
        try:
            js = admin.jetstream()
            timers = locked.ns.stream("timers")
            assert (await js.stream_info(timers)).state.messages == 1
            await js.purge_stream(timers)
            assert (await js.stream_info(timers)).state.messages == 0
        finally:
            await admin.close()
        code, lines = await finished(cli, 30)
        said = "\n".join(lines)
        assert code == 1, said
        assert "stopped: stalled (round 1)" in lines, said
        failure = next(line for line in lines if line.strip().startswith("error:"))
        assert failure.startswith("    error: DEADLINE_EXCEEDED: the session did not move for "), (
            failure
        )
        assert "waiting for gpt's answer (deadline" in failure, failure
        assert f"+ margin {margin_s:g} s); ended by the router's sweep" in failure, failure
        router = "\n".join(system.processes["router"].lines)
        assert '"msg":"session stalled"' in router
