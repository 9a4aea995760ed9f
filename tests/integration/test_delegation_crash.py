"""A delegating host SIGKILLed at each point of a fan-out gives one answer, one brain call a step.

The planner fans out to three specialists (tests/integration/test_delegation.py's scripts).
It is killed with a real SIGKILL where its wait is stored but nothing sent, between two of its
requests, while it waits, after every answer is recorded but before its brain is asked
again, with the step claimed while its brain is being asked (the claim then lapses within
one lease, an ack wait, not the brain's whole time), and with its answer stored but not sent;
a fresh process (any replica would do) takes over from the wait in the `waits` bucket. The
person gets exactly one answer with every specialist's result, and across both processes the
brain is asked exactly once per step. A chain's host killed with its next round stored but
not sent sends that round from the redelivered message that moved the call on (an answer, or
the reminder that timed the first round out), the round's deadlines counted from then.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from actors.delegation import Delegate, Wait
from bus import EmbeddedServer
from schemas import (
    DelegationRequest,
    DelegationResponse,
    Namespace,
    decode_envelope,
)
from tests.integration.test_delegation import PLANNER_SCRIPT, SPECIALIST_SCRIPT
from tests.support.agents import start_agent, write_profile
from tests.support.delegation import person_request, submit_as_person
from tests.support.gate import Decisions, Signer, make_bundle, publish_bundle, start_gate
from tests.support.processes import READY, ProcessOutput, parley_env

pytestmark = pytest.mark.chaos

SPECIALISTS = ("coder", "reviewer", "writer")
RUSHED_SCRIPT = """
[[turn]]
goal = "rushed answer"
step = 0
calls = [{ to = "coder", objective = "code for {task}", deadline_ms = 300 }]

[[turn]]
goal = "rushed chain"
step = 0
calls = [{ to = "coder", objective = "code for {task}", deadline_ms = 300 }]

[[turn]]
goal = "rushed chain"
step = 1
calls = [{ to = "reviewer", objective = "review the code", chain = true }]
"""
"""Calls the specialists cannot answer in time (they take a second): the round's reminder
times each out, and is the message that moves the call on."""
DELEGATE_DEADLINE_MS = next(
    field.default for field in msgspec.structs.fields(Delegate) if field.name == "deadline_ms"
)


@dataclass
class Floor:
    js: JetStreamContext
    ns: Namespace
    env: dict[str, str]
    planner_profile: Path
    processes: list[ProcessOutput]
    inbox: Any


def _start_planner(floor: Floor, pause_at: str | None) -> ProcessOutput:
    env = {**floor.env, "PARLEY_TEST_PAUSE_AT": pause_at or ""}
    argv = [sys.executable, "-m", "tools", "run", "support.delegation_probe:PausingHost"]
    process = ProcessOutput([*argv, "--profile", str(floor.planner_profile)], env, name="planner")
    floor.processes.append(process)
    return process


@pytest.fixture
async def floor(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> AsyncIterator[Floor]:
    js = nc.jetstream()
    signer = Signer.create(tmp_path)
    profiles: dict[str, dict[str, Any]] = {
        "cli": {"start_traces": True, "speaks_for_person": True, "allowed_targets": ("planner",)},
        "planner": {"allowed_targets": (*SPECIALISTS, "cli"), "max_fan_out": 3},
    }
    profiles |= {name: {"allowed_targets": ("planner",)} for name in SPECIALISTS}
    await publish_bundle(js, namespace, signer.sign(make_bundle(1, days=1, **profiles)))
    await Decisions(js, namespace).open()
    env = parley_env(nats_server.url, namespace.root, ack_wait_s="2")
    agents = tmp_path / "agents"
    planner = write_profile(
        agents,
        "planner",
        'backend = "scripted"\nscript = "planner-script.toml"',
        script=RUSHED_SCRIPT + PLANNER_SCRIPT,  # before its catch-all turn
        extra=f"delegates_to = {json.dumps(list(SPECIALISTS))}",
    )
    # The specialists take a moment, so a planner killed while waiting misses their answers.
    slow = SPECIALIST_SCRIPT.replace('\nmessage = "{name}', '\ndelay_s = 1.0\nmessage = "{name}')
    specialists = [
        write_profile(
            agents, name, f'backend = "scripted"\nscript = "{name}-script.toml"', script=slow
        )
        for name in SPECIALISTS
    ]
    processes = [start_gate(nats_server.url, namespace, signer, ack_wait_s="2")]
    processes += [start_agent(str(path), env) for path in specialists]
    inbox = await js.pull_subscribe(
        namespace.deliver("cli"), durable="cli", stream=namespace.stream("deliver")
    )
    try:
        for process in processes:
            await process.wait_line(READY)
        yield Floor(js, namespace, env, planner, processes, inbox)
    finally:
        for process in processes:
            process.close()


async def _delegate(floor: Floor, objective: str) -> DelegationRequest:
    request = person_request(objective, text="the parser")
    await submit_as_person(floor.js, floor.ns, request)
    return request


async def _answer(floor: Floor) -> DelegationResponse:
    (msg,) = await floor.inbox.fetch(1, timeout=60)
    await msg.ack_sync()
    answer = decode_envelope(msg.data)
    assert isinstance(answer, DelegationResponse), answer
    return answer


@pytest.mark.parametrize("point", ["stored", "between", "waiting", "answers", "asking", "answered"])
async def test_a_host_killed_mid_fan_out_answers_once(floor: Floor, point: str) -> None:
    first = _start_planner(floor, None if point == "waiting" else point)
    await first.wait_line(READY)
    request = await _delegate(floor, "fan out")
    if point == "waiting":  # every request out, the specialists still at work
        for name in SPECIALISTS:
            await first.wait_line(rf'"msg":"calling".*"target":"{name}"')
    else:
        await first.wait_line(rf"paused at {point}")
    assert first.kill() == -signal.SIGKILL
    second = _start_planner(floor, None)
    await second.wait_line(READY)
    answer = await _answer(floor)
    assert answer.request_id == request.request_id and answer.status == "success", answer
    for name, task in (("coder", "code for"), ("reviewer", "review of"), ("writer", "docs for")):
        assert f"{name} did {task} the parser" in answer.result, answer.result
    # Nothing more for that request: the next answer is the next request's.
    probe = await _delegate(floor, "fan out again")
    assert (await _answer(floor)).request_id == probe.request_id
    assert _steps_asked(request, first, second) == ["0", "1"]


async def test_a_chain_host_killed_before_sending_its_next_round_sends_it(floor: Floor) -> None:
    first = _start_planner(floor, "chained")
    await first.wait_line(READY)
    waits = await _follow_waits(floor)
    request = await _delegate(floor, "chain")
    await first.wait_line(r"paused at chained")
    killed_at_ms = time.time() * 1000
    assert first.kill() == -signal.SIGKILL
    second = _start_planner(floor, None)
    await second.wait_line(READY)
    answer = await _answer(floor)
    assert answer.request_id == request.request_id and answer.status == "success", answer
    assert "reviewer did review the code" in answer.result, answer.result
    assert "coder did code for the parser" in answer.result, answer.result
    assert _steps_asked(request, first, second) == ["0", "1", "2"]
    # The reviewer's deadline counts from when the round was sent again, not from the step.
    async with asyncio.timeout(10):
        await waits.answered.wait()
    sent_until = max(w.expires_ms[0] for w in waits.written if w.round_index == 1 and w.requests)
    assert sent_until >= killed_at_ms + DELEGATE_DEADLINE_MS, (sent_until, killed_at_ms)
    # Kept two days once answered: only what answering again needs, never the call's bytes.
    final = next(w for w in waits.written if w.final)
    assert final.call == b"" and not final.rounds and not final.results, final
    assert final.headers, final


@pytest.mark.parametrize(
    ("point", "goal"), [("answered", "rushed answer"), ("chained", "rushed chain")]
)
async def test_a_host_killed_after_a_reminder_moved_the_call_on_goes_on(
    floor: Floor, point: str, goal: str
) -> None:
    first = _start_planner(floor, point)
    await first.wait_line(READY)
    request = await _delegate(floor, goal)
    await first.wait_line(rf"paused at {point}")
    assert first.kill() == -signal.SIGKILL
    second = _start_planner(floor, None)
    await second.wait_line(READY)
    answer = await _answer(floor)
    assert answer.request_id == request.request_id, answer
    assert "Delegation timeout after 300ms" in answer.result, answer.result
    if goal == "rushed chain":
        assert answer.status == "partial", answer
        assert "reviewer did review the code" in answer.result, answer.result
        assert _steps_asked(request, first, second) == ["0", "1", "2"]
    else:
        assert answer.status == "failed", answer
        assert _steps_asked(request, first, second) == ["0", "1"]


@dataclass
class _Waits:
    """Every write of the planner's waits, in order, as its bucket stored them."""

    written: list[Wait]
    answered: asyncio.Event
    """Set at the first write holding an answer: every write before it has been seen."""


