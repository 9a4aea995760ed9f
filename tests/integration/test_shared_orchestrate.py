"""Seed 000 as one flow: an orchestrated session on Alice's deployment whose shared agent is
Bob's `byte-doc`, behind the relays.

router -> Alice's gate -> Alice's relay -> gateway -> Bob's relay -> Bob's gate -> byte-doc,
and the answer back the same way, with every piece a real process and three real
nats-servers (tests/support/relay.py). The person is the test, as `cli` on Alice's side: it
opens the session with a `human_message`, steers it with `control` envelopes through Alice's
gate and reads the timeline on `parley.events.cli.<session>`.

Seed 000's verification list over the relay:

1. an orchestrated session starts with the selected local agent (every test; `parley
   orchestrate` too);
2. the loop local draft -> remote send -> remote answer -> local follow-up (full_auto);
3. manual mode sends nothing before its owner approves (manual);
4. full_auto runs to the maxTurns stop condition (full_auto);
5. pause, resume and stop work without breaking the E2EE session (pause): the held draft goes
   out after resume, its answer opens on Alice's side, and neither relay refused a frame;
6. a policy blocks a disallowed target: Bob's policy does not let Alice's device reach
   byte-doc, and the session ends in `error` with Bob's refusal (refused);
8. audit entries on both sides are profile-scoped and redacted, and the calling side's name
   the shared agent's device (audit);
9. the local agent killed mid-run ends the session in `error`, nothing more is sent (killed);
10. the history is bounded and summarised deterministically (full_auto).

And issue 16's chaos rule: either relay or the gateway's server SIGKILLed mid-run and
restarted, the session still completes, every turn's call reaches byte-doc once and its
answer comes back once (killed_mid_run).

Not here: 7 (loop prevention is Alice's gate's hop and self-loop checks, the same with or
without a relay: tests/integration/test_gate_policy.py, test_orchestrate_e2e.py) and 11
(`max_tool_rounds` is the local agent host's, tests/integration/test_local_agent_bridge.py).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from actors.relay import DeviceKeys
from bus import EmbeddedServer, TraceHeaders, read_history
from schemas import (
    AuditRecord,
    Control,
    Decision,
    Error,
    HumanMessage,
    Orchestration,
    ProfilePolicy,
    SessionEvent,
    decode_envelope,
    encode,
    new_id,
    utc_now,
)
from tests.support.agents import start_agent, write_profile
from tests.support.audit import AuditorKeys, start_auditor
from tests.support.processes import READY, ProcessOutput, parley_env, start_actor
from tests.support.relay import Side, TwoDeployments, relay_servers, start_two_deployments
from tests.support.system import finished, parley_cli
from tools.audit import query_records

OBJECTIVE = "review this API for security issues"
LOCAL_SCRIPT = """
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
goal = "ponder"
message = "Ponder {round}: which endpoints need auth?"

[[turn]]
goal = "secret"
message = "Try the key AKIAIOSFODNN7EXAMPLE on /admin."

[[turn]]
message = "Draft {round}: which endpoints need auth?"
"""
BOB_SCRIPT = """
[[turn]]
goal = "ponder"
message = "Pondered {round}: {task}"
delay_s = 7

