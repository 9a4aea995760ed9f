"""The shared-agent relay end to end: two deployments, a gateway, real processes.

Alice's caller calls `bob-byte-doc`; Alice's gate admits it to the shared agent, Alice's relay
seals it onto the gateway, Bob's relay opens it and submits it through Bob's gate as the
principal standing for Alice's device, Bob's `byte-doc` answers, and the answer comes back the
same way to Alice's caller. Both gates decide (and so both auditors record) their half.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import msgspec
import nats
import pytest

from actors.relay import DeviceKeys
from bus import CAUSATION_ID, MSG_ID, SENDER, EmbeddedServer
from schemas import AgentResponse, Error, ErrorCode, decode_envelope, encode
from tests.support.delegation import person_request
from tests.support.gate import Decisions
from tests.support.processes import ProcessOutput
from tests.support.relay import (
    TwoDeployments,
    byte_doc_call,
    relay_servers,
    start_two_deployments,
)
from tools.natsconf import GATEWAY_ADMIN, create_gateway_stream, write_gateway_config


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


async def test_a_locked_down_gateway_carries_the_call_and_keeps_each_relay_to_its_subjects(
    servers: tuple[EmbeddedServer, ...], tmp_path: Path
) -> None:
    """Each relay is a user of the gateway allowed only its own device's subjects."""
    alice_keys, bob_keys = DeviceKeys.generate(), DeviceKeys.generate()
    root = "gwlocked"
    seeds = write_gateway_config(
        tmp_path / "gateway-config", [alice_keys.device_id, bob_keys.device_id], root
    )
    gateway = EmbeddedServer(
        tmp_path / "gateway", authorization=tmp_path / "gateway-config" / "authorization.conf"
    )
    gateway.start()
    processes: list[ProcessOutput] = []
    try:
        await create_gateway_stream(gateway.url, seeds[GATEWAY_ADMIN], root)
        system = await start_two_deployments(
            servers[0],
            servers[1],
            gateway,
            tmp_path / "deployments",
            processes,
            keys=(alice_keys, bob_keys),
            gateway_root=root,
            gateway_seeds=seeds,
        )
        try:
            js = system.alice.nc.jetstream()
            inbox = await js.pull_subscribe(
                system.alice.ns.deliver("router"),
                durable="router",
                stream=system.alice.ns.stream("deliver"),
            )
            call = byte_doc_call("through a locked gateway")
            await js.publish(
                system.alice.ns.submit("router"), encode(call), headers={MSG_ID: call.id}
            )
            (msg,) = await inbox.fetch(1, timeout=30)
            assert isinstance(decode_envelope(msg.data), AgentResponse)
            await _alice_may_not_act_as_bob(gateway, seeds[alice_keys.device_id], system)
        finally:
            await system.close()
    finally:
        for process in processes:
            process.close()
        gateway.close()


async def _alice_may_not_act_as_bob(
    gateway: EmbeddedServer, alice_seed: Path, system: TwoDeployments
) -> None:
    alice, bob = system.alice.keys.device_id, system.bob.keys.device_id
    violations: list[str] = []

    async def on_error(exc: Exception) -> None:
        violations.append(str(exc))

    nc = await nats.connect(
        gateway.url,
        nkeys_seed=str(alice_seed),
        inbox_prefix=f"_INBOX_{alice[:16]}".encode(),
        error_cb=on_error,
        allow_reconnect=False,
    )
    try:
        await nc.publish(f"gwlocked.{alice}.{bob}", b"a frame in Bob's name")
        await nc.subscribe(f"gwlocked.{bob}.*")
        await nc.flush()
        deadline = asyncio.get_running_loop().time() + 5
        while len(violations) < 2 and asyncio.get_running_loop().time() < deadline:
            await nc.flush()  # each round trip lets the server's -ERR lines arrive
    finally:
        await nc.close()
    assert len(violations) == 2, violations
    assert all("permissions violation" in v.lower() for v in violations)


async def test_a_kind_the_relay_does_not_carry_is_answered_with_an_error_at_once(
    system: TwoDeployments,
) -> None:
    """A delegation to the shared agent is admitted by Alice's gate, but the relay carries
    agent calls only: the caller gets INVALID_REQUEST from `bob-byte-doc`, nothing is sent."""
    alice = system.alice
    js = alice.nc.jetstream()
    inbox = await js.pull_subscribe(
        alice.ns.deliver("router"), durable="router", stream=alice.ns.stream("deliver")
    )
    request = msgspec.structs.replace(
        person_request("review it", target="bob-byte-doc"), origin_employee="router"
    )
    await js.publish(alice.ns.submit("router"), encode(request), headers={MSG_ID: request.id})
    (msg,) = await inbox.fetch(1, timeout=30)
    refusal = decode_envelope(msg.data)
    assert isinstance(refusal, Error), refusal
    assert refusal.code == ErrorCode.INVALID_REQUEST and "agent calls" in refusal.message
    assert refusal.cause_id == request.id


async def test_frames_too_large_for_the_gateway_become_errors_for_the_caller(
    servers: tuple[EmbeddedServer, ...], tmp_path: Path
) -> None:
    """A gateway with a 3 KB message limit: a call too large for it is refused at Alice's
    relay, an answer too large for it is replaced at Bob's relay by an error; the caller gets
    an error at once either way, and nothing is retried for ever."""
    gateway = EmbeddedServer(tmp_path / "small-gateway", extra_config="max_payload: 3KB\n")
    gateway.start()
    processes: list[ProcessOutput] = []
    try:
        system = await start_two_deployments(
            servers[0], servers[1], gateway, tmp_path / "d", processes
        )
        try:
            js = system.alice.nc.jetstream()
            ns = system.alice.ns
            inbox = await js.pull_subscribe(
                ns.deliver("router"), durable="router", stream=ns.stream("deliver")
            )
            for size, code in ((3000, ErrorCode.INVALID_REQUEST), (1200, ErrorCode.INTERNAL_ERROR)):
                call = msgspec.structs.replace(byte_doc_call("x" * size), text="")
                await js.publish(ns.submit("router"), encode(call), headers={MSG_ID: call.id})
                (msg,) = await inbox.fetch(1, timeout=30)
                await msg.ack_sync()
                refusal = decode_envelope(msg.data)
                assert isinstance(refusal, Error), refusal
                assert refusal.code == code and "too large" in refusal.message
        finally:
            await system.close()
    finally:
        for process in processes:
            process.close()
        gateway.close()
