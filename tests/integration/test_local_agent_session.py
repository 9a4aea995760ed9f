"""The example local agent (examples/local_agent.py, run by deploy/agents/local.toml's
subprocess brain) in a real orchestrated session on one deployment: the gate, the router and
two agent hosts as real processes, `local` drafting and the demo's scripted `claude` as the
shared agent. In full_auto its drafts go to the shared agent, and it ends the run itself
(`objective_met`) once the shared agent has answered three times, well before maxTurns.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from bus import EmbeddedServer
from schemas import (
    HumanMessage,
    Namespace,
    Orchestration,
    SessionEvent,
    decode_envelope,
    new_id,
    utc_now,
)
from tests.support.processes import REPO
from tests.support.system import running_system
from tools._waiting import submit_as

OBJECTIVE = "review this API for security issues"
END = {"session_completed", "session_failed", "session_canceled"}


def shared_claude_policy(tmp_path: Path) -> Path:
    """The demo bundle (it has the person's `local` agent), with `claude` listed as a shared
    agent the router may call."""
    text = (REPO / "deploy/policy/demo.toml").read_text()
    text = text.replace('label = "demo-1"', 'label = "demo-1"\nshared_agents = ["claude"]', 1)
    routes = 'allowed_targets = ["gpt", "claude", "local", "planner"]'
    assert routes in text, "the demo bundle's router routes changed: update this test"
    text = text.replace(
        routes,
        routes + '\nallow_shared_agent_calls = true\nallowed_shared_device_ids = ["claude"]',
        1,
    )
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return path


async def test_the_example_local_agent_talks_to_the_shared_agent_until_its_objective_is_met(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    events: asyncio.Queue[SessionEvent] = asyncio.Queue()

    async def on_event(raw: Msg) -> None:
        envelope = decode_envelope(raw.data)
        if isinstance(envelope, SessionEvent):
            events.put_nowait(envelope)

    session_id = new_id()
    agents = {"local": "local", "claude": "claude"}  # the shipped profiles in deploy/agents
    policy = shared_claude_policy(tmp_path)
    async with running_system(nc, nats_server, namespace, tmp_path / "keys", agents, policy=policy):
        await nc.subscribe(namespace.events("cli", session_id), cb=on_event)
        await nc.flush()
        opening = HumanMessage(
            id=new_id(),
            created_at=utc_now(),
            text=OBJECTIVE,
            call_id=new_id(),
            mode="orchestrate",
            session_id=session_id,
            orchestration=Orchestration(
                local_agent="local", shared_agent="claude", mode="full_auto", max_turns=8
            ),
        )
        await submit_as(nc, namespace, "cli", opening)
        seen: list[SessionEvent] = []
        while not seen or seen[-1].event_type not in END:
            seen.append(await asyncio.wait_for(events.get(), 60))
    end = seen[-1]
    assert end.event_type == "session_completed", end
    assert end.stop_reason == "objective_met", end.payload
    outbound = [
        e for e in seen if e.event_type == "step_started" and e.payload.get("role") == "outbound"
    ]
    answers = [
        e.payload["message"]
        for e in seen
        if e.event_type == "step_completed" and e.payload.get("role") == "remote_agent"
    ]
    assert len(outbound) == len(answers) == 3, [e.event_type for e in seen]
    assert {e.speaker for e in outbound} == {"claude"}
    sent = [e.payload["message"] for e in outbound]
    assert OBJECTIVE in sent[0]
    # Each later message quotes the shared agent's answer before it.
    assert all(answer[:40] in message for answer, message in zip(answers, sent[1:], strict=False))
    last_draft = [e for e in seen if e.event_type == "step_completed"][-1]
    assert last_draft.payload["role"] == "local_agent" and last_draft.payload["final"] is True
    assert "answered 3 times" in last_draft.payload["message"]
