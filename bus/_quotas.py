"""Quotas the broker enforces, so that no principal can fill the store (docs/quotas.md).

Everything a principal may write lands in a stream or bucket of the core account, whatever
account the principal logs in to (tools/natsconf/_permissions.py): its submissions, its
reminders, its own dead letters, the bucket keys its grants name. So the bounds are set where
the bytes land, and JetStream itself refuses what passes them:

- every stream and bucket has a `max_bytes` and a largest message (`max_msg_size`, a bucket's
  `max_value_size`);
- every subject a principal may write has a per-subject bound: its submissions and reminders
  (`per_sender`, refused past it: the sender gets the error, nobody else loses a message), its
  bucket keys (one value each, a bucket's history), its dead letters (`dead_letters_per_sender`,
  the sender's oldest dropped past it, never another sender's);
- the core account has JetStream limits of its own (`AccountLimits`, written into the broker
  config), a backstop over all of it.

One store is written by one principal for many: the tool runtime alone writes the artifact
store, for every person's steps. The broker bounds it whole; the runtime, the executing actor,
bounds each person's and each agent's share of it (`artifact_bytes_per_person`,
`artifact_bytes_per_agent`; bus/_shares.py), so one agent's diffs cannot
fill it for everyone.

The defaults are sized for a laptop (a few GiB in all); docs/quotas.md says how to size them
for a deployment. A setting is given in `[quotas]` of a settings file, or as JSON in
`PARLEY_QUOTAS`; `parley provision` applies it to existing streams too.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

__all__ = (
    "AGENT_BUCKET_NAMES",
    "AGENT_STREAM_NAMES",
    "DEFAULT_BUCKET_BYTES",
    "DEFAULT_STREAM_BYTES",
    "MIB",
    "AccountLimits",
    "Quotas",
)

MIB: Final = 1024 * 1024

DEFAULT_STREAM_BYTES: Final = {
    "submit": 256 * MIB,
    "deliver": 256 * MIB,
    "events": 512 * MIB,
    "audit": 1024 * MIB,
    "dead": 256 * MIB,
    "timers": 64 * MIB,
    "agent_timers": 8 * MIB,  # each agent's own reminders (`Namespace.agent_stream`)
}
"""Bytes each stream may hold, by family: a laptop's share of a few GiB; for `agent_timers`,
what each agent's own reminders stream may hold."""

DEFAULT_BUCKET_BYTES: Final = {
    "sessions": 128 * MIB,
    "early_stops": 16 * MIB,
    "traces": 128 * MIB,
    "registry": 16 * MIB,
    "policy": 32 * MIB,
    "idempotency": 128 * MIB,
    "handling": 8 * MIB,
    "waits": 16 * MIB,  # each agent's own (bus/_streams.py AGENT_BUCKETS), not all agents'
    "marks": 1 * MIB,  # each agent's own quarantine marks
    "relay": 64 * MIB,
    "tool_runs": 64 * MIB,
    "llm_runs": 64 * MIB,
    "leases": 1 * MIB,
    "artifacts": 256 * MIB,  # the namespace's object store (bus/_streams.py ARTIFACTS)
}
"""Bytes each bucket may hold, by name; for a bucket each agent has its own of (`waits`,
`marks`), what each agent's may hold."""

AGENT_STREAM_NAMES: Final = ("agent_timers",)
"""The streams every agent has its own of (its reminders): their quota is per agent."""

AGENT_BUCKET_NAMES: Final = ("waits", "marks")
"""The buckets every agent has its own of (bus/_streams.py `AGENT_BUCKETS`): their quota is
per agent."""


