"""The gateway is untrusted: what it may do to frames, and what a share owner may withdraw.

The gateway may replay, reorder, truncate or alter what it stores; every such frame is
refused by the receiving relay with a typed reason and dead-lettered (the auditor records
every dead letter in the hash chain). A revoked share and a device Bob's policy does not
allow are refused on Bob's side and the caller is told, as is a call whose signed hop count
puts it over Bob's maxHopCount. And the gateway's stored bytes hold none of the run's
plaintext.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import nats
import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from actors.relay import DeviceKeys, open_frame, seal_frame, write_share
from bus import DEAD_REASON, MSG_ID, EmbeddedServer
from schemas import AgentResponse, Error, ErrorCode, FrameBody, decode_envelope, encode
from tests.support.gate import Decisions
from tests.support.processes import ProcessOutput
from tests.support.relay import (
    GATEWAY_READY,
    Side,
    TwoDeployments,
    byte_doc_call,
    relay_servers,
    start_two_deployments,
)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedServer, ...]]:
    yield from relay_servers(tmp_path_factory)


async def _system(
    servers: tuple[EmbeddedServer, ...], tmp_path: Path, *, allow_device: bool = True
) -> AsyncIterator[TwoDeployments]:
    processes: list[ProcessOutput] = []
    alice, bob, gateway = servers
    started = await start_two_deployments(
        alice, bob, gateway, tmp_path, processes, allow_device=allow_device
    )
    try:
        yield started
    finally:
        for process in processes:
            process.close()
        await started.close()


@pytest.fixture
async def system(
    servers: tuple[EmbeddedServer, ...], tmp_path: Path
) -> AsyncIterator[TwoDeployments]:
    async for started in _system(servers, tmp_path):
        yield started


@pytest.fixture
async def unallowed(
    servers: tuple[EmbeddedServer, ...], tmp_path: Path
) -> AsyncIterator[TwoDeployments]:
    """Bob shared byte-doc with Alice's device, but his policy does not let it reach it."""
    async for started in _system(servers, tmp_path, allow_device=False):
        yield started


class Caller:
    """Alice's caller: submits calls to `bob-byte-doc`, reads what comes back."""

    def __init__(self, system: TwoDeployments) -> None:
        self.system = system
        self.js = system.alice.nc.jetstream()

    async def open(self) -> Caller:
        ns = self.system.alice.ns
        self.inbox = await self.js.pull_subscribe(
            ns.deliver("router"), durable="router", stream=ns.stream("deliver")
        )
        return self

    async def call(self, goal: str) -> tuple[str, object]:
        call = byte_doc_call(goal)
        ns = self.system.alice.ns
        await self.js.publish(ns.submit("router"), encode(call), headers={MSG_ID: call.id})
        (msg,) = await self.inbox.fetch(1, timeout=30)
        await msg.ack_sync()
        return call.id, decode_envelope(msg.data)


async def _dead_reasons(system: TwoDeployments, count: int, side: Side | None = None) -> list[str]:
    """The reasons of the first `count` dead letters `side`'s relay (Bob's) filed."""
    side = side or system.bob
    sub = await side.nc.jetstream().pull_subscribe(
        side.ns.dead("relay"), durable="test-dead", stream=side.ns.stream("dead")
    )
    reasons: list[str] = []
    while len(reasons) < count:
        for msg in await sub.fetch(count - len(reasons), timeout=20):
            await msg.ack()
            reasons.append((msg.headers or {})[DEAD_REASON])
    return reasons


async def _capture(gw: NATS, subject: str) -> tuple[list[Msg], Subscription]:
    """Every frame published on `subject`, as the gateway's operator could record them."""
    captured: list[Msg] = []

    async def keep(msg: Msg) -> None:
        captured.append(msg)

    return captured, await gw.subscribe(subject, cb=keep)


