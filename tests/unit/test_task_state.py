"""A task session's seed 002 §7 state, folded from its timeline (actors/console/_task.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from actors.console._task import TaskView
from actors.console._timeline import SessionRecord
from schemas import SessionEvent

T0 = datetime(2026, 11, 28, tzinfo=UTC)


def _event(n: int, event_type: str, **payload: Any) -> SessionEvent:
    return SessionEvent(
        id=f"evt-{n}",
        created_at=T0,
        session_id="s1",
        event_type=event_type,  # type: ignore[arg-type]  # the names under test
        payload=payload,
    )


def test_the_state_follows_what_the_task_waits_for() -> None:
    view = TaskView()
    seen = []
    steps: list[tuple[str, dict[str, Any]]] = [
        ("session_created", {}),
        ("session_started", {}),
        ("llm_request_started", {"request_id": "m1", "status": "requested"}),
        ("llm_request_completed", {"request_id": "m1", "status": "succeeded"}),
        ("tool_requested", {"call_id": "t1", "tool": "File.Read", "status": "requested"}),
        ("approval_requested", {"approval_id": "t2", "details": {"capability": "Shell.Exec"}}),
        ("tool_completed", {"call_id": "t1", "status": "succeeded"}),
        ("tool_completed", {"call_id": "t2", "status": "succeeded"}),
        ("session_paused", {}),
        ("session_resumed", {}),
        ("session_completed", {}),
        ("tool_requested", {"call_id": "late", "tool": "File.Read", "status": "requested"}),
    ]
    for event_type, payload in steps:
        view.apply(event_type, payload)
        seen.append(view.state)
    assert seen == [
        "SESSION_CREATED",
        "SESSION_RUNNING",
        "WAITING_FOR_LLM",
        "SESSION_RUNNING",
        "WAITING_FOR_TOOL",
        "WAITING_FOR_APPROVAL",  # an approval outranks the tool still running
        "WAITING_FOR_APPROVAL",
        "SESSION_RUNNING",
        "SESSION_PAUSED",
        "SESSION_RUNNING",
        "SESSION_COMPLETED",
        "SESSION_COMPLETED",  # an ended session stays ended
    ]
    # A step told after the end (the gate and the router publish apart) is still shown.
    assert [s["stepId"] for s in view.summary()["steps"]] == ["m1", "t1", "t2", "late"]


def test_failed_and_cancelled_end_a_task_and_a_stray_end_opens_nothing() -> None:
    failed, cancelled = TaskView(), TaskView()
    failed.apply("tool_completed", {"call_id": "never-asked", "status": "succeeded"})
    assert failed.steps == {}
    failed.apply("session_failed", {})
    cancelled.apply("session_canceled", {})
    assert (failed.state, cancelled.state) == ("SESSION_FAILED", "SESSION_CANCELLED")


def test_a_held_step_ends_with_its_approval_resolved_once() -> None:
    record = SessionRecord("s1", T0, mode="task")
    record.apply_all(_event(1, "session_started"))
    record.apply_all(
        _event(2, "approval_requested", approval_id="t1", title="gpt asks", risk_level="high")
    )
    assert record.summary()["taskState"] == "WAITING_FOR_APPROVAL"
    assert [a["approvalId"] for a in record.summary()["awaitingApproval"]] == ["t1"]
    assert record.task.decision_sent("t1")
    assert not record.task.decision_sent("t1")  # decided once
    assert record.summary()["taskState"] == "WAITING_FOR_TOOL"
    ended = _event(3, "tool_completed", call_id="t1", status="succeeded")
    told = record.apply_all(ended)
    assert [t["eventType"] for t in told] == ["tool_completed", "approval_resolved"]
    assert told[1]["payload"]["decision"] == "approved"
    assert record.apply_all(ended) == []  # the same event again tells nothing
    assert record.summary()["taskState"] == "SESSION_RUNNING"


def test_a_rejected_or_expired_step_resolves_as_such() -> None:
    for reason, decision in [
        ("APPROVAL_DENIED: rejected by person-alice", "rejected"),
        ("APPROVAL_DENIED: not decided in time", "expired"),
    ]:
        view = TaskView()
        view.apply("approval_requested", {"approval_id": "t1"})
        implied = view.apply(
            "tool_completed", {"call_id": "t1", "status": "denied", "reason": reason}
        )
        assert implied == [("approval_resolved", {"approval_id": "t1", "decision": decision})]


def test_only_a_task_session_shows_a_task_state() -> None:
    single = SessionRecord("s1", T0, mode="single")
    assert "taskState" not in single.summary()
    task = SessionRecord("s2", T0, mode="task")
    task.apply_all(_event(1, "session_created", mode="single", participants=["gpt"]))
    assert task.summary()["mode"] == "task"
    assert task.summary()["taskState"] == "SESSION_CREATED"