[[turn]]
message = "Answer {round} to: {task}"
"""
END = {"session_completed", "session_failed", "session_canceled"}
FRAME_MAGIC = b"PRL1"


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedServer, ...]]:
    """Alice's, Bob's and the gateway's nats-servers, shared by the module's tests."""
    yield from relay_servers(tmp_path_factory)


class SharedSession:
    """Both deployments with Alice's router and local agent running, and a person at Alice's
    terminal who opens one orchestrated session with `bob-byte-doc` and steers it."""

    def __init__(self, system: TwoDeployments, processes: dict[str, ProcessOutput]) -> None:
        self.system = system
        self.processes = processes
        self.alice = system.alice
        self.session_id = new_id()
        self.events: asyncio.Queue[SessionEvent | Error] = asyncio.Queue()
        self.seen: list[SessionEvent] = []

    async def _on(self, raw: Msg) -> None:
        envelope = decode_envelope(raw.data)
        if isinstance(envelope, SessionEvent | Error):
            self.events.put_nowait(envelope)

    async def submit(self, envelope: HumanMessage | Control) -> None:
        headers = TraceHeaders(trace_id=envelope.id, origin="cli").to_headers(envelope.id)
        js = self.alice.nc.jetstream()
        await js.publish(self.alice.ns.submit("cli"), encode(envelope), headers=headers)

    async def open(self, objective: str = OBJECTIVE, **spec: Any) -> None:
        await self.alice.nc.subscribe(self.alice.ns.events("cli", self.session_id), cb=self._on)
        await self.alice.nc.flush()
        orchestration = Orchestration(local_agent="local", shared_agent="bob-byte-doc", **spec)
        await self.submit(
            HumanMessage(
                id=new_id(),
                created_at=utc_now(),
                text=objective,
                call_id=new_id(),
                mode="orchestrate",
                session_id=self.session_id,
                orchestration=orchestration,
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

    async def until(self, event_type: str, *, role: str | None = None) -> SessionEvent:
        """Read events up to the first of `event_type` (and `role`); fail on an early end."""
        while True:
            item = await asyncio.wait_for(self.events.get(), 45)
            if not isinstance(item, SessionEvent):
                continue
            self.seen.append(item)
            if item.event_type == event_type and (role is None or item.payload.get("role") == role):
                return item
            assert item.event_type not in END, f"ended early: {item}"

    def of(self, event_type: str, role: str) -> list[SessionEvent]:
        unique = {e.id: e for e in self.seen}.values()  # an effect published again: once
        return [e for e in unique if e.event_type == event_type and e.payload.get("role") == role]

    async def relay_refusals(self) -> int:
        """Frames either relay refused (dead letters on `parley.dead.relay`)."""
        total = 0
        for side in (self.system.alice, self.system.bob):
            info = await side.nc.jetstream().stream_info(
                side.ns.stream("dead"), subjects_filter=side.ns.dead("relay")
            )
            total += sum((info.state.subjects or {}).values())
        return total


async def start_shared_session(
    servers: tuple[EmbeddedServer, ...],
    root: Path,
    processes: list[ProcessOutput],
    *,
    allow_device: bool = True,
    router_options: dict[str, object] | None = None,
) -> SharedSession:
    """Two deployments over the gateway, plus Alice's router and her local agent."""
    alice_keys, bob_keys = DeviceKeys.generate(), DeviceKeys.generate()
    alice_profiles = {
        "router": ProfilePolicy(
            allowed_targets=("local", "bob-byte-doc"),
            start_traces=True,
            max_concurrent_calls=100,
            rate_per_minute=6000,
            allow_shared_agent_calls=True,
            allowed_shared_device_ids=(bob_keys.device_id,),  # seed 000: by device
        ),
        "cli": ProfilePolicy(
            allowed_targets=("router",), start_traces=True, speaks_for_person=True
        ),
        "local": ProfilePolicy(allowed_targets=("router",)),
    }
    system = await start_two_deployments(
        servers[0],
        servers[1],
        servers[2],
        root,
        processes,
        keys=(alice_keys, bob_keys),
        allow_device=allow_device,
        alice_profiles=alice_profiles,
        bob_script=BOB_SCRIPT,
    )
    alice = system.alice
    env = parley_env(
        alice.server.url, alice.ns.root, ack_wait_s="2", fetch_timeout_s="1", heartbeat_s="0.5"
    )
    options = {
        "missed_beats": 6,  # 3 s of silence: two beats (1 s) judged a live agent gone under load
        "start_grace_s": 5,
        "orchestration": {"max_history_turns": 2},
        **(router_options or {}),
    }
    router = start_actor("router", "router", {**env, "PARLEY_OPTIONS": json.dumps(options)})
    processes.append(router)
    profile = write_profile(
        alice.dir / "agents",
        "local",
        'backend = "scripted"\nscript = "local-script.toml"',
        script=LOCAL_SCRIPT,
    )
    local = start_agent(str(profile), env)
    processes.append(local)
    await router.wait_line(READY)
    await local.wait_line(READY)
    return SharedSession(system, {"router": router, "local": local})


