"""Agents that call agents, end to end (issue 15): seed 003's three modes through the real gate.

A person (the test, as `cli`) delegates a task to `planner`, a real agent host whose scripted
brain asks other agents first: three specialists at once (fan-out), one after another with
the first one's result handed on (chain), or one too slow for its deadline (partial). The
gate, the planner and the specialists are real processes on a real nats-server; the test
reads what the gate delivers back to the person.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from bus import EmbeddedServer
from schemas import (
    DelegationResponse,
    Namespace,
)
from tests.support.agents import start_agent, write_profile
from tests.support.delegation import delegate_as_person, person_request
from tests.support.gate import Decisions, Signer, make_bundle, publish_bundle, start_gate
from tests.support.processes import READY, ProcessOutput, parley_env

pytestmark = pytest.mark.chaos

SPECIALISTS = ("coder", "reviewer", "writer", "sloth")

PLANNER_SCRIPT = """
[[turn]]
goal = "fan out"
step = 0
calls = [
  { to = "coder", objective = "code for {task}" },
  { to = "reviewer", objective = "review of {task}" },
  { to = "writer", objective = "docs for {task}" },
]

[[turn]]
goal = "chain"
step = 0
calls = [{ to = "coder", objective = "code for {task}" }]

[[turn]]
goal = "chain"
step = 1
calls = [{ to = "reviewer", objective = "review the code", chain = true }]

[[turn]]
goal = "slow"
step = 0
calls = [
  { to = "coder", objective = "code for {task}" },
  { to = "sloth", objective = "take your time", deadline_ms = 5000 },
]

[[turn]]
goal = "staggered"
step = 0
calls = [
  { to = "sloth", objective = "take your time", deadline_ms = 1000 },
  { to = "sloth", objective = "take your time again", deadline_ms = 2500 },
]

[[turn]]
goal = "refused"
step = 0
calls = [
  { to = "coder", objective = "code for {task}" },
  { to = "stranger", objective = "who are you" },
]

[[turn]]
goal = "too many"
step = 0
calls = [
  { to = "coder", objective = "code for {task}" },
  { to = "reviewer", objective = "review of {task}" },
  { to = "writer", objective = "docs for {task}" },
  { to = "sloth", objective = "tests for {task}" },
]

[[turn]]
goal = "twice"
step = 0
calls = [
  { to = "coder", objective = "extract receipt" },
  { to = "coder", objective = "extract receipt" },
]

[[turn]]
goal = "deep"
step = 0
calls = [{ to = "coder", objective = "go deeper" }]

[[turn]]
goal = "loop"
step = 0
calls = [{ to = "coder", objective = "loop back" }]

[[turn]]
goal = "filtered"
step = 0

[[turn.calls]]
tool = "call_sub_agent"
to = "reviewer"
objective = "check it"
context = { keywords = ["bug"], last_messages = 2 }

[[turn]]
goal = "tools"
step = 0
calls = [
  { tool = "call_sub_agent", to = "reviewer", objective = "run it", allowed_tools = ["shell"] },
  { tool = "call_sub_agent", to = "reviewer", objective = "read", allowed_tools = ["read_file"] },
]

[[turn]]
goal = "nested"
step = 0
calls = [{ tool = "call_sub_agent", to = "reviewer", objective = "nest further" }]

[[turn]]
goal = "report"
message = "Two libraries do this."

[turn.report]
summary = "two libraries"
new_facts = ["csvkit streams rows"]
confidence = 80
requires_followup = true
used_sources = [{ owner_scope = "web", source_id = "pypi:csvkit", relevance = 0.9 }]
artifacts = [{ type = "url", value = "https://pypi.org/project/csvkit/", label = "csvkit" }]

[[turn]]
message = "planner gathered: {results}"
final = true
"""

SPECIALIST_SCRIPT = """
[[turn]]
goal = "take your time"
delay_s = 6
message = "too late"

[[turn]]
goal = "go deeper"
step = 0
calls = [{ to = "reviewer", objective = "deeper still" }]

[[turn]]
goal = "loop back"
step = 0
calls = [{ to = "planner", objective = "back to you" }]

[[turn]]
goal = "nest further"
step = 0
calls = [{ tool = "call_sub_agent", to = "writer", objective = "one level more" }]

