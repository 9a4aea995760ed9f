"""Issue 13, findings 4 and 5: sizes, crash quarantine, and bad submissions answered.

Every test runs the least-privilege config of `parley nats-config` on a real nats-server, with
real actor processes; the attacker is a raw nats-py client holding gpt's own credentials.

- An answer under the decode limit whose delivery, with the gate's headers, would exceed the
  server's `max_payload`: the server used to close the gate's connection on the publish and the
  gate crash-looped on the message. Now the gate (same process) refuses it with a typed error
  to its sender, and the sender's next, normal answer is delivered.
- A submission that does not decode or validate is answered with an `INVALID_REQUEST` error on
  its sender's deliver subject, naming the field and the reason, beside its dead letter.
- `parley collab --max-rounds 0|-1|1000` refuses its own arguments at once (exit 2).
- An input that killed its actor's process on three deliveries is quarantined (dead-lettered)
  instead of being handed to the next process.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from pathlib import Path

import msgspec
import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from bus import (
    DEAD_REASON,
    DEAD_SEQ,
    MSG_ID,
    SENDER,
    Input,
    TraceHeaders,
    consumer_config,
    parse_trace_headers,
    wire_size,
)
from bus._quarantine import GUARDED_FROM
from schemas import (
    ActorHeartbeat,
    AgentCall,
    AgentResponse,
    Decision,
    Error,
    ErrorCode,
    HumanMessage,
    Reply,
    decode_envelope,
    encode,
    heartbeat_key,
    hop_delta_for,
    new_id,
    utc_now,
)
from tests.support.lockdown import LockedDown
from tests.support.processes import READY, ProcessOutput, parley_env, start_actor
from tests.support.system import finished, parley_cli, running_locked_system
from tests.support.wire import PROBE, human


async def _inbox(nc: NATS, locked: LockedDown, actor: str) -> JetStreamContext.PullSubscription:
    """`actor`'s own deliver durable (provisioned for it), read with its own credentials."""
    return await locked.js(nc, actor).pull_subscribe_bind(
        durable=actor, stream=locked.ns.stream("deliver")
    )


async def _next(inbox: JetStreamContext.PullSubscription, timeout: float = 20) -> Msg:
    (msg,) = await inbox.fetch(1, timeout=timeout)
    await msg.ack_sync()
    return msg


async def _dead_letters(locked: LockedDown) -> AsyncGenerator[Msg]:
    """PARLEY_DEAD read as the auditor reads it (the one principal allowed to)."""
    auditor = await locked.connect("auditor")
    try:
        js = auditor.jetstream()
        spec = Input(locked.ns.stream("dead"), locked.ns.wildcard("dead"), "auditor", "subject")
        await js.add_consumer(spec.stream, consumer_config(spec, locked.settings("auditor")))
        reader = await js.pull_subscribe_bind(durable="auditor", stream=spec.stream)
        while True:
            yield await _next(reader)
    finally:
        await auditor.close()


def _answer(call: AgentCall, text: str) -> AgentResponse:
    return AgentResponse(
        id=new_id(),
        created_at=utc_now(),
        sender="gpt",
        text=text,
        call_id=call.call_id,
        session_id=call.session_id,
        round=call.round,
        max_rounds=call.max_rounds,
        reply=Reply(message="ok"),
    )


def _answer_headers(delivered: Msg, call: AgentCall, answer: AgentResponse) -> dict[str, str]:
    """The headers an honest agent host puts on its answer (bus/_context.py `submit`)."""
    trace = parse_trace_headers(delivered.headers, call.id)
    return trace.child(call.id, hop_delta_for(answer)).to_headers(answer.id)


