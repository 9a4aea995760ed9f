"""Seed 000 verification 7 across deployments: loop prevention holds over the relay.

Alice shares `helper` with Bob's device and Bob shares `byte-doc` with Alice's, so a chain
can go round: Alice's caller -> Bob's `byte-doc` -> Alice's `helper` -> Bob's `byte-doc`
again. Each relay submits an incoming call as a root in its own deployment; the frame carries
the calling side's hop count in its signed body and the receiving gate takes it as the floor
of that root's chain, so the chain as a whole meets maxHopCount (5 on both sides here) and is
refused with HOP_LIMIT_EXCEEDED by the gate where it crosses the limit. The test plays the
agents (the router, `byte-doc`, `helper`); gates, relays and the three nats-servers are real.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from nats.aio.msg import Msg
from nats.js.client import JetStreamContext

from actors.relay import DeviceKeys
from bus import CAUSATION_ID, HOP_COUNT, MSG_ID, EmbeddedServer
from schemas import (
    AgentCall,
    Error,
    ErrorCode,
    ProfilePolicy,
    decode_envelope,
    derive_id,
    device_principal,
    encode,
    new_id,
    utc_now,
)
from tests.support.gate import Decisions
from tests.support.processes import ProcessOutput
from tests.support.relay import TwoDeployments, byte_doc_call, relay_servers, start_two_deployments

LIMIT = 5


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedServer, ...]]:
    yield from relay_servers(tmp_path_factory)


@pytest.fixture
async def system(
    servers: tuple[EmbeddedServer, ...], tmp_path: Path
) -> AsyncIterator[TwoDeployments]:
    alice_keys, bob_keys = DeviceKeys.generate(), DeviceKeys.generate()
    alice_id, bob_id = alice_keys.device_id, bob_keys.device_id

    def caller(target: str, device: str) -> ProfilePolicy:
        return ProfilePolicy(
            allowed_targets=(target,),
            start_traces=True,
            allow_shared_agent_calls=True,
            allowed_shared_device_ids=(device,),
            max_hop_count=LIMIT,
        )

    def device(target: str) -> ProfilePolicy:
        return ProfilePolicy(allowed_targets=(target,), start_traces=True, max_hop_count=LIMIT)

    processes: list[ProcessOutput] = []
    alice, bob, gateway = servers
    started = await start_two_deployments(
        alice,
        bob,
        gateway,
        tmp_path,
        processes,
        keys=(alice_keys, bob_keys),
        alice_profiles={
            "router": caller("bob-byte-doc", bob_id),
            "helper": caller("bob-byte-doc", bob_id),
            device_principal(bob_id): device("helper"),
        },
        bob_profiles={
            "byte-doc": caller("alice-helper", alice_id),
            device_principal(alice_id): device("byte-doc"),
            "alice-helper": ProfilePolicy(),
        },
        share_back="helper",
        start_byte_doc=False,
    )
    try:
        yield started
    finally:
        for process in processes:
            process.close()
        await started.close()


async def _inbox(js: JetStreamContext, ns_deliver: str, durable: str, stream: str) -> Msg:
    sub = await js.pull_subscribe(ns_deliver, durable=durable, stream=stream)
    (msg,) = await sub.fetch(1, timeout=30)
    await msg.ack_sync()
    return msg


def _call(target: str, goal: str) -> AgentCall:
    return AgentCall(
        id=new_id(), created_at=utc_now(), target=target, call_id=new_id(), goal=goal, text=goal
    )


async def test_a_chain_round_both_deployments_is_refused_at_the_hop_limit(
    system: TwoDeployments,
) -> None:
    alice, bob = system.alice, system.bob
    ajs, bjs = alice.nc.jetstream(), bob.nc.jetstream()
    alice_decisions = await Decisions(ajs, alice.ns).open()
    bob_decisions = await Decisions(bjs, bob.ns).open()

    # Alice's router calls Bob's byte-doc: hop 1 here, the relay carries it on as hop 2.
    first = byte_doc_call("look into this, and ask Alice's helper")
    await ajs.publish(alice.ns.submit("router"), encode(first), headers={MSG_ID: first.id})
    at_bob = await _inbox(bjs, bob.ns.deliver("byte-doc"), "byte-doc", bob.ns.stream("deliver"))
    assert at_bob.headers is not None and at_bob.headers[HOP_COUNT] == "2"
    into_bob = decode_envelope(at_bob.data)

    # Bob's byte-doc calls Alice's helper (hop 3 at Bob's): it arrives at hop 4.
    back = _call("alice-helper", "what does Alice's helper say?")
    headers = {MSG_ID: back.id, CAUSATION_ID: into_bob.id}
    await bjs.publish(bob.ns.submit("byte-doc"), encode(back), headers=headers)
    at_alice = await _inbox(ajs, alice.ns.deliver("helper"), "helper", alice.ns.stream("deliver"))
    assert at_alice.headers is not None and at_alice.headers[HOP_COUNT] == "4"
    into_alice = decode_envelope(at_alice.data)

    # Alice's helper calls Bob's byte-doc again: hop 5 at Alice's (the limit, allowed), and
    # hop 6 where it would reach byte-doc: Bob's gate refuses it, and the refusal comes back.
    again = _call("bob-byte-doc", "and round again")
    headers = {MSG_ID: again.id, CAUSATION_ID: into_alice.id}
    await ajs.publish(alice.ns.submit("helper"), encode(again), headers=headers)
    answer = await _inbox(ajs, alice.ns.deliver("helper"), "helper", alice.ns.stream("deliver"))
    refused = decode_envelope(answer.data)
    assert isinstance(refused, Error), refused
    assert refused.code == ErrorCode.HOP_LIMIT_EXCEEDED
    assert f"Hop count {LIMIT + 1} exceeds maxHopCount {LIMIT}" in refused.message

    # Each side audits it: Bob's gate the refusal, Alice's gate the refusal as the answer.
    bob_call = derive_id(f"{alice.keys.device_id}:{again.id}", "relay-call")
    denied = await bob_decisions.until(bob_call)
    assert not denied.allowed and denied.code == ErrorCode.HOP_LIMIT_EXCEEDED
    assert (denied.rule, denied.limit, denied.value) == ("max_hop_count", LIMIT, LIMIT + 1)
    assert denied.sender == system.principal
    sent = await alice_decisions.until(again.id)
    assert sent.allowed and sent.hop_count == LIMIT
    told = await alice_decisions.until(refused.id)
    assert told.allowed and (told.sender, told.target) == ("bob-byte-doc", "helper")
    assert told.envelope_kind == "error"
