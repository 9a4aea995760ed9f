"""Two host processes of one agent share its durable: each call is answered exactly once.

Both replicas pull from the agent's one durable consumer on PARLEY_DELIVER, so a delivery is in
one replica's hands at a time, and a reply's id derives from the call (and its attempt), so
even a call answered again after a crash is stored once. A replica SIGKILLed with a call in
hand loses nothing: its in-progress heartbeats stop, the call is redelivered after the ack
wait, and the other replica answers it.
"""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS

from bus import EmbeddedServer
from schemas import AgentResponse, Namespace
from tests.support.agents import Submitted, agent_call, send, write_profile
from tests.support.processes import READY, ProcessOutput, parley_env
from tests.support.replica_probe import STALL

SCRIPT = """
[[turn]]
message = "answer to {goal}"
final = true
"""
CALLS = 30
STALLING = r"stalling the call before answering it"


def start_replica(profile: str, env: dict[str, str], name: str) -> ProcessOutput:
    argv = [sys.executable, "-m", "tools", "run", "support.replica_probe:StallingHost"]
    return ProcessOutput([*argv, "--profile", profile], env, name=name)


@pytest.fixture
def replicas(
    nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> Iterator[list[ProcessOutput]]:
    # An ack wait of 4 s: a replica stalled by a loaded machine for longer than the ack wait
    # has its call redelivered to the other, which handles it a second time (stored once).
    env = parley_env(nats_server.url, namespace.root, ack_wait_s="4", fetch_timeout_s="1")
    script = 'backend = "scripted"\nscript = "keeper-script.toml"'
    profile = str(write_profile(tmp_path, "keeper", script, script=SCRIPT))
    started = [start_replica(profile, env, f"keeper-{n}") for n in (1, 2)]
    yield started
    for process in started:
        process.close()


async def _first_to_log(
    processes: list[ProcessOutput], pattern: str, timeout: float
) -> ProcessOutput:
    """The process that logs `pattern` first: each is asked in turn, briefly, until one has."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        for process in processes:
            try:
                await process.wait_line(pattern, timeout=0.2)
            except AssertionError:
                continue
            return process
    raise AssertionError(f"no process logged {pattern!r} within {timeout} s")


def answered(process: ProcessOutput) -> Counter[str]:
    """Call ids this replica answered, with how often."""
    found = (
        re.search(r'"call_id":"([^"]+)"', line) for line in process.lines if '"answered"' in line
    )
    return Counter(match.group(1) for match in found if match)


@pytest.mark.chaos
async def test_two_replicas_answer_every_call_exactly_once_and_survive_a_kill_mid_call(
    nc: NATS, namespace: Namespace, replicas: list[ProcessOutput]
) -> None:
    js = nc.jetstream()
    out = await Submitted(js, namespace, "keeper").open()
    for replica in replicas:
        await replica.wait_line(READY)

    calls = [agent_call("keeper", f"task {n}") for n in range(CALLS)]
    for call in calls:
        await send(js, namespace, "keeper", call)
    replies = [(await out.next())[1] for _ in calls]
    assert all(isinstance(r, AgentResponse) for r in replies)
    ids = sorted(r.call_id for r in replies if isinstance(r, AgentResponse))
    assert ids == sorted(c.call_id for c in calls), "a call unanswered, or answered twice"
    handled = answered(replicas[0]) + answered(replicas[1])
    assert set(handled) == set(ids) and max(handled.values()) == 1, "a call handled twice"

    # A call in one replica's hands, nothing stored for it yet, when that replica dies.
    stalled = agent_call("keeper", f"{STALL} in hand")
    await send(js, namespace, "keeper", stalled)
    holder = await _first_to_log(replicas, STALLING, timeout=20)
    survivor = next(r for r in replicas if r is not holder)
    assert holder.kill() == -signal.SIGKILL
    _, reply = await out.next()
    assert isinstance(reply, AgentResponse)
    assert (reply.call_id, reply.attempt) == (stalled.call_id, 2)
    assert answered(survivor)[stalled.call_id] == 1

    # The survivor goes on alone; nothing of the killed call comes again.
    after = [agent_call("keeper", f"after {n}") for n in range(5)]
    for call in after:
        await send(js, namespace, "keeper", call)
    following = [(await out.next())[1] for _ in after]
    assert sorted(r.call_id for r in following if isinstance(r, AgentResponse)) == sorted(
        c.call_id for c in after
    )
    assert await out.none_left(timeout=1.0)
