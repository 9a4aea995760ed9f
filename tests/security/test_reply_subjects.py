"""Attack: a principal has the broker write where it may not, by every route the broker offers.

nats-server checks what a client publishes, but not the reply subject of a request the server
answers itself: a JetStream API answer, a publish acknowledgement, an ack's confirmation, and
the messages a pull request asks for all go wherever the requester said, into any stream that
captures that subject. The attacker is a raw nats-py client holding one principal's own
credentials under the least-privilege config (an agent, a person, each operator role); it aims
every request it can make (with either API prefix) at every protected subject: every other
principal's submit and deliver subjects, the audit trail, the decisions, the timelines, dead
letters, timers, and a key in every bucket. It also asks for a push consumer that would
republish its deliveries onto claude's submit subject.

Nothing may be stored anywhere but on subjects the attacker may publish on itself. On a
single-account config (every principal beside the streams) the same requests stored the
server's JSON on `parley.submit.claude`, in the audit stream and on the policy floor's key.
"""

from __future__ import annotations

import json

import pytest
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from bus import AGENT_BUCKETS, ARTIFACTS, BUCKETS, MSG_ID, SENDER, STREAM_FAMILIES, read_history
from schemas import AgentCall, Namespace, encode, new_id, utc_now
from tests.support.lockdown import LockedDown
from tools.natsconf._permissions import (
    ARTIFACT_READER,
    IMPORTED_JS_API,
    OPERATOR_ROLES,
    POLICY_SIGNER,
    permissions_for,
)

_PRINCIPALS = ("gpt", "claude", "cli", "gate", "router", "auditor", "provisioner", *OPERATOR_ROLES)
_ATTACKERS = ("gpt", "cli", *OPERATOR_ROLES)


