"""The `Actor` base class: what every Parley process implements.

An actor declares its inputs (durable consumers on Parley's streams) and handles one decoded
envelope at a time. Everything else, connecting, provisioning, fetching, decoding, metrics,
logging, effects, acks, dead letters and shutdown, is the runtime's job (bus/_runtime.py).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from bus._connection import Link, Uptime
from bus._context import Context
from bus._metrics import ActorMetrics
from bus._outbox import Outbox
from bus._refusals import ConnectionRefusals
from bus._rejection import Rejection
from bus._settings import Settings
from schemas import AnyEnvelope, Namespace

__all__ = ("Actor", "BusHandle", "Input")


@dataclass(frozen=True, slots=True)
class Input:
    """One durable pull consumer an actor reads from.

    `sender_from` says where the trustworthy sender is: the subject's third token (on
    `submit`, where the broker lets each actor publish only as itself) or the gate's
    `Parley-Sender` header (on `deliver`, which only the gate may write).
    """

    stream: str
    filter_subject: str
    durable: str
    sender_from: Literal["subject", "header"] = "header"
    max_deliver: int | None = None
    """Deliveries before a message is given up on; None: the actor's `max_deliver` setting,
    -1: never (a reminder re-armed with `Context.defer` is delivered again each time)."""
    max_ack_pending: int | None = None
    """Messages out at once; None: from `max_in_flight`. A deferred reminder stays pending
    until it comes back, so a reminder queue needs room for one per thing it watches."""
    from_now: bool = False
    """True: a consumer created now starts at the stream's next message, not its first: for an
    input about what happens from now on (a session's end) on a stream that keeps a month."""
    raw: bool = False
    """True: its messages are not envelopes (dead letters hold whatever bad bytes came in), so
    the runtime decodes nothing and passes each to `Actor.handle_raw()` with its bytes and
    headers untouched; acks, retries and settling are the same as for envelopes."""

    @classmethod
    def deliver(cls, ns: Namespace, actor_id: str) -> Input:
        """The usual input: envelopes the gate delivers to `actor_id`."""
        return cls(ns.stream("deliver"), ns.deliver(actor_id), actor_id, "header")

    @classmethod
    def timers(cls, ns: Namespace, actor_id: str) -> Input:
        """Reminders `actor_id` publishes to itself on `parley.timers.<actor_id>`.

        The sender is the subject's token, which the broker lets only the actor itself
        publish on; a reminder is delivered until its handler stops deferring it.
        """
        return cls(
            ns.stream("timers"),
            ns.timers(actor_id),
            actor_id,
            "subject",
            -1,
            max_ack_pending=65_536,
        )

    @classmethod
    def agent_timers(cls, ns: Namespace, agent: str) -> Input:
        """Reminders an agent publishes to itself, in its own stream (`Namespace.agent_stream`):
        as `timers`, on `parley.timers.<agent>.own`."""
        return cls(
            ns.agent_stream("timers", agent),
            ns.agent_timers(agent),
            agent,
            "subject",
            -1,
            max_ack_pending=65_536,
        )

    @classmethod
    def session_ends(cls, ns: Namespace, actor_id: str) -> Input:
        """How each session stands, as the router stores it (`Namespace.standing`): what
        `actor_id` has held in a session is let go when it ends. The subject's third token is
        the session's owner (only the router may publish there); the events stream keeps a
        month of them, so a new consumer starts from now."""
        return cls(ns.stream("events"), ns.wildcard("standing"), actor_id, "subject", from_now=True)


@dataclass(frozen=True, slots=True)
class BusHandle:
    """The connection and the names an actor may use in `start()`."""

    nc: NATS
    js: JetStreamContext
    namespace: Namespace
    settings: Settings
    metrics: ActorMetrics
    uptime: Uptime
    """When this process last (re)connected to the server, for judging others' silence."""
    link: Link
    """Whether the connection is up now; an actor's own `AckInbox` is given it, so what it
    had in flight when the connection dropped fails once it is back (`PublishLost`)."""
    refusals: ConnectionRefusals = field(default_factory=ConnectionRefusals)
    """The permissions the server refused this connection: `start()`'s look-ups go through
    `asked_at_start(bus.refusals, ...)`, so a grant missing is said at once, not waited out
    as an election."""


class Actor(ABC):
    """Subclass, name the `kind`, implement `handle()`; override `inputs()` to read elsewhere."""

    kind: ClassVar[str] = "actor"
    concurrent_handlers: ClassVar[bool] = False
    """False: a fetched batch is handled in order, one message after another (cheapest, and
    ordered). True: handlers of a batch run concurrently, for actors whose handlers wait on
    slow things (an LLM call) so one slow message does not hold up the others."""

    settles_behind: ClassVar[bool] = False
    """True (for an in-order actor): the next batch is fetched and handled while the effects
    of the previous one are still being stored; each message is still acked only once its
    own effects are. Only for actors that never read back an earlier batch's effects from
    the server while they may be in flight (the gate reads its own records through a cache
    that waits for its writes in flight)."""

    handles_batches: ClassVar[bool] = False
    """True: the runtime passes each fetched batch to `handle_batch()` instead of calling
    `handle()` per message, for actors that commit shared state once per batch (the gate)."""

    files_by_sender: ClassVar[bool] = False
    """True for the trusted actors whose deliveries come from many senders (gate, router, tool
    runtime, LLM gateway): a delivery one gives up on is filed under the sender the gate named
    in it, so one sender's refused messages push out only that sender's older dead letters
    (bus/_deadletter.py). Their grants allow it; an agent's would not."""

    gathers_s: ClassVar[float] = 0.0
    """How long an idle input, once its first message arrives, waits for others before the
    batch is handed over (0: at once). For actors on no request's path (the auditor): each
    batch costs a pull, a flush of its effects and one of its acks, and messages that trickle
    in one at a time pay that once each. Adds up to this much delay to such an actor's
    work; a busy input, whose fetches bring batches anyway, never waits."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.actor_id = settings.actor_id or self.kind
        self.namespace = Namespace(settings.namespace)

    def inputs(self) -> Sequence[Input]:
        """The consumers this actor reads; by default its own deliver subject."""
        return (Input.deliver(self.namespace, self.actor_id),)

    async def start(self, bus: BusHandle) -> None:  # noqa: B027 - optional hook
        """Open what the actor needs (KV buckets, …) before the first message arrives."""

    async def background(self, stopping: asyncio.Event) -> None:  # noqa: B027 - optional hook
        """Work beside message handling (watching a KV key, …) until `stopping` is set.

        Runs in the runtime's task group once `start()` returned; an exception here stops
        the actor (crash loudly, the supervisor restarts it).
        """

    async def stop(self) -> None:  # noqa: B027 - optional hook
        """Release what `start()` opened; called after in-flight messages are finished."""

    @abstractmethod
    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        """Handle one envelope. Publish effects through `ctx`; raise to have it retried."""

    async def handle_raw(self, ctx: Context) -> None:
        """Handle one message of a raw input (`Input.raw`); raise to have it retried.

        Nothing was decoded or checked: the bytes are `ctx.payload`, the headers
        `ctx.headers`, the position `ctx.stream` / `ctx.stream_seq` / `ctx.attempt`. The
        context has no trace and no sender, and `ctx.envelope_id` is `<stream>:<seq>`, so ids
        from `ctx.derive_id()` are still the same on every redelivery.
        """
        raise NotImplementedError(f"{type(self).__name__} reads a raw input but has no handle_raw")

    async def rejected(self, rejection: Rejection, outbox: Outbox) -> None:  # noqa: B027
        """An input is about to be dead-lettered unhandled (bad bytes, bad headers, or
        quarantined after killing a handler): publish through `outbox` what its sender
        should learn (an optional hook; nothing by default).

        The effects are stored before the dead letter and the ack; if they cannot be, the
        input is redelivered, so their ids must derive from `rejection.stream` and `.seq`.
        """

    async def handle_batch(
        self, batch: Sequence[tuple[AnyEnvelope, Context]]
    ) -> list[Exception | None]:
        """Handle a whole fetched batch (only called when `handles_batches` is True).

        Returns one entry per message, in order: None when it was handled (its effects are
        in its context's outbox), or the exception that should have it retried.
        """
        raise NotImplementedError(f"{type(self).__name__} sets handles_batches but does not")
