"""Two Parley deployments and a gateway on this machine, sharing one agent: seed 000's setup
for `parley demo --shared` and the relay bench's orchestrated turns.

Alice's deployment runs a gate, a router, her local agent and a relay; Bob's a gate,
`byte-doc` and a relay; each on its own embedded nats-server, locked down as `parley up`
locks one down (an nkey user per actor, the relay granted the names it serves, the
provisioner making every durable). A third nats-server is the gateway between the relays,
locked down as `parley gateway-config` locks one down: one nkey user per relay's device, allowed
only that device's frames, and the operator's `admin`, which creates the stream; a connection
without credentials is refused. Bob shares `byte-doc` with Alice's device (a signed share),
Alice adds it as `bob-byte-doc`; both brains are scripted. With `local_copy`, Alice also runs
a `byte-doc` of her own, listed as a shared agent too, so one run can time the same turn with
both agents on one deployment. Sessions are opened by tools/_shared_sessions.py.

`prepared_deployments` stops short of starting the actors, for a caller that starts and kills
them itself (`parley chaos --shared`), with what `Tuning` adds (an auditor, settings).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Final, TextIO

import msgspec
import nats
from nats.aio.client import Client as NATS

from actors.gate import BUNDLE_KEY
from actors.relay import DeviceKeys, save_shared_agent, write_share
from bus import (
    ChildSpec,
    EmbeddedServer,
    Supervisor,
    Topology,
    connect,
    jetstream,
    load_settings,
)
from schemas import (
    Namespace,
    PolicyBundle,
    ProfilePolicy,
    SharedAgent,
    ShareRecord,
    device_principal,
    new_id,
    utc_now,
)
from tools._local import lock_down, provision_locked
from tools.demo import sign_bundle
from tools.natsconf import GATEWAY_ADMIN, create_gateway_stream, write_gateway_config

__all__ = (
    "BYTE_DOC_SCRIPT",
    "GATEWAY_ROOT",
    "LOCAL_SCRIPT",
    "Deployment",
    "SharedDeployments",
    "Tuning",
    "prepared_deployments",
    "shared_deployments",
)

GATEWAY_ROOT: Final = "parleygw"
_READY = '"msg":"ready"'
_LOUD = ('"level":"error"', '"level":"critical"', "Traceback", "exited (")

LOCAL_SCRIPT: Final = (
    "Which endpoints of this API accept requests without authentication?",
    "Do the admin endpoints check the caller's role on the server, or only in the UI?",
    "Is the session token rotated on login, and does logout revoke it?",
    "List the most urgent fixes, most urgent first.",
)
BYTE_DOC_SCRIPT: Final = (
    "GET /health and POST /login. Everything under /api/v1 requires a bearer token.",
    "Only in the UI: /api/v1/admin/* trusts the role claim the client sends.",
    "Rotated on login, but logout only deletes the cookie: the token stays valid for 24 h.",
    "1. Check roles on the server for /admin. 2. Revoke tokens on logout. 3. Rate-limit /login.",
)


@dataclass
class Deployment:
    """One side: its directory, device, server, topology and which children are ready."""

    name: str
    dir: Path
    keys: DeviceKeys
    ns: Namespace = field(default_factory=lambda: Namespace("parley"))
    server: EmbeddedServer | None = None
    topology: Topology | None = None
    ready: dict[str, asyncio.Event] = field(default_factory=dict)

    @property
    def broker(self) -> Path:
        return self.dir / "broker"

    @property
    def url(self) -> str:
        assert self.server is not None  # noqa: S101 - started before anyone asks
        return self.server.url

    async def connect_as(self, role: str) -> tuple[NATS, nats.js.JetStreamContext]:
        settings = load_settings(self.broker / "actors" / f"{role}.toml", nats_url=self.url)
        nc = await connect(settings, role, reconnect_forever=False)
        return nc, jetstream(nc, settings)


@dataclass(frozen=True)
class Tuning:
    """What a run adds to the demo's deployments: actors of its own on each side (an
    auditor), settings every actor shares (`ack_wait_s`: the provisioner's durables get them
    too), and the router's `[options]`."""

    extra_actors: Callable[[Deployment], list[ChildSpec]] | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    router_options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SharedDeployments:
    alice: Deployment
    bob: Deployment
    gateway: EmbeddedServer
    gateway_seeds: dict[str, Path] = field(default_factory=dict)
    """The gateway's nkey seeds: each device's (by device id) and its operator's
    (`GATEWAY_ADMIN`), as `parley gateway-config` writes them."""