async def test_an_answer_too_large_once_delivered_is_refused_and_the_gate_lives_on(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    locked, ns = locked_down, locked_down.ns
    async with running_locked_system(locked, tmp_path / "keys", agents={}) as system:
        gate_pid = system.processes["gate"].pid
        gpt, cli = await locked.connect("gpt"), await locked.connect("cli")
        admin = await locked.connect("provisioner")
        try:
            # gpt (the attacker) beats like an agent host, so the router calls it.
            beat = ActorHeartbeat(
                actor_id="gpt",
                kind="agent",
                pid=1,
                started_at=utc_now(),
                beat_at=utc_now(),
                period_s=30.0,
            )
            registry = await locked.js(gpt, "gpt").key_value(ns.bucket("registry"))
            await registry.put(heartbeat_key("gpt"), encode(beat))
            decisions: asyncio.Queue[Decision] = asyncio.Queue()

            async def on_decision(msg: Msg) -> None:
                decision = decode_envelope(msg.data)
                assert isinstance(decision, Decision)
                decisions.put_nowait(decision)

            # The whole timeline is an operator's to read (a person follows only its own).
            await locked.js(admin, "provisioner").subscribe(
                ns.decisions("gpt"),
                cb=on_decision,
                ordered_consumer=True,
                deliver_policy=DeliverPolicy.ALL,
            )
            start = HumanMessage(
                id=new_id(),
                created_at=utc_now(),
                text="say something long",
                call_id=new_id(),
                mode="collaborate",
                participants=("gpt",),
                first_speaker="gpt",
                max_rounds=2,
                session_id=new_id(),
            )
            await locked.js(cli, "cli").publish(
                ns.submit("cli"),
                encode(start),
                headers=TraceHeaders(trace_id=start.id, origin="cli").to_headers(start.id),
            )
            inbox = await _inbox(gpt, locked, "gpt")
            delivered = await _next(inbox)
            call = decode_envelope(delivered.data)
            assert isinstance(call, AgentCall)

            # As large as gpt may submit (payload and its headers at the server's limit), under
            # the decode limit: the gate's own delivery headers are larger than gpt's.
            limit = gpt.max_payload
            big = _answer(call, "")
            headers = _answer_headers(delivered, call, big)
            room = limit - wire_size(encode(big), headers) - 16
            big = msgspec.structs.replace(big, text="a" * room)
            payload = encode(big)
            assert wire_size(payload, headers) <= limit
            assert len(payload) < locked.settings("gate").max_payload  # decodes at the gate
            await locked.js(gpt, "gpt").publish(ns.submit("gpt"), payload, headers=headers)

            refusal = decode_envelope((await _next(inbox)).data)
            assert isinstance(refusal, Error), refusal
            assert refusal.code == ErrorCode.INVALID_REQUEST
            assert refusal.message.startswith("envelope too large: ")
            assert refusal.cause_id == big.id
            assert refusal.details["rule"] == "envelope_too_large"
            assert refusal.details["value"] > refusal.details["limit"] == limit

            # The same gate process delivers gpt's next, normal answer to the router.
            normal = _answer(call, "short")
            await locked.js(gpt, "gpt").publish(
                ns.submit("gpt"), encode(normal), headers=_answer_headers(delivered, call, normal)
            )
            outcomes: dict[str, Decision] = {}
            while normal.id not in outcomes:
                decision = await asyncio.wait_for(decisions.get(), 20)
                outcomes[decision.envelope_id] = decision
            assert outcomes[big.id].allowed is False
            assert outcomes[normal.id].allowed is True
            assert outcomes[normal.id].target == "router"
            gate = system.processes["gate"]
            assert gate.pid == gate_pid and gate.process.poll() is None, gate.lines[-20:]
        finally:
            await gpt.close()
            await cli.close()
            await admin.close()


async def test_bad_submissions_are_answered_on_the_senders_deliver_subject(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    locked, ns = locked_down, locked_down.ns
    async with running_locked_system(locked, tmp_path / "keys", agents={}):
        gpt, cli = await locked.connect("gpt"), await locked.connect("cli")
        letters = _dead_letters(locked)
        try:
            # Not JSON at all, from gpt.
            garbage = await locked.js(gpt, "gpt").publish(
                ns.submit("gpt"), b"{not json", headers={MSG_ID: new_id()}
            )
            error = decode_envelope((await _next(await _inbox(gpt, locked, "gpt"))).data)
            assert isinstance(error, Error), error
            assert error.code == ErrorCode.INVALID_REQUEST
            assert error.details["field"] == "payload"
            assert error.details["rule"] == "decode_malformed"
            assert error.details["reason"]
            assert error.details["stream_seq"] == garbage.seq

            # A person's message with max_rounds 0, from the cli principal.
            bad = HumanMessage(
                id=new_id(),
                created_at=utc_now(),
                text="go",
                call_id=new_id(),
                mode="collaborate",
                participants=("gpt",),
                max_rounds=0,
                session_id=new_id(),
            )
            invalid = await locked.js(cli, "cli").publish(
                ns.submit("cli"),
                encode(bad),
                headers=TraceHeaders(trace_id=bad.id, origin="cli").to_headers(bad.id),
            )
            delivered = await _next(await _inbox(cli, locked, "cli"))
            assert delivered.headers is not None and delivered.headers[SENDER] == "gate"
            error = decode_envelope(delivered.data)
            assert isinstance(error, Error), error
            assert error.code == ErrorCode.INVALID_REQUEST
            assert error.cause_id == bad.id
            assert error.details["field"] == "max_rounds"
            assert error.details["value"] == 0
            assert ">= 1" in error.details["reason"]
            assert "max_rounds" in error.message

            reasons: dict[int, str] = {}
            while len(reasons) < 2:
                letter = await anext(letters)
                assert letter.headers is not None
                reasons[int(letter.headers[DEAD_SEQ])] = letter.headers[DEAD_REASON]
            assert reasons == {garbage.seq: "decode_malformed", invalid.seq: "decode_invalid"}
        finally:
            await letters.aclose()
            await gpt.close()
            await cli.close()


@pytest.mark.parametrize("rounds", ["0", "-1", "1000"])
async def test_collab_refuses_max_rounds_out_of_range_itself(
    locked_down: LockedDown, rounds: str
) -> None:
    locked = locked_down
    await locked.provision()
    env = parley_env(locked.server.url, locked.ns.root)
    config = ("--config", str(locked.settings_file("cli")))
    cli = parley_cli(
        env, "collab", *config, "--timeout", "5", "--max-rounds", rounds, "--", "a goal"
    )
    code, lines = await finished(cli, 30)
    said = "\n".join(lines)
    assert code == 2, said
    assert f"--max-rounds (max_rounds) must be within 1..100, got {rounds}" in said


@pytest.mark.parametrize("deaths", [GUARDED_FROM, 2])
async def test_an_input_that_killed_its_handler_repeatedly_is_quarantined(
    locked_down: LockedDown, deaths: int
) -> None:
    """A poison message costs `poison_deaths` process deaths (the default, and a lower
    setting), and each delivery after a death is alerted, naming the message."""
    locked, ns = locked_down, locked_down.ns
    # A short ack wait, so a dead process's message comes back quickly.
    tuned = {"poison_deaths": str(deaths)} if deaths != GUARDED_FROM else {}
    locked.tune("gpt", ack_wait_s="1.0", max_deliver="5", backoff_s="[0.05]", **tuned)
    await locked.provision()
    env = parley_env(locked.server.url, ns.root)
    config = ("--config", str(locked.settings_file("gpt")))
    gate = await locked.connect("gate")  # only the gate may deliver
    letters = _dead_letters(locked)
    started: list[ProcessOutput] = []

    def start() -> ProcessOutput:
        process = start_actor(PROBE, "gpt", env, *config)  # the probe, as gpt's user
        started.append(process)
        return process

    try:
        poison = human("crash")
        stored = await gate.jetstream().publish(
            ns.deliver("gpt"), encode(poison), headers={SENDER: "router", MSG_ID: poison.id}
        )
        # Its first deliveries kill the process unguarded, the last one under its mark.
        for _ in range(deaths):
            assert await start().wait_exit(30) == 70
        survivor = start()
        letter = await anext(letters)
        assert letter.headers is not None
        assert letter.headers[DEAD_REASON] == "quarantined", letter.headers
        assert letter.headers[DEAD_SEQ] == str(stored.seq)
        assert decode_envelope(letter.data).id == poison.id
        await survivor.wait_line(READY)
        for process in started[1:]:  # every process after the first death was told of it
            alerts = [line for line in process.lines if "may have died of it" in line]
            assert alerts and poison.id in alerts[0], process.lines[-20:]

        # The process that quarantined it goes on handling other messages.
        submissions = await locked.gate_submissions(gate.jetstream())
        good = human("hello")
        await gate.jetstream().publish(
            ns.deliver("gpt"), encode(good), headers={SENDER: "router", MSG_ID: good.id}
        )
        effect = decode_envelope((await _next(submissions)).data)
        assert isinstance(effect, AgentResponse) and effect.call_id == good.id
        assert survivor.process.poll() is None
        assert not [line for line in survivor.lines if "permission" in line.lower()]
    finally:
        await letters.aclose()
        await gate.close()
        for process in started:
            process.close()
