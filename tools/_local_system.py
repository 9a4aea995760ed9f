"""`parley up` with no topology: the real system on this machine, ready to be talked to.

A newcomer's first `parley up` used to start two echo actors and the console: no gate, router,
agents or auditor, so nothing they then typed could work, and nothing shipped ran the auditor
that `parley audit`, `trace`, `calls` and the console's audit views read. Now it starts the
system the README describes: the gate, the router, the auditor, the agent hosts `gpt` and
`claude` (scripted brains unless their profiles in `deploy/agents/` name a provider) and the
web console, locked down like any `parley up`.

What the system needs beyond its processes is made once and kept under `.parley/keys/`
(owner-only): the policy key pair the gate trusts and the auditor's checkpoint key. The
shipped demo bundle (`deploy/policy/demo.toml`, tenant `demo`) is signed with that key and
published when the policy bucket holds no bundle yet, so the demo's traffic is admitted at
once; a bundle of a person's own, signed with `.parley/keys/policy.key` and published with
`parley policy publish`, is kept across restarts (publishing is create-only here).
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)
from nats.js.errors import KeyWrongLastSequenceError

from actors.gate import BUNDLE_KEY
from bus import ChildSpec, Topology, connect, jetstream, load_private_key, load_settings, shipped
from schemas import BUNDLE_PAYLOAD_TYPE, Namespace, decode_bundle, sign_payload
from tools._local import LOCAL_BROKER, LOCAL_DIR, LOCAL_KEYS
from tools.natsconf import POLICY_SIGNER

__all__ = (
    "LOCAL_AGENTS",
    "LOCAL_KEYS",
    "LOCAL_POLICY",
    "LOCAL_TENANT",
    "local_system_topology",
    "publish_local_policy",
)

LOCAL_TENANT: Final = "demo"
"""The shipped bundle's tenant, which the gate and the auditor serve."""
LOCAL_AGENTS: Final = ("gpt", "claude")
LOCAL_POLICY: Final = Path("deploy/policy/demo.toml")


def _key_pair(private: Path, public: Path | None = None) -> Ed25519PrivateKey:
    """The Ed25519 key at `private`, made (owner-only) the first time; its public half is
    written to `public` when asked."""
    if private.exists():
        key = load_private_key(private)
    else:
        private.parent.mkdir(parents=True, exist_ok=True)
        private.parent.chmod(0o700)
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        descriptor = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as out:
            out.write(pem)
    if public is not None and not public.exists():
        public.write_bytes(
            key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
        )
    return key


def local_system_topology(keys: Path = LOCAL_KEYS) -> Topology:
    """The local system's processes, with the keys they need made under `keys`."""
    _key_pair(keys / "policy.key", keys / "policy.pub")
    _key_pair(keys / "audit.key", keys / "audit.pub")
    agents_dir = shipped("deploy/agents").resolve()
    gate = {"policy_keys": [str((keys / "policy.pub").resolve())], "tenant": LOCAL_TENANT}
    auditor = {"signing_key": str((keys / "audit.key").resolve()), "tenant": LOCAL_TENANT}
    console = {
        "port": 0,
        "url_file": str(LOCAL_DIR / "console.url"),
        "audit_reader": str(LOCAL_BROKER / "actors" / "audit-cli.toml"),
        "audit_tenant": LOCAL_TENANT,
    }
    agent = {"agents_dir": str(agents_dir)}

    def options(values: Mapping[str, object]) -> dict[str, str]:
        return {"PARLEY_OPTIONS": json.dumps(values)}

    children = (
        ChildSpec(name="gate", run="gate", env=options(gate)),
        ChildSpec(name="router", run="router"),
        ChildSpec(name="auditor", run="auditor", env=options(auditor)),
        *(ChildSpec(name=name, run="agent", env=options(agent)) for name in LOCAL_AGENTS),
        ChildSpec(name="console", run="console", env=options(console)),
    )
    return Topology(settings={"log_level": "info"}, actor=children)


async def publish_local_policy(
    url: str, namespace: Namespace, *, locked: bool, keys: Path = LOCAL_KEYS
) -> bool:
    """Sign the shipped demo bundle with the local key and publish it, as the policy signer,
    unless a bundle is stored already; whether it was published."""
    payload = msgspec.json.encode(tomllib.loads(shipped(LOCAL_POLICY).read_text()))
    decode_bundle(payload)  # never publish what no gate could read
    signed = sign_payload(payload, BUNDLE_PAYLOAD_TYPE, _key_pair(keys / "policy.key"))
    config = LOCAL_BROKER / "actors" / f"{POLICY_SIGNER}.toml" if locked else None
    settings = load_settings(config, nats_url=url, namespace=namespace.root)
    nc = await connect(settings, POLICY_SIGNER, reconnect_forever=False)
    try:
        kv = await jetstream(nc, settings).key_value(namespace.bucket("policy"))
        try:
            await kv.update(BUNDLE_KEY, signed, last=0)  # create-only: a signer may not read
        except KeyWrongLastSequenceError:
            return False
        return True
    finally:
        await nc.close()
