"""Idempotent creation of Parley's streams and KV buckets.

Every actor provisions on start (unless told not to, when an operator owns the streams), so
starting actors in any order works. Re-running with the same definitions is a no-op; a changed
definition is applied as an update, and an update JetStream refuses (a different retention, for
instance) is an error that names the stream.
"""

from __future__ import annotations

from dataclasses import dataclass

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

__all__ = ("BUCKETS", "STREAM_FAMILIES", "ProvisionError", "provision", "stream_configs")

_DAY = 24 * 3600.0


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

    The six streams differ only in these fields; everything else (file storage, one replica)
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
    ),
    StreamSpec(
        family="events",
        description="Gate decisions and session timelines.",
        work_queue=False,
        max_age=30 * _DAY,
        discard_new=False,
        direct=True,
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


def stream_configs(ns: Namespace, *, max_msg_size: int = DEFAULT_MAX_BYTES) -> list[StreamConfig]:
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
            num_replicas=1,
            deny_delete=spec.immutable,
            deny_purge=spec.immutable,
            allow_direct=spec.direct,
        )
        for spec in STREAMS
    ]


async def _ensure_stream(js: JetStreamContext, config: StreamConfig) -> None:
    name = config.name or ""
    try:
        info = await js.stream_info(name)
    except NotFoundError:
        try:
            await js.add_stream(config)
        except APIError as exc:
            if exc.err_code != 10058:  # created meanwhile by another actor: compare below
                raise ProvisionError(f"cannot create stream {config.name}: {exc}") from exc
        else:
            return
        info = await js.stream_info(name)
    current = info.config
    wanted = (config.subjects, config.max_age, config.duplicate_window, config.max_msg_size)
    if (
        current.subjects,
        current.max_age,
        current.duplicate_window,
        current.max_msg_size,
    ) == wanted:
        return
    try:
        await js.update_stream(config)
    except APIError as exc:
        raise ProvisionError(f"cannot update stream {config.name}: {exc}") from exc


async def _ensure_bucket(js: JetStreamContext, ns: Namespace, spec: BucketSpec) -> None:
    name = ns.bucket(spec.name)
    try:
        await js.key_value(name)
    except BucketNotFoundError:
        pass
    else:
        await _ensure_existing(js, name, spec)
        return
    try:
        await js.create_key_value(
            KeyValueConfig(
                bucket=name,
                description=spec.description,
                history=spec.history,
                ttl=spec.ttl_s,
                storage=StorageType.FILE,
                direct=spec.direct,
            )
        )
    except APIError as exc:
        if exc.err_code != 10058:
            raise ProvisionError(f"cannot create bucket {name}: {exc}") from exc


async def _ensure_existing(js: JetStreamContext, name: str, spec: BucketSpec) -> None:
    """Give a bucket made by an older release what its spec asks for now: a TTL that grew
    (the gate's id claims must outlive its positions), and direct gets where it is read key
    by key (the quarantine's marks)."""
    config = (await js.stream_info(f"KV_{name}")).config
    if (config.max_age or None) == spec.ttl_s and (config.allow_direct or not spec.direct):
        return
    config.max_age = spec.ttl_s
    config.allow_direct = bool(config.allow_direct or spec.direct)
    try:
        await js.update_stream(config)
    except APIError as exc:
        raise ProvisionError(f"cannot update bucket {name}: {exc}") from exc


async def provision(
    js: JetStreamContext, ns: Namespace, *, max_msg_size: int = DEFAULT_MAX_BYTES
) -> None:
    """Create or update every stream and bucket of namespace `ns`."""
    for config in stream_configs(ns, max_msg_size=max_msg_size):
        await _ensure_stream(js, config)
    for spec in BUCKETS:
        await _ensure_bucket(js, ns, spec)
