"""`parley collab` and `parley say` as real processes, against a real router.

The test stands in for the gate (moving what the CLI submits to the router) and for the two
agents; the CLI follows the session's events and exits with the session's outcome.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import re
import select
import signal
import sys
import termios
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from nats.aio.client import Client as NATS

from actors.router._session import CANCEL_NOTICE
from bus import EmbeddedServer
from schemas import AgentCall, ErrorCode, Namespace, Reply
from tests.support.processes import READY, ProcessOutput, parley_env, start_actor
from tests.support.router_wire import (
    AgentTurn,
    RouterWire,
    Script,
    handoff,
    relay_cli,
    relay_turns,
)

FAIRY = "Write a 2-paragraph fairy tale—Claude drafts, GPT edits, alternate until done (≤4 rounds)."


def fairy_tale(call: AgentCall) -> AgentTurn:
    if call.round == 4:
        return AgentTurn(reply=Reply(message="GPT: the tale is done.", final=True))
    peer = "gpt" if call.target == "claude" else "claude"
    return handoff(f"{call.target} paragraph work {call.round}", peer, "your turn")


@asynccontextmanager
async def stand_ins(
    nc: NATS, server: EmbeddedServer, ns: Namespace, script: Script
) -> AsyncIterator[dict[str, str]]:
    """A router process with the test as its gate and agents; yields the CLI's environment."""
    wire = RouterWire(nc.jetstream(), ns)
    await wire.open()
    env = parley_env(server.url, ns.root)
    router = start_actor("router", "router", env)
    try:
        await router.wait_line(READY)
        async with asyncio.TaskGroup() as tasks:
            workers = [
                tasks.create_task(relay_turns(wire, script)),
                tasks.create_task(relay_cli(wire)),
            ]
            try:
                yield env
            finally:
                for worker in workers:
                    worker.cancel()
    finally:
        router.close()


def parley(env: dict[str, str], *argv: str) -> ProcessOutput:
    return ProcessOutput([sys.executable, "-m", "tools", *argv], env, name=argv[0])


async def test_collab_streams_the_turns_prints_the_stop_reason_and_exits_0(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    async with stand_ins(nc, nats_server, namespace, fairy_tale) as env:
        cli = parley(env, "collab", "--first", "claude", "--max-rounds", "4", FAIRY)
        try:
            code = await cli.wait_exit(30)
        finally:
            cli.close()
    output = "\n".join(cli.lines)
    assert code == 0, output
    assert "[claude · 1/4] claude paragraph work 1" in output
    assert "    → gpt: your turn" in output
    assert "[gpt · 4/4] GPT: the tale is done." in output
    assert cli.lines[-1] == "stopped: final (round 4)"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])  # SIGHUP: a pty, below
async def test_ctrl_c_or_kill_sends_stop_and_the_cli_reports_the_cancellation(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, signum: signal.Signals
) -> None:
    def stalls_in_round_two(call: AgentCall) -> AgentTurn | None:
        return fairy_tale(call) if call.round == 1 else None

    async with stand_ins(nc, nats_server, namespace, stalls_in_round_two) as env:
        cli = parley(env, "collab", "--first", "claude", FAIRY)
        try:
            await cli.wait_line(r"^\[claude · 1/6\]")
            cli.signal(signum)
            code = await cli.wait_exit(30)
        finally:
            cli.close()
    output = "\n".join(cli.lines)
    assert code == 130, output
    assert "stop requested" in output and "stopped: canceled" in output
    assert f"message: {CANCEL_NOTICE}" in output


