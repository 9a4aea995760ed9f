"""A chaos run's load generator: workers running collaboration sessions back to back.

Each worker submits the demo's collaboration request as the CLI would (retrying through a
broker outage with the same id, so JetStream de-duplicates a retry after a lost ack) and
waits for the session's end event, or for an error answering its request (the CLI's
deliveries, tools/_refusals.py: a refused request opens no session, so no end event would
ever come), before starting the next one. A session that never ends is the checker's to
report: the worker gives up waiting and goes on. The refusals are counted for the checker's
table, and when the load stops the checker fails the run (no session started in a fault
window). (The delegation mix's workers, tools/chaos/_delegations.py, submit the same way.)
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from bus import TraceHeaders
from schemas import (
    AnyEnvelope,
    Error,
    Namespace,
    SessionEvent,
    decode_envelope,
    encode,
    hop_delta_for,
)
from tools._refusals import Refusals
from tools.chaos._checker import Published
from tools.demo import demo_message
from tools.natsconf import settings_for

__all__ = ("CLI", "Load", "LoadEnd", "follow_events", "follow_refusals", "submit_root", "worker")

CLI = "cli"
"""Who the load generator submits as: the user `parley collab` runs as."""
_ENDS = ("session_completed", "session_failed")
_REFUSED_PAUSE_S = 0.5


@dataclass
class Load:
    """The load generator's record: roots JetStream acknowledged, sessions it is waiting on,
    delegations it is waiting on (set when their answer passes), the error answers it got
    back, and when it ran (Unix seconds: from, until)."""

    roots: list[Published] = field(default_factory=list)
    open: dict[str, asyncio.Event] = field(default_factory=dict)
    answered: dict[str, asyncio.Event] = field(default_factory=dict)
    refusals: Refusals = field(default_factory=Refusals)
    span: tuple[float, float] | None = None


@dataclass
class LoadEnd:
    """When the workers stop opening work: at the planned end, yet never before every
    planned fault has healed, and at the latest when the run gives up (monotonic seconds).

    A fault's recovery is the time from its heal to the next progress JetStream stored, so a
    heal after the load's last session leaves nothing to measure it by: a cluster node killed
    under load took longer to rejoin than the load had left to run, and the run read
    `recovery took inf s` with every session completed. Going on until the heal makes every
    recovery a measure of the system, never of where the schedule fell in the run.
    """

    planned_at: float
    give_up_at: float
    faults_healed: asyncio.Event = field(default_factory=asyncio.Event)
    ended_at: float | None = None
    """When the load first stopped opening work (Unix seconds), None while it goes on."""

    def reached(self) -> bool:
        """Whether a worker should stop opening work now."""
        if self.ended_at is not None:
            return True
        now = time.monotonic()
        if now >= self.give_up_at or (now >= self.planned_at and self.faults_healed.is_set()):
            self.ended_at = time.time()
            return True
        return False


async def submit_root(js: JetStreamContext, ns: Namespace, msg: AnyEnvelope, until: float) -> int:
    """Submit as the CLI until JetStream acknowledges it (the same id each time, so a retry
    after a lost ack is de-duplicated); return its stream sequence, or 0 if the run ended."""
    position = TraceHeaders(trace_id=msg.id, hop_count=hop_delta_for(msg), origin=CLI)
    headers = position.to_headers(msg.id)
    while time.monotonic() < until:
        try:
            ack = await js.publish(ns.submit(CLI), encode(msg), headers=headers, timeout=2)
        except Exception:  # the server is down or restarting: try again, as a client would
            await asyncio.sleep(0.5)  # retry pacing while the broker is away
            continue
        return int(ack.seq)
    return 0


async def worker(
    js: JetStreamContext,
    ns: Namespace,
    load: Load,
    end: LoadEnd,
    session_timeout_s: float,
) -> None:
    """Run sessions one after another until the load's end."""
    give_up_at = end.give_up_at
    while not end.reached():
        msg = demo_message(user_id="chaos")
        assert msg.session_id is not None  # noqa: S101 - set just above
        ended = load.open.setdefault(msg.session_id, asyncio.Event())
        refused = load.refusals.expect(msg.id)
        seq = await submit_root(js, ns, msg, give_up_at)
        if seq == 0:
            load.open.pop(msg.session_id, None)
            load.refusals.forget(msg.id)
            return
        load.roots.append(Published(msg.id, seq, "gate", "human_message", time.time()))
        # A session that never ends is the checker's to report; the load goes on without it.
        patience = min(session_timeout_s, max(give_up_at - time.monotonic(), 0.1))
        if await _ended_or_refused(ended, refused, patience):
            await asyncio.sleep(_REFUSED_PAUSE_S)  # pacing: no retry storm against a refusal
        load.refusals.forget(msg.id)


async def _ended_or_refused(
    ended: asyncio.Event, refused: asyncio.Future[Error], patience: float
) -> bool:
    """Wait until the session ended, its request was refused, or `patience` ran out; True
    if it was refused."""
    ending: asyncio.Future[object] = asyncio.ensure_future(ended.wait())
    either: set[asyncio.Future[object]] = {ending, refused}  # type: ignore[arg-type]
    try:
        await asyncio.wait(either, timeout=patience, return_when=asyncio.FIRST_COMPLETED)
    finally:
        ending.cancel()
    return refused.done() and not refused.cancelled()


async def follow_refusals(nc: NATS, ns: Namespace, load: Load, locked_down: bool) -> None:
    """Read the CLI's deliveries into `load.refusals` (through the JetStream API its account
    reaches, when the broker is locked down)."""
    prefix = settings_for(CLI, ns).get("js_api_prefix") if locked_down else None
    js = nc.jetstream(prefix=str(prefix)) if prefix else nc.jetstream()
    await load.refusals.follow(js, ns, CLI)


async def follow_events(js: JetStreamContext, ns: Namespace, load: Load) -> None:
    """Mark sessions ended as their end events pass (the checker reads them durably later).

    Through an ordered consumer on an operator's connection: a person's account follows the
    timelines only live, and an end event published while a live follower was away (a server
    restart) would leave its worker waiting out the session timeout. The consumer lives in the
    server's memory, so a restarted server forgets it; nats-py recreates it, from the event
    after the last one seen, once two idle heartbeats are missed (0.5 s apart).
    """

    async def on_event(raw: Msg) -> None:
        try:
            event = decode_envelope(raw.data)
        except ValueError:
            return
        if isinstance(event, SessionEvent) and event.event_type in _ENDS:
            load.open.setdefault(event.session_id, asyncio.Event()).set()

    await js.subscribe(
        ns.wildcard("events"),
        stream=ns.stream("events"),
        cb=on_event,
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.NEW,
        idle_heartbeat=0.5,
    )