@pytest.fixture
async def shared(
    servers: tuple[EmbeddedServer, ...], tmp_path: Path
) -> AsyncIterator[SharedSession]:
    processes: list[ProcessOutput] = []
    try:
        session = await start_shared_session(servers, tmp_path, processes)
        try:
            yield session
        finally:
            await session.system.close()
            processes.extend(session.processes.values())  # what a test started, too
    finally:
        for process in processes:
            process.close()


async def _frames_seen_on(gateway: EmbeddedServer, root: str) -> tuple[NATS, list[bytes]]:
    """Everything published on the gateway's subjects, as an onlooker there sees it."""
    frames: list[bytes] = []

    async def on_frame(msg: Msg) -> None:
        frames.append(msg.data)

    nc = await nats.connect(gateway.url)
    await nc.subscribe(f"{root}.>", cb=on_frame)
    await nc.flush()
    return nc, frames


def _stored_bytes(gateway: EmbeddedServer) -> bytes:
    """The gateway server's whole JetStream store on disk, as one string of bytes (frames
    acked by the receiving relay are gone from a work queue, but a deleted record's bytes
    may linger in a block: those are searched too)."""
    files = sorted(p for p in gateway.store_dir.rglob("*") if p.is_file() and p.suffix != ".conf")
    return b"".join(p.read_bytes() for p in files)


async def test_full_auto_over_the_relay_runs_to_max_turns_and_the_gateway_sees_ciphertext(
    shared: SharedSession,
) -> None:
    """Verification 1, 2, 4 and 10 across the gateway; and every message text of the run is
    absent from what the gateway carried and from its store on disk."""
    gateway, root = shared.system.gateway, shared.system.gateway_root
    onlooker, frames = await _frames_seen_on(gateway, root)
    try:
        await shared.open(mode="full_auto", max_turns=4)
        end = await shared.until("session_completed")
        await onlooker.flush()
    finally:
        await onlooker.close()
    assert end.stop_reason == "max_turns" and "maxTurns is 4" in end.payload["reason"]
    outbound = shared.of("step_started", "outbound")
    sent = [e.payload["message"] for e in outbound]
    assert sent == [f"Draft {n}: which endpoints need auth?" for n in range(1, 5)]
    assert {e.payload["sent_by"] for e in outbound} == {"auto"}
    answers = [e.payload["message"] for e in shared.of("step_completed", "remote_agent")]
    # Bob's byte-doc got each draft through both relays; each answer came back verbatim.
    assert answers == [f"Answer {n} to: {text}" for n, text in enumerate(sent, 1)]
    asks = [e.payload for e in shared.of("step_started", "local_agent")]
    assert [a["remote_message"] for a in asks] == ["", *answers[:3]]
    assert all(a["history_turns"] <= 2 for a in asks)
    assert asks[-1]["history_summary"].startswith("3 earlier turn(s): 1. local_agent: Draft 1")
    # The gateway: only frames, 4 calls and 4 answers (a frame sent again counts once more),
    # each stored as it was published until the receiving relay acked it; none of the run's
    # texts in what it carried, nor anywhere in its store on disk after the run.
    assert len(frames) >= 8 and all(f.startswith(FRAME_MAGIC) for f in frames)
    stored = _stored_bytes(gateway)
    assert stored  # the stream's own files at least
    texts = {OBJECTIVE, *sent, *answers}
    for text in texts:
        needle = text.encode()
        assert needle not in stored, text
        assert not any(needle in frame for frame in frames), text
    assert await shared.relay_refusals() == 0


