"""Scripted agents answer through the real gate: seed 001's fairy tale, four rounds, end to end.

The test plays the router: it submits each call on `parley.submit.router` (the first starts the
trace, each later one names the answer it follows as its cause) and reads what the gate
delivers to `parley.deliver.router`. The gate, `gpt` and `claude` are real processes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from nats.aio.client import Client as NATS

from bus import CAUSATION_ID, MSG_ID, SENDER, EmbeddedServer
from schemas import (
    BUNDLE_PAYLOAD_TYPE,
    AgentResponse,
    Namespace,
    PolicyBundle,
    ProfilePolicy,
    TranscriptItem,
    decode_envelope,
    encode,
    sign_payload,
    utc_now,
)
from tests.support.agents import FAIRY_TALE, agent_call, start_agent
from tests.support.processes import READY, ProcessOutput, parley_env, start_actor


@pytest.fixture
def processes() -> Iterator[list[ProcessOutput]]:
    started: list[ProcessOutput] = []
    yield started
    for process in started:
        process.close()


async def publish_policy(nc: NATS, namespace: Namespace, keys: Path) -> Path:
    """Sign a bundle letting the router call both agents, put it in the policy bucket."""
    private = Ed25519PrivateKey.generate()
    public = keys / "policy.pub"
    public.write_bytes(
        private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    agent = ProfilePolicy(allowed_targets=("router",))
    bundle = PolicyBundle(
        schema_version="1.0",
        version=1,
        tenant_id="t",
        expires_at=utc_now() + timedelta(days=1),
        profiles={
            "router": ProfilePolicy(allowed_targets=("gpt", "claude"), start_traces=True),
            "gpt": agent,
            "claude": agent,
        },
    )
    signed = sign_payload(encode(bundle), BUNDLE_PAYLOAD_TYPE, private)
    kv = await nc.jetstream().key_value(namespace.bucket("policy"))
    await kv.put("bundle", signed)
    return public


async def test_fairy_tale_through_the_gate(
    nc: NATS,
    nats_server: EmbeddedServer,
    namespace: Namespace,
    processes: list[ProcessOutput],
    tmp_path: Path,
) -> None:
    js = nc.jetstream()
    public = await publish_policy(nc, namespace, tmp_path)
    env = parley_env(nats_server.url, namespace.root, ack_wait_s="2", fetch_timeout_s="1")
    gate_env = {**env, "PARLEY_OPTIONS": json.dumps({"policy_keys": [str(public)], "tenant": "t"})}
    for process in (
        start_actor("gate", "gate", gate_env),
        start_agent("gpt", env),
        start_agent("claude", env),
    ):
        processes.append(process)
        await process.wait_line(READY)
    inbox = await js.pull_subscribe(
        namespace.deliver("router"), durable="router", stream=namespace.stream("deliver")
    )
    transcript: tuple[TranscriptItem, ...] = (
        TranscriptItem(role="user", name="you", text=FAIRY_TALE),
    )
    speaker, cause, finals = "claude", "", []
    for round_no in range(1, 5):
        call = agent_call(speaker, FAIRY_TALE, round=round_no, max_rounds=4, transcript=transcript)
        headers = {MSG_ID: call.id}
        if cause:
            headers[CAUSATION_ID] = cause  # the answer this call follows, as a router would
        await js.publish(namespace.submit("router"), encode(call), headers=headers)
        (msg,) = await inbox.fetch(1, timeout=20)
        await msg.ack_sync()
        answer = decode_envelope(msg.data)
        assert isinstance(answer, AgentResponse), f"round {round_no}: {answer}"
        assert (answer.sender, answer.call_id, answer.round) == (speaker, call.call_id, round_no)
        assert msg.headers is not None and msg.headers[SENDER] == speaker
        assert msg.headers[CAUSATION_ID] == call.id
        assert not answer.malformed
        finals.append(answer.reply.final)
        transcript += (TranscriptItem(role=speaker, name=speaker, text=answer.reply.message),)
        cause = answer.id
        if answer.reply.final:
            break
        assert answer.reply.handoff
        speaker = answer.reply.handoff.to
    assert finals == [False, False, False, True] and speaker == "gpt"