class Quotas(BaseModel):
    """The limits `parley provision` puts on every stream and bucket of a namespace."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stream_bytes: dict[str, int] = Field(
        default_factory=lambda: dict(DEFAULT_STREAM_BYTES),
        description="Bytes each stream may hold, by family (`submit`, `dead`, ...); a family "
        "left out keeps its default.",
    )
    bucket_bytes: dict[str, int] = Field(
        default_factory=lambda: dict(DEFAULT_BUCKET_BYTES),
        description="Bytes each bucket may hold, by name (`handling`, `sessions`, ...); "
        "`waits` is what each agent's own waits bucket may hold. A bucket left out keeps its "
        "default.",
    )
    per_sender: int = Field(
        default=10_000,
        ge=1,
        description="Messages one principal may have waiting on its own subject of a work "
        "queue (its submissions, its reminders); past it the broker refuses its next one. "
        "Room for a benchmark's backlog; the stream's bytes bound large messages first.",
    )
    dead_letters_per_sender: int = Field(
        default=32,
        ge=1,
        description="Dead letters kept per sender and filer; past it the sender's oldest is "
        "dropped (counted and logged by the filer), never another sender's.",
    )
    mark_value_bytes: int = Field(
        default=256,
        ge=16,
        description="Largest value of a quarantine mark (a delivery number).",
    )

    artifact_bytes_per_person: int | None = Field(
        default=None,
        ge=1,
        description="Bytes of artifacts the tool runtime keeps for one person at a time (their "
        "sessions' uploads, large outputs and checkpoint diffs, within `retention.artifacts_s`): "
        "past it a step's upload fails and its output or diff is not stored, for that person "
        "only. Unset: an eighth of the store (`bucket_bytes.artifacts`).",
    )
    artifact_bytes_per_agent: int | None = Field(
        default=None,
        ge=1,
        description="Bytes of artifacts the tool runtime keeps for one agent's steps at a time, "
        "whoever they work for: an agent serving many people cannot fill the store for all. "
        "At least a person's share, so one person cannot use up an agent for everyone else "
        "(four persons' full shares can). Unset: half the store, or a person's share if larger.",
    )

    step_record_bytes_per_person: int | None = Field(
        default=None,
        ge=1,
        description="Bytes of step records the tool runtime keeps for one person at a time "
        "(each step's result and held request, in `tool_runs`, for its age limit): past it "
        "that person's new steps are refused `RATE_LIMITED` until their oldest expire. Unset: "
        "an eighth of the bucket (`bucket_bytes.tool_runs`).",
    )
    step_record_bytes_per_agent: int | None = Field(
        default=None,
        ge=1,
        description="Bytes of step records the tool runtime keeps for one agent's steps at a "
        "time, whoever they work for: one agent's stream of large results cannot fill the "
        "bucket every step needs. At least a person's share. Unset: half the bucket, or a "
        "person's share if larger.",
    )

    model_answer_bytes_per_person: int | None = Field(
        default=None,
        ge=1,
        description="Bytes of model answers the LLM gateway keeps for one person at a time (in "
        "`llm_runs`, for its age limit, so a redelivered request is never answered twice): "
        "past it that person's new model calls are refused `RATE_LIMITED` until their oldest "
        "expire. Unset: an eighth of the bucket (`bucket_bytes.llm_runs`).",
    )
    model_answer_bytes_per_agent: int | None = Field(
        default=None,
        ge=1,
        description="Bytes of model answers the LLM gateway keeps for one agent at a time, "
        "whoever it works for. At least a person's share. Unset: half the bucket, or a "
        "person's share if larger.",
    )

    session_bytes_per_person: int | None = Field(
        default=None,
        ge=1,
        description="Bytes of the sessions bucket one person's sessions may hold at a time "
        "(each session's state, open or ended, within `retention.ended_sessions_s`): past it "
        "that person's new sessions are refused `RATE_LIMITED` until their oldest expire; "
        "sessions already open go on. Unset: an eighth of the bucket (`bucket_bytes.sessions`).",
    )

    def session_share(self) -> int:
        """What one person's sessions may hold: the setting, else an eighth of the bucket."""
        given = self.session_bytes_per_person
        return given if given is not None else self.bucket_max_bytes("sessions") // 8

    def artifact_share(self, kind: Literal["person", "agent"]) -> int:
        """What one person's or one agent's artifacts may hold: the setting, else the
        default share of the store."""
        return self._share("artifacts", "artifact_bytes", kind)

    def step_record_share(self, kind: Literal["person", "agent"]) -> int:
        """What one person's or one agent's step records may hold: the setting, else the
        default share of the `tool_runs` bucket."""
        return self._share("tool_runs", "step_record_bytes", kind)

    def model_answer_share(self, kind: Literal["person", "agent"]) -> int:
        """What one person's or one agent's model answers may hold: the setting, else the
        default share of the `llm_runs` bucket."""
        return self._share("llm_runs", "model_answer_bytes", kind)

    def _share(self, bucket: str, setting: str, kind: Literal["person", "agent"]) -> int:
        store = self.bucket_max_bytes(bucket)
        person: int | None = getattr(self, f"{setting}_per_person")
        if person is None:
            person = store // 8
        if kind == "person":
            return person
        agent: int | None = getattr(self, f"{setting}_per_agent")
        return agent if agent is not None else max(store // 2, person)

    @model_validator(mode="after")
    def _shares_fit_the_store(self) -> Quotas:
        """A share larger than the store it is a share of bounds nothing; an agent's share
        below a person's lets one person use the agent up for everyone else."""
        for bucket, setting, store_name in (
            ("artifacts", "artifact_bytes", "the artifact store"),
            ("tool_runs", "step_record_bytes", "the tool_runs bucket"),
            ("llm_runs", "model_answer_bytes", "the llm_runs bucket"),
        ):
            store = self.bucket_max_bytes(bucket)
            for name in (f"{setting}_per_person", f"{setting}_per_agent"):
                given = getattr(self, name)
                if given is not None and given > store:
                    raise ValueError(
                        f"{name} ({given}) is larger than {store_name} itself "
                        f"(bucket_bytes.{bucket}, {store})"
                    )
            agent = self._share(bucket, setting, "agent")
            person = self._share(bucket, setting, "person")
            if agent < person:
                raise ValueError(
                    f"{setting}_per_agent ({agent}) is below a person's share ({person}): one "
                    "person could fill an agent's share and stop it storing for everyone else"
                )
        return self

    @model_validator(mode="after")
    def _session_share_fits_the_bucket(self) -> Quotas:
        sessions = self.bucket_max_bytes("sessions")
        given = self.session_bytes_per_person
        if given is not None and given > sessions:
            raise ValueError(
                f"session_bytes_per_person ({given}) is larger than the sessions bucket "
                f"itself (bucket_bytes.sessions, {sessions})"
            )
        return self

    @field_validator("stream_bytes", "bucket_bytes")
    @classmethod
    def _with_defaults(cls, value: dict[str, int], info: ValidationInfo) -> dict[str, int]:
        """A partial table overrides only what it names, which must be a stream's (or a
        bucket's) name: a misspelled one was merged in and ignored, leaving the limit it meant
        at its default; every limit is at least 1 MiB."""
        streams = info.field_name == "stream_bytes"
        defaults = DEFAULT_STREAM_BYTES if streams else DEFAULT_BUCKET_BYTES
        unknown = sorted(set(value) - set(defaults))
        if unknown:
            raise ValueError(
                f"no {'stream' if streams else 'bucket'} is named {', '.join(unknown)} "
                f"(known: {', '.join(defaults)})"
            )
        small = sorted(name for name, size in value.items() if size < MIB)
        if small:
            raise ValueError(f"at least 1 MiB each (too small: {', '.join(small)})")
        return {**defaults, **value}

    def stream_max_bytes(self, family: str) -> int:
        return self.stream_bytes.get(family, DEFAULT_STREAM_BYTES.get(family, 64 * MIB))

    def bucket_max_bytes(self, name: str) -> int:
        return self.bucket_bytes.get(name, DEFAULT_BUCKET_BYTES.get(name, 64 * MIB))

    def total_bytes(self, agents: int) -> int:
        """What every stream and bucket may hold together, at one replica, with `agents`
        agents (each with its own buckets of `AGENT_BUCKET_NAMES` and streams of
        `AGENT_STREAM_NAMES`)."""
        shared = sum(v for k, v in self.bucket_bytes.items() if k not in AGENT_BUCKET_NAMES)
        shared += sum(v for k, v in self.stream_bytes.items() if k not in AGENT_STREAM_NAMES)
        own = sum(self.bucket_max_bytes(name) for name in AGENT_BUCKET_NAMES)
        own += sum(self.stream_max_bytes(name) for name in AGENT_STREAM_NAMES)
        return shared + agents * own


class AccountLimits(BaseModel):
    """The core account's JetStream limits in the broker config (`parley nats-config`): a
    backstop over every stream, bucket and consumer, whoever writes them.

    A stream's `max_bytes` is reserved against `max_file` times its replicas, so the default
    covers every default quota at three replicas (a local cluster) with room to spare.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_file: int = Field(default=16 * 1024 * MIB, ge=MIB, description="File store bytes.")
    max_memory: int = Field(
        default=256 * MIB, ge=0, description="Memory store bytes (Parley stores on file)."
    )
    max_streams: int = Field(default=192, ge=1, description="Streams and buckets.")
    max_consumers: int = Field(
        default=4096, ge=1, description="Consumers: durables, watches and followers."
    )

    def to_config(self) -> dict[str, object]:
        """The account's `jetstream` block: every stream must say its `max_bytes`."""
        return {
            "max_file": self.max_file,
            "max_memory": self.max_memory,
            "max_streams": self.max_streams,
            "max_consumers": self.max_consumers,
            "max_bytes_required": True,
        }
