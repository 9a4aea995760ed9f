"""`parley demo --shared`: seed 000 across two deployments and an untrusted gateway.

On this machine: Alice's deployment (gate, router, her local agent, relay) and Bob's (gate,
`byte-doc`, relay), each on its own embedded nats-server, locked down as `parley up` locks
one down (an nkey user per actor, the relay granted the names it serves, the provisioner
making every durable), and a third nats-server, the gateway, between the relays. Bob shares
`byte-doc` with Alice's device (a signed share); Alice adds it as `bob-byte-doc`. Both brains
are scripted. The demo opens one orchestrated session as the person at Alice's terminal, in
full_auto, and prints its timeline until the turn limit ends it; then what the gateway
stored: each frame's size and device ids, and a search of those frames and of the gateway's
store on disk for every text of the run (none is there: the frames are ciphertext).
Exit 0 when the session reached its turn limit and no text was found.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Final, TextIO

import msgspec
import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from actors.gate import BUNDLE_KEY
from actors.relay import DeviceKeys, frame_devices, gateway_stream, save_shared_agent, write_share
from bus import (
    ChildSpec,
    EmbeddedServer,
    Supervisor,
    Topology,
    TraceHeaders,
    connect,
    jetstream,
    load_settings,
)
from bus._supervisor import GiveUp
from schemas import (
    HumanMessage,
    Namespace,
    Orchestration,
    PolicyBundle,
    ProfilePolicy,
    SessionEvent,
    SharedAgent,
    ShareRecord,
    decode_envelope,
    device_principal,
    encode,
    new_id,
    utc_now,
)
from tools._local import lock_down, provision_locked
from tools.demo import sign_bundle
from tools.orchestrate import render_event

__all__ = ("SHARED_OBJECTIVE", "run_shared_demo")

SHARED_OBJECTIVE: Final = "review this API for security issues"
MAX_TURNS: Final = 4
GATEWAY_ROOT: Final = "parleygw"
_READY = '"msg":"ready"'
_LOUD = ('"level":"error"', '"level":"critical"', "Traceback", "exited (")
_END = ("session_completed", "session_failed", "session_canceled")

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
class _Deployment:
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


def _bundle(side: _Deployment, profiles: dict[str, ProfilePolicy], bob_id: str = "") -> bytes:
    """`side`'s policy; with `bob_id`, `bob-byte-doc` is a shared agent on that device."""
    shared = {"bob-byte-doc": bob_id} if bob_id else {}
    expires = utc_now() + timedelta(days=1)
    return msgspec.json.encode(
        PolicyBundle(
            schema_version="1.0",
            version=1,
            tenant_id=side.name,
            expires_at=expires,
            profiles=profiles,
            shared_agents=tuple(shared),
            shared_agent_devices=shared,
        )
    )


def _topology(side: _Deployment, gateway: str, public_key: Path, agent: str) -> Topology:
    """Gate, the agents, the relay (and on Alice's side the router), locked down."""
    gate = {"policy_keys": [str(public_key)], "tenant": side.name}
    relay = {
        "device_dir": str(side.dir / "device"),
        "relay_dir": str(side.dir / "relay"),
        "gateway_url": gateway,
        "gateway_root": GATEWAY_ROOT,
    }
    script = LOCAL_SCRIPT if agent == "local" else BYTE_DOC_SCRIPT
    profile = {"profile": str(_profile(side.dir / "agents", agent, script))}
    children = [ChildSpec(name="gate", run="gate", env={"PARLEY_OPTIONS": json.dumps(gate)})]
    if agent == "local":
        children.append(ChildSpec(name="router", run="router"))
    children += [
        ChildSpec(name=agent, run="agent", env={"PARLEY_OPTIONS": json.dumps(profile)}),
        ChildSpec(name="relay", run="relay", env={"PARLEY_OPTIONS": json.dumps(relay)}),
    ]
    topology = Topology(settings={"log_level": "info"}, actor=tuple(children))
    return lock_down(topology, side.ns, side.broker)


def _share(alice: _Deployment, bob: _Deployment) -> ShareRecord:
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


