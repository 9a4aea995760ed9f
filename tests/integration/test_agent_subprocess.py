"""An agent host whose local agent child is SIGKILLed mid-request surfaces it and serves on."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import sys
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS

from bus import EmbeddedServer
from schemas import AgentResponse, Error, ErrorCode, Namespace
from tests.support.agents import Submitted, agent_call, send, start_agent, write_profile
from tests.support.processes import READY, REPO, parley_env

BRIDGE_AGENT = str(REPO / "tests" / "support" / "bridge_agent.py")


@pytest.mark.chaos
async def test_local_agent_killed_mid_request(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    js = nc.jetstream()
    env = parley_env(nats_server.url, namespace.root, ack_wait_s="2", fetch_timeout_s="1")
    brain = (
        f'backend = "subprocess"\ncommand = {json.dumps([sys.executable, BRIDGE_AGENT])}\n'
        "turn_timeout_s = 30.0"
    )
    profile = write_profile(tmp_path, "local", brain)
    out = await Submitted(js, namespace, "local").open()
    host = start_agent(str(profile), env)
    try:
        await host.wait_line(READY)
        doomed = agent_call("local", "[hang] until killed")
        await send(js, namespace, "local", doomed)
        _, line = await host.wait_line(r"bridge_agent\[\d+\]: working on req_")
        match = re.search(r"bridge_agent\[(\d+)\]", line)
        assert match is not None
        child = int(match.group(1))
        os.kill(child, signal.SIGKILL)
        _, error = await out.next()
        # Surfaced by the child's death, well before the 30 s timeout would have.
        assert isinstance(error, Error), error
        assert error.code == ErrorCode.AGENT_UNAVAILABLE and error.retryable
        assert "exited (code -9)" in error.message and error.cause_id == doomed.id
        # The host itself lives on, and the next call starts a fresh child that answers.
        after = agent_call("local", "after the kill")
        await send(js, namespace, "local", after)
        _, answer = await out.next()
        assert isinstance(answer, AgentResponse) and not answer.malformed
        seen = json.loads(answer.reply.message)
        assert seen["objective"] == "after the kill" and seen["pid"] != child
        assert host.process.poll() is None
    finally:
        host.close()


DEAF_AGENT = "import time; time.sleep(600)"
"""A local agent that never reads its stdin, so its host's death (stdin closed) tells it
nothing: only a parent-death signal ends it."""


@pytest.mark.chaos
async def test_local_agent_dies_with_its_host_however_the_host_ends(
    nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    """The host's own child dies with the host, even SIGKILLed: a grandchild of `parley up`
    outlives nothing."""
    env = parley_env(nats_server.url, namespace.root)
    brain = (
        f'backend = "subprocess"\ncommand = {json.dumps([sys.executable, "-c", DEAF_AGENT])}\n'
        "turn_timeout_s = 30.0"
    )
    host = start_agent(str(write_profile(tmp_path, "local", brain)), env)
    child = None
    try:
        _, line = await host.wait_line(r'"msg":"local agent started","pid":\d+')
        match = re.search(r'"pid":(\d+)', line)
        assert match is not None
        child = os.pidfd_open(int(match.group(1)))
        await host.wait_line(READY)
        host.kill()
        ended, _, _ = select.select([child], [], [], 2.0)  # readable once it has exited
        assert ended, f"the local agent {match.group(1)} outlived its host by 2 s"
    finally:
        if child is not None:  # first: a child left alive holds the host's output open
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(child, signal.SIGKILL)
            os.close(child)
        host.close()
