"""`parley demo`: the whole system on one machine, running seed 001's fairy tale.

It starts an embedded nats-server in a fresh directory, signs the demo policy bundle with a
key made for this run and publishes it, then starts the demo topology as separate supervised
processes: the gate, the router, the auditor when there is one, and two agent hosts with
scripted brains (`gpt`, `claude`). It submits test prompt 2 as `parley collab` would, prints
each turn as it happens, then the session's transcript and the trace (every decision the gate
took on the way), and stops everything. Exit 0 when the tale ended with `final`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final, TextIO

import msgspec
import nats
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from actors import ACTORS
from actors.gate import BUNDLE_KEY
from bus import (
    ChildSpec,
    EmbeddedServer,
    Supervisor,
    Topology,
    configure_tracing,
    provision,
    scratch_directory,
    shipped,
    shutdown_tracing,
)
from bus._supervisor import GiveUp
from schemas import (
    BUNDLE_PAYLOAD_TYPE,
    Decision,
    HumanMessage,
    Namespace,
    SessionEvent,
    decode_bundle,
    decode_envelope,
    new_id,
    sign_payload,
    utc_now,
)
from tools._interruptible import all_set, run_interruptible
from tools._still_waiting import announced
from tools.collab import follow_session

__all__ = (
    "DEMO_GOAL",
    "DEMO_POLICY",
    "add_demo_command",
    "demo_message",
    "demo_topology",
    "publish_policy",
    "run_demo",
    "sign_bundle",
    "sign_policy",
)

DEMO_GOAL: Final = (
    "Write a 2\u2011paragraph fairy tale—Claude drafts, GPT edits, "
    "alternate until done (≤4 rounds)."
)
"""Seed 001 §11, test prompt 2, exactly."""

DEMO_POLICY: Final = shipped("deploy/policy/demo.toml")

_READY = '"msg":"ready"'
_LOUD = ('"level":"warning"', '"level":"error"', '"level":"critical"', "Traceback", "exited (")


def sign_policy(source: Path, keys: Path) -> tuple[bytes, Path]:
    """Sign `source` (a bundle TOML) with a key made for this run.

    Returns:
        The signed bundle (DSSE JSON) and the public key's path, for the gate's `policy_keys`.
    """
    return sign_bundle(msgspec.json.encode(tomllib.loads(source.read_text())), keys)


def sign_bundle(payload: bytes, keys: Path) -> tuple[bytes, Path]:
    """Sign a bundle's JSON with a key made for this run; write the public key under `keys`."""
    decode_bundle(payload)  # never publish what no gate could read
    key = Ed25519PrivateKey.generate()
    keys.mkdir(parents=True, exist_ok=True)
    public = keys / "policy.pub"
    public.write_bytes(
        key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    )
    return sign_payload(payload, BUNDLE_PAYLOAD_TYPE, key), public


async def publish_policy(js: JetStreamContext, ns: Namespace, source: Path, keys: Path) -> Path:
    """Sign `source` with a key made for this run and publish it where the gate reads it.

    Returns:
        The public key's path, for the gate's `policy_keys`.
    """
    signed, public = await asyncio.to_thread(sign_policy, source, keys)
    kv = await js.key_value(ns.bucket("policy"))
    await kv.put(BUNDLE_KEY, signed)
    return public


def demo_topology(
    public_key: Path, tenant: str, agents: Iterable[str] = ("gpt", "claude")
) -> Topology:
    """The demo's processes: gate, router, the auditor if this build has one, the agents.

    The auditor signs its checkpoints with a key of its own, written beside the policy's
    public key for this run.
    """
    gate_options = json.dumps({"policy_keys": [str(public_key)], "tenant": tenant})
    children = [
        ChildSpec(name="gate", run="gate", env={"PARLEY_OPTIONS": gate_options}),
        ChildSpec(name="router", run="router"),
    ]
    if "auditor" in ACTORS:
        audit_key = _private_key_file(public_key.parent / "audit.key")
        options = json.dumps({"signing_key": str(audit_key), "tenant": tenant})
        children.append(ChildSpec(name="auditor", run="auditor", env={"PARLEY_OPTIONS": options}))
    children.extend(ChildSpec(name=agent, run="agent") for agent in agents)
    return Topology(settings={"log_level": "info"}, actor=tuple(children))


