"""Dead letters reach the audit chain: bad bytes at the gate's and an agent's input become
typed, redacted records under the actor that gave up on them, the chain still verifies, the
payload is never copied, and a restarted auditor reading them again records none twice.
Real gate, echo and auditor processes on the real server."""

from __future__ import annotations

import asyncio
import hashlib
import signal
import subprocess
import sys
from pathlib import Path

from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from bus import DEAD_REASON, SENDER, EmbeddedServer, read_history
from schemas import AuditRecord, DecodeError, Namespace, decode_envelope, key_id
from tests.support.audit import AuditorKeys, start_auditor
from tests.support.gate import Signer, make_bundle, publish_bundle, start_gate
from tests.support.processes import READY, REPO, ProcessOutput, parley_env, start_actor
from tools.audit import query_records, read_off_box, verify_stream

# An API-key-shaped fake, built at run time so no credential-shaped string is committed.
SECRET = "sk-proj-" + "Hq93Lm" * 8


def _garbage(label: str) -> bytes:
    """A truncated envelope holding the secret: bytes no decoder accepts."""
    return f'{{"kind":"agent_call","text":"{label}: use {SECRET}"'.encode()


def _reason(payload: bytes) -> str:
    try:
        decode_envelope(payload)
    except DecodeError as exc:
        return f"decode_{exc.reason}"
    raise AssertionError("the garbage decoded")


async def _dead_letters(js: JetStreamContext, ns: Namespace) -> list[tuple[str, str]]:
    """(subject, reason) of every dead letter stored."""
    return [
        (m.subject, (m.headers or {}).get(DEAD_REASON, ""))
        async for m in read_history(js, ns.stream("dead"))
    ]


async def _dead_records(js: JetStreamContext, ns: Namespace) -> list[AuditRecord]:
    records = await query_records(js, ns, tenant="demo")
    return [r for r in records if r.fact == "dead_letter"]


def _verify_cli(url: str, ns: Namespace, keys: AuditorKeys) -> subprocess.CompletedProcess[str]:
    argv = ["audit", "verify", "--key", str(keys.public_path), "--namespace", ns.root]
    return subprocess.run(
        [sys.executable, "-m", "tools", *argv],
        env=parley_env(url, ns.root),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


async def _stop(process: ProcessOutput) -> None:
    process.signal(signal.SIGTERM)
    assert await process.wait_exit() == 0
    process.close()


async def test_bad_input_is_audited_once_without_its_payload(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    js = nc.jetstream()
    signer = Signer.create(tmp_path)
    await publish_bundle(
        js,
        namespace,
        signer.sign(make_bundle(cli={"start_traces": True, "speaks_for_person": True})),
    )
    keys = AuditorKeys(tmp_path)
    gate = start_gate(nats_server.url, namespace, signer, ack_wait_s="5")
    echo = start_actor("echo", "echo", parley_env(nats_server.url, namespace.root))
    auditor = start_auditor(nats_server.url, namespace, keys, tmp_path, checkpoint_s=0.3)
    processes = [gate, echo, auditor]
    try:
        for process in processes:
            await process.wait_line(READY)
        at_gate, at_echo = _garbage("gate"), _garbage("echo")
        submitted = await js.publish(namespace.submit("gpt"), at_gate)
        delivered = await js.publish(namespace.deliver("echo"), at_echo, headers={SENDER: "cli"})
        await auditor.wait_line(r'"count":2\b', timeout=30)

        records = {r.profile: r for r in await _dead_records(js, namespace)}
        assert set(records) == {"gate", "echo"}
        for profile, ack, payload, subject in (
            ("gate", submitted, at_gate, namespace.submit("gpt")),
            ("echo", delivered, at_echo, namespace.deliver("echo")),
        ):
            record = records[profile]
            assert (record.status, record.success) == (_reason(payload), False)
            assert (record.source_stream, record.source_seq) == (ack.stream, ack.seq)
            assert (record.source_subject, record.attempt) == (subject, 1)
            assert record.payload_bytes == len(payload)
            assert record.payload_sha256 == hashlib.sha256(payload).hexdigest()
        assert sorted(await _dead_letters(js, namespace)) == sorted(
            # The gate's letter is bounded under gpt, who submitted it (docs/quotas.md).
            (namespace.dead(r.profile, "gpt" if r.profile == "gate" else None), r.status)
            for r in records.values()
        )

        # Neither the payload nor the secret in it is anywhere in the audit stream or log.
        stored = [m async for m in read_history(js, namespace.stream("audit"))]
        for message in stored:
            assert SECRET.encode() not in message.data
            assert at_gate not in message.data and at_echo not in message.data
            assert all(SECRET not in value for value in (message.headers or {}).values())
        assert all(SECRET not in line for line in auditor.lines)

        # A restarted auditor that reads every dead letter again (its consumer gone, as if it
        # had crashed before acking them) records only the new one.
        first_lines = list(auditor.lines)
        await _stop(auditor)
        await js.delete_consumer(namespace.stream("dead"), "auditor")
        third = await js.publish(namespace.submit("claude"), _garbage("again"))
        await gate.wait_line(rf'"msg":"dead-lettered a message".*"seq":{third.seq}\b')
        auditor = start_auditor(
            nats_server.url, namespace, keys, tmp_path, checkpoint_s=0.3, name="auditor2"
        )
        processes[2] = auditor
        await auditor.wait_line(READY)
        await auditor.wait_line(r'"count":[3-9]\b', timeout=30)  # 3, unless it duplicated
        await _stop(auditor)
        consumer = await js.consumer_info(namespace.stream("dead"), "auditor")
        assert (consumer.num_pending, consumer.num_ack_pending) == (0, 0)  # all read, all acked
        again = await _dead_records(js, namespace)
        assert sorted(r.profile for r in again) == ["echo", "gate", "gate"]
        assert max(r.source_seq for r in again if r.profile == "gate") == third.seq
        assert len({r.id for r in again}) == len(again) == 3

        report = await verify_stream(
            js,
            namespace.stream("audit"),
            trusted={key_id(keys.public): keys.public},
            off_box=read_off_box(first_lines + auditor.lines),
            strict=True,
        )
        assert report.ok, report
        verify = await asyncio.to_thread(_verify_cli, nats_server.url, namespace, keys)
        assert verify.returncode == 0 and "intact" in verify.stdout, verify.stdout
    finally:
        for process in processes:
            process.close()