async def test_manual_mode_over_the_relay_sends_only_what_its_owner_approves(
    shared: SharedSession,
) -> None:
    """Verification 3: the draft waits; once approved it crosses the gateway and is answered."""
    await shared.open(max_turns=1)
    asked = await shared.until("approval_requested")
    assert shared.of("step_started", "outbound") == []
    assert asked.payload["state"] == "ready_to_send"
    await shared.control("approve", approval_id=asked.payload["approval_id"])
    resolved = await shared.until("approval_resolved")
    assert resolved.payload["decision"] == "approved" and resolved.payload["resolved_by"] == "cli"
    sent = await shared.until("step_started", role="outbound")
    assert sent.payload["sent_by"] == "approved"
    assert sent.payload["message"] == asked.payload["draft"]
    answer = await shared.until("step_completed", role="remote_agent")
    assert answer.payload["message"] == f"Answer 1 to: {asked.payload['draft']}"
    end = await shared.until("session_completed")
    assert end.stop_reason == "max_turns"


async def test_pause_resume_and_stop_keep_the_relay_session_intact(
    shared: SharedSession,
) -> None:
    """Verification 5: pause holds the draft, resume sends it over the relay (its frame and
    its answer open on both sides: no refusal, no replay), stop ends the session."""
    await shared.open(objective=f"{OBJECTIVE} (slow)", mode="full_auto", max_turns=8)
    await shared.until("step_started", role="local_agent")  # the slow draft is being written
    await shared.control("pause")
    paused = await shared.until("session_paused")
    assert paused.payload["resume_to"] == "waiting_local"
    drafted = await shared.until("step_completed", role="local_agent")
    assert drafted.payload["state"] == "paused"
    assert shared.of("step_started", "outbound") == []
    await shared.control("resume")
    await shared.until("session_resumed")
    sent = await shared.until("step_started", role="outbound")
    assert sent.payload["message"] == drafted.payload["message"]
    answer = await shared.until("step_completed", role="remote_agent")
    assert answer.payload["message"] == f"Answer 1 to: {drafted.payload['message']}"
    await shared.control("stop", reason="enough")
    end = await shared.until("session_canceled")
    assert end.payload["state"] == "stopped" and "enough" in end.payload["reason"]
    assert await shared.relay_refusals() == 0


async def test_a_local_agent_killed_mid_run_over_the_relay_ends_the_session_in_error(
    shared: SharedSession,
) -> None:
    """Verification 9: turn 1 crosses the gateway, the local agent dies drafting turn 2; the
    session ends in `error` and nothing more goes to Bob."""
    await shared.open(objective=f"{OBJECTIVE} (hang)", mode="full_auto", max_turns=8)
    await shared.until("step_completed", role="remote_agent")
    asked = await shared.until("step_started", role="local_agent")
    assert asked.round == 2
    shared.processes["local"].kill()
    end = await shared.until("session_failed")
    assert end.payload["state"] == "error" and end.stop_reason == "local_failed"
    assert "AGENT_UNAVAILABLE" in end.payload["reason"]
    assert len(shared.of("step_started", "outbound")) == 1


async def test_bobs_policy_refusing_alices_device_ends_the_session_in_error(
    servers: tuple[EmbeddedServer, ...], tmp_path: Path
) -> None:
    """Verification 6 on the owner's side: Bob's gate does not let Alice's device reach
    byte-doc; the refusal travels back as the shared agent's answer and ends the session."""
    processes: list[ProcessOutput] = []
    try:
        session = await start_shared_session(servers, tmp_path, processes, allow_device=False)
        try:
            await session.open(mode="full_auto", max_turns=2)
            end = await session.until("session_failed")
        finally:
            await session.system.close()
    finally:
        for process in processes:
            process.close()
    assert end.stop_reason == "remote_failed", end.payload
    assert end.payload["code"] == "TARGET_NOT_ALLOWED", end.payload
    assert "bob-byte-doc" in end.payload["reason"]
    assert len(session.of("step_started", "outbound")) == 1


