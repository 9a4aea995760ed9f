"""Retention (bus/_retention.py): ended sessions, traces, artifacts and the audit history age
out as the settings say, while an open session, a trace in use and the audit chain's
verification stay.

Short retentions are set through the settings; each test waits, with a bound, for what should
vanish to vanish, and then checks what must stay.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec
import pytest
from nats.aio.client import Client as NATS
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from actors.router._session import Session
from actors.router._store import SessionStore
from actors.tools import ArtifactNotFound, ArtifactShareExceeded, ArtifactStore, ArtifactUri
from bus import EmbeddedServer, Payer, Retention, Shares, provision
from schemas import Namespace, key_id, new_id
from tests.integration.test_router import alternating, router_running, run_session
from tests.support.audit import AuditorKeys, decision, publish_fact, start_auditor
from tests.support.lockdown import LockedDown
from tests.support.processes import READY
from tests.support.router_wire import collaborate
from tools.audit import read_off_box, verify_stream

_BOUND_S = 20.0
"""Longest wait for a record to age out: the retention plus the broker's expiry sweeps."""


async def _within(
    what: str, done: Callable[[], Awaitable[bool]], bound_s: float = _BOUND_S
) -> None:
    deadline = time.monotonic() + bound_s
    while not await done():
        assert time.monotonic() < deadline, f"{what} within {bound_s} s"
        await asyncio.sleep(0.1)  # polling a condition with a bound, not synchronising on time


async def _has(kv: KeyValue, key: str) -> bool:
    try:
        await kv.get(key)
    except KeyNotFoundError:
        return False
    return True


def _session(session_id: str) -> Session:
    return Session(
        session_id=session_id,
        origin_id=new_id(),
        mode="collaborate",
        participants=("gpt", "claude"),
        goal="g",
        first_speaker="gpt",
    )


async def test_an_ended_session_expires_whole_and_an_open_one_never(
    nc: NATS, namespace: Namespace
) -> None:
    js = nc.jetstream()
    retention = Retention(ended_sessions_s=1)
    await provision(js, namespace, retention=retention)  # over the fixture's defaults
    kv = await js.key_value(namespace.bucket("sessions"))
    store = SessionStore(kv, Session, "session", ended_ttl_s=retention.ended_session_ttl_s)
    opened, ended = _session("s-open"), _session("s-ended")
    trace = new_id()
    await store.create(opened)
    assert await store.create_linked(ended, trace)
    stored = await store.load("s-ended", fresh=True)
    assert stored is not None
    # Older revisions of the key, which a TTL on the last one alone would leave behind.
    running = msgspec.structs.replace(ended, round=2)
    await store.update(running, stored.revision)
    stored = await store.load("s-ended", fresh=True)
    assert stored is not None
    done = msgspec.structs.replace(running, status="completed", stop_reason="final")
    await store.update(done, stored.revision, trace_id=trace)

    async def gone() -> bool:
        return not await _has(kv, "session.s-ended") and not await _has(kv, f"trace.{trace}")

    await _within("the ended session and its trace's link expire", gone)
    assert await store.load("s-ended", fresh=True) is None, "an older revision came back"
    # Created before the other one ended, so older than its retention by now: still there.
    assert await store.load("s-open", fresh=True) is not None


