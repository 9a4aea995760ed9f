"""Running the real gate in tests: keys, signed bundles in KV, the gate process, its decisions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from nats.js import JetStreamContext

from actors.gate import BUNDLE_KEY
from bus import CAUSATION_ID, MSG_ID
from schemas import (
    BUNDLE_PAYLOAD_TYPE,
    AnyEnvelope,
    Decision,
    Namespace,
    PolicyBundle,
    ProfilePolicy,
    decode_envelope,
    encode,
    sign_payload,
    utc_now,
)
from tests.support.processes import ProcessOutput, parley_env, start_actor

__all__ = ("Decisions", "Signer", "make_bundle", "start_gate", "submit")


def make_bundle(version: int = 1, *, days: float = 1, **profiles: dict[str, Any]) -> PolicyBundle:
    return PolicyBundle(
        schema_version="1.0",
        version=version,
        tenant_id="test",
        expires_at=utc_now() + timedelta(days=days),
        profiles={name: ProfilePolicy(**p) for name, p in profiles.items()},
    )


@dataclass
class Signer:
    """A policy signing key, its public half on disk for the gate."""

    key: Ed25519PrivateKey
    pub_path: Path

    @classmethod
    def create(cls, directory: Path, name: str = "policy") -> Signer:
        key = Ed25519PrivateKey.generate()
        pub = directory / f"{name}.pub"
        pub.write_bytes(
            key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
        )
        return cls(key, pub)

    def sign(self, bundle: PolicyBundle) -> bytes:
        return sign_payload(msgspec.json.encode(bundle), BUNDLE_PAYLOAD_TYPE, self.key)


async def publish_bundle(js: JetStreamContext, ns: Namespace, signed: bytes) -> None:
    kv = await js.key_value(ns.bucket("policy"))
    await kv.put(BUNDLE_KEY, signed)


def start_gate(
    url: str,
    ns: Namespace,
    signer: Signer,
    options: Mapping[str, object] | None = None,
    **settings: str,
) -> ProcessOutput:
    """Start `parley run gate` as a real process trusting `signer`, for tenant `test`, with
    `options` besides those."""
    encoded = msgspec.json.encode(
        {"policy_keys": [str(signer.pub_path)], "tenant": "test", **(options or {})}
    )
    env = parley_env(url, ns.root, options=encoded.decode(), **settings)
    return start_actor("gate", "gate", env)


async def submit(
    js: JetStreamContext,
    ns: Namespace,
    sender: str,
    envelope: AnyEnvelope,
    *,
    cause: str = "",
    headers: dict[str, str] | None = None,
) -> None:
    """Publish `envelope` on `sender`'s submit subject, as that actor (or a forger) would."""
    out = {MSG_ID: envelope.id, **(headers or {})}
    if cause:
        out[CAUSATION_ID] = cause
    await js.publish(ns.submit(sender), encode(envelope), headers=out)


class Decisions:
    """Reads the gate's decisions in order, through a durable pull consumer."""

    def __init__(self, js: JetStreamContext, ns: Namespace) -> None:
        self._js, self._ns = js, ns

    async def open(self) -> Decisions:
        self._sub = await self._js.pull_subscribe(
            f"{self._ns.root}.decisions.>",
            durable="test-decisions",
            stream=self._ns.stream("events"),
        )
        return self

    async def next(self, timeout: float = 20.0) -> Decision:
        (msg,) = await self._sub.fetch(1, timeout=timeout)
        await msg.ack()
        decision = decode_envelope(msg.data)
        assert isinstance(decision, Decision)
        return decision

    async def until(self, envelope_id: str, timeout: float = 20.0) -> Decision:
        """Skip decisions until the one about `envelope_id`."""
        while True:
            decision = await self.next(timeout)
            if decision.envelope_id == envelope_id:
                return decision
