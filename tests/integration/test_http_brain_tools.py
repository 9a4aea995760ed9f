"""The OpenAI and Anthropic brains call other agents through their providers' own tools.

Against the local wire-format servers, each checking the provider's tool-calling rules (a
request that breaks them is refused with the provider's HTTP 400): the tools are offered
only when the call names agents; several tool calls in one reply are a fan-out, in order;
earlier rounds are re-sent as the provider's tool calls and results; a malformed tool call is
answered with what was wrong and repaired once, never sent; and, end to end through a real
gate, a tool call to a target the gate refuses comes back to the model as a failed result.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.aio.client import Client as NATS

from actors.agent._profile import AgentProfile, AnthropicBrainConfig, OpenAIBrainConfig
from actors.agent._prompt import BrainCall
from actors.agent.brains._anthropic import AnthropicBrain
from actors.agent.brains._openai import OpenAIBrain
from actors.agent.brains._protocol import BrainError
from actors.delegation import CallSubAgent, Delegate, RequestResult, ToolRound
from bus import EmbeddedServer
from schemas import (
    ContextFilter,
    DelegationResponse,
    ErrorCode,
    Namespace,
    SubAgentArgs,
)
from tests.support.agents import start_agent, write_profile
from tests.support.delegation import delegate_as_person, person_request
from tests.support.gate import Signer, make_bundle, publish_bundle, start_gate
from tests.support.llm_server import (
    Canned,
    WireServer,
    anthropic_message,
    anthropic_tool_use,
    openai_completion,
    openai_tool_calls,
)
from tests.support.processes import READY, parley_env

FINAL = json.dumps({"message": "The parser is written and reviewed.", "final": True})
CALL = BrainCall(
    kind="delegation_request",
    envelope_id="e-1",
    call_id="c-1",
    session_id="s-1",
    goal="Ship the parser",
    delegates_to=("coder", "reviewer"),
    sub_agents=("tester",),
)
FAN_OUT: tuple[tuple[str, str, dict[str, Any]], ...] = (
    (
        "call_a",
        "delegate_to_agent",
        {
            "target_employee": "coder",
            "objective": "Write the parser",
            "input": "the grammar",
            "context_hints": ["parser"],
            "max_tokens": 800,
            "deadline_ms": 5000,
        },
    ),
    ("call_b", "delegate_to_agent", {"target_employee": "reviewer", "objective": "Review it"}),
    (
        "call_c",
        "call_sub_agent",
        {
            "agent_name": "tester",
            "task": "Write tests",
            "context": {"last_messages": 4, "keywords": ["parser"]},
            "allowed_tools": ["read"],
        },
    ),
)
EXPECTED_REQUESTS = (
    Delegate(
        request_id="call_a",
        target_employee="coder",
        objective="Write the parser",
        input="the grammar",
        context_hints=("parser",),
        max_tokens=800,
        deadline_ms=5000,
    ),
    Delegate(request_id="call_b", target_employee="reviewer", objective="Review it"),
    CallSubAgent(
        request_id="call_c",
        args=SubAgentArgs(
            agent_name="tester",
            task="Write tests",
            context=ContextFilter(last_messages=4, keywords=("parser",)),
            allowed_tools=("read",),
        ),
    ),
)
DONE = ToolRound(
    text="Asking the coder and a stranger.",
    requests=(
        Delegate(request_id="call_a", target_employee="coder", objective="Write the parser"),
        Delegate(request_id="call_s", target_employee="stranger", objective="Who are you"),
    ),
    results=(
        RequestResult(request_id="call_a", status="success", content="def parse(): ..."),
        RequestResult(
            request_id="call_s",
            status="failed",
            content="stranger could not answer: TARGET_NOT_ALLOWED: planner may not call stranger",
        ),
    ),
)
CHAINED = ToolRound(
    requests=(Delegate(request_id="call_r", target_employee="reviewer", objective="Review it"),),
    results=(RequestResult(request_id="call_r", status="success", content="Looks right."),),
)


@dataclass(frozen=True)
class Provider:
    """One provider's side of these tests: its canned answers and where its requests put
    the tools and the answers to tool calls."""

    name: str

    def tool_reply(self, *calls: tuple[str, str, Any], text: str = "") -> Canned:
        """A reply calling tools; string arguments are sent as they are, objects as JSON."""
        if self.name == "openai":
            wire = [(i, n, a if isinstance(a, str) else json.dumps(a)) for i, n, a in calls]
            return openai_tool_calls(*wire, content=text or None)
        return anthropic_tool_use(*calls, text=text)

    def final(self, text: str = FINAL) -> Canned:
        return openai_completion(text) if self.name == "openai" else anthropic_message(text)

    def tools(self, body: dict[str, Any]) -> list[str] | None:
        """The names of the tools a request offers; None when it has no `tools`."""
        if "tools" not in body:
            return None
        if self.name == "openai":
            return [tool["function"]["name"] for tool in body["tools"]]
        return [tool["name"] for tool in body["tools"]]

    def parameters(self, body: dict[str, Any], name: str) -> dict[str, Any]:
        for tool in body["tools"]:
            if self.name == "openai" and tool["function"]["name"] == name:
                return dict(tool["function"]["parameters"])
            if self.name == "anthropic" and tool["name"] == name:
                return dict(tool["input_schema"])
        raise AssertionError(f"no tool {name}")

    def answers(self, body: dict[str, Any]) -> dict[str, str]:
        """The answers to the last tool calls a request carries, by tool call id."""
        messages = body["messages"]
        if self.name == "openai":
            tail = []
            for message in reversed(messages):
                if message["role"] != "tool":
                    break
                tail.append(message)
            return {m["tool_call_id"]: m["content"] for m in reversed(tail)}
        last = messages[-1]
        assert last["role"] == "user" and isinstance(last["content"], list)
        return {b["tool_use_id"]: b["content"] for b in last["content"]}

    def prompt(self, body: dict[str, Any]) -> str:
        """The text of the request's user prompt."""
        user = body["messages"][1 if self.name == "openai" else 0]
        assert user["role"] == "user"
        return str(user["content"])


