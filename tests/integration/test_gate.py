"""The gate as a real process between real agent processes: loops, forgeries, budgets."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from bus import HOP_COUNT, MSG_ID, SENDER, TRACE_ID, EmbeddedServer
from schemas import (
    AgentCall,
    AgentResponse,
    DelegationConstraints,
    DelegationRequest,
    ErrorCode,
    HumanMessage,
    Namespace,
    Reply,
    decode_envelope,
    new_id,
    utc_now,
)
from tests.support.gate import Decisions, Signer, make_bundle, publish_bundle, start_gate, submit
from tests.support.processes import READY, ProcessOutput, parley_env, start_actor

pytestmark = pytest.mark.chaos

CHATTY = "support.chatty:ChattyActor"
BUDGET = 12


@dataclass
class World:
    js: JetStreamContext
    ns: Namespace
    decisions: Decisions
    gate: ProcessOutput
    agents: dict[str, ProcessOutput]


@pytest.fixture
async def world(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> AsyncIterator[World]:
    js = nc.jetstream()
    signer = Signer.create(tmp_path)
    bundle = make_bundle(
        cli={"start_traces": True, "speaks_for_person": True, "allowed_targets": ("a",)},
        a={"allowed_targets": ("b", "c"), "max_concurrent_calls": 10},
        b={"allowed_targets": ("a", "c"), "trace_message_budget": BUDGET, "max_hop_count": 3},
        c={"allowed_targets": ("b", "d"), "redact_pii": True, "max_depth": 5, "rate_per_minute": 1},
    )
    await publish_bundle(js, namespace, signer.sign(bundle))
    decisions = await Decisions(js, namespace).open()
    env = parley_env(nats_server.url, namespace.root, ack_wait_s="5")
    gate = start_gate(nats_server.url, namespace, signer, ack_wait_s="5")
    agents = [start_actor(CHATTY, name, env) for name in ("a", "b")]
    try:
        for process in (gate, *agents):
            await process.wait_line(READY)
        await gate.wait_line("policy bundle in force")
        yield World(js, namespace, decisions, gate, dict(zip(("a", "b"), agents, strict=True)))
        # One gate is the only writer of its records: it never loses a compare-and-set.
        conflicts = [line for line in gate.lines if "another gate replica" in line]
        assert not conflicts, conflicts
    finally:
        for process in (gate, *agents):
            process.close()


def _human(text: str) -> HumanMessage:
    return HumanMessage(id=new_id(), created_at=utc_now(), text=text, call_id=new_id(), target="a")


async def test_a_call_loop_is_refused_as_a_cycle(world: World) -> None:
    root = _human("call:b:call:a")
    await submit(world.js, world.ns, "cli", root)
    first = await world.decisions.until(root.id)
    assert first.allowed and first.target == "a" and first.hop_count == 0
    to_b = await world.decisions.next()
    assert (to_b.sender, to_b.target, to_b.allowed, to_b.hop_count) == ("a", "b", True, 1)
    back_to_a = await world.decisions.next()
    assert (back_to_a.sender, back_to_a.allowed) == ("b", False)
    assert back_to_a.code == ErrorCode.CYCLE_DETECTED
    assert "a is already on the call chain (a -> b -> a)" in back_to_a.message
    assert back_to_a.trace_id == root.id and back_to_a.origin == "cli"


async def test_a_ping_pong_that_never_deepens_stops_at_the_trace_budget(world: World) -> None:
    root = _human("pingpong:b")
    await submit(world.js, world.ns, "cli", root)
    admitted = 0
    while True:
        decision = await world.decisions.next()
        assert decision.trace_id == root.id
        assert decision.hop_count <= 1  # calls at hop 1, answers back at 0: it never deepens
        if not decision.allowed:
            break
        admitted += 1
    assert decision.code == ErrorCode.BUDGET_EXCEEDED
    assert f"budget of {BUDGET} messages" in decision.message
    assert admitted == BUDGET


async def _reader(world: World, actor: str) -> JetStreamContext.PullSubscription:
    return await world.js.pull_subscribe(
        world.ns.deliver(actor), durable=actor, stream=world.ns.stream("deliver")
    )


async def _call_delivered_to_c(world: World) -> AgentCall:
    """cli -> a -> b -> c: c (played by the test) holds a call at hop 3."""
    reader = await _reader(world, "c")
    await submit(world.js, world.ns, "cli", _human("call:b:call:c"))
    (msg,) = await reader.fetch(1, timeout=20)
    await msg.ack()
    call = decode_envelope(msg.data)
    assert isinstance(call, AgentCall)
    assert msg.headers is not None
    assert (msg.headers[SENDER], msg.headers[HOP_COUNT]) == ("b", "2")
    return call


def _answer(call: AgentCall) -> AgentResponse:
    return AgentResponse(
        id=new_id(),
        created_at=utc_now(),
        sender="c",
        target="b",
        text="done",
        call_id=call.call_id,
        reply=Reply(message="done"),
    )


async def test_forged_hop_count_and_trace_id_on_a_reply_are_refused(world: World) -> None:
    call = await _call_delivered_to_c(world)
    forged_hop = _answer(call)
    await submit(world.js, world.ns, "c", forged_hop, cause=call.id, headers={HOP_COUNT: "0"})
    refused = await world.decisions.until(forged_hop.id)
    assert not refused.allowed and refused.code == ErrorCode.FORGED_HEADER
    assert "Parley-Hop-Count claims '0', the gate's record says '1'" in refused.message
    fresh_trace = _answer(call)
    await submit(world.js, world.ns, "c", fresh_trace, cause=call.id, headers={TRACE_ID: new_id()})
    refused = await world.decisions.until(fresh_trace.id)
    assert not refused.allowed and refused.code == ErrorCode.FORGED_HEADER
    # Dropping the cause to start afresh is refused too: agents may not start traces.
    orphan = _answer(call)
    await submit(world.js, world.ns, "c", orphan)
    refused = await world.decisions.until(orphan.id)
    assert refused.code == ErrorCode.UNAUTHORIZED
    # The honest reply, with no claims at all, is admitted back to its caller at hop 1.
    honest = _answer(call)
    await submit(world.js, world.ns, "c", honest, cause=call.id)
    admitted = await world.decisions.until(honest.id)
    assert admitted.allowed and admitted.target == "b" and admitted.hop_count == 1


async def test_a_delegation_is_redacted_before_delivery_when_the_profile_asks(
    world: World,
) -> None:
    call = await _call_delivered_to_c(world)
    secret = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2
    request = DelegationRequest(
        id=new_id(),
        created_at=utc_now(),
        request_id=new_id(),
        origin_employee="c",
        target_employee="d",
        user_id="",
        parent_session_id="s",
        objective="Write to alice@example.com",
        input=f"Use key {secret} and call +1 415 555 0100",
        constraints=DelegationConstraints(max_depth=5),
    )
    reader = await _reader(world, "d")
    await submit(world.js, world.ns, "c", request, cause=call.id)
    decision = await world.decisions.until(request.id)
    assert decision.allowed, decision
    assert "alice@example.com" not in decision.objective + decision.preview
    (msg,) = await reader.fetch(1, timeout=20)
    delivered = decode_envelope(msg.data)
    assert isinstance(delivered, DelegationRequest) and delivered.id == request.id
    for plain in ("alice@example.com", secret, "555 0100"):
        assert plain not in msg.data.decode()
    assert "[REDACTED:" in delivered.input and "[REDACTED:" in delivered.objective


async def test_a_refused_answer_is_reported_to_the_caller_waiting_for_it(world: World) -> None:
    call = await _call_delivered_to_c(world)
    astray = msgspec.structs.replace(_answer(call), target="a")  # not who called c
    await submit(world.js, world.ns, "c", astray, cause=call.id)
    refused = await world.decisions.until(astray.id)
    assert refused.code == ErrorCode.TARGET_NOT_ALLOWED
    # b, whose call c answered, is told as well: a caller never waits for ever on a refusal.
    await world.agents["b"].wait_line(r'"msg":"refused".*TARGET_NOT_ALLOWED')
    first = _answer(call)
    await submit(world.js, world.ns, "c", first, cause=call.id)
    assert (await world.decisions.until(first.id)).allowed
    again = _answer(call)  # an answer is charged with its call, once (issue 21)
    await submit(world.js, world.ns, "c", again, cause=call.id)
    assert (await world.decisions.until(again.id)).code == ErrorCode.DUPLICATE_ENVELOPE


async def test_a_batch_holding_a_repeated_id_is_decided_again_without_it(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    """Claims settle while a batch is first decided: the repeat is refused, and the rest of
    its batch is decided again without it, each admitted and delivered once."""
    js = nc.jetstream()
    signer = Signer.create(tmp_path)
    cli = {"start_traces": True, "speaks_for_person": True, "allowed_targets": ("a",)}
    await publish_bundle(js, namespace, signer.sign(make_bundle(cli=cli)))
    decisions = await Decisions(js, namespace).open()
    first, second = _human("first"), _human("second")
    await submit(js, namespace, "cli", first)
    await submit(js, namespace, "cli", first, headers={MSG_ID: new_id()})  # the same id again
    await submit(js, namespace, "cli", second)
    gate = start_gate(nats_server.url, namespace, signer, ack_wait_s="5")  # one batch of three
    try:
        await gate.wait_line(READY)
        seen = sorted(
            [(d.envelope_id, d.allowed, d.code) for d in [await decisions.next() for _ in "abc"]],
            key=str,
        )
        assert seen == sorted(
            [
                (first.id, True, None),
                (first.id, False, ErrorCode.DUPLICATE_ENVELOPE),
                (second.id, True, None),
            ],
            key=str,
        )
        reader = await js.pull_subscribe(
            namespace.deliver("a"), durable="a", stream=namespace.stream("deliver")
        )
        delivered = [decode_envelope(m.data).id for m in await reader.fetch(2, timeout=10)]
        assert sorted(delivered) == sorted([first.id, second.id])
        assert not [line for line in gate.lines if "handler failed" in line]  # decided at once
    finally:
        gate.close()


async def test_a_first_call_reads_none_of_the_records_its_root_left_unborn(
    nc: NATS, world: World
) -> None:
    """Admitting a root makes certain that its children's count and its (implied) trace
    record do not exist yet: the first call in the trace is decided without reading them,
    and its compare-and-set creates them (actors/gate/_store.py, `known_absent`)."""
    stream = f"KV_{world.ns.bucket('traces')}"
    reads: list[str] = []

    async def on_read(msg: Msg) -> None:
        if msg.subject.startswith("$JS.API.DIRECT.GET."):
            reads.append(msg.subject.removeprefix(f"$JS.API.DIRECT.GET.{stream}."))
        elif msg.data:
            reads.append(json.loads(msg.data).get("last_by_subj", ""))

    watched = [
        await nc.subscribe(f"$JS.API.STREAM.MSG.GET.{stream}", cb=on_read),
        await nc.subscribe(f"$JS.API.DIRECT.GET.{stream}.>", cb=on_read),
    ]
    await nc.flush()
    root = _human("call:b")
    await submit(world.js, world.ns, "cli", root)
    assert (await world.decisions.until(root.id)).allowed
    to_b = await world.decisions.next()
    assert (to_b.sender, to_b.target, to_b.allowed, to_b.trace_id) == ("a", "b", True, root.id)
    await nc.flush()  # every read the gate sent before that decision has reached us
    for sub in watched:
        await sub.unsubscribe()
    prefix = f"$KV.{world.ns.bucket('traces')}."
    assert f"{prefix}inflight.a" in reads, reads  # what the gate could not know, it read
    assert not {f"{prefix}fanout.{root.id}", f"{prefix}trace.{root.id}"} & set(reads), reads


async def test_a_first_delivery_claims_its_id_before_its_look_up_is_answered(
    nc: NATS, world: World
) -> None:
    """A free id's create-only claim goes out once its look-up is sent, not a round trip
    later once it is answered (actors/gate/_ids.py, `claim_early`); the look-up still
    decides the message."""
    bucket = world.ns.bucket("idempotency")
    key = f"$KV.{bucket}.id.{{}}"
    order: list[str] = []
    answers_to: list[str] = []

    async def on_wire(msg: Msg) -> None:  # one subscription: in the order the server sent
        if msg.subject == f"$JS.API.DIRECT.GET.KV_{bucket}":
            order.extend(f"look-up {subject}" for subject in json.loads(msg.data)["multi_last"])
            answers_to.append(msg.reply)
        elif msg.subject.startswith(key.format("")):
            order.append(f"claim {msg.subject}")
        elif msg.subject in answers_to:
            order.append("look-up answered")

    watched = await nc.subscribe(">", cb=on_wire)
    await nc.flush()
    root = _human("hello")
    await submit(world.js, world.ns, "cli", root)
    assert (await world.decisions.until(root.id)).allowed
    await nc.flush()  # every request the gate sent before that decision has reached us
    await watched.unsubscribe()
    wanted = key.format(root.id)
    assert order[:3] == [f"look-up {wanted}", f"claim {wanted}", "look-up answered"], order
