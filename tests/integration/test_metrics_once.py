"""A decision is counted once however often its input is handled.

A real gate process whose every first attempt fails after its effects are stored (as one that
died before its ack would) decides each message twice; the second attempt delivers an
admitted envelope again as recorded, or refuses the refused one again. Its metrics endpoint,
scraped over HTTP and parsed with prometheus_client's parser, counts each decision once.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from pathlib import Path

import msgspec
from nats.aio.client import Client as NATS
from prometheus_client.parser import text_string_to_metric_families

from bus import EmbeddedServer
from schemas import HumanMessage, Namespace, new_id, utc_now
from tests.support.gate import Decisions, Signer, make_bundle, publish_bundle, submit
from tests.support.processes import READY, parley_env, start_actor

FLAKY_GATE = "support.flaky_gate:FirstTryFailsGate"


def _samples(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _human(target: str) -> HumanMessage:
    return HumanMessage(
        id=new_id(), created_at=utc_now(), text="hello", call_id=new_id(), target=target
    )


async def test_a_decision_handled_twice_is_counted_once(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    js = nc.jetstream()
    signer = Signer.create(tmp_path)
    bundle = make_bundle(
        cli={"start_traces": True, "speaks_for_person": True, "allowed_targets": ("a",)}
    )
    await publish_bundle(js, namespace, signer.sign(bundle))
    decisions = await Decisions(js, namespace).open()
    options = msgspec.json.encode({"policy_keys": [str(signer.pub_path)], "tenant": "test"})
    env = parley_env(
        nats_server.url,
        namespace.root,
        options=options.decode(),
        metrics_port="0",
        backoff_s="[0.05]",
    )
    gate = start_actor(FLAKY_GATE, "gate", env)
    try:
        _, served = await gate.wait_line(r'"msg":"metrics served"')
        port = int(json.loads(served)["port"])
        await gate.wait_line(READY)
        await gate.wait_line("policy bundle in force")
        admitted, refused = _human("a"), _human("b")
        await submit(js, namespace, "cli", admitted)
        await submit(js, namespace, "cli", refused)
        assert (await decisions.until(admitted.id)).allowed
        assert not (await decisions.until(refused.id)).allowed
        await gate.wait_line("delivering again an envelope admitted before")

        acked = ("parley_messages_handled_total", (("actor", "gate"), ("outcome", "acked")))
        deadline = time.monotonic() + 20
        while (samples := await asyncio.to_thread(_samples, port)).get(acked) != 2:
            assert time.monotonic() < deadline, samples.get(acked)
            await asyncio.sleep(0.1)  # a scrape interval: the condition is what is awaited
        nacked = ("parley_messages_handled_total", (("actor", "gate"), ("outcome", "nacked")))
        assert samples[nacked] == 2  # each message was handled twice

        def decided(decision: str, code: str) -> float | None:
            labels = {"actor": "gate", "code": code, "decision": decision, "kind": "human_message"}
            return samples.get(("parley_gate_decisions_total", tuple(sorted(labels.items()))))

        assert decided("allow", "none") == 1
        assert decided("deny", "TARGET_NOT_ALLOWED") == 1
    finally:
        gate.close()
