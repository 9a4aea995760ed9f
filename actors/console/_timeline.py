"""A person's sessions as the console shows them: each session's events, in order, and what
they add up to (goal, mode, participants, round, state; for an orchestrated session also its
state machine's phase, its orchestration settings and the drafts awaiting the owner).

Pure: fed with the session events the router published and the gate's decisions on what the
person sent. The JSON shapes are seed 002's: a `SessionEvent` notification's params
(`eventId`, `sessionId`, `taskId`, `eventType`, `timestamp`, `payload`) and camelCase fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from actors.console._task import TaskView
from schemas import Decision, SessionEvent, derive_id

__all__ = ("SessionRecord", "event_params")

_ENDED: Final = {
    "session_completed": "completed",
    "session_failed": "failed",
    "session_canceled": "canceled",
}


def event_params(event: SessionEvent) -> dict[str, Any]:
    """Seed 002's `SessionEvent` notification params for one router event."""
    payload = dict(event.payload)
    payload.update(round=event.round, speaker=event.speaker, stopReason=event.stop_reason)
    params: dict[str, Any] = {
        "eventId": event.id,
        "sessionId": event.session_id,
        "eventType": event.event_type,
        "timestamp": event.created_at.isoformat(),
        "payload": payload,
    }
    if event.task_id is not None:
        params["taskId"] = event.task_id
    return params


