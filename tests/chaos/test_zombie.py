"""A paused ("zombie") agent host whose late answer arrives after its redelivered twin's.

Two replicas of one agent share its durable consumer. The first is SIGSTOPped mid-call (seen
through its in-progress heartbeat on the call's ack subject, so it surely holds the call);
its heartbeats stop, JetStream redelivers the call to the second replica after the ack wait,
and the second answers (attempt 2). Then the first is continued and finishes its call. Its
late answer carries the same derived id as its twin's, so JetStream drops it: exactly one
answer is stored, the twin's.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from bus import EmbeddedServer
from schemas import AgentResponse, Namespace
from tests.support.agents import Submitted, agent_call, send, start_agent, write_profile
from tests.support.processes import READY, ProcessOutput, parley_env

pytestmark = pytest.mark.chaos

SCRIPT = """
# The first delivery thinks for a while; any later delivery answers at once.
[[turn]]
attempt = 1
delay_s = 4.0
message = "late answer"
final = true

[[turn]]
message = "twin answer"
final = true
"""


@pytest.fixture
def processes() -> Iterator[list[ProcessOutput]]:
    started: list[ProcessOutput] = []
    yield started
    for process in started:
        process.signal(signal.SIGCONT)  # a stopped process cannot be closed cleanly
        process.close()


async def test_the_late_answer_of_a_paused_replica_is_discarded(
    nc: NATS,
    nats_server: EmbeddedServer,
    namespace: Namespace,
    processes: list[ProcessOutput],
    tmp_path: Path,
) -> None:
    js = nc.jetstream()
    env = parley_env(nats_server.url, namespace.root, ack_wait_s="1.5", fetch_timeout_s="1")
    profile = str(
        write_profile(
            tmp_path, "keeper", 'backend = "scripted"\nscript = "keeper-script.toml"', script=SCRIPT
        )
    )
    out = await Submitted(js, namespace, "keeper").open()
    zombie = start_agent(profile, env)
    processes.append(zombie)
    await zombie.wait_line(READY)

    working: asyncio.Queue[Msg] = asyncio.Queue()

    async def on_ack(msg: Msg) -> None:
        if msg.data == b"+WPI":  # an in-progress heartbeat: the handler is mid-call
            working.put_nowait(msg)

    progress = await nc.subscribe(f"$JS.ACK.{namespace.stream('deliver')}.keeper.>", cb=on_ack)
    call = agent_call("keeper", "a slow question")
    await send(js, namespace, "keeper", call)
    heartbeat = await asyncio.wait_for(working.get(), timeout=20)
    assert heartbeat.subject.split(".")[5] == "1"  # the first delivery holds it
    zombie.signal(signal.SIGSTOP)
    await progress.unsubscribe()

    twin = start_agent(profile, env)
    processes.append(twin)
    await twin.wait_line(READY)
    _, answer = await out.next(timeout=30)
    assert isinstance(answer, AgentResponse)
    assert (answer.call_id, answer.attempt, answer.text) == (call.call_id, 2, "twin answer")

    zombie.signal(signal.SIGCONT)
    await zombie.wait_line(rf'"msg":"answered".*"call_id":"{call.call_id}".*"attempt":1')
    assert zombie.process.poll() is None
    assert await out.none_left(timeout=1.0), "the zombie's late answer was stored"
