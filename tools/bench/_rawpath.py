"""The latency row's reference: a `say`'s hops done with raw nats-py, one process per role.

The same streams (provisioned by Parley, so storage settings match), the same hops as
Parley's path: the person submits on `submit.cli`; a relay in the gate's place moves every
submitted message to `deliver.<target>`; a router turns the person's message into a call to
the agent and the agent's answer into an event on the person's timeline; an agent answers
the call. Each role is a durable pull consumer that publishes its effect through JetStream,
waits for the store's ack, then acks its input, as Parley's runtime does; routing is read
from headers, with none of Parley's checks, records or envelopes.

The pull loop is `fetch(1)`: nats-py's `fetch(64, timeout=5)` stalls an idle consumer for up
to its timeout (the defect bus/_puller.py was written to avoid), and a reference with that
stall would flatter Parley. Each role runs in a process of its own (`run_role`); it prints
`ready` once its consumer is bound.

The guarded variant (`path="guarded"`) does, with raw nats-py and nothing else, the storage steps
Parley's guarantees take in sequence, in Parley's order (docs/benchmarks.md, "Where a `say`'s
time goes"): at each gate hop the envelope id is looked up, claimed create-only, then its
position, delivery and decision are stored together; the router creates the session and its
trace's link create-only, unread, then stores its events, how it stands, the call and the
reminder together, and at the answer compare-and-sets the session before the closing event and
how it stands. Twelve stores and three reads in a row, against the plain path's seven stores:
the floor any client pays for those guarantees, so Parley's p50 over it is what Parley itself
adds.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import nats
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from schemas import Namespace

__all__ = ("ROLES", "SESSION", "STEP", "TARGET", "run_role")

TARGET = "Bench-Target"
STEP = "Bench-Step"
SESSION = "Bench-Session"
ROLES = ("gate", "router", "agent")
AGENT = "gpt"
_FETCH_TIMEOUT_S = 5.0


async def _gate(js: JetStreamContext, ns: Namespace, msg: Msg) -> None:
    headers = msg.headers or {}
    await js.publish(ns.deliver(headers[TARGET]), msg.data, headers=headers)


async def _router(js: JetStreamContext, ns: Namespace, msg: Msg) -> None:
    headers = dict(msg.headers or {})
    if headers.get(STEP) == "ask":
        headers.update({TARGET: AGENT, STEP: "call"})
        await js.publish(ns.submit("router"), msg.data, headers=headers)
    else:
        await js.publish(ns.events("cli", headers[SESSION]), msg.data, headers=headers)


async def _agent(js: JetStreamContext, ns: Namespace, msg: Msg) -> None:
    headers = {**(msg.headers or {}), TARGET: "router", STEP: "answer"}
    await js.publish(ns.submit(AGENT), msg.data, headers=headers)


_CREATE_ONLY = {"Nats-Expected-Last-Subject-Sequence": "0"}


async def _absent(js: JetStreamContext, bucket: str, key: str) -> None:
    """Read a key that is not there, as the gate's look-up of a fresh id does."""
    try:
        await js.get_last_msg(f"KV_{bucket}", f"$KV.{bucket}.{key}")
    except NotFoundError:
        return
    raise RuntimeError(f"{key} exists: the guarded path's keys are fresh")


async def _guarded_gate(js: JetStreamContext, ns: Namespace, msg: Msg) -> None:
    headers = msg.headers or {}
    envelope = uuid.uuid4().hex
    ids, traces = ns.bucket("idempotency"), ns.bucket("traces")
    await _absent(js, ids, f"id.{envelope}")
    await js.publish(f"$KV.{ids}.id.{envelope}", b"claim", headers=_CREATE_ONLY)
    await asyncio.gather(
        js.publish(f"$KV.{traces}.pos.{envelope}", b"position"),
        js.publish(ns.deliver(headers[TARGET]), msg.data, headers=headers),
        js.publish(ns.decisions("bench"), b"decision"),
    )


async def _guarded_router(js: JetStreamContext, ns: Namespace, msg: Msg) -> None:
    headers = dict(msg.headers or {})
    session, sessions = headers[SESSION], ns.bucket("sessions")
    record = f"$KV.{sessions}.session.{session}"
    if headers.get(STEP) == "ask":
        await asyncio.gather(
            js.publish(record, b"opened", headers=_CREATE_ONLY),
            js.publish(f"$KV.{sessions}.trace.{session}", b"link", headers=_CREATE_ONLY),
        )
        headers.update({TARGET: AGENT, STEP: "call"})
        await asyncio.gather(
            js.publish(ns.events("cli", session), b"session_started"),  # no SESSION: not the end
            js.publish(ns.standing("cli", session), b"session_created"),
            js.publish(ns.submit("router"), msg.data, headers=headers),
            js.publish(ns.timers("router"), b"reminder"),
        )
    else:
        await js.publish(record, b"answered")
        await asyncio.gather(
            js.publish(ns.events("cli", session), msg.data, headers=headers),
            js.publish(ns.standing("cli", session), b"session_completed"),
        )


Handler = Callable[[JetStreamContext, Namespace, Msg], Awaitable[None]]

_READS = {"gate": ("submit", None), "router": ("deliver", "router"), "agent": ("deliver", AGENT)}
_HANDLERS: dict[str, Handler] = {"gate": _gate, "router": _router, "agent": _agent}
_GUARDED: dict[str, Handler] = {**_HANDLERS, "gate": _guarded_gate, "router": _guarded_router}


async def run_role(role: str, url: str, root: str, path: str = "raw") -> None:
    """Consume the role's input for ever: one message at a time, effect stored, then ack.
    `path`: "raw", or "guarded" for the storage steps of Parley's guarantees."""
    ns = Namespace(root)
    nc = await nats.connect(url)
    js = nc.jetstream()
    family, receiver = _READS[role]
    subject = ns.wildcard(family) if receiver is None else ns.deliver(receiver)
    sub = await js.pull_subscribe(subject, durable=f"raw{role}", stream=ns.stream(family))
    handle = (_GUARDED if path == "guarded" else _HANDLERS)[role]
    print("ready", flush=True)
    while True:
        try:
            messages = await sub.fetch(1, timeout=_FETCH_TIMEOUT_S)
        except TimeoutError:
            continue
        for msg in messages:
            await handle(js, ns, msg)
            await msg.ack()
