"""Two relays of one device on each deployment: no forward lost, none duplicated.

Both replicas of a side read the same durables (each served name's deliveries here, the
device's frames on the gateway), so each input is in one replica's hands at a time. What
they share is the deliver stream's numbering (a frame's number is its delivery's stream
sequence, the same for whichever replica holds it) and the relay bucket, where the replay
window is marked with compare-and-set. Calls in one session are
forwarded by both replicas at once, and one replica of each side is SIGKILLed holding a frame
whose effect is stored (Alice's: the sealed call is on the gateway; Bob's: the call is
submitted into Bob's deployment); the other replica takes the input over after its ack wait.
Every call reaches the shared agent once and is answered once (a number given to two frames
would have had the second refused as a replay, and its call lost).
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import msgspec
import pytest

from bus import MSG_ID, EmbeddedServer
from schemas import AgentResponse, decode_envelope, encode
from tests.support.gate import Decisions
from tests.support.processes import READY, ProcessOutput
from tests.support.relay import (
    GATEWAY_READY,
    Side,
    TwoDeployments,
    byte_doc_call,
    relay_servers,
    start_two_deployments,
)

pytestmark = pytest.mark.chaos

CALLS = 16
SESSIONS = ("s-shared-1", "s-shared-2")
IN_FLIGHT = 3
"""The policy's default `max_concurrent_calls`: calls are kept this many in flight."""


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedServer, ...]]:
    yield from relay_servers(tmp_path_factory)


@pytest.fixture
async def system(
    servers: tuple[EmbeddedServer, ...], tmp_path: Path
) -> AsyncIterator[TwoDeployments]:
    processes: list[ProcessOutput] = []
    alice, bob, gateway = servers
    started = await start_two_deployments(alice, bob, gateway, tmp_path, processes)
    try:
        yield started
    finally:
        for process in processes:
            process.close()
        await started.close()


def _holding(system: TwoDeployments, side: Side, where: str) -> ProcessOutput:
    """A replica that holds the first frame it forwards (`out`) or submits (`in`) in hand,
    its effect stored and its input unacked, until it is killed (tests/support/relay_probe.py)."""
    argv = [sys.executable, "-m", "tools", "run", "support.relay_probe:HoldingRelay"]
    env = {**side.env, "PARLEY_RELAY_HOLD": where}
    relay = ProcessOutput([*argv, "--id", "relay"], env, name=f"holding-relay-{side.name}")
    system.processes.append(relay)
    return relay


async def _replicas(
    system: TwoDeployments, side: Side, where: str
) -> tuple[ProcessOutput, ProcessOutput]:
    """The side's relay, and a holding replica of it beside it."""
    plain = side.relay
    assert plain is not None
    holding = _holding(system, side, where)
    await holding.wait_line(GATEWAY_READY)
    await holding.wait_line(READY)
    return holding, plain


async def test_two_relays_per_side_lose_and_duplicate_no_forward_through_a_kill(
    system: TwoDeployments,
) -> None:
    alice, bob = system.alice, system.bob
    alice_hold, _ = await _replicas(system, alice, "out")
    bob_hold, _ = await _replicas(system, bob, "in")
    js = alice.nc.jetstream()
    inbox = await js.pull_subscribe(
        alice.ns.deliver("router"), durable="router", stream=alice.ns.stream("deliver")
    )
    bob_decisions = await Decisions(bob.nc.jetstream(), bob.ns).open()
    calls = [
        msgspec.structs.replace(byte_doc_call(f"task {n}"), session_id=SESSIONS[n % 2])
        for n in range(CALLS)
    ]

    async def call_next() -> None:
        if waiting:
            call = waiting.pop(0)
            await js.publish(alice.ns.submit("router"), encode(call), headers={MSG_ID: call.id})

    async def kill_mid_forward() -> None:
        """Each holding replica dies with a frame in hand, its effect already stored."""
        await alice_hold.wait_line(r"holding the call after the gateway stored it", timeout=60)
        await bob_hold.wait_line(r"holding the frame after its call was submitted", timeout=60)
        assert alice_hold.kill() == -signal.SIGKILL
        assert bob_hold.kill() == -signal.SIGKILL

    async def collect() -> Counter[str]:
        answers: Counter[str] = Counter()
        for _ in range(CALLS):
            (msg,) = await inbox.fetch(1, timeout=60)
            await call_next()
            await msg.ack_sync()
            answer = decode_envelope(msg.data)
            assert isinstance(answer, AgentResponse), answer
            answers[answer.call_id] += 1
        return answers

    waiting = list(calls)
    for _ in range(IN_FLIGHT):
        await call_next()
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(kill_mid_forward())
        collected = tasks.create_task(collect())
    answers = collected.result()
    assert answers == Counter(c.call_id for c in calls), "an answer lost or given twice"

    # Bob's gate saw each call come in once and each answer go out once, nothing more.
    inbound: Counter[str] = Counter()
    outbound = 0
    for _ in range(2 * CALLS):
        decision = await bob_decisions.next()
        assert decision.allowed, decision
        if decision.target == "byte-doc":
            inbound[decision.envelope_id] += 1
        else:
            outbound += 1
    assert len(inbound) == CALLS and max(inbound.values()) == 1 and outbound == CALLS
    with pytest.raises(TimeoutError):
        await bob_decisions.next(timeout=4)
    with pytest.raises(TimeoutError):
        await inbox.fetch(1, timeout=1)
