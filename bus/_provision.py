"""Idempotent creation of Parley's streams and KV buckets.

Every actor provisions on start (unless told not to, when an operator owns the streams), so
starting actors in any order works. Re-running with the same definitions is a no-op; a changed
definition is applied as an update, and an update JetStream refuses (a different retention, for
instance) is an error that names the stream.

Replicas: on a cluster of three or more JetStream nodes every stream and bucket is created with
three replicas, so losing a node loses nothing acknowledged; elsewhere with one. The server's
INFO says which (the cluster it belongs to and the nodes clients may reach). An explicit
`replicas` overrides that. Without one, an existing stream is never shrunk: an actor that
starts while a node is down (and so sees a smaller cluster) leaves the streams as they are.
Right after a cluster starts, or while a node rejoins, JetStream may refuse a replicated stream
for want of peers; creation is retried for a while before that is an error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import (
    DiscardPolicy,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import APIError, BucketNotFoundError, NotFoundError

from schemas import DEFAULT_MAX_BYTES, Namespace

__all__ = (
    "BUCKETS",
    "CLUSTER_REPLICAS",
    "STREAM_FAMILIES",
    "ProvisionError",
    "cluster_replicas",
    "provision",
    "stream_configs",
)

_DAY = 24 * 3600.0

CLUSTER_REPLICAS = 3
"""Replicas on a cluster big enough: a majority survives the loss of any one node."""

_PLACEMENT_WAIT_S = 20.0
"""How long a replicated stream's creation is retried while the cluster lacks peers."""
_TRANSIENT = (10005, 10008)  # no suitable peers for placement; JetStream temporarily unavailable


@dataclass(frozen=True, slots=True)
class BucketSpec:
    name: str
    history: int
    ttl_s: float | None
    description: str
    direct: bool = False
    """Readable key by key with `DIRECT.GET.<stream>.<subject>`, a request broker permissions
    can grant per key prefix (a `STREAM.MSG.GET` names its key in the payload: all or none)."""


BUCKETS = (
    BucketSpec("sessions", 5, None, "router session state, written with compare-and-set"),
    BucketSpec("traces", 1, 7 * _DAY, "gate records: hop, call chain, fan-out, rate buckets"),
    BucketSpec("registry", 1, None, "agent profiles and heartbeats"),
    BucketSpec("policy", 64, None, "signed policy bundles (with history) and the trusted floor"),
    # Longer than `traces` keeps a position: no position outlives the claim of its id.
    BucketSpec(
        "idempotency",
        1,
        8 * _DAY,
        "envelope ids the gate decided, create-only; marks of redelivered inputs in hand",
        direct=True,
    ),
    BucketSpec(
        "waits",
        1,
        2 * _DAY,
        "agent hosts' waits for the agents they called: requests, results, final answers",
        direct=True,
    ),
    # Longer than the relay's oldest acceptable frame (7 days), so no frame outlives the
    # replay window that would refuse it again.
    BucketSpec(
        "relay",
        1,
        30 * _DAY,
        "the relay's sequence counters, forwarded calls and replay windows",
    ),
    BucketSpec(
        "leases",
        1,
        None,
        "single writers' leases (the auditor's), taken and renewed with compare-and-set",
        direct=True,
    ),
)


class ProvisionError(RuntimeError):
    """JetStream refused to create or update a stream or bucket."""


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """One stream of DESIGN.md, independent of namespace and message size limit.

    The six streams differ only in these fields; everything else (file storage, the replicas)
    is the same for all of them, so it is written once, in `stream_configs`.
    """

    family: str
    description: str
    work_queue: bool
    """Work-queue retention: a message is gone once acknowledged; else kept to its limits."""
    max_age: float
    """Seconds a message is kept; 0 keeps it for ever."""
    duplicate_window: float = 120.0
    """Seconds within which a repeated message id is dropped as a duplicate."""
    discard_new: bool = True
    """Refuse new messages when full, so a publisher gets an error instead of an older
    message silently vanishing."""
    immutable: bool = False
    """Deny deletes and purges: an append-only history."""
    direct: bool = False
    """Readable with direct gets (bus/_history.py)."""
    batched: bool = False
    """Takes fast batch publishes (bus/_fastbatch.py): the gate's deliveries and decisions."""
    subject_families: tuple[str, ...] = ()
    """The subject families the stream captures; empty means its own family only."""