async def test_a_shared_agent_slower_than_the_start_grace_is_waited_for(
    shared: SharedSession,
) -> None:
    """The router judges a silent agent by its heartbeat, and a shared agent has none on
    Alice's side of its own: Alice's relay beats for the shared agents it hosts, so an answer
    that takes longer than `start_grace_s` (5 s here; byte-doc takes 7) is waited for, up to
    the turn timeout, instead of failing the session as `bob-byte-doc is not running`."""
    await shared.open(objective=f"{OBJECTIVE} (ponder)", mode="full_auto", max_turns=1)
    answer = await shared.until("step_completed", role="remote_agent")
    assert answer.payload["message"].startswith("Pondered 1: Ponder 1")
    end = await shared.until("session_completed")
    assert end.stop_reason == "max_turns"


SECRET = "AKIAIOSFODNN7EXAMPLE"


async def _audit_watch(side: Side) -> asyncio.Queue[AuditRecord]:
    """Every audit record of the side's tenant, once stored: a record seen as it is
    published may not be in the stream yet when the history is read right after."""
    records: asyncio.Queue[AuditRecord] = asyncio.Queue()

    async def on_record(msg: Msg) -> None:
        envelope = decode_envelope(msg.data)
        if isinstance(envelope, AuditRecord):
            records.put_nowait(envelope)

    subject, stream = f"{side.ns.root}.audit.test.*", side.ns.stream("audit")
    await side.nc.jetstream().subscribe(subject, stream=stream, ordered_consumer=True, cb=on_record)
    return records


async def _audited(records: asyncio.Queue[AuditRecord], wanted: Any) -> None:
    while not wanted(await asyncio.wait_for(records.get(), 45)):
        pass


async def test_both_sides_audit_the_run_redacted_and_alices_names_bobs_device(
    shared: SharedSession, tmp_path: Path
) -> None:
    """Verification 8, and seed 000's audit fields on the calling side: every session event
    Alice's auditor records names the profile, the target shared device id (Bob's device,
    not the local name `bob-byte-doc`), the requester, the turn index, the mode, timing,
    status and failure reason. Bob's auditor records the call under the principal standing
    for Alice's device. A credential in the draft crosses to Bob (full_auto sends it), but
    neither side's audit history holds it."""
    system = shared.system
    bob_device = system.bob.keys.device_id
    auditors = []
    for side in (system.alice, system.bob):
        auditor = start_auditor(
            side.server.url,
            side.ns,
            AuditorKeys(side.dir),
            side.dir,
            tenant="test",
            name=f"auditor-{side.name}",
        )
        shared.processes[auditor.name] = auditor
        auditors.append(auditor)
    for auditor in auditors:
        await auditor.wait_line(READY)
    alice_records = await _audit_watch(system.alice)
    bob_records = await _audit_watch(system.bob)
    await shared.open(objective=f"{OBJECTIVE} (secret)", mode="full_auto", max_turns=1)
    answer = await shared.until("step_completed", role="remote_agent")
    assert SECRET in answer.payload["message"]  # it did reach Bob's agent
    await shared.until("session_completed")
    await _audited(
        alice_records,
        lambda r: r.session_id == shared.session_id and r.status == "session_completed",
    )
    await _audited(bob_records, lambda r: r.profile == system.principal and r.target == "byte-doc")

    records = await query_records(
        system.alice.nc.jetstream(), system.alice.ns, tenant="test", session=shared.session_id
    )
    events = [r for r in records if r.fact == "session_event"]
    assert events and {r.target_device_id for r in events} == {bob_device}
    assert {r.requester for r in events} == {"cli"} and {r.mode for r in events} == {"full_auto"}
    by_status = {r.status: r for r in events}
    assert by_status["session_completed"].failure_reason == "max_turns"
    answered = [r for r in events if r.status == "step_completed" and r.target == "bob-byte-doc"]
    (remote,) = answered
    assert remote.turn_index == 1 and remote.success is True
    assert remote.duration_ms is not None and remote.profile == "bob-byte-doc"
    for side in (system.alice, system.bob):
        js = side.nc.jetstream()
        everything = await query_records(js, side.ns, tenant="test")
        assert everything, side.name
        assert not [r for r in everything if SECRET in msgspec.json.encode(r).decode()], side.name
    bob_side = await query_records(system.bob.nc.jetstream(), system.bob.ns, tenant="test")
    assert {r.profile for r in bob_side} >= {system.principal, "byte-doc"}