async def test_a_session_the_router_ended_expires_with_its_trace_link(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    kv = await nc.jetstream().key_value(namespace.bucket("sessions"))
    request = collaborate("Say it once, then stop.")
    retention = '{"ended_sessions_s": 1}'
    async with router_running(
        nc, nats_server, namespace, alternating(final_at=2), retention=retention
    ) as (wire, _, _):
        timeline = await run_session(nc, namespace, wire, request)
        assert timeline.events[-1].stop_reason == "final"

        async def gone() -> bool:
            return not await _has(kv, f"session.{request.session_id}") and not await _has(
                kv, f"trace.{request.id}"
            )

        await _within("the ended session and its trace's link expire", gone)


async def test_the_router_expires_an_ended_session_with_only_its_own_grants(
    locked_down: LockedDown,
) -> None:
    await locked_down.provision()
    nc = await locked_down.connect("router")
    try:
        kv = await locked_down.js(nc, "router").key_value(locked_down.ns.bucket("sessions"))
        store = SessionStore(kv, Session, "session", ended_ttl_s=1)
        trace = new_id()
        assert await store.create_linked(_session("s-1"), trace)
        stored = await store.load("s-1", fresh=True)
        assert stored is not None
        done = msgspec.structs.replace(stored.session, status="canceled", stop_reason="canceled")
        await store.update(done, stored.revision, trace_id=trace)

        async def gone() -> bool:
            return not await _has(kv, "session.s-1") and not await _has(kv, f"trace.{trace}")

        await _within("the ended session expires", gone)
    finally:
        await nc.close()


async def test_traces_and_waits_age_as_set_and_a_trace_in_use_keeps_its_record(
    nc: NATS, namespace: Namespace
) -> None:
    js = nc.jetstream()
    retention = Retention(traces_s=2, waits_s=3, audit_s=3600)
    await provision(js, namespace, retention=retention, agents=("gpt",))
    traces = await js.key_value(namespace.bucket("traces"))
    claims = await js.stream_info(f"KV_{namespace.bucket('idempotency')}")
    waits = await js.stream_info(f"KV_{namespace.agent_bucket('waits', 'gpt')}")
    audit = await js.stream_info(namespace.stream("audit"))
    assert claims.config.max_age == 2 + 24 * 3600, "an id claim outlives its trace's records"
    assert waits.config.max_age == 3
    assert audit.config.max_age == 3600
    await traces.put("trace.idle", b"{}")
    await traces.put("trace.busy", b"{}")

    async def idle_gone() -> bool:
        await traces.put("trace.busy", b"{}")  # a trace in use: rewritten at each envelope
        return not await _has(traces, "trace.idle")

    await _within("an idle trace's record ages out", idle_gone)
    assert await _has(traces, "trace.busy")


async def test_audit_verify_holds_after_the_oldest_records_aged_out(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    js = nc.jetstream()
    keys = AuditorKeys(tmp_path)
    stream = namespace.stream("audit")
    auditor = start_auditor(
        nats_server.url, namespace, keys, tmp_path, checkpoint_every=5, checkpoint_s=0.3,
        extra="[retention]\naudit_s = 4\n",
    )  # fmt: skip
    try:
        await auditor.wait_line(READY)
        for i in range(10):
            await publish_fact(js, namespace, decision("gpt", "x", allowed=False, objective=str(i)))
        await auditor.wait_line(r'"count":10\b', timeout=30)

        async def aged_out() -> bool:
            return (await js.stream_info(stream)).state.messages == 0

        await _within("the first records age out", aged_out)
        for i in range(10, 20):
            await publish_fact(js, namespace, decision("gpt", "x", allowed=False, objective=str(i)))
        await auditor.wait_line(r'"count":20\b', timeout=30)
        report = await verify_stream(
            js,
            stream,
            trusted={key_id(keys.public): keys.public},
            off_box=read_off_box(auditor.lines),  # checkpoints 5 and 10 among them
            strict=True,
        )
        assert report.ok, report
        assert (report.expired, report.records, report.covered) == (10, 20, 20)
    finally:
        auditor.close()


async def test_artifacts_age_out_and_their_bytes_come_back_to_the_share(
    nc: NATS, namespace: Namespace
) -> None:
    js = nc.jetstream()
    retention = Retention(artifacts_s=2)
    await provision(js, namespace, retention=retention)  # over the fixture's 7 days
    objects = await js.stream_info(f"OBJ_{namespace.bucket('artifacts')}")
    runs = await js.stream_info(f"KV_{namespace.bucket('tool_runs')}")
    assert objects.config.max_age == 2
    assert runs.config.max_age == 8 * 24 * 3600, "the counts outlive what they count"
    assert Retention(artifacts_s=30 * 24 * 3600).bucket_ttl("tool_runs", 8.0) == 31 * 24 * 3600
    kv = await js.key_value(namespace.bucket("tool_runs"))
    shares = Shares(kv, per_person=3000, per_agent=3000, retention_s=2)
    store = ArtifactStore(js, namespace, "demo", shares=shares)
    alice = Payer("person", "alice")
    text = await store.put_bytes("s1", b"x" * 900, name="a", step_id="1", payers=[alice])
    with pytest.raises(ArtifactShareExceeded):
        await store.put_bytes("s1", b"y" * 900, name="b", step_id="2", payers=[alice])

    async def expired() -> bool:
        try:
            await store.get(ArtifactUri.parse(text))
        except ArtifactNotFound:
            return True
        return False

    await _within("an artifact ages out", expired)
    await _within("its bytes leave the share", lambda: _no_bytes(shares, alice))
    await store.put_bytes("s1", b"y" * 900, name="b", step_id="2", payers=[alice])


async def _no_bytes(shares: Shares, payer: Payer) -> bool:
    return await shares.used(payer) == 0
