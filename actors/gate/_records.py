"""What the gate remembers, in the traces KV bucket: positions of envelopes and limit counters.

The gate trusts these records over anything a sender claims. Every envelope it admits gets a
`Position`: which trace it belongs to, who started that trace, and the call chain down to its
recipient, one `Level` per agent currently inside a call. A later envelope names its cause in
`Parley-Causation-Id`; the gate reads the cause's position and derives the new one from it, so
a sender cannot shorten its chain, restart its hop count or change trace by editing headers.

Counters (per trace, per (profile, target) rate bucket, per profile calls in flight, per
parent fan-out, per call the answer that closed it, per person's session the tokens its
traces spent) are updated with compare-and-set on their
KV revision, so two gate replicas never both spend the last unit of a limit.

Keys are built here and nowhere else. Ids chosen by senders may hold characters a KV key may
not, so such an id is replaced by its hash.
"""

from __future__ import annotations

import functools
import hashlib
import re
from typing import Final

from msgspec import Struct

__all__ = (
    "CallAnswer",
    "Children",
    "Inflight",
    "Lease",
    "Level",
    "LiveCall",
    "OpenCall",
    "Position",
    "RateBucket",
    "SessionTokens",
    "TraceState",
    "answer_key",
    "fanout_key",
    "id_key",
    "inflight_key",
    "position_key",
    "rate_key",
    "session_tokens_key",
    "trace_key",
)

_SAFE: Final = re.compile(r"[A-Za-z0-9_-]{1,100}")


@functools.lru_cache(maxsize=4096)
def _token(value: str) -> str:
    """`value` itself if it may be a key token, else its hash. Cached: the gate names each
    envelope's records (its claim, position, trace, children, answer) after one id, and
    keys some of them several times while deciding it."""
    if _SAFE.fullmatch(value):
        return value
    return "h" + hashlib.sha256(value.encode()).hexdigest()[:40]


def position_key(envelope_id: str) -> str:
    return f"pos.{_token(envelope_id)}"


def id_key(envelope_id: str) -> str:
    """The claim of an envelope id, in the idempotency bucket (actors/gate/_ids.py)."""
    return f"id.{_token(envelope_id)}"


def trace_key(trace_id: str) -> str:
    return f"trace.{_token(trace_id)}"


def answer_key(call_id: str) -> str:
    """The record of which answer closed call `call_id` (`CallAnswer`)."""
    return f"answer.{_token(call_id)}"


def rate_key(profile: str, target: str) -> str:
    return f"rate.{_token(profile)}.{_token(target)}"


def inflight_key(profile: str) -> str:
    return f"inflight.{_token(profile)}"


def fanout_key(parent_id: str) -> str:
    return f"fanout.{_token(parent_id)}"


def session_tokens_key(origin: str, session_id: str) -> str:
    """The tokens spent in `origin`'s session `session_id`, by all its traces
    (`SessionTokens`): each message a person sends in a session is a trace of its own."""
    return f"stokens.{_token(origin)}.{_token(session_id)}"


class Level(Struct, frozen=True, kw_only=True):
    """One agent inside a call on the chain, and what that call allowed it."""

    holder: str
    call_id: str = ""
    """The call that put `holder` here ("" at the root level)."""
    tools: tuple[str, ...] | None = None
    """Tools `holder` may use here: its profile's, narrowed along the chain (None: no call
    narrowed them yet)."""
    bound_by: tuple[str, ...] = ()
    """The agents above `holder` on the chain whose capabilities bound its own: a tool it
    uses must be granted to each of them too, within the intersection of their scopes. Empty
    when a trace starter (a person, the router) called it: it works for a person then."""
    nested_ok: bool = True
    """Whether `holder` may make sub-agent calls from here (seed 004 `allow_nested_calls`)."""
    deadline_ms: int | None = None
    """When the call that put `holder` here must be finished (Unix ms)."""
    answer_call_id: str = ""
    """The call id an answer to that call must name in its body: the call's own `call_id`
    (agent_call, sub_agent_call) or `request_id` (delegation_request), copied from the call the
    gate delivered. "" at the root level, and on levels recorded before the gate kept it (their
    answers are not checked against it)."""
    answer_session_id: str = ""
    """The session an answer to that call must name: the call's `session_id` (agent_call) or
    `child_session_id` (delegation_request), "" when it named none."""
    token_budget: int | None = None
    """The tokens the call that put `holder` here may spend (a delegation's `max_tokens`):
    its model calls are refused once their reported usage reached it
    (actors/gate/_llm_checks.py)."""


