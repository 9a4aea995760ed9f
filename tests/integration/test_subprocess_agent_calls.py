"""A local agent calls other agents through the bridge's optional frame pair (issue 15, item 1).

Against real child processes: a child offered agents asks two in one `parley.agent_calls.request`
(a fan-out: two requests), is sent their results in the next request's `tool_results`, and
answers from them; a child offered nothing gets seed 000's frame and nothing more; calls that
are malformed, unoffered or unreadable fail the request as INVALID_REQUEST at once. Then end
to end: a subprocess planner fans out to two scripted specialists through a real gate.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client as NATS

from actors.agent._profile import AgentProfile, SubprocessBrainConfig
from actors.agent._prompt import BrainCall
from actors.agent._reply import interpret_reply
from actors.agent.brains._protocol import BrainAnswer, BrainError
from actors.agent.brains._subprocess import SubprocessBrain
from actors.delegation import CallSubAgent, Delegate, RequestResult, ToolRound
from bus import EmbeddedServer
from schemas import (
    ErrorCode,
    Namespace,
    encode,
)
from tests.support.agents import start_agent, write_profile
from tests.support.delegation import delegate_as_person, person_request
from tests.support.gate import Decisions, Signer, make_bundle, publish_bundle, start_gate
from tests.support.processes import READY, REPO, parley_env

CALLING_AGENT = str(REPO / "tests" / "support" / "calling_agent.py")
EXAMPLE_AGENT = str(REPO / "examples" / "local_agent.py")

SEED_000_FIELDS = {
    "type",
    "request_id",
    "profile_id",
    "session_id",
    "turn_index",
    "mode",
    "objective",
    "remote_message",
    "history",
    "history_summary",
    "constraints",
}


def make_brain(program: str, timeout_s: float = 30.0) -> SubprocessBrain:
    config = SubprocessBrainConfig(
        backend="subprocess", command=(sys.executable, program), turn_timeout_s=timeout_s
    )
    return SubprocessBrain(AgentProfile(name="planner", brain=config), config)


def call(
    goal: str,
    *,
    delegates_to: tuple[str, ...] = (),
    sub_agents: tuple[str, ...] = (),
    rounds: tuple[ToolRound, ...] = (),
) -> BrainCall:
    return BrainCall(
        kind="delegation_request",
        envelope_id="e-1",
        call_id="c-1",
        session_id="s-1",
        goal=goal,
        task="the parser",
        delegates_to=delegates_to,
        sub_agents=sub_agents,
        rounds=rounds,
    )


def message_of(answer: BrainAnswer) -> str:
    interpreted = interpret_reply(answer.text)
    assert not interpreted.malformed, interpreted.problem
    return interpreted.reply.message


@pytest.fixture
async def brain() -> AsyncIterator[SubprocessBrain]:
    subject = make_brain(CALLING_AGENT)
    await subject.start()
    yield subject
    await subject.close()


async def test_a_child_asks_two_agents_in_one_frame_then_answers_from_their_results(
    brain: SubprocessBrain,
) -> None:
    offered = ("coder", "reviewer", "writer")
    asked = await brain.reply(call("plan", delegates_to=offered))
    assert asked.text == "asking around" and asked.usage.completion > 0
    assert [type(r) for r in asked.requests] == [Delegate, Delegate]
    first, second = asked.requests
    assert isinstance(first, Delegate) and isinstance(second, Delegate)
    assert (first.request_id, first.target_employee) == ("c1", "coder")
    assert (second.request_id, second.target_employee) == ("c2", "reviewer")
    assert first.objective == "part 1 of the parser"
    results = (
        RequestResult(request_id="c1", status="success", content="coder wrote it"),
        RequestResult(request_id="c2", status="timeout", content="Delegation timeout after 1ms"),
    )
    done = ToolRound(text=asked.text, requests=asked.requests, results=results)
    answered = await brain.reply(call("plan", delegates_to=offered, rounds=(done,)))
    assert answered.requests == ()
    assert message_of(answered) == (
        "gathered after 1 round(s): c1->coder [success] coder wrote it | "
        "c2->reviewer [timeout] Delegation timeout after 1ms"
    )
    assert brain.bridge.violations == 0 and brain.bridge.starts == 1


async def test_a_child_calls_a_sub_agent_with_seed_004s_arguments(brain: SubprocessBrain) -> None:
    asked = await brain.reply(call("[sub] plan", sub_agents=("checker",)))
    (request,) = asked.requests
    assert isinstance(request, CallSubAgent) and request.request_id == "s1"
    assert (request.args.agent_name, request.args.task) == ("checker", "check the parser")


async def test_the_new_fields_are_sent_only_when_used(brain: SubprocessBrain) -> None:
    results = (RequestResult(request_id="c1", status="success", content="ok"),)
    done = ToolRound(
        requests=(Delegate(request_id="c1", target_employee="coder", objective="x"),),
        results=results,
    )
    sent = {
        "plain": brain.request_for(call("plan")),
        "offered": brain.request_for(call("plan", delegates_to=("coder",))),
        "resumed": brain.request_for(call("plan", delegates_to=("coder",), rounds=(done,))),
        "past the round limit": brain.request_for(call("plan", rounds=(done,))),
    }
    fields = {
        name: set(json.loads(encode(frame))) - SEED_000_FIELDS for name, frame in sent.items()
    }
    assert fields == {
        "plain": set(),
        "offered": {"agents"},
        "resumed": {"agents", "tool_results"},
        "past the round limit": {"tool_results"},
    }
    offered = json.loads(encode(sent["resumed"]))
    assert offered["agents"] == {"delegates_to": ["coder"], "sub_agents": []}
    (resent,) = offered["tool_results"]
    assert resent["calls"][0]["name"] == "delegate_to_agent"
    assert resent["calls"][0]["arguments"]["target_employee"] == "coder"
    assert resent["results"] == [{"id": "c1", "status": "success", "content": "ok"}]
    # And the child itself, offered nothing, reads seed 000's frame with nothing added.
    plain = json.loads(message_of(await brain.reply(call("plan"))))
    assert plain == {"objective": "plan", "extra_fields": []}


async def test_a_child_that_never_sends_the_frame_is_unaffected_when_offered_agents() -> None:
    example = make_brain(EXAMPLE_AGENT)
    await example.start()
    try:
        offered = call("review this API", delegates_to=("coder",))
        assert "agents" in json.loads(encode(example.request_for(offered)))
        answer = await example.reply(offered)
    finally:
        await example.close()
    assert answer.requests == () and "review this API" in message_of(answer)
    assert example.bridge.violations == 0


@pytest.mark.parametrize(
    ("goal", "offered", "said", "violations"),
    [
        ("[malformed] plan", ("coder",), "c1: invalid arguments", 0),
        ("[malformed] plan", ("coder",), "c2: target_employee 'nobody' is not one of", 0),
        ("[unoffered] plan", (), "which offered no agents to call", 1),
        ("[unreadable] plan", ("coder",), "parley.agent_calls.request frame is malformed", 1),
    ],
)
async def test_bad_agent_calls_fail_the_request_at_once_as_invalid(
    brain: SubprocessBrain, goal: str, offered: tuple[str, ...], said: str, violations: int
) -> None:
    with pytest.raises(BrainError) as caught:
        await brain.reply(call(goal, delegates_to=offered))
    # INVALID_REQUEST, not the AGENT_UNAVAILABLE of a 30 s timeout: the request ended at once.
    assert caught.value.code == ErrorCode.INVALID_REQUEST and not caught.value.retryable
    assert said in caught.value.message
    assert brain.bridge.violations == violations
    # The child made a mistake, not a mess: it stays and answers the next request.
    plain = json.loads(message_of(await brain.reply(call("next"))))
    assert plain["objective"] == "next" and brain.bridge.starts == 1


SPECIALIST_SCRIPT = """
[[turn]]
message = "{name} did {goal}."
"""


@pytest.fixture
async def office(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> AsyncIterator[None]:
    js = nc.jetstream()
    signer = Signer.create(tmp_path)
    profiles: dict[str, dict[str, Any]] = {
        "cli": {"start_traces": True, "speaks_for_person": True, "allowed_targets": ("planner",)},
        "planner": {"allowed_targets": ("coder", "reviewer", "cli"), "max_fan_out": 3},
        "coder": {"allowed_targets": ("planner",)},
        "reviewer": {"allowed_targets": ("planner",)},
    }
    await publish_bundle(js, namespace, signer.sign(make_bundle(1, days=1, **profiles)))
    await Decisions(js, namespace).open()
    env = parley_env(nats_server.url, namespace.root, ack_wait_s="5")
    agents = tmp_path / "agents"
    command = json.dumps([sys.executable, CALLING_AGENT])
    paths = [
        write_profile(
            agents,
            "planner",
            f'backend = "subprocess"\ncommand = {command}\nturn_timeout_s = 30.0',
            extra='delegates_to = ["coder", "reviewer"]',
        ),
        *(
            write_profile(
                agents,
                name,
                f'backend = "scripted"\nscript = "{name}-script.toml"',
                script=SPECIALIST_SCRIPT,
            )
            for name in ("coder", "reviewer")
        ),
    ]
    gate = start_gate(nats_server.url, namespace, signer, ack_wait_s="5")
    hosts = [start_agent(str(path), env) for path in paths]
    try:
        for process in (gate, *hosts):
            await process.wait_line(READY)
        await gate.wait_line("policy bundle in force")
        yield
    finally:
        for process in (gate, *hosts):
            process.close()


async def test_a_subprocess_planner_fans_out_through_the_gate(
    office: None, nc: NATS, namespace: Namespace
) -> None:
    request = person_request("plan the release", text="the parser")
    answer = await delegate_as_person(nc.jetstream(), namespace, request)
    assert answer.request_id == request.request_id and answer.status == "success", answer
    assert answer.result.startswith("gathered after 1 round(s): c1->coder [success]"), answer
    assert "coder did part 1 of the parser." in answer.result
    assert "c2->reviewer [success]" in answer.result
    assert "reviewer did part 2 of the parser." in answer.result
