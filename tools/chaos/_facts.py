"""The facts a chaos history is made of, as tools/chaos/_records.py reads them from the
streams and tools/chaos/_checker.py judges them: each a plain record, with no bus behind it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ("Applied", "DelegationOutcome", "Fault", "Published", "SessionOutcome")


@dataclass(frozen=True, slots=True)
class Published:
    """A message JetStream acknowledged: its envelope id, stream sequence and receiver."""

    envelope_id: str
    stream_seq: int
    receiver: str
    kind: str = ""
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class Applied:
    """A handler's effect of one delivery: which input, at which attempt, giving which effect.

    `purpose` tells apart the legitimately different effects of one input (a session event's
    type, an effect envelope's kind); two effects with one purpose and different ids are a
    duplicate. `attempt` is 0 when the history does not say.
    """

    handler: str
    envelope_id: str
    effect_id: str
    purpose: str
    attempt: int = 0
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class SessionOutcome:
    """One session: whether it ended, and how (`completed`/`failed`), with the stated reason."""

    session_id: str
    ended: str | None = None
    reason: str | None = None
    started_at: float | None = None
    """When the session opened (its first event), Unix seconds."""
    ended_at: float | None = None
    """When its end event was stored, Unix seconds."""
    ends_by: float | None = None
    """The latest its last step promised to end by (deadline plus the sweep's margin)."""

    @property
    def took_s(self) -> float | None:
        """Seconds from opening to end, if it ended."""
        if self.started_at is None or self.ended_at is None:
            return None
        return self.ended_at - self.started_at

    @property
    def late(self) -> bool:
        """Ended after its bound, or not at all although its bound has passed."""
        return self.ends_by is not None and (self.ended_at or float("inf")) > self.ends_by + 5


@dataclass(frozen=True, slots=True)
class DelegationOutcome:
    """One delegation a person made: to whom, whether an answer came back, and by when."""

    request_id: str
    target: str
    asked_at: float
    answer: str | None = None
    """How it was answered: the answer's kind (`delegation_response`, `error`), or `refused`
    when the gate refused the request itself (its error is the answer); None: never."""
    answered_at: float | None = None
    ends_by: float | None = None
    """The latest the answer was due (the request's deadline plus a margin)."""

    @property
    def late(self) -> bool:
        """Answered after its bound."""
        return (
            self.ends_by is not None
            and self.answered_at is not None
            and self.answered_at > self.ends_by
        )


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault the scheduler injected: what, to whom, when (seconds on the run's clock)."""

    action: str
    target: str
    at: float