PROVIDERS = [Provider("openai"), Provider("anthropic")]


@dataclass
class Wired:
    provider: Provider
    server: WireServer
    brain: OpenAIBrain | AnthropicBrain


@pytest.fixture(params=PROVIDERS, ids=lambda p: p.name)
async def wired(request: pytest.FixtureRequest) -> AsyncIterator[Wired]:
    provider: Provider = request.param
    server = WireServer(checks="openai" if provider.name == "openai" else "anthropic")
    await server.start()
    brain: OpenAIBrain | AnthropicBrain
    if provider.name == "openai":
        openai = OpenAIBrainConfig(backend="openai", base_url=f"{server.url}/v1", timeout_s=5)
        brain = OpenAIBrain(_profile(openai), openai)
    else:
        anthropic = AnthropicBrainConfig(backend="anthropic", base_url=server.url, timeout_s=5)
        brain = AnthropicBrain(_profile(anthropic), anthropic)
    await brain.start()
    yield Wired(provider, server, brain)
    await brain.close()
    await server.close()


def _profile(brain: OpenAIBrainConfig | AnthropicBrainConfig) -> AgentProfile:
    return AgentProfile(name="planner", model="model-x", brain=brain, max_output_tokens=321)


async def test_several_tool_calls_in_one_reply_are_a_fan_out_in_order(wired: Wired) -> None:
    wired.server.queue(wired.provider.tool_reply(*FAN_OUT, text="Asking the team."))
    answer = await wired.brain.reply(CALL)
    assert answer.requests == EXPECTED_REQUESTS
    assert answer.text == "Asking the team."
    assert answer.usage.total > 0
    (request,) = wired.server.requests
    assert wired.provider.tools(request.body) == ["delegate_to_agent", "call_sub_agent"]
    delegate = wired.provider.parameters(request.body, "delegate_to_agent")
    assert delegate["properties"]["target_employee"]["enum"] == ["coder", "reviewer"]
    assert delegate["required"] == ["target_employee", "objective"]
    sub_agent = wired.provider.parameters(request.body, "call_sub_agent")
    assert sub_agent["properties"]["agent_name"]["enum"] == ["tester"]
    assert set(sub_agent["properties"]["context"]["properties"]) == {
        "last_messages",
        "roles",
        "keywords",
        "include_summary",
        "include_workspace",
        "workspace_files",
        "max_age_seconds",
    }
    assert sub_agent["properties"]["max_context_tokens"]["default"] == 4000
    assert not wired.server.refused


