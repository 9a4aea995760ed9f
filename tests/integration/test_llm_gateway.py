"""Agents whose hosts hold no provider key: every model call through the gate to the LLM
gateway (`parley run llm`), which alone holds the key and calls the provider.

Real processes (gate, gateway, agent host) on a real nats-server; the provider is the local
OpenAI wire-format server (tests/support/llm_server.py), which records every request it gets,
so "never called" and "never saw the secret" are read from what it recorded.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.aio.client import Client as NATS

from bus import EmbeddedServer
from schemas import (
    DelegationResponse,
    Error,
    Guardrails,
    LlmPolicy,
    Namespace,
    SessionEvent,
    decode_envelope,
)
from tests.support.agents import start_agent, write_profile
from tests.support.delegation import person_request, submit_as_person
from tests.support.gate import Decisions, Signer, make_bundle, publish_bundle, start_gate
from tests.support.llm_server import Canned, WireServer, openai_completion, openai_tool_calls
from tests.support.processes import READY, ProcessOutput, parley_env, start_actor

FINAL = json.dumps({"message": "The parser is written.", "final": True})
KEY = "gateway-only-key-0123"
SECRET = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"


@dataclass
class System:
    nc: NATS
    ns: Namespace
    server: WireServer
    processes: list[ProcessOutput]
    llm_env: dict[str, str]

    def restart_gateway(self) -> ProcessOutput:
        """Start the gateway again (after it was killed), with the same settings."""
        gateway = start_actor("llm", "llm", self.llm_env)
        self.processes.append(gateway)
        return gateway

    async def delegate(
        self, objective: str, text: str = "", session_id: str | None = None
    ) -> DelegationResponse | Error:
        """Delegate to the planner as the person: its answer, or the error it got."""
        js = self.nc.jetstream()
        ns = self.ns
        inbox = await js.pull_subscribe(
            ns.deliver("cli"), durable="cli", stream=ns.stream("deliver")
        )
        request = person_request(objective, text=text, session_id=session_id)
        await submit_as_person(js, ns, request)
        while True:
            (msg,) = await inbox.fetch(1, timeout=60)
            await msg.ack_sync()
            answer = decode_envelope(msg.data)
            if isinstance(answer, DelegationResponse) and answer.request_id == request.request_id:
                return answer
            if isinstance(answer, Error):
                return answer


async def _system(
    nc: NATS,
    nats_server: EmbeddedServer,
    ns: Namespace,
    tmp_path: Path,
    llm_policy: LlmPolicy,
    planner_policy: dict[str, Any] | None = None,
    guardrails: Guardrails | None = None,
    model: str = "model-x",
    with_coder: bool = False,
    llm_settings: dict[str, str] | None = None,
) -> System:
    js = nc.jetstream()
    server = WireServer(checks="openai")
    await server.start()
    signer = Signer.create(tmp_path)
    bundle = make_bundle(
        1,
        cli={"start_traces": True, "speaks_for_person": True, "allowed_targets": ("planner",)},
        planner={"allowed_targets": ("llm", "cli", "coder"), **(planner_policy or {})},
        coder={"allowed_targets": ("planner",)},
        llm={},
    )
    bundle = msgspec.structs.replace(
        bundle, llm_policy=llm_policy, guardrails=guardrails or Guardrails()
    )
    await publish_bundle(js, ns, signer.sign(bundle))
    env = parley_env(nats_server.url, ns.root, ack_wait_s="5")
    delegates = '\ndelegates_to = ["coder"]' if with_coder else ""
    planner = write_profile(
        tmp_path / "agents", "planner", 'backend = "gateway"', extra=f'model = "{model}"{delegates}'
    )
    options = {
        "policy_keys": [str(signer.pub_path)],
        "tenant": "test",
        "providers": {"local": {"api": "openai", "base_url": f"{server.url}/v1", "api_key": KEY}},
        "models": {"model-x": "local", "model-y": "local"},
        "backoff_s": 0.05,
    }
    llm_env = parley_env(
        nats_server.url,
        ns.root,
        ack_wait_s="5",
        options=json.dumps(options),
        **(llm_settings or {}),
    )
    processes = [
        start_gate(nats_server.url, ns, signer, ack_wait_s="5"),
        start_actor("llm", "llm", llm_env),
        start_agent(str(planner), env),
    ]
    if with_coder:
        coder = write_profile(
            tmp_path / "agents",
            "coder",
            'backend = "scripted"\nscript = "coder-script.toml"',
            script='[[turn]]\nmessage = "coder did {goal}"\n',
        )
        processes.append(start_agent(str(coder), env))
    for process in processes:
        await process.wait_line(READY)
    await processes[0].wait_line("policy bundle in force")
    return System(nc, ns, server, processes, llm_env)


@pytest.fixture
async def closing() -> AsyncIterator[list[System]]:
    systems: list[System] = []
    yield systems
    for system in systems:
        for process in system.processes:
            process.close()
        await system.server.close()


async def test_an_agent_without_a_key_answers_through_the_gateway(
    nc: NATS,
    nats_server: EmbeddedServer,
    namespace: Namespace,
    tmp_path: Path,
    closing: list[System],
) -> None:
    system = await _system(
        nc, nats_server, namespace, tmp_path, LlmPolicy(allowed_models=("model-x",))
    )
    closing.append(system)
    system.server.queue(openai_completion(FINAL, prompt_tokens=40, completion_tokens=9))
    answer = await system.delegate("Write the parser")
    assert isinstance(answer, DelegationResponse), answer
    assert answer.status == "success", answer
    assert answer.result == "The parser is written."
    assert answer.token_usage.total == 49  # as the provider reported it, through the gateway
    (request,) = system.server.requests
    assert request.headers["authorization"] == f"Bearer {KEY}"  # the gateway's key alone
    assert request.body["model"] == "model-x"
    profile = (tmp_path / "agents" / "planner.toml").read_text()
    assert "key" not in profile


async def test_the_person_sees_each_model_call_on_their_timeline_without_its_contents(
    nc: NATS,
    nats_server: EmbeddedServer,
    namespace: Namespace,
    tmp_path: Path,
    closing: list[System],
) -> None:
    """llm_request_started and llm_request_completed, with the model, tokens in and out,
    latency and the guardrails' decisions by rule id; never the prompt or the answer."""
    system = await _system(
        nc, nats_server, namespace, tmp_path, LlmPolicy(allowed_models=("model-x",))
    )
    closing.append(system)
    system.server.queue(openai_completion(FINAL, prompt_tokens=40, completion_tokens=9))
    answer = await system.delegate("Deploy it", text=f"with {SECRET}", session_id="sess-llm")
    assert isinstance(answer, DelegationResponse), answer
    js = nc.jetstream()
    timeline = await js.pull_subscribe(
        namespace.events("cli", "sess-llm"), durable="timeline", stream=namespace.stream("events")
    )
    events: list[SessionEvent] = []
    while len(events) < 2:
        for msg in await timeline.fetch(1, timeout=20):
            event = decode_envelope(msg.data)
            if isinstance(event, SessionEvent) and event.event_type.startswith("llm_"):
                events.append(event)
    started, completed = events
    assert started.event_type == "llm_request_started"
    assert (started.speaker, started.payload["model"]) == ("planner", "model-x")
    assert completed.event_type == "llm_request_completed"
    assert completed.payload["status"] == "succeeded"
    assert (completed.payload["tokens_in"], completed.payload["tokens_out"]) == (40, 9)
    assert completed.payload["latency_ms"] >= 0
    assert {"rule_id": "redact_secrets", "stage": "request", "action": "redacted", "count": 1} in (
        completed.payload["guardrails"]
    )
    told = json.dumps([e.payload for e in events])
    assert "Deploy it" not in told and "parser is written" not in told


