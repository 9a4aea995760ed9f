"""Parley's streams and KV buckets, as one table each: what `provision` creates.

The six streams of DESIGN.md differ only in the fields of `StreamSpec`; the buckets in those
of `BucketSpec`. Sizes are not here: they are quotas (bus/_quotas.py), settings an operator
sizes for a deployment.
"""

from __future__ import annotations

from dataclasses import dataclass

from bus._quotas import Quotas

__all__ = (
    "AGENT_BUCKETS",
    "ARTIFACTS",
    "BUCKETS",
    "RETIRED_BUCKETS",
    "STREAMS",
    "STREAM_FAMILIES",
    "BucketSpec",
    "StreamSpec",
    "per_subject",
)

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
    marks: bool = False
    """Holds only quarantine marks, whose values are a delivery number: the value size is
    the quotas' `mark_value_bytes`, not a message's."""
    rollup: bool = False
    """Takes `Nats-Rollup` headers (a purge of a key's history, or of the whole bucket). Only
    where Parley's own writer replaces a key's history (the router's ended sessions): a
    principal allowed to put one key of a bucket that takes them could send `Nats-Rollup: all`
    with it and wipe every other key (every agent's profile and heartbeat in `registry`)."""


BUCKETS = (
    BucketSpec(
        "sessions", 5, None, "router session state, written with compare-and-set", rollup=True
    ),
    # Apart from the sessions, and forgotten after a day: a person's Stops naming sessions
    # that never open cannot fill the bucket every session is stored in.
    BucketSpec(
        "early_stops",
        1,
        _DAY,
        "Stops kept for sessions not open yet (actors/router/_early_stops.py)",
    ),
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
    # Apart from the gate's id claims: a principal filling its marks cannot stop admissions.
    BucketSpec(
        "handling",
        1,
        8 * _DAY,
        "quarantine marks of the actors that are not agents, each under its own name",
        direct=True,
        marks=True,
    ),
    # Longer than the relay's oldest acceptable frame (7 days), so no frame outlives the
    # replay window that would refuse it again.
    BucketSpec(
        "relay",
        1,
        30 * _DAY,
        "the relay's sequence counters, forwarded calls and replay windows",
    ),
    # Each step's run: a mark when it starts, its result when it ends. A step whose mark has
    # no result was cut short by a crash, and an effect is never run a second time.
    BucketSpec(
        "tool_runs",
        1,
        8 * _DAY,
        "the tool runtime's steps: started marks and results, each step run at most once",
        direct=True,
    ),
    # Each model call's answer, stored before it is published: a redelivered request is
    # answered from it, never twice, and a provider is called again only when none is stored.
    BucketSpec(
        "llm_runs",
        1,
        8 * _DAY,
        "the LLM gateway's answers, one per request id",
        direct=True,
    ),
    BucketSpec(
        "leases",
        1,
        None,
        "single writers' leases (the auditor's), taken and renewed with compare-and-set",
        direct=True,
    ),
)


ARTIFACTS = "artifacts"
"""The namespace's NATS Object Store bucket (`OBJ_<root>_artifacts`): files the tool runtime
stores for sessions (uploads, outputs too large for a message, checkpoint diffs). One per
namespace, which serves one tenant (its policy bucket holds that tenant's bundle), so it is the
tenant's; bounded by the quotas' `bucket_bytes.artifacts`, refusing new objects when full."""


AGENT_BUCKETS = (
    BucketSpec(
        "waits",
        1,
        2 * _DAY,
        "an agent host's waits for the agents it called: requests, results, final answers",
        direct=True,
    ),
    # An agent's quarantine marks: in the shared `handling` bucket, one agent filling its
    # marks would have stopped every actor's marks, the gate's and the router's included.
    BucketSpec(
        "marks",
        1,
        8 * _DAY,
        "an agent's quarantine marks of redelivered inputs in hand (bus/_quarantine.py)",
        direct=True,
        marks=True,
    ),
)
"""Buckets every agent has one of, its own (`Namespace.agent_bucket`), each with its own
`max_bytes`: JetStream bounds a bucket's bytes, not how many keys one principal writes under
its prefix, so a bucket shared by the agents would be theirs to fill for each other. The
provisioner creates them for the agents it is given (tools/provision.py)."""

RETIRED_BUCKETS = ("waits",)
"""Buckets an earlier release made that nothing reads now (the agents' shared waits, before
each agent had its own): `provision` deletes them, which frees their reservations."""


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
    per_sender: str | None = None
    """The bound on each subject, one per principal: `refuse` the sender's next message past
    the quotas' `per_sender` (a work queue it fills), `drop_oldest` past
    `dead_letters_per_sender` (dead letters, the sender's own oldest); None: unbounded
    (subjects only trusted actors write)."""


STREAMS = (
    StreamSpec(
        family="submit",
        description="Everything actors submit; the gate's work queue.",
        work_queue=True,
        max_age=7 * _DAY,
        per_sender="refuse",
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
        description="Gate decisions, session timelines and how each session stands.",
        work_queue=False,
        max_age=30 * _DAY,
        discard_new=False,
        direct=True,
        batched=True,
        subject_families=("decisions", "events", "standing"),
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
        per_sender="drop_oldest",
    ),
    StreamSpec(
        family="timers",
        description="Reminders actors set for themselves, redelivered until they are settled.",
        work_queue=True,
        max_age=7 * _DAY,
        per_sender="refuse",
    ),
)

STREAM_FAMILIES = tuple(spec.family for spec in STREAMS)


def per_subject(spec: StreamSpec, quotas: Quotas) -> int:
    if spec.per_sender == "refuse":
        return quotas.per_sender
    if spec.per_sender == "drop_oldest":
        return quotas.dead_letters_per_sender
    return -1