STREAMS = (
    StreamSpec(
        family="submit",
        description="Everything actors submit; the gate's work queue.",
        work_queue=True,
        max_age=7 * _DAY,
    ),
    StreamSpec(
        family="deliver",
        description="Envelopes the gate admitted, one durable consumer per receiver.",
        work_queue=True,
        max_age=7 * _DAY,
        batched=True,
    ),
    StreamSpec(
        family="events",
        description="Gate decisions and session timelines.",
        work_queue=False,
        max_age=30 * _DAY,
        discard_new=False,
        direct=True,
        batched=True,
        subject_families=("decisions", "events"),
    ),
    StreamSpec(
        family="audit",
        description="The hash-chained audit history; the auditor is the only writer.",
        work_queue=False,
        max_age=0.0,
        duplicate_window=_DAY,
        immutable=True,
        direct=True,
    ),
    StreamSpec(
        family="dead",
        description="Messages an actor could not process, with the reason.",
        work_queue=False,
        max_age=30 * _DAY,
        discard_new=False,
        direct=True,
    ),
    StreamSpec(
        family="timers",
        description="Reminders actors set for themselves, redelivered until they are settled.",
        work_queue=True,
        max_age=7 * _DAY,
    ),
)

STREAM_FAMILIES = tuple(spec.family for spec in STREAMS)


def stream_configs(
    ns: Namespace, *, max_msg_size: int = DEFAULT_MAX_BYTES, replicas: int = 1
) -> list[StreamConfig]:
    """The stream definitions of DESIGN.md (`STREAMS`) for namespace `ns`."""
    return [
        StreamConfig(
            name=ns.stream(spec.family),
            description=spec.description,
            subjects=[ns.wildcard(family) for family in spec.subject_families or (spec.family,)],
            retention=RetentionPolicy.WORK_QUEUE if spec.work_queue else RetentionPolicy.LIMITS,
            discard=DiscardPolicy.NEW if spec.discard_new else DiscardPolicy.OLD,
            max_age=spec.max_age,
            duplicate_window=spec.duplicate_window,
            max_msg_size=max_msg_size,
            storage=StorageType.FILE,
            num_replicas=replicas,
            deny_delete=spec.immutable,
            deny_purge=spec.immutable,
            allow_direct=spec.direct,
            allow_batched=spec.batched,
        )
        for spec in STREAMS
    ]


def cluster_replicas(server_info: dict[str, Any]) -> int:
    """The replicas fit for the server that sent this INFO: `CLUSTER_REPLICAS` when it
    belongs to a cluster of at least that many nodes clients can reach, else 1."""
    if not server_info.get("cluster") or not server_info.get("jetstream"):
        return 1
    nodes = len(set(server_info.get("connect_urls") or ()))
    return CLUSTER_REPLICAS if nodes >= CLUSTER_REPLICAS else 1


async def _placed(what: str, create: Callable[[], Awaitable[object]]) -> None:
    """Create `what`, retrying while the cluster cannot place it yet (peers still joining,
    no metadata leader for a moment); an error that names it once that lasts too long."""
    deadline = time.monotonic() + _PLACEMENT_WAIT_S
    pause = 0.1
    while True:
        try:
            await create()
            return
        except APIError as exc:
            if exc.err_code not in _TRANSIENT or time.monotonic() > deadline:
                raise
        except (NatsTimeoutError, NoRespondersError):
            if time.monotonic() > deadline:
                raise ProvisionError(f"cannot create {what}: JetStream did not answer") from None
        await asyncio.sleep(pause)  # the cluster's own election and peer gossip take this long
        pause = min(pause * 2, 1.0)


