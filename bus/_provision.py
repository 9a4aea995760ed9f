"""Idempotent creation of Parley's streams and KV buckets.

Every actor provisions on start (unless told not to, when an operator owns the streams), so
starting actors in any order works. Re-running with the same definitions is a no-op; a changed
definition is applied as an update, and an update JetStream refuses (a different retention, for
instance) is an error that names the stream.

Replicas: on a cluster of three or more JetStream nodes every stream and bucket is created with
three replicas, so losing a node loses nothing acknowledged; elsewhere with one. The server's
INFO says which (the cluster it belongs to and the nodes clients may reach; a fresh namespace
waits for a forming cluster to name them all: bus/_replicas.py). An explicit `replicas`
overrides that. Without one, an existing stream is never shrunk: an actor that
starts while a node is down (and so sees a smaller cluster) leaves the streams as they are.
Right after a cluster starts, or while a node rejoins, JetStream may refuse a replicated stream
for want of peers; creation is retried for a while before that is an error.

Quotas (bus/_quotas.py, docs/quotas.md): every stream and bucket gets a `max_bytes` and a
largest message, and every subject a principal may write a per-subject bound; an existing
stream or bucket gets them as an update, so re-provisioning an older deployment bounds it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import (
    KeyValueConfig,
    ObjectStoreConfig,
    StorageType,
    StreamConfig,
)
from nats.js.errors import APIError, BucketNotFoundError, NotFoundError

from bus._earlier_reminders import move_earlier_reminders
from bus._elections import through_elections_if_clustered
from bus._quotas import Quotas
from bus._replicas import CLUSTER_REPLICAS, cluster_replicas, inferred_replicas
from bus._retention import Retention
from bus._settings import Settings
from bus._stream_configs import agent_timers_config, stream_configs
from bus._streams import (
    AGENT_BUCKETS,
    ARTIFACTS,
    BUCKETS,
    RETIRED_BUCKETS,
    STREAM_FAMILIES,
    BucketSpec,
)
from schemas import DEFAULT_MAX_BYTES, Namespace

__all__ = (
    "AGENT_BUCKETS",
    "ARTIFACTS",
    "BUCKETS",
    "CLUSTER_REPLICAS",
    "RETIRED_BUCKETS",
    "STREAM_FAMILIES",
    "ProvisionError",
    "cluster_replicas",
    "provision",
    "provision_agent",
    "provision_for",
)

T = TypeVar("T")

_PLACEMENT_WAIT_S = 20.0
"""How long a replicated stream's creation is retried while the cluster lacks peers."""
_TRANSIENT = (10005, 10008)  # no suitable peers for placement; JetStream temporarily unavailable


class ProvisionError(RuntimeError):
    """JetStream refused to create or update a stream or bucket."""


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


async def _answered(js: JetStreamContext, what: str, request: Callable[[], Awaitable[T]]) -> T:
    """`request()`, asked again while its streams elect their leaders on a cluster
    (`through_elections_if_clustered`)."""
    return await through_elections_if_clustered(js, request, f"provisioning {what}")


def _stream_shape(config: StreamConfig) -> tuple[object, ...]:
    """What provisioning sets on a stream that an update may change."""
    return (
        config.subjects,
        config.max_age,
        config.duplicate_window,
        config.max_msg_size,
        config.max_bytes,
        config.max_msgs_per_subject,
        bool(config.discard_new_per_subject),
        config.num_replicas or 1,
        bool(config.allow_batched),
    )


