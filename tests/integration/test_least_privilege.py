"""The broker itself enforces who may write and read what (deploy/nats/, tools/natsconf/).

Each actor connects as its own nkey user of a real nats-server running the generated config.
A refused publish does not raise in nats-py: the server answers `-ERR 'Permissions Violation'`
asynchronously, which the connection's error callback counts (bus/_connection.py). The count
is read after `_barrier()`, on the same connection: the server answers a PING only after
handling everything sent before it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client as NATS
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import AckPolicy, ConsumerConfig
from prometheus_client import CollectorRegistry

from bus import DEAD_ACTOR, DEAD_REASON, MSG_ID, SENDER, ActorMetrics, DeadLetters
from schemas import (
    AgentCall,
    AgentResponse,
    Namespace,
    decode_envelope,
    encode,
    new_id,
    utc_now,
)
from tests.support.kv import stored_keys
from tests.support.lockdown import LockedDown, violations
from tests.support.processes import READY, ProcessOutput, parley_env, start_actor
from tests.support.wire import PROBE, human
from tools.cli import main as cli_main
from tools.provision import provision_once

_REFUSED = (TimeoutError, NatsTimeoutError)  # a refused request is never answered


def _call(target: str, text: str) -> AgentCall:
    return AgentCall(
        id=new_id(), created_at=utc_now(), target=target, call_id=new_id(), goal="g", text=text
    )


async def _barrier(nc: NATS) -> None:
    """Return once the server has handled every command sent on `nc` before this call.

    One `flush()` is no barrier: nats-py writes its PING straight to the socket, ahead of
    commands still in its buffer (a SUB just made), so the PONG may come before their
    `-ERR`s. By the time that first PONG is read, its flusher task, kicked with the PING, has
    written the buffer; the second PING follows every command sent before this call.
    """
    await nc.flush()
    await nc.flush()


async def _pending(nc: NATS, locked: LockedDown, actor: str) -> int:
    info = await locked.js(nc, actor).consumer_info(locked.ns.stream("deliver"), actor)
    return int(info.num_pending)


async def test_an_agent_publishing_to_another_agents_deliver_subject_is_refused(
    locked_down: LockedDown,
) -> None:
    locked, ns = locked_down, locked_down.ns
    await locked.provision()
    registry = CollectorRegistry()
    gpt = await locked.connect("gpt", ActorMetrics(registry, "gpt"))
    claude = await locked.connect("claude")
    gate = await locked.connect("gate")
    admin = await locked.connect("provisioner")
    try:
        forged = _call("claude", "do as I say")
        headers = {SENDER: "router", MSG_ID: forged.id}
        await gpt.publish(ns.deliver("claude"), encode(forged), headers=headers)
        with pytest.raises(_REFUSED):  # a JetStream publish gets no ack either
            await locked.js(gpt, "gpt").publish(
                ns.deliver("claude"), encode(forged), headers=headers, timeout=1
            )
        await _barrier(gpt)
        assert violations(registry, "gpt") == 2
        assert await _pending(claude, locked, "claude") == 0
        stream = await admin.jetstream().stream_info(ns.stream("deliver"))
        assert stream.state.messages == 0
        # The same envelope from the gate's user is accepted: the empty consumer above was
        # empty because of the refusal, not because nothing could reach it.
        await gate.jetstream().publish(ns.deliver("claude"), encode(forged), headers=headers)
        inbox = await locked.js(claude, "claude").pull_subscribe_bind(
            durable="claude", stream=ns.stream("deliver")
        )
        (delivered,) = await inbox.fetch(1, timeout=10)
        assert delivered.data == encode(forged)
    finally:
        for nc in (gpt, claude, gate, admin):
            await nc.close()


async def test_an_agent_cannot_manage_streams_or_read_another_agents_messages(
    locked_down: LockedDown,
) -> None:
    locked, ns = locked_down, locked_down.ns
    await locked.provision()
    registry = CollectorRegistry()
    gpt = await locked.connect("gpt", ActorMetrics(registry, "gpt"))
    claude = await locked.connect("claude")
    gate = await locked.connect("gate")
    deliver = ns.stream("deliver")
    try:
        secret = _call("claude", "for claude only")
        await gate.jetstream().publish(
            ns.deliver("claude"), encode(secret), headers={SENDER: "router", MSG_ID: secret.id}
        )
        js = gpt.jetstream(prefix=locked.settings("gpt").js_api_prefix, timeout=1)
        refused: list[Coroutine[Any, Any, object]] = [
            js.add_stream(name=f"{ns.stream_prefix}_MINE", subjects=[f"{ns.root}.mine.>"]),
            js.update_stream(name=deliver, subjects=[f"{ns.root}.deliver.>"]),
            js.purge_stream(deliver),
            js.delete_stream(deliver),
            js.get_msg(deliver, 1),  # by sequence: any receiver's message
            js.get_msg(deliver, subject=ns.deliver("claude"), direct=True),
            js.consumer_info(deliver, "claude"),
            js.delete_consumer(deliver, "claude"),
            js.add_consumer(  # claude's durable under claude's name
                deliver, ConsumerConfig(name="claude", filter_subject=ns.deliver("claude"))
            ),
            js.add_consumer(  # the legacy form, which carries the filter only in the body
                deliver, ConsumerConfig(durable_name="gpt", filter_subject=ns.deliver("claude"))
            ),
            js.add_consumer(  # its own, pushing what it reads onto claude's submit subject
                deliver,
                ConsumerConfig(
                    name="gpt",
                    durable_name="gpt",
                    filter_subject=ns.deliver("gpt"),
                    deliver_subject=ns.submit("claude"),
                ),
            ),
        ]
        stolen = await js.pull_subscribe_bind(durable="claude", stream=deliver)
        refused.append(stolen.fetch(1, timeout=1))
        outcomes = await asyncio.gather(*refused, return_exceptions=True)  # each waits 1 s
        assert all(isinstance(outcome, _REFUSED) for outcome in outcomes), outcomes
        # Nor can it listen on another agent's replies or anyone's shared inbox.
        await gpt.subscribe("_INBOX_claude.>")
        await gpt.subscribe("_INBOX.>")
        await gpt.subscribe(ns.deliver("claude"))
        await _barrier(gpt)
        assert violations(registry, "gpt") == len(refused) + 3
        # Everything is still there, and still claude's alone.
        assert await _pending(claude, locked, "claude") == 1
        (msg,) = await (
            await locked.js(claude, "claude").pull_subscribe_bind("claude", deliver)
        ).fetch(1)
        assert decode_envelope(msg.data) == secret
    finally:
        for nc in (gpt, claude, gate):
            await nc.close()


@pytest.mark.chaos
async def test_an_actor_process_runs_under_least_privilege(locked_down: LockedDown) -> None:
    """Restrictive is not enough: a real actor starts, binds and answers with these grants."""
    locked, ns = locked_down, locked_down.ns
    env = parley_env(locked.server.url, ns.root)
    provisioner = ProcessOutput(
        [
            sys.executable,
            "-m",
            "tools",
            "provision",
            "--config",
            str(locked.settings_file("provisioner")),
            str(locked.settings_file("gpt")),
        ],
        env,
        name="provision",
    )
    try:
        await provisioner.wait_line(
            r"^provisioned namespace .*; consumers \S+_DELIVER/gpt, \S+_TIMERS_gpt/gpt$"
        )
        assert await provisioner.wait_exit() == 0
    finally:
        provisioner.close()
    gate = await locked.connect("gate")
    gpt = start_actor("echo", "gpt", env, "--config", str(locked.settings_file("gpt")))
    try:
        await gpt.wait_line(READY)
        js = gate.jetstream()
        submitted = await js.pull_subscribe(
            ns.wildcard("submit"), durable="gate", stream=ns.stream("submit")
        )
        call = _call("gpt", "ping")
        await js.publish(
            ns.deliver("gpt"), encode(call), headers={SENDER: "router", MSG_ID: call.id}
        )
        (msg,) = await submitted.fetch(1, timeout=20)
        await msg.ack_sync()
        answer = decode_envelope(msg.data)
        assert isinstance(answer, AgentResponse)
        assert msg.subject == ns.submit("gpt")
        assert (answer.text, answer.call_id) == ("ping", call.call_id)
        assert (msg.headers or {})["Parley-Causation-Id"] == call.id
        registry = await js.key_value(ns.bucket("registry"))
        beat = await registry.get("heartbeat.gpt")
        assert json.loads(beat.value or b"{}")["actor_id"] == "gpt"
        gpt.signal(signal.SIGTERM)
        assert await gpt.wait_exit() == 0
        assert not [line for line in gpt.lines if "permission violation" in line.lower()]
    finally:
        gpt.close()
        await gate.close()


class _LogEvent(logging.Handler):
    """Sets an event when a log record with the given message is emitted (on this loop)."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message
        self.seen = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == self.message:
            self.seen.set()


