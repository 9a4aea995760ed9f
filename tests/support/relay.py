"""Two Parley deployments and a gateway, for the shared-agent relay's tests.

Alice's deployment calls `bob-byte-doc`; Bob's deployment runs `byte-doc` (a scripted brain)
and shares it with Alice's device. Each side has its own nats-server, namespace, signed
policy, gate and relay (real `parley run` processes); the relays meet on a third server, the
gateway. The test plays Alice's caller (`router`): it submits the call and reads the answer
the gate delivers to it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import nats
import pytest
from cryptography.hazmat.primitives import hpke
from nats.aio.client import Client as NATS

from actors.relay import DeviceKeys, save_shared_agent, write_share
from bus import EmbeddedServer, provision
from schemas import (
    AgentCall,
    Namespace,
    PolicyBundle,
    ProfilePolicy,
    SharedAgent,
    ShareRecord,
    device_principal,
    new_id,
    utc_now,
)
from tests.support.agents import start_agent, write_profile
from tests.support.gate import Signer, publish_bundle
from tests.support.lockdown import LockedDown
from tests.support.processes import READY, ProcessOutput, parley_env, start_actor

__all__ = (
    "GATEWAY_READY",
    "SCRIPT",
    "Side",
    "TwoDeployments",
    "byte_doc_call",
    "forge_frame",
    "relay_servers",
    "start_two_deployments",
)

SCRIPT = """
[[turn]]
message = "byte-doc reviewed it: {goal}"
final = true
"""

GATEWAY_READY = r"gateway ready"


@dataclass
class Side:
    """One deployment: its server, namespace, client, device and processes."""

    name: str
    server: EmbeddedServer
    ns: Namespace
    nc: NATS
    keys: DeviceKeys
    dir: Path
    signer: Signer
    env: dict[str, str] = field(default_factory=dict)
    relay: ProcessOutput | None = None
    configs: dict[str, Path] = field(default_factory=dict)
    """Settings files of a locked-down side's actors (`parley nats-config`), by actor id."""

    def config_args(self, actor: str) -> tuple[str, ...]:
        return ("--config", str(self.configs[actor])) if actor in self.configs else ()

    @property
    def relay_options(self) -> dict[str, object]:
        return json.loads(self.env["PARLEY_OPTIONS"])  # type: ignore[no-any-return]


@dataclass
class TwoDeployments:
    alice: Side
    bob: Side
    gateway: EmbeddedServer
    gateway_root: str
    share: ShareRecord
    processes: list[ProcessOutput]

    @property
    def principal(self) -> str:
        return self.share.principal

    async def close(self) -> None:
        for side in (self.alice, self.bob):
            await side.nc.close()

    def start_relay(self, side: Side, **settings: str) -> ProcessOutput:
        env = {**side.env, **{f"PARLEY_{k.upper()}": v for k, v in settings.items()}}
        relay = start_actor("relay", "relay", env, *side.config_args("relay"))
        side.relay = relay
        self.processes.append(relay)
        return relay


def relay_servers(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[EmbeddedServer, EmbeddedServer, EmbeddedServer]]:
    """Alice's, Bob's and the gateway's nats-servers (for a module-scoped fixture)."""
    started = []
    for name in ("alice", "bob", "gateway"):
        server = EmbeddedServer(tmp_path_factory.mktemp(f"nats-{name}"))
        server.start()
        started.append(server)
    try:
        yield started[0], started[1], started[2]
    finally:
        for server in started:
            server.close()


def forge_frame(
    plain: bytes, sender: DeviceKeys, recipient: DeviceKeys, signer: DeviceKeys
) -> bytes:
    """Body bytes sealed under `sender`'s name to `recipient`, signed by `signer`: what anyone
    holding `recipient`'s public key (the gateway) can make, and only `sender` can sign."""
    suite = hpke.Suite(hpke.KEM.X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.CHACHA20_POLY1305)
    devices = bytes.fromhex(sender.device_id) + bytes.fromhex(recipient.device_id)
    signature = signer.signing.sign(b"parley-relay-frame-v1\x00" + plain)
    sealed = suite.encrypt(
        signature + plain, recipient.kem.public_key(), info=b"parley-relay-v1" + devices
    )
    return b"PRL1" + devices + len(sealed).to_bytes(4, "big") + sealed


