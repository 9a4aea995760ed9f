"""A task session's state (seed 002 §7) and steps, folded from its timeline. Pure.

A task is a session in which one agent works on a person's objective with the tools its
bundle grants. Everything that makes it resumable is stored already, by the actors that own
each part: the router's session record (the call to the agent and its deadline), the agent
host's durable wait (each tool round, under ids derived from the call: a resumed task asks
for the same step ids again), the tool runtime's step records (each step runs at most once;
a held request waits in its record for its owner), all in JetStream KV, and the session's
timeline (PARLEY_EVENTS) on which the router and the gate tell every transition. So the
task's state is not a second store: it is what the timeline says, and this fold reads it.

The state is derived, never counted: a step (a tool request, a model call) is open from the
event that asks it to the event that ends it, and the state is the most waiting thing open
(an approval over a tool over a model call), unless the session was paused or has ended.
Events come from two publishers (the router and the gate) and may interleave in either
order; an end event for a step never seen opens nothing, and an ended session stays ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

__all__ = ("TERMINAL_STATES", "Implied", "TaskState", "TaskView")

TaskState = Literal[
    "SESSION_CREATED",
    "SESSION_RUNNING",
    "WAITING_FOR_LLM",
    "WAITING_FOR_APPROVAL",
    "WAITING_FOR_TOOL",
    "SESSION_PAUSED",
    "SESSION_COMPLETED",
    "SESSION_FAILED",
    "SESSION_CANCELLED",
]
Implied = list[tuple[str, dict[str, Any]]]
"""Events a fold step implies that no publisher tells: (event type, payload) each."""
TERMINAL_STATES: Final[dict[str, TaskState]] = {
    "session_completed": "SESSION_COMPLETED",
    "session_failed": "SESSION_FAILED",
    "session_canceled": "SESSION_CANCELLED",
}


@dataclass
class TaskView:
    """One task session's state and its steps, as far as its events have told them."""

    state: TaskState = "SESSION_CREATED"
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Every step by its id (the envelope id of the tool request or model call), in order:
    `stepId`, `stepKind` (`tool_call` or `llm_call`), `toolName`, `status`, and for a held
    one its `approval` (seed 002 §13.4's fields)."""
    paused: bool = False
    ended: bool = False

    def apply(self, event_type: str, payload: dict[str, Any]) -> Implied:
        """Fold one timeline event in. Returns the events it implies that no publisher
        tells (seed 002 §18's `approval_resolved` when a held step ends), each as (event
        type, payload)."""
        implied: Implied = []
        if event_type in TERMINAL_STATES:
            self.ended = True
            self.state = TERMINAL_STATES[event_type]
            return implied
        if event_type == "session_created":
            return implied  # reserved and opened: nothing runs yet
        if event_type == "session_paused":
            self.paused = True
        elif event_type == "session_resumed":
            self.paused = False
        elif event_type == "tool_requested":
            self._open(str(payload.get("call_id", "")), "tool_call", payload)
        elif event_type == "approval_requested":
            step = self._open(str(payload.get("approval_id", "")), "tool_call", payload)
            if step is not None:
                step["status"] = "awaiting_approval"
                step["approval"] = {
                    "approvalId": payload.get("approval_id"),
                    "title": payload.get("title", ""),
                    "actionSummary": payload.get("action_summary", ""),
                    "riskLevel": payload.get("risk_level", "medium"),
                    "details": payload.get("details", {}),
                }
        elif event_type == "tool_completed":
            implied = self._tool_ended(str(payload.get("call_id", "")), payload)
        elif event_type == "llm_request_started":
            self._open(str(payload.get("request_id", "")), "llm_call", payload)
        elif event_type == "llm_request_completed":
            step = self.steps.get(str(payload.get("request_id", "")))
            if step is not None:
                step["status"] = str(payload.get("status", "completed"))
        self._derive()
        return implied

    def _open(self, step_id: str, kind: str, payload: dict[str, Any]) -> dict[str, Any] | None:
        if not step_id or step_id in self.steps:
            return self.steps.get(step_id)
        refused = payload.get("status") == "refused"
        tool = payload.get("tool") or payload.get("details", {}).get("capability")
        step = {
            "stepId": step_id,
            "stepKind": kind,
            "toolName": tool if kind == "tool_call" else payload.get("model", ""),
            "summary": str(payload.get("task") or payload.get("action_summary") or ""),
            "status": "refused" if refused else "running",
        }
        if refused:
            step["reason"] = payload.get("reason", "")
        self.steps[step_id] = step
        return step

    def _tool_ended(self, step_id: str, payload: dict[str, Any]) -> Implied:
        step = self.steps.get(step_id)
        if step is None:
            return []
        held = step["status"] in ("awaiting_approval", "approval_decided")
        step["status"] = str(payload.get("status", "unknown"))
        if payload.get("reason"):
            step["reason"] = payload["reason"]
        if not held:
            return []
        reason = str(payload.get("reason", ""))
        refusals = ("APPROVAL_DENIED", "SESSION_EXPIRED")  # the second: its session ended first
        denied = step["status"] == "denied" and any(code in reason for code in refusals)
        undecided = "in time" in reason or "SESSION_EXPIRED" in reason  # nobody decided it
        decision = ("expired" if undecided else "rejected") if denied else "approved"
        step["approval"]["decision"] = decision
        return [("approval_resolved", {"approval_id": step_id, "decision": decision})]

    def decision_sent(self, step_id: str) -> bool:
        """The owner's decision on a held step was admitted by the gate: the step is no longer
        waiting for a person, only for the runtime. False if no such step awaits one."""
        step = self.steps.get(step_id)
        if step is None or step["status"] != "awaiting_approval":
            return False
        step["status"] = "approval_decided"
        self._derive()
        return True

    def awaiting(self) -> list[dict[str, Any]]:
        """The approvals still waiting for the owner."""
        return [s["approval"] for s in self.steps.values() if s["status"] == "awaiting_approval"]

    def _derive(self) -> None:
        if self.ended:
            return
        open_ = [s for s in self.steps.values() if s["status"] in _OPEN]
        kinds = {(s["stepKind"], s["status"]) for s in open_}
        if self.paused:
            self.state = "SESSION_PAUSED"
        elif ("tool_call", "awaiting_approval") in kinds:
            self.state = "WAITING_FOR_APPROVAL"
        elif any(kind == "tool_call" for kind, _ in kinds):
            self.state = "WAITING_FOR_TOOL"
        elif any(kind == "llm_call" for kind, _ in kinds):
            self.state = "WAITING_FOR_LLM"
        else:
            self.state = "SESSION_RUNNING"

    def summary(self) -> dict[str, Any]:
        return {
            "taskState": self.state,
            "steps": list(self.steps.values()),
            "awaitingApproval": self.awaiting(),
        }


_OPEN: Final = frozenset({"running", "requested", "awaiting_approval", "approval_decided"})
