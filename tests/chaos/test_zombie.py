"""A paused ("zombie") agent host whose late answer arrives after its redelivered twin's.

Two replicas of one agent share its durable consumer. The first is SIGSTOPped mid-call (seen
through its "call received" line for the first delivery, so it surely holds the call); its
in-progress acks stop, JetStream redelivers the call to the second replica after the ack wait,
and the second answers (attempt 2). Then the first is continued and finishes its call. Its
late answer carries the same derived id as its twin's, so JetStream drops it: exactly one
answer is stored, the twin's.

It runs under the least-privilege config: both replicas are agent `gpt`'s nkey user, and the
test plays the gate with the gate's credentials (delivering, and reading submissions through
the gate's own durable).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from schemas import AgentResponse, decode_envelope
from tests.support.agents import agent_call, send, write_profile
from tests.support.lockdown import LockedDown
from tests.support.processes import READY, ProcessOutput, parley_env, start_actor

pytestmark = pytest.mark.chaos

AGENT = "gpt"

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
    locked_down: LockedDown, processes: list[ProcessOutput], tmp_path: Path
) -> None:
    locked = locked_down
    locked.tune(AGENT, ack_wait_s="1.5")  # the provisioned durable redelivers after 1.5 s
    await locked.provision()
    env = parley_env(locked.server.url, locked.ns.root, fetch_timeout_s="1")
    profile = write_profile(
        tmp_path, AGENT, f'backend = "scripted"\nscript = "{AGENT}-script.toml"', script=SCRIPT
    )
    argv = ("--profile", str(profile), "--config", str(locked.settings_file(AGENT)))
    gate = await locked.connect("gate")
    try:
        js = gate.jetstream()
        out = await locked.gate_submissions(js)
        zombie = start_actor("agent", AGENT, env, *argv)
        processes.append(zombie)
        await zombie.wait_line(READY)

        call = agent_call(AGENT, "a slow question")
        await send(js, locked.ns, AGENT, call)
        await zombie.wait_line(rf'"msg":"call received".*"call_id":"{call.call_id}".*"attempt":1')
        zombie.signal(signal.SIGSTOP)

        twin = start_actor("agent", AGENT, env, *argv)
        processes.append(twin)
        await twin.wait_line(READY)
        (msg,) = await out.fetch(1, timeout=30)
        await msg.ack_sync()
        answer = decode_envelope(msg.data)
        assert isinstance(answer, AgentResponse)
        assert (answer.call_id, answer.attempt, answer.text) == (call.call_id, 2, "twin answer")

        zombie.signal(signal.SIGCONT)
        await zombie.wait_line(rf'"msg":"answered".*"call_id":"{call.call_id}".*"attempt":1')
        assert zombie.process.poll() is None
        with pytest.raises(TimeoutError):  # the zombie's late answer was not stored
            await out.fetch(1, timeout=1.0)
        for process in processes:
            refused = [line for line in process.lines if "permission" in line.lower()]
            assert not refused, refused
    finally:
        await gate.close()