def byte_doc_call(goal: str) -> AgentCall:
    return AgentCall(
        id=new_id(),
        created_at=utc_now(),
        target="bob-byte-doc",
        call_id=new_id(),
        session_id=f"s-{uuid.uuid4().hex[:8]}",
        goal=goal,
        text=goal,
    )


async def _side(
    name: str, server: EmbeddedServer, root: Path, keys: DeviceKeys, locked: LockedDown | None
) -> Side:
    directory = root / name
    directory.mkdir(parents=True)
    keys.save(directory / "device")
    if locked is not None:  # the provisioner provisioned it, and publishes the policy
        nc = await locked.connect("provisioner")
        configs = {path.stem: path for path in (locked.config_dir / "actors").glob("*.toml")}
        signer = Signer.create(directory)
        return Side(name, server, locked.ns, nc, keys, directory, signer, configs=configs)
    ns = Namespace(f"t{uuid.uuid4().hex[:12]}")
    nc = await nats.connect(server.url)
    await provision(nc.jetstream(), ns)
    return Side(name, server, ns, nc, keys, directory, Signer.create(directory))


def _bundle(
    profiles: dict[str, ProfilePolicy],
    shared: tuple[str, ...] = (),
    devices: dict[str, str] | None = None,
) -> PolicyBundle:
    return PolicyBundle(
        schema_version="1.0",
        version=1,
        tenant_id="test",
        expires_at=utc_now() + timedelta(days=1),
        profiles=profiles,
        shared_agents=shared,
        shared_agent_devices=devices or {},
    )


