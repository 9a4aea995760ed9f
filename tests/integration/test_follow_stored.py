"""`parley collab --follow` and `--stop` of a session named by id start from where it stands
(docs/cli.md, tools/_stored_events.py).

All real processes under the least-privilege config `parley up` uses (the gate, the router,
agent hosts and the commands, each with its own credentials):

- Of a session that had ended, `--follow` prints how it ended and exits with its code, and
  `--stop` says at once that it had ended (exit 1, no Stop sent), each well within the
  waits they used to sit out (60 s of silence; `--timeout`), even when a refusal was told on
  its timeline after the end (how it stands, the router's copy of its end,
  `parley.standing.<person>.<id>`).
- Following a running session from another terminal starts where it stands (the answer it
  waits for, due by when) and goes on live: the Stop ends it once, in both followers.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

from msgspec import structs
from nats.aio.msg import Msg

from bus import TraceHeaders
from schemas import Error, ErrorCode, decode_envelope, encode
from tests.support.agents import write_profile
from tests.support.lockdown import LockedDown
from tests.support.router_wire import stop
from tests.support.system import finished, parley_cli, running_locked_system

SLOW_AGENT = """
[[turn]]
delay_s = 120
message = "slow"
"""
OLD_FOLLOW_WAIT_S = 60.0
"""How long `--follow` of an ended session used to wait before saying anything."""
STOP_TIMEOUT_S = 30.0


def _session_of(lines: list[str]) -> str:
    for line in lines:
        if found := re.search(r"session ([\w-]+)", line):
            return found.group(1)
    raise AssertionError("no session id in:\n" + "\n".join(lines))


async def test_follow_and_stop_of_an_ended_session_say_how_it_ended_at_once(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    async with running_locked_system(locked_down, tmp_path / "keys") as system:
        config = ("--config", str(locked_down.settings_file("cli")))
        code, lines = await finished(parley_cli(system.env, "say", *config, "@claude", "hi"))
        assert code == 0, "\n".join(lines)
        session_id = _session_of(lines)
        (end,) = [line for line in lines if line.startswith("stopped: ")]
        # A pause sent after the end: the router's refusal is now the timeline's last
        # message, the one message of it a person may read.
        refusal = await _refused_after_the_end(locked_down, session_id)
        assert refusal.code is ErrorCode.INVALID_REQUEST, refusal

        started = time.monotonic()
        follow = parley_cli(system.env, "collab", *config, "--follow", session_id)
        code, followed = await finished(follow, OLD_FOLLOW_WAIT_S + 15)
        took_follow = time.monotonic() - started
        started = time.monotonic()
        stop = parley_cli(
            system.env, "collab", *config, "--stop", session_id, "--timeout", str(STOP_TIMEOUT_S)
        )
        code_stop, stopped = await finished(stop, STOP_TIMEOUT_S + 15)
        took_stop = time.monotonic() - started
        unopened = await _follow_of_an_id_never_opened(system.env, config)
        logs = [line for process in system.processes.values() for line in process.lines]
    output = "\n".join(followed)
    assert code == 0, output  # the session's own: it completed
    assert f"session {session_id} had ended already" in followed, output
    assert end in followed, output
    assert "following session" not in output and "could not read" not in output
    assert took_follow < OLD_FOLLOW_WAIT_S / 3, f"{took_follow:.1f} s:\n{output}"
    reason = end.removeprefix("stopped: ")
    assert stopped[-1] == f"session {session_id} had ended already: {reason}; nothing to stop", (
        stopped
    )
    assert code_stop == 1, stopped  # nothing was stopped
    assert took_stop < STOP_TIMEOUT_S / 3, f"{took_stop:.1f} s:\n" + "\n".join(stopped)
    assert not [line for line in logs if "permission violation" in line]
    assert "nothing of session" not in output, output  # its session was stored: no such line
    never = "01a22c11-0000-7000-8000-000000000000"
    assert (
        f"nothing of session {never} is stored yet: waiting up to 60 s for it to open (a "
        "session just detached opens in a moment; an id mistyped, or another person's, "
        "never does)"
    ) in unopened, unopened


async def _follow_of_an_id_never_opened(env: dict[str, str], config: tuple[str, str]) -> list[str]:
    """Follow an id no session has: its lines up to saying so, at once (before, it said only
    that it waited for "the session's next event", for a minute). Terminated then."""
    follow = parley_cli(env, "collab", *config, "--follow", "01a22c11-0000-7000-8000-000000000000")
    try:
        await follow.wait_line(r"^nothing of session ", timeout=20)
    finally:
        follow.kill()
        follow.close()
    return follow.lines


async def _refused_after_the_end(locked: LockedDown, session_id: str) -> Error:
    """Submit a pause of the ended session as the person, raw; return the router's refusal
    once it is on the timeline."""
    ns, nc = locked.ns, await locked.connect("cli")
    try:
        told: asyncio.Queue[Error] = asyncio.Queue()

        async def on_message(raw: Msg) -> None:
            envelope = decode_envelope(raw.data)
            if isinstance(envelope, Error):
                told.put_nowait(envelope)

        await nc.subscribe(ns.events("cli", session_id), cb=on_message)
        await nc.flush()
        control = structs.replace(stop(session_id), action="pause")
        headers = TraceHeaders(trace_id=control.id, origin="cli").to_headers(control.id)
        await locked.js(nc, "cli").publish(ns.submit("cli"), encode(control), headers=headers)
        return await asyncio.wait_for(told.get(), timeout=30)
    finally:
        await nc.close()


async def test_following_a_running_session_starts_where_it_stands_and_goes_on_live(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    brain = 'backend = "scripted"\nscript = "gpt-script.toml"'
    slow = write_profile(tmp_path / "agents", "gpt", brain, script=SLOW_AGENT)
    agents = {"gpt": str(slow), "claude": "claude"}
    async with running_locked_system(locked_down, tmp_path / "keys", agents) as system:
        config = ("--config", str(locked_down.settings_file("cli")))
        argv = (*config, "--detach", "--first", "claude", "--max-rounds", "4", "plan a hike")
        code, lines = await finished(parley_cli(system.env, "collab", *argv))
        assert code == 0, "\n".join(lines)
        session_id = _session_of(lines)
        live = parley_cli(system.env, "collab", *config, "--follow", session_id)
        joined = None
        try:
            # Claude has answered and gpt's call has started (gpt's script takes 120 s to
            # answer): the first follower waits on it.
            waits_on_gpt = r"waiting for gpt's answer in round \d+, due by \d\d:\d\d:\d\d UTC"
            await live.wait_line(waits_on_gpt, timeout=30)
            # Another terminal, now: it starts from the stored call, not from nothing.
            joined = parley_cli(system.env, "collab", *config, "--follow", session_id)
            await joined.wait_line(rf"^following session {session_id} ")
            await joined.wait_line(waits_on_gpt, timeout=30)
            code, stopped = await finished(
                parley_cli(system.env, "collab", *config, "--stop", session_id)
            )
            assert code == 0, "\n".join(stopped)
            assert await joined.wait_exit(30) == 130, "\n".join(joined.lines)
            assert await live.wait_exit(30) == 130, "\n".join(live.lines)
        finally:
            live.close()
            if joined is not None:
                joined.close()
    (end,) = [line for line in joined.lines if line.startswith("stopped: ")]
    assert re.fullmatch(r"stopped: canceled \(round \d+\)", end), joined.lines
    assert [line for line in live.lines if line.startswith("stopped: ")] == [end], live.lines
    assert not [line for line in joined.lines if "next event" in line], joined.lines
