"""The chain holds: through a SIGKILL mid-run, and against writes the auditor did not make."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path

import msgspec
from nats.aio.client import Client as NATS

from actors.auditor._chain import CHECKPOINT_PROFILE, seal
from bus import EmbeddedServer, read_history
from schemas import AuditRecord, Namespace, encode, key_id
from tests.support.audit import AuditorKeys, decision, publish_fact, start_auditor
from tests.support.processes import READY, ProcessOutput
from tools.audit import query_records, read_off_box, verify_stream

_records = msgspec.json.Decoder(AuditRecord)
ACK_WAIT_S = 0.3
"""Far below what a deployment uses, so settling often times out and facts come back."""


async def test_sigkill_during_a_3000_fact_run_leaves_no_gap_and_no_duplicate(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    js = nc.jetstream()
    keys = AuditorKeys(tmp_path)
    total = 3000

    async def publish(facts: range) -> None:
        futures = []
        for i in facts:  # refused calls: one record each, on one of three profiles
            fact = decision(f"p{i % 3}", "x", allowed=False, objective=f"fact {i}")
            futures.append(
                await js.publish_async(
                    namespace.decisions(fact.sender), encode(fact), headers={"Nats-Msg-Id": fact.id}
                )
            )
        await asyncio.gather(*futures)

    def auditor(name: str) -> ProcessOutput:
        return start_auditor(
            nats_server.url, namespace, keys, tmp_path, name=name,
            checkpoint_every=250, checkpoint_s=0.5, ack_wait_s=ACK_WAIT_S,
        )  # fmt: skip

    first = auditor("auditor-1")
    second = None
    try:
        await first.wait_line(READY)
        await publish(range(total // 2))
        # Killed while appending: its first checkpoint is out, most of the backlog is not.
        await first.wait_line(r'"count":\d+\b', timeout=30)
        first.kill()
        await publish(range(total // 2, total))
        second = auditor("auditor-2")
        await second.wait_line(READY)
        # What the first wrote after its last checkpoint is pinned now, and said to be so.
        unvouched = int(any("pinning records written before" in line for line in second.lines))
        chain_length = total + unvouched
        await second.wait_line(rf'"count":{chain_length}\b', timeout=45)
        second.signal(signal.SIGTERM)
        assert await second.wait_exit() == 0

        stored = [m async for m in read_history(js, namespace.stream("audit"))]
        records = [
            _records.decode(m.data) for m in stored if not m.subject.endswith(CHECKPOINT_PROFILE)
        ]
        sources = Counter(r.source_seq for r in records if r.fact == "decision")
        assert sorted(sources) == list(range(1, total + 1)), "a fact is missing"
        assert max(sources.values()) == 1, "a fact was recorded twice"
        assert [r.chain_index for r in records] == list(range(1, chain_length + 1))
        report = await verify_stream(
            js,
            namespace.stream("audit"),
            trusted={key_id(keys.public): keys.public},
            off_box=read_off_box(first.lines + second.lines),
            strict=True,
        )
        assert report.ok, report
        assert report.covered == chain_length and len(report.unvouched) == unvouched
    finally:
        first.close()
        if second is not None:
            second.close()


async def test_a_forged_record_written_through_an_admin_connection_is_caught(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    """An admin forges a perfectly chained, sealed record; the auditor notices and says so."""
    js = nc.jetstream()
    keys = AuditorKeys(tmp_path)
    auditor = start_auditor(nats_server.url, namespace, keys, tmp_path, checkpoint_s=0.3)
    try:
        await auditor.wait_line(READY)
        await publish_fact(js, namespace, decision("gpt", "claude", allowed=False))
        await auditor.wait_line(r'"count":1\b')
        stored = [m async for m in read_history(js, namespace.stream("audit"))]
        head = _records.decode(stored[0].data)
        forged = msgspec.structs.replace(
            head, id="forged", status="delivered", success=True, chain_index=2,
            prev_hash=head.hash, hash="",
        )  # fmt: skip
        data, _ = seal(encode(forged))
        await js.publish(namespace.audit("demo", "gpt"), data)
        await publish_fact(js, namespace, decision("gpt", "claude", allowed=False))
        # The forged record, the alert about it, the fact: three records, all pinned.
        await auditor.wait_line(r'"count":4\b', timeout=20)
        alerts = await query_records(js, namespace, tenant="demo", profile="_alerts")
        assert len(alerts) == 1 and "not written by the auditor" in (alerts[0].failure_reason or "")
        report = await verify_stream(
            js, namespace.stream("audit"), trusted={key_id(keys.public): keys.public}
        )
        # The chain holds (the auditor adopted and flagged the forgery); verify says so.
        assert report.ok and report.alerts == 1, report
        # A message that claims no place in the chain at all (the server's JSON, named as a
        # reply subject by a trusted actor) is reported beside it, never breaks it.
        await js.publish(namespace.audit("demo", "claude"), b'{"type": "io.nats.jetstream"}')
        await publish_fact(js, namespace, decision("gpt", "claude", allowed=False))
        await auditor.wait_line(r'"count":6\b', timeout=20)
        report = await verify_stream(
            js, namespace.stream("audit"), trusted={key_id(keys.public): keys.public}, strict=True
        )
        assert report.ok, report
        assert len(report.foreign) == 1 and "not a sealed audit record" in report.foreign[0]
    finally:
        auditor.signal(signal.SIGTERM)
        await auditor.wait_exit()
        auditor.close()
