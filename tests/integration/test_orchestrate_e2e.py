"""Seed 000's orchestrated sessions end to end: the gate, the router and two agent hosts as
real processes (`local`, the person's own agent, and `byte-doc`, listed as a shared agent in
the bundle), driven as a person drives them: a `human_message` with `mode = "orchestrate"`
and `control` envelopes through the gate, the timeline followed on
`parley.events.cli.<session>`. Verification 2 (the loop), 3 (manual approvals), 4 (full_auto
to maxTurns), 5 (pause, resume, stop), 9 (the local agent killed mid-run) and 10 (bounded
history), and `parley orchestrate` as a person runs it.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from bus import EmbeddedServer, TraceHeaders
from schemas import (
    Control,
    Error,
    HumanMessage,
    Namespace,
    Orchestration,
    SessionEvent,
    decode_envelope,
    encode,
    new_id,
    utc_now,
)
from tests.support.agents import write_profile
from tests.support.processes import REPO
from tests.support.system import System, finished, parley_cli, running_system

OBJECTIVE = "review this API for security issues"
LOCAL_SCRIPT = """
[[turn]]
goal = "relay"
round = 1
message = "Local turn {round}."
handoff = { to = "byte-doc", task = "Your turn." }
delay_s = 2

[[turn]]
goal = "relay"
message = "Local turn {round}."
handoff = { to = "byte-doc", task = "Your turn." }

[[turn]]
goal = "slow"
round = 1
message = "Slow draft {round}: which endpoints need auth?"
delay_s = 3

[[turn]]
goal = "hang"
from_round = 2
message = "never sent"
delay_s = 120

[[turn]]
goal = "secret"
message = "Try the key AKIAIOSFODNN7EXAMPLE on /admin."

[[turn]]
message = "Draft {round}: which endpoints need auth?"
"""
REMOTE_SCRIPT = """
[[turn]]
goal = "relay"
message = "Remote turn {round} on: {task}"
handoff = { to = "local", task = "Your turn." }

