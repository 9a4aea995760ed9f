"""`parley orchestrate` as a person runs it at a terminal, against the real gate, router and
agent hosts of tests/integration/test_orchestrate_e2e.py: a draft awaiting approval survives a
pause and resume, the session id is printed with how to follow and stop it, a draft nobody
can approve any more (standard input ended) stops the session, and standard input that is no
terminal is told at once instead of failing with a traceback.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS

from bus import EmbeddedServer
from schemas import Namespace
from tests.integration.test_orchestrate_e2e import OBJECTIVE, agents, orchestration_policy
from tests.support.processes import REPO, parley_env
from tests.support.system import System, finished, parley_cli, running_system


@pytest.fixture
async def system(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> AsyncIterator[System]:
    async with running_system(
        nc,
        nats_server,
        namespace,
        tmp_path / "keys",
        agents(tmp_path),
        policy=orchestration_policy(tmp_path),
        # 3 s of silence: two beats (1 s) judged a live agent gone on a loaded machine.
        router_options={"missed_beats": 6, "start_grace_s": 5},
        heartbeat_s="0.5",
    ) as running:
        yield running


class Terminal:
    """`parley orchestrate` with a pipe for the person's keys, read line by line."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process, self.stdin, self.stdout = process, process.stdin, process.stdout
        self.lines: list[str] = []

    async def line_with(self, text: str, timeout: float = 30) -> str:
        while True:
            try:
                raw = await asyncio.wait_for(self.stdout.readline(), timeout)
            except TimeoutError:
                raise AssertionError(f"no {text!r} in:\n" + "\n".join(self.lines)) from None
            assert raw, "\n".join(self.lines)
            self.lines.append(raw.decode().rstrip("\n"))
            if text in self.lines[-1]:
                return self.lines[-1]

    def type(self, text: str) -> None:
        self.stdin.write(text.encode())

    async def exit_code(self, timeout: float = 30) -> int:
        code = await asyncio.wait_for(self.process.wait(), timeout)
        self.lines += (await self.stdout.read()).decode().splitlines()
        return code


@pytest.fixture
async def terminal(system: System) -> AsyncIterator[Terminal]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "tools", "orchestrate", "--agent", "local", "--shared", "byte-doc"),
        *("--mode", "manual", "--max-turns", "1", OBJECTIVE),
        env=system.env,
        cwd=REPO,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        yield Terminal(process)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_a_draft_awaiting_approval_is_asked_again_after_pause_and_resume(
    terminal: Terminal,
) -> None:
    await terminal.line_with("send it? [y]es / [n]o / [e]dit")
    terminal.type("p\n")
    await terminal.line_with("paused")
    terminal.type("y\n")  # while paused the draft cannot be sent: said, and still held
    await terminal.line_with("paused: resume (r) first")
    terminal.type("r\n")
    await terminal.line_with("resumed")
    await terminal.line_with("send it? [y]es / [n]o / [e]dit")
    terminal.type("y\n")
    await terminal.line_with("(approved)")
    await terminal.line_with("TURN LIMIT REACHED")
    assert await terminal.exit_code() == 0, "\n".join(terminal.lines)


async def test_the_session_id_is_printed_first_with_the_command_that_stops_it(
    terminal: Terminal, system: System
) -> None:
    first = await terminal.line_with("session ")
    match = re.fullmatch(
        r"session (\S+) \(s or Ctrl-C stops it; from another terminal: `(.+)`\)", first
    )
    assert match is not None, first
    await terminal.line_with("send it? [y]es / [n]o / [e]dit")
    code, lines = await finished(parley_cli(system.env, *match[2].split()[1:]))
    assert code == 0 and "stopped: stopped" in "\n".join(lines), lines
    assert await terminal.exit_code() == 130, "\n".join(terminal.lines)  # the session it follows


async def test_a_draft_nobody_can_approve_any_more_stops_the_session(
    terminal: Terminal, system: System
) -> None:
    """Standard input ended while a draft awaits approval: the command stops the session it
    opened and exits 1 (it told the person to approve in the console, which acts as another
    principal and cannot, and waited until killed)."""
    first = await terminal.line_with("session ")
    session = first.split()[1]
    await terminal.line_with("send it? [y]es / [n]o / [e]dit")
    terminal.stdin.close()
    await terminal.line_with("nobody can answer it here, so the session is stopped")
    await terminal.line_with(f"stop requested for session {session}")
    assert await terminal.exit_code() == 1, "\n".join(terminal.lines)
    code, lines = await finished(parley_cli(system.env, "collab", "--follow", session))
    assert code == 130 and "stopped: stopped" in "\n".join(lines), lines


async def test_manual_mode_without_a_terminal_is_refused_in_one_line(tmp_path: Path) -> None:
    """Standard input from /dev/null: nobody could approve a draft, so nothing is opened (no
    server is needed to say so)."""
    argv = ("--agent", "local", "--shared", "byte-doc", OBJECTIVE)
    env = parley_env("nats://127.0.0.1:1", "unused")
    code, lines = await finished(parley_cli(env, "orchestrate", *argv, cwd=tmp_path))
    assert code == 2 and len(lines) == 1, lines
    assert "not a terminal" in lines[0] and "--mode full_auto" in lines[0], lines


async def test_full_auto_without_a_terminal_runs_without_a_traceback(system: System) -> None:
    argv = ("--agent", "local", "--shared", "byte-doc", "--mode", "full_auto", "--max-turns", "1")
    code, lines = await finished(parley_cli(system.env, "orchestrate", *argv, OBJECTIVE))
    output = "\n".join(lines)
    assert code == 0 and "TURN LIMIT REACHED" in output, output
    assert "Traceback" not in output and "PermissionError" not in output, output
