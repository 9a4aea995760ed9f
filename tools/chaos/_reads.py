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
import time
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy
from nats.js.errors import KeyNotFoundError, NotFoundError

from actors.gate import id_key
from bus import DEAD_ACTOR, DEAD_REASON, through_elections
from schemas import AnyEnvelope, Decision, DecodeError, Namespace, SessionEvent, decode_envelope
from tools.chaos._connections import connect
from tools.chaos._facts import Published
from tools.chaos._lockdown import LockedBroker
from tools.natsconf import PROVISIONER

__all__ = (
    "Stored",
    "print_unanswered",
    "read_dead_letters",
    "read_stream",
    "tell_lost",
    "tell_unfinished",
    "wait_for_quiet",
)

GATE = "gate"
"""The gate's user in a run (its actor id): the one that reads its id claims."""


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


_CONSUMER_NOT_FOUND = 10014
"""JetStream's error code for a consumer the stream does not have (not a stream electing)."""
QUIET_POLL_S = 0.25
"""How often the end of a run asks the server whether the actors' consumers are idle."""


async def wait_for_quiet(
    nc: NATS, ns: Namespace, actors: Collection[str], timeout: float, out: TextIO
) -> None:
    """Wait until no actor's consumer on SUBMIT, DELIVER or EVENTS holds a message pending
    or unacknowledged, twice in a row, for at most `timeout` seconds (then say which still
    did).

    The load stops when its sessions ended, but an actor may still hold an input whose
    effects it failed to store (the stream was electing a leader), to be retried after a
    backoff: acknowledged work still in flight, not lost. The run's verdict is read once
    it is done. The server tells no event for an idle consumer, so each actor's consumer is
    asked, every `QUIET_POLL_S`; one that does not answer (its leader electing) counts as
    busy, and one quiet look is not enough (an actor may store an effect on one stream and
    ack its input on another between two questions). The reminders (TIMERS) are left out:
    deferred on purpose, for minutes.
    """
    js = nc.jetstream()
    until = time.monotonic() + timeout
    busy: list[str] = []
    quiet_looks = 0
    while quiet_looks < 2 and time.monotonic() < until:
        busy = await _busy_consumers(js, ns, actors)
        quiet_looks = 0 if busy else quiet_looks + 1
        await asyncio.sleep(QUIET_POLL_S)  # the server pushes no word of an idle consumer
    if busy or quiet_looks < 2:
        print(f"still at work after {timeout:.0f} s: {'; '.join(busy)}", file=out)


async def _busy_consumers(
    js: JetStreamContext, ns: Namespace, actors: Collection[str]
) -> list[str]:
    """Each actor's consumer holding a message pending or unacknowledged, or not answering."""
    busy: list[str] = []
    for family in ("submit", "deliver", "events"):
        stream = ns.stream(family)
        for actor in actors:
            try:
                info = await js.consumer_info(stream, actor, timeout=2)
            except NotFoundError as exc:
                if exc.err_code == _CONSUMER_NOT_FOUND:
                    continue  # this actor reads another stream
                busy.append(f"{stream}/{actor}: {exc!r}")
                continue
            except Exception as exc:
                busy.append(f"{stream}/{actor}: {exc!r}")
                continue
            if info.num_pending or info.num_ack_pending:
                busy.append(
                    f"{stream}/{actor}: pending {info.num_pending}, unacked {info.num_ack_pending}"
                )
    return busy


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
    gate = await connect(url, broker, GATE)  # only it reads the ids it claimed
    try:
        await _print_consumers(admin, ns, out)
        await _print_unended(admin.jetstream(), gate.jetstream(), ns, decisions, out)
    finally:
        await admin.close()
        await gate.close()
    print_unanswered(unanswered, decisions, out)


async def _print_consumers(nc: NATS, ns: Namespace, out: TextIO) -> None:
    """Where unfinished work sits: each consumer's pending, unacked and waiting counts, in
    the shared streams and in each agent's own reminders stream."""
    js = nc.jetstream()
    streams = [ns.stream(family) for family in ("submit", "deliver", "events", "timers")]
    try:
        own = f"{ns.stream('timers')}_"
        streams += sorted(
            info.config.name
            for info in await js.streams_info()
            if info.config.name and info.config.name.startswith(own)
        )
    except Exception as exc:
        print(f"  each agent's reminders: {exc!r}", file=out)
    for stream in streams:
        try:
            state = (await js.stream_info(stream)).state
            infos = await js.consumers_info(stream)
        except Exception as exc:
            print(f"  {stream}: {exc!r}", file=out)
            continue
        # A work queue keeps only what no consumer acked: a message kept there that no
        # consumer holds pending is one its consumer skipped.
        print(
            f"  {stream}: {state.messages} messages, seq {state.first_seq}-{state.last_seq}",
            file=out,
        )
        for info in infos:
            print(
                f"  {stream}/{info.name}: pending {info.num_pending}, "
                f"unacked {info.num_ack_pending}, redelivered {info.num_redelivered}, "
                f"pull requests waiting {info.num_waiting}",
                file=out,
            )