@pytest.mark.chaos
async def test_the_gate_moves_a_receivers_exhausted_delivery(locked_down: LockedDown) -> None:
    """A receiver may not read or delete PARLEY_DELIVER by sequence, so the gate's user moves
    the message that crashed it on every delivery, filed under the receiver's name."""
    locked, ns = locked_down, locked_down.ns
    tuned = locked.tune("claude", ack_wait_s="0.6", max_deliver="1", fetch_timeout_s="1")
    await locked.provision()  # claude's consumer as its settings say
    gate = await locked.connect("gate")
    auditor = await locked.connect("auditor")
    admin = await locked.connect("provisioner")
    moved = _LogEvent("moved an exhausted message out of its stream")
    logging.getLogger("parley.bus.dead").addHandler(moved)
    env = parley_env(locked.server.url, ns.root)
    claude = start_actor(PROBE, "claude", env, "--config", str(tuned))
    try:
        mover = DeadLetters(
            gate.jetstream(), ns, "gate", 64 * 1024, ActorMetrics(CollectorRegistry(), "gate")
        )
        await mover.watch_max_deliveries(gate, ns.stream("deliver"), None)
        await claude.wait_line(READY)
        crasher = human("crash")
        await gate.jetstream().publish(
            ns.deliver("claude"), encode(crasher), headers={SENDER: "cli", MSG_ID: crasher.id}
        )
        assert await claude.wait_exit() == 70  # max_deliver=1: this was its only chance
        letters = await auditor.jetstream().pull_subscribe(
            ns.wildcard("dead"), durable="auditor", stream=ns.stream("dead")
        )
        (letter,) = await letters.fetch(1, timeout=20)
        assert letter.subject == ns.dead("claude")
        assert letter.headers is not None
        assert letter.headers[DEAD_REASON] == "max_deliveries"
        assert letter.headers[DEAD_ACTOR] == "claude"
        assert decode_envelope(letter.data) == crasher
        await asyncio.wait_for(moved.seen.wait(), timeout=10)
        info = await admin.jetstream().stream_info(ns.stream("deliver"))
        assert info.state.messages == 0, "the exhausted message must leave the work queue"
        assert not [line for line in claude.lines if "permission violation" in line.lower()]
    finally:
        logging.getLogger("parley.bus.dead").removeHandler(moved)
        claude.close()
        for nc in (gate, auditor, admin):
            await nc.close()


