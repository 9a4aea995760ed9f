"""The gateway answers each request id once, however often the request comes.

The gateway runs as a real process; the test plays the gate, delivering the same
`llm_request` twice under two message ids, as a second delivery of one request would come.
The provider is asked once; the second delivery is answered from the store, under the first
answer's envelope id, so JetStream keeps one copy. The store itself (`llm_runs`, on a real
server): the first answer kept wins.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
from nats.aio.client import Client as NATS

from actors.llm._answers import AnswerStore, answer_key
from bus import MSG_ID, SENDER, EmbeddedServer
from schemas import (
    LlmPolicy,
    LlmRequest,
    LlmResponse,
    Namespace,
    decode_envelope,
    encode,
    new_id,
    utc_now,
)
from tests.support.agents import Submitted
from tests.support.gate import Signer, make_bundle, publish_bundle
from tests.support.llm_server import WireServer, openai_completion
from tests.support.processes import READY, parley_env, start_actor


async def test_a_request_delivered_twice_asks_the_provider_once_and_answers_the_same(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    js = nc.jetstream()
    server = WireServer()
    await server.start()
    server.queue(openai_completion("first"), openai_completion("second"))
    signer = Signer.create(tmp_path)
    bundle = msgspec.structs.replace(
        make_bundle(1, planner={"allowed_targets": ("llm",)}, llm={}),
        llm_policy=LlmPolicy(allowed_models=("model-x",)),
    )
    await publish_bundle(js, namespace, signer.sign(bundle))
    options = {
        "policy_keys": [str(signer.pub_path)],
        "tenant": "test",
        "providers": {"local": {"api": "openai", "base_url": f"{server.url}/v1"}},
        "models": {"*": "local"},
    }
    env = parley_env(nats_server.url, namespace.root, options=json.dumps(options))
    gateway = start_actor("llm", "llm", env)
    submitted = await Submitted(js, namespace, "llm").open()
    rid = new_id()
    request = LlmRequest(
        id=rid,
        created_at=utc_now(),
        request_id=rid,
        session_id="s-1",
        task_id="t-1",
        step_id=rid,
        model="model-x",
        messages=({"role": "user", "content": "hello"},),
    )
    try:
        await gateway.wait_line(READY)
        first = None
        for delivery in ("d-1", "d-2"):  # the second once the first was answered
            await js.publish(
                namespace.deliver("llm"),
                encode(request),
                headers={SENDER: "planner", MSG_ID: f"{rid}-{delivery}"},
            )
            if first is None:
                _, first = await submitted.next()
        await gateway.wait_line("answered again from the store")
        info = await js.stream_info(namespace.stream("submit"))
        kv = await js.key_value(namespace.bucket("llm_runs"))
        stored = await kv.get(answer_key("planner", rid))
    finally:
        gateway.close()
        await server.close()
    assert isinstance(first, LlmResponse) and first.status == "succeeded", first
    assert first.text == "first"
    assert len(server.requests) == 1  # the second delivery did not ask the provider
    assert stored.value is not None and decode_envelope(stored.value) == first
    # It was published again under the same envelope id, and JetStream kept one copy.
    assert info.state.last_seq == 1, info.state


async def test_the_first_answer_kept_wins(nc: NATS, namespace: Namespace) -> None:
    store = AnswerStore(await nc.jetstream().key_value(namespace.bucket("llm_runs")))
    key = answer_key("planner", "r-1")
    assert key != answer_key("coder", "r-1")  # a request id names a call within its sender's
    assert await store.find(key) is None
    assert await store.keep(key, b"one") == (b"one", True)
    assert await store.keep(key, b"two") == (b"one", False)
    assert await store.find(key) == b"one"
