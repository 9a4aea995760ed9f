"""How long Parley keeps what it stores (docs/settings.md, "Retention").

Five kinds of record grow with the work, each one per session, trace, call or step, so each has a
retention an operator sets in `[retention]` of a settings file (or as JSON in
`PARLEY_RETENTION`); `parley provision`, and every actor that provisions, applies it:

- **ended sessions** (`sessions` bucket): a session's last write, once it has ended, carries a
  per-message TTL (`Nats-TTL`, nats-server 2.11 and later, on buckets that allow it) and rolls
  up the key's older revisions, so the whole key vanishes that long after the session ended.
  A session still open is written without a TTL and is never expired: a session waiting days
  for a person keeps its state.
- **traces** (the gate's per-trace records in `traces`): the bucket's age limit, counted from
  each record's last write. A trace's counters are rewritten at every envelope it admits, so
  a trace in use keeps them; a position is written once, and its age bounds how long after it
  an answer to that call can still come (far longer than any call's deadline by default). The
  gate's id claims (`idempotency`) are kept a day longer, so no position outlives the claim of
  its id.
- **waits** (each agent's `waits` bucket): the age limit of a wait for a called agent.
- **artifacts** (the tool runtime's object store): the stream's age limit, counted from when
  an artifact was stored (an upload, a large output, a checkpoint's diff). Each person's and
  agent's share of the store (bus/_quotas.py) counts what they stored within it, so bytes
  they stored come back to their share once expired. The runtime's `tool_runs` bucket, which
  keeps those counts, is kept at least a day longer.
- **audit** (the audit stream): 0 keeps the history for ever; a positive age lets JetStream
  drop the oldest records past it, and `parley audit verify` then starts from the first record
  kept, which the signed checkpoints after it still pin (actors/auditor/_chain.py).
"""

from __future__ import annotations

from typing import Final

from pydantic import BaseModel, ConfigDict, Field

__all__ = ("CLAIM_MARGIN_S", "DAY_S", "Retention")

DAY_S: Final = 24 * 3600.0

CLAIM_MARGIN_S: Final = DAY_S
"""How much longer than a trace's records the gate's id claims are kept: a position never
outlives the claim of its id, so an id is never decided twice while its position could
still be read."""


class Retention(BaseModel):
    """Seconds each kind of record is kept (`[retention]`); see the module docstring."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ended_sessions_s: float = Field(
        default=30 * DAY_S,
        ge=1,
        description="How long an ended session's state (and the link from its trace) is kept "
        "after it ended; a session still open is never expired. Whole seconds (the broker's "
        "per-message TTL).",
    )
    traces_s: float = Field(
        default=7 * DAY_S,
        ge=1,
        description="How long the gate keeps a trace's record after its last write (counters "
        "are rewritten at every admitted envelope, positions once); id claims are kept a day "
        "longer.",
    )
    waits_s: float = Field(
        default=2 * DAY_S,
        ge=1,
        description="How long an agent host keeps a wait for an agent it called, after its "
        "last write.",
    )
    artifacts_s: float = Field(
        default=7 * DAY_S,
        ge=1,
        description="How long the tool runtime's artifact store keeps an artifact (an upload, "
        "a large output, a checkpoint's diff) after it was stored; past it the object is gone "
        "and its bytes no longer count against the share of the person and agent it was "
        "stored for.",
    )
    audit_s: float = Field(
        default=0.0,
        ge=0,
        description="How long the audit history keeps a record; 0 keeps it for ever. Past it "
        "JetStream drops the oldest records and `parley audit verify` verifies from the first "
        "one kept.",
    )

    @property
    def ended_session_ttl_s(self) -> int:
        """The per-message TTL of an ended session's last write, in the whole seconds the
        broker's `Nats-TTL` header takes."""
        return max(1, round(self.ended_sessions_s))

    def bucket_ttl(self, name: str, default: float | None) -> float | None:
        """The age limit of bucket `name` (by its spec's name): the setting for the buckets
        retention governs, else the spec's own `default`."""
        match name:
            case "traces":
                return self.traces_s
            case "idempotency":
                return self.traces_s + CLAIM_MARGIN_S
            case "waits":
                return self.waits_s
            case "tool_runs":  # it keeps each share's counts of the artifacts still stored
                return max(default or 0.0, self.artifacts_s + DAY_S)
        return default

    def stream_max_age(self, family: str, default: float) -> float:
        """The age limit of stream `family`: the audit history's setting, else `default`."""
        return self.audit_s if family == "audit" else default