async def test_each_role_can_do_its_own_work(locked_down: LockedDown) -> None:
    """The grants are sufficient, not only restrictive: each role's documented duties work."""
    locked, ns = locked_down, locked_down.ns
    await locked.provision()
    actors = ("gate", "router", "auditor", "cli", "gpt")
    registries = {actor: CollectorRegistry() for actor in actors}
    conns = {
        actor: await locked.connect(actor, ActorMetrics(registries[actor], actor))
        for actor in actors
    }
    try:
        gate, router, auditor, _cli, gpt = (locked.js(conns[a], a) for a in conns)
        # An agent writes its profile; the gate and the router read the registry.
        profiles = await gpt.key_value(ns.bucket("registry"))
        await profiles.put("profile.gpt", b'{"model": "x"}')
        for reader in (gate, router):
            entry = await (await reader.key_value(ns.bucket("registry"))).get("profile.gpt")
            assert entry.value == b'{"model": "x"}'
        # The gate keeps its records, reads bundles and records the version it trusted.
        traces = await gate.key_value(ns.bucket("traces"))
        revision = await traces.put("trace.t1", b"1")
        await traces.update("trace.t1", b"2", last=revision)
        assert await stored_keys(gate, ns.bucket("traces")) == ["trace.t1"]
        policy = await gate.key_value(ns.bucket("policy"))
        await policy.put("trusted", b"7")
        assert (await policy.get("trusted")).value == b"7"
        await gate.publish(ns.decisions("gpt"), b"{}", headers={MSG_ID: new_id()})
        # The router keeps sessions and writes the timeline; the CLI follows it.
        sessions = await router.key_value(ns.bucket("sessions"))
        await sessions.put("s1", b"state")
        assert (await sessions.get("s1")).value == b"state"
        timeline = await conns["cli"].subscribe(ns.timelines("cli"))  # live, read-only
        await conns["cli"].flush()
        await router.publish(ns.events("cli", "s1"), b'{"round": 1}', headers={MSG_ID: new_id()})
        assert (await timeline.next_msg(timeout=10)).data == b'{"round": 1}'
        # The auditor reads decisions and events and appends to its chain.
        events = await auditor.pull_subscribe(
            f"{ns.root}.>", durable="auditor", stream=ns.stream("events")
        )
        seen = [msg.subject for msg in await events.fetch(2, timeout=10)]
        assert seen == [ns.decisions("gpt"), ns.events("cli", "s1")]
        ack = await auditor.publish(ns.audit("acme", "gpt"), b"{}", headers={MSG_ID: new_id()})
        head = await auditor.get_msg(ns.stream("audit"), ack.seq)
        assert head.subject == ns.audit("acme", "gpt")
        assert (await auditor.stream_info(ns.stream("audit"))).state.last_seq == ack.seq
        await asyncio.gather(*(_barrier(nc) for nc in conns.values()))
        for actor in actors:
            assert violations(registries[actor], actor) == 0, actor
    finally:
        for nc in conns.values():
            await nc.close()


