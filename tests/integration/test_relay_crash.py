"""A relay SIGKILLed mid-forward, then restarted: one answer, one call to the shared agent.

Each relay is killed in the window between an effect and the ack of the input that caused
it: Alice's after the gateway stored the sealed call (its delivery is given again, sealed
again under the same sequence number, and the gateway drops the copy), Bob's after it
submitted the call into Bob's deployment (the frame is given again, submitted again under the
same id, and Bob's JetStream drops the copy).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

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
    argv = [sys.executable, "-m", "tools", "run", "support.relay_probe:HoldingRelay"]
    env = {**side.env, "PARLEY_RELAY_HOLD": where}
    relay = ProcessOutput([*argv, "--id", "relay"], env, name=f"holding-relay-{side.name}")
    system.processes.append(relay)
    return relay


async def _restart_holding(system: TwoDeployments, side: Side, where: str) -> ProcessOutput:
    assert side.relay is not None
    side.relay.kill()
    relay = _holding(system, side, where)
    await relay.wait_line(GATEWAY_READY)
    await relay.wait_line(READY)
    return relay


@pytest.mark.parametrize("where", ["out", "in"])
async def test_a_relay_killed_mid_forward_sends_once_and_answers_once(
    system: TwoDeployments, where: str
) -> None:
    alice, bob = system.alice, system.bob
    side = alice if where == "out" else bob
    holding = await _restart_holding(system, side, where)
    js = alice.nc.jetstream()
    inbox = await js.pull_subscribe(
        alice.ns.deliver("router"), durable="router", stream=alice.ns.stream("deliver")
    )
    bob_decisions = await Decisions(bob.nc.jetstream(), bob.ns).open()
    call = byte_doc_call(f"crash the {where} relay")
    await js.publish(alice.ns.submit("router"), encode(call), headers={MSG_ID: call.id})

    await holding.wait_line(r"holding the")
    holding.kill()
    relay = system.start_relay(side)
    await relay.wait_line(GATEWAY_READY)

    (msg,) = await inbox.fetch(1, timeout=30)
    await msg.ack_sync()
    answer = decode_envelope(msg.data)
    assert isinstance(answer, AgentResponse) and answer.call_id == call.call_id
    inbound = await bob_decisions.next()
    assert inbound.allowed and inbound.target == "byte-doc"
    answered = await bob_decisions.next()
    assert answered.sender == "byte-doc"
    # Nothing more: no second call reached byte-doc, no second answer reached the caller.
    with pytest.raises(TimeoutError):
        await bob_decisions.next(timeout=4)
    with pytest.raises(TimeoutError):
        await inbox.fetch(1, timeout=1)


async def test_a_gateway_outage_queues_the_forward_until_the_gateway_returns(
    system: TwoDeployments,
) -> None:
    """The gateway is down when Alice's relay forwards: the call waits in Alice's own queue
    (unacked, retried) and goes through, once, when the gateway is back."""
    alice, bob = system.alice, system.bob
    assert alice.relay is not None
    js = alice.nc.jetstream()
    inbox = await js.pull_subscribe(
        alice.ns.deliver("router"), durable="router", stream=alice.ns.stream("deliver")
    )
    bob_decisions = await Decisions(bob.nc.jetstream(), bob.ns).open()
    system.gateway.stop()
    try:
        call = byte_doc_call("sent while the gateway is down")
        await js.publish(alice.ns.submit("router"), encode(call), headers={MSG_ID: call.id})
        await alice.relay.wait_line(r"handler failed", timeout=30)
    finally:
        system.gateway.start()
    (msg,) = await inbox.fetch(1, timeout=60)
    await msg.ack_sync()
    answer = decode_envelope(msg.data)
    assert isinstance(answer, AgentResponse) and answer.call_id == call.call_id
    inbound = await bob_decisions.next()
    assert inbound.allowed and inbound.target == "byte-doc"
    await bob_decisions.next()  # byte-doc's answer
    with pytest.raises(TimeoutError):
        await bob_decisions.next(timeout=3)