class Position(Struct, frozen=True, kw_only=True):
    """Where one admitted (or refused-and-answered) envelope sits in its trace.

    `levels[-1].holder` is the recipient; the hop count is `hop_floor + len(levels) - 1`.
    """

    envelope_id: str
    trace_id: str
    origin: str
    sender: str
    target: str
    kind: str
    levels: tuple[Level, ...]
    user_id: str = ""
    session_id: str = ""
    """The session its trace's root was sent in, as the root's sender named it and every
    envelope of the trace inherits it: where the gate tells a person of the calls made on
    their behalf (actors/gate/_timeline.py). Only ever the origin's own timeline, so a root's
    claim can point nowhere but at its own sender's sessions."""
    hop_floor: int = 0
    """Hops the trace had already made before its root reached this gate: another
    deployment's count for a call its relay carried here (actors/gate/_routes.py
    `root_position`). It only ever raises the count, so a chain that crosses deployments is
    held to the hop limit as a whole; everything above it is the gate's own record."""

    @property
    def hop(self) -> int:
        return self.hop_floor + len(self.levels) - 1

    @property
    def chain(self) -> tuple[str, ...]:
        return tuple(level.holder for level in self.levels)


class LiveCall(Struct, frozen=True, kw_only=True):
    """A call of a trace not answered yet (seed 003's in-progress objectives)."""

    objective: str
    expires_ms: int
    """When it stops counting as in progress; it stays open to its one answer for
    `ANSWER_GRACE_MS` more (actors/gate/_decide.py)."""
    measured_tokens: int = 0
    """Tokens the model answers made under this call reported (`llm_response` usage), already
    charged to the trace: the call's own answer is charged only what it reports beyond them."""


class CallAnswer(Struct, frozen=True, kw_only=True):
    """Which answer closed a call, created in the same commit as that answer's charge.

    The gate's own durable record of the answer a call admitted, one small record per
    answered call, so its trace's record never grows with the calls answered in it. A
    redelivery of that answer is recognised by it however JetStream numbers the delivery
    (a server that restarts loses a consumer's delivery counts, so a message decided before
    may come back as a first delivery), and any other answer is refused as a second one:
    the record is created compare-and-set on revision 0, so of two answers racing on two
    replicas only one creates it.
    """

    answer_id: str


class OpenCall(Struct, frozen=True, kw_only=True):
    """A call as gates before flat decisions kept it in `TraceState.open_calls`, open or
    answered (`answered_by`). Still read, so a trace recorded by such a gate goes on where
    it was; never written for a new call (actors/gate/_trace_calls.py)."""

    objective: str
    expires_ms: int
    answered_by: str = ""
    measured_tokens: int = 0
    """Tokens the model answers made under this call reported (`llm_response` usage), already
    charged to the trace: the call's own answer is charged only what it reports beyond them."""

    @property
    def in_progress(self) -> bool:
        return not self.answered_by


class TraceState(Struct, frozen=True, kw_only=True):
    """Per trace: envelopes admitted (the budget), its user, tokens spent, calls awaiting
    their answer.

    Its size follows the calls awaiting an answer, never the trace's length: an answered
    call leaves `live` and its answer is kept in its own `CallAnswer` record. It is read
    and rewritten at every hop of its trace, so a record that grew with the trace would
    make every hop slower (and would pass the server's largest message at about 13,500
    envelopes: 155 bytes an answered call, a call and its answer).
    """

    count: int = 0
    user_id: str = ""
    tokens: int = 0
    live: dict[str, LiveCall] = {}
    open_calls: dict[str, OpenCall] = {}
    """Written by gates before flat decisions: calls open or answered, by id. Read and
    carried over (only answered ones, until they pass their grace) so a trace those gates
    recorded goes on; nothing new is added to it."""


class Lease(Struct, frozen=True, kw_only=True):
    """Tokens of a rate bucket handed to one gate replica to spend on its own until expiry."""

    tokens: float
    expires_ms: int


class RateBucket(Struct, frozen=True, kw_only=True):
    """A token bucket per (profile, target): `tokens` left at `at_ms`, plus the leases.

    A replica may take a lease of tokens (actors/gate/_rate_leases.py) and spend them without a
    round trip each. The bucket refills only up to its capacity minus the tokens leased out
    and not yet expired, so the bucket and every lease together never hold more than the
    capacity: admissions in any window stay within capacity plus refill, exactly as without
    leases.
    """

    tokens: float
    at_ms: int
    leases: dict[str, Lease] = {}

    def live_leases(self, now_ms: int) -> dict[str, Lease]:
        return {who: lease for who, lease in self.leases.items() if lease.expires_ms > now_ms}


class Inflight(Struct, frozen=True, kw_only=True):
    """Per profile: calls awaiting their answer, by call id, with when they stop counting."""

    calls: dict[str, int] = {}
    shared: dict[str, int] = {}
    """The subset that are calls to shared agents (seed 000 `maxConcurrentSharedCalls`)."""


class SessionTokens(Struct, frozen=True, kw_only=True):
    """Per session of a trace's origin: the tokens its traces were charged, together
    (`max_session_tokens` bounds a session, not each message of it)."""

    tokens: int = 0


class Children(Struct, frozen=True, kw_only=True):
    """The calls made because of one parent envelope (its fan-out), by id: a call admitted
    again after a crash is the same child, not one more."""

    ids: tuple[str, ...] = ()