def _profile(directory: Path, name: str, lines: tuple[str, ...]) -> Path:
    """A scripted agent profile under `directory` saying `lines[n-1]` on turn n (the last
    line from then on)."""
    directory.mkdir(parents=True, exist_ok=True)
    turns = [f"[[turn]]\nround = {n}\nmessage = {json.dumps(t)}\n" for n, t in enumerate(lines, 1)]
    turns[-1] = f"[[turn]]\nmessage = {json.dumps(lines[-1])}\n"
    (directory / f"{name}-script.toml").write_text("\n".join(turns))
    path = directory / f"{name}.toml"
    path.write_text(
        f'name = "{name}"\nmodel = "scripted"\n'
        f'[brain]\nbackend = "scripted"\nscript = "{name}-script.toml"\n'
    )
    return path


def _bundle(side: Deployment, profiles: dict[str, ProfilePolicy], shared: dict[str, str]) -> bytes:
    """`side`'s policy; `shared`: its shared agents and the devices they live on."""
    expires = utc_now() + timedelta(days=1)
    devices = {name: device for name, device in shared.items() if device}
    return msgspec.json.encode(
        PolicyBundle(
            schema_version="1.0",
            version=1,
            tenant_id=side.name,
            expires_at=expires,
            profiles=profiles,
            shared_agents=tuple(shared),
            shared_agent_devices=devices,
        )
    )


def _agent(side: Deployment, name: str, script: tuple[str, ...]) -> ChildSpec:
    profile = {"profile": str(_profile(side.dir / "agents", name, script))}
    return ChildSpec(name=name, run="agent", env={"PARLEY_OPTIONS": json.dumps(profile)})


@dataclass(frozen=True)
class _Gateway:
    """Where a side's relay meets the other's: the gateway's URL and the side's seed there."""

    url: str
    seeds: dict[str, Path]


def _topology(
    side: Deployment, gateway: _Gateway, public_key: Path, agents: list[ChildSpec], tuning: Tuning
) -> Topology:
    """Gate, the agents, the relay (and on Alice's side the router), locked down."""
    gate = {"policy_keys": [str(public_key)], "tenant": side.name}
    relay = {
        "device_dir": str(side.dir / "device"),
        "relay_dir": str(side.dir / "relay"),
        "gateway_url": gateway.url,
        "gateway_root": GATEWAY_ROOT,
        "gateway_nkey_seed_file": str(gateway.seeds[side.keys.device_id]),
    }
    children = [ChildSpec(name="gate", run="gate", env={"PARLEY_OPTIONS": json.dumps(gate)})]
    if side.name == "alice":
        router = {"PARLEY_OPTIONS": json.dumps(tuning.router_options)}
        children.append(ChildSpec(name="router", run="router", env=router))
    if tuning.extra_actors is not None:
        children += tuning.extra_actors(side)
    children += [
        *agents,
        ChildSpec(name="relay", run="relay", env={"PARLEY_OPTIONS": json.dumps(relay)}),
    ]
    topology = Topology(settings={"log_level": "info", **tuning.settings}, actor=tuple(children))
    return lock_down(topology, side.ns, side.broker)


def _share(alice: Deployment, bob: Deployment) -> ShareRecord:
    """Bob shares byte-doc with Alice's device; Alice adds it as `bob-byte-doc`."""
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
    added = SharedAgent(name="bob-byte-doc", agent="byte-doc", device=bob.keys.public)
    save_shared_agent(alice.dir / "relay", added)
    return share


def _policies(
    alice: Deployment, bob: Deployment, principal: str, local_copy: bool, rate: int
) -> dict[str, bytes]:
    bob_id = bob.keys.device_id
    shared = {"bob-byte-doc": bob_id, **({"byte-doc": ""} if local_copy else {})}
    answers = ProfilePolicy(allowed_targets=("router",))
    alice_policy = _bundle(
        alice,
        {
            # The person opens each session with one message to the router: at `rate` too,
            # or a run opening sessions back to back is refused RATE_LIMITED at the default.
            "cli": ProfilePolicy(
                allowed_targets=("router",),
                start_traces=True,
                speaks_for_person=True,
                rate_per_minute=rate,
            ),
            "router": ProfilePolicy(
                allowed_targets=("local", *shared),
                start_traces=True,
                allow_shared_agent_calls=True,
                allowed_shared_device_ids=(
                    bob_id,
                    *(name for name in shared if name != "bob-byte-doc"),
                ),
                rate_per_minute=rate,
            ),
            "local": answers,
            "bob-byte-doc": ProfilePolicy(),
            **({"byte-doc": answers} if local_copy else {}),
        },
        shared,
    )
    bob_policy = _bundle(
        bob,
        {
            principal: ProfilePolicy(
                allowed_targets=("byte-doc",), start_traces=True, rate_per_minute=rate
            ),
            "byte-doc": ProfilePolicy(),
        },
        {},
    )
    return {"alice": alice_policy, "bob": bob_policy}