async def start_two_deployments(
    alice_server: EmbeddedServer,
    bob_server: EmbeddedServer,
    gateway: EmbeddedServer,
    root: Path,
    processes: list[ProcessOutput],
    *,
    allow_device: bool = True,
    ack_wait_s: str = "2",
    gateway_ack_wait_s: float = 2.0,
    keys: tuple[DeviceKeys, DeviceKeys] | None = None,
    gateway_root: str = "",
    gateway_seeds: Mapping[str, Path] | None = None,
    alice_locked: LockedDown | None = None,
    alice_profiles: Mapping[str, ProfilePolicy] | None = None,
    bob_script: str = SCRIPT,
    bob_profiles: Mapping[str, ProfilePolicy] | None = None,
    share_back: str = "",
    start_byte_doc: bool = True,
    side_env: Mapping[str, Mapping[str, str]] | None = None,
) -> TwoDeployments:
    """Keys, share, shared agent, both policies, and every process ready.

    `keys`, `gateway_root` and `gateway_seeds` (device id -> nkey seed file) are for a
    locked-down gateway, whose users are written for the devices before it starts;
    `alice_locked` runs Alice's gate and relay as their own nkey users on that server;
    `alice_profiles` add to (or replace) the profiles of Alice's bundle, for a caller other
    than the test itself (an orchestrating router and its local agent); `bob_script` is
    byte-doc's scripted brain; `bob_profiles` add to Bob's bundle. `share_back` names an
    agent of Alice's that Alice shares with Bob's device, reached on Bob's side as
    `alice-<agent>` (a chain that crosses back); `start_byte_doc=False` leaves `byte-doc`
    for the test to play. `side_env` adds variables to every process of a side, by its name
    (`alice`, `bob`): the OTLP endpoint of a tracing test."""
    alice_keys, bob_keys = keys or (DeviceKeys.generate(), DeviceKeys.generate())
    alice = await _side("alice", alice_server, root, alice_keys, alice_locked)
    bob = await _side("bob", bob_server, root, bob_keys, None)
    now = utc_now()
    share = ShareRecord(
        share_id=new_id(),
        agent="byte-doc",
        device=alice.keys.public,
        principal=device_principal(alice.keys.device_id),
        owner_device=bob.keys.device_id,
        created_at=now,
        expires_at=now + timedelta(days=1),
    )
    write_share(bob.dir / "relay", share, bob.keys.signing)
    save_shared_agent(
        alice.dir / "relay",
        SharedAgent(name="bob-byte-doc", agent="byte-doc", device=bob.keys.public),
    )
    caller = ProfilePolicy(
        allowed_targets=("bob-byte-doc",),
        start_traces=True,
        allow_shared_agent_calls=True,
        allowed_shared_device_ids=(bob.keys.device_id,),  # seed 000: by device
    )
    alice_policy = _bundle(
        {"router": caller, "bob-byte-doc": ProfilePolicy(), **(alice_profiles or {})},
        shared=("bob-byte-doc",),
        devices={"bob-byte-doc": bob.keys.device_id},
    )
    device = ProfilePolicy(allowed_targets=("byte-doc",) if allow_device else (), start_traces=True)
    bob_shared: dict[str, str] = {}
    if share_back:
        back = ShareRecord(
            share_id=new_id(),
            agent=share_back,
            device=bob.keys.public,
            principal=device_principal(bob.keys.device_id),
            owner_device=alice.keys.device_id,
            created_at=now,
            expires_at=now + timedelta(days=1),
        )
        write_share(alice.dir / "relay", back, alice.keys.signing)
        name = f"alice-{share_back}"
        save_shared_agent(
            bob.dir / "relay", SharedAgent(name=name, agent=share_back, device=alice.keys.public)
        )
        bob_shared[name] = alice.keys.device_id
    bob_policy = _bundle(
        {share.principal: device, "byte-doc": ProfilePolicy(), **(bob_profiles or {})},
        shared=tuple(bob_shared),
        devices=bob_shared,
    )
    await publish_bundle(alice.nc.jetstream(), alice.ns, alice.signer.sign(alice_policy))
    await publish_bundle(bob.nc.jetstream(), bob.ns, bob.signer.sign(bob_policy))
    gateway_root = gateway_root or f"gw{uuid.uuid4().hex[:10]}"
    for side in (alice, bob):
        base = parley_env(side.server.url, side.ns.root, ack_wait_s=ack_wait_s, fetch_timeout_s="1")
        base |= (side_env or {}).get(side.name, {})
        gate_options = {"policy_keys": [str(side.signer.pub_path)], "tenant": "test"}
        gate_env = {**base, "PARLEY_OPTIONS": json.dumps(gate_options)}
        gate = start_actor("gate", "gate", gate_env, *side.config_args("gate"))
        processes.append(gate)
        await gate.wait_line(READY)
        relay_options: dict[str, object] = {
            "device_dir": str(side.dir / "device"),
            "relay_dir": str(side.dir / "relay"),
            "gateway_url": gateway.url,
            "gateway_root": gateway_root,
            "gateway_ack_wait_s": gateway_ack_wait_s,
        }
        if gateway_seeds is not None:
            relay_options["gateway_nkey_seed_file"] = str(gateway_seeds[side.keys.device_id])
        side.env = {**base, "PARLEY_OPTIONS": json.dumps(relay_options)}
    if start_byte_doc:
        profile = write_profile(
            bob.dir / "agents",
            "byte-doc",
            'backend = "scripted"\nscript = "byte-doc-script.toml"',
            script=bob_script,
        )
        agent_env = parley_env(bob.server.url, bob.ns.root, ack_wait_s=ack_wait_s)
        agent = start_agent(str(profile), agent_env | dict((side_env or {}).get("bob", {})))
        processes.append(agent)
        await agent.wait_line(READY)
    system = TwoDeployments(alice, bob, gateway, gateway_root, share, processes)
    for side in (alice, bob):
        relay = system.start_relay(side)
        await relay.wait_line(GATEWAY_READY)
        await relay.wait_line(READY)
    return system
