"""Issue 13, finding 2: ids chosen by the sender must not be trusted as fresh keys.

The gate keys an envelope's position (and a root's trace) by the envelope's own id, which the
sender chooses, and JetStream de-duplicates only on `Nats-Msg-Id`, another header the sender
chooses, within the duplicate window. The attacker here is a raw nats-py client holding `gpt`'s
own credentials under the least-privilege config, against the real gate and router processes.
It re-submits an envelope under a fresh `Nats-Msg-Id` (what a replay after the 120 s window
amounts to, without waiting for it), and submits a new envelope carrying another envelope's id.

`gpt` has no agent process: the attacker is `gpt`, reading its deliveries through `gpt`'s own
durable. The test drives the call to it with the router's credentials (a trusted actor's
traffic, not the attack), and observes with the credentials of those who may look: decisions
as an operator follows them, the gate's records as the gate reads them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from msgspec import json
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError

from actors.gate._decide import Allow, Ledger, Paid, decide
from actors.gate._plan import Route, Submission, plan
from actors.gate._records import (
    Position,
    RateBucket,
    TraceState,
    position_key,
    rate_key,
    trace_key,
)
from bus import BUCKETS, CAUSATION_ID, MSG_ID, provision
from schemas import (
    AgentCall,
    AgentResponse,
    AnyEnvelope,
    Decision,
    Error,
    ErrorCode,
    Namespace,
    Reply,
    decode_envelope,
    encode,
    new_id,
    utc_now,
)
from tests.support.gatesim import NOW_MS, bundle, human
from tests.support.lockdown import LockedDown
from tests.support.system import running_locked_system


@dataclass
class Attack:
    """The connections a test plays with, each as the principal whose credentials it holds."""

    locked: LockedDown
    router: JetStreamContext
    gpt: JetStreamContext
    gpt_inbox: JetStreamContext.PullSubscription
    decisions: JetStreamContext.PushSubscription
    gate: JetStreamContext

    async def call_gpt(self) -> AgentCall:
        """The router starts a trace with a call to gpt; gpt (the attacker) receives it."""
        call = AgentCall(
            id=new_id(), created_at=utc_now(), target="gpt", call_id=new_id(), goal="a poem"
        )
        ns = self.locked.ns
        await self.router.publish(ns.submit("router"), encode(call), headers={MSG_ID: call.id})
        received = await self.next_for_gpt()
        assert isinstance(received, AgentCall) and received.id == call.id, received
        return call

    async def next_for_gpt(self) -> AnyEnvelope:
        (msg,) = await self.gpt_inbox.fetch(1, timeout=20)
        await msg.ack_sync()
        return decode_envelope(msg.data)

    async def submit_as_gpt(self, envelope: AnyEnvelope, cause: str, msg_id: str) -> None:
        """Publish on gpt's own submit subject: the only one the broker lets it use."""
        headers = {MSG_ID: msg_id, CAUSATION_ID: cause} if cause else {MSG_ID: msg_id}
        await self.gpt.publish(self.locked.ns.submit("gpt"), encode(envelope), headers=headers)

    async def sentinel(self) -> tuple[list[Decision], list[AnyEnvelope]]:
        """Submit an envelope the gate refuses (gpt may not start a trace), and return every
        decision about gpt and everything delivered to gpt up to its refusal: the gate decides
        a submit subject's messages in order, so whatever came before is decided by then."""
        probe = AgentCall(
            id=new_id(), created_at=utc_now(), target="router", call_id=new_id(), goal="probe"
        )
        await self.submit_as_gpt(probe, "", probe.id)
        decisions: list[Decision] = []
        while not decisions or decisions[-1].envelope_id != probe.id:
            msg = await self.decisions.next_msg(timeout=20)
            decision = decode_envelope(msg.data)
            assert isinstance(decision, Decision)
            decisions.append(decision)
        delivered: list[AnyEnvelope] = []
        while not delivered or getattr(delivered[-1], "cause_id", None) != probe.id:
            delivered.append(await self.next_for_gpt())
        return decisions[:-1], delivered[:-1]

    async def record(self, key: str) -> tuple[bytes, int]:
        """One of the gate's records, read as the gate reads it: (value, revision)."""
        entry = await (await self.gate.key_value(self.locked.ns.bucket("traces"))).get(key)
        return entry.value or b"", int(entry.revision or 0)


@asynccontextmanager
async def attack(locked: LockedDown, keys: Path) -> AsyncIterator[Attack]:
    ns = locked.ns
    conns: list[NATS] = []
    async with running_locked_system(locked, keys, agents={}):
        try:
            names = ("router", "gpt", "provisioner", "gate")
            conns.extend([await locked.connect(a) for a in names])
            router, gpt, admin, gate = (
                locked.js(nc, a) for nc, a in zip(conns, names, strict=True)
            )
            inbox = await gpt.pull_subscribe_bind(durable="gpt", stream=ns.stream("deliver"))
            # The whole timeline is an operator's to read (a person sees only its own).
            decisions = await admin.subscribe(ns.decisions("gpt"), ordered_consumer=True)
            yield Attack(locked, router, gpt, inbox, decisions, gate)
        finally:
            for nc in conns:
                await nc.close()


def answer(call: AgentCall, envelope_id: str | None = None) -> AgentResponse:
    return AgentResponse(
        id=envelope_id or new_id(),
        created_at=utc_now(),
        sender="gpt",
        text="tides",
        call_id=call.call_id,
        reply=Reply(message="tides"),
    )


def about(decisions: list[Decision], envelope_id: str) -> list[Decision]:
    return [d for d in decisions if d.envelope_id == envelope_id]