async def _print_unended(
    js: JetStreamContext,
    claims: JetStreamContext,
    ns: Namespace,
    decisions: Sequence[Stored],
    out: TextIO,
) -> None:
    """Each session with no end on its timeline, what its timeline told (where it stopped:
    the step, the round, the agent it waited for), what the gate decided in it, and whether
    the gate took its last call in (read on `claims`, the gate's connection)."""
    try:
        stored = await read_stream(js, ns.stream("events"), f"{ns.root}.events.>")
    except Exception as exc:
        print(f"  timelines: {exc!r}", file=out)
        return
    told: dict[str, list[str]] = {}
    last_calls: dict[str, tuple[str, ...]] = {}
    for message in stored:
        event = message.envelope
        if isinstance(event, SessionEvent):
            told.setdefault(event.session_id, []).append(
                f"{event.event_type}({event.round or ''}{event.speaker or ''})@{message.seq}"
            )
            if event.event_type == "step_started":
                last_calls[event.session_id] = event.envelope_ids
    for session_id, events in told.items():
        if not any(
            e.startswith(("session_completed", "session_failed", "session_canceled"))
            for e in events
        ):
            print(f"  unended {session_id}: {' '.join(events)}", file=out)
            decided = [
                f"{e.envelope_kind}({e.sender}>{e.target} {'allowed' if e.allowed else e.code}"
                f" {e.envelope_id[-8:]})@{d.seq}"
                for d in decisions
                if isinstance(e := d.envelope, Decision) and e.session_id == session_id
            ]
            print(f"    decided: {' '.join(decided) or 'nothing'}", file=out)
            for call_id in last_calls.get(session_id, ()):
                print(f"    last call {call_id}: {await _claim_of(claims, ns, call_id)}", file=out)


async def _claim_of(js: JetStreamContext, ns: Namespace, envelope_id: str) -> str:
    """What the gate's idempotency bucket holds for an envelope id: whether the gate ever
    took the submission in (a claim names its sender and PARLEY_SUBMIT sequence) or never
    saw it (the submit was not stored, or not delivered to the gate)."""
    try:
        claims = await js.key_value(ns.bucket("idempotency"))
        entry = await claims.get(id_key(envelope_id))
    except KeyNotFoundError:
        return "no claim: the gate never took it in"
    except Exception as exc:
        return f"claim not read: {exc!r}"
    return f"claimed: {(entry.value or b'').decode('utf-8', 'replace')}"


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


def tell_lost(
    lost: Sequence[str], published: Sequence[Published], stored: Sequence[Stored], out: TextIO
) -> None:
    """Each message acknowledged and never applied: what it was, for whom, at which stream
    sequence, and in stream order every decision of the gate in its trace and every event of
    its session (with the ends of the ids: a decision's envelope and cause, the inputs an
    event applied): which effect of it is missing, or named another."""
    for envelope_id in lost:
        sent = ", ".join(
            f"{p.kind} to {p.receiver} @{p.stream_seq}"
            for p in published
            if p.envelope_id == envelope_id
        )
        about = [d.envelope for d in stored if isinstance(d.envelope, Decision)]
        traces = {d.trace_id for d in about if d.envelope_id == envelope_id}
        sessions = {d.session_id for d in about if d.envelope_id == envelope_id} - {None}
        told: list[str] = []
        for record in stored:
            match record.envelope:
                case Decision() as d if d.trace_id in traces:
                    verdict = "allowed" if d.allowed else d.code
                    told.append(
                        f"{d.envelope_kind}({d.sender}>{d.target} {verdict}"
                        f" {d.envelope_id[-6:]}<{d.causation_id[-6:]})@{record.seq}"
                    )
                case SessionEvent() as e if e.session_id in sessions:
                    inputs = ",".join(i[-6:] for i in e.envelope_ids)
                    told.append(
                        f"{e.event_type}({e.round or ''}{e.speaker or ''} {inputs})@{record.seq}"
                    )
                case _:
                    pass
        print(f"  lost {envelope_id}: {sent}; told: {' '.join(told) or 'nothing'}", file=out)
