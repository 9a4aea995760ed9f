"""A relay slower over a frame than the gateway's ack wait, with a replica beside it.

The gateway durable is shared by a device's relays, so a frame not acked within
`gateway_ack_wait_s` would be given to the other replica while the first still works on it:
both would submit it (the gate drops one copy) and the one marking the replay window second
used to dead-letter the frame as a `relay_replay`. The relay now tells the gateway the frames
it holds are in progress, so the frame stays with the slow replica; and a delivery that finds
its frame marked after doing the (same, de-duplicated) effect acks it without a dead letter.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest

from actors.relay import gateway_stream
from bus import MSG_ID, EmbeddedServer
from schemas import AgentResponse, decode_envelope, encode
from tests.support.gate import Decisions
from tests.support.processes import READY, ProcessOutput
from tests.support.relay import (
    GATEWAY_READY,
    TwoDeployments,
    byte_doc_call,
    relay_servers,
    start_two_deployments,
)

ACK_WAIT_S = 1.0
SLOW_S = 4 * ACK_WAIT_S


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedServer, ...]]:
    yield from relay_servers(tmp_path_factory)


@pytest.fixture
async def system(
    servers: tuple[EmbeddedServer, ...], tmp_path: Path
) -> AsyncIterator[TwoDeployments]:
    processes: list[ProcessOutput] = []
    alice, bob, gateway = servers
    started = await start_two_deployments(
        alice, bob, gateway, tmp_path, processes, gateway_ack_wait_s=ACK_WAIT_S
    )
    try:
        yield started
    finally:
        for process in processes:
            process.close()
        await started.close()


async def _relay_dead_letters(system: TwoDeployments) -> int:
    bob = system.bob
    info = await bob.nc.jetstream().stream_info(
        bob.ns.stream("dead"), subjects_filter=bob.ns.dead("relay")
    )
    return sum((info.state.subjects or {}).values())


async def _one_call_with_a_slow_replica(
    system: TwoDeployments, **settings: str
) -> tuple[int, ProcessOutput]:
    """Bob's relay replaced by a slow one, a plain replica started beside it while it holds
    Alice's call: the call answered once and let in by Bob's gate once. Returns how many
    times the gateway redelivered Bob's one frame, and the slow replica."""
    alice, bob = system.alice, system.bob
    plain = bob.relay
    assert plain is not None
    plain.close()  # the slow replica must be the one that takes the frame
    argv = [sys.executable, "-m", "tools", "run", "support.relay_probe:HoldingRelay"]
    env = {**bob.env, "PARLEY_RELAY_HOLD": "slow", "PARLEY_RELAY_SLOW_S": str(SLOW_S)}
    env |= {f"PARLEY_{k.upper()}": v for k, v in settings.items()}
    slow = ProcessOutput([*argv, "--id", "relay"], env, name="slow-relay-bob")
    system.processes.append(slow)
    await slow.wait_line(GATEWAY_READY)
    await slow.wait_line(READY)

    js = alice.nc.jetstream()
    inbox = await js.pull_subscribe(
        alice.ns.deliver("router"), durable="router", stream=alice.ns.stream("deliver")
    )
    bob_decisions = await Decisions(bob.nc.jetstream(), bob.ns).open()
    call = byte_doc_call("take your time")
    await js.publish(alice.ns.submit("router"), encode(call), headers={MSG_ID: call.id})
    await slow.wait_line(r"slow over a frame", timeout=30)
    replica = system.start_relay(bob)  # beside the slow one, while it holds the frame
    await replica.wait_line(GATEWAY_READY)
    slow.signal(signal.SIGUSR1)  # the replica is ready: now the slow one takes its time
    await slow.wait_line(r"done with the slow frame", timeout=30)

    (msg,) = await inbox.fetch(1, timeout=30)
    await msg.ack_sync()
    answer = decode_envelope(msg.data)
    assert isinstance(answer, AgentResponse) and answer.call_id == call.call_id
    inbound = await bob_decisions.next()
    assert inbound.allowed and inbound.target == "byte-doc"
    answered = await bob_decisions.next()
    assert answered.allowed and answered.target == system.principal
    with pytest.raises(TimeoutError):
        await inbox.fetch(1, timeout=1)

    gw = await nats.connect(system.gateway.url)
    try:
        stream = gateway_stream(system.gateway_root).name or ""
        durable = f"relay-{bob.keys.device_id[:16]}"
        consumer = await gw.jetstream().consumer_info(stream, durable)
    finally:
        await gw.close()
    return consumer.delivered.consumer_seq - 1, slow  # one frame to Bob: deliveries beyond it


async def test_a_frame_slower_than_the_ack_wait_stays_with_its_replica(
    system: TwoDeployments,
) -> None:
    redelivered, slow = await _one_call_with_a_slow_replica(system)
    assert redelivered == 0, "the frame was given to the other replica"
    assert not any("frame already handled" in line for line in slow.lines)
    assert await _relay_dead_letters(system) == 0


async def test_a_frame_redelivered_while_its_first_copy_worked_is_no_replay(
    system: TwoDeployments,
) -> None:
    """Past `max_handler_s` the slow replica stops vouching for the frame, so the other one
    takes it and does the same effect; the slow one, marking second, acks without a dead
    letter: it did nothing a second time, and nothing was replayed."""
    redelivered, slow = await _one_call_with_a_slow_replica(
        system, max_handler_s=str(1.5 * ACK_WAIT_S)
    )
    assert redelivered >= 1, "the frame never went to the other replica"
    await slow.wait_line(r"frame already handled", timeout=10)
    assert await _relay_dead_letters(system) == 0