async def test_a_decided_envelope_submitted_again_is_refused_as_a_duplicate(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    async with attack(locked_down, tmp_path / "keys") as a:
        call = await a.call_gpt()
        reply = answer(call)
        await a.submit_as_gpt(reply, call.id, reply.id)
        decisions, _ = await a.sentinel()
        assert [d.allowed for d in about(decisions, reply.id)] == [True]

        # The same envelope, byte for byte, under a Nats-Msg-Id JetStream has not seen.
        await a.submit_as_gpt(reply, call.id, new_id())
        decisions, delivered = await a.sentinel()
        refused = about(decisions, reply.id)
        assert [(d.allowed, d.code) for d in refused] == [(False, ErrorCode.DUPLICATE_ENVELOPE)]
        errors = [e for e in delivered if isinstance(e, Error) and e.cause_id == reply.id]
        assert [e.code for e in errors] == [ErrorCode.DUPLICATE_ENVELOPE], delivered
        assert "decides each id once" in errors[0].message

        # A third time is refused again, with a decision and an error of its own (not
        # swallowed by JetStream as a duplicate of the second refusal's).
        await a.submit_as_gpt(reply, call.id, new_id())
        decisions, delivered = await a.sentinel()
        assert [d.code for d in about(decisions, reply.id)] == [ErrorCode.DUPLICATE_ENVELOPE]
        assert [getattr(e, "cause_id", None) for e in delivered] == [reply.id]


async def test_a_new_envelope_reusing_another_envelopes_id_cannot_overwrite_its_position(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    async with attack(locked_down, tmp_path / "keys") as a:
        call = await a.call_gpt()
        position = position_key(call.id)
        before = await a.record(position)
        recorded = json.decode(before[0], type=Position)
        assert (recorded.sender, recorded.target) == ("router", "gpt")
        # An answer to the call that carries the call's own id: admitted, its position
        # would be written over the call's and the real answer would find its cause foreign.
        forged = answer(call, envelope_id=call.id)
        await a.submit_as_gpt(forged, call.id, new_id())
        decisions, _ = await a.sentinel()
        assert [(d.allowed, d.code) for d in about(decisions, call.id)] == [
            (False, ErrorCode.DUPLICATE_ENVELOPE)
        ]
        assert await a.record(position) == before

        # The call's real answer still routes: its cause is still the call delivered to gpt.
        reply = answer(call)
        await a.submit_as_gpt(reply, call.id, reply.id)
        decisions, _ = await a.sentinel()
        assert [(d.allowed, d.target) for d in about(decisions, reply.id)] == [(True, "router")]


async def test_an_envelope_submitted_again_is_not_charged_again(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    async with attack(locked_down, tmp_path / "keys") as a:
        call = await a.call_gpt()
        reply = answer(call)
        await a.submit_as_gpt(reply, call.id, reply.id)
        await a.sentinel()
        trace_value, _ = await a.record(trace_key(call.id))
        # An answer is charged with its call (issue 21): gpt -> router spends no token.
        with pytest.raises(KeyNotFoundError):
            await a.record(rate_key("gpt", "router"))
        counted = json.decode(trace_value, type=TraceState).count
        assert counted == 2  # the call and its answer

        for _ in range(3):
            await a.submit_as_gpt(reply, call.id, new_id())
        await a.sentinel()
        after = json.decode((await a.record(trace_key(call.id)))[0], type=TraceState)
        assert after.count == counted
        with pytest.raises(KeyNotFoundError):
            await a.record(rate_key("gpt", "router"))


def test_an_envelope_decided_again_after_a_lost_compare_and_set_is_charged_once() -> None:
    """Round one admits the envelope and commits its trace count and rate token, but another
    of its counters lost its compare-and-set; round two decides it again against the
    committed values and must charge neither again."""
    policy = bundle(
        cli={
            "start_traces": True,
            "speaks_for_person": True,
            "allowed_targets": ("router",),
            "rate_per_minute": 2,
        },
        router={},
    )
    route = plan(Submission(human(), "cli", "", {}, NOW_MS), None, policy, "")
    assert isinstance(route, Route)
    keys = trace_key(route.position.trace_id), rate_key("cli", "router")
    ledger = Ledger(dict.fromkeys(keys))
    assert isinstance(decide(route, ledger, policy), Allow)
    committed = dict(ledger.values)
    again = Ledger(dict(committed))
    assert isinstance(decide(route, again, policy, Paid(frozenset(keys))), Allow)
    trace = again.values[keys[0]]
    bucket = again.values[keys[1]]
    assert isinstance(trace, TraceState) and trace.count == 1
    assert isinstance(bucket, RateBucket) and bucket.tokens == 1.0


async def test_claims_outlive_positions_also_in_a_bucket_an_older_release_made(
    nc: NATS, namespace: Namespace
) -> None:
    """Were a claim to expire before the position it protects, a replay of its id would be
    admitted again and overwrite that position: provisioning gives a bucket made with the old
    one-day TTL the new one."""
    ttl = {spec.name: spec.ttl_s for spec in BUCKETS}
    assert (ttl["idempotency"] or 0) > (ttl["traces"] or 0) > 0
    js = nc.jetstream()
    await provision(js, namespace)
    stream = f"KV_{namespace.bucket('idempotency')}"
    config = (await js.stream_info(stream)).config
    config.max_age = 24 * 3600.0  # as bus/_provision.py made it before
    await js.update_stream(config)
    await provision(js, namespace)
    assert (await js.stream_info(stream)).config.max_age == ttl["idempotency"]
