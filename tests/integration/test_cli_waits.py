"""A person waiting on `parley collab` is never left guessing (docs/cli.md).

All real processes: a nats-server, the gate, the router and agent hosts, and the command.

- Its server SIGKILLed mid-session, the command ends within seconds, exit 3, saying what was
  lost and how to stop the session once the server is back.
- A command that gives up waiting (the gate SIGSTOPped past its `--timeout`) stops the session
  it opened: once the gate resumes, the session ends canceled with the command's reason, and
  no round is played.
- `--detach` leaves the session running to its end, and says how to follow and stop it;
  `--follow` and `--stop` from other terminals follow and stop it.
- `parley delegate` hears a lost server as fast.
- Under the least-privilege config the person's own credentials suffice for all of it.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client as NATS

from bus import EmbeddedServer, provision
from schemas import HumanMessage, Namespace, decode_envelope
from tests.support.agents import write_profile
from tests.support.lockdown import LockedDown
from tests.support.router_wire import Timeline, stored_session
from tests.support.system import finished, parley_cli, running_locked_system, running_system
from tools.demo import DEMO_GOAL as FAIRY

SLOW_AGENT = """
[[turn]]
delay_s = 120
message = "slow"
"""
LOST_WITHIN_S = 5.0
FROZEN_WITHIN_S = 14.0
"""Unanswered pings take 4 to 6 s to count as a loss, then the reconnect window (2 s) runs:
6 to 8 s, with room for a loaded machine, and still short of an actor's 15 to 20 s of pings."""


@pytest.fixture
async def private_nc(private_server: EmbeddedServer, namespace: Namespace) -> AsyncIterator[NATS]:
    """A connection to this test's own server (which the test kills), namespace provisioned."""
    client = await nats.connect(private_server.url, allow_reconnect=False)
    await provision(client.jetstream(), namespace)
    yield client
    await client.close()


def _session_of(lines: list[str]) -> str:
    for line in lines:
        if found := re.search(r"session ([\w-]+)", line):
            return found.group(1)
    raise AssertionError("no session id in:\n" + "\n".join(lines))


def _opened_session(data: bytes | None) -> str:
    """The session id of the first message the command submitted."""
    msg = decode_envelope(data or b"")
    assert isinstance(msg, HumanMessage) and msg.session_id is not None, msg
    return msg.session_id