async def test_tools_are_offered_only_for_the_agents_the_call_names(wired: Wired) -> None:
    cases: list[tuple[tuple[str, ...], tuple[str, ...], list[str] | None]] = [
        (("coder",), (), ["delegate_to_agent"]),
        ((), ("tester",), ["call_sub_agent"]),
        ((), (), None),
    ]
    for delegates_to, sub_agents, offered in cases:
        wired.server.queue(wired.provider.final())
        call = dataclasses.replace(CALL, delegates_to=delegates_to, sub_agents=sub_agents)
        answer = await wired.brain.reply(call)
        assert answer.text == FINAL and answer.requests == ()
        assert wired.provider.tools(wired.server.requests[-1].body) == offered, offered
    assert not wired.server.refused, wired.server.refused


async def test_the_next_round_replays_the_calls_and_shows_a_refused_one(wired: Wired) -> None:
    wired.server.queue(wired.provider.final())
    answer = await wired.brain.reply(dataclasses.replace(CALL, rounds=(DONE, CHAINED)))
    assert answer.text == FINAL and answer.requests == ()
    (request,) = wired.server.requests
    assert not wired.server.refused, wired.server.refused
    assert wired.provider.answers(request.body) == {"call_r": "status: success\nLooks right."}
    # The results go back as tool results, not a second time as prompt text.
    assert "Results of the agents you called" not in wired.provider.prompt(request.body)
    text = json.dumps(request.body)
    assert "status: failed\\nstranger could not answer: TARGET_NOT_ALLOWED" in text
    assert "def parse(): ..." in text


async def test_openai_replays_rounds_in_its_wire_format() -> None:
    server = WireServer(checks="openai")
    await server.start()
    config = OpenAIBrainConfig(backend="openai", base_url=f"{server.url}/v1", timeout_s=5)
    brain = OpenAIBrain(_profile(config), config)
    await brain.start()
    try:
        server.queue(openai_completion(FINAL))
        await brain.reply(dataclasses.replace(CALL, rounds=(DONE, CHAINED)))
    finally:
        await brain.close()
        await server.close()
    messages = server.requests[0].body["messages"]
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "tool",
    ]
    first = messages[2]
    assert first["content"] == "Asking the coder and a stranger."
    assert [c["id"] for c in first["tool_calls"]] == ["call_a", "call_s"]
    assert {c["type"] for c in first["tool_calls"]} == {"function"}
    stranger = json.loads(first["tool_calls"][1]["function"]["arguments"])
    assert stranger["target_employee"] == "stranger" and stranger["objective"] == "Who are you"
    assert messages[3] == {
        "role": "tool",
        "tool_call_id": "call_a",
        "content": "status: success\ndef parse(): ...",
    }
    assert messages[4]["tool_call_id"] == "call_s"
    assert "TARGET_NOT_ALLOWED" in messages[4]["content"]
    assert messages[5]["content"] is None and messages[5]["tool_calls"][0]["id"] == "call_r"


