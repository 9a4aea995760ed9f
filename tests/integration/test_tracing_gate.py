"""The gate as a real process, tracing to an OTLP/HTTP receiver in this test: an envelope that
comes with your own program's `traceparent` is handled in a span continuing it, the span
carries the gate's decision code (a refusal's too), and the delivery goes out with the
`traceparent` of the gate's publish span, so the receiver's span continues from there."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from bus import TRACEPARENT, EmbeddedServer
from schemas import HumanMessage, Namespace, new_id, utc_now
from tests.support.gate import Decisions, Signer, make_bundle, publish_bundle, start_gate, submit
from tests.support.otlp import otel_env, otlp_receiver
from tests.support.processes import READY

# A trace of the person's own program, which published the envelopes.
THEIRS = "4bf92f3577b34da6a3ce929d0e0e4736"
THEIR_SPAN = "00f067aa0ba902b7"


def _human(target: str) -> HumanMessage:
    return HumanMessage(
        id=new_id(), created_at=utc_now(), text="hi", call_id=new_id(), target=target
    )


async def test_the_gate_continues_an_incoming_traceparent_and_names_its_decision(
    nc: NATS,
    nats_server: EmbeddedServer,
    namespace: Namespace,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    js = nc.jetstream()
    signer = Signer.create(tmp_path)
    bundle = make_bundle(
        cli={"start_traces": True, "speaks_for_person": True, "allowed_targets": ("a",)}, a={}
    )
    await publish_bundle(js, namespace, signer.sign(bundle))
    decisions = await Decisions(js, namespace).open()
    delivered: asyncio.Queue[Msg] = asyncio.Queue()
    watch = await nc.subscribe(namespace.deliver("a"), cb=delivered.put)
    allowed, refused = _human("a"), _human("mallory")
    with otlp_receiver() as receiver:
        for name, value in otel_env(receiver.endpoint).items():
            monkeypatch.setenv(name, value)
        gate = start_gate(nats_server.url, namespace, signer)
        try:
            await gate.wait_line(READY)
            await gate.wait_line("policy bundle in force")
            for envelope in (allowed, refused):
                theirs = {TRACEPARENT: f"00-{THEIRS}-{THEIR_SPAN}-01"}
                await submit(js, namespace, "cli", envelope, headers=theirs)
            await decisions.until(refused.id)
            delivery = await asyncio.wait_for(delivered.get(), 10)
            gate.signal(signal.SIGTERM)  # it exports what it has batched before exiting
            assert await gate.wait_exit() == 0
        finally:
            gate.close()
            await watch.unsubscribe()
        spans = list(receiver.spans)

    handled = {
        span.attributes["messaging.message.id"]: span
        for span in spans
        if span.name == "Policy and Guardrails handle"
    }
    for envelope, code in ((allowed, "ALLOW"), (refused, "TARGET_NOT_ALLOWED")):
        span = handled[envelope.id]
        assert (span.trace_id, span.parent_id) == (THEIRS, THEIR_SPAN)
        assert span.attributes["parley.decision_code"] == code
        assert span.attributes["parley.sender"] == "cli"
        assert span.attributes["parley.kind"] == "human_message"
    # The delivery's traceparent is the gate's publish span under the allowed one's span.
    [published] = [
        span
        for span in spans
        if span.parent_id == handled[allowed.id].span_id
        and span.attributes["messaging.destination.name"] == namespace.deliver("a")
    ]
    assert published.name == "Policy and Guardrails publish"
    assert delivery.headers is not None
    assert delivery.headers[TRACEPARENT] == f"00-{THEIRS}-{published.span_id}-01"