async def test_a_model_outside_the_allowlist_is_refused_before_the_provider(
    nc: NATS,
    nats_server: EmbeddedServer,
    namespace: Namespace,
    tmp_path: Path,
    closing: list[System],
) -> None:
    """model-y is the deployment's, but the planner's profile allows only model-x."""
    system = await _system(
        nc,
        nats_server,
        namespace,
        tmp_path,
        LlmPolicy(allowed_models=("model-x", "model-y")),
        planner_policy={"allowed_models": ("model-x",)},
        model="model-y",
    )
    closing.append(system)
    answer = await system.delegate("Write the parser")
    assert isinstance(answer, Error), answer
    assert answer.code == "CAPABILITY_DENIED"
    assert "may not call model 'model-y'" in answer.message
    assert system.server.requests == []


async def test_a_prompt_over_max_input_tokens_never_reaches_the_provider(
    nc: NATS,
    nats_server: EmbeddedServer,
    namespace: Namespace,
    tmp_path: Path,
    closing: list[System],
) -> None:
    policy = LlmPolicy(allowed_models=("model-x",), max_input_tokens=300)
    system = await _system(nc, nats_server, namespace, tmp_path, policy)
    closing.append(system)
    answer = await system.delegate("Write the parser", text="grammar " * 400)
    assert isinstance(answer, Error), answer
    assert answer.code == "LLM_BUDGET_EXCEEDED"
    assert "over max_input_tokens 300" in answer.message
    assert system.server.requests == []