async def test_anthropic_replays_rounds_in_its_wire_format() -> None:
    server = WireServer(checks="anthropic")
    await server.start()
    config = AnthropicBrainConfig(backend="anthropic", base_url=server.url, timeout_s=5)
    brain = AnthropicBrain(_profile(config), config)
    await brain.start()
    try:
        server.queue(anthropic_message(FINAL))
        await brain.reply(dataclasses.replace(CALL, rounds=(DONE, CHAINED)))
    finally:
        await brain.close()
        await server.close()
    messages = server.requests[0].body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    text, coder, stranger = messages[1]["content"]
    assert text == {"type": "text", "text": "Asking the coder and a stranger."}
    assert (coder["type"], coder["id"], coder["name"]) == (
        "tool_use",
        "call_a",
        "delegate_to_agent",
    )
    assert stranger["input"]["target_employee"] == "stranger"
    ok, refused = messages[2]["content"]
    assert ok == {
        "type": "tool_result",
        "tool_use_id": "call_a",
        "content": "status: success\ndef parse(): ...",
    }
    assert refused["tool_use_id"] == "call_s" and refused["is_error"] is True
    assert "TARGET_NOT_ALLOWED" in refused["content"]
    assert [b["type"] for b in messages[3]["content"]] == ["tool_use"]


async def test_anthropic_repairs_its_json_after_tool_rounds() -> None:
    server = WireServer(checks="anthropic")
    await server.start()
    config = AnthropicBrainConfig(backend="anthropic", base_url=server.url, timeout_s=5)
    brain = AnthropicBrain(_profile(config), config)
    await brain.start()
    try:
        server.queue(anthropic_message("Done, in prose."), anthropic_message(FINAL))
        answer = await brain.reply(dataclasses.replace(CALL, rounds=(DONE,)))
    finally:
        await brain.close()
        await server.close()
    assert answer.text == FINAL and not server.refused, server.refused
    roles = [m["role"] for m in server.requests[1].body["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (("call_x", "search_web", {"query": "parsers"}), "unknown tool 'search_web'"),
        (("call_x", "delegate_to_agent", '{"target_employee": "coder",'), "not JSON"),
        (("call_x", "delegate_to_agent", {"target_employee": "coder"}), "`objective`"),
        (
            ("call_x", "delegate_to_agent", {"target_employee": "stranger", "objective": "Hi"}),
            "'stranger' is not one of the agents offered",
        ),
        (
            ("call_x", "call_sub_agent", {"agent_name": "tester", "task": "T", "mood": "x"}),
            "unknown fields mood",
        ),
    ],
    ids=["unknown-tool", "not-json", "missing-field", "target-not-offered", "unknown-field"],
)
async def test_a_malformed_tool_call_is_answered_and_repaired_once(
    wired: Wired, bad: tuple[str, str, Any], reason: str
) -> None:
    good = FAN_OUT[1]
    wired.server.queue(
        wired.provider.tool_reply(good, bad),
        wired.provider.tool_reply(("call_y", *FAN_OUT[0][1:])),
    )
    answer = await wired.brain.reply(CALL)
    assert answer.requests == (msgspec.structs.replace(EXPECTED_REQUESTS[0], request_id="call_y"),)
    first, repair = wired.server.requests
    assert not wired.server.refused, wired.server.refused
    sent = first.body["messages"]
    assert repair.body["messages"][: len(sent)] == sent, "the repair continues the conversation"
    answers = wired.provider.answers(repair.body)
    assert list(answers) == ["call_b", "call_x"], "every call of the reply is answered"
    assert "another tool call in the same reply was malformed" in answers["call_b"]
    assert answers["call_x"].startswith("Not sent: ") and reason in answers["call_x"]
    assert answer.usage.total == 2 * (30 if wired.provider.name == "anthropic" else 29)


async def test_a_tool_call_still_malformed_after_the_repair_is_an_error(wired: Wired) -> None:
    bad = ("call_x", "delegate_to_agent", {"target_employee": "stranger", "objective": "Hi"})
    wired.server.queue(wired.provider.tool_reply(bad), wired.provider.tool_reply(bad))
    with pytest.raises(BrainError) as caught:
        await wired.brain.reply(CALL)
    assert (caught.value.code, caught.value.retryable) == (ErrorCode.INVALID_REQUEST, False)
    assert "'stranger' is not one of the agents offered" in caught.value.message
    assert len(wired.server.requests) == 2, "repaired once, not more"