def _take_terminal() -> None:
    """In the child, a session leader already: make the pty on its stdin its controlling
    terminal, so closing the pty's master hangs it up as closing a window does."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _read_until(master: int, wanted: bytes, timeout: float = 30) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while wanted not in seen:
        ready, _, _ = select.select([master], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            raise AssertionError(f"no {wanted!r} in {seen!r}")
        seen += os.read(master, 4096)
    return seen


async def test_a_closed_terminal_stops_the_session(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    """The window closes mid-session: the terminal hangs up (SIGHUP, and every write fails with
    EIO, which can come first). The command still submits its Stop."""

    def stalls_in_round_two(call: AgentCall) -> AgentTurn | None:
        return fairy_tale(call) if call.round == 1 else None

    async with stand_ins(nc, nats_server, namespace, stalls_in_round_two) as env:
        master, terminal = pty.openpty()
        cli = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "tools", "collab", "--first", "claude", FAIRY),
            env=env,
            stdin=terminal,
            stdout=terminal,
            stderr=terminal,
            start_new_session=True,
            preexec_fn=_take_terminal,  # only an ioctl, after the fork
        )
        os.close(terminal)
        try:
            seen = await asyncio.to_thread(_read_until, master, "[claude · 1/6]".encode())
            opened = re.search(rb"session (\S+):", seen)
            assert opened is not None, seen
            os.close(master)  # the window closes
            code = await asyncio.wait_for(cli.wait(), 30)
        finally:
            if cli.returncode is None:
                cli.kill()
                await cli.wait()
        follow = parley(env, "collab", "--follow", opened[1].decode())
        try:
            assert await follow.wait_exit(30) == 130, follow.lines
        finally:
            follow.close()
    assert code == 130, code
    assert "stopped: canceled" in "\n".join(follow.lines), follow.lines


async def test_a_command_started_with_nohup_outlives_a_hang_up(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    """SIGHUP ignored at the start stays ignored (the session goes on past a logout): handled,
    it would have stopped the session and sent the rest of the output to /dev/null."""

    def stalls_in_round_two(call: AgentCall) -> AgentTurn | None:
        return fairy_tale(call) if call.round == 1 else None

    async with stand_ins(nc, nats_server, namespace, stalls_in_round_two) as env:
        argv = ["nohup", sys.executable, "-m", "tools", "collab", "--first", "claude", FAIRY]
        cli = ProcessOutput(argv, env, name="collab")
        try:
            await cli.wait_line(r"^\[claude · 1/6\]")
            cli.signal(signal.SIGHUP)
            cli.signal(signal.SIGINT)  # what stops it, said on its output as usual
            code = await cli.wait_exit(30)
        finally:
            cli.close()
    output = "\n".join(cli.lines)
    assert code == 130, output
    assert output.count("stop requested") == 1 and "stopped: canceled" in output, output


async def test_say_is_one_call_to_one_agent(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    def answer(call: AgentCall) -> AgentTurn:
        return AgentTurn(reply=Reply(message=f"{call.target} heard: {call.goal}"))

    async with stand_ins(nc, nats_server, namespace, answer) as env:
        cli = parley(env, "say", "@gpt", "what", "is", "NATS?")
        try:
            code = await cli.wait_exit(30)
        finally:
            cli.close()
    output = "\n".join(cli.lines)
    assert code == 0, output
    assert "[gpt · 1/1] gpt heard: what is NATS?" in output
    assert cli.lines[-1] == "stopped: answered (round 1)"


async def test_a_failed_session_exits_non_zero(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    def broken(call: AgentCall) -> AgentTurn:
        return AgentTurn(error=ErrorCode.AGENT_UNAVAILABLE)

    async with stand_ins(nc, nats_server, namespace, broken) as env:
        cli = parley(env, "collab", "plan a hike")
        try:
            code = await cli.wait_exit(30)
        finally:
            cli.close()
    output = "\n".join(cli.lines)
    assert code == 1, output
    assert "stopped: error" in output and "AGENT_UNAVAILABLE" in output


async def test_a_request_the_router_refuses_is_reported_and_exits_non_zero(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    async with stand_ins(nc, nats_server, namespace, fairy_tale) as env:
        cli = parley(env, "collab", "--agents", "gpt,gpt", "plan a hike")
        try:
            code = await cli.wait_exit(30)
        finally:
            cli.close()
    output = "\n".join(cli.lines)
    assert code == 1, output
    assert "refused: INVALID_REQUEST: cannot start a session: participants repeat" in output
    assert cli.lines[-2:] == [
        "stopped: error (round 0)",
        "    error: INVALID_REQUEST: cannot start a session: participants repeat a name: gpt, gpt",
    ]
