"""Reading a chaos run's records back from JetStream: every message of a stream on a subject,
the dead letters by actor and reason, and where unfinished work sits (its consumers, the
timelines of sessions with no end, and the decisions in the trace of each delegation never
answered).

The run's facts are derived from these (tools/chaos/_records.py). A read's setup (the
stream's info, the ordered consumer's creation) is asked again through a cluster's elections,
since a run's faults may have left a stream electing its leader; an election during the read
itself is met by nats-py's ordered consumer re-creating itself once, and a read still short
then ends with its timeout.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from bus import DEAD_ACTOR, DEAD_REASON, through_elections
from schemas import AnyEnvelope, Decision, DecodeError, Namespace, SessionEvent, decode_envelope
from tools.chaos._connections import connect
from tools.chaos._lockdown import LockedBroker
from tools.natsconf import PROVISIONER

__all__ = ("Stored", "print_unanswered", "read_dead_letters", "read_stream", "tell_unfinished")


@dataclass(frozen=True, slots=True)
class Stored:
    """One stored message: stream sequence, subject, headers and decoded envelope (or None),
    and when JetStream stored it (seconds since the epoch; None when not known)."""

    seq: int
    subject: str
    envelope: AnyEnvelope | None
    headers: dict[str, str] = field(default_factory=dict)
    stored_at: float | None = None


async def read_stream(
    js: JetStreamContext, stream: str, subject: str, *, timeout: float = 10.0
) -> list[Stored]:
    """Every message of `stream` on `subject` so far, in order, through an ordered consumer.

    Raises:
        TimeoutError: the messages the stream counted did not all arrive in `timeout`.
    """
    # The stream's info and an ordered consumer are answered only by the stream's leader: on
    # a cluster just after a fault, asked again through its election.
    info = await through_elections(
        lambda: js.stream_info(stream, subjects_filter=subject), f"the {stream} stream's info"
    )
    expected = sum((info.state.subjects or {}).values())
    if expected == 0:
        return []
    out: list[Stored] = []
    done = asyncio.Event()

    async def on_msg(msg: Msg) -> None:
        meta = msg.metadata
        try:
            envelope: AnyEnvelope | None = decode_envelope(msg.data)
        except DecodeError:
            envelope = None
        stored_at = meta.timestamp.timestamp() if meta.timestamp else None
        out.append(
            Stored(meta.sequence.stream, msg.subject, envelope, dict(msg.headers or {}), stored_at)
        )
        if len(out) >= expected:
            done.set()

    sub = await through_elections(
        lambda: js.subscribe(
            subject,
            stream=stream,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.ALL,
            cb=on_msg,
        ),
        f"an ordered consumer of {stream}",
    )
    try:
        async with asyncio.timeout(timeout):
            await done.wait()
    finally:
        await sub.unsubscribe()
    return out


async def read_dead_letters(
    js: JetStreamContext, ns: Namespace, *, timeout: float = 10.0
) -> Counter[tuple[str, str]]:
    """How many dead letters each (actor, reason) filed."""
    records = await read_stream(js, ns.stream("dead"), f"{ns.root}.dead.>", timeout=timeout)
    return Counter(
        (r.headers.get(DEAD_ACTOR, "?"), r.headers.get(DEAD_REASON, "?")) for r in records
    )


async def tell_unfinished(
    url: str,
    broker: LockedBroker | None,
    ns: Namespace,
    unanswered: Sequence[str],
    decisions: Sequence[Stored],
    out: TextIO,
) -> None:
    """Where the work a run left unfinished sits: each consumer's counts, each session's
    timeline with no end, each delegation never answered with the decisions in its trace."""
    print("unfinished work; consumers:", file=out)
    admin = await connect(url, broker, PROVISIONER)  # only it sees every consumer
    try:
        await _print_consumers(admin, ns, out)
    finally:
        await admin.close()
    print_unanswered(unanswered, decisions, out)


async def _print_consumers(nc: NATS, ns: Namespace, out: TextIO) -> None:
    """Where unfinished work sits: each consumer's pending, unacked and waiting counts."""
    js = nc.jetstream()
    for family in ("submit", "deliver", "events", "timers"):
        stream = ns.stream(family)
        try:
            infos = await js.consumers_info(stream)
        except Exception as exc:
            print(f"  {stream}: {exc!r}", file=out)
            continue
        for info in infos:
            print(
                f"  {stream}/{info.name}: pending {info.num_pending}, "
                f"unacked {info.num_ack_pending}, redelivered {info.num_redelivered}, "
                f"pull requests waiting {info.num_waiting}",
                file=out,
            )
    await _print_unended(js, ns, out)


async def _print_unended(js: JetStreamContext, ns: Namespace, out: TextIO) -> None:
    """Each session with no end on its timeline, and what its timeline told: where it
    stopped (the step, the round, the agent it waited for)."""
    try:
        stored = await read_stream(js, ns.stream("events"), f"{ns.root}.events.>")
    except Exception as exc:
        print(f"  timelines: {exc!r}", file=out)
        return
    told: dict[str, list[str]] = {}
    for message in stored:
        event = message.envelope
        if isinstance(event, SessionEvent):
            told.setdefault(event.session_id, []).append(
                f"{event.event_type}({event.round or ''}{event.speaker or ''})@{message.seq}"
            )
    for session_id, events in told.items():
        if not any(
            e.startswith(("session_completed", "session_failed", "session_canceled"))
            for e in events
        ):
            print(f"  unended {session_id}: {' '.join(events)}", file=out)


def print_unanswered(unanswered: Sequence[str], decisions: Sequence[Stored], out: TextIO) -> None:
    """Each delegation never answered (by its request's envelope id), and every decision the
    gate made in its trace, in order: how far its calls went, and which answer never came."""
    traces = {
        d.envelope.envelope_id: d.envelope.trace_id
        for d in decisions
        if isinstance(d.envelope, Decision)
    }
    for request in unanswered:
        trace = traces.get(request)
        steps = [
            f"{e.envelope_kind}({e.sender}>{e.target} {'allowed' if e.allowed else e.code})@{d.seq}"
            for d in decisions
            if isinstance(e := d.envelope, Decision) and trace is not None and e.trace_id == trace
        ]
        print(f"  unanswered {request}: {' '.join(steps) or 'no decision in its trace'}", file=out)