async def test_rounds_are_tool_calls_while_tools_are_offered_else_prompt_text(
    wired: Wired,
) -> None:
    """Past the host's round limit no tool is offered; the provider would refuse tool calls
    in a conversation without tools, so then the rounds are shown as text."""
    wired.server.queue(wired.provider.final(), wired.provider.final())
    await wired.brain.reply(dataclasses.replace(CALL, rounds=(DONE,)))
    await wired.brain.reply(
        dataclasses.replace(CALL, delegates_to=(), sub_agents=(), rounds=(DONE,))
    )
    with_tools, without = wired.server.requests
    assert not wired.server.refused, wired.server.refused
    assert list(wired.provider.answers(with_tools.body)) == ["call_a", "call_s"]
    assert wired.provider.tools(without.body) is None
    assert {m["role"] for m in without.body["messages"]} <= {"system", "user"}
    prompt = wired.provider.prompt(without.body)
    assert "Results of the agents you called (step 1):" in prompt
    assert "- call_s [failed] stranger could not answer: TARGET_NOT_ALLOWED" in prompt


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
async def test_a_refused_target_reaches_the_model_as_a_failed_tool_result(
    provider: Provider,
    nc: NATS,
    nats_server: EmbeddedServer,
    namespace: Namespace,
    tmp_path: Path,
) -> None:
    """End to end: the planner's model calls the coder and a stranger; the real gate refuses
    the stranger, the host hands the model a failed result, and the model answers."""
    js = nc.jetstream()
    server = WireServer(checks="openai" if provider.name == "openai" else "anthropic")
    await server.start()
    signer = Signer.create(tmp_path)
    bundle = make_bundle(
        1,
        cli={"start_traces": True, "speaks_for_person": True, "allowed_targets": ("planner",)},
        planner={"allowed_targets": ("coder", "cli"), "max_fan_out": 3},
        coder={"allowed_targets": ("planner",)},
    )
    await publish_bundle(js, namespace, signer.sign(bundle))
    env = parley_env(nats_server.url, namespace.root, ack_wait_s="5")
    base_url = f"{server.url}/v1" if provider.name == "openai" else server.url
    planner = write_profile(
        tmp_path / "agents",
        "planner",
        f'backend = "{provider.name}"\nbase_url = "{base_url}"\napi_key = "k-test"',
        extra='model = "model-x"\ndelegates_to = ["coder", "stranger"]',
    )
    coder = write_profile(
        tmp_path / "agents",
        "coder",
        'backend = "scripted"\nscript = "coder-script.toml"',
        script='[[turn]]\nmessage = "coder did {goal}"\n',
    )
    server.queue(
        provider.tool_reply(
            ("call_c", "delegate_to_agent", {"target_employee": "coder", "objective": "parse"}),
            ("call_s", "delegate_to_agent", {"target_employee": "stranger", "objective": "hi"}),
        ),
        provider.final(),
    )
    processes = [
        start_gate(nats_server.url, namespace, signer, ack_wait_s="5"),
        start_agent(str(planner), env),
        start_agent(str(coder), env),
    ]
    try:
        for process in processes:
            await process.wait_line(READY)
        await processes[0].wait_line("policy bundle in force")
        answer = await _delegate_as_person(nc, namespace, "Ship the parser")
    finally:
        for process in processes:
            process.close()
        await server.close()
    assert answer.status == "partial", answer
    assert not server.refused, server.refused
    assert len(server.requests) == 2
    answers = provider.answers(server.requests[1].body)
    assert list(answers) == ["call_c", "call_s"]
    assert (
        answers["call_c"].startswith("status: success") and "coder did parse" in answers["call_c"]
    )
    assert answers["call_s"].startswith("status: failed")
    assert "TARGET_NOT_ALLOWED" in answers["call_s"]


async def _delegate_as_person(nc: NATS, ns: Namespace, objective: str) -> DelegationResponse:
    """Delegate `objective` to the planner as the person; its answer, as delivered."""
    request = person_request(objective, text="the grammar")
    return await delegate_as_person(nc.jetstream(), ns, request)