@dataclass
class SessionRecord:
    """One session of one person, as far as the console has seen it."""

    session_id: str
    created_at: datetime
    goal: str = ""
    mode: str = ""
    participants: tuple[str, ...] = ()
    max_rounds: int = 0
    round: int = 0
    state: str = "created"
    """created (reserved, nothing sent) | submitted | running | completed | failed | canceled
    | refused (the gate refused the message)."""
    stop_reason: str | None = None
    task_id: str | None = None
    first_speaker: str | None = None
    error: dict[str, Any] | None = None
    user_id: str = ""
    orchestration: dict[str, Any] | None = None
    """An orchestrated session's settings (seed 000's names: `localAgent`, `sharedAgent`,
    `mode`, `maxTurns`, `maxDurationMs`, `maxFailures`, `maxTokensBudget`); None otherwise."""
    phase: str | None = None
    """An orchestrated session's state-machine state (`waiting_local`, `paused`, ...)."""
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Drafts awaiting the owner, by approval id: what ApproveAction may decide."""
    deciding: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Drafts the owner decided here whose decision the router has not told yet, by approval
    id: (decision, the control's envelope id). A second decision on one is refused at once."""
    decided: dict[str, str] = field(default_factory=dict)
    """Drafts the router told resolved, by approval id: the decision and who made it."""
    trace_ids: set[str] = field(default_factory=set)
    """The traces the person started in this session: the ids of the envelopes the console
    submitted for it (each a root). The trace tree shows these and no other."""
    delegation_limits: tuple[int, int] = (1200, 15_000)
    """A `delegate` session's constraints for each request: max tokens, deadline in ms."""
    delegations: dict[str, dict[str, Any]] = field(default_factory=dict)
    """A `delegate` session's requests by id: target, status (`pending` until answered or
    timed out), and the result seed 003 shows."""
    events: list[dict[str, Any]] = field(default_factory=list)
    task: TaskView = field(default_factory=TaskView)
    """A `task` session's state (seed 002 §7) and steps (actors/console/_task.py)."""
    _seen: set[str] = field(default_factory=set)

    def apply_all(self, event: SessionEvent) -> list[dict[str, Any]]:
        """Fold one event in, with the events it implies for a task (an approval resolved
        when its held step ends); the notification params of each, none if seen already."""
        params = self.apply(event)
        if params is None:
            return []
        told = [params]
        for event_type, payload in self.task.apply(event.event_type, dict(event.payload)):
            implied = SessionEvent(
                id=derive_id(event.id, event_type),
                created_at=event.created_at,
                session_id=event.session_id,
                task_id=event.task_id,
                event_type=event_type,  # type: ignore[arg-type]  # one of seed 002 §18's
                payload=payload,
            )
            if (more := self.apply(implied)) is not None:
                told.append(more)
        return told

    def apply(self, event: SessionEvent) -> dict[str, Any] | None:
        """Fold one event in; its notification params, or None if it was seen already."""
        if event.id in self._seen:
            return None
        self._seen.add(event.id)
        payload = event.payload
        if event.event_type == "session_created":
            self._opened(payload)
        if payload.get("orchestrated"):
            self._orchestrated(event)
        if event.round is not None:
            self.round = max(self.round, event.round)
        if event.event_type in _ENDED:
            self.state = _ENDED[event.event_type]
            self.stop_reason = event.stop_reason
        elif self.state in ("created", "submitted"):
            self.state = "running"
        params = event_params(event)
        if "taskId" not in params and self.task_id:  # seed 002 §13.1: each event names its task
            params["taskId"] = self.task_id
        self.events.append(params)
        return params

    def _opened(self, payload: dict[str, Any]) -> None:
        """An orchestrated session's `mode` field is its orchestration mode, its goal the
        objective: the console calls the session's kind `orchestrate`."""
        orchestrated = bool(payload.get("orchestrated"))
        self.goal = str(payload.get("objective" if orchestrated else "goal", self.goal))
        if self.mode != "task":  # the router runs a task as a single call
            self.mode = "orchestrate" if orchestrated else str(payload.get("mode", self.mode))
        self.participants = tuple(str(p) for p in payload.get("participants", ()))
        self.max_rounds = int(payload.get("max_rounds", self.max_rounds) or 0)
        if orchestrated:
            self.orchestration = {
                "localAgent": payload.get("local_agent"),
                "sharedAgent": payload.get("shared_agent"),
                "mode": payload.get("orchestration_mode"),
                "maxTurns": payload.get("max_turns"),
                "maxDurationMs": payload.get("max_duration_ms"),
                "maxFailures": payload.get("max_failures"),
                "maxTokensBudget": payload.get("max_tokens_budget"),
            }

    def _orchestrated(self, event: SessionEvent) -> None:
        payload = event.payload
        self.phase = str(payload.get("state", self.phase))
        approval_id = str(payload.get("approval_id", ""))
        if event.event_type == "approval_requested":
            self.pending[approval_id] = {
                "approvalId": approval_id,
                "draft": payload.get("draft", ""),
                "reasons": list(payload.get("reasons", ())),
                "round": event.round,
            }
        elif event.event_type == "approval_resolved":
            self.pending.pop(approval_id, None)
            self.deciding.pop(approval_id, None)
            by = payload.get("resolved_by") or event.speaker or "the owner"
            self.decided[approval_id] = f"{payload.get('decision', 'decided')} by {by}"
        elif event.event_type in _ENDED:
            self.pending.clear()

    def undecidable(self, approval_id: str) -> str | None:
        """Why a decision on `approval_id` may not be sent now (decided already, here or as
        the router told it, or never awaited), or None if it may."""
        if approval_id in self.decided:
            return f"approval {approval_id} was decided already ({self.decided[approval_id]})"
        if approval_id in self.deciding:
            decision, control_id = self.deciding[approval_id]
            return (
                f"approval {approval_id} was decided already: your '{decision}' was sent "
                f"(control {control_id}) and the router is applying it"
            )
        if approval_id not in self.pending:
            return f"no draft awaits approval {approval_id} in session {self.session_id}"
        return None

    def deciding_sent(self, approval_id: str, decision: str, control_id: str) -> None:
        """The owner's decision on a draft was submitted (ApproveAction)."""
        self.deciding[approval_id] = (decision, control_id)

    def control_refused(self, control_id: str) -> None:
        """The router refused a control: a decision it carried no longer stands in the way
        of another (a draft decided while paused may be decided again after Resume)."""
        for approval_id, (_, sent) in list(self.deciding.items()):
            if sent == control_id:
                del self.deciding[approval_id]

    def settle_delegation(self, request_id: str, result: dict[str, Any]) -> None:
        """One request answered (or timed out); the session ends with its last answer:
        `completed` when every one succeeded, else `failed`."""
        self.delegations[request_id] = result
        statuses = [d["status"] for d in self.delegations.values()]
        if "pending" not in statuses and self.state not in ("refused", *_ENDED.values()):
            self.state = "completed" if set(statuses) == {"success"} else "failed"

    def refuse(self, decision: Decision) -> None:
        """The gate refused the message that would have opened or steered this session."""
        self.error = {
            "code": str(decision.code or "UNAUTHORIZED"),
            "message": decision.message,
            "retryable": False,
            "details": {"sessionId": self.session_id, "rule": decision.rule},
        }
        # A refused delegation's error answer and the gate's decision come on two streams,
        # in either order: a session its answers failed is refused all the same.
        if self.state in ("created", "submitted") or (self.state == "failed" and self.delegations):
            self.state = "refused"

    def summary(self) -> dict[str, Any]:
        """The session without its events: a line of the sessions list; a `task` session's
        also has its seed 002 §7 state (`taskState`), its steps and the approvals awaited."""
        task = self.task.summary() if self.mode == "task" else {}
        return {
            **task,
            "sessionId": self.session_id,
            "taskId": self.task_id,
            "goal": self.goal,
            "mode": self.mode,
            "participants": list(self.participants),
            "round": self.round,
            "maxRounds": self.max_rounds,
            "state": self.state,
            "stopReason": self.stop_reason,
            "error": self.error,
            "orchestration": self.orchestration,
            "phase": self.phase,
            "pendingApprovals": list(self.pending.values()),
            "delegations": list(self.delegations.values()),
            "createdAt": self.created_at.isoformat(),
        }

    def state_of(self) -> dict[str, Any]:
        """GetSessionState's result: the summary and every event so far."""
        return {**self.summary(), "events": list(self.events)}
