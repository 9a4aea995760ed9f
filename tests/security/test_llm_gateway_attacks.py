"""An agent holding only its own credentials, against the LLM gateway (actors/llm/).

Under the least-privilege config of `parley nats-config` on a real nats-server, gpt (an agent)
tries to hand the gateway a model call of its own making without the gate (publishing on the
gateway's deliver subject, core or JetStream), to read or plant answers in the gateway's
`llm_runs` bucket, and to read the gateway's deliveries. Each is refused by the server, and
counted as a permission violation on gpt's connection; the gateway's own user reaches its
bucket. The provider keys are in the gateway's own settings alone: no envelope carries them
(tests/integration/test_llm_gateway.py checks what the agent's profile and the provider see).
The text being written in a person's session goes to that person alone: another person cannot
read it, and no agent or person can write it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import ConsumerConfig
from prometheus_client import CollectorRegistry

from bus import ActorMetrics, EmbeddedServer
from schemas import Namespace
from tests.support.lockdown import LockedDown, violations
from tools.natsconf import DEFAULT_ACTORS, write_nats_config

_REFUSED = (TimeoutError, NatsTimeoutError)


async def test_an_agent_cannot_bypass_the_gate_to_the_gateway_or_touch_its_answers(
    locked_down: LockedDown,
) -> None:
    locked, ns = locked_down, locked_down.ns
    await locked.provision()
    registry = CollectorRegistry()
    gpt = await locked.connect("gpt", ActorMetrics(registry, "gpt"))
    llm = await locked.connect("llm")
    bucket = ns.bucket("llm_runs")
    try:
        answers = await locked.js(llm, "llm").key_value(bucket)
        await answers.put("run.kept", b"the gateway's own answer")

        js = gpt.jetstream(prefix=locked.settings("gpt").js_api_prefix, timeout=1)
        stream = f"KV_{bucket}"
        deliver = ns.stream("deliver")
        refused: list[Coroutine[Any, Any, object]] = [
            js.publish(ns.deliver("llm"), b"{}"),  # a model call the gate never saw
            js.key_value(bucket),
            js.publish(f"$KV.{bucket}.run.kept", b"forged"),
            js.get_msg(stream, subject=f"$KV.{bucket}.run.kept", direct=True),
            js.get_msg(stream, 1),
            js.add_consumer(deliver, ConsumerConfig(filter_subject=ns.deliver("llm"))),
        ]
        outcomes = await asyncio.gather(*refused, return_exceptions=True)
        assert all(isinstance(outcome, _REFUSED) for outcome in outcomes), outcomes
        await gpt.publish(ns.deliver("llm"), b"{}")  # core NATS, no answer expected
        await gpt.flush()
        await gpt.flush()
        assert violations(registry, "gpt") == len(refused) + 1

        kept = await answers.get("run.kept")
        assert kept.value == b"the gateway's own answer" and kept.revision == 1
    finally:
        for nc in (gpt, llm):
            await nc.close()


async def test_a_streamed_answer_reaches_the_agent_that_asked_and_no_other(
    locked_down: LockedDown,
) -> None:
    """The gateway publishes gpt's chunks on `chunks.gpt`; gpt follows them, claude (another
    agent, its own credentials only) can neither read them nor plant chunks there."""
    locked, ns = locked_down, locked_down.ns
    registry = CollectorRegistry()
    gpt = await locked.connect("gpt")
    claude = await locked.connect("claude", ActorMetrics(registry, "claude"))
    llm = await locked.connect("llm")
    try:
        mine = await gpt.subscribe(ns.chunks("gpt"))
        stolen = await claude.subscribe(ns.chunks("gpt"))
        await claude.flush()
        await claude.publish(ns.chunks("gpt"), b'{"request_id":"r","index":0,"text":"forged"}')
        await claude.flush()
        await gpt.flush()
        await llm.publish(ns.chunks("gpt"), b'{"request_id":"r","index":0,"text":"the model"}')
        await llm.flush()
        received = await mine.next_msg(timeout=5)  # a forged one, sent first, would be first
        assert b"the model" in received.data, received.data
        assert violations(registry, "claude") == 2  # the subscription and the publish
        assert stolen.pending_msgs == 0
    finally:
        for nc in (gpt, claude, llm):
            await nc.close()


ALICE = "person-alice"


@pytest.fixture
def two_people(tmp_path: Path, namespace: Namespace) -> Iterator[LockedDown]:
    """The least-privilege config with a second person, `person-alice`, beside `cli`."""
    config_dir = tmp_path / "nats-config"
    write_nats_config(config_dir, [*DEFAULT_ACTORS, ALICE], namespace)
    server = EmbeddedServer(tmp_path / "nats", authorization=config_dir / "authorization.conf")
    server.start()
    yield LockedDown(server, config_dir, namespace)
    server.close()


async def test_the_text_being_written_in_a_session_reaches_its_person_and_no_other(
    two_people: LockedDown,
) -> None:
    """The gateway publishes on `typing.cli.<session>`; cli follows it, alice (another person)
    can neither read it nor plant text there, and gpt (an agent) cannot write it either."""
    locked, ns = two_people, two_people.ns
    registry, agents = CollectorRegistry(), CollectorRegistry()
    cli = await locked.connect("cli")
    alice = await locked.connect(ALICE, ActorMetrics(registry, ALICE))
    gpt = await locked.connect("gpt", ActorMetrics(agents, "gpt"))
    llm = await locked.connect("llm")
    subject = ns.typing("cli", "s-1")
    forged = b'{"request_id":"r","index":0,"text":"forged","agent":"gpt"}'
    try:
        mine = await cli.subscribe(subject)
        stolen = await alice.subscribe(subject)
        everything = await alice.subscribe(ns.typings("cli"))
        await alice.flush()
        await alice.publish(subject, forged)
        await gpt.publish(subject, forged)
        for nc in (alice, gpt, cli):
            await nc.flush()
        await llm.publish(subject, b'{"request_id":"r","index":0,"text":"the model"}')
        await llm.flush()
        received = await mine.next_msg(timeout=5)  # a forged one, sent first, would be first
        assert b"the model" in received.data, received.data
        assert violations(registry, ALICE) == 3  # two subscriptions and the publish
        assert violations(agents, "gpt") == 1
        assert stolen.pending_msgs == 0 and everything.pending_msgs == 0
    finally:
        for nc in (cli, alice, gpt, llm):
            await nc.close()
