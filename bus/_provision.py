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

STREAM_FAMILIES = ("submit", "deliver", "events", "audit", "dead")


@dataclass(frozen=True, slots=True)
class BucketSpec:
    name: str
    history: int
    ttl_s: float | None
    description: str


BUCKETS = (
    BucketSpec("sessions", 5, None, "router session state, written with compare-and-set"),
    BucketSpec("traces", 1, 7 * _DAY, "gate records: hop, call chain, fan-out, rate buckets"),
    BucketSpec("registry", 1, None, "agent profiles and heartbeats"),
    BucketSpec("policy", 10, None, "signed policy bundles and the highest trusted version"),
    BucketSpec("idempotency", 1, _DAY, "ids of envelopes whose effects were applied"),
)


class ProvisionError(RuntimeError):
    """JetStream refused to create or update a stream or bucket."""


def stream_configs(ns: Namespace, *, max_msg_size: int = DEFAULT_MAX_BYTES) -> list[StreamConfig]:
    """The stream definitions of DESIGN.md for namespace `ns`."""
    common = {"storage": StorageType.FILE, "max_msg_size": max_msg_size, "num_replicas": 1}
    return [
        StreamConfig(
            name=ns.stream("submit"),
            description="Everything actors submit; the gate's work queue.",
            subjects=[ns.wildcard("submit")],
            retention=RetentionPolicy.WORK_QUEUE,
            discard=DiscardPolicy.NEW,
            max_age=7 * _DAY,
            duplicate_window=120.0,
            **common,
        ),
        StreamConfig(
            name=ns.stream("deliver"),
            description="Envelopes the gate admitted, one durable consumer per receiver.",
            subjects=[ns.wildcard("deliver")],
            retention=RetentionPolicy.WORK_QUEUE,
            discard=DiscardPolicy.NEW,
            max_age=7 * _DAY,
            duplicate_window=120.0,
            **common,
        ),
        StreamConfig(
            name=ns.stream("events"),
            description="Gate decisions and session timelines.",
            subjects=[ns.wildcard("decisions"), ns.wildcard("events")],
            retention=RetentionPolicy.LIMITS,
            discard=DiscardPolicy.OLD,
            max_age=30 * _DAY,
            duplicate_window=120.0,
            **common,
        ),
        StreamConfig(
            name=ns.stream("audit"),
            description="The hash-chained audit history; the auditor is the only writer.",
            subjects=[ns.wildcard("audit")],
            retention=RetentionPolicy.LIMITS,
            discard=DiscardPolicy.NEW,
            deny_delete=True,
            deny_purge=True,
            duplicate_window=_DAY,
            **common,
        ),
        StreamConfig(
            name=ns.stream("dead"),
            description="Messages an actor could not process, with the reason.",
            subjects=[ns.wildcard("dead")],
            retention=RetentionPolicy.LIMITS,
            discard=DiscardPolicy.OLD,
            max_age=30 * _DAY,
            duplicate_window=120.0,
            **common,
        ),
    ]


async def _ensure_stream(js: JetStreamContext, config: StreamConfig) -> None:
    try:
        info = await js.stream_info(config.name)
    except NotFoundError:
        try:
            await js.add_stream(config)
        except APIError as exc:
            if exc.err_code != 10058:  # created meanwhile by another actor: compare below
                raise ProvisionError(f"cannot create stream {config.name}: {exc}") from exc
        else:
            return
        info = await js.stream_info(config.name)
    current = info.config
    wanted = (config.subjects, config.max_age, config.duplicate_window, config.max_msg_size)
    if (current.subjects, current.max_age, current.duplicate_window, current.max_msg_size) == wanted:
        return
    try:
        await js.update_stream(config)
    except APIError as exc:
        raise ProvisionError(f"cannot update stream {config.name}: {exc}") from exc


async def _ensure_bucket(js: JetStreamContext, ns: Namespace, spec: BucketSpec) -> None:
    name = ns.bucket(spec.name)
    try:
        await js.key_value(name)
        return
    except BucketNotFoundError:
        pass
    try:
        await js.create_key_value(
            KeyValueConfig(
                bucket=name,
                description=spec.description,
                history=spec.history,
                ttl=spec.ttl_s,
                storage=StorageType.FILE,
            )
        )
    except APIError as exc:
        if exc.err_code != 10058:
            raise ProvisionError(f"cannot create bucket {name}: {exc}") from exc


async def provision(
    js: JetStreamContext, ns: Namespace, *, max_msg_size: int = DEFAULT_MAX_BYTES
) -> None:
    """Create or update every stream and bucket of namespace `ns`."""
    for config in stream_configs(ns, max_msg_size=max_msg_size):
        await _ensure_stream(js, config)
    for spec in BUCKETS:
        await _ensure_bucket(js, ns, spec)