[[turn]]
step = 1
message = "{name} heard back: {results}"

[[turn]]
kind = "sub_agent_call"
goal = "check it"
message = "{name} saw: {transcript}"

[[turn]]
message = "{name} did {goal}. {task}"
"""


@dataclass
class Office:
    js: JetStreamContext
    ns: Namespace
    decisions: Decisions
    planner: ProcessOutput


@pytest.fixture
async def office(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> AsyncIterator[Office]:
    js = nc.jetstream()
    signer = Signer.create(tmp_path)
    profiles: dict[str, dict[str, Any]] = {
        "cli": {"start_traces": True, "speaks_for_person": True, "allowed_targets": ("planner",)},
        "planner": {
            "allowed_targets": (*SPECIALISTS, "cli"),
            "max_fan_out": 3,
            "allow_sub_agent_calls": True,
            "tools_allowed": ("read_file",),  # what it may pass on, narrowed down the chain
        },
    }
    profiles |= {name: {"allowed_targets": ("planner",)} for name in SPECIALISTS}
    profiles["coder"] = {"allowed_targets": ("planner", "reviewer")}
    profiles["reviewer"] = {
        "allowed_targets": ("planner", "writer"),
        "allow_sub_agent_calls": True,
        "tools_allowed": ("read_file",),
    }
    bundle = make_bundle(1, days=1, **profiles)
    await publish_bundle(js, namespace, signer.sign(bundle))
    decisions = await Decisions(js, namespace).open()
    env = parley_env(nats_server.url, namespace.root, ack_wait_s="5")
    agents = tmp_path / "agents"
    planner = write_profile(
        agents,
        "planner",
        'backend = "scripted"\nscript = "planner-script.toml"',
        script=PLANNER_SCRIPT,
        extra=f"delegates_to = {json.dumps([*SPECIALISTS, 'stranger'])}\n"
        'allow_sub_agent_calls = true\nsub_agents = ["reviewer"]',
    )
    calls = {
        "coder": 'delegates_to = ["reviewer", "planner"]',
        "reviewer": 'allow_sub_agent_calls = true\nsub_agents = ["writer"]',
    }
    paths = [planner] + [
        write_profile(
            agents,
            name,
            f'backend = "scripted"\nscript = "{name}-script.toml"',
            script=SPECIALIST_SCRIPT,
            extra=calls.get(name, ""),
        )
        for name in SPECIALISTS
    ]
    gate = start_gate(nats_server.url, namespace, signer, ack_wait_s="5")
    hosts = [start_agent(str(path), env) for path in paths]
    try:
        for process in (gate, *hosts):
            await process.wait_line(READY)
        await gate.wait_line("policy bundle in force")
        yield Office(js, namespace, decisions, hosts[0])
    finally:
        for process in (gate, *hosts):
            process.close()


async def _delegate(
    office: Office, objective: str, facts: tuple[str, ...] = ()
) -> DelegationResponse:
    """Delegate `objective` to the planner as the person; its answer, as delivered."""
    request = person_request(objective, text="the parser", facts=facts)
    return await delegate_as_person(office.js, office.ns, request)


async def test_a_fan_out_gathers_every_answer(office: Office) -> None:
    answer = await _delegate(office, "fan out")
    assert answer.status == "success", answer
    for name, task in (("coder", "code for"), ("reviewer", "review of"), ("writer", "docs for")):
        assert f"{name} did {task} the parser" in answer.result, answer.result
    assert answer.duration_ms is not None and answer.duration_ms > 0
    # The planner's tokens count both of its brain calls: more than its last one alone.
    assert answer.token_usage.total > answer.token_usage.prompt + answer.token_usage.completion
    assert answer.target_employee == "planner"


async def test_a_delegate_s_answer_carries_every_seed_003_field_its_brain_gave(
    office: Office,
) -> None:
    answer = await _delegate(office, "report")
    assert answer.status == "success" and answer.result == "Two libraries do this.", answer
    assert answer.summary == "two libraries"
    assert answer.new_facts == ("csvkit streams rows",)
    assert answer.confidence == 80 and answer.requires_followup
    (source,) = answer.used_sources
    assert (source.owner_scope, source.source_id, source.relevance) == ("web", "pypi:csvkit", 0.9)
    (artifact,) = answer.artifacts
    assert (artifact.type, artifact.value, artifact.label) == (
        "url",
        "https://pypi.org/project/csvkit/",
        "csvkit",
    )


async def test_a_chain_hands_the_first_result_to_the_next_agent(office: Office) -> None:
    answer = await _delegate(office, "chain")
    assert answer.status == "success", answer
    # The reviewer saw the coder's result as seed 003's intermediate_results.
    assert "reviewer did review the code" in answer.result, answer.result
    assert "Intermediate results:" in answer.result and "coder did code for" in answer.result


async def test_a_deadline_missed_gives_partial_results(office: Office) -> None:
    answer = await _delegate(office, "slow")
    assert answer.status == "partial", answer
    assert "coder did code for the parser" in answer.result
    assert "Delegation timeout after 5000ms" in answer.result
    # The sloth's answer comes after all: the gate admits and audits it, the planner ignores it.
    await office.planner.wait_line(r'"msg":"late answer ignored"')
    assert "too late" not in answer.result


async def test_requests_with_different_deadlines_each_time_out_at_their_own(
    office: Office,
) -> None:
    # The round's reminder times out the first at 1 s and must wait on for the second.
    answer = await _delegate(office, "staggered")
    assert answer.status == "failed", answer
    assert "Delegation timeout after 1000ms" in answer.result, answer.result
    assert "Delegation timeout after 2500ms" in answer.result, answer.result


async def test_a_refused_request_reaches_the_brain_as_a_failed_result(office: Office) -> None:
    answer = await _delegate(office, "refused")
    assert answer.status == "partial", answer
    assert "coder did code for the parser" in answer.result
    assert "stranger" in answer.result and "TARGET_NOT_ALLOWED" in answer.result


async def test_one_more_than_the_fan_out_limit_is_refused_with_seed_003s_text(
    office: Office,
) -> None:
    answer = await _delegate(office, "too many")
    assert answer.status == "partial", answer
    assert "Too many concurrent delegates (4/3)" in answer.result, answer.result


async def test_delegation_stops_at_the_depth_limit(office: Office) -> None:
    """cli -> planner -> coder -> reviewer: the coder, at depth 2, may not delegate."""
    answer = await _delegate(office, "deep")
    # The coder answered with its one delegation refused: seed 003's aggregate says failed.
    assert answer.status == "failed", answer
    assert "Delegation depth limit reached (2/2)" in answer.result, answer.result


async def test_a_delegation_back_up_the_chain_is_a_cycle(office: Office) -> None:
    answer = await _delegate(office, "loop")
    assert "Cycle detected: planner is already on the call chain" in answer.result, answer.result


async def test_a_sub_agent_sees_only_its_filtered_context(office: Office) -> None:
    facts = ("the parser is slow", "lunch is at noon", "the parser has a bug")
    answer = await _delegate(office, "filtered", facts)
    assert answer.status == "success", answer
    assert "reviewer saw: [user] the parser has a bug" in answer.result, answer.result
    for hidden in ("lunch", "slow"):
        assert hidden not in answer.result, answer.result


async def test_a_sub_agent_may_not_call_on_without_allow_nested_calls(office: Office) -> None:
    answer = await _delegate(office, "nested")
    assert "reviewer was called as a sub-agent without allow_nested_calls" in answer.result, (
        answer.result
    )


async def test_the_same_objective_twice_at_once_is_a_cycle(office: Office) -> None:
    """Seed 003's test 2: a second call with an objective already in progress."""
    answer = await _delegate(office, "twice")
    assert answer.status == "partial", answer
    assert "coder did extract receipt" in answer.result, answer.result
    assert (
        "Cycle detected: planner -> coder with same objective already in progress." in answer.result
    ), answer.result


async def test_a_sub_agent_is_given_only_tools_it_is_allowed(office: Office) -> None:
    """Seed 004's tool restrictions: `allowed_tools` narrows what the callee's policy allows,
    never widens it."""
    answer = await _delegate(office, "tools")
    assert answer.status == "partial", answer
    assert "reviewer did read." in answer.result, answer.result
    assert "reviewer may not be given tool 'shell'" in answer.result, answer.result
