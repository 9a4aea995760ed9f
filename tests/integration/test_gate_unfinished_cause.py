"""An envelope whose cause the gate delivered but has not finished recording waits for it.

The gate stores an admitted envelope's position, delivery and decision in one round, on
different streams. Here the traces bucket refuses new records for a while (as while it elects
a leader): the person's message is delivered to `a`, its position refused, and the message
retried. `a` (played by the test) calls `b` meanwhile, naming the message as its cause. The
gate does not hold the cause's position yet; it sees the cause still on PARLEY_SUBMIT, so the
call waits until the retry recorded it, and is admitted. Before, the call was refused as a
forged causation id (`FORGED_HEADER`), as a router's call was in a cluster chaos run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import StreamConfig

from bus import EmbeddedServer
from schemas import (
    AgentCall,
    AnyEnvelope,
    Error,
    ErrorCode,
    HumanMessage,
    Namespace,
    decode_envelope,
    new_id,
    utc_now,
)
from tests.support.gate import Decisions, Signer, make_bundle, publish_bundle, start_gate, submit
from tests.support.processes import READY, ProcessOutput


@dataclass
class Refusing:
    """The traces bucket's stream, made to refuse positions (and nothing else of the gate's
    records) and then to take them again."""

    js: JetStreamContext
    config: StreamConfig

    async def start(self) -> None:
        (everything,) = self.config.subjects or ["a KV stream has one subject"]
        but_positions = [
            everything.replace(">", f"{kind}.>")
            for kind in ("trace", "rate", "inflight", "fanout", "answer", "test")
        ]
        await self.js.update_stream(dataclasses.replace(self.config, subjects=but_positions))

    async def stop(self) -> None:
        await self.js.update_stream(self.config)


@dataclass
class World:
    js: JetStreamContext
    ns: Namespace
    decisions: Decisions
    gate: ProcessOutput
    refusing: Refusing


@pytest.fixture
async def world(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> AsyncIterator[World]:
    js = nc.jetstream()
    signer = Signer.create(tmp_path)
    bundle = make_bundle(
        cli={"start_traces": True, "speaks_for_person": True, "allowed_targets": ("a",)},
        a={"allowed_targets": ("b",)},
        b={"allowed_targets": ("c",)},
    )
    await publish_bundle(js, namespace, signer.sign(bundle))
    decisions = await Decisions(js, namespace).open()
    # A call whose position was refused is retried every 2 s, and the call it caused waits as
    # long each time; ten deliveries leave either seconds to spare on a loaded machine.
    gate = start_gate(
        nats_server.url, namespace, signer, ack_wait_s="5", backoff_s="[2]", max_deliver="10"
    )
    traces = await js.stream_info(f"KV_{namespace.bucket('traces')}")
    try:
        await gate.wait_line(READY)
        await gate.wait_line("policy bundle in force")
        yield World(js, namespace, decisions, gate, Refusing(js, traces.config))
    finally:
        gate.close()


async def _delivered(world: World, receiver: str) -> AnyEnvelope:
    inbox = await world.js.pull_subscribe(
        world.ns.deliver(receiver), durable=receiver, stream=world.ns.stream("deliver")
    )
    (msg,) = await inbox.fetch(1, timeout=20)
    await msg.ack()
    return decode_envelope(msg.data)


def _call(target: str) -> AgentCall:
    return AgentCall(
        id=new_id(), created_at=utc_now(), target=target, text="help", call_id=new_id(), goal="g"
    )


async def test_a_call_whose_cause_is_still_being_recorded_waits_and_is_admitted(
    world: World,
) -> None:
    root = HumanMessage(id=new_id(), created_at=utc_now(), text="hi", call_id=new_id(), target="a")
    await submit(world.js, world.ns, "cli", root)
    assert (await _delivered(world, "a")).id == root.id

    await world.refusing.start()
    to_b = _call("b")
    await submit(world.js, world.ns, "a", to_b, cause=root.id)
    assert (await _delivered(world, "b")).id == to_b.id  # delivered, its position refused
    await world.gate.wait_line(r'"msg":"handler failed".*"attempt":1\b')

    to_c = _call("c")
    await submit(world.js, world.ns, "b", to_c, cause=to_b.id)
    await world.gate.wait_line(r'"msg":"deciding later: its cause is still being decided"')
    await world.refusing.stop()

    decided = await world.decisions.until(to_c.id, timeout=30)
    assert decided.allowed, (decided.code, decided.message)
    assert decided.trace_id == root.id and decided.hop_count == 2


async def test_an_envelope_naming_a_refusal_still_being_recorded_waits_and_is_admitted(
    world: World,
) -> None:
    """The gate's own error is a cause too (the router retries a call the gate refused as
    retryable under the refusal's id). `a` calls `x`, which its profile does not allow: the
    refusal is delivered to `a`, its position refused. `a` calls `b` under it; the call waits
    for the refused submission's retry, and is admitted. Before, the error's id was claimed as
    answering no submission, and the call was refused as forged."""
    root = HumanMessage(id=new_id(), created_at=utc_now(), text="hi", call_id=new_id(), target="a")
    await submit(world.js, world.ns, "cli", root)
    assert (await _delivered(world, "a")).id == root.id

    await world.refusing.start()
    to_x = _call("x")
    await submit(world.js, world.ns, "a", to_x, cause=root.id)
    refusal = await _delivered(world, "a")  # delivered, its position refused
    assert isinstance(refusal, Error) and refusal.code == ErrorCode.TARGET_NOT_ALLOWED
    await world.gate.wait_line(r'"msg":"handler failed".*"attempt":1\b')

    to_b = _call("b")
    await submit(world.js, world.ns, "a", to_b, cause=refusal.id)
    await world.gate.wait_line(r'"msg":"deciding later: its cause is still being decided"')
    await world.refusing.stop()

    decided = await world.decisions.until(to_b.id, timeout=30)
    assert decided.allowed, (decided.code, decided.message)
    assert decided.trace_id == root.id


@pytest.mark.parametrize("names", ["itself", "nothing the gate took in"])
async def test_a_cause_no_delivery_can_have_come_from_is_refused_at_once(
    world: World, names: str
) -> None:
    """An envelope naming itself (claimed, and on PARLEY_SUBMIT while it is decided) or an
    id nobody submitted is refused as forged at its first delivery, never held."""
    call = _call("b")
    await submit(world.js, world.ns, "a", call, cause=call.id if names == "itself" else new_id())
    decided = await world.decisions.until(call.id, timeout=30)
    assert (decided.allowed, decided.code) == (False, ErrorCode.FORGED_HEADER), decided.message
    assert "names no envelope the gate delivered" in decided.message
    assert not [line for line in world.gate.lines if "deciding later" in line]