async def test_an_answer_over_max_output_tokens_is_refused(
    nc: NATS,
    nats_server: EmbeddedServer,
    namespace: Namespace,
    tmp_path: Path,
    closing: list[System],
) -> None:
    """The cap is passed to the provider; one that writes past it anyway is not believed."""
    policy = LlmPolicy(allowed_models=("model-x",), max_output_tokens=50)
    system = await _system(nc, nats_server, namespace, tmp_path, policy)
    closing.append(system)
    system.server.queue(openai_completion(FINAL, completion_tokens=400))
    answer = await system.delegate("Write the parser")
    (request,) = system.server.requests
    assert request.body["max_tokens"] == 50  # the profile asked for 1024: the bundle caps it
    assert isinstance(answer, Error), answer
    assert answer.code == "LLM_BUDGET_EXCEEDED"
    assert "400 completion tokens, over the cap of 50" in answer.message


async def test_a_secret_in_a_prompt_never_reaches_the_provider(
    nc: NATS,
    nats_server: EmbeddedServer,
    namespace: Namespace,
    tmp_path: Path,
    closing: list[System],
) -> None:
    system = await _system(
        nc, nats_server, namespace, tmp_path, LlmPolicy(allowed_models=("model-x",))
    )
    closing.append(system)
    system.server.queue(openai_completion(FINAL))
    answer = await system.delegate("Deploy it", text=f"use the token {SECRET} to push")
    assert isinstance(answer, DelegationResponse), answer
    (request,) = system.server.requests
    sent = json.dumps(request.body)
    assert SECRET not in sent
    assert "[REDACTED:github_token:" in sent


async def test_a_bundle_deny_rule_stops_the_request_with_its_rule_id(
    nc: NATS,
    nats_server: EmbeddedServer,
    namespace: Namespace,
    tmp_path: Path,
    closing: list[System],
) -> None:
    from schemas import GuardrailRule

    rules = (GuardrailRule(rule_id="no_payroll", stage="request", pattern=r"payroll"),)
    system = await _system(
        nc,
        nats_server,
        namespace,
        tmp_path,
        LlmPolicy(allowed_models=("model-x",)),
        guardrails=Guardrails(rules=rules),
    )
    closing.append(system)
    answer = await system.delegate("Summarise the PAYROLL file")
    assert isinstance(answer, Error), answer
    assert answer.code == "LLM_GUARDRAIL_BLOCKED"
    assert "no_payroll" in answer.message
    assert system.server.requests == []


