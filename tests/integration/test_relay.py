"""The shared-agent relay end to end: two deployments, a gateway, real processes.

Alice's caller calls `bob-byte-doc`; Alice's gate admits it to the shared agent, Alice's relay
seals it onto the gateway, Bob's relay opens it and submits it through Bob's gate as the
principal standing for Alice's device, Bob's `byte-doc` answers, and the answer comes back the
same way to Alice's caller. Both gates decide (and so both auditors record) their half.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bus import CAUSATION_ID, MSG_ID, SENDER, EmbeddedServer
from schemas import AgentResponse, decode_envelope, encode
from tests.support.gate import Decisions
from tests.support.processes import ProcessOutput
from tests.support.relay import (
    TwoDeployments,
    byte_doc_call,
    relay_servers,
    start_two_deployments,
)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedServer, ...]]:
    """Alice's, Bob's and the gateway's nats-servers, shared by the module's tests."""
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


async def test_a_call_to_a_shared_agent_is_answered_across_the_gateway(
    system: TwoDeployments,
) -> None:
    alice, bob = system.alice, system.bob
    js = alice.nc.jetstream()
    inbox = await js.pull_subscribe(
        alice.ns.deliver("router"), durable="router", stream=alice.ns.stream("deliver")
    )
    alice_decisions = await Decisions(js, alice.ns).open()
    bob_decisions = await Decisions(bob.nc.jetstream(), bob.ns).open()
    call = byte_doc_call("review this API for security issues")
    await js.publish(alice.ns.submit("router"), encode(call), headers={MSG_ID: call.id})

    (msg,) = await inbox.fetch(1, timeout=30)
    await msg.ack_sync()
    answer = decode_envelope(msg.data)
    assert isinstance(answer, AgentResponse), answer
    assert answer.sender == "bob-byte-doc" and answer.call_id == call.call_id
    assert answer.reply.message == "byte-doc reviewed it: review this API for security issues"
    assert msg.headers is not None
    assert msg.headers[SENDER] == "bob-byte-doc" and msg.headers[CAUSATION_ID] == call.id

    admitted = await alice_decisions.until(call.id)
    assert admitted.allowed and admitted.target == "bob-byte-doc"
    returned = await alice_decisions.until(answer.id)
    assert returned.allowed and returned.sender == "bob-byte-doc" and returned.target == "router"
    inbound = await bob_decisions.next()
    assert inbound.allowed and (inbound.sender, inbound.target) == (system.principal, "byte-doc")
    answered = await bob_decisions.next()
    assert answered.allowed and (answered.sender, answered.target) == ("byte-doc", system.principal)