def _policies(alice: _Deployment, bob: _Deployment, principal: str) -> dict[str, bytes]:
    bob_id = bob.keys.device_id
    alice_policy = _bundle(
        alice,
        {
            "cli": ProfilePolicy(
                allowed_targets=("router",), start_traces=True, speaks_for_person=True
            ),
            "router": ProfilePolicy(
                allowed_targets=("local", "bob-byte-doc"),
                start_traces=True,
                allow_shared_agent_calls=True,
                allowed_shared_device_ids=(bob_id,),
            ),
            "local": ProfilePolicy(allowed_targets=("router",)),
            "bob-byte-doc": ProfilePolicy(),
        },
        bob_id,
    )
    bob_policy = _bundle(
        bob,
        {
            principal: ProfilePolicy(
                allowed_targets=("byte-doc",), start_traces=True, rate_per_minute=30
            ),
            "byte-doc": ProfilePolicy(),
        },
    )
    return {"alice": alice_policy, "bob": bob_policy}


async def _start(side: _Deployment, gateway: str, policy: bytes, agent: str) -> None:
    """Sign the side's policy, lock it down, start its server, provision, publish the policy."""
    signed, public = await asyncio.to_thread(sign_bundle, policy, side.dir / "keys")
    side.topology = _topology(side, gateway, public, agent)
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


def _on_line(side: _Deployment, out: TextIO) -> Callable[[str, str], None]:
    def on_line(name: str, line: str) -> None:
        if _READY in line and name in side.ready:
            side.ready[name].set()
        if any(mark in line for mark in _LOUD):
            print(f"[{side.name}/{name}] {line}", file=out, flush=True)

    return on_line


async def _session(alice: _Deployment, out: TextIO) -> tuple[SessionEvent | None, list[str]]:
    """Open the session as the person at Alice's terminal and print its timeline."""
    spec = Orchestration(
        local_agent="local", shared_agent="bob-byte-doc", mode="full_auto", max_turns=MAX_TURNS
    )
    msg = HumanMessage(
        id=new_id(),
        created_at=utc_now(),
        text=SHARED_OBJECTIVE,
        call_id=new_id(),
        mode="orchestrate",
        session_id=new_id(),
        orchestration=spec,
    )
    events: asyncio.Queue[SessionEvent] = asyncio.Queue()

    async def on_event(raw: Msg) -> None:
        event = decode_envelope(raw.data)
        if isinstance(event, SessionEvent):
            events.put_nowait(event)

    nc, js = await alice.connect_as("cli")
    texts = [SHARED_OBJECTIVE]
    seen: set[str] = set()
    try:
        await nc.subscribe(alice.ns.events("cli", msg.session_id or ""), cb=on_event)
        await nc.flush()
        headers = TraceHeaders(trace_id=msg.id, origin="cli").to_headers(msg.id)
        await js.publish(alice.ns.submit("cli"), encode(msg), headers=headers)
        while True:
            event = await asyncio.wait_for(events.get(), 60)
            if event.id in seen:
                continue
            seen.add(event.id)
            if event.event_type == "step_completed" and "message" in event.payload:
                texts.append(str(event.payload["message"]))
            line = render_event(event, MAX_TURNS)
            if line is not None:
                print(line, file=out, flush=True)
            if event.event_type in _END:
                return event, texts
    except TimeoutError:
        print("parley demo: the session went silent for 60 s", file=out)
        return None, texts
    finally:
        await nc.close()


async def _gateway_report(
    gateway: EmbeddedServer,
    frames: list[bytes],
    texts: list[str],
    sides: dict[str, str],
    out: TextIO,
) -> bool:
    """What the gateway stored, and whether any text of the run is in it (False if so)."""
    nc = await nats.connect(gateway.url)
    try:
        info = await nc.jetstream().stream_info(gateway_stream(GATEWAY_ROOT).name or "")
    finally:
        await nc.close()
    print("\n── What the gateway stored ──", file=out)
    print(
        f"stream {info.config.name}: {info.state.last_seq} frame(s) stored in all, "
        f"{info.state.messages} still there (each is deleted once its relay took it)",
        file=out,
    )
    for number, frame in enumerate(frames, 1):
        sender, recipient = (f"{sides[d]} {d[:16]}…" for d in frame_devices(frame))
        print(f"  #{number:<2} {len(frame):>5} bytes  {sender} → {recipient}", file=out)
    files = [p for p in gateway.store_dir.rglob("*") if p.is_file() and p.suffix != ".conf"]
    stored = b"".join(p.read_bytes() for p in files)
    found = [t for t in texts if any(t.encode() in blob for blob in (*frames, stored))]
    print(
        f"searched {len(frames)} frame(s) ({sum(map(len, frames))} bytes) and the gateway's "
        f"store on disk ({len(stored)} bytes) for the run's {len(texts)} message texts: "
        + (f"FOUND {len(found)}: {found}" if found else "none found: ciphertext only"),
        file=out,
    )
    print("the gateway learned: frame sizes, timing and the two device ids", file=out)
    return not found