async def test_the_gateway_killed_mid_call_asks_again_and_answers_once(
    nc: NATS,
    nats_server: EmbeddedServer,
    namespace: Namespace,
    tmp_path: Path,
    closing: list[System],
) -> None:
    """SIGKILLed while the provider has the request and no answer is stored: the redelivered
    request finds nothing stored and asks the provider again; one answer reaches the agent,
    and the gate admits exactly one llm_response."""
    system = await _system(
        nc, nats_server, namespace, tmp_path, LlmPolicy(allowed_models=("model-x",))
    )
    closing.append(system)
    decisions = await Decisions(nc.jetstream(), namespace).open()
    system.server.queue(Canned(hang=True), openai_completion(FINAL, completion_tokens=9))
    delegation = asyncio.ensure_future(system.delegate("Write the parser"))
    await asyncio.wait_for(system.server.received.wait(), 30)
    gateway = system.processes[1]
    assert gateway.kill() == -signal.SIGKILL
    await system.restart_gateway().wait_line(READY)
    answer = await asyncio.wait_for(delegation, 60)
    assert isinstance(answer, DelegationResponse), answer
    assert answer.status == "success", answer
    assert len(system.server.requests) == 2  # asked again: nothing had been answered
    assert system.server.requests[0].body == system.server.requests[1].body
    seen: list[tuple[str, bool]] = []
    while True:
        try:
            decision = await decisions.next(timeout=2)
        except TimeoutError:
            break
        if decision.envelope_kind == "llm_response":
            seen.append((decision.rule, decision.allowed))
    assert seen == [("allow", True)], seen


async def test_a_trace_over_max_session_tokens_is_stopped_by_what_the_provider_reported(
    nc: NATS,
    nats_server: EmbeddedServer,
    namespace: Namespace,
    tmp_path: Path,
    closing: list[System],
) -> None:
    """The first model call reports 120 tokens of a trace's 100: the coder still answers the
    call it made, but the planner's next model call is refused before the provider."""
    policy = LlmPolicy(allowed_models=("model-x",), max_session_tokens=100)
    system = await _system(nc, nats_server, namespace, tmp_path, policy, with_coder=True)
    closing.append(system)
    arguments = json.dumps({"target_employee": "coder", "objective": "Write it"})
    system.server.queue(
        openai_tool_calls(
            ("call_1", "delegate_to_agent", arguments), prompt_tokens=90, completion_tokens=30
        ),
        openai_completion(FINAL),
    )
    answer = await system.delegate("Write the parser")
    assert isinstance(answer, Error), answer
    assert answer.code == "LLM_BUDGET_EXCEEDED"
    assert "has spent 120 of its 100 tokens" in answer.message
    assert len(system.server.requests) == 1


async def test_a_model_call_after_a_round_says_where_the_results_it_shows_came_from(
    nc: NATS,
    nats_server: EmbeddedServer,
    namespace: Namespace,
    tmp_path: Path,
    closing: list[System],
) -> None:
    """Seed 002 §12.2's `contextMetadata.sourceProvenance`: the planner's second model call
    shows it the coder's answer, so the call names the coder as an untrusted source, and
    the person's timeline shows it with the call (never the answer's words)."""
    policy = LlmPolicy(allowed_models=("model-x",))
    system = await _system(nc, nats_server, namespace, tmp_path, policy, with_coder=True)
    closing.append(system)
    arguments = json.dumps({"target_employee": "coder", "objective": "Write it"})
    system.server.queue(
        openai_tool_calls(("call_1", "delegate_to_agent", arguments)),
        openai_completion(FINAL),
    )
    answer = await system.delegate("Write the parser", session_id="sess-sources")
    assert isinstance(answer, DelegationResponse), answer
    timeline = await nc.jetstream().pull_subscribe(
        namespace.events("cli", "sess-sources"), durable="tl", stream=namespace.stream("events")
    )
    started: list[SessionEvent] = []
    while len(started) < 2:
        for msg in await timeline.fetch(1, timeout=20):
            event = decode_envelope(msg.data)
            if isinstance(event, SessionEvent) and event.event_type == "llm_request_started":
                started.append(event)
    first, second = started
    assert first.payload["sources"] == []
    assert second.payload["sources"] == [
        {"source_type": "agent", "path": "coder", "trust_level": "untrusted"}
    ]
    assert "coder did" not in json.dumps(second.payload)
