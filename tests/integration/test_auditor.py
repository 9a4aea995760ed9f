"""The auditor as a real process: profile-scoped records, redaction, the CLI over them."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from bus import MSG_ID, EmbeddedServer, read_history, traceparent_for
from schemas import (
    AgentCall,
    Decision,
    HumanMessage,
    Namespace,
    SessionEvent,
    derive_id,
    encode,
    key_id,
    new_id,
    utc_now,
)
from tests.support.audit import (
    AuditorKeys,
    decision,
    publish_fact,
    session_event,
    start_auditor,
)
from tests.support.gate import Signer, make_bundle, publish_bundle, start_gate, submit
from tests.support.processes import READY, REPO, ProcessOutput, parley_env, start_actor
from tools.audit import query_records, read_off_box, verify_stream

OPENAI_KEY = "sk-proj-" + "Zx81Qa" * 8
EMAIL = "alice.smith@example.org"


def _cli(url: str, ns: Namespace, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tools", *argv, "--namespace", ns.root],
        env=parley_env(url, ns.root),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


async def test_collaboration_and_denied_call_are_scoped_to_their_profiles(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    js = nc.jetstream()
    keys = AuditorKeys(tmp_path)
    auditor = start_auditor(nats_server.url, namespace, keys, tmp_path, checkpoint_s=0.3)
    try:
        await auditor.wait_line(READY)
        session = new_id()
        call = decision(
            "gpt",
            "claude",
            session_id=session,
            objective=f"summarise the contract, use key {OPENAI_KEY}",
            preview=f"mail {EMAIL} the result",
        )
        answer = decision(
            "claude",
            "gpt",
            trace_id=call.trace_id,
            causation_id=call.envelope_id,
            session_id=session,
            hop_count=1,
            kind="agent_response",
        )
        denied = decision("gpt", "mallory", allowed=False, objective="exfiltrate")
        other = decision("mallory", "gpt", allowed=False)
        facts: list[Decision | SessionEvent] = [
            session_event(session, "session_started"),
            call,
            answer,
            session_event(session, "step_completed", speaker="gpt"),
            denied,
            other,
            session_event(session, "session_completed"),
        ]
        for fact in facts:
            await publish_fact(js, namespace, fact)
        # 7 facts: the two admitted calls are recorded for both ends, the rest once.
        await auditor.wait_line(r'"count":9\b', timeout=20)

        gpt = await query_records(js, namespace, tenant="demo", profile="gpt")
        assert [(r.fact, r.envelope_id, r.status) for r in gpt] == [
            ("decision", call.envelope_id, "delivered"),
            ("decision", answer.envelope_id, "delivered"),
            ("session_event", facts[3].id, "step_completed"),
            ("decision", denied.envelope_id, "rejected"),
        ]
        assert {r.profile for r in gpt} == {"gpt"}
        assert gpt[3].decision_code == "TARGET_NOT_ALLOWED" and gpt[3].success is False
        # A record carries the trace context its fact was published in (none for an event
        # published without one).
        assert gpt[0].traceparent == traceparent_for(call.trace_id, call.id) != ""
        assert gpt[2].traceparent == ""
        claude = await query_records(js, namespace, tenant="demo", profile="claude")
        assert [r.envelope_id for r in claude] == [call.envelope_id, answer.envelope_id]
        mallory = await query_records(js, namespace, tenant="demo", profile="mallory")
        assert [r.envelope_id for r in mallory] == [other.envelope_id]  # not gpt's refused call
        router = await query_records(js, namespace, tenant="demo", profile="router")
        assert [r.status for r in router] == ["session_started", "session_completed"]
        by_session = await query_records(js, namespace, tenant="demo", session=session)
        assert {r.profile for r in by_session} == {"gpt", "claude", "router"}

        # No secret and no PII in any stored byte; equal markers for the two copies.
        stored = [m async for m in read_history(js, namespace.stream("audit"))]
        assert stored and all(OPENAI_KEY.encode() not in m.data for m in stored)
        assert all(EMAIL.encode() not in m.data for m in stored)
        assert "[REDACTED:openai_key:" in gpt[0].objective
        assert gpt[0].objective == claude[0].objective
        assert "[REDACTED:email:" in gpt[0].output_preview
        assert all(OPENAI_KEY not in text and EMAIL not in text for text in auditor.lines)

        report = await verify_stream(
            js,
            namespace.stream("audit"),
            trusted={key_id(keys.public): keys.public},
            off_box=read_off_box(auditor.lines),
            strict=True,
        )
        assert report.ok, report
        assert (report.records, report.covered) == (9, 9)

        # The same through the command line, as an operator would run it.
        query = await asyncio.to_thread(
            _cli, nats_server.url, namespace, "audit", "query", "--tenant", "demo",
            "--profile", "mallory", "--json",
        )  # fmt: skip
        assert query.returncode == 0, query.stderr
        rows = [json.loads(line) for line in query.stdout.splitlines()]
        assert [row["envelope_id"] for row in rows] == [other.envelope_id]
        verify = await asyncio.to_thread(
            _cli, nats_server.url, namespace, "audit", "verify", "--key", str(keys.public_path),
        )  # fmt: skip
        assert verify.returncode == 0 and "intact" in verify.stdout, verify.stdout
        trace = await asyncio.to_thread(
            _cli, nats_server.url, namespace, "trace", call.trace_id, "--tenant", "demo"
        )
        assert trace.returncode == 0, trace.stderr
        assert "gpt -> claude" in trace.stdout and "   └─ claude -> gpt" in trace.stdout
    finally:
        auditor.signal(signal.SIGTERM)
        await auditor.wait_exit()
        auditor.close()


async def test_the_routers_copy_of_how_a_session_stands_is_recorded_once(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    """The router stores each session's opening and end twice, on its timeline and on
    `parley.standing.<owner>.<session>` (the copy a person can always read): one fact, one
    record."""
    js = nc.jetstream()
    auditor = start_auditor(nats_server.url, namespace, AuditorKeys(tmp_path), tmp_path)
    session, later = new_id(), new_id()
    later_recorded = asyncio.Event()

    async def on_record(msg: Msg) -> None:
        if later.encode() in msg.data:
            later_recorded.set()

    await nc.subscribe(namespace.wildcard("audit"), cb=on_record)
    try:
        await auditor.wait_line(READY)
        end = session_event(session, "session_completed")
        await publish_fact(js, namespace, end)
        copy = {MSG_ID: derive_id(end.id, "standing")}
        await js.publish(namespace.standing("cli", session), encode(end), headers=copy)
        # Read in order after the copy: once it is recorded, the copy was handled.
        await publish_fact(js, namespace, session_event(later, "session_started"))

        await asyncio.wait_for(later_recorded.wait(), timeout=20)
        found = await query_records(js, namespace, tenant="demo", session=session)
        assert [record.status for record in found] == ["session_completed"]
    finally:
        auditor.signal(signal.SIGTERM)
        await auditor.wait_exit()
        auditor.close()


async def test_tail_prints_live_traffic_decoded(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    argv = [sys.executable, "-m", "tools", "tail", "--count", "1", "--namespace", namespace.root]
    tail = ProcessOutput(argv, parley_env(nats_server.url, namespace.root), name="tail")
    try:
        await tail.wait_line(rf"tailing {namespace.root}\.>")
        fact = decision("gpt", "claude", objective="hello")
        await publish_fact(nc.jetstream(), namespace, fact)
        _, line = await tail.wait_line(r"\] decision ")
        assert line.startswith(f"[{namespace.decisions('gpt')}] decision")
        _, body = await tail.wait_line(r'"kind":"decision"')
        assert json.loads(body)["envelope_id"] == fact.envelope_id
        assert await tail.wait_exit() == 0
    finally:
        tail.close()


async def test_through_the_real_gate_each_profile_sees_its_own_calls(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    """cli calls echo (admitted, echo answers), cli -> mallory refused: recorded per profile."""
    js = nc.jetstream()
    signer = Signer.create(tmp_path)
    bundle = make_bundle(
        cli={"start_traces": True, "speaks_for_person": True, "allowed_targets": ("echo",)}, echo={}
    )
    await publish_bundle(js, namespace, signer.sign(bundle))
    keys = AuditorKeys(tmp_path)
    gate = start_gate(nats_server.url, namespace, signer, ack_wait_s="5")
    echo = start_actor("echo", "echo", parley_env(nats_server.url, namespace.root))
    auditor = start_auditor(nats_server.url, namespace, keys, tmp_path, checkpoint_s=0.3)
    try:
        for process in (gate, echo, auditor):
            await process.wait_line(READY)
        await gate.wait_line("policy bundle in force")
        hello = AgentCall(
            id=new_id(), created_at=utc_now(), text=f"hi, key {OPENAI_KEY}", call_id=new_id(),
            target="echo", goal="greet",
        )  # fmt: skip
        await submit(js, namespace, "cli", hello)
        await auditor.wait_line(r'"count":4\b', timeout=30)  # the call and the answer, twice
        refused = HumanMessage(
            id=new_id(), created_at=utc_now(), text="psst", call_id=new_id(), target="mallory"
        )
        await submit(js, namespace, "cli", refused)
        await auditor.wait_line(r'"count":5\b', timeout=30)

        cli = await query_records(js, namespace, tenant="demo", profile="cli")
        echo_records = await query_records(js, namespace, tenant="demo", profile="echo")
        mallory = await query_records(js, namespace, tenant="demo", profile="mallory")
        assert [(r.requester, r.target, r.status) for r in cli] == [
            ("cli", "echo", "delivered"),
            ("echo", "cli", "delivered"),
            ("cli", "mallory", "rejected"),
        ]
        assert cli[2].decision_code == "TARGET_NOT_ALLOWED" and cli[2].policy_version == 1
        assert [(r.requester, r.target) for r in echo_records] == [("cli", "echo"), ("echo", "cli")]
        assert mallory == []
        assert cli[0].trace_id == cli[1].trace_id == hello.id
        assert cli[1].causation_id == hello.id and cli[1].task == "agent_response"
        stored = [m async for m in read_history(js, namespace.stream("audit"))]
        assert all(OPENAI_KEY.encode() not in m.data for m in stored)
    finally:
        for process in (gate, echo, auditor):
            process.close()