def _private_key_file(path: Path) -> Path:
    """A fresh Ed25519 private key (PEM, owner-only) at `path`."""
    key = Ed25519PrivateKey.generate()
    path.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    path.chmod(0o600)
    return path


def demo_message(user_id: str = "demo") -> HumanMessage:
    """Seed 001's test prompt 2 as a fresh collaboration request (the demo's and chaos's)."""
    return HumanMessage(
        id=new_id(),
        created_at=utc_now(),
        text=DEMO_GOAL,
        call_id=new_id(),
        user_id=user_id,
        mode="collaborate",
        participants=("gpt", "claude"),
        first_speaker="claude",
        max_rounds=4,
        session_id=new_id(),
    )


def print_transcript(events: Iterable[SessionEvent], goal: str, out: TextIO) -> None:
    """The session's transcript, as the router kept it: goal, turns and handoff tasks."""
    print("\n── Transcript ──", file=out)
    print(f"user: {goal}", file=out)
    for event in events:
        if event.event_type != "step_completed":
            continue
        print(f"{event.speaker} (round {event.round}): {event.payload.get('message')}", file=out)
        handoff = event.payload.get("handoff")
        if isinstance(handoff, dict):
            print(f"router → {handoff.get('to')}: {handoff.get('task')}", file=out)
        if event.payload.get("final"):
            print("(final)", file=out)


async def trace_decisions(
    js: JetStreamContext, ns: Namespace, trace_id: str, last_envelope: str, timeout: float = 10
) -> list[Decision]:
    """Every gate decision of `trace_id`, read until the one about `last_envelope` is in."""
    sub = await js.pull_subscribe(ns.wildcard("decisions"), stream=ns.stream("events"))
    found: list[Decision] = []
    try:
        async with asyncio.timeout(timeout):
            while not any(d.envelope_id == last_envelope for d in found):
                try:
                    batch = await sub.fetch(256, timeout=1)
                except (TimeoutError, nats.errors.TimeoutError):
                    continue
                for msg in batch:
                    await msg.ack()
                    decision = decode_envelope(msg.data)
                    if isinstance(decision, Decision) and decision.trace_id == trace_id:
                        found.append(decision)
    finally:
        await sub.unsubscribe()
    return found


def print_trace(decisions: list[Decision], out: TextIO) -> None:
    print("\n── Trace (the gate's decisions) ──", file=out)
    for d in decisions:
        verdict = "allow" if d.allowed else f"DENY {d.code}"
        route = f"{d.sender} → {d.target}"
        print(f"{verdict:<6} {route:<18} {d.envelope_kind:<16} hop {d.hop_count}", file=out)


async def run_demo(out: TextIO = sys.stdout, *, keep: Path | None = None) -> int:
    """Run the demo; return the exit code."""
    ns = Namespace("parley")
    with scratch_directory("parley-demo-") as scratch:
        work = keep or Path(scratch)
        server = EmbeddedServer(work / "nats")
        await asyncio.to_thread(server.start)
        stopping = asyncio.Event()
        ready = {name: asyncio.Event() for name in ("gate", "router", "gpt", "claude")}

        def on_line(name: str, line: str) -> None:
            if _READY in line and name in ready:
                ready[name].set()
            if any(mark in line for mark in _LOUD):
                print(f"[{name}] {line}", file=out, flush=True)

        nc = await nats.connect(server.url)
        try:
            js = nc.jetstream()
            await provision(js, ns)
            public = await publish_policy(js, ns, DEMO_POLICY, work / "keys")
            topology = demo_topology(public, tenant="demo")
            env = {**os.environ, "NATS_URL": server.url, "PARLEY_MONITOR_URL": server.monitor_url}
            env.pop("PARLEY_NAMESPACE", None)
            supervisor = Supervisor(topology, base_env=env, on_line=on_line)
            print(
                f"Parley demo: nats-server at {server.url}; starting "
                + ", ".join(spec.name for spec in topology.actor)
                + " as separate processes",
                file=out,
                flush=True,
            )
            code = 1
            try:
                async with asyncio.TaskGroup() as tasks:
                    supervised = tasks.create_task(supervisor.run(stopping))
                    try:
                        code = await _converse(nc, js, ns, ready, supervised, out)
                    finally:
                        stopping.set()
            except* GiveUp as group:
                print(f"parley demo: an actor kept failing: {group.exceptions[0]}", file=out)
                code = 1
        finally:
            await nc.close()
            await asyncio.to_thread(server.stop)
    return code