async def test_replayed_reordered_truncated_and_altered_frames_are_refused(
    system: TwoDeployments,
) -> None:
    gw = await nats.connect(system.gateway.url)
    to_bob = f"{system.gateway_root}.{system.bob.keys.device_id}.{system.alice.keys.device_id}"
    captured, capture = await _capture(gw, to_bob)
    caller = await Caller(system).open()
    _, answer = await caller.call("the first call")
    assert isinstance(answer, AgentResponse)
    await capture.unsubscribe()
    (frame,) = [msg.data for msg in captured]
    gjs = gw.jetstream()
    # A new process: the replay window it refuses with is the one persisted in KV.
    assert system.bob.relay is not None
    system.bob.relay.kill()
    restarted = system.start_relay(system.bob)
    await restarted.wait_line(GATEWAY_READY)

    async def inject(data: bytes, name: str) -> None:
        await gjs.publish(to_bob, data, headers={MSG_ID: f"attack-{name}-{time.time_ns()}"})

    await inject(frame, "replay")  # the same frame again
    await inject(frame[:-9], "truncated")
    flipped = bytearray(frame)
    flipped[len(frame) // 2] ^= 0x40
    await inject(bytes(flipped), "flipped")
    mallory = DeviceKeys.generate()
    await inject(frame[:36] + bytes.fromhex(mallory.device_id) + frame[68:], "recipient")
    # Reordered past the window: seq 100 then seq 1 of one session, both signed by Alice's
    # device (a frame the gateway held back while 99 newer ones passed).
    alice, bob = system.alice, system.bob
    for seq in (100, 1):
        call = byte_doc_call(f"late frame {seq}")
        body = FrameBody(
            sender_device=alice.keys.device_id,
            recipient_device=bob.keys.device_id,
            session="held-back",
            seq=seq,
            kind="call",
            agent="byte-doc",
            sent_at_ms=int(time.time() * 1000),
            envelope=encode(call),
        )
        await inject(seal_frame(body, alice.keys, bob.keys.public.kem_key), f"seq{seq}")
    reasons = await _dead_reasons(system, 5)
    assert reasons == [
        "relay_replay",
        "relay_truncated",
        "relay_tampered",
        "relay_wrong_recipient",
        "relay_too_old",
    ]
    await gw.close()


async def test_an_answer_without_the_calls_own_return_ticket_is_refused_as_unsolicited(
    system: TwoDeployments,
) -> None:
    """Bob's device is a peer, not a trusted party: an answer it signs reaches Alice's caller
    only with the return ticket Alice's relay sealed into that very call. An answer to a call
    never sent (carrying another call's ticket), one with no ticket, and one with an altered
    ticket are each refused and dead-lettered, and nothing reaches the caller."""
    alice, bob = system.alice, system.bob
    gw = await nats.connect(system.gateway.url)
    root = system.gateway_root
    to_bob = f"{root}.{bob.keys.device_id}.{alice.keys.device_id}"
    to_alice = f"{root}.{alice.keys.device_id}.{bob.keys.device_id}"
    calls, capture_calls = await _capture(gw, to_bob)
    answers, capture_answers = await _capture(gw, to_alice)
    caller = await Caller(system).open()
    call_id, answer = await caller.call("the call Bob answers")
    assert isinstance(answer, AgentResponse)
    await gw.flush()
    await capture_calls.unsubscribe()
    await capture_answers.unsubscribe()
    call = open_frame(calls[0].data, bob.keys, frozenset({alice.keys.device_id}))
    real = open_frame(answers[0].data, alice.keys, frozenset({bob.keys.device_id}))
    assert call.ticket and real.ticket == call.ticket and real.in_reply_to == call_id

    flipped = bytearray(call.ticket)
    flipped[-1] ^= 1
    forged = [
        ("never-sent-call", call.ticket),  # another call's ticket
        (call_id, b""),  # no ticket
        (call_id, bytes(flipped)),  # an altered one
    ]
    for offset, (in_reply_to, ticket) in enumerate(forged, start=1):
        body = msgspec.structs.replace(
            real, seq=real.seq + offset, in_reply_to=in_reply_to, ticket=ticket
        )
        await gw.jetstream().publish(
            to_alice,
            seal_frame(body, bob.keys, alice.keys.public.kem_key),
            headers={MSG_ID: f"forged-{offset}-{time.time_ns()}"},
        )
    assert await _dead_reasons(system, 3, alice) == ["relay_unsolicited_answer"] * 3
    with pytest.raises(TimeoutError):
        await caller.inbox.fetch(1, timeout=1)
    await gw.close()


def _no_plaintext(root: Path, texts: list[str]) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for text in texts:
                assert text.encode() not in data, f"{text!r} in the gateway's {path.name}"


async def test_the_gateway_stores_no_plaintext(system: TwoDeployments) -> None:
    gw = await nats.connect(system.gateway.url)
    seen, capture = await _capture(gw, f"{system.gateway_root}.>")
    caller = await Caller(system).open()
    goal = "review this API for security issues: token sk-live-12345"
    call_id, answer = await caller.call(goal)
    assert isinstance(answer, AgentResponse)
    await gw.flush()
    await capture.unsubscribe()
    assert len(seen) == 2  # the call and the answer
    texts = [goal, answer.reply.message, answer.text, call_id, answer.call_id, answer.id]
    texts += ["byte-doc", "bob-byte-doc", "router", system.principal]
    stored = b"".join(msg.data + msgspec.json.encode(msg.headers) for msg in seen)
    for text in texts:
        assert text.encode() not in stored
    _no_plaintext(system.gateway.store_dir, texts)
    await gw.close()


async def test_a_revoked_share_is_refused_and_the_caller_told(system: TwoDeployments) -> None:
    caller = await Caller(system).open()
    _, first = await caller.call("before the revocation")
    assert isinstance(first, AgentResponse)
    share = msgspec.structs.replace(system.share, revoked_at=datetime.now(UTC))
    write_share(system.bob.dir / "relay", share, system.bob.keys.signing)
    _, refused = await caller.call("after the revocation")
    assert isinstance(refused, Error) and refused.code == ErrorCode.UNAUTHORIZED
    assert "revoked" in refused.message
    assert await _dead_reasons(system, 1) == ["relay_share_revoked"]


async def test_a_device_bobs_policy_does_not_allow_is_refused_by_bobs_gate(
    unallowed: TwoDeployments,
) -> None:
    bob_decisions = await Decisions(unallowed.bob.nc.jetstream(), unallowed.bob.ns).open()
    caller = await Caller(unallowed).open()
    _, refused = await caller.call("may I?")
    assert isinstance(refused, Error) and refused.code == ErrorCode.TARGET_NOT_ALLOWED
    decision = await bob_decisions.next()
    assert not decision.allowed and decision.sender == unallowed.principal
    assert decision.code == ErrorCode.TARGET_NOT_ALLOWED


async def test_a_forward_whose_signed_hop_count_is_over_bobs_limit_is_refused_by_bobs_gate(
    system: TwoDeployments,
) -> None:
    """A call frame names the hop the call sat at on Alice's side; Bob's gate holds the chain
    as a whole to its maxHopCount (2, the default): a call at hop 2 there is hop 3 here."""
    alice, bob = system.alice, system.bob
    bob_decisions = await Decisions(bob.nc.jetstream(), bob.ns).open()
    call = byte_doc_call("one hop too many")
    body = FrameBody(
        sender_device=alice.keys.device_id,
        recipient_device=bob.keys.device_id,
        session="deep-chain",
        seq=1,
        kind="call",
        agent="byte-doc",
        sent_at_ms=int(time.time() * 1000),
        envelope=encode(call),
        hop_count=2,
    )
    gw = await nats.connect(system.gateway.url)
    to_bob = f"{system.gateway_root}.{bob.keys.device_id}.{alice.keys.device_id}"
    frame = seal_frame(body, alice.keys, bob.keys.public.kem_key)
    await gw.jetstream().publish(to_bob, frame, headers={MSG_ID: f"deep-{time.time_ns()}"})
    decision = await bob_decisions.next()
    assert not decision.allowed and decision.sender == system.principal
    assert decision.code == ErrorCode.HOP_LIMIT_EXCEEDED
    assert (decision.rule, decision.limit, decision.value) == ("max_hop_count", 2, 3)
    await gw.close()