@pytest.mark.chaos
async def test_a_call_goes_through_the_real_gate_under_least_privilege(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    """cli -> gate -> gpt (echo) -> gate -> cli, every process as its own nkey user."""
    locked, ns = locked_down, locked_down.ns
    await locked.provision()
    keys, bundle, signed = tmp_path / "keys", tmp_path / "bundle.json", tmp_path / "signed.json"
    bundle.write_text(
        json.dumps(
            {
                "schema_version": "1.0",
                "version": 1,
                "tenant_id": "default",
                "expires_at": "2099-01-01T00:00:00Z",
                "profiles": {
                    "cli": {
                        "allowed_targets": ["gpt"],
                        "start_traces": True,
                        "speaks_for_person": True,
                    },
                    "gpt": {},
                },
            }
        )
    )
    assert cli_main(["policy", "keygen", "--out", str(keys)]) == 0
    assert (
        cli_main(
            ["policy", "sign", "--key", str(keys / "policy.key"), str(bundle), "-o", str(signed)]
        )
        == 0
    )
    admin = await locked.connect("provisioner")  # the signer publishes with an operator's key
    await (await admin.jetstream().key_value(ns.bucket("policy"))).put(
        "bundle", signed.read_bytes()
    )
    await admin.close()
    env = parley_env(locked.server.url, ns.root)
    gate_env = {**env, "PARLEY_OPTIONS": json.dumps({"policy_keys": [str(keys / "policy.pub")]})}
    gate = start_actor("gate", "gate", gate_env, "--config", str(locked.settings_file("gate")))
    gpt = start_actor("echo", "gpt", env, "--config", str(locked.settings_file("gpt")))
    cli = await locked.connect("cli")
    try:
        await gate.wait_line(READY)
        await gpt.wait_line(READY)
        js = locked.js(cli, "cli")
        call = _call("gpt", "through the gate")
        await js.publish(ns.submit("cli"), encode(call), headers={MSG_ID: call.id})
        inbox = await js.pull_subscribe_bind("cli", ns.stream("deliver"))
        (msg,) = await inbox.fetch(1, timeout=20)
        await msg.ack_sync()
        answer = decode_envelope(msg.data)
        assert isinstance(answer, AgentResponse), answer
        assert (answer.text, answer.call_id) == ("through the gate", call.call_id)
        assert (msg.headers or {})[SENDER] == "gpt"
        for process in (gate, gpt):
            process.signal(signal.SIGTERM)
            assert await process.wait_exit() == 0
            assert not [line for line in process.lines if "permission violation" in line.lower()]
    finally:
        gate.close()
        gpt.close()
        await cli.close()


@pytest.mark.chaos
async def test_an_actor_that_may_not_create_its_consumer_refuses_a_missing_or_other_one(
    locked_down: LockedDown,
) -> None:
    locked, ns = locked_down, locked_down.ns
    await provision_once(locked.settings_file("provisioner"), locked.server.url)  # no consumers
    env = parley_env(locked.server.url, ns.root)
    config = str(locked.settings_file("gpt"))
    missing = start_actor("echo", "gpt", env, "--config", config)
    try:
        await missing.wait_line(r"does not exist and this actor may not create it")
        assert await missing.wait_exit() == 2
    finally:
        missing.close()
    await locked.provision()
    other = start_actor("echo", "gpt", {**env, "PARLEY_ACK_WAIT_S": "5"}, "--config", config)
    try:
        await other.wait_line(r"ack_wait is 30\.0 s, expected 5\.0 s")
        assert await other.wait_exit() == 2
    finally:
        other.close()


async def test_the_mover_ignores_advisories_the_server_did_not_send(
    nc: NATS, namespace: Namespace
) -> None:
    """A push consumer aimed at the advisory subject delivers with a `$JS.ACK` reply, which the
    server's own advisories never carry; a message without the advisory's type is not one
    either. Neither moves anything."""
    js, ns = nc.jetstream(), namespace
    call = _call("claude", "keep me")
    seq = (await js.publish(ns.deliver("claude"), encode(call), headers={MSG_ID: call.id})).seq
    ignored = _LogEvent("ignored a max-deliveries advisory the server did not send")
    unreadable = _LogEvent("unreadable max-deliveries advisory")
    logger = logging.getLogger("parley.bus.dead")
    logger.addHandler(ignored)
    logger.addHandler(unreadable)
    try:
        mover = DeadLetters(js, ns, "gate", 64 * 1024, ActorMetrics(CollectorRegistry(), "gate"))
        deliver = ns.stream("deliver")
        # An exact subscription, as every actor moving its own has: a push consumer delivers
        # where a subscription names its deliver subject exactly (not to wildcard ones).
        await mover.watch_max_deliveries(nc, deliver, "claude")
        subject = f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{deliver}.claude"
        forged = {
            "type": "io.nats.jetstream.advisory.v1.max_deliver",
            "stream": deliver,
            "consumer": "claude",
            "stream_seq": seq,
            "deliveries": 5,
        }
        # A push consumer (created here on an open server) feeding the advisory subject with
        # a message that reads like an advisory about claude's message.
        await js.add_consumer(
            deliver,
            ConsumerConfig(
                durable_name="evil",
                filter_subject=ns.deliver("evil"),
                deliver_subject=subject,
                ack_policy=AckPolicy.EXPLICIT,
            ),
        )
        await js.publish(ns.deliver("evil"), json.dumps(forged).encode())
        await asyncio.wait_for(ignored.seen.wait(), timeout=10)
        await nc.publish(subject, json.dumps({**forged, "type": "x"}).encode())
        await asyncio.wait_for(unreadable.seen.wait(), timeout=10)
        assert (await js.get_msg(deliver, seq)).data == encode(call)  # still there
        assert (await js.stream_info(ns.stream("dead"))).state.messages == 0
    finally:
        logger.removeHandler(ignored)
        logger.removeHandler(unreadable)
