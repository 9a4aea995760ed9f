"""Issue 13, findings 6 and 9: the gate's bundle history and floor, trace headers, redaction.

Real nats-server, real gate (and auditor) processes. The foreign writer of the floor is a raw
nats-py client holding the router's credentials under the least-privilege config: it makes
the server write a foreign JSON document (a JetStream API answer) on the floor's key by naming
that key as the reply subject of a request it is allowed to make. An agent can no longer do
this (its account of its own: tests/security/test_reply_subjects.py); a trusted actor that
shares the account with the streams still can, so the gate must treat such a value as foreign.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from msgspec import structs
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from actors.gate._redaction import redaction_key
from bus import (
    BUNDLE_KEY,
    CAUSATION_ID,
    HOP_COUNT,
    ORIGIN,
    TRACE_ID,
    TRUSTED_VERSION_KEY,
    ConfigError,
    EmbeddedServer,
    Settings,
    read_history,
)
from schemas import (
    AgentCall,
    AuditRecord,
    Decision,
    DelegationRequest,
    DsseEnvelope,
    DsseSignature,
    ErrorCode,
    HumanMessage,
    Namespace,
    PolicyBundle,
    decode_envelope,
    find_secrets,
    new_id,
    utc_now,
)
from tests.support.audit import AuditorKeys, start_auditor
from tests.support.gate import Decisions, Signer, make_bundle, publish_bundle, start_gate, submit
from tests.support.lockdown import LockedDown
from tests.support.processes import READY, ProcessOutput, parley_env, start_actor

pytestmark = pytest.mark.chaos

PUBLIC_DEFAULT_KEY = b"parley-redact-v1"
"""The HMAC key every Parley install shared before: markers under it confirm guesses."""


def _note(target: str = "sink") -> HumanMessage:
    return HumanMessage(
        id=new_id(), created_at=utc_now(), text="hi", call_id=new_id(), target=target
    )


def _badly_signed(signer: Signer, stranger: Signer, bundle: PolicyBundle) -> bytes:
    """`bundle` under the signer's key id with a signature that is not the signer's."""
    mine = msgspec.json.decode(signer.sign(bundle), type=DsseEnvelope)
    theirs = msgspec.json.decode(stranger.sign(bundle), type=DsseEnvelope)
    forged = DsseSignature(keyid=mine.signatures[0].keyid, sig=theirs.signatures[0].sig)
    return msgspec.json.encode(structs.replace(mine, signatures=(forged,)))


async def test_a_restarted_gate_skips_a_badly_signed_newest_bundle_for_the_last_good_one(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    js = nc.jetstream()
    signer, stranger = Signer.create(tmp_path), Signer.create(tmp_path, "stranger")
    good = make_bundle(
        1, notes={"start_traces": True, "speaks_for_person": True, "allowed_targets": ("sink",)}
    )
    await publish_bundle(js, namespace, signer.sign(good))
    gate = start_gate(nats_server.url, namespace, signer, ack_wait_s="5")
    decisions = await Decisions(js, namespace).open()
    try:
        await gate.wait_line('"msg":"policy bundle in force".*"version":1')
        gate.close()
        await publish_bundle(
            js, namespace, _badly_signed(signer, stranger, structs.replace(good, version=2))
        )
        gate = start_gate(nats_server.url, namespace, signer, ack_wait_s="5")
        await gate.wait_line(READY)
        note = _note()
        await submit(js, namespace, "notes", note)
        decision = await decisions.until(note.id)
        assert decision.allowed and decision.bundle_version == 1, decision
        # It says which bundle it took and why it refused the newer one.
        _, refused = await gate.wait_line('"msg":"policy bundle refused"')
        assert '"reason":"bad_signature"' in refused and f'"at":"{BUNDLE_KEY}@' in refused
        _, taken = await gate.wait_line('"msg":"policy bundle in force"')
        assert '"version":1' in taken and "bad_signature" in taken
    finally:
        gate.close()


def _locked_gate(locked: LockedDown, signer: Signer) -> ProcessOutput:
    options = json.dumps({"policy_keys": [str(signer.pub_path)], "tenant": "test"})
    env = parley_env(locked.server.url, locked.ns.root, options=options, ack_wait_s="5")
    return start_actor("gate", "gate", env, "--config", str(locked.settings_file("gate")))


async def _foreign_floor_written_by_router(locked: LockedDown) -> None:
    """The router asks the server about its own durable, naming the floor's key as the reply
    subject; wait until the server's answer is stored there (watched as the gate, a reader
    of the bucket)."""
    ns = locked.ns
    observer = await locked.connect("gate")
    kv = await observer.jetstream().key_value(ns.bucket("policy"))
    watcher = await kv.watch(TRUSTED_VERSION_KEY)
    router = await locked.connect("router")
    try:
        await router.publish(
            f"$JS.API.CONSUMER.INFO.{ns.stream('deliver')}.router",
            b"",
            reply=f"$KV.{ns.bucket('policy')}.{TRUSTED_VERSION_KEY}",
        )
        await router.flush()
        while True:
            entry = await watcher.updates(timeout=10)  # type: ignore[no-untyped-call]
            if entry is not None and entry.value and b"consumer_info_response" in entry.value:
                return
    finally:
        await watcher.stop()  # type: ignore[no-untyped-call]
        await router.close()
        await observer.close()


async def test_foreign_json_on_the_floor_neither_crashes_the_gate_nor_lowers_the_floor(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    locked, ns = locked_down, locked_down.ns
    await locked.provision()
    signer = Signer.create(tmp_path)
    v2 = make_bundle(
        2, notes={"start_traces": True, "speaks_for_person": True, "allowed_targets": ("sink",)}
    )
    v3 = structs.replace(v2, version=3, label="three")
    admin = await locked.connect("provisioner")  # publishing bundles is an operator's act
    js = admin.jetstream()
    gate = _locked_gate(locked, signer)
    try:
        kv = await js.key_value(ns.bucket("policy"))
        await kv.put(BUNDLE_KEY, signer.sign(v2))
        await gate.wait_line(READY)
        await gate.wait_line('"msg":"policy bundle in force".*"version":2')
        await _foreign_floor_written_by_router(locked)
        # The next publish reads the floor: the old gate died here on `int(b'{...}')`.
        start = len(gate.lines)
        await kv.put(BUNDLE_KEY, signer.sign(v3))
        await gate.wait_line('"msg":"policy bundle in force".*"version":3', start=start)
        assert gate.process.poll() is None
        # A rollback is still refused, by the running gate...
        await kv.put(BUNDLE_KEY, signer.sign(v2))
        _, line = await gate.wait_line('"msg":"policy bundle refused"', start=start)
        assert '"reason":"rollback"' in line
        # ...and by a restarted one, with the foreign value newest on the floor's key.
        gate.close()
        await _foreign_floor_written_by_router(locked)
        gate = _locked_gate(locked, signer)
        _, foreign = await gate.wait_line('"msg":"foreign trusted-version record ignored"')
        assert '"reason":"malformed"' in foreign
        _, refused = await gate.wait_line('"msg":"policy bundle refused"')
        assert '"reason":"rollback"' in refused
        _, taken = await gate.wait_line('"msg":"policy bundle in force"')
        assert '"version":3' in taken
        await gate.wait_line(READY)
        # The gate wrote the proof back over the foreign value: the next start reads it first.
        reader = await locked.connect("gate")  # the provisioner may write the bucket, not read
        try:
            floors = await reader.jetstream().key_value(ns.bucket("policy"))
            assert (await floors.get(TRUSTED_VERSION_KEY)).value == signer.sign(v3)
        finally:
            await reader.close()
    finally:
        gate.close()
        await admin.close()


async def _raw(js: JetStreamContext, subject: str, stream: str, durable: str) -> list[Msg]:
    sub = await js.pull_subscribe(subject, durable=durable, stream=stream)
    out: list[Msg] = []
    while True:
        try:
            msgs = await sub.fetch(16, timeout=1)
        except TimeoutError:
            return out
        out.extend(msgs)


async def test_decisions_and_their_audit_records_carry_the_trace_they_belong_to(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    js = nc.jetstream()
    signer = Signer.create(tmp_path)
    bundle = make_bundle(
        notes={"start_traces": True, "speaks_for_person": True, "allowed_targets": ("sink",)},
        sink={"allowed_targets": ("other",)},
    )
    await publish_bundle(js, namespace, signer.sign(bundle))
    decisions = await Decisions(js, namespace).open()
    keys = AuditorKeys(tmp_path)
    gate = start_gate(nats_server.url, namespace, signer, ack_wait_s="5")
    auditor = start_auditor(nats_server.url, namespace, keys, tmp_path, checkpoint_s=0.3)
    try:
        for process in (gate, auditor):
            await process.wait_line(READY)
        note, refused = _note(), _note("mallory")
        await submit(js, namespace, "notes", note)
        await decisions.until(note.id)
        call = AgentCall(
            id=new_id(), created_at=utc_now(), target="other", call_id=new_id(), goal="go"
        )
        await submit(js, namespace, "sink", call, cause=note.id)
        await submit(js, namespace, "notes", refused)
        assert (await decisions.until(refused.id)).code == ErrorCode.TARGET_NOT_ALLOWED
        # (trace, hop, causation, origin) each decision's headers must say
        wanted = {
            note.id: (note.id, "0", note.id, "notes"),
            call.id: (note.id, "1", call.id, "notes"),
            refused.id: (refused.id, "0", refused.id, "notes"),
        }
        stored = await _raw(js, f"{namespace.root}.decisions.>", namespace.stream("events"), "hdr")
        seen: dict[str, tuple[str, str, str, str]] = {}
        for msg in stored:
            decision = decode_envelope(msg.data)
            assert isinstance(decision, Decision)
            h = msg.headers or {}
            names = (TRACE_ID, HOP_COUNT, CAUSATION_ID, ORIGIN)
            trace, hop, cause, origin = (h.get(name, "") for name in names)
            seen[decision.envelope_id] = (trace, hop, cause, origin)
            assert h.get(TRACE_ID) == decision.trace_id
        assert seen == wanted
        # 5 records: the note and the call for sender and target each, the refusal once.
        await auditor.wait_line(r'"count":5\b', timeout=30)
        records = [
            m
            async for m in read_history(js, namespace.stream("audit"))
            if not m.subject.endswith("._checkpoint")
        ]
        assert len(records) == 5
        for m in records:
            record = msgspec.json.decode(m.data, type=AuditRecord)
            expected = wanted[record.envelope_id][0]
            assert (record.trace_id, m.headers.get(TRACE_ID)) == (expected, expected), m.headers
            assert m.headers.get(HOP_COUNT) == str(record.hop_count)
    finally:
        for process in (gate, auditor):
            process.close()


async def test_the_gate_redacts_delegations_under_the_deployment_secret(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    js = nc.jetstream()
    signer = Signer.create(tmp_path)
    secret_file = tmp_path / "redaction.key"
    secret_file.write_bytes(b"a deployment secret of at least 32 bytes, not a constant")
    bundle = make_bundle(
        notes={
            "start_traces": True,
            "speaks_for_person": True,
            "allowed_targets": ("sink",),
            "redact_pii": True,
        }
    )
    await publish_bundle(js, namespace, signer.sign(bundle))
    options = json.dumps(
        {
            "policy_keys": [str(signer.pub_path)],
            "tenant": "test",
            "redaction_key_file": str(secret_file),
        }
    )
    gate = start_actor(
        "gate", "gate", parley_env(nats_server.url, namespace.root, options=options, ack_wait_s="5")
    )
    reader = await js.pull_subscribe(
        namespace.deliver("sink"), durable="sink", stream=namespace.stream("deliver")
    )
    text = "call me on +1 415 555 0100, key sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2
    request = DelegationRequest(
        id=new_id(),
        created_at=utc_now(),
        request_id=new_id(),
        origin_employee="notes",
        target_employee="sink",
        user_id="",
        parent_session_id="s",
        objective="o",
        input=text,
    )
    try:
        await gate.wait_line(READY)
        await submit(js, namespace, "notes", request)
        (msg,) = await reader.fetch(1, timeout=20)
        delivered = decode_envelope(msg.data)
        assert isinstance(delivered, DelegationRequest)
        markers = [h.marker for h in find_secrets(text, pii=True, key=secret_file.read_bytes())]
        public = [h.marker for h in find_secrets(text, pii=True, key=PUBLIC_DEFAULT_KEY)]
        assert len(markers) == 2 and all(m in delivered.input for m in markers), delivered.input
        assert not any(m in delivered.input for m in public), delivered.input
    finally:
        gate.close()


def test_redact_without_a_key_never_uses_the_public_default() -> None:
    text = "key sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2
    (public,) = find_secrets(text, key=PUBLIC_DEFAULT_KEY)
    (unkeyed,) = find_secrets(text)
    assert unkeyed.marker != public.marker


def test_a_short_or_missing_redaction_key_file_is_a_clear_config_error(tmp_path: Path) -> None:
    settings = Settings()
    short = tmp_path / "short.key"
    short.write_bytes(b"too short")
    with pytest.raises(ConfigError, match="holds 9 bytes, the minimum is 32"):
        redaction_key(str(short), settings)
    with pytest.raises(ConfigError, match="cannot read"):
        redaction_key(str(tmp_path / "absent.key"), settings)