def _matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: `*` one token, `>` the rest."""
    want, have = pattern.split("."), subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or token not in ("*", have[i]):
            return False
    return len(have) == len(want)


def _protected(ns: Namespace, attacker: str) -> list[str]:
    """Every subject `attacker` may not publish on that a stream stores."""
    others = [p for p in _PRINCIPALS if p != attacker]
    targets = [ns.submit(a) for a in others] + [ns.deliver(a) for a in _PRINCIPALS]
    targets += [ns.audit("demo", "claude"), ns.audit("demo", "gpt"), ns.decisions("claude")]
    targets += [ns.decisions("gpt"), ns.events("cli", "s1"), ns.dead("claude"), ns.timers("router")]
    targets += [f"$KV.{ns.bucket(spec.name)}.attack" for spec in BUCKETS]
    targets += [f"$KV.{bucket}.attack" for bucket in _agent_buckets(ns)]
    targets += [ns.agent_timers(a) for a in ("gpt", "claude")]  # each agent's own reminders
    targets.append(f"$KV.{ns.bucket('policy')}.trusted.version")
    targets.append(f"$KV.{ns.bucket('policy')}.bundle")
    targets.append(f"$KV.{ns.bucket('registry')}.heartbeat.claude")
    targets.append(f"$KV.{ns.bucket('idempotency')}.handling.claude.x")
    targets.append(f"$KV.{ns.bucket('idempotency')}.id.attack")
    artifacts = ns.bucket(ARTIFACTS)  # the tool runtime's to write alone
    targets += [f"$O.{artifacts}.C.attack", f"$O.{artifacts}.M.YXR0YWNr"]
    return [t for t in targets if not any(_matches(g, t) for g in _grants(ns, attacker))]


def _agent_buckets(ns: Namespace) -> list[str]:
    """The agents' own buckets (their waits), each only its agent's to write."""
    return [ns.agent_bucket(spec.name, a) for a in ("gpt", "claude") for spec in AGENT_BUCKETS]


def _grants(ns: Namespace, principal: str) -> tuple[str, ...]:
    return permissions_for(principal, ns).publish_allow


def _routes(ns: Namespace, attacker: str) -> list[tuple[str, bytes]]:
    """Every subject `attacker` may publish on (its grants, under its account's API prefix and
    the plain one), with a body that makes the server answer."""
    grants = [s for s in _grants(ns, attacker) if not s.startswith("_INBOX")]
    routes: list[tuple[str, bytes]] = []
    for subject in grants:
        plain = subject.replace(".>", ".1.1.1.1.1.1")
        body = b""
        if ".MSG.NEXT." in subject:
            body = b'{"batch": 4, "expires": 1000000000}'
        elif ".DIRECT.GET." in subject:
            body = b'{"seq": 1, "batch": 4}'
        routes.append((plain, body))
        if plain.startswith("$JS.API."):
            routes.append((IMPORTED_JS_API + plain[len("$JS.API") :], body))
    deliver = ns.stream("deliver")
    push = {
        "stream_name": deliver,
        "config": {
            "durable_name": f"{attacker}-push",
            "deliver_subject": ns.submit("claude"),
            "filter_subject": ns.deliver(attacker),
            "ack_policy": "explicit",
        },
    }
    for api in ("$JS.API", IMPORTED_JS_API):
        create = f"{api}.CONSUMER.CREATE.{deliver}.{attacker}-push"
        routes.append((create, json.dumps(push).encode()))
        routes.append((f"{api}.STREAM.INFO.{deliver}", b""))
        routes.append((f"{api}.DIRECT.GET.{ns.stream('audit')}", b'{"seq": 1, "batch": 4}'))
    return routes


async def _barrier(locked: LockedDown, nc: NATS, attacker: str) -> None:
    """Return once the server answered a request the attacker may make, after all of its
    requests above were handled (the same queues serve them)."""
    ns, js = locked.ns, locked.js(nc, attacker)
    await nc.flush()
    if attacker in ("gpt", "cli"):
        await js.consumer_info(ns.stream("deliver"), attacker)
    elif attacker == POLICY_SIGNER:
        await js.stream_info(f"KV_{ns.bucket('policy')}")
    elif attacker == ARTIFACT_READER:  # the one stream it may read
        assert [m async for m in read_history(js, f"OBJ_{ns.bucket(ARTIFACTS)}")] == []
    else:
        assert [m async for m in read_history(js, ns.stream("audit"))] == []


async def _counts(js: JetStreamContext, ns: Namespace) -> dict[str, int]:
    """Messages stored per subject, over every stream and bucket."""
    streams = [ns.stream(f) for f in STREAM_FAMILIES] + [f"KV_{ns.bucket(b.name)}" for b in BUCKETS]
    streams += [f"KV_{bucket}" for bucket in _agent_buckets(ns)]
    streams += [ns.agent_stream("timers", a) for a in ("gpt", "claude")]
    streams.append(f"OBJ_{ns.bucket(ARTIFACTS)}")
    counts: dict[str, int] = {}
    for stream in streams:
        info = await js.stream_info(stream, subjects_filter=">")
        counts.update(info.state.subjects or {})
        counts[f"last_seq:{stream}"] = info.state.last_seq
    return counts


@pytest.mark.parametrize("attacker", _ATTACKERS)
async def test_no_reply_subject_makes_the_broker_store_on_a_protected_subject(
    locked_down: LockedDown, attacker: str
) -> None:
    locked, ns = locked_down, locked_down.ns
    await locked.provision()
    admin: NATS = await locked.connect("provisioner")
    gate: NATS = await locked.connect("gate")
    evil: NATS = await locked.connect(attacker)
    try:
        for _ in range(8):  # deliveries a pull request could send elsewhere
            call = AgentCall(
                id=new_id(), created_at=utc_now(), target=attacker, call_id=new_id(), goal="g"
            )
            await gate.jetstream().publish(
                ns.deliver(attacker), encode(call), headers={MSG_ID: call.id, SENDER: "router"}
            )
        admin_js = admin.jetstream()
        before = await _counts(admin_js, ns)
        targets, routes = _protected(ns, attacker), _routes(ns, attacker)
        for subject, body in routes:
            for target in targets:
                await evil.publish(subject, body, reply=target)
        await _barrier(locked, evil, attacker)
        after = await _counts(admin_js, ns)
        stored = {
            subject
            for subject in after
            if not subject.startswith("last_seq:") and after[subject] > before.get(subject, 0)
        }
        foreign = {s for s in stored if not any(_matches(g, s) for g in _grants(ns, attacker))}
        assert not foreign, f"stored on protected subjects: {foreign}"
        untouched = [ns.stream(f) for f in ("events", "audit")]
        if not any(_matches(g, ns.timers(attacker)) for g in _grants(ns, attacker)):
            untouched.append(ns.stream("timers"))  # reminders to itself are its own to write
        untouched += [f"KV_{ns.bucket(b)}" for b in ("traces", "sessions")]
        for stream in untouched:
            key = f"last_seq:{stream}"
            assert after[key] == before[key], f"{stream} grew"
        assert len(routes) * len(targets) > 100  # the attack really was broad
    finally:
        for nc in (evil, gate, admin):
            await nc.close()
