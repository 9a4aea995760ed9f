"""An orchestrated session (seed 000) as stored data: no bus inside.

A person's local agent drafts each outbound message, the draft goes to a shared agent, and
the shared agent's answer comes back to the local agent as context, under the person's
control. The session is one JSON document in the sessions bucket (`orch.<id>`, beside seed
001's `session.<id>`), so it survives a router's SIGKILL exactly like a collaboration: the
transitions that change it are pure (actors/orchestrator/_advance.py) and deterministic, and
the session remembers the effects of its last few inputs (`applied`) so an input handled again
after its transition was stored gets the same effects back instead of advancing twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final, Literal

from msgspec import Struct

from schemas import AgentCall, Error, SessionEvent

__all__ = (
    "APPLIED_KEPT",
    "ENDED",
    "Applied",
    "Approval",
    "Effect",
    "Mode",
    "OrchestratedSession",
    "PendingCall",
    "Reminder",
    "Role",
    "SentBy",
    "State",
    "Step",
    "Turn",
)

State = Literal[
    "idle",
    "planning",
    "waiting_local",
    "ready_to_send",
    "waiting_remote",
    "processing_remote",
    "completed",
    "paused",
    "error",
    "stopped",
]
"""Seed 000's state machine. `idle` and `planning` are passed through while a session opens
and a turn's prompt is built; `processing_remote` while an answer is taken in. A session
rests in `waiting_local`, `ready_to_send` (a draft waits for its owner), `waiting_remote` or
`paused`, and ends in `completed`, `error` or `stopped`."""

ENDED: Final[frozenset[str]] = frozenset({"completed", "error", "stopped"})

Mode = Literal["manual", "semi_auto", "full_auto"]
Role = Literal["local_agent", "remote_agent", "user"]
SentBy = Literal["auto", "approved", "edited", "you"]
"""How an outbound message left: sent unreviewed, approved as drafted, approved after the
owner edited it, or typed by the owner (take over)."""

APPLIED_KEPT: Final = 8


class Turn(Struct, frozen=True, kw_only=True):
    """One message of the conversation between the local and the shared agent."""

    role: Role
    name: str
    text: str
    turn_index: int
    sent_by: SentBy | None = None
    """Outbound messages only: who let it go."""


class PendingCall(Struct, frozen=True, kw_only=True):
    """The one call in flight (seed 000: a single in-flight turn per session)."""

    call_id: str
    envelope_id: str
    target: str
    phase: Literal["local", "remote"]
    attempts: int = 1
    sent_at: datetime | None = None
    deadline: datetime | None = None


class Approval(Struct, frozen=True, kw_only=True):
    """A draft put to the session's owner, and what they decided (who, when, what)."""

    approval_id: str
    turn_index: int
    draft: str
    requested_at: datetime
    reasons: tuple[str, ...] = ()
    decision: Literal["approved", "edited", "rejected", "taken_over"] | None = None
    resolved_by: str = ""
    resolved_at: datetime | None = None
    text: str = ""
    """What was sent (the draft, or the owner's edit or own message); a rejection's reason."""


class Reminder(Struct, frozen=True, kw_only=True, tag_field="kind", tag="orch_reminder"):
    """An input the router sends itself on its reminder queue: `maxDurationMs` is up at
    `error.details["deadline"]` (it is deferred until then, and ends the session if it is
    still running)."""

    error: Error


Effect = AgentCall | Error | SessionEvent | Reminder


class Applied(Struct, frozen=True, kw_only=True):
    input_id: str
    effects: tuple[Effect, ...]


class OrchestratedSession(Struct, frozen=True, kw_only=True):
    """Seed 000's session overlay, plus what durability needs."""

    session_id: str
    origin_id: str
    opener: str
    """The principal that opened it (the gate's sender): only it, or an operator, steers."""
    charged_bytes: int = 0
    """Bytes of the sessions bucket charged to the opener's share for this session so far
    (actors/router/_session_charges.py)."""
    charged_at_ms: int = 0
    """When it was last charged (Unix ms): a session that ends long after is charged anew,
    whole, for the retention its end starts."""
    ended_at_ms: int = 0
    """When it ended (Unix ms), set by the write that ended it: it expires
    `retention.ended_sessions_s` after that, however often it is written again."""
    user_id: str = ""
    thread: str = "default"
    objective: str
    local_agent: str
    shared_agent: str
    shared_device_id: str = ""
    """The device the shared agent lives on, when a relay hosts it here (its registry
    profile says so): seed 000's target `sharedDeviceId` in the audit fields."""
    mode: Mode = "manual"
    max_turns: int = 8
    max_duration_ms: int = 600_000
    max_failures: int = 3
    max_tokens_budget: int | None = None
    state: State = "idle"
    resume_to: State | None = None
    """The state a paused session returns to."""
    turn_index: int = 1
    drafts: int = 0
    """Drafts asked of the local agent so far (a rejected draft is asked for again)."""
    turns: tuple[Turn, ...] = ()
    draft: str = ""
    draft_tools: tuple[str, ...] = ()
    """The tools the local agent's brain called while writing `draft` (its answer's
    `tools_used`): `semi_auto`'s `review_tool_use` rule holds such a draft."""
    feedback: str = ""
    """Why the owner rejected the last draft: told to the local agent with the next request."""
    approvals: tuple[Approval, ...] = ()
    pending: PendingCall | None = None
    failures: int = 0
    """Consecutive failed calls (`maxFailures`); any answer resets it."""
    tokens_used: int = 0
    stop_reason: str | None = None
    reason: str = ""
    """Why it ended, in words a person reads."""
    applied: tuple[Applied, ...] = ()
    created_at: datetime
    deadline: datetime

    @property
    def open(self) -> bool:
        return self.state not in ENDED

    @property
    def waiting_approval(self) -> Approval | None:
        last = self.approvals[-1] if self.approvals else None
        return last if last is not None and last.decision is None else None

    def effects_of(self, input_id: str) -> tuple[Effect, ...] | None:
        for applied in self.applied:
            if applied.input_id == input_id:
                return applied.effects
        return None

    def recording(self, input_id: str, effects: tuple[Effect, ...]) -> tuple[Applied, ...]:
        kept = (*self.applied, Applied(input_id=input_id, effects=effects))
        return kept[-APPLIED_KEPT:]


class Step(Struct, frozen=True, kw_only=True):
    """What a transition returns: the state to store (None: nothing), the effects to publish,
    whether the state changed, and why an input was ignored (for the log)."""

    session: OrchestratedSession | None
    effects: tuple[Effect, ...] = ()
    changed: bool = False
    note: str = ""