@pytest.mark.parametrize("victim", ["alice", "bob", "gateway"])
async def test_a_relay_or_the_gateway_killed_mid_run_neither_duplicates_nor_loses_a_turn(
    shared: SharedSession, victim: str
) -> None:
    """A relay, or the gateway's nats-server, is SIGKILLed as turn 2's draft goes out (its
    call delivered to Alice's relay, or on its way over the gateway) and restarted as a
    supervisor would: the session completes at maxTurns, Bob's gate admitted exactly one
    call to byte-doc per turn, and each answer came back once."""
    system = shared.system
    await shared.open(mode="full_auto", max_turns=3)
    await shared.until("step_started", role="outbound")
    sent = await shared.until("step_started", role="outbound")
    assert sent.round == 2
    if victim == "gateway":
        system.gateway.kill()
        system.gateway.start()  # same port and store: the relays reconnect
    else:
        relay_side = system.alice if victim == "alice" else system.bob
        assert relay_side.relay is not None
        relay_side.relay.kill()
        await system.start_relay(relay_side).wait_line(READY)
    end = await shared.until("session_completed")
    assert end.stop_reason == "max_turns"
    answers = shared.of("step_completed", "remote_agent")
    assert sorted(e.round or 0 for e in answers) == [1, 2, 3]
    bob = system.bob
    decisions = [
        envelope
        async for stored in read_history(
            bob.nc.jetstream(), bob.ns.stream("events"), subject=f"{bob.ns.root}.decisions.>"
        )
        if isinstance(envelope := decode_envelope(stored.data), Decision)
    ]
    calls = [
        d.envelope_id
        for d in decisions
        if d.allowed and d.sender == system.principal and d.target == "byte-doc"
    ]
    assert len(calls) == len(set(calls)) == 3, calls


async def test_parley_orchestrate_runs_a_session_with_the_shared_agent_over_the_relay(
    shared: SharedSession,
) -> None:
    """Verification 1 as a person starts it, with the issue's literal `--shared bob/byte-doc`:
    `parley orchestrate` on Alice's deployment resolves it to the local name Alice's relay
    hosts Bob's agent under (`parley shared add`'s record); the timeline shows Bob's answers
    and the banner. An owner/agent nobody added is refused before anything is sent."""
    alice = shared.alice
    env = parley_env(alice.server.url, alice.ns.root)
    relay_dir = ("--relay-dir", str(alice.dir / "relay"))
    unknown = ("--agent", "local", "--shared", "carol/byte-doc", *relay_dir, OBJECTIVE)
    code, lines = await finished(parley_cli(env, "orchestrate", *unknown), timeout=60)
    assert code == 2, lines
    refusal = "\n".join(lines)
    assert "no shared agent carol/byte-doc" in refusal and "bob-byte-doc (byte-doc on" in refusal
    argv = ("--agent", "local", "--shared", "bob/byte-doc", *relay_dir, "--mode", "full_auto")
    cli = parley_cli(env, "orchestrate", *argv, "--max-turns", "2", OBJECTIVE)
    code, lines = await finished(cli, timeout=90)
    output = "\n".join(lines)
    assert code == 0, output
    assert "[Local Agent · 1/2] Draft 1: which endpoints need auth?" in lines, output
    assert "[Remote Agent · 2/2] Answer 2 to: Draft 2: which endpoints need auth?" in lines
    assert "======== TURN LIMIT REACHED ========" in lines and output.endswith("stopped: max_turns")
