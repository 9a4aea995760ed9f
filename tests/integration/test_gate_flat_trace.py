"""A long trace through the real gate keeps a trace record of the same few bytes (issue 35).

A ping-pong between two real agent processes runs one trace up to its message budget through
a real gate process. The trace's record in the traces bucket then holds its counters and no
answered call (before, it kept every call with the answer that closed it: 5,971 bytes after
these 40 calls, rewritten at every hop), and each answered call has its own record naming the answer
the gate admitted for it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
from nats.aio.client import Client as NATS

from actors.gate._records import CallAnswer, TraceState, answer_key, trace_key
from bus import EmbeddedServer
from schemas import Decision, ErrorCode, HumanMessage, Namespace, new_id, utc_now
from tests.support.gate import Decisions, Signer, make_bundle, publish_bundle, start_gate, submit
from tests.support.processes import READY, ProcessOutput, parley_env, start_actor

pytestmark = pytest.mark.chaos

BUDGET = 81
"""Envelopes the ping-pong's trace may hold: the root, then 40 calls and 40 answers."""


@pytest.fixture
async def processes(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> AsyncIterator[list[ProcessOutput]]:
    signer = Signer.create(tmp_path)
    pair = {"trace_message_budget": BUDGET, "rate_per_minute": 10_000}
    bundle = make_bundle(
        cli={"start_traces": True, "speaks_for_person": True, "allowed_targets": ("a",)},
        a={"allowed_targets": ("b",), **pair},
        b={"allowed_targets": ("a",), **pair},
    )
    await publish_bundle(nc.jetstream(), namespace, signer.sign(bundle))
    env = parley_env(nats_server.url, namespace.root, ack_wait_s="5")
    started = [start_gate(nats_server.url, namespace, signer, ack_wait_s="5")]
    started += [start_actor("support.chatty:ChattyActor", name, env) for name in ("a", "b")]
    try:
        for process in started:
            await process.wait_line(READY)
        await started[0].wait_line("policy bundle in force")
        yield started
    finally:
        for process in started:
            process.close()


async def test_a_trace_at_its_budget_keeps_a_record_of_its_counters_and_no_answered_call(
    nc: NATS, namespace: Namespace, processes: list[ProcessOutput]
) -> None:
    js = nc.jetstream()
    decisions = await Decisions(js, namespace).open()
    root = HumanMessage(
        id=new_id(), created_at=utc_now(), text="pingpong:b", call_id=new_id(), target="a"
    )
    await submit(js, namespace, "cli", root)
    answers: list[Decision] = []
    while (decision := await decisions.next()).allowed:
        if decision.envelope_kind == "agent_response":
            answers.append(decision)
    assert decision.code == ErrorCode.BUDGET_EXCEEDED, decision
    assert len(answers) == (BUDGET - 1) // 2
    traces = await js.key_value(namespace.bucket("traces"))
    stored = (await traces.get(trace_key(root.id))).value
    assert stored is not None
    trace = msgspec.json.decode(stored, type=TraceState)
    assert trace.count == BUDGET and not trace.open_calls and not trace.live, trace
    # Counters only: the same size after 40 calls as after one (a count of 81 against 3).
    assert len(stored) < 120, stored
    for answer in answers:
        closed = (await traces.get(answer_key(answer.causation_id))).value
        assert closed is not None
        assert msgspec.json.decode(closed, type=CallAnswer).answer_id == answer.envelope_id