async def run_shared_demo(out: TextIO, *, keep: Path | None = None) -> int:
    """Run the shared-agent demo; return the exit code."""
    with tempfile.TemporaryDirectory(prefix="parley-demo-shared-") as scratch:
        work = keep or Path(scratch)
        alice = _Deployment("alice", work / "alice", DeviceKeys.generate())
        bob = _Deployment("bob", work / "bob", DeviceKeys.generate())
        for side in (alice, bob):
            side.dir.mkdir(parents=True, exist_ok=True)
            side.keys.save(side.dir / "device")
        gateway = EmbeddedServer(work / "gateway")
        started: list[EmbeddedServer] = []
        try:
            await asyncio.to_thread(gateway.start)
            started.append(gateway)
            share = _share(alice, bob)
            policies = _policies(alice, bob, share.principal)
            await _start(alice, gateway.url, policies["alice"], "local")
            await _start(bob, gateway.url, policies["bob"], "byte-doc")
            started += [s.server for s in (alice, bob) if s.server is not None]
            return await _run(alice, bob, gateway, out)
        finally:
            for server in reversed(started):
                await asyncio.to_thread(server.stop)


async def _run(alice: _Deployment, bob: _Deployment, gateway: EmbeddedServer, out: TextIO) -> int:
    print(
        f"Parley shared-agent demo: Alice's deployment at {alice.url}, Bob's at {bob.url}, "
        f"the gateway at {gateway.url}\nAlice's device {alice.keys.device_id[:16]}…, "
        f"Bob's {bob.keys.device_id[:16]}…; Bob shares byte-doc with Alice's device",
        file=out,
        flush=True,
    )
    frames: list[bytes] = []

    async def on_frame(msg: Msg) -> None:
        frames.append(msg.data)

    onlooker = await nats.connect(gateway.url)
    await onlooker.subscribe(f"{GATEWAY_ROOT}.>", cb=on_frame)
    await onlooker.flush()
    stopping = asyncio.Event()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PARLEY_", "NATS_"))}
    code = 1
    try:
        async with asyncio.TaskGroup() as tasks:
            for side in (alice, bob):
                assert side.topology is not None  # noqa: S101 - set by _start
                side_env = {**env, "NATS_URL": side.url}
                supervisor = Supervisor(
                    side.topology, base_env=side_env, on_line=_on_line(side, out)
                )
                tasks.create_task(supervisor.run(stopping))
            try:
                waits = [e.wait() for s in (alice, bob) for e in s.ready.values()]
                await asyncio.wait_for(asyncio.gather(*waits), 60)
                print(f"\nyou → local, with bob-byte-doc (full_auto, ≤{MAX_TURNS} turns)", file=out)
                end, texts = await _session(alice, out)
                await onlooker.flush()
                sides = {alice.keys.device_id: "alice", bob.keys.device_id: "bob"}
                clean = await _gateway_report(gateway, frames, texts, sides, out)
                ok = end is not None and end.stop_reason == "max_turns" and clean
                print(f"\nparley demo --shared: {'done' if ok else 'FAILED'}", file=out)
                code = 0 if ok else 1
            except TimeoutError:
                print("parley demo --shared: not every actor was ready within 60 s", file=out)
            finally:
                stopping.set()
    except* GiveUp as group:
        print(f"parley demo --shared: an actor kept failing: {group.exceptions[0]}", file=out)
        code = 1
    finally:
        await onlooker.close()
    return code