[[turn]]
message = "Answer {round} to: {task}"
"""
END = {"session_completed", "session_failed", "session_canceled"}


def orchestration_policy(tmp_path: Path) -> Path:
    """The demo bundle, plus the shared agent `byte-doc` the router may call."""
    text = (REPO / "deploy/policy/demo.toml").read_text()
    text = text.replace('label = "demo-1"', 'label = "demo-1"\nshared_agents = ["byte-doc"]', 1)
    routes = 'allowed_targets = ["gpt", "claude", "local", "planner"]'
    assert routes in text, "the demo bundle's router routes changed: update this test"
    text = text.replace(
        routes,
        'allowed_targets = ["gpt", "claude", "planner", "local", "byte-doc"]\n'
        "allow_shared_agent_calls = true\n"
        'allowed_shared_device_ids = ["byte-doc"]',
        1,
    )
    text += '\n[profiles.byte-doc]\nallowed_targets = ["router"]\n'

    path = tmp_path / "policy.toml"
    path.write_text(text)
    return path


def agents(tmp_path: Path) -> dict[str, str]:
    profiles = tmp_path / "profiles"
    local = write_profile(
        profiles, "local", 'backend = "scripted"\nscript = "local-script.toml"', script=LOCAL_SCRIPT
    )
    remote = write_profile(
        profiles,
        "byte-doc",
        'backend = "scripted"\nscript = "byte-doc-script.toml"',
        script=REMOTE_SCRIPT,
    )
    return {"local": str(local), "byte-doc": str(remote)}


@pytest.fixture
async def system(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> AsyncIterator[System]:
    options = {
        # A killed agent is judged gone after 3 s of silence (beats every 0.5 s). Two missed
        # beats (1 s) judged a live agent gone on a loaded CI machine: its last beat was 1.3 s
        # old when the router looked, and a session failed `AGENT_UNAVAILABLE` mid-turn.
        "missed_beats": 6,
        "start_grace_s": 5,
        "orchestration": {"max_history_turns": 2},
    }
    async with running_system(
        nc,
        nats_server,
        namespace,
        tmp_path / "keys",
        agents(tmp_path),
        policy=orchestration_policy(tmp_path),
        router_options=options,
        heartbeat_s="0.5",
    ) as running:
        yield running


class Person:
    """The person at a terminal: opens a session, steers it, reads its timeline."""

    def __init__(self, nc: NATS, ns: Namespace, js: JetStreamContext | None = None) -> None:
        self.nc, self.ns = nc, ns
        self.js = js or nc.jetstream()
        self.session_id = new_id()
        self.events: asyncio.Queue[SessionEvent | Error] = asyncio.Queue()
        self.seen: list[SessionEvent] = []

    async def _on(self, raw: Msg) -> None:
        envelope = decode_envelope(raw.data)
        if isinstance(envelope, SessionEvent | Error):
            self.events.put_nowait(envelope)

    async def submit(self, envelope: HumanMessage | Control) -> None:
        headers = TraceHeaders(trace_id=envelope.id, origin="cli").to_headers(envelope.id)
        await self.js.publish(self.ns.submit("cli"), encode(envelope), headers=headers)

    async def open(self, objective: str = OBJECTIVE, shared: str = "byte-doc", **spec: Any) -> None:
        await self.nc.subscribe(self.ns.events("cli", self.session_id), cb=self._on)
        await self.nc.flush()
        await self.submit(
            HumanMessage(
                id=new_id(),
                created_at=utc_now(),
                text=objective,
                call_id=new_id(),
                mode="orchestrate",
                session_id=self.session_id,
                orchestration=Orchestration(local_agent="local", shared_agent=shared, **spec),
            )
        )

    async def control(self, action: str, **fields: Any) -> None:
        await self.submit(
            Control(
                id=new_id(),
                created_at=utc_now(),
                action=action,  # type: ignore[arg-type]
                session_id=self.session_id,
                **fields,
            )
        )

    async def next(self, timeout: float = 30) -> SessionEvent | Error:
        item = await asyncio.wait_for(self.events.get(), timeout)
        if isinstance(item, SessionEvent):
            self.seen.append(item)
        return item

    async def until(self, event_type: str, *, role: str | None = None) -> SessionEvent:
        """Read events up to the first of `event_type` (and `role`); fail on an early end."""
        while True:
            item = await self.next()
            if not isinstance(item, SessionEvent):
                continue
            if item.event_type == event_type and (role is None or item.payload.get("role") == role):
                return item
            assert item.event_type not in END, f"ended early: {item}"

    async def refused(self) -> Error:
        while not isinstance(item := await self.next(), Error):
            pass
        return item

    def outbound(self) -> list[SessionEvent]:
        return [
            e
            for e in self.seen
            if e.event_type == "step_started" and e.payload.get("role") == "outbound"
        ]


async def test_full_auto_loops_local_remote_local_until_max_turns(
    system: System, nc: NATS, namespace: Namespace
) -> None:
    person = Person(nc, namespace)
    await person.open(mode="full_auto", max_turns=4)
    end = await person.until("session_completed")
    assert end.stop_reason == "max_turns" and "maxTurns is 4" in end.payload["reason"]
    sent = [e.payload["message"] for e in person.outbound()]
    assert sent == [f"Draft {n}: which endpoints need auth?" for n in range(1, 5)]
    assert {e.payload["sent_by"] for e in person.outbound()} == {"auto"}
    answers = [
        e.payload["message"]
        for e in person.seen
        if e.event_type == "step_completed" and e.payload.get("role") == "remote_agent"
    ]
    # The shared agent got each draft; each answer went back to the local agent verbatim.
    assert answers == [f"Answer {n} to: {text}" for n, text in enumerate(sent, 1)]
    asks = [
        e.payload
        for e in person.seen
        if e.event_type == "step_started" and e.payload.get("role") == "local_agent"
    ]
    assert [a["remote_message"] for a in asks] == ["", *answers[:3]]
    # Verification 10: the history is bounded (max_history_turns 2 here) and summarised.
    assert all(a["history_turns"] <= 2 for a in asks)
    assert asks[-1]["history_summary"].startswith("3 earlier turn(s): 1. local_agent: Draft 1")


async def test_manual_mode_sends_nothing_before_approve_edit_or_reject(
    system: System, nc: NATS, namespace: Namespace
) -> None:
    person = Person(nc, namespace)
    await person.open(max_turns=2)
    asked = await person.until("approval_requested")
    assert person.outbound() == [] and asked.payload["state"] == "ready_to_send"
    await person.control("approve", approval_id=asked.payload["approval_id"])
    resolved = await person.until("approval_resolved")
    assert resolved.payload["decision"] == "approved" and resolved.payload["resolved_by"] == "cli"
    sent = await person.until("step_started", role="outbound")
    assert sent.payload["sent_by"] == "approved"
    assert sent.payload["message"] == asked.payload["draft"]
    # turn 2: reject first, then edit the redraft
    asked = await person.until("approval_requested")
    await person.control("reject", approval_id=asked.payload["approval_id"], reason="too vague")
    await person.until("approval_resolved")
    redraft = await person.until("approval_requested")
    assert redraft.payload["approval_id"] != asked.payload["approval_id"]
    assert len(person.outbound()) == 1  # the rejected draft was never sent
    await person.control(
        "approve", approval_id=redraft.payload["approval_id"], text="Which endpoints skip auth?"
    )
    sent = await person.until("step_started", role="outbound")
    assert sent.payload == sent.payload | {
        "sent_by": "edited",
        "message": "Which endpoints skip auth?",
    }
    answer = await person.until("step_completed", role="remote_agent")
    assert answer.payload["message"] == "Answer 2 to: Which endpoints skip auth?"
    end = await person.until("session_completed")
    assert end.stop_reason == "max_turns"


async def test_pause_holds_the_send_resume_sends_it_stop_ends_it(
    system: System, nc: NATS, namespace: Namespace
) -> None:
    person = Person(nc, namespace)
    await person.open(objective=f"{OBJECTIVE} (slow)", mode="full_auto", max_turns=8)
    await person.until("step_started", role="local_agent")  # the slow draft is being written
    await person.control("pause")
    paused = await person.until("session_paused")
    assert paused.payload["resume_to"] == "waiting_local"
    drafted = await person.until("step_completed", role="local_agent")
    assert drafted.payload["state"] == "paused"
    await person.control("approve")  # nothing awaits approval in full_auto: refused
    assert "no draft awaits approval" in (await person.refused()).message
    assert person.outbound() == []  # pause is immediate: the draft waits
    await person.control("resume")
    await person.until("session_resumed")
    sent = await person.until("step_started", role="outbound")
    assert sent.payload["message"] == drafted.payload["message"]
    await person.control("stop", reason="enough")
    end = await person.until("session_canceled")
    assert end.payload["state"] == "stopped" and "enough" in end.payload["reason"]


async def test_take_over_sends_the_persons_own_message(
    system: System, nc: NATS, namespace: Namespace
) -> None:
    person = Person(nc, namespace)
    await person.open(max_turns=1)
    await person.until("approval_requested")
    await person.control("take_over", text="Is rate limiting per key?")
    sent = await person.until("step_started", role="outbound")
    assert (
        sent.payload["sent_by"] == "you" and sent.payload["message"] == "Is rate limiting per key?"
    )
    end = await person.until("session_completed")
    assert end.stop_reason == "max_turns"


async def test_a_local_agent_killed_mid_run_ends_the_session_in_error(
    system: System, nc: NATS, namespace: Namespace
) -> None:
    person = Person(nc, namespace)
    await person.open(objective=f"{OBJECTIVE} (hang)", mode="full_auto", max_turns=8)
    await person.until("step_completed", role="remote_agent")  # turn 1 went round
    asked = await person.until("step_started", role="local_agent")
    assert asked.round == 2
    system.processes["local"].kill()
    end = await person.until("session_failed")
    assert end.payload["state"] == "error" and end.stop_reason == "local_failed"
    assert "AGENT_UNAVAILABLE" in end.payload["reason"] and "local" in end.payload["reason"]
    assert len(person.outbound()) == 1  # the loop halted: nothing more was sent


async def test_parley_orchestrate_asks_y_n_e_and_shows_the_turn_limit_banner(
    system: System,
) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tools",
        "orchestrate",
        "--agent",
        "local",
        "--shared",
        "byte-doc",  # the shared agent played on this deployment, by its local name
        "--mode",
        "manual",
        "--max-turns",
        "2",
        OBJECTIVE,
        env=system.env,
        cwd=REPO,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdin is not None and process.stdout is not None
    lines: list[str] = []

    async def line_with(text: str) -> str:
        while True:
            raw = await asyncio.wait_for(process.stdout.readline(), 30)  # type: ignore[union-attr]
            assert raw, "\n".join(lines)
            lines.append(raw.decode().rstrip("\n"))
            if text in lines[-1]:
                return lines[-1]

    try:
        await line_with("send it? [y]es / [n]o / [e]dit")
        process.stdin.write(b"y\n")
        await line_with("(approved)")
        await line_with("send it?")
        process.stdin.write(b"e\nWhat about CSRF?\n")
        await line_with("(edited by you)")
        await line_with("TURN LIMIT REACHED")
        code = await asyncio.wait_for(process.wait(), 30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    rest = (await process.stdout.read()).decode().splitlines()
    output = "\n".join([*lines, *rest])
    assert code == 0, output
    assert f"objective: {OBJECTIVE}" in output
    assert "[Local Agent · 1/2] Draft 1: which endpoints need auth?" in output
    assert "[Remote Agent · 2/2] Answer 2 to: What about CSRF?" in output
    assert output.rstrip().endswith("stopped: max_turns")


async def test_a_shared_agent_the_policy_does_not_allow_ends_the_session_in_error(
    system: System, nc: NATS, namespace: Namespace
) -> None:
    person = Person(nc, namespace)
    await person.open(shared="stranger", mode="full_auto")
    end = await person.until("session_failed")
    assert end.stop_reason == "remote_failed" and "stranger" in end.payload["reason"]
    assert end.payload["code"] == "TARGET_NOT_ALLOWED", end.payload


async def test_semi_auto_holds_a_draft_with_a_secret_for_review(
    system: System, nc: NATS, namespace: Namespace
) -> None:
    person = Person(nc, namespace)
    await person.open(objective=f"{OBJECTIVE} (secret)", mode="semi_auto", max_turns=1)
    asked = await person.until("approval_requested")
    assert "secret" in asked.payload["reasons"][0] and person.outbound() == []
    await person.control("reject", approval_id=asked.payload["approval_id"], reason="no keys")
    await person.control("stop")
    await person.until("session_canceled")


async def test_a_collaboration_paused_mid_turn_is_taken_over_by_its_owner(
    system: System, nc: NATS, namespace: Namespace
) -> None:
    person = Person(nc, namespace)
    await nc.subscribe(namespace.events("cli", person.session_id), cb=person._on)
    await nc.flush()
    await person.submit(
        HumanMessage(
            id=new_id(),
            created_at=utc_now(),
            text="relay a short story",
            call_id=new_id(),
            mode="collaborate",
            participants=("local", "byte-doc"),
            first_speaker="local",
            max_rounds=4,
            session_id=person.session_id,
        )
    )
    await person.until("step_started")  # local's (slow) first turn is being written
    await person.control("pause")
    await person.until("session_paused")
    done = await person.until("step_completed")
    assert done.speaker == "local"
    await person.control("take_over", text="Make the fox talk.")
    taken = await person.until("session_resumed")
    assert taken.payload["taken_over"] is True
    started = await person.until("step_started")
    assert started.speaker == "byte-doc" and started.round == 2
    answered = await person.until("step_completed")
    assert answered.payload["message"] == "Remote turn 2 on: Make the fox talk."
    await person.control("stop")
    await person.until("session_canceled")


@pytest.mark.parametrize("kill_after", ["step_started", "step_completed"])
async def test_a_router_sigkilled_mid_run_resumes_the_session_without_repeating_a_send(
    system: System, nc: NATS, namespace: Namespace, kill_after: str
) -> None:
    person = Person(nc, namespace)
    await person.open(mode="full_auto", max_turns=4)
    role = "outbound" if kill_after == "step_started" else "remote_agent"
    await person.until(kill_after, role=role)
    await system.kill_and_restart("router")
    end = await person.until("session_completed")
    assert end.stop_reason == "max_turns"
    # An effect published again after the restart has the id it had: count each once.
    unique = {e.id: e for e in person.seen}.values()
    sends = [
        e for e in unique if e.event_type == "step_started" and e.payload["role"] == "outbound"
    ]
    answers = [
        e
        for e in unique
        if e.event_type == "step_completed" and e.payload["role"] == "remote_agent"
    ]
    assert [e.round for e in sends] == [1, 2, 3, 4]
    assert [e.round for e in answers] == [1, 2, 3, 4]


async def test_parley_orchestrate_reports_a_session_the_router_refuses(system: System) -> None:
    code, lines = await finished(
        parley_cli(
            system.env,
            "orchestrate",
            "--agent",
            "local",
            "--shared",
            "local",
            "--mode",
            "full_auto",
            "hi",
        )
    )
    output = "\n".join(lines)
    assert code == 1, output
    assert "cannot talk to itself" in output and "stopped: error" in output
