"""One OpenTelemetry trace across two deployments, through the shared-agent relay.

Both deployments' gates, relays and Bob's `byte-doc` (real processes) export their spans to
an OTLP/HTTP receiver in this test. Alice's caller calls `bob-byte-doc`; the call crosses
the gateway inside a sealed frame carrying the `traceparent` of Alice's relay, Bob's relay
continues it into Bob's deployment, and Bob's relay seals its own span into the answer's
frame. The receiver gets one trace: Alice's gate's span its only root, every other span's
parent in it, Bob's agent under Bob's gate under Bob's relay under Alice's relay, and the
answer back in Alice's deployment under the spans of Bob's. The gateway sees none of it:
no frame holds the trace id in clear, and no gateway message has a `traceparent` header.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import nats
import pytest
from nats.aio.msg import Msg

from actors.relay import DeviceKeys, gateway_stream, open_frame
from bus import DEAD_REASON, MSG_ID, TRACEPARENT, EmbeddedServer
from schemas import AgentCall, AgentResponse, decode_envelope, encode
from tests.support.otlp import OtlpReceiver, ReceivedSpan, otel_env, otlp_receiver
from tests.support.processes import ProcessOutput
from tests.support.relay import (
    GATEWAY_READY,
    TwoDeployments,
    byte_doc_call,
    forge_frame,
    relay_servers,
    start_two_deployments,
)

_PRODUCER, _CONSUMER = 4, 5  # the protobuf's SpanKind values
# The trace the gateway would like the call to join.
THEIRS = "4bf92f3577b34da6a3ce929d0e0e4736"
THEIR_TRACEPARENT = f"00-{THEIRS}-00f067aa0ba902b7-01"


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedServer, ...]]:
    yield from relay_servers(tmp_path_factory)


def _where(span: ReceivedSpan) -> tuple[str, str, str]:
    """(deployment, process, span name)."""
    return str(span.resource.get("service.namespace", "")), span.instance, span.name


def _ancestors(span: ReceivedSpan, by_id: dict[str, ReceivedSpan]) -> list[ReceivedSpan]:
    """`span`'s parents, nearest first, up to the root (a cycle fails the test)."""
    chain: list[ReceivedSpan] = []
    while span.parent_id:
        span = by_id[span.parent_id]
        assert span not in chain, "the parent links form a cycle"
        chain.append(span)
    return chain


