"""A `parley` command that has waited a few seconds says what for, once (docs/cli.md).

The first wait a newcomer meets: `parley collab` run before `parley up` has a router (here: a
provisioned server and no actor at all), which used to print nothing until it gave up. And
the wait before that, connecting to a server that accepts the connection and never answers
(a real nats-server, SIGSTOPped).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from nats.aio.client import Client as NATS

from bus import EmbeddedServer
from schemas import Namespace
from tests.integration.test_cli_errors import RUN_WITHIN_S, run_parley
from tests.support.lockdown import LockedDown
from tests.support.processes import parley_env
from tools._still_waiting import NOTICE_AFTER_S


async def test_waiting_for_the_session_to_open_is_said_once(
    nats_server: EmbeddedServer, nc: NATS, namespace: Namespace, tmp_path: Path
) -> None:
    del nc  # provisions the namespace: the opening is stored, and no router reads it
    env = parley_env(nats_server.url, namespace.root)
    ran = await run_parley(env, tmp_path, "collab", "--timeout", "8", "plan a hike")
    assert ran.code == 1, ran
    notice = (
        f"waiting for the router to open the session ({NOTICE_AFTER_S:.0f} s so far; "
        "giving up after 8 s)"
    )
    assert ran.err_lines == [notice], ran.err  # once, on standard error
    assert "no news from the session for 8 s: gave up waiting for the router" in ran.out


async def test_connecting_to_a_server_that_does_not_answer_is_said(
    private_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    env = parley_env(private_server.url, namespace.root)
    pid = private_server.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        ran = await run_parley(env, tmp_path, "collab", "plan a hike")
    finally:
        os.kill(pid, signal.SIGCONT)
    assert ran.code == 3, ran
    assert ran.err_lines[0] == (
        f"waiting for the NATS server at {private_server.url} to answer (connecting as `cli`) "
        f"({NOTICE_AFTER_S:.0f} s so far)"
    ), ran.err
    assert ran.err_lines[-1] == (  # a stopped server is told apart from none at all
        f"parley collab: the NATS server at {private_server.url} takes connections but does not "
        "answer them: it is stopped (SIGSTOP), overloaded, or no NATS server listens there"
    ), ran.err
    assert len(ran.err_lines) == 2, ran.err


async def test_a_wait_the_broker_refused_says_so_within_seconds(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    """`parley collab` with an agent's settings: the broker refuses `gpt` the person's
    timeline, so the session's news could never come; the notice says so after 3 s, not only
    the command's last line after its whole wait."""
    await locked_down.provision()
    env = parley_env(locked_down.server.url, locked_down.ns.root)
    gpt = str(locked_down.settings_file("gpt"))
    ran = await run_parley(env, tmp_path, "collab", "--config", gpt, "--timeout", "8", "hike")
    assert ran.code == 1, ran  # collab's own code for a wait it gave up
    assert len(ran.err_lines) == 2, ran.err
    notice, last = ran.err_lines
    refused = f'the broker refused `gpt` to subscribe to "{locked_down.ns.root}.events.gpt.'
    assert notice.startswith(
        f"waiting for the router to open the session ({NOTICE_AFTER_S:.0f} s so far; giving up "
        f"after 8 s); meanwhile {refused}"
    ), notice
    assert last.startswith(f"parley collab: {refused}"), last


async def test_ctrl_c_while_waiting_leaves_with_130_and_no_traceback(
    private_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    """Ctrl-C while the command connects to a server that does not answer."""
    pid = private_server.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tools",
        "collab",
        "plan a hike",
        env=parley_env(private_server.url, namespace.root),
        cwd=tmp_path,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert child.stderr is not None
        notice = await asyncio.wait_for(child.stderr.readline(), RUN_WITHIN_S)
        assert notice.startswith(b"waiting for the NATS server at "), notice
        child.send_signal(signal.SIGINT)
        rest = await asyncio.wait_for(child.stderr.read(), RUN_WITHIN_S)
        code = await asyncio.wait_for(child.wait(), RUN_WITHIN_S)
    finally:
        os.kill(pid, signal.SIGCONT)
        if child.returncode is None:
            child.kill()
            await child.wait()
    assert code == 130, rest
    assert b"Traceback" not in rest, rest