async def _ensure_stream(js: JetStreamContext, config: StreamConfig, *, exact: bool) -> None:
    """Create the stream, or update it where it differs. `exact`: its replicas were asked
    for, not inferred, and are applied either way; else they only ever grow."""
    name = config.name or ""
    try:
        info = await _answered(js, f"stream {name}", lambda: js.stream_info(name))
    except NotFoundError:
        try:
            await _placed(f"stream {name}", lambda: js.add_stream(config))
        except APIError as exc:
            if exc.err_code != 10058:  # created meanwhile by another actor: compare below
                raise ProvisionError(f"cannot create stream {config.name}: {exc}") from exc
        else:
            return
        info = await _answered(js, f"stream {name}", lambda: js.stream_info(name))
    current = info.config
    if not exact:
        config.num_replicas = max(config.num_replicas or 1, current.num_replicas or 1)
    if _stream_shape(current) == _stream_shape(config):
        return
    try:
        await _answered(js, f"stream {name}", lambda: js.update_stream(config))
    except APIError as exc:
        raise ProvisionError(f"cannot update stream {config.name}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class _Sizes:
    """A bucket's quotas and retention: what it may hold, its largest value, how long a
    value is kept after its last write."""

    max_bytes: int
    max_value_size: int
    ttl_s: float | None


def _bucket_sizes(
    spec: BucketSpec, quotas: Quotas, max_msg_size: int, retention: Retention
) -> _Sizes:
    value = quotas.mark_value_bytes if spec.marks else max_msg_size
    ttl = retention.bucket_ttl(spec.name, spec.ttl_s)
    return _Sizes(quotas.bucket_max_bytes(spec.name), value, ttl)


async def _ensure_bucket(
    js: JetStreamContext,
    name: str,
    spec: BucketSpec,
    sizes: _Sizes,
    replicas: int,
    *,
    exact: bool,
) -> None:
    try:
        await _answered(js, f"bucket {name}", lambda: js.key_value(name))
    except BucketNotFoundError:
        pass
    else:
        await _ensure_existing(js, name, spec, sizes, replicas, exact=exact)
        return
    config = KeyValueConfig(
        bucket=name,
        description=spec.description,
        history=spec.history,
        ttl=sizes.ttl_s,
        max_bytes=sizes.max_bytes,
        max_value_size=sizes.max_value_size,
        storage=StorageType.FILE,
        replicas=replicas,
        direct=spec.direct,
    )
    try:
        await _placed(f"bucket {name}", lambda: js.create_key_value(config))
    except APIError as exc:
        if exc.err_code != 10058:
            raise ProvisionError(f"cannot create bucket {name}: {exc}") from exc
    # nats-py makes every bucket take rollups; the spec says which may.
    await _ensure_existing(js, name, spec, sizes, replicas, exact=exact)


async def _ensure_existing(
    js: JetStreamContext,
    name: str,
    spec: BucketSpec,
    sizes: _Sizes,
    replicas: int,
    *,
    exact: bool,
) -> None:
    """Give a bucket made by an older release what its spec asks for now: a TTL that grew
    (the gate's id claims must outlive its positions), direct gets where it is read key by
    key (the quarantine's marks), its quotas, its retention, per-message TTLs (an ended
    session's), the replicas of its cluster, and rollups refused where the spec says (every
    bucket but the router's sessions)."""
    config = (await _answered(js, f"bucket {name}", lambda: js.stream_info(f"KV_{name}"))).config
    current = config.num_replicas or 1
    replicas = replicas if exact else max(replicas, current)
    if (
        (config.max_age or None) == sizes.ttl_s
        and config.allow_msg_ttl
        and (config.allow_direct or not spec.direct)
        and config.max_bytes == sizes.max_bytes
        and config.max_msg_size == sizes.max_value_size
        and current == replicas
        and bool(config.allow_rollup_hdrs) == spec.rollup
    ):
        return
    config.max_age = sizes.ttl_s
    if sizes.ttl_s and (config.duplicate_window or 0) > sizes.ttl_s:
        config.duplicate_window = sizes.ttl_s  # never longer than a value is kept
    config.allow_msg_ttl = True
    config.allow_direct = bool(config.allow_direct or spec.direct)
    config.max_bytes = sizes.max_bytes
    config.max_msg_size = sizes.max_value_size
    config.num_replicas = replicas
    config.allow_rollup_hdrs = spec.rollup
    try:
        await _answered(js, f"bucket {name}", lambda: js.update_stream(config))
    except APIError as exc:
        raise ProvisionError(f"cannot update bucket {name}: {exc}") from exc


async def _ensure_object_store(
    js: JetStreamContext,
    name: str,
    sizes: tuple[int, int, float],
    replicas: int,
    exact: bool,
) -> None:
    """The artifacts' object store (nats-py's layout: `OBJ_<name>`, chunks and metadata under
    `$O.<name>.`), with the quotas' bytes, refusing new objects when full, no chunk larger
    than a message, and the retention's age (`sizes`: bytes, largest message, age in s)."""
    stream = f"OBJ_{name}"
    max_bytes, max_msg_size, max_age = sizes
    try:
        config = (await _answered(js, stream, lambda: js.stream_info(stream))).config
    except NotFoundError:
        store = ObjectStoreConfig(
            bucket=name,
            description="files the tool runtime stored for sessions (docs/tools.md)",
            max_bytes=max_bytes,
            storage=StorageType.FILE,
            replicas=replicas,
            ttl=max_age,
        )
        try:
            await _placed(f"object store {name}", lambda: js.create_object_store(name, store))
        except APIError as exc:
            if exc.err_code != 10058:
                raise ProvisionError(f"cannot create object store {name}: {exc}") from exc
        config = (await _answered(js, stream, lambda: js.stream_info(stream))).config
    current = config.num_replicas or 1
    replicas = replicas if exact else max(replicas, current)
    wanted = (max_bytes, max_msg_size, replicas, max_age)
    if (config.max_bytes, config.max_msg_size, current, config.max_age) == wanted:
        return
    config.max_bytes, config.max_msg_size, config.num_replicas, config.max_age = wanted
    if max_age and (config.duplicate_window or 0) > max_age:
        config.duplicate_window = max_age  # never longer than an object is kept
    try:
        await _answered(js, stream, lambda: js.update_stream(config))
    except APIError as exc:
        raise ProvisionError(f"cannot update object store {name}: {exc}") from exc


async def provision(
    js: JetStreamContext,
    ns: Namespace,
    *,
    max_msg_size: int = DEFAULT_MAX_BYTES,
    replicas: int | None = None,
    quotas: Quotas | None = None,
    agents: Sequence[str] = (),
    retention: Retention | None = None,
) -> int:
    """Create or update every stream and bucket of namespace `ns`, and each of `agents`' own
    buckets (`AGENT_BUCKETS`) and reminders stream (`agent_timers_config`); return their
    replicas.

    `replicas` None: as many as the cluster `js` is connected to calls for
    (bus/_replicas.py), never fewer than an existing stream has. `quotas` and `retention`
    None: the defaults.
    """
    quotas = Quotas() if quotas is None else quotas
    retention = Retention() if retention is None else retention
    exact = replicas is not None
    if replicas is None:
        replicas = await inferred_replicas(js, ns)
    configs = stream_configs(
        ns, max_msg_size=max_msg_size, replicas=replicas, quotas=quotas, retention=retention
    )
    for config in configs:
        await _ensure_stream(js, config, exact=exact)
    for spec in BUCKETS:
        sizes = _bucket_sizes(spec, quotas, max_msg_size, retention)
        await _ensure_bucket(js, ns.bucket(spec.name), spec, sizes, replicas, exact=exact)
    artifacts = (quotas.bucket_max_bytes(ARTIFACTS), max_msg_size, retention.artifacts_s)
    await _ensure_object_store(js, ns.bucket(ARTIFACTS), artifacts, replicas, exact)
    for agent in agents:
        await _ensure_agent_stores(
            js, ns, agent, max_msg_size, quotas, replicas, exact=exact, retention=retention
        )
    for name in RETIRED_BUCKETS:
        try:
            await js.delete_stream(f"KV_{ns.bucket(name)}")
        except NotFoundError:
            pass
    return replicas


async def _ensure_agent_stores(
    js: JetStreamContext,
    ns: Namespace,
    agent: str,
    max_msg_size: int,
    quotas: Quotas,
    replicas: int,
    *,
    exact: bool,
    retention: Retention,
) -> None:
    for spec in AGENT_BUCKETS:
        sizes = _bucket_sizes(spec, quotas, max_msg_size, retention)
        name = ns.agent_bucket(spec.name, agent)
        await _ensure_bucket(js, name, spec, sizes, replicas, exact=exact)
    timers = agent_timers_config(
        ns, agent, max_msg_size=max_msg_size, replicas=replicas, quotas=quotas, retention=retention
    )
    await _ensure_stream(js, timers, exact=exact)
    await move_earlier_reminders(js, ns, agent)  # an earlier release's, in the shared stream


async def provision_agent(
    js: JetStreamContext, ns: Namespace, agent: str, settings: Settings
) -> None:
    """Create or update `agent`'s own buckets and reminders stream, as an agent that
    provisions does at start
    (an open broker; under least privilege `parley provision` does it for every agent): its
    settings' message size, quotas and retention, the replicas its cluster calls for."""
    replicas = cluster_replicas(js._nc._server_info)
    await _ensure_agent_stores(
        js, ns, agent, settings.max_payload, settings.quotas, replicas,
        exact=False, retention=settings.retention,
    )  # fmt: skip


async def provision_for(js: JetStreamContext, ns: Namespace, settings: Settings) -> int:
    """`provision` as an actor does at start: its settings' message size, quotas and
    retention, the replicas its cluster calls for."""
    return await provision(
        js, ns, max_msg_size=settings.max_payload, quotas=settings.quotas,
        retention=settings.retention,
    )  # fmt: skip
