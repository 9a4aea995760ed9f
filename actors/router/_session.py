"""A collaboration session as a pure state machine (seed 001 §2 and §6): no bus inside.

Each transition takes the session and one input (the human message that opens it, an agent's
turn, an error, a Stop) and returns the next session and the effects to publish: agent calls
and errors for the gate, session events for the timeline. The router actor around it only
loads, stores (compare-and-set) and publishes.

Two properties make a crashed router's restart exact:

- Transitions are deterministic. Every id comes from `derive_id(input id, purpose)`, which is
  what `Context.derive_id` computes, and nothing depends on the clock but `created_at`. A
  transition re-run after a crash produces the same effects, and JetStream drops the copies.
- A session remembers the effects of its last few inputs (`applied`). An input handled again
  after its transition was stored (the router died before acking it) gets the same effects
  back instead of advancing the session twice.

Late and duplicate answers never advance a session: only the first answer to the call it is
waiting for, from the agent it called, counts. "The call it is waiting for" is the gate's word,
not the answer's: the gate checked that an answer's `Parley-Causation-Id` names an envelope it
delivered to the answer's sender, so a cause equal to the pending call's envelope id proves the
answer came back from that call, whatever session or call ids the envelope itself names.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final, Literal

from msgspec import Struct
from pydantic import BaseModel, ConfigDict, Field

from actors.orchestrator import OrchestrationOptions
from schemas import (
    DEFAULT_WINDOW_CHARS,
    DEFAULT_WINDOW_ITEMS,
    AgentCall,
    AgentResponse,
    Control,
    Error,
    SessionEvent,
    TranscriptItem,
    derive_id,
)

__all__ = (
    "APPLIED_KEPT",
    "CANCEL_NOTICE",
    "SINGLE_CANCEL_NOTICE",
    "Applied",
    "Effect",
    "EventClock",
    "EventName",
    "Limits",
    "PendingCall",
    "Session",
    "SessionInput",
    "Status",
    "Step",
    "StopReason",
)

CANCEL_NOTICE: Final = "Collaboration canceled by user."
"""Seed 001's words for a collaboration stopped by its person."""
SINGLE_CANCEL_NOTICE: Final = "Canceled by user."
"""The same for a single call (`parley say`, `parley task`), which is no collaboration."""
"""What the router posts when a person presses Stop (seed 001 §7)."""

APPLIED_KEPT: Final = 8
"""Inputs whose effects a session remembers. A session advances only when its pending call is
answered, so a redelivery older than this many transitions is an answer already superseded."""

Status = Literal["running", "completed", "failed", "canceled"]
StopReason = Literal[
    "final",
    "no_handoff",
    "cap_reached",
    "malformed",
    "unknown_peer",
    "canceled",
    "error",
    "answered",
    "stalled",
]
Effect = AgentCall | Error | SessionEvent
"""Agent calls are submitted to the gate; session events and refusals (errors answering the
person) go to the session's timeline."""
SessionInput = AgentResponse | Error | Control
EventName = Literal[
    "session_created",
    "session_started",
    "session_paused",
    "session_resumed",
    "step_started",
    "step_completed",
    "session_completed",
    "session_failed",
    "session_canceled",
]
"""The seed 002 event names a collaboration session uses."""


class Limits(BaseModel):
    """The router's own knobs (its `[options]`): defaults for what a message leaves out.

    A pydantic model, like every actor's options: an unknown or invalid option fails the
    router's start with the option named (bus `validated_options`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    default_participants: tuple[str, ...] = ("gpt", "claude")
    window_items: int = Field(default=DEFAULT_WINDOW_ITEMS, ge=0)
    window_chars: int = Field(default=DEFAULT_WINDOW_CHARS, ge=1)
    agent_retries: int = Field(default=1, ge=0)
    """Calls re-sent after a retryable error before the session fails with `error`."""
    turn_timeout_s: float = Field(default=60.0, gt=0)
    """Seed 000's request timeout: a call unanswered this long fails the session. Its
    deadline is fixed when the call is made (`PendingCall.deadline`); only time in which the
    router's bus could not hear extends it, never the router's own restart."""
    stall_margin_s: float = Field(default=45.0, ge=0)
    """How long past its deadline a session may stay unmoved before the sweep ends it as
    `stalled` (whatever kept it: a lost reminder, a bug). Longer than the ack wait, so a
    reminder redelivered after a router died holding it gets there first."""
    sweep_every_s: float = Field(default=10.0, gt=0)
    """How often each router replica looks for stalled sessions."""
    missed_beats: int = Field(default=3, ge=1)
    """Heartbeat periods of silence after which a called agent counts as not running."""
    start_grace_s: float = Field(default=15.0, gt=0)
    """How long a called agent that never wrote a heartbeat has to start and answer."""
    orchestration: OrchestrationOptions = OrchestrationOptions()
    """Orchestrated sessions' knobs (seed 000's constraints, `semi_auto`'s review rules)."""
    gate_id: str = "gate"
    """The gate's actor id: an error it delivers (its refusal of one of the router's calls)
    may fail or retry the call, as the callee's own error may; nobody else's can."""


