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
"""

from __future__ import annotations

import nats
from nats.aio.msg import Msg
from nats.js import JetStreamContext

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


_READS = {"gate": ("submit", None), "router": ("deliver", "router"), "agent": ("deliver", AGENT)}
_HANDLERS = {"gate": _gate, "router": _router, "agent": _agent}


async def run_role(role: str, url: str, root: str) -> None:
    """Consume the role's input for ever: one message at a time, effect stored, then ack."""
    ns = Namespace(root)
    nc = await nats.connect(url)
    js = nc.jetstream()
    family, receiver = _READS[role]
    subject = ns.wildcard(family) if receiver is None else ns.deliver(receiver)
    sub = await js.pull_subscribe(subject, durable=f"raw{role}", stream=ns.stream(family))
    handle = _HANDLERS[role]
    print("ready", flush=True)
    while True:
        try:
            messages = await sub.fetch(1, timeout=_FETCH_TIMEOUT_S)
        except TimeoutError:
            continue
        for msg in messages:
            await handle(js, ns, msg)
            await msg.ack()