async def _converse(
    nc: NATS,
    js: JetStreamContext,
    ns: Namespace,
    ready: dict[str, asyncio.Event],
    supervised: asyncio.Task[None],
    out: TextIO,
) -> int:
    all_ready = all_set(list(ready.values()))
    waits: set[asyncio.Future[Any]] = {all_ready, supervised}
    starting = ", ".join(ready)
    await announced(
        asyncio.wait(waits, timeout=60, return_when=asyncio.FIRST_COMPLETED),
        f"the actors to start ({starting})",
        limit_s=60,
    )
    if not all_ready.done():
        all_ready.cancel()
        await asyncio.gather(all_ready, return_exceptions=True)
    if not all(event.is_set() for event in ready.values()):
        missing = ", ".join(name for name, event in ready.items() if not event.is_set())
        print(f"parley demo: not ready within 60 s: {missing}", file=out)
        return 1
    msg = demo_message()
    print(
        f"\nyou → router (collaborate, gpt and claude, claude first, ≤4 rounds):\n{DEMO_GOAL}\n",
        file=out,
    )
    end = await follow_session(nc, ns, msg, out=out, timeout=60)
    if end.event is None:
        return 1
    print_transcript(end.events, DEMO_GOAL, out)
    last = end.event.envelope_ids[-1] if end.event.envelope_ids else msg.id
    print_trace(await trace_decisions(js, ns, msg.id, last), out)
    ok = end.event.event_type == "session_completed" and end.event.stop_reason == "final"
    print(f"\nparley demo: {'done' if ok else 'FAILED'}", file=out, flush=True)
    return 0 if ok else 1


def _cmd_demo(args: argparse.Namespace) -> int:
    # With OTEL_* set, the demo's person (this process) and every actor export their spans:
    # the session is one trace (docs/interop.md).
    configure_tracing("person", "demo")
    try:
        return _demo(args)
    finally:
        shutdown_tracing()


def _demo(args: argparse.Namespace) -> int:
    if args.tools:
        # tools.demo_tools builds on this module (sign_policy): imported here, not above.
        from tools.demo_tools import run_tools_demo

        return run_interruptible("demo", run_tools_demo(sys.stdout, keep=args.keep))
    if args.shared:
        # tools.demo_shared builds on this module (sign_bundle): imported here, not above.
        from tools.demo_shared import run_shared_demo

        return run_interruptible("demo", run_shared_demo(sys.stdout, keep=args.keep))
    return run_interruptible("demo", run_demo(keep=args.keep))


def add_demo_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = commands.add_parser("demo", help="run seed 001's fairy tale on a local system")
    demo.add_argument("--keep", type=Path, help="keep the server store and keys in this directory")
    demo.add_argument(
        "--shared",
        action="store_true",
        help="seed 000 instead: two deployments and a gateway, an orchestrated session with "
        "a shared agent over the relay, and what the gateway stored",
    )
    demo.add_argument(
        "--tools",
        action="store_true",
        help="a coding agent fixes a repository with tools (files, commands, git) under a "
        "bundle that grants only those, its commands approved as you, then its patch and audit",
    )
    demo.set_defaults(func=_cmd_demo)
