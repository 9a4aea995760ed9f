"""The deterministic ids, timestamps and timeline events of one transition.

Ids are `derive_id(input id, purpose)`, what the router's `ctx.derive_id` computes, so a
transition re-run after a crash produces the same envelopes and JetStream drops the copies.
Every event carries the state the session is in after it (`payload["state"]`), so a person
following the timeline sees the state machine move, and seed 000's audit fields under the
names the auditor records (actors/auditor): `requester` (the session's owner), `target` (the
agent the event is about), `target_device_id` (the shared agent's device, or its name when no
relay hosts it here), `mode` (the orchestration
mode), `task` and `duration_ms` where they apply; `round` is the turn index.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from actors.orchestrator._state import OrchestratedSession
from schemas import Error, ErrorCode, SessionEvent, derive_id

__all__ = ("EventName", "TransitionClock")

EventName = Literal[
    "session_created",
    "session_started",
    "session_paused",
    "session_resumed",
    "step_started",
    "step_completed",
    "approval_requested",
    "approval_resolved",
    "session_completed",
    "session_failed",
    "session_canceled",
]


class TransitionClock:
    """Hands out one transition's ids (from its input's id), its time and its events."""

    def __init__(self, session_id: str, input_id: str, now: datetime) -> None:
        self.session_id = session_id
        self.input_id = input_id
        self.now = now
        self._count = 0

    def id(self, purpose: str) -> str:
        return derive_id(self.input_id, purpose)

    def event(
        self,
        session: OrchestratedSession,
        event_type: EventName,
        *,
        speaker: str | None = None,
        stop_reason: str | None = None,
        envelope_ids: tuple[str, ...] = (),
        **payload: Any,
    ) -> SessionEvent:
        event_id = self.id(f"event-{self._count}")
        self._count += 1
        return SessionEvent(
            id=event_id,
            created_at=self.now,
            session_id=self.session_id,
            event_type=event_type,
            round=session.turn_index,
            speaker=speaker,
            stop_reason=stop_reason,
            envelope_ids=envelope_ids,
            payload={
                "orchestrated": True,
                "state": session.state,
                "requester": session.opener,
                "target": speaker or session.shared_agent,
                "target_device_id": session.shared_device_id or session.shared_agent,
                "mode": session.mode,
                **payload,
            },
        )

    def refusal(self, code: ErrorCode, message: str, cause_id: str, target: str) -> Error:
        """An error answering the person whose input was refused (on their timeline)."""
        return Error(
            id=self.id("error"),
            created_at=self.now,
            code=code,
            message=message,
            cause_id=cause_id,
            details={"session_id": self.session_id, "target": target},
        )