async def test_a_lost_server_ends_the_wait_within_seconds_saying_so(
    private_nc: NATS, private_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    brain = 'backend = "scripted"\nscript = "gpt-script.toml"'
    slow = write_profile(tmp_path / "agents", "gpt", brain, script=SLOW_AGENT)
    agents = {"gpt": str(slow), "claude": "claude"}
    async with running_system(
        private_nc, private_server, namespace, tmp_path / "keys", agents
    ) as system:
        cli = parley_cli(system.env, "collab", "--first", "gpt", "plan a hike")
        try:
            await cli.wait_line(r"^session [\w-]+: ")  # the session is open, the agent thinking
            private_server.kill()
            killed = time.monotonic()
            code = await cli.wait_exit(LOST_WITHIN_S + 5)
            took = time.monotonic() - killed
        finally:
            cli.close()
    output = "\n".join(cli.lines)
    assert code == 3, output
    assert took < LOST_WITHIN_S, f"{took:.1f} s to notice:\n{output}"
    session_id = _session_of(cli.lines)
    assert f"lost the connection to nats at {private_server.url}" in output
    assert f"the session {session_id} may still be running" in output
    assert f"`parley collab --stop {session_id}`" in output


async def test_a_frozen_server_ends_the_wait_within_seconds_too(
    private_nc: NATS, private_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    """A server SIGSTOPped refuses nothing: its socket stays open and each reconnect attempt
    would wait for its connect timeout. Unanswered pings and the reconnect window end it."""
    brain = 'backend = "scripted"\nscript = "gpt-script.toml"'
    slow = write_profile(tmp_path / "agents", "gpt", brain, script=SLOW_AGENT)
    agents = {"gpt": str(slow), "claude": "claude"}
    async with running_system(
        private_nc, private_server, namespace, tmp_path / "keys", agents
    ) as system:
        server_pid = private_server.pid
        assert server_pid is not None
        cli = parley_cli(system.env, "collab", "--first", "gpt", "plan a hike")
        try:
            await cli.wait_line(r"^session [\w-]+: ")
            os.kill(server_pid, signal.SIGSTOP)
            frozen = time.monotonic()
            code = await cli.wait_exit(FROZEN_WITHIN_S + 10)
            took = time.monotonic() - frozen
        finally:
            os.kill(server_pid, signal.SIGCONT)
            cli.close()
    output = "\n".join(cli.lines)
    assert code == 3, output
    assert took < FROZEN_WITHIN_S, f"{took:.1f} s to notice:\n{output}"
    assert f"lost the connection to nats at {private_server.url}" in output


async def test_a_command_that_gives_up_stops_the_session_it_opened(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    js = nc.jetstream()
    async with running_system(nc, nats_server, namespace, tmp_path / "keys") as system:
        gate = system.processes["gate"]
        gate.signal(signal.SIGSTOP)  # nothing the command sends is admitted meanwhile
        try:
            cli = parley_cli(
                system.env,
                "collab",
                *("--timeout", "2", "--first", "claude", "--max-rounds", "4", FAIRY),
            )
            code, lines = await finished(cli, timeout=30)
            # The session the command opened, read from what it submitted (still queued for
            # the stalled gate), not from the command's words.
            opening = await js.get_msg(
                namespace.stream("submit"), seq=1, subject=namespace.submit("cli"), next=True
            )
        finally:
            gate.signal(signal.SIGCONT)
        output = "\n".join(lines)
        assert code == 1, output
        assert "gave up waiting for the router to open the session" in output
        session_id = _opened_session(opening.data)
        timeline = Timeline(js, namespace, session_id)
        await timeline.open()
        end = await timeline.until_end(timeout=60)
        await timeline.close()
    assert (end.event_type, end.stop_reason) == ("session_canceled", "canceled"), end
    assert "gave up waiting for the router to open the session" in str(end.payload["reason"])
    assert not [e for e in timeline.events if e.event_type == "step_completed"]
    session = await stored_session(js, namespace, session_id)
    assert session.status == "canceled" and session.round == 1
    assert f"stop requested for session {session_id}" in output


async def test_detach_leaves_the_session_running_and_says_how_to_follow_and_stop_it(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    js = nc.jetstream()
    async with running_system(nc, nats_server, namespace, tmp_path / "keys") as system:
        cli = parley_cli(
            system.env, "collab", "--detach", "--first", "claude", "--max-rounds", "4", FAIRY
        )
        code, lines = await finished(cli, timeout=30)
        output = "\n".join(lines)
        assert code == 0, output
        session_id = _session_of(lines)
        assert f"`parley collab --follow {session_id}`" in output
        assert f"`parley collab --stop {session_id}`" in output
        timeline = Timeline(js, namespace, session_id)
        await timeline.open()
        end = await timeline.until_end(timeout=60)
        await timeline.close()
    assert (end.event_type, end.stop_reason) == ("session_completed", "final"), end


async def test_a_lost_server_ends_parley_delegate_within_seconds_saying_so(
    private_nc: NATS, private_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    agents = {"reviewer": "reviewer"}  # its script takes 8 s over "take your time"
    async with running_system(
        private_nc, private_server, namespace, tmp_path / "keys", agents
    ) as system:
        cli = parley_cli(
            system.env, "delegate", "@reviewer", "take your time", "--deadline-ms", "60000"
        )
        try:
            await cli.wait_line(r"^cli delegating to reviewer")
            private_server.kill()
            killed = time.monotonic()
            code = await cli.wait_exit(LOST_WITHIN_S + 5)
            took = time.monotonic() - killed
        finally:
            cli.close()
    output = "\n".join(cli.lines)
    assert code == 3, output
    assert took < LOST_WITHIN_S, f"{took:.1f} s to notice:\n{output}"
    assert f"lost the connection to nats at {private_server.url}" in output
    assert re.search(r"`parley calls [\w-]+` lists them", output), output


async def test_a_detached_session_is_followed_and_stopped_from_other_terminals(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    brain = 'backend = "scripted"\nscript = "gpt-script.toml"'
    slow = write_profile(tmp_path / "agents", "gpt", brain, script=SLOW_AGENT)
    agents = {"gpt": str(slow), "claude": "claude"}
    async with running_system(nc, nats_server, namespace, tmp_path / "keys", agents) as system:
        code, lines = await finished(
            parley_cli(system.env, "collab", "--detach", "--first", "gpt", "plan a hike")
        )
        assert code == 0, "\n".join(lines)
        session_id = _session_of(lines)
        follower = parley_cli(system.env, "collab", "--follow", session_id)
        try:
            await follower.wait_line(r"^following session ")  # subscribed to its timeline
            code, lines = await finished(parley_cli(system.env, "collab", "--stop", session_id))
            assert code == 0, "\n".join(lines)
            assert lines[-1] == "stopped: canceled (round 1)", "\n".join(lines)
            assert await follower.wait_exit(30) == 130, "\n".join(follower.lines)
        finally:
            follower.close()
    assert "stopped: canceled (round 1)" in follower.lines


async def test_giving_up_and_following_work_under_least_privilege(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    """The person's own credentials suffice to stop a session it gave up on and to follow it:
    the Stop is a submission like any other, the timeline one of its own."""
    async with running_locked_system(locked_down, tmp_path / "keys") as system:
        config = ("--config", str(locked_down.settings_file("cli")))
        gate = system.processes["gate"]
        gate.signal(signal.SIGSTOP)
        follower = None
        try:
            argv = (*config, "--timeout", "2", "--first", "claude", "--max-rounds", "4", FAIRY)
            code, lines = await finished(parley_cli(system.env, "collab", *argv))
            assert code == 1, "\n".join(lines)
            session_id = _session_of([line for line in lines if "stop requested" in line])
            follower = parley_cli(system.env, "collab", *config, "--follow", session_id)
            await follower.wait_line(r"^following session ")
            gate.signal(signal.SIGCONT)
            assert await follower.wait_exit(60) == 130, "\n".join(follower.lines)
        finally:
            gate.signal(signal.SIGCONT)
            if follower is not None:
                follower.close()
        logs = [line for process in system.processes.values() for line in process.lines]
    assert "stopped: canceled (round 1)" in follower.lines
    assert not [line for line in logs if "permission violation" in line]
