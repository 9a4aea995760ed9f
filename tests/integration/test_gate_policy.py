"""The gate's bundle lifecycle and its limits under two replicas, with real gate processes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from msgspec import structs
from nats.aio.client import Client as NATS

from actors.gate._rate_leases import lease_size
from bus import EmbeddedServer
from schemas import (
    AgentCall,
    ErrorCode,
    HumanMessage,
    Namespace,
    PolicyBundle,
    new_id,
    utc_now,
)
from tests.support.gate import Decisions, Signer, make_bundle, publish_bundle, start_gate, submit
from tests.support.processes import READY

pytestmark = pytest.mark.chaos

_EVERY_REFUSAL_RECORDED = {"refusals_per_minute": 100_000}
"""These bursts are refused past their limits hundreds of times a minute, and each refusal's
decision is what the tests count: none may go unrecorded (actors/gate/_refusal_budget.py)."""


def _note(text: str = "hi", target: str = "sink") -> HumanMessage:
    return HumanMessage(
        id=new_id(), created_at=utc_now(), text=text, call_id=new_id(), target=target
    )


def _call(n: int) -> AgentCall:
    return AgentCall(
        id=new_id(), created_at=utc_now(), target="sink", call_id=new_id(), goal=f"task {n}"
    )


async def test_two_replicas_never_admit_more_than_the_limits(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    js = nc.jetstream()
    signer = Signer.create(tmp_path)
    rate, concurrent = 20, 5
    bundle = make_bundle(
        notes={
            "start_traces": True,
            "speaks_for_person": True,
            "allowed_targets": ("sink",),
            "rate_per_minute": rate,
        },
        calls={
            "start_traces": True,
            "allowed_targets": ("sink",),
            "max_concurrent_calls": concurrent,
            "rate_per_minute": 10_000,
            "deadline_ms": 600_000,
        },
    )
    await publish_bundle(js, namespace, signer.sign(bundle))
    decisions = await Decisions(js, namespace).open()
    gates = [
        start_gate(
            nats_server.url,
            namespace,
            signer,
            _EVERY_REFUSAL_RECORDED,
            ack_wait_s="5",
            fetch_batch="16",
        )
        for _ in range(2)
    ]
    try:
        # Both replicas wait on the work queue before the burst arrives, so both fetch from
        # it (stored before they start, a replica that starts first takes it all).
        for gate in gates:
            await gate.wait_line(READY)
            await gate.wait_line("policy bundle in force")
        notes = [_note() for _ in range(150)]
        calls = [_call(n) for n in range(150)]
        started = time.monotonic()
        for note, call in zip(notes, calls, strict=True):
            await submit(js, namespace, "notes", note)
            await submit(js, namespace, "calls", call)
        admitted = {"notes": 0, "calls": 0}
        refused: dict[str, set[str]] = {"notes": set(), "calls": set()}
        deciders: set[str] = set()
        for _ in range(len(notes) + len(calls)):
            decision = await decisions.next(timeout=30)
            deciders.add(decision.decided_by)
            if decision.allowed:
                admitted[decision.sender] += 1
            else:
                refused[decision.sender].add(str(decision.code))
        elapsed_min = (time.monotonic() - started) / 60
        # The token bucket starts full (one minute's worth) and refills while the test runs.
        assert rate <= admitted["notes"] <= rate + rate * elapsed_min + 1
        assert refused["notes"] == {ErrorCode.RATE_LIMITED}
        # No call is ever answered, so exactly the concurrency limit gets through.
        assert admitted["calls"] == concurrent
        assert refused["calls"] == {ErrorCode.RATE_LIMITED}
        assert await decisions_left(decisions) == 0
        assert deciders == {f"gate/{gate.pid}" for gate in gates}  # both replicas took part
    finally:
        for gate in gates:
            gate.close()


async def test_two_replicas_spending_leased_rate_tokens_stay_within_the_bucket(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    """A rate large enough to lease (1280 a minute: leases of 20 tokens) under a burst of 1500:
    the replicas spend leased tokens without a round trip each, and together still admit no
    more than the bucket holds plus its refill; a lease that cannot cover a batch is given
    back, so at most the two replicas' last leases go unspent. Contention on the one hot
    counter is decided again inside the batch, so no message is dead-lettered for it."""
    js = nc.jetstream()
    signer = Signer.create(tmp_path)
    rate, lease = 1280, lease_size(1280)
    bundle = make_bundle(
        notes={
            "start_traces": True,
            "speaks_for_person": True,
            "allowed_targets": ("sink",),
            "rate_per_minute": rate,
        }
    )
    await publish_bundle(js, namespace, signer.sign(bundle))
    decisions = await Decisions(js, namespace).open()
    notes = [_note() for _ in range(1500)]
    started = time.monotonic()
    for note in notes:
        await submit(js, namespace, "notes", note)
    gates = [
        start_gate(
            nats_server.url,
            namespace,
            signer,
            _EVERY_REFUSAL_RECORDED,
            ack_wait_s="5",
            fetch_batch="16",
        )
        for _ in range(2)
    ]
    try:
        for gate in gates:
            await gate.wait_line(READY)
        admitted, deciders = 0, set()
        for _ in notes:
            decision = await decisions.next(timeout=30)
            deciders.add(decision.decided_by)
            admitted += decision.allowed
        elapsed_min = (time.monotonic() - started) / 60
        assert rate - 2 * lease <= admitted <= rate + rate * elapsed_min + 1
        assert deciders == {f"gate/{gate.pid}" for gate in gates}
    finally:
        for gate in gates:
            gate.close()


async def decisions_left(decisions: Decisions) -> int:
    try:
        await decisions.next(timeout=0.5)
    except TimeoutError:
        return 0
    return 1


def _versioned(bundle: PolicyBundle, version: int, **changes: object) -> PolicyBundle:
    return structs.replace(bundle, version=version, **changes)


async def test_bad_bundles_are_refused_and_traffic_goes_on_under_the_last_good_one(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    js = nc.jetstream()
    signer = Signer.create(tmp_path)
    stranger = Signer.create(tmp_path, "stranger")
    good = make_bundle(
        2, notes={"start_traces": True, "speaks_for_person": True, "allowed_targets": ("sink",)}
    )
    await publish_bundle(js, namespace, signer.sign(good))
    decisions = await Decisions(js, namespace).open()
    gate = start_gate(nats_server.url, namespace, signer, ack_wait_s="5")

    async def traffic_decided_by(version: int, *, allowed: bool = True) -> None:
        note = _note()
        await submit(js, namespace, "notes", note)
        decision = await decisions.until(note.id)
        assert (decision.allowed, decision.bundle_version) == (allowed, version), decision

    try:
        await gate.wait_line(READY)
        start = len(gate.lines)
        await traffic_decided_by(2)
        signed = bytearray(signer.sign(_versioned(good, 3)))
        signed[len(signed) // 2] ^= 0x01  # one flipped bit inside the signed payload
        refusals = [
            ("tampered", bytes(signed)),
            ("expired", signer.sign(_versioned(good, 3, expires_at=utc_now()))),
            ("rollback", signer.sign(_versioned(good, 1))),
            ("unknown_key", stranger.sign(_versioned(good, 3))),
            ("tenant", signer.sign(_versioned(good, 3, tenant_id="other"))),
        ]
        for reason, bad in refusals:
            await publish_bundle(js, namespace, bad)
            index, line = await gate.wait_line("policy bundle refused", start=start)
            start = index + 1
            if reason != "tampered":  # a flipped bit shows as a bad signature or bad base64
                assert f'"reason":"{reason}"' in line, line
            await traffic_decided_by(2)
        # A good new version is picked up without a restart: it no longer allows `sink`.
        closed = _versioned(good, 3, profiles={})
        await publish_bundle(js, namespace, signer.sign(closed))
        await gate.wait_line('"version":3', start=start)
        await traffic_decided_by(3, allowed=False)
        # A restarted gate remembers it trusted version 3: version 2 is now a rollback, and
        # it goes back through the history to the newest bundle it can trust, version 3.
        gate.close()
        await publish_bundle(js, namespace, signer.sign(good))
        gate = start_gate(nats_server.url, namespace, signer, ack_wait_s="5")
        await gate.wait_line(READY)
        _, line = await gate.wait_line("policy bundle refused")
        assert '"reason":"rollback"' in line
        await traffic_decided_by(3, allowed=False)
    finally:
        gate.close()


async def test_the_gate_fails_closed_when_its_bundle_expires(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    js = nc.jetstream()
    signer = Signer.create(tmp_path)
    notes = {
        "start_traces": True,
        "speaks_for_person": True,
        "allowed_targets": ("sink",),
        "rate_per_minute": 1_000_000,
        "trace_message_budget": 1_000_000,
    }
    await publish_bundle(js, namespace, signer.sign(make_bundle(1, notes=notes)))
    decisions = await Decisions(js, namespace).open()
    gate = start_gate(nats_server.url, namespace, signer, ack_wait_s="5")
    try:
        await gate.wait_line(READY)
        # Signed once the gate is up, so a slow start cannot spend its short life.
        short = make_bundle(2, days=4 / 86_400, notes=notes)
        await publish_bundle(js, namespace, signer.sign(short))
        note = _note()
        await submit(js, namespace, "notes", note)
        assert (await decisions.until(note.id)).allowed
        # Each note waits for its own decision: the first refused one shows the expiry.
        give_up = time.monotonic() + 20
        while time.monotonic() < give_up:
            note = _note()
            await submit(js, namespace, "notes", note)
            decision = await decisions.until(note.id)
            if not decision.allowed:
                break
        assert decision.code == ErrorCode.POLICY_EXPIRED
        assert decision.bundle_version == 2
    finally:
        gate.close()
