"""What each of Parley's streams is, as JetStream's config: the shared streams of DESIGN.md
(`STREAMS`) and each agent's own reminders stream, with the quotas' bounds and the
retention's ages (bus/_provision.py creates or updates them).
"""

from __future__ import annotations

from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

from bus._quotas import Quotas
from bus._retention import Retention
from bus._streams import STREAMS, StreamSpec, per_subject
from schemas import DEFAULT_MAX_BYTES, Namespace

__all__ = ("agent_timers_config", "stream_configs")


def stream_configs(
    ns: Namespace,
    *,
    max_msg_size: int = DEFAULT_MAX_BYTES,
    replicas: int = 1,
    quotas: Quotas | None = None,
    retention: Retention | None = None,
) -> list[StreamConfig]:
    """The stream definitions of DESIGN.md (`STREAMS`) for namespace `ns`, with `quotas` and
    `retention` (the defaults when None)."""
    quotas = Quotas() if quotas is None else quotas
    retention = Retention() if retention is None else retention
    return [
        _stream_config(
            spec,
            ns.stream(spec.family),
            [ns.wildcard(family) for family in spec.subject_families or (spec.family,)],
            quotas.stream_max_bytes(spec.family),
            max_msg_size=max_msg_size,
            replicas=replicas,
            quotas=quotas,
            retention=retention,
        )
        for spec in STREAMS
    ]


def agent_timers_config(
    ns: Namespace,
    agent: str,
    *,
    max_msg_size: int = DEFAULT_MAX_BYTES,
    replicas: int = 1,
    quotas: Quotas | None = None,
    retention: Retention | None = None,
) -> StreamConfig:
    """`agent`'s own reminders stream (`Namespace.agent_stream`): `PARLEY_TIMERS`'s shape on
    its one subject, bounded by the quotas' `stream_bytes.agent_timers`."""
    quotas = Quotas() if quotas is None else quotas
    retention = Retention() if retention is None else retention
    (timers,) = (spec for spec in STREAMS if spec.family == "timers")
    return _stream_config(
        timers,
        ns.agent_stream("timers", agent),
        [ns.agent_timers(agent)],
        quotas.stream_max_bytes("agent_timers"),
        max_msg_size=max_msg_size,
        replicas=replicas,
        quotas=quotas,
        retention=retention,
    )


def _stream_config(
    spec: StreamSpec,
    name: str,
    subjects: list[str],
    max_bytes: int,
    *,
    max_msg_size: int,
    replicas: int,
    quotas: Quotas,
    retention: Retention,
) -> StreamConfig:
    age = retention.stream_max_age(spec.family, spec.max_age)
    return StreamConfig(
        name=name,
        description=spec.description,
        subjects=subjects,
        retention=RetentionPolicy.WORK_QUEUE if spec.work_queue else RetentionPolicy.LIMITS,
        discard=DiscardPolicy.NEW if spec.discard_new else DiscardPolicy.OLD,
        max_age=age,
        # JetStream refuses a duplicate window longer than the stream keeps a message.
        duplicate_window=min(spec.duplicate_window, age or spec.duplicate_window),
        max_msg_size=max_msg_size,
        max_bytes=max_bytes,
        max_msgs_per_subject=per_subject(spec, quotas),
        discard_new_per_subject=spec.per_sender == "refuse",
        storage=StorageType.FILE,
        num_replicas=replicas,
        deny_delete=spec.immutable,
        deny_purge=spec.immutable,
        allow_direct=spec.direct,
        allow_batched=spec.batched,
    )