class PendingCall(Struct, frozen=True, kw_only=True):
    """The agent call a running session is waiting on."""

    call_id: str
    envelope_id: str
    speaker: str
    attempts: int = 1
    deadline: datetime | None = None
    """When the call is given up on (made + `turn_timeout_s`), fixed when it is made so a
    router's restart cannot move it. None in calls stored before deadlines were."""


class Applied(Struct, frozen=True, kw_only=True):
    """One handled input and the effects its transition produced."""

    input_id: str
    effects: tuple[Effect, ...]


class Session(Struct, frozen=True, kw_only=True):
    """Seed 001 §2's session state, plus what durability needs. Stored as JSON in KV."""

    session_id: str
    origin_id: str
    """The human message that opened the session: a second message claiming the same session
    id is refused, the same message redelivered is recognised."""
    mode: Literal["single", "collaborate"]
    participants: tuple[str, ...]
    goal: str
    user_id: str = ""
    opener: str = ""
    """The principal that opened the session (the gate's `Parley-Sender`, from its subject):
    only it, or an operator, may steer the session. Empty in sessions stored before it was
    recorded: those only an operator may steer."""
    charged_bytes: int = 0
    """Bytes of the sessions bucket charged to the opener's share for this session so far
    (actors/router/_session_charges.py)."""
    charged_at_ms: int = 0
    """When it was last charged (Unix ms): a session that ends long after is charged anew,
    whole, for the retention its end starts."""
    ended_at_ms: int = 0
    """When it ended (Unix ms), set by the write that ended it: it expires
    `retention.ended_sessions_s` after that, however often it is written again."""
    thread: str = "default"
    first_speaker: str
    round: int = 1
    max_rounds: int = 6
    transcript: tuple[TranscriptItem, ...] = ()
    status: Status = "running"
    stop_reason: StopReason | None = None
    warning: str | None = None
    pending: PendingCall | None = None
    paused: bool = False
    """The owner paused it: no call is made until they resume (actors/router/_steering.py)."""
    held: str | None = None
    """The speaker whose call a pause holds back (the handoff came in while paused)."""
    applied: tuple[Applied, ...] = ()
    created_at: datetime | None = None

    @property
    def open(self) -> bool:
        return self.status == "running"

    def effects_of(self, input_id: str) -> tuple[Effect, ...] | None:
        """The effects already produced for `input_id`, or None if it was never applied."""
        for applied in self.applied:
            if applied.input_id == input_id:
                return applied.effects
        return None

    def recording(self, input_id: str, effects: tuple[Effect, ...]) -> tuple[Applied, ...]:
        """`applied` with this input's effects added and the oldest beyond the limit dropped."""
        kept = (*self.applied, Applied(input_id=input_id, effects=effects))
        return kept[-APPLIED_KEPT:]


class Step(Struct, frozen=True, kw_only=True):
    """What a transition returns.

    `session` is the state to store (None: nothing to store), `effects` what to publish, and
    `changed` whether the session must be written (False for a replay or an ignored input).
    `note` says why an input was ignored, for the log.
    """

    session: Session | None
    effects: tuple[Effect, ...] = ()
    changed: bool = False
    note: str = ""


class EventClock:
    """Hands out the deterministic ids and the timestamp of one transition's effects.

    Ids are `derive_id(input id, purpose)`, the same as the handler's `ctx.derive_id(purpose)`,
    and events are numbered in the order the transition emits them.
    """

    def __init__(self, session_id: str, input_id: str, now: datetime) -> None:
        self.session_id = session_id
        self.input_id = input_id
        self.now = now
        self._count = 0

    def id(self, purpose: str) -> str:
        return derive_id(self.input_id, purpose)

    def event(
        self,
        event_type: EventName,
        *,
        round_: int | None = None,
        speaker: str | None = None,
        stop_reason: str | None = None,
        envelope_ids: tuple[str, ...] = (),
        payload: dict[str, object] | None = None,
    ) -> SessionEvent:
        event_id = self.id(f"event-{self._count}")
        self._count += 1
        return SessionEvent(
            id=event_id,
            created_at=self.now,
            session_id=self.session_id,
            event_type=event_type,
            round=round_,
            speaker=speaker,
            stop_reason=stop_reason,
            envelope_ids=envelope_ids,
            payload=dict(payload or {}),
        )