def _env(receiver: OtlpReceiver, traced: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """The variables that have a side's processes export to `receiver`, its name on them."""
    return {
        name: otel_env(receiver.endpoint)
        | {"OTEL_RESOURCE_ATTRIBUTES": f"service.namespace={name}"}
        for name in traced
    }


@dataclass
class Crossed:
    """One call across the gateway: what the receiver, the gateway and the caller got."""

    call: AgentCall
    delivered: Msg
    answer: AgentResponse
    spans: list[ReceivedSpan]
    frames: list[Msg]
    system: TwoDeployments


async def _call_across(
    servers: tuple[EmbeddedServer, ...], tmp_path: Path, traced: tuple[str, ...]
) -> Crossed:
    """Run both deployments, the `traced` ones exporting to a receiver, and make one call."""
    processes: list[ProcessOutput] = []
    frames: list[Msg] = []
    with otlp_receiver() as receiver:
        alice, bob, gateway_server = servers
        system = await start_two_deployments(
            alice, bob, gateway_server, tmp_path, processes, side_env=_env(receiver, traced)
        )
        gateway = await nats.connect(system.gateway.url)

        async def keep(msg: Msg) -> None:
            frames.append(msg)

        watch = await gateway.subscribe(f"{system.gateway_root}.>", cb=keep)
        try:
            js = system.alice.nc.jetstream()
            ns = system.alice.ns
            inbox = await js.pull_subscribe(
                ns.deliver("router"), durable="router", stream=ns.stream("deliver")
            )
            call = byte_doc_call("trace this review")
            await js.publish(ns.submit("router"), encode(call), headers={MSG_ID: call.id})
            (msg,) = await inbox.fetch(1, timeout=30)
            await msg.ack_sync()
            answer = decode_envelope(msg.data)
            assert isinstance(answer, AgentResponse), answer
            await gateway.flush()
            for process in processes:  # each exports what it has batched before exiting
                process.signal(signal.SIGTERM)
            for process in processes:
                assert await process.wait_exit() == 0, process.name
        finally:
            await watch.unsubscribe()
            await gateway.close()
            for process in processes:
                process.close()
            await system.close()
        assert receiver.errors == []
        return Crossed(call, msg, answer, list(receiver.spans), frames, system)


async def test_a_call_to_a_shared_agent_is_one_trace_across_both_deployments(
    servers: tuple[EmbeddedServer, ...], tmp_path: Path
) -> None:
    crossed = await _call_across(servers, tmp_path, traced=("alice", "bob"))
    call, answer, msg, spans, system = (
        crossed.call,
        crossed.answer,
        crossed.delivered,
        crossed.spans,
        crossed.system,
    )
    trace_id = call.id.replace("-", "")  # the trace Alice's gate started for the call
    trace = [span for span in spans if span.trace_id == trace_id]
    by_id = {span.span_id: span for span in trace}
    assert len(by_id) == len(trace), "span ids repeat"
    [root] = [span for span in trace if not span.parent_id]
    assert _where(root) == ("alice", "gate", "Policy and Guardrails handle")
    assert all(span.parent_id in by_id for span in trace if span is not root)
    assert {(deployment, process) for deployment, process, _ in map(_where, trace)} == {
        ("alice", "gate"),
        ("alice", "relay"),
        ("bob", "relay"),
        ("bob", "gate"),
        ("bob", "byte-doc"),
    }
    # No span of Bob's deployment started a trace of its own.
    assert [span for span in spans if span.trace_id != trace_id] == []

    # The call's way: Bob's agent, under Bob's gate, under Bob's relay, under Alice's relay.
    [handled] = [
        span for span in trace if _where(span)[1:] == ("byte-doc", "Agent Execution handle")
    ]
    chain = [_where(span) for span in _ancestors(handled, by_id)]
    assert chain[:7] == [
        ("bob", "gate", "Policy and Guardrails publish"),
        ("bob", "gate", "Policy and Guardrails handle"),
        ("bob", "relay", "Session Coordination publish"),
        ("bob", "relay", "Session Coordination handle"),
        ("alice", "relay", "Session Coordination publish"),
        ("alice", "relay", "Session Coordination handle"),
        ("alice", "gate", "Policy and Guardrails publish"),
    ], chain
    assert chain[-1] == _where(root)
    carried, received = _ancestors(handled, by_id)[4], _ancestors(handled, by_id)[3]
    assert (carried.kind, carried.attributes["parley.frame"]) == (_PRODUCER, "call")
    assert carried.attributes["parley.peer_device"] == system.bob.keys.device_id
    assert (received.kind, received.attributes["parley.frame"]) == (_CONSUMER, "call")
    assert received.attributes["parley.peer_device"] == system.alice.keys.device_id

    # The answer's way back: Alice's gate decides it under Alice's relay's frame span, which
    # continues the span Bob's relay sealed into the answer's frame.
    [returned] = [
        span
        for span in trace
        if _where(span) == ("alice", "gate", "Policy and Guardrails handle")
        and span.attributes.get("messaging.message.id") == answer.id
    ]
    back = [_where(span) for span in _ancestors(returned, by_id)]
    assert back[:4] == [
        ("alice", "relay", "Session Coordination publish"),
        ("alice", "relay", "Session Coordination handle"),
        ("bob", "relay", "Session Coordination publish"),
        ("bob", "relay", "Session Coordination handle"),
    ], back
    assert ("bob", "byte-doc", "Agent Execution publish") in back
    assert returned.attributes["parley.decision_code"] == "ALLOW"
    assert msg.headers is not None and msg.headers[TRACEPARENT].split("-")[1] == trace_id

    # The gateway carried both frames and learnt nothing of the trace.
    assert len(crossed.frames) >= 2
    for frame in crossed.frames:
        assert TRACEPARENT not in (frame.headers or {})
        assert trace_id.encode() not in frame.data


async def test_a_relay_that_sends_no_traceparent_is_sent_none_back(
    servers: tuple[EmbeddedServer, ...], tmp_path: Path
) -> None:
    """Compatibility: Alice's relay does not trace (as an older relay, which knows no such
    field, never sends one); Bob's deployment traces. Neither frame carries a traceparent,
    so Alice's relay reads Bob's answer as an older relay would, and Bob's side traces the
    call as a trace of its own."""
    crossed = await _call_across(servers, tmp_path, traced=("bob",))
    alice, bob = crossed.system.alice, crossed.system.bob
    root = crossed.system.gateway_root
    opened = []
    for frame in crossed.frames:
        if frame.subject == f"{root}.{bob.keys.device_id}.{alice.keys.device_id}":
            opened.append(open_frame(frame.data, bob.keys, frozenset({alice.keys.device_id})))
        else:
            opened.append(open_frame(frame.data, alice.keys, frozenset({bob.keys.device_id})))
    assert {body.kind for body in opened} == {"call", "answer"}
    assert [body.traceparent for body in opened] == [msgspec.UNSET] * len(opened)
    # Bob's relay traced the answer it sealed, in Bob's own trace.
    sealed = [
        span
        for span in crossed.spans
        if (span.instance, span.name) == ("relay", "Session Coordination handle")
    ]
    assert sealed and {str(span.resource["service.namespace"]) for span in sealed} == {"bob"}


async def test_the_gateway_cannot_put_a_call_into_a_trace_of_its_choosing(
    servers: tuple[EmbeddedServer, ...], tmp_path: Path
) -> None:
    """The gateway holds Alice's call while Bob's relay is down, takes it out of its stream
    and puts in, first, the call re-sealed to Bob with its own traceparent (knowing even the
    plaintext, it cannot sign as Alice's device), then Alice's exact frame with its own
    `traceparent` header. Bob's relay refuses the first as `relay_bad_signature` and answers
    the second in Alice's trace: no span of either deployment is in the gateway's."""
    processes: list[ProcessOutput] = []
    with otlp_receiver() as receiver:
        traced = _env(receiver, ("alice", "bob"))
        alice_server, bob_server, gateway_server = servers
        system = await start_two_deployments(
            alice_server, bob_server, gateway_server, tmp_path, processes, side_env=traced
        )
        alice, bob = system.alice, system.bob
        gateway = await nats.connect(system.gateway.url)
        gjs = gateway.jetstream()
        to_bob = f"{system.gateway_root}.{bob.keys.device_id}.{alice.keys.device_id}"
        held: asyncio.Queue[Msg] = asyncio.Queue()
        watch = await gateway.subscribe(to_bob, cb=held.put)
        try:
            assert bob.relay is not None
            bob.relay.signal(signal.SIGTERM)
            assert await bob.relay.wait_exit() == 0
            js, ns = alice.nc.jetstream(), alice.ns
            inbox = await js.pull_subscribe(
                ns.deliver("router"), durable="router", stream=ns.stream("deliver")
            )
            call = byte_doc_call("a call the gateway holds")
            await js.publish(ns.submit("router"), encode(call), headers={MSG_ID: call.id})
            frame = await asyncio.wait_for(held.get(), 30)
            stream = gateway_stream(system.gateway_root).name
            assert stream is not None
            stored = await gjs.get_last_msg(stream, to_bob)
            assert stored.data == frame.data and stored.seq is not None
            await gjs.delete_msg(stream, stored.seq)
            genuine = open_frame(frame.data, bob.keys, frozenset({alice.keys.device_id}))
            assert isinstance(genuine.traceparent, str)
            forged = msgspec.structs.replace(genuine, traceparent=THEIR_TRACEPARENT)
            resealed = forge_frame(
                msgspec.json.encode(forged), alice.keys, bob.keys, DeviceKeys.generate()
            )
            await gjs.publish(to_bob, resealed, headers={MSG_ID: "forged"})
            headers = {MSG_ID: "copied", TRACEPARENT: THEIR_TRACEPARENT}
            await gjs.publish(to_bob, frame.data, headers=headers)
            restarted = system.start_relay(bob)
            await restarted.wait_line(GATEWAY_READY)
            (msg,) = await inbox.fetch(1, timeout=30)
            await msg.ack_sync()
            assert isinstance(decode_envelope(msg.data), AgentResponse)
            dead = await bob.nc.jetstream().pull_subscribe(
                bob.ns.dead("relay"), durable="test-dead", stream=bob.ns.stream("dead")
            )
            [refused] = await dead.fetch(1, timeout=20)
            assert (refused.headers or {})[DEAD_REASON] == "relay_bad_signature"
            for process in processes:  # each exports what it has batched before exiting
                process.signal(signal.SIGTERM)
            for process in processes:
                assert await process.wait_exit() == 0, process.name
        finally:
            await watch.unsubscribe()
            await gateway.close()
            for process in processes:
                process.close()
            await system.close()
        spans = list(receiver.spans)

    trace_id = call.id.replace("-", "")
    assert THEIRS not in {span.trace_id for span in spans}
    bobs = [span for span in spans if span.resource.get("service.namespace") == "bob"]
    assert {span.instance for span in bobs} == {"relay", "gate", "byte-doc"}
    assert {span.trace_id for span in bobs} == {trace_id}
    [received] = [
        span
        for span in bobs
        if span.name == "Session Coordination handle"
        and span.attributes.get("parley.frame") == "call"
    ]
    assert received.parent_id == genuine.traceparent.split("-")[2]