async def _ensure_stream(js: JetStreamContext, config: StreamConfig, *, exact: bool) -> None:
    """Create the stream, or update it where it differs. `exact`: its replicas were asked
    for, not inferred, and are applied either way; else they only ever grow."""
    name = config.name or ""
    try:
        info = await js.stream_info(name)
    except NotFoundError:
        try:
            await _placed(f"stream {name}", lambda: js.add_stream(config))
        except APIError as exc:
            if exc.err_code != 10058:  # created meanwhile by another actor: compare below
                raise ProvisionError(f"cannot create stream {config.name}: {exc}") from exc
        else:
            return
        info = await js.stream_info(name)
    current = info.config
    if not exact:
        config.num_replicas = max(config.num_replicas or 1, current.num_replicas or 1)
    wanted = (
        config.subjects,
        config.max_age,
        config.duplicate_window,
        config.max_msg_size,
        config.num_replicas or 1,
        bool(config.allow_batched),
    )
    if (
        current.subjects,
        current.max_age,
        current.duplicate_window,
        current.max_msg_size,
        current.num_replicas or 1,
        bool(current.allow_batched),
    ) == wanted:
        return
    try:
        await js.update_stream(config)
    except APIError as exc:
        raise ProvisionError(f"cannot update stream {config.name}: {exc}") from exc


async def _ensure_bucket(
    js: JetStreamContext, ns: Namespace, spec: BucketSpec, replicas: int, *, exact: bool
) -> None:
    name = ns.bucket(spec.name)
    try:
        await js.key_value(name)
    except BucketNotFoundError:
        pass
    else:
        await _ensure_existing(js, name, spec, replicas, exact=exact)
        return
    config = KeyValueConfig(
        bucket=name,
        description=spec.description,
        history=spec.history,
        ttl=spec.ttl_s,
        storage=StorageType.FILE,
        replicas=replicas,
        direct=spec.direct,
    )
    try:
        await _placed(f"bucket {name}", lambda: js.create_key_value(config))
    except APIError as exc:
        if exc.err_code != 10058:
            raise ProvisionError(f"cannot create bucket {name}: {exc}") from exc


async def _ensure_existing(
    js: JetStreamContext, name: str, spec: BucketSpec, replicas: int, *, exact: bool
) -> None:
    """Give a bucket made by an older release what its spec asks for now: a TTL that grew
    (the gate's id claims must outlive its positions), direct gets where it is read key by
    key (the quarantine's marks), and the replicas of its cluster."""
    config = (await js.stream_info(f"KV_{name}")).config
    current = config.num_replicas or 1
    replicas = replicas if exact else max(replicas, current)
    if (
        (config.max_age or None) == spec.ttl_s
        and (config.allow_direct or not spec.direct)
        and current == replicas
    ):
        return
    config.max_age = spec.ttl_s
    config.allow_direct = bool(config.allow_direct or spec.direct)
    config.num_replicas = replicas
    try:
        await js.update_stream(config)
    except APIError as exc:
        raise ProvisionError(f"cannot update bucket {name}: {exc}") from exc


async def provision(
    js: JetStreamContext,
    ns: Namespace,
    *,
    max_msg_size: int = DEFAULT_MAX_BYTES,
    replicas: int | None = None,
) -> int:
    """Create or update every stream and bucket of namespace `ns`; return their replicas.

    `replicas` None: as many as the cluster `js` is connected to calls for (`cluster_replicas`
    of its server's INFO), never fewer than an existing stream has.
    """
    exact = replicas is not None
    if replicas is None:
        # nats-py keeps the server's INFO (cluster name, connect_urls) only privately.
        replicas = cluster_replicas(js._nc._server_info)
    for config in stream_configs(ns, max_msg_size=max_msg_size, replicas=replicas):
        await _ensure_stream(js, config, exact=exact)
    for spec in BUCKETS:
        await _ensure_bucket(js, ns, spec, replicas, exact=exact)
    return replicas
