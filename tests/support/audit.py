"""Driving the auditor in tests: its key and settings, and the facts the gate would publish."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)
from nats.js import JetStreamContext

from bus import MSG_ID, TRACEPARENT, traceparent_for
from schemas import Decision, ErrorCode, Namespace, SessionEvent, encode, new_id, utc_now
from tests.support.processes import ProcessOutput, parley_env, start_actor

__all__ = ("AuditorKeys", "decision", "publish_fact", "session_event", "start_auditor")


class AuditorKeys:
    """A fresh checkpoint signing key written where the auditor process can read it."""

    def __init__(self, directory: Path) -> None:
        self.private = Ed25519PrivateKey.generate()
        self.public: Ed25519PublicKey = self.private.public_key()
        self.private_path = directory / "auditor.key"
        self.public_path = directory / "auditor.pub"
        self.private_path.write_bytes(
            self.private.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        )
        self.public_path.write_bytes(
            self.public.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
        )


def start_auditor(
    url: str,
    ns: Namespace,
    keys: AuditorKeys,
    directory: Path,
    *,
    tenant: str = "demo",
    checkpoint_every: int = 1000,
    checkpoint_s: float = 10.0,
    extra: str = "",
    name: str = "auditor",
    ack_wait_s: float = 5.0,
) -> ProcessOutput:
    """`parley run auditor` as a real process, with its options in a TOML file."""
    config = directory / f"{name}.toml"
    config.write_text(
        f"ack_wait_s = {ack_wait_s}\n"
        "max_deliver = 100\n"
        "grace_s = 5.0\n"
        "fetch_batch = 256\n"
        "max_in_flight = 1024\n"
        "[options]\n"
        f'signing_key = "{keys.private_path}"\n'
        f'tenant = "{tenant}"\n'
        f"checkpoint_every = {checkpoint_every}\n"
        f"checkpoint_s = {checkpoint_s}\n" + extra
    )
    env = parley_env(url, ns.root, allow_lazy_fsync="true")
    process = start_actor("auditor", "auditor", env, "--config", str(config))
    process.name = name
    return process


def decision(
    sender: str,
    target: str,
    *,
    allowed: bool = True,
    trace_id: str = "",
    objective: str = "",
    preview: str = "",
    session_id: str | None = None,
    causation_id: str = "",
    hop_count: int = 0,
    kind: str = "agent_call",
) -> Decision:
    """A decision as the gate publishes it on `parley.decisions.<sender>`."""
    envelope_id = new_id()
    return Decision(
        id=new_id(),
        created_at=utc_now(),
        allowed=allowed,
        code=None if allowed else ErrorCode.TARGET_NOT_ALLOWED,
        rule="allow" if allowed else "targets",
        message="" if allowed else f"{sender} may not call {target}",
        sender=sender,
        target=target,
        envelope_id=envelope_id,
        envelope_kind=kind,
        causation_id=causation_id,
        trace_id=trace_id or envelope_id,
        hop_count=hop_count,
        origin=sender,
        session_id=session_id,
        objective=objective,
        preview=preview,
        bundle_version=3,
        decided_at=utc_now(),
    )


def session_event(session_id: str, event_type: str, speaker: str | None = None) -> SessionEvent:
    return SessionEvent(
        id=new_id(),
        created_at=utc_now(),
        session_id=session_id,
        event_type=event_type,  # type: ignore[arg-type]
        speaker=speaker,
        round=1 if speaker else None,
    )


async def publish_fact(js: JetStreamContext, ns: Namespace, fact: Decision | SessionEvent) -> int:
    """Publish a fact where the gate (a decision) or the router (a session event) would."""
    if isinstance(fact, Decision):
        subject = ns.decisions(fact.sender)
        headers = {
            MSG_ID: fact.id,
            "Parley-Trace-Id": fact.trace_id,
            TRACEPARENT: traceparent_for(fact.trace_id, fact.id),
        }
    else:
        subject = ns.events("cli", fact.session_id)
        headers = {MSG_ID: fact.id}
    ack = await js.publish(subject, encode(fact), headers=headers)
    return int(ack.seq)