async def _follow_waits(floor: Floor) -> _Waits:
    waits = _Waits([], asyncio.Event())
    bucket = floor.ns.agent_bucket("waits", "planner")

    async def on_write(msg: Msg) -> None:
        if msg.data:
            wait = msgspec.json.decode(msg.data, type=Wait)
            waits.written.append(wait)
            if wait.final:
                waits.answered.set()

    await floor.js.subscribe(f"$KV.{bucket}.planner.wait.>", cb=on_write, ordered_consumer=True)
    return waits


def _steps_asked(request: DelegationRequest, *hosts: ProcessOutput) -> list[str]:
    """The steps the brain was asked for the request, across every process: once each."""
    asked = re.compile(rf'"msg":"brain asked".*"call_id":"{request.request_id}".*"step":(\d)')
    return sorted(m.group(1) for host in hosts for line in host.lines if (m := asked.search(line)))


async def test_a_stopped_handling_that_meets_the_call_answered_by_another_sends_that_answer(
    floor: Floor,
) -> None:
    """A third review: a handling stopped after its brain answered (a paused replica, SIGSTOP)
    while the call went to another process, which answered it and trimmed its wait to the
    answer; the first, let go on, met that wait and failed decoding the call it no longer
    holds. It sends the stored answer again (the person's copy is dropped as a duplicate)."""
    first = _start_planner(floor, "begin")
    await first.wait_line(READY)
    request = await _delegate(floor, "fan out")
    await first.wait_line(r"paused at begin")
    first.signal(signal.SIGSTOP)  # its handling stops telling JetStream it is in hand
    try:
        second = _start_planner(floor, None)
        await second.wait_line(READY)
        answer = await _answer(floor)  # the redelivered call, answered by the second
        assert answer.request_id == request.request_id and answer.status == "success", answer
    finally:
        first.signal(signal.SIGCONT)
    first.signal(signal.SIGUSR1)
    await first.wait_line(r"call answered meanwhile: its answer sent again")
    probe = await _delegate(floor, "fan out again")  # nothing more for the first request
    assert (await _answer(floor)).request_id == probe.request_id
    failed = [line for line in first.lines if '"msg":"handler failed"' in line]
    assert not failed, failed  # it was: DecodeError on the call the answered wait no longer holds