async def _start(
    side: Deployment, gateway: _Gateway, policy: bytes, agents: list[ChildSpec], tuning: Tuning
) -> None:
    """Sign the side's policy, lock it down, start its server, provision, publish the policy."""
    signed, public = await asyncio.to_thread(sign_bundle, policy, side.dir / "keys")
    side.topology = _topology(side, gateway, public, agents, tuning)
    side.server = EmbeddedServer(
        side.dir / "nats", authorization=side.broker / "authorization.conf"
    )
    await asyncio.to_thread(side.server.start)
    await provision_locked(side.url, [c.name for c in side.topology.actor], side.broker)
    nc, js = await side.connect_as("policy-signer")
    try:
        await (await js.key_value(side.ns.bucket("policy"))).put(BUNDLE_KEY, signed)
    finally:
        await nc.close()
    side.ready = {child.name: asyncio.Event() for child in side.topology.actor}


def _on_line(side: Deployment, out: TextIO) -> Callable[[str, str], None]:
    def on_line(name: str, line: str) -> None:
        if _READY in line and name in side.ready:
            side.ready[name].set()
        if any(mark in line for mark in _LOUD):
            print(f"[{side.name}/{name}] {line}", file=out, flush=True)

    return on_line


@asynccontextmanager
async def prepared_deployments(
    work: Path,
    *,
    local_copy: bool = False,
    rate_per_minute: int = 30,
    tuning: Tuning | None = None,
) -> AsyncIterator[SharedDeployments]:
    """Both sides' servers and the gateway up, provisioned, shared, policies published; no
    actor started (each side's `topology` says what to run). Servers stopped on the way out."""
    tuning = tuning or Tuning()
    alice = Deployment("alice", work / "alice", DeviceKeys.generate())
    bob = Deployment("bob", work / "bob", DeviceKeys.generate())
    for side in (alice, bob):
        side.dir.mkdir(parents=True, exist_ok=True)
        side.keys.save(side.dir / "device")
    config = work / "gateway-config"
    seeds = write_gateway_config(config, [alice.keys.device_id, bob.keys.device_id], GATEWAY_ROOT)
    gateway = EmbeddedServer(work / "gateway", authorization=config / "authorization.conf")
    started: list[EmbeddedServer] = []
    try:
        await asyncio.to_thread(gateway.start)
        started.append(gateway)
        await create_gateway_stream(gateway.url, seeds[GATEWAY_ADMIN], GATEWAY_ROOT)
        meeting = _Gateway(gateway.url, seeds)
        share = _share(alice, bob)
        policies = _policies(alice, bob, share.principal, local_copy, rate_per_minute)
        alice_agents = [_agent(alice, "local", LOCAL_SCRIPT)]
        if local_copy:
            alice_agents.append(_agent(alice, "byte-doc", BYTE_DOC_SCRIPT))
        await _start(alice, meeting, policies["alice"], alice_agents, tuning)
        bob_agents = [_agent(bob, "byte-doc", BYTE_DOC_SCRIPT)]
        await _start(bob, meeting, policies["bob"], bob_agents, tuning)
        started += [s.server for s in (alice, bob) if s.server is not None]
        yield SharedDeployments(alice, bob, gateway, seeds)
    finally:
        for server in reversed(started):
            await asyncio.to_thread(server.stop)


@asynccontextmanager
async def shared_deployments(
    work: Path, out: TextIO, *, local_copy: bool = False, rate_per_minute: int = 30
) -> AsyncIterator[SharedDeployments]:
    """Both deployments and the gateway, every actor ready; all stopped on the way out.

    Raises:
        TimeoutError: an actor was not ready within 60 s.
        GiveUp (in an ExceptionGroup): an actor kept failing.
    """
    async with prepared_deployments(
        work, local_copy=local_copy, rate_per_minute=rate_per_minute
    ) as up:
        stopping = asyncio.Event()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PARLEY_", "NATS_"))}
        async with asyncio.TaskGroup() as tasks:
            for side in (up.alice, up.bob):
                assert side.topology is not None  # noqa: S101 - set by _start
                supervisor = Supervisor(
                    side.topology,
                    base_env={**env, "NATS_URL": side.url},
                    on_line=_on_line(side, out),
                )
                tasks.create_task(supervisor.run(stopping))
            try:
                waits = [e.wait() for s in (up.alice, up.bob) for e in s.ready.values()]
                await asyncio.wait_for(asyncio.gather(*waits), 60)
                yield up
            finally:
                stopping.set()
